"""The README and docs/ hold together: every relative link and `#anchor` resolves (GitHub's heading anchors), every
pointer at a docs page from code, scripts and configs names a page and heading that exist, and the README stays
short enough to read in five minutes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
POINTER = re.compile(r"\b((?:README|docs/[\w-]+)\.md)(#[\w-]+)?")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def without_code(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (links there are examples, not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to hyphens, a repeated
    heading numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for match in LINK.finditer(without_code(path.read_text(encoding="utf-8"))):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{path.relative_to(root)}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{path.relative_to(root)}: {target}: no heading with that anchor in {linked.name}")
    return problems


def test_every_relative_link_and_anchor_resolves():
    assert [p for path in markdown_files() for p in broken_links(path)] == []


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "training.md").write_text("# Training\n\n## Packed rows\n", encoding="utf-8")
    page = tmp_path / "docs" / "probe.md"
    page.write_text("# Probe\n\n[ok](#probe) [bad](#nowhere) [gone](missing.md) [rows](training.md#packed-rows)\n"
                    "[stale](training.md#packing) `[in code](nothing.md)`\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == [
        "docs/probe.md: #nowhere: no heading with that anchor in probe.md",
        "docs/probe.md: missing.md: no such file",
        "docs/probe.md: training.md#packing: no heading with that anchor in training.md"]


def test_anchors_follow_githubs_rule(tmp_path: Path):
    page = tmp_path / "p.md"
    page.write_text("# Set up: two commands\n## `scripts/demo.sh --full`: a miniature\n## Notes\n## Notes\n"
                    "```\n# not a heading\n```\n", encoding="utf-8")
    assert anchors(page) == {"set-up-two-commands", "scriptsdemosh---full-a-miniature", "notes", "notes-1"}


def test_pointers_from_code_name_pages_and_headings_that_exist():
    """A comment or help text that sends the reader to README.md or docs/PAGE.md#anchor finds it there."""
    tracked = subprocess.run(["git", "ls-files", "gbtrain", "scripts", "configs", "recipes", "eval", "data_builders",
                              "tests", ".ci"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    problems = []
    for name in tracked:
        path = ROOT / name
        if name == "tests/test_docs.py":  # its own examples
            continue
        if path.suffix not in {".py", ".sh", ".yaml", ".txt", ""} or not path.is_file():
            continue
        for line_no, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for page, anchor in POINTER.findall(line):
                target = ROOT / page
                if not target.exists():
                    problems.append(f"{name}:{line_no}: {page}: no such page")
                elif anchor and anchor[1:] not in anchors(target):
                    problems.append(f"{name}:{line_no}: {page}{anchor}: no such heading")
    assert problems == []


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move details into docs/"


def stage_modules(folder: Path) -> set[str]:
    """The modules of a stage folder as the docs name them: `name` for name.py, `name/` for a subpackage."""
    return ({p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
            | {f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()})


def architecture_table(text: str) -> dict[str, set[str]]:
    """docs/architecture.md's stage table: stage folder (`` for core) -> the modules its row names."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            folder = re.match(r"`([a-z_]+)/`", cells[1])
            rows[folder.group(1) if folder else ""] = set(re.findall(r"`([a-z_]+/?)`", cells[2]))
    return rows


def map_differences(package: Path, text: str) -> list[str]:
    """Where the table and the package's docstrings differ from the tree."""
    table, problems = architecture_table(text), []
    stages = {"": package, **{p.name: p for p in package.iterdir() if (p / "__init__.py").is_file()}}
    for name, folder in sorted(stages.items()):
        actual, named = stage_modules(folder), table.get(name)
        if name and not (package / name).is_dir():
            continue
        if named is None:
            problems.append(f"stage {name or 'core'} has no row in docs/architecture.md")
            continue
        if name == "":
            actual = {m for m in actual if not m.endswith("/")}
        problems += [f"docs/architecture.md: {name or 'core'} row misses {m}" for m in sorted(actual - named)]
        problems += [f"docs/architecture.md: {name or 'core'} row names {m}, which is not there"
                     for m in sorted(named - actual)]
        if name:
            doc = (folder / "__init__.py").read_text(encoding="utf-8")
            problems += [f"{folder.name}/__init__.py: its docstring misses {m}" for m in sorted(actual)
                         if f"``{m.rstrip('/')}``" not in doc]
    problems += [f"docs/architecture.md names stage {name}/, which is not there" for name in table
                 if name and not (package / name).is_dir()]
    return problems


def test_the_architecture_table_and_package_docstrings_match_the_tree():
    assert map_differences(ROOT / "gbtrain", (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")) == []


def test_a_module_missing_from_the_map_is_named(tmp_path: Path):
    package = tmp_path / "gbtrain"
    (package / "data").mkdir(parents=True)
    for path in ("__init__.py", "coords.py", "data/__init__.py", "data/reader.py", "data/extra.py"):
        (package / path).write_text('"""``reader``"""\n' if path == "data/__init__.py" else "")
    text = "| # | stage | modules | what |\n|---|---|---|---|\n| 0 | core | `coords` | x |\n" \
           "| 1 | `data/` | `reader`, `gone` | y |\n"
    assert map_differences(package, text) == [
        "docs/architecture.md: data row misses extra", "docs/architecture.md: data row names gone, which is not there",
        "data/__init__.py: its docstring misses extra"]
