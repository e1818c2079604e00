"""The layout by stage holds: a module of gbtrain imports only from its own stage and the stages before it (imports
inside functions included), and no two modules import each other, directly or through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The pipeline's order (gbtrain/__init__.py says what each stage holds); a top-level module is core.
STAGES = ("core", "data", "train", "inference", "metric", "evaluation", "grading", "miniature")
# The synthetic generator is one source of pages among others: only it and the miniatures (tiny models taught to
# read its handwriting) may import it, so real data never depends on how fake pages are made.
GENERATOR = "gbtrain.data.synth"
MAY_IMPORT_GENERATOR = (GENERATOR, "gbtrain.miniature")


def module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str:
    """`gbtrain.data.synth.render` -> data; `gbtrain.coords` -> core."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in STAGES else "core"


def gbtrain_imports(path: Path, package_root: Path) -> list[tuple[int, str]]:
    """(line, module) of every gbtrain import in a file, at any depth; `from gbtrain.x import y` counts as
    gbtrain.x.y when that is a module (a submodule import), else as gbtrain.x."""
    modules = {module_name(p, package_root) for p in package_root.rglob("*.py")}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == package_root.name]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == package_root.name:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((node.lineno, sub if sub in modules else node.module))
    return found


def layering_violations(package_root: Path) -> list[str]:
    """`file:line: module (stage) imports target (a later stage)` for every upward import."""
    problems = []
    for path in sorted(package_root.rglob("*.py")):
        mine = stage_of(module_name(path, package_root))
        for line, target in gbtrain_imports(path, package_root):
            theirs = stage_of(target)
            if STAGES.index(theirs) > STAGES.index(mine):
                problems.append(f"{path.relative_to(package_root.parent)}:{line}: a {mine} module imports "
                                f"{target} ({theirs}, a later stage)")
    return problems


def import_cycles(package_root: Path) -> list[list[str]]:
    """Cycles in the graph of gbtrain modules importing gbtrain modules (a package counts as its __init__)."""
    graph = {module_name(p, package_root): {t for _, t in gbtrain_imports(p, package_root)}
             for p in package_root.rglob("*.py")}
    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append([*trail[trail.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return cycles


def generator_imports(package_root: Path) -> list[str]:
    """`file:line: module imports target` for every import of the synthetic generator outside MAY_IMPORT_GENERATOR."""
    problems = []
    for path in sorted(package_root.rglob("*.py")):
        mine = module_name(path, package_root)
        if mine.startswith(MAY_IMPORT_GENERATOR):
            continue
        problems += [f"{path.relative_to(package_root.parent)}:{line}: {mine} imports {target} (the synthetic "
                     f"generator)" for line, target in gbtrain_imports(path, package_root)
                     if target == GENERATOR or target.startswith(GENERATOR + ".")]
    return problems


def test_real_data_code_never_imports_the_generator():
    assert generator_imports(ROOT / "gbtrain") == []


def test_every_stage_imports_only_earlier_stages():
    assert layering_violations(ROOT / "gbtrain") == []


def test_no_import_cycles():
    assert import_cycles(ROOT / "gbtrain") == []


def test_every_module_belongs_to_a_stage_folder_or_core():
    """The stage folders are exactly the stages after core: a new folder is a new stage, placed in STAGES."""
    folders = {p.name for p in (ROOT / "gbtrain").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(STAGES[1:])


@pytest.fixture
def fake_package(tmp_path: Path) -> Path:
    """A package shaped like gbtrain: a core module, a data and a metric module."""
    root = tmp_path / "gbtrain"
    for folder in ("data", "metric"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "coords.py").write_text("X = 1\n")
    (root / "metric" / "scoring.py").write_text("from gbtrain.coords import X\nfrom gbtrain.data import reader\n")
    (root / "data" / "reader.py").write_text("from gbtrain.coords import X\n\n\ndef f():\n"
                                             "    from gbtrain.metric.scoring import score\n")
    return root


def test_an_upward_import_inside_a_function_is_named_with_its_line(fake_package: Path):
    assert layering_violations(fake_package) == [
        "gbtrain/data/reader.py:5: a data module imports gbtrain.metric.scoring (metric, a later stage)"]


def test_an_import_of_the_generator_outside_it_is_named(fake_package: Path):
    (fake_package / "data" / "synth").mkdir()
    (fake_package / "data" / "synth" / "__init__.py").write_text("")
    (fake_package / "data" / "synth" / "generate.py").write_text("from gbtrain.coords import X\n")
    (fake_package / "metric" / "scoring.py").write_text("from gbtrain.data.synth.generate import write_page\n")
    assert generator_imports(fake_package) == [
        "gbtrain/metric/scoring.py:1: gbtrain.metric.scoring imports gbtrain.data.synth.generate (the synthetic "
        "generator)"]


def test_a_submodule_imported_from_its_package_counts_and_a_cycle_is_found(fake_package: Path):
    (fake_package / "data" / "reader.py").write_text("from gbtrain.metric import scoring\n")
    assert layering_violations(fake_package) == [
        "gbtrain/data/reader.py:1: a data module imports gbtrain.metric.scoring (metric, a later stage)"]
    assert import_cycles(fake_package) == [["gbtrain.data.reader", "gbtrain.metric.scoring", "gbtrain.data.reader"]]
