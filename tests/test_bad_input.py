"""The bad-input corpus of issue 11: every entry script fed what a careless user, a broken disk, a hostile model
or an attacker gives it, each case checked for the exact outcome.

Each case runs its script in this process (``runpy``, so torch and transformers load once) with its own
sandbox folder as working directory, and ends in one outcome class:

- clear: the expected exit code; for a refusal, stderr ends in one line ``prog: ...`` (or a headline with an
  indented list of the problems) matching the case's pattern, which names the input and the way out;
  for a run that must go on (exit 0), the written result counts the bad item as the case says;
- unclear: the right kind of ending (refused, no traceback) but another exit code or a message that does not
  say what the case asks for;
- silent: exit 0 where a refusal was due, or a wrong result;
- traceback: an exception escaped the script;
- hang: the case ran past its time limit;
- escaped: something outside the case's declared output changed (the sandbox's inputs, a sentinel folder beside
  it, the shared tiny model / data fixtures, /tmp), or a credential reached the console or a written file.

Every case is one test asserting "clear". The counts of all classes are printed at the end of the session
(``counts_table``, from tests/conftest.py, which gathers them from every pytest-xdist worker):

    .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_bad_input.py

(or ``.venv/bin/python tests/test_bad_input.py``, which runs the same).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import CORPUS_OUTCOME, TEST_MAX_PIXELS, TEST_MIN_PIXELS, ChatEndpoint

ROOT = Path(__file__).resolve().parents[1]
PROBE = "gbtrain-escape-probe"  # no file of this name may appear in /tmp
SECRET = "sk-LEAKED-4242"
RO = r"/ro(/\S*)?: (Permission denied|Operation not permitted)"  # an output in a read-only folder
A_FILE = r"/f\.txt(/\S*)?: (File exists|Not a directory)"  # an output folder that is a file
OVERLAP = r"(--out|output_dir) \S+ (is|lies inside|holds) \S+ \S+: choose another"  # an output over an input
# work in an output folder that no record of the tool vouches for (never reused, never deleted)
NOT_VOUCHED = r"holds \S+.* that no readable \S+ of {tool} vouches for: choose another --out \(--overwrite discards"
CLASSES = ("clear", "unclear", "silent", "traceback", "hang", "escaped")
# The time limit of the hostile-reply cases: a guard against a scorer that hangs, not a speed target (that is
# scripts/bench_score.py's: 1.26 s for all of them, measured 2026-11-30). The quadratic scanner of 2026-11-30 took
# 11.7 s on 2,000-deep nesting alone; with two test workers on the two cores, 2 s was exceeded (2026-12-01).
HOSTILE_S = 10.0


# ----------------------------------------------------------------------------------------------- the cases
@dataclass
class Env:
    """Where one case runs: its sandbox (the working directory) and the shared read-only fixtures."""

    box: Path
    outside: Path
    fixtures: dict[str, Path]
    url: str
    read_only: list[Path] = field(default_factory=list)

    def sub(self, text: str) -> str:
        """Fill {box}, {outside}, {url} and the fixture names in a command-line argument."""
        names = {"box": self.box, "outside": self.outside, "url": self.url,
                 "cred_url": self.url.replace("//", f"//user:{SECRET}@", 1),
                 "cred_at_url": self.url.replace("//", f"//user:p@{SECRET}@", 1), **self.fixtures}
        for key, value in names.items():
            text = text.replace("{" + key + "}", str(value))
        return text


@dataclass
class Case:
    """One bad input: the script, its arguments ({box} etc. filled in), what to prepare, and the outcome due."""

    name: str
    script: str
    args: list[str]
    message: str = ""  # regex the refusal must match (code != 0)
    code: int = 2
    setup: Callable[[Env], None] | None = None
    outputs: tuple[str, ...] = ("out",)  # sandbox paths that may change
    check: Callable[[Env, str], str | None] | None = None  # what is wrong after the run (code 0, or a refusal), or None
    limit_s: float = 60.0
    env: dict[str, str] = field(default_factory=dict)  # environment variables of this case ({box} etc. filled in)
    file_size_limit: int | None = None  # bytes: run in a process of its own whose files cannot grow past this (a
    # disk that fills up: a write past it fails with EFBIG, as one on a full disk fails with ENOSPC)

    @property
    def id(self) -> str:
        return f"{Path(self.script).stem}-{self.name}"


def chain(*steps: Callable[[Env], None]) -> Callable[[Env], None]:
    def setup(env: Env) -> None:
        for step in steps:
            step(env)
    return setup


def replace_file(path: Path, data: bytes | str) -> None:
    """Write a new file (unlinked first: a sandbox copy of a fixture may hard-link its large files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def link_tree(src: Path, dst: Path) -> None:
    """A copy of a fixture folder whose large files are hard links (never written in place: see replace_file)."""
    def link(s, d):
        if Path(s).suffix in (".jpg", ".png", ".arrow", ".safetensors"):
            try:
                return os.link(s, d)
            except OSError:
                pass
        return shutil.copy2(s, d)
    shutil.copytree(src, dst, copy_function=link)


def read_only(env: Env, rel: str) -> None:
    """Make box/rel an existing folder that cannot be written, even by root (chattr +i where chmod is ignored)."""
    path = env.box / rel
    path.mkdir(parents=True, exist_ok=True)
    env.read_only.append(path)
    path.chmod(0o555)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    with contextlib.suppress(OSError):
        (path / "probe").touch()
        raise RuntimeError(f"cannot make {path} read-only on this machine")


def release(env: Env) -> None:
    """Make the case's read-only folders writable again (pytest removes the sandbox later)."""
    for path in env.read_only:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
        path.chmod(0o755)


# ----------------------------------------------------------------------------------------------- data helpers
@lru_cache(maxsize=32)
def records(data: str, level: str):
    from gbtrain.data.annotations import load_level

    return load_level(data, level).records


def truth(record, coords: str = "qwen25", budget=None) -> str:
    from gbtrain.coords import PixelBudget
    from gbtrain.data.conversations import answer_items

    return json.dumps(answer_items(record, coords, budget or PixelBudget()), ensure_ascii=False)


def mini_data(env: Env, name: str = "data", counts: dict[str, int] | None = None) -> Path:
    """box/name: the first records of each level of the synthetic data (images copied: a tool may write them)."""
    from gbtrain.data.annotations import annotation_path, image_path, record_to_raw

    src, dst = env.fixtures["synth"], env.box / name
    for level, n in (counts or {"L1": 3, "L2": 3, "L3": 1}).items():
        recs = records(str(src), level)[:n]
        replace_file(annotation_path(dst, level), json.dumps([record_to_raw(r) for r in recs], ensure_ascii=False))
        for r in recs:
            target = image_path(dst, r)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(image_path(src, r), target)
    return dst


def data(counts: dict[str, int] | None = None, name: str = "data") -> Callable[[Env], None]:
    return lambda env: mini_data(env, name, counts)


def edit_level(level: str, edit: Callable[[list], None], name: str = "data") -> Callable[[Env], None]:
    """Change the raw record list of one level of box/name (made by `data`)."""
    def setup(env: Env) -> None:
        path = env.box / name / "annotations" / f"{level}.json"
        raw = json.loads(path.read_text(encoding="utf-8"))
        edit(raw)
        replace_file(path, json.dumps(raw, ensure_ascii=False))
    return setup


def edit_record(level: str, index: int, edit: Callable[[dict], None]) -> Callable[[Env], None]:
    return edit_level(level, lambda raw: edit(raw[index]))


def set_key(key: str, value) -> Callable[[dict], None]:
    """An edit of a raw record: `marks.0.attributes.hand` style paths."""
    def edit(raw: dict) -> None:
        *parents, last = key.split(".")
        node = raw
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return edit


def drop_key(key: str) -> Callable[[dict], None]:
    return lambda raw: raw.pop(key)


def sized_image(level: str, index: int, width: int, height: int) -> Callable[[Env], None]:
    """Record `index`'s image replaced by a blank one of width x height, and its annotation's size with it (its
    boxes scaled into it)."""
    def setup(env: Env) -> None:
        from PIL import Image

        path = image_of(env, level, index)
        Image.new("RGB", (width, height), "white").save(path)

        def resize(raw: dict) -> None:
            sx, sy = width / raw["width"], height / raw["height"]
            raw["width"], raw["height"] = width, height
            for mark in raw["marks"]:  # four corner points, as the synthetic pages write them
                mark["bbox_2d"] = [[x * sx, y * sy] for x, y in mark["bbox_2d"]]
        edit_record(level, index, resize)(env)
    return setup


def image_of(env: Env, level: str = "L1", index: int = 0, name: str = "data") -> Path:
    path = env.box / name / "annotations" / f"{level}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))[index]
    return env.box / name / "images" / level / raw["image"]


def damage_image(kind: str, level: str = "L1", index: int = 0) -> Callable[[Env], None]:
    """Replace one record's image: truncated, garbled, random bytes, a decompression-bomb header, or gone."""
    def setup(env: Env) -> None:
        path = image_of(env, level, index)
        original = path.read_bytes()
        if kind == "truncated":
            replace_file(path, original[: len(original) // 2])
        elif kind == "broken-stream":  # header and end marker intact, compressed data garbled
            third = len(original) // 3
            replace_file(path, original[:third] + bytes(range(256)) * 8 + original[third + 2048:])
        elif kind == "cut-marked":  # cut short, an end marker appended
            replace_file(path, original[:600] + b"\xff\xd9")
        elif kind == "garbage":
            replace_file(path, os.urandom(4096))
        elif kind == "empty":
            replace_file(path, b"")
        elif kind == "bomb":
            replace_file(path, bomb_png())
        elif kind == "text":
            replace_file(path, "this is not an image\n")
        elif kind == "missing":
            path.unlink()
        elif kind == "symlink-out":
            env.outside.joinpath("secret.jpg").write_bytes(original)
            path.unlink()
            path.symlink_to(env.outside / "secret.jpg")
    return setup


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG whose header claims width x height pixels and whose data is 64 bytes: at the default 10 Gpx, Pillow
    refuses it as a decompression bomb; below its limit, only decoding finds the data missing."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def write(rel: str, text: str | bytes) -> Callable[[Env], None]:
    return lambda env: replace_file(env.box / rel, env.sub(text) if isinstance(text, str) else text)


def make_dir(rel: str) -> Callable[[Env], None]:
    return lambda env: (env.box / rel).mkdir(parents=True, exist_ok=True)


def copy_fixture(name: str, rel: str, skip: tuple[str, ...] = ()) -> Callable[[Env], None]:
    def setup(env: Env) -> None:
        link_tree(env.fixtures[name], env.box / rel)
        for s in skip:
            target = env.box / rel / s
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    return setup


def full_copy(name: str, rel: str) -> Callable[[Env], None]:
    return lambda env: shutil.copytree(env.fixtures[name], env.box / rel)


# ----------------------------------------------------------------------------------------------- result checks
def dotted(obj, key: str):
    for part in key.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def report_has(rel: str, **expected) -> Callable[[Env, str], str | None]:
    """The JSON file box/rel has these values: keys are paths with __ for dots (settings__L1_af__fp is
    settings -> L1-af -> fp: a setting's name has hyphens); a callable value is a predicate."""
    def path_of(key: str) -> str:
        parts = key.split("__")
        if parts[0] == "settings" and len(parts) > 2:
            parts[1] = parts[1].replace("_", "-")
        return ".".join(parts)

    def check(env: Env, _stdout: str) -> str | None:
        path = env.box / rel
        if not path.is_file():
            return f"{rel} was not written"
        doc = json.loads(path.read_text(encoding="utf-8"))
        for key, want in expected.items():
            try:
                got = dotted(doc, path_of(key))
            except (KeyError, IndexError, TypeError):
                return f"{rel} has no {key}"
            if not (want(got) if callable(want) else got == want):
                return f"{rel} {key} = {got!r}"
        return None
    return check


def exists(*rels: str) -> Callable[[Env, str], str | None]:
    def check(env: Env, _stdout: str) -> str | None:
        missing = [r for r in rels if not (env.box / r).exists()]
        return f"not written: {missing}" if missing else None
    return check


def gone(*rels: str) -> Callable[[Env, str], str | None]:
    """After a refusal: none of box/rels is left (a half-written output removed)."""
    def check(env: Env, _stdout: str) -> str | None:
        left = [r for r in rels if (env.box / r).exists()]
        return f"left behind: {left}" if left else None
    return check


def all_of(*checks: Callable[[Env, str], str | None]) -> Callable[[Env, str], str | None]:
    def check(env: Env, stdout: str) -> str | None:
        return next((p for c in checks if (p := c(env, stdout)) is not None), None)
    return check


def unwritable_out_cases(script: str, args: Callable[..., list[str]], setup: Callable[[Env], None]) -> list[Case]:
    """An --out that cannot be a folder of the tool's: a file, inside a read-only folder, an empty name."""
    return [
        Case("out-a-file", script, args(out="{box}/f.txt"), A_FILE, setup=chain(setup, write("f.txt", "x")),
             outputs=()),
        Case("out-read-only", script, args(out="{box}/ro/out"), RO,
             setup=chain(setup, lambda env: read_only(env, "ro")), outputs=()),
        Case("out-empty-name", script, args(out=""), r"--out is empty: name the output folder", setup=setup,
             outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- eval/score.py
SCORE = "eval/score.py"


def score_args(*extra: str, level: str = "L1", mode: str = "answer-based", data: str = "{synth}") -> list[str]:
    return ["--data", data, "--level", level, "--mode", mode, "--predictions", "{box}/p.jsonl", "--coords", "qwen25",
            "--out", "{box}/out/report.json", *extra]


def predictions(*lines: Callable[[list], str | bytes], level: str = "L1", data_name: str | None = None):
    """box/p.jsonl: one line per function of the level's records (from the shared data, or box/data_name)."""
    def setup(env: Env) -> None:
        recs = records(str(env.box / data_name if data_name else env.fixtures["synth"]), level)
        parts = [line(recs) for line in lines]
        replace_file(env.box / "p.jsonl", b"".join((p if isinstance(p, bytes) else p.encode()) + b"\n" for p in parts))
    return setup


def good(i: int) -> Callable[[list], str]:
    return lambda recs: json.dumps({"id": recs[i].record_id, "response": truth(recs[i])}, ensure_ascii=False)


def reply(i: int, response) -> Callable[[list], str]:
    return lambda recs: json.dumps({"id": recs[i].record_id, "response": response}, ensure_ascii=False)


def raw_line(text: str | bytes) -> Callable[[list], str | bytes]:
    return lambda recs: text


def items_with(i: int, **changes) -> Callable[[list], str]:
    """Record i's true answer with each item's fields replaced (values as JSON text, so NaN and 1e999 stay)."""
    def line(recs) -> str:
        items = json.loads(truth(recs[i]))
        body = ", ".join("{" + ", ".join(f"{json.dumps(k)}: {changes[k] if k in changes else json.dumps(v)}"
                                         for k, v in item.items()) + "}" for item in items)
        return json.dumps({"id": recs[i].record_id, "response": f"[{body}]"})
    return line


def unparsable(n: int, reason: str | None = None) -> Callable[[Env, str], str | None]:
    expected = {"coverage__unparsable": n}
    if reason:
        expected["parse_failures"] = lambda got: got.get(reason, 0) >= 1
    return report_has("out/report.json", **expected)


def score_cases() -> list[Case]:
    ok = predictions(good(0), good(1))
    undecided = predictions(items_with(0, answer='"sixty-three degrees"'), good(1))
    cases = [
        # options: ranges, NaN, unknown names
        *[Case(f"radius-{v}", SCORE, score_args(f"--match-radius={v}"), r"match radius .*positive", setup=ok)
          for v in ("nan", "0", "-1", "inf", "-inf")],
        Case("min-pixels-0", SCORE, score_args("--min-pixels", "0"), r"--min-pixels 0: must be at least 1",
             setup=ok),
        Case("min-pixels-negative", SCORE, score_args("--min-pixels", "-5"), r"--min-pixels -5: must be at least 1",
             setup=ok),
        Case("max-pixels-0", SCORE, score_args("--max-pixels", "0"), r"--max-pixels 0: must be at least 1", setup=ok),

        Case("min-over-max", SCORE, score_args("--min-pixels", "90000", "--max-pixels", "1000"),
             r"min_pixels <= max_pixels.*90000", setup=ok),
        Case("pixels-not-a-number", SCORE, score_args("--min-pixels", "lots"), r"--min-pixels: invalid int", setup=ok),
        Case("unknown-judge", SCORE, score_args("--judge", "gpt4"), r"judge 'gpt4' must be rule, vllm:MODEL", setup=ok),
        Case("judge-without-model", SCORE, score_args("--judge", "vllm:"), r"judge 'vllm:' must be", setup=ok),
        Case("judge-hf-kind", SCORE, score_args("--judge", "hf:model"), r"judge 'hf:model' must be", setup=ok),
        Case("kv-cache-nan", SCORE, score_args("--kv-cache-gib", "nan"), r"kv_cache_gib must be positive", setup=ok),
        Case("gpu-util-0", SCORE, score_args("--gpu-memory-utilization", "0"), r"gpu_memory_utilization", setup=ok),
        Case("gpu-util-2", SCORE, score_args("--gpu-memory-utilization", "2"), r"gpu_memory_utilization", setup=ok),
        Case("unknown-level", SCORE, score_args(level="L4"), r"--level: invalid choice: 'L4'", setup=ok),
        Case("unknown-mode", SCORE, score_args(mode="free"), r"--mode: invalid choice: 'free'", setup=ok),
        Case("unknown-coords", SCORE, [*score_args()[:-4], "--coords", "pixels", "--out", "{box}/out/r.json"],
             r"--coords: invalid choice: 'pixels'", setup=ok),
        # missing and unreadable inputs
        Case("predictions-missing", SCORE, score_args(), r"/p\.jsonl: No such file or directory"),
        Case("predictions-a-folder", SCORE, score_args(), r"/p\.jsonl: Is a directory", setup=make_dir("p.jsonl")),
        Case("data-missing", SCORE, score_args(data="{box}/nodata"), r"data directory not found: \S+/nodata"),
        Case("data-a-file", SCORE, score_args(data="{box}/f.txt"), r"data directory not found: \S+/f\.txt",
             setup=write("f.txt", "x")),
        Case("level-empty", SCORE, score_args(data="{box}/data"), r"L1\.json holds no records",
             setup=chain(data(), write("data/annotations/L1.json", "[]"), write("p.jsonl", "")), outputs=()),
        Case("data-without-annotations", SCORE, score_args(data="{box}/empty"), r"L1\.json.*not found",
             setup=chain(ok, make_dir("empty"))),
        # malformed prediction files: refused with file and line (documented exit 2)
        Case("malformed-line", SCORE, score_args(), r"p\.jsonl:2: malformed JSON line",
             setup=predictions(good(0), raw_line('{"id": "x", "response": '), good(1))),
        Case("line-not-an-object", SCORE, score_args(), r"p\.jsonl:1: a prediction line needs an \"id\"",
             setup=predictions(raw_line("[1, 2, 3]"))),
        Case("line-without-id", SCORE, score_args(), r"p\.jsonl:1: a prediction line needs an \"id\"",
             setup=predictions(raw_line('{"response": "[]"}'))),
        Case("id-null", SCORE, score_args(), r"p\.jsonl:1: \"id\" must be a record id .*got null",
             setup=predictions(raw_line('{"id": null, "response": ""}'))),
        Case("id-a-list", SCORE, score_args(), r"p\.jsonl:1: \"id\" must be a record id .*got \[1\]",
             setup=predictions(raw_line('{"id": [1], "response": ""}'))),
        Case("duplicated-ids", SCORE, score_args(), r"1 duplicated id\(s\).*--allow-duplicates",
             setup=predictions(good(0), good(0))),
        Case("deeply-nested-line", SCORE, score_args(), r"p\.jsonl:1: malformed JSON line",
             setup=predictions(raw_line('{"id": "x", "response": ' + "[" * 100_000 + "]" * 100_000 + "}"))),
        Case("401-digit-id", SCORE, score_args(), code=0, check=report_has("out/report.json", coverage__unexpected=1),
             setup=predictions(good(0), raw_line('{"id": ' + "9" * 401 + ', "response": ""}'))),
        Case("huge-integer-line", SCORE, score_args(), r"p\.jsonl:2: malformed JSON line",
             setup=predictions(good(0), raw_line('{"id": "z", "response": "", "n": ' + "9" * 5000 + "}"))),
        Case("bom-first-line", SCORE, score_args(), code=0, check=report_has("out/report.json", coverage__missing=126),
             setup=predictions(lambda recs: "\ufeff" + good(0)(recs))),
        Case("allow-duplicates", SCORE, score_args("--allow-duplicates"), code=0,
             check=report_has("out/report.json", coverage__duplicate=1), setup=predictions(good(0), good(0))),
        Case("empty-file", SCORE, score_args(), code=0, check=report_has("out/report.json", coverage__missing=127,
                                                                          accuracy=0.0), setup=write("p.jsonl", "")),
        # hostile model output inside a line: the run goes on, the line is counted as unparsable with its reason
        Case("hostile-10mb-brackets", SCORE, score_args(), code=0, check=unparsable(1, "too_large"), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, "[" * 10_000_000))),
        Case("hostile-10mb-text", SCORE, score_args(), code=0, check=unparsable(1, "too_large"), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, "x" * 10_000_000))),
        Case("hostile-10mb-quotes", SCORE, score_args(), code=0, check=unparsable(1, "too_large"), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, '"' * 10_000_000))),
        Case("hostile-800k-mixed", SCORE, score_args(), code=0, check=unparsable(1), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, "[{\"a\": '" * 100_000))),
        Case("hostile-1mb-brackets", SCORE, score_args(), code=0, check=unparsable(1), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, "[" * 999_000))),
        Case("hostile-1mb-nested-items", SCORE, score_args(), code=0, limit_s=HOSTILE_S,
             check=report_has("out/report.json", coverage__unparsable=0),
             setup=predictions(good(0), reply(1, "[" + ", ".join(['{"bbox_2d": [1, 2, 3, 4], "text": "[{x"}'] * 20_000)
                                              + "]"))),
        Case("hostile-deep-lists", SCORE, score_args(), code=0, check=unparsable(1, "too_deep"), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, "[" * 50_000 + "]" * 50_000))),
        Case("hostile-deep-objects", SCORE, score_args(), code=0, check=unparsable(1, "too_deep"), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, '{"a": ' * 20_000 + "1" + "}" * 20_000))),
        Case("hostile-think-flood", SCORE, score_args(), code=0, check=unparsable(1), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, "<think>" * 100_000))),
        Case("hostile-fence-flood", SCORE, score_args(), code=0, check=unparsable(1), limit_s=HOSTILE_S,
             setup=predictions(good(0), reply(1, "```json\n" * 100_000))),
        Case("hostile-1e999999999-answer", SCORE, score_args(mode="answer-free"), code=0, limit_s=HOSTILE_S,
             # a number too large to compute exactly: undecided (failed and counted), not read as another value
             check=report_has("out/report.json", coverage__unparsable=0, answer_gate__undecided=lambda n: n >= 1),
             setup=predictions(items_with(0, answer='"1e999999999"'), items_with(1, answer="1e999999999"))),
        # a box no pixel can be: the item counts as having no valid box (name, bbox_2d, time limit)
        *[Case(f"hostile-{name}-box", SCORE, score_args(), code=0, limit_s=limit_s,
               check=report_has("out/report.json", coverage__no_valid_box=lambda n: n >= 1),
               setup=predictions(items_with(0, bbox_2d=box)))
          for name, box, limit_s in (("401-digit", "[" + "9" * 401 + ", 0, 5, 5]", HOSTILE_S),
                                     ("1e999", "[1e999, 0, 5, 5]", HOSTILE_S),
                                     ("nan", "[NaN, NaN, 5, 5]", 60.0),
                                     ("infinity", "[-Infinity, 0, Infinity, 5]", 60.0),
                                     ("string", '["a", "b", "c", "d"]', 60.0))],
        Case("hostile-wrong-types", SCORE, score_args(), code=0,
             check=report_has("out/report.json", localized=lambda v: v < 0.02),
             setup=predictions(items_with(0, bbox_2d="{}", text="[1]", answer="{}", correctness='"maybe"'))),
        Case("hostile-non-utf8-bytes", SCORE, score_args(), code=0, check=unparsable(1),
             setup=predictions(good(0), lambda recs: b'{"id": "' + recs[1].record_id.encode()
                               + b'", "response": "\xff\xfe[{\xc3"}')),
        Case("hostile-lone-surrogate-id", SCORE, score_args(), code=0,
             check=report_has("out/report.json", coverage__unexpected=1),
             setup=predictions(good(0), raw_line('{"id": "bad\\ud800id", "response": ""}'))),
        Case("response-a-number", SCORE, score_args(), code=0, check=unparsable(1), setup=predictions(reply(0, 12345))),
        Case("response-null", SCORE, score_args(), code=0, check=unparsable(1, "empty"),
             setup=predictions(reply(0, None))),
        Case("response-a-list", SCORE, score_args(), code=0, check=report_has("out/report.json", coverage__unparsable=0,
             localized=lambda v: v > 0), setup=predictions(lambda recs: json.dumps(
                 {"id": recs[0].record_id, "response": json.loads(truth(recs[0]))}))),
        # output that cannot be written
        Case("out-read-only", SCORE, [*score_args()[:-1], "{box}/ro/report.json"], RO,
             setup=chain(ok, lambda env: read_only(env, "ro")), outputs=()),
        Case("out-a-folder", SCORE, [*score_args()[:-1], "{box}/out"], r"out.*(Is a directory|folder)",
             setup=chain(ok, make_dir("out"))),
        Case("out-disk-full", SCORE, [*score_args()[:-1], "{box}/full/report.json"], r"report\.json.*(No space|too "
             r"large)", setup=ok, outputs=("full",), file_size_limit=4096),
        # an output never over an input, a teacher's file or another tool's (nothing in the box changes)
        Case("out-is-the-annotations", SCORE, [*score_args(data="{box}/data")[:-1], "{box}/data/annotations/L1.json"],
             r"--out \S+/L1\.json lies inside --data \S+/data, which score\.py reads", setup=chain(data(), ok),
             outputs=()),
        Case("out-is-the-predictions", SCORE, [*score_args()[:-1], "{box}/p.jsonl"],
             r"--out \S+/p\.jsonl is --predictions", setup=ok, outputs=()),
        Case("out-over-an-evaluation-report", SCORE, [*score_args()[:-1], "{box}/ev/report.json"],
             r"ev/report\.json exists and is not a file score\.py wrote: choose another --out",
             setup=chain(ok, write("ev/report.json", '{"meta": {"model": "m"}, "settings": {}, "table2": {}}')),
             outputs=()),
        Case("out-beside-a-users-table", SCORE, [*score_args()[:-1], "{box}/mine.json"],
             r"mine\.questions\.csv exists and is not a file score\.py wrote", outputs=(),
             setup=chain(ok, write("mine.questions.csv", "student,my notes\nann,check again\n"))),
        # annotations (their own data folder)
        Case("annotation-id-null", SCORE, score_args(data="{box}/data"), r"L1\.json \[record None\]: id must be",
             setup=chain(data(), edit_record("L1", 1, set_key("id", None)), ok)),
        Case("annotation-hand-a-list", SCORE, score_args(data="{box}/data"), r"attributes\.hand must be text",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.attributes.hand", ["4"])), ok)),
        Case("annotation-score-above-full", SCORE, score_args(data="{box}/data"),
             r"L1\.json \[record \S+\]: group \S+: score 12 is outside 0\.\.10 \(its full_score\)",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.attributes.full_score", 10)),
                         edit_record("L1", 0, set_key("marks.0.attributes.score", 12)), ok)),
        Case("annotation-score-without-full-score", SCORE, score_args(data="{box}/data"),
             r"L1\.json \[record \S+\]: group \S+: score without full_score: add full_score",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.attributes.full_score", None)),
                         edit_record("L1", 0, set_key("marks.0.attributes.score", 3)), ok)),
        Case("annotation-score-a-string", SCORE, score_args(data="{box}/data"),
             r"mark 0 attributes\.full_score must be a number of points, got str '10'",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.attributes.full_score", "10")), ok)),
        Case("point-bands-decreasing", SCORE, score_args("--point-bands", "0.9,0.5"),
             r"--point-bands 0\.9,0\.5: give increasing shares of the full score", setup=ok),
        Case("large-error-0", SCORE, score_args("--large-error", "0"), r"--large-error 0\.0: give a share", setup=ok),
        Case("bomb-image-lenient", SCORE, score_args("--lenient", data="{box}/data"), code=0,
             check=report_has("out/report.json", n_records=2),
             setup=chain(data(), damage_image("bomb", "L1", 2), ok)),
        Case("bomb-image", SCORE, score_args(data="{box}/data"), r"decompression bomb|exceeds limit",
             setup=chain(data(), damage_image("bomb", "L1", 2), ok)),
        # an LLM judge at an endpoint that refuses, and credentials in its URL
        # (an LLM judge is asked only what the typed rule cannot decide: record 0's text reference, "63°")
        Case("judge-endpoint-401", SCORE, score_args("--judge", "openai:auth@{url}", mode="answer-free"),
             r"judge openai:auth@http://127\.0\.0\.1:\d+/v1: .*answered 401 .*API key", setup=undecided),
        Case("judge-credentials-redacted", SCORE,
             score_args("--judge", "openai:yes@" + "{cred_url}", mode="answer-free"),
             code=0, check=report_has("out/report.json", settings__judge=lambda j: SECRET not in j,
                                      answer_gate__by_judge=1), setup=undecided),
        # a judge's reply that repeats the key: counted unclear, its example kept without the key (every written
        # file and the console are searched for it)
        Case("judge-reply-echoes-the-key", SCORE, score_args("--judge", "openai:echo-key-reply@{url}",
                                                             mode="answer-free"),
             code=0, env={"OPENAI_API_KEY": SECRET}, setup=undecided,
             check=report_has("out/report.json", judge_replies__unclear=1,
                              judge_replies__unclear_examples=lambda e: "Bearer ***" in e[0]["reply"])),
        Case("judge-401-credentials", SCORE,
             score_args("--judge", "openai:auth@" + "{cred_url}", mode="answer-free"),
             r"judge openai:auth@http://127\.0\.0\.1:\d+/v1: .*answered 401", setup=undecided),
        # an output over an input, however it is named (round four)
        Case("out-a-link-to-the-predictions", SCORE, [*score_args()[:-1], "{box}/r.json"],
             r"--out \S+/r\.json is --predictions \S+/p\.jsonl, which score\.py reads",
             setup=chain(ok, lambda env: (env.box / "r.json").symlink_to(env.box / "p.jsonl")), outputs=()),
        Case("out-a-hard-link-to-a-users-file", SCORE, [*score_args()[:-1], "{box}/r.json"],
             r"\S+/r\.json exists and is not a file score\.py wrote",
             setup=chain(ok, write("notes.json", '{"mine": 1}'),
                         lambda env: os.link(env.box / "notes.json", env.box / "r.json")), outputs=()),
        Case("out-inside-the-data", SCORE, [*score_args(data="{box}/data")[:-1], "{box}/data/images/r.json"],
             r"--out \S+/data/images/r\.json lies inside --data \S+/data, which score\.py reads",
             setup=chain(data(), predictions(good(0), data_name="data")), outputs=()),
        Case("out-through-dotdot", SCORE, [*score_args(data="{box}/data")[:-1],
                                           "{box}/data/images/../annotations/L1.json"],
             r"lies inside --data \S+/data, which score\.py reads",
             setup=chain(data(), predictions(good(0), data_name="data")), outputs=()),
        Case("out-table-is-the-predictions", SCORE, [*score_args()[:-6], "--predictions", "{box}/r.questions.csv",
                                                     "--coords", "qwen25", "--out", "{box}/r.json"],
             r"--out \S+/r\.questions\.csv is --predictions \S+/r\.questions\.csv, which score\.py reads",
             setup=chain(ok, lambda env: (env.box / "p.jsonl").rename(env.box / "r.questions.csv")), outputs=()),
        Case("out-inside-the-build", SCORE, [*score_args()[:-1], "{sft}/contents.json", "--build", "{sft}",
                                             "--split", "test"],
             r"--out \S+/contents\.json (is|lies inside) --build \S+, which score\.py reads", setup=ok, outputs=()),
        Case("out-empty", SCORE, [*score_args()[:-1], ""], r"--out is empty|--out '': ", setup=ok, outputs=()),
        # answers a reply makes long: each read in time linear in its length (round four)
        *[Case(f"hostile-answer-{name}", SCORE, score_args(mode="answer-free"), code=0, limit_s=HOSTILE_S,
               check=report_has("out/report.json", n_groups=lambda n: n > 0),
               setup=predictions(items_with(0, answer=json.dumps(answer)), good(1)))
          for name, answer in (("prefix-900k", "答：" * 450_000 + "5"), ("equals-900k", "x=" * 450_000 + "5"),
                               ("units-900k", "5" + " cm" * 300_000), ("numerals-900k", "三" * 900_000),
                               ("spaces-900k", "5" + " " * 900_000 + "5"), ("percent-900k", "%" * 900_000),
                               ("digits-900k", "9" * 900_000), ("fraction-900k", "1/" * 450_000 + "2"))],
        Case("hostile-text-900k-cjk", SCORE, score_args(), code=0, limit_s=HOSTILE_S,
             check=report_has("out/report.json", n_groups=lambda n: n > 0),
             setup=predictions(items_with(0, text=json.dumps("字" * 900_000)), good(1))),
        *[Case(f"answer-tolerance-{name}", SCORE, score_args("--answer-tolerance", value),
               r"--answer-tolerance .*: give a relative difference from 0 \(exact\) to below 1", setup=ok, outputs=())
          for name, value in (("1", "1"), ("negative", "-0.05"), ("nan", "nan"), ("inf", "inf"))],
        # flags that would be taken and change nothing, or score nothing
        Case("no-rule-first-with-the-rule-judge", SCORE, score_args("--no-rule-first"),
             r"--no-rule-first asks an LLM judge every answer, but --judge is rule", setup=ok, outputs=()),
        Case("no-rule-first-rule-judge-named", SCORE, score_args("--no-rule-first", "--judge", "rule"),
             r"--no-rule-first .* --judge is rule", setup=ok, outputs=()),
        Case("ignore-missing-nothing-answered", SCORE, score_args("--ignore-missing"),
             r"--ignore-missing: none of the \d+ records has a reply with items \(\d+ missing, 0 unparsable\)",
             setup=predictions(), outputs=()),
        Case("ignore-missing-all-unparsable", SCORE, score_args("--ignore-missing"),
             r"--ignore-missing: none of the \d+ records has a reply with items \(\d+ missing, 2 unparsable\)",
             setup=predictions(reply(0, "I cannot read it"), reply(1, "no idea")), outputs=()),
        Case("ignore-missing-ids-of-another-level", SCORE, score_args("--ignore-missing", level="L2"),
             r"--ignore-missing: none of the \d+ records .*check the predictions' ids", setup=ok, outputs=()),
    ]
    return cases


# ----------------------------------------------------------------------------------------------- eval/agreement.py
AGREEMENT = "eval/agreement.py"
TEACHER_LINES = ('{"submission": "Ann Lee", "question": "1", "score": 7, "full_score": 10}\n'
                 '{"submission": "Ann Lee", "question": "2", "score": 2, "full_score": 4}\n')


def agreement_args(*extra: str, out: str = "{box}/out/report.json") -> list[str]:
    return ["--teacher", "{box}/t.jsonl", "--model", "{box}/m.jsonl", "--out", out, *extra]


def scores(*lines: str, teacher: str | bytes = TEACHER_LINES) -> Callable[[Env], None]:
    """box/t.jsonl (the teachers') and box/m.jsonl, one model line per (question, score as JSON text)."""
    model = "".join(line + "\n" for line in lines)
    return chain(write("t.jsonl", teacher), write("m.jsonl", model))


def score_line(question: str, score: str, submission: str = "Ann Lee") -> str:
    return f'{{"submission": "{submission}", "question": "{question}", "score": {score}}}'


def nameless(env: Env, _stdout: str) -> str | None:
    text = (env.box / "out/report.json").read_text(encoding="utf-8")
    return "a submission's name in the report" if "Ann" in text or "Lee" in text else None


def agreement_cases() -> list[Case]:
    ok = scores(score_line("1", "6"), score_line("2", "2"))
    return [
        Case("ids-mismatch", AGREEMENT, agreement_args(), r"1 of the 2 question\(s\) of \S+/t\.jsonl have no score in "
             r"\S+/m\.jsonl \(first: submission 'Ann Lee' question '2'\).*--allow-missing",
             setup=scores(score_line("1", "6"))),
        Case("unexpected-id", AGREEMENT, agreement_args(), r"1 score\(s\) of \S+/m\.jsonl are for no question of "
             r"\S+/t\.jsonl \(first: submission 'Bo' question '1'\).*--allow-missing",
             setup=scores(score_line("1", "6"), score_line("2", "2"), score_line("1", "3", "Bo"))),
        Case("allow-missing", AGREEMENT, agreement_args("--allow-missing"), code=0,
             check=all_of(report_has("out/report.json", points__coverage__missing=1, points__coverage__unexpected=1),
                          nameless),
             setup=scores(score_line("1", "6"), score_line("3", "1", "Bo"))),
        Case("duplicate-score", AGREEMENT, agreement_args(), r"m\.jsonl: 1 keys are scored more than once .*"
             r"--allow-duplicates", setup=scores(score_line("1", "6"), score_line("1", "5"), score_line("2", "2"))),
        Case("allow-duplicates", AGREEMENT, agreement_args("--allow-duplicates"), code=0,
             check=report_has("out/report.json", points__coverage__duplicate=1, points__model__mae=0.5),
             setup=scores(score_line("1", "5"), score_line("1", "6"), score_line("2", "2"))),
        *[Case(f"model-score-{name}", AGREEMENT, agreement_args(), code=0,
               check=all_of(report_has("out/report.json", points__coverage__out_of_range=1), nameless),
               setup=scores(score_line("1", value), score_line("2", "2")), limit_s=HOSTILE_S)
          for name, value in (("nan", "NaN"), ("1e999", "1e999"), ("401-digit", "9" * 401), ("negative", "-1"),
                              ("above-full", "11"), ("a-word", '"seven"'), ("null", "null"), ("a-list", "[7]"),
                              ("10mb-string", '"' + "7" * 10_000_000 + '"'))],
        Case("model-line-without-score", AGREEMENT, agreement_args(),
             r"m\.jsonl:1: a line needs 'submission', 'question', 'score'", setup=scores('{"submission": "Ann Lee", '
                                                                                        '"question": "1"}')),
        Case("model-malformed-line", AGREEMENT, agreement_args(), r"m\.jsonl:2: malformed JSON line",
             setup=scores(score_line("1", "6"), '{"submission": ')),
        Case("teacher-score-above-full", AGREEMENT, agreement_args(), r"t\.jsonl:1: score 12 is outside 0\.\.10",
             setup=scores(score_line("1", "6"), teacher='{"submission": "a", "question": "1", "score": 12, '
                                                        '"full_score": 10}\n')),
        Case("teacher-full-score-0", AGREEMENT, agreement_args(), r"t\.jsonl:1: full_score 0 must be above 0",
             setup=scores(score_line("1", "0"), teacher='{"submission": "a", "question": "1", "score": 0, '
                                                        '"full_score": 0}\n')),
        Case("teacher-score-nan", AGREEMENT, agreement_args(), r"t\.jsonl:1: \"score\" must be a finite number",
             setup=scores(score_line("1", "6"), teacher='{"submission": "a", "question": "1", "score": NaN, '
                                                        '"full_score": 10}\n')),
        Case("teacher-misspelled-key", AGREEMENT, agreement_args(),
             r"t\.jsonl:1: unknown key 'socre_2' \(did you mean 'score_2'\?\)",
             setup=scores(score_line("1", "6"), teacher='{"submission": "a", "question": "1", "score": 1, '
                                                        '"full_score": 10, "socre_2": 3}\n')),
        Case("teacher-graded-twice", AGREEMENT, agreement_args(), r"t\.jsonl:2: submission 'a' question '1' is graded "
             r"twice", setup=scores(score_line("1", "6"), teacher='{"submission": "a", "question": "1", "score": 1, '
                                                                   '"full_score": 10}\n' * 2)),
        Case("teacher-not-utf8", AGREEMENT, agreement_args(), r"t\.jsonl: not UTF-8 text",
             setup=scores(score_line("1", "6"), teacher=b'{"submission": "\xff", "question": "1"}\n')),
        Case("teacher-empty", AGREEMENT, agreement_args(), r"t\.jsonl: no teacher scores",
             setup=scores(score_line("1", "6"), teacher="")),
        Case("teacher-missing", AGREEMENT, agreement_args(), r"/t\.jsonl: No such file or directory",
             setup=write("m.jsonl", score_line("1", "6") + "\n")),
        Case("bands-not-increasing", AGREEMENT, agreement_args("--point-bands", "0.9,0.5"),
             r"--point-bands 0\.9,0\.5: give increasing shares", setup=ok),
        Case("bands-not-numbers", AGREEMENT, agreement_args("--point-bands", "low,high"),
             r"--point-bands 'low,high': give increasing shares", setup=ok),
        Case("large-error-nan", AGREEMENT, agreement_args("--large-error", "nan"), r"--large-error nan: give a share",
             setup=ok),
        Case("out-is-the-teacher-file", AGREEMENT, agreement_args(out="{box}/t.jsonl"),
             r"--out \S+/t\.jsonl is --teacher \S+: choose another --out", setup=ok, outputs=()),
        Case("out-a-folder", AGREEMENT, agreement_args(out="{box}/out"), r"out.*(Is a directory|folder)",
             setup=chain(ok, make_dir("out"))),
        Case("out-read-only", AGREEMENT, agreement_args(out="{box}/ro/report.json"), RO,
             setup=chain(ok, lambda env: read_only(env, "ro")), outputs=()),
        Case("out-empty-name", AGREEMENT, agreement_args(out=""), r"--out is empty: name the report file", setup=ok,
             outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- eval/run_eval.py
RUN_EVAL = "eval/run_eval.py"
EVAL_BASE = {"--model": "ok", "--backend": "openai", "--base-url": "{url}", "--data": "{synth}", "--out": "{box}/out",
             "--coords": "qwen25", "--settings": "L1-af", "--limit": "2", "--overlays": "1",
             "--min-pixels": str(TEST_MIN_PIXELS), "--max-pixels": str(TEST_MAX_PIXELS)}


def option_args(base: dict[str, str], flags: tuple[str, ...], opts: dict[str, str | None]) -> list[str]:
    """A tool's arguments: `base` with options changed (key min_pixels -> --min-pixels; None drops it), then
    `flags`."""
    merged = dict(base)
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            merged.pop(flag, None)
        else:
            merged[flag] = value
    return [x for kv in merged.items() for x in kv] + list(flags)


def eval_args(*flags: str, **opts: str | None) -> list[str]:
    """run_eval's arguments: EVAL_BASE with options changed (option_args)."""
    return option_args(EVAL_BASE, flags, opts)


def earlier_run(changes: dict | None = None, edit: Callable[[dict], None] | None = None, data_rel: str | None = None):
    """box/out as an earlier evaluation left it: run.json (made with EVAL_BASE plus `changes`) and one line."""
    def setup(env: Env) -> None:
        from gbtrain.coords import PixelBudget
        from gbtrain.evaluation.run import EvalRun, run_identity
        from gbtrain.outputs import claim_output_folder

        opts = {k[2:].replace("-", "_"): env.sub(v) for k, v in EVAL_BASE.items()} | (changes or {})
        if data_rel:
            opts["data"] = str(env.box / data_rel)
        run = EvalRun(**{k: int(v) if k in ("limit", "overlays", "min_pixels", "max_pixels") else v
                         for k, v in opts.items()})
        identity = run_identity(run, run.coords, PixelBudget(run.min_pixels, run.max_pixels))
        if edit:
            edit(identity)
        claim_output_folder(env.box / "out", identity, overwrite=False)
        rid = records(run.data, "L1")[0].record_id
        replace_file(env.box / "out" / "predictions" / "L1-af.jsonl", json.dumps({"id": rid, "response": "[]"}) + "\n")
    return setup


def hold_lock(env: Env) -> None:
    import fcntl

    (env.box / "out").mkdir()
    held = open(env.box / "out" / ".lock", "a+")  # noqa: SIM115 - held until the case ends
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held.write("pid 4242")
    held.flush()
    _HELD.append(held)


_HELD: list = []  # locks held by a case's setup, released when it ends


def eval_cases() -> list[Case]:
    id_escape = "x/" + "../" * 12 + "outside/" + PROBE
    tmp_escape = "y/" + "../" * 40 + "tmp/" + PROBE
    cred_url = "{cred_url}"
    report = "out/report.json"
    return [
        # options
        *[Case(f"option-{flag}-{v}", RUN_EVAL, eval_args(**{flag: v}),
               rf"--{flag.replace('_', '-')} {re.escape(v)}(\.0)?: must be at least", outputs=())
          for flag, v in (("limit", "0"), ("limit", "-3"), ("batch_size", "0"), ("max_tokens", "0"),
                          ("max_tokens", "-1"), ("min_pixels", "0"), ("max_pixels", "-1"), ("concurrency", "0"),
                          ("overlays", "-1"), ("tensor_parallel_size", "0"), ("data_parallel_size", "0"),
                          ("max_model_len", "0"), ("kv_cache_gib", "nan"), ("kv_cache_gib", "-1"),
                          ("kv_cache_gib", "inf"))],
        Case("min-over-max", RUN_EVAL, eval_args(min_pixels="90000", max_pixels="1000"), r"min_pixels <= max_pixels",
             outputs=()),
        Case("gpu-util-0", RUN_EVAL, eval_args(gpu_memory_utilization="0"), r"gpu_memory_utilization", outputs=()),
        Case("no-rule-first-with-the-rule-judge", RUN_EVAL, eval_args("--no-rule-first"),
             r"--no-rule-first asks an LLM judge every answer, but --judge is rule", outputs=()),
        Case("gpu-util-nan", RUN_EVAL, eval_args(gpu_memory_utilization="nan"), r"gpu_memory_utilization", outputs=()),
        Case("limit-not-a-number", RUN_EVAL, eval_args(limit="all"), r"--limit: invalid int value", outputs=()),
        Case("unknown-backend", RUN_EVAL, eval_args(backend="tgi"), r"--backend: invalid choice: 'tgi'", outputs=()),
        Case("unknown-setting", RUN_EVAL, eval_args(settings="L4-af"), r"unknown setting 'L4-af'", outputs=()),
        Case("unknown-mode-setting", RUN_EVAL, eval_args(settings="L1-xx"), r"unknown setting 'L1-xx'", outputs=()),
        Case("path-as-setting", RUN_EVAL, eval_args(settings="../../x"), r"unknown setting '\.\./\.\./x'", outputs=()),
        Case("no-setting", RUN_EVAL, eval_args(settings=","), r"--settings.*no setting", outputs=()),
        Case("unknown-coords", RUN_EVAL, eval_args(coords="pixels"),
             r"--coords 'pixels': unknown coordinate convention; choose one of", outputs=()),
        Case("unknown-judge", RUN_EVAL, eval_args(judge="gpt4"), r"judge 'gpt4' must be", outputs=()),
        # inputs
        Case("data-missing", RUN_EVAL, eval_args(data="{box}/nodata"), r"data directory not found: .*nodata",
             outputs=()),
        Case("data-a-file", RUN_EVAL, eval_args(data="{box}/f.txt"), r"data directory not found: .*f\.txt",
             setup=write("f.txt", "x"), outputs=()),
        Case("data-without-annotations", RUN_EVAL, eval_args(data="{box}/data"), r"L1\.json: annotation file not found",
             setup=make_dir("data")),
        Case("data-no-records", RUN_EVAL, eval_args(data="{box}/data"), r"data.*no L1 records",
             setup=chain(data(), write("data/annotations/L1.json", "[]"))),
        Case("model-folder-missing", RUN_EVAL, eval_args(model="{box}/nomodel", backend="hf"),
             r"model not found: .*nomodel", outputs=()),
        Case("model-not-a-model", RUN_EVAL, eval_args(model="{box}/data", backend="hf"),
             r"box/data\. Can't instantiate a processor", setup=data()),
        Case("model-needs-coords", RUN_EVAL, eval_args(model="{box}/mystery", backend="vllm", coords=None),
             r"cannot tell the coordinate convention of '\S+/mystery'; pass --coords",
             setup=write("mystery/config.json", '{"model_type": "mystery"}'), outputs=()),
        Case("model-hub-offline", RUN_EVAL, eval_args(model="org/mystery", backend="vllm", coords=None),
             r"model org/mystery is not in the Hugging Face cache \(.*\) and HF_HUB_OFFLINE is set: download it "
             r"first \(hf download org/mystery\)", outputs=()),
        Case("model-bad-checkpoint-record", RUN_EVAL, eval_args(model="{box}/m", backend="hf", coords=None),
             r"gbtrain_checkpoint\.json: not a gbtrain checkpoint record",
             setup=write("m/gbtrain_checkpoint.json", '{"coords": "qwen25"}')),
        Case("model-config-not-json", RUN_EVAL, eval_args(model="{box}/m", backend="hf", coords=None),
             r"m/config\.json", setup=write("m/config.json", "{not json")),
        Case("model-config-a-list", RUN_EVAL, eval_args(model="{box}/m", backend="hf", coords=None),
             r"m/config\.json", setup=write("m/config.json", "[1, 2]")),
        # annotations and images (a data folder of their own)
        *[Case(f"image-{kind}", RUN_EVAL, eval_args(data="{box}/data"), rf"L1\.json \[record \S+\]: {msg}",
               setup=chain(data(), damage_image(kind)))
          for kind, msg in (("truncated", "image .* is truncated"), ("garbage", "cannot read image"),
                            ("broken-stream", "cannot read image .*broken data stream"),
                            ("cut-marked", "cannot read image .*(truncated|Truncated)"),
                            ("empty", "cannot read image"), ("bomb", "cannot read image .*(bomb|exceeds)"),
                            ("text", "cannot read image"), ("missing", "image file not found"),
                            ("symlink-out", "image path .* leaves"))],
        Case("annotation-not-json", RUN_EVAL, eval_args(data="{box}/data"), r"L1\.json: malformed JSON",
             setup=chain(data(), write("data/annotations/L1.json", "[{"))),
        Case("annotation-not-utf8", RUN_EVAL, eval_args(data="{box}/data"), r"L1\.json: malformed JSON",
             setup=chain(data(), write("data/annotations/L1.json", b'[{"id": "\xff"}]'))),
        Case("annotation-an-object", RUN_EVAL, eval_args(data="{box}/data"), r"L1\.json: expected a list of records",
             setup=chain(data(), write("data/annotations/L1.json", '{"records": []}'))),
        Case("annotation-duplicated-id", RUN_EVAL, eval_args(data="{box}/data"), r"duplicate record id",
             setup=chain(data(), edit_record("L1", 1, set_key("id", "p00000_q1")))),
        Case("annotation-lone-surrogate-id", RUN_EVAL, eval_args(data="{box}/data"),
             r"\[record p\\ud800q\]: id .* is not valid Unicode text",
             setup=chain(data(), lambda env: replace_file(
                 env.box / "data/annotations/L1.json",
                 (env.box / "data/annotations/L1.json").read_text().replace('"p00000_q1"', '"p\\ud800q"', 1)))),
        Case("annotation-width-a-string", RUN_EVAL, eval_args(data="{box}/data"), r"width/height must be positive",
             setup=chain(data(), edit_record("L1", 0, set_key("width", "577")))),
        Case("annotation-marks-null", RUN_EVAL, eval_args(data="{box}/data"), r"marks must be a list",
             setup=chain(data(), edit_record("L1", 0, set_key("marks", None)))),
        Case("annotation-bbox-null", RUN_EVAL, eval_args(data="{box}/data"), r"mark 0: bbox_2d must be a non-empty",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.bbox_2d", None)))),
        Case("annotation-bbox-nan", RUN_EVAL, eval_args(data="{box}/data"), r"non-finite coordinate",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.bbox_2d", [float("nan"), 0, 5, 5])))),
        Case("annotation-level-l9", RUN_EVAL, eval_args(data="{box}/data"), r"record level 'L9' found in the L1",
             setup=chain(data(), edit_record("L1", 0, set_key("level", "L9")))),
        Case("annotation-image-traversal", RUN_EVAL, eval_args(data="{box}/data"), r"image path .* without '\.\.'",
             setup=chain(data(), edit_record("L1", 0, set_key("image", "../../../outside/secret.jpg")))),
        Case("annotation-image-absolute", RUN_EVAL, eval_args(data="{box}/data"), r"image path '/etc/hostname'",
             setup=chain(data(), edit_record("L1", 0, set_key("image", "/etc/hostname")))),
        Case("annotation-std-an-object", RUN_EVAL, eval_args(data="{box}/data"), r"attributes\.std must be text",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.attributes.std", {"a": 1})))),
        # ids that would become paths outside --out
        Case("id-climbs-out", RUN_EVAL, eval_args(data="{box}/data"), code=0,
             check=all_of(exists(report), lambda env, _: None if list((env.box / "out/overlays").glob("L1-af_*.png"))
                          else "no overlay written"),
             setup=chain(data(), edit_record("L1", 0, set_key("id", id_escape)))),
        Case("id-reaches-tmp", RUN_EVAL, eval_args(data="{box}/data"), code=0, check=exists(report),
             setup=chain(data(), edit_record("L1", 0, set_key("id", tmp_escape)))),
        Case("id-absolute", RUN_EVAL, eval_args(data="{box}/data"), code=0, check=exists(report),
             setup=chain(data(), edit_record("L1", 0, set_key("id", f"/tmp/{PROBE}")))),
        Case("id-nul-and-newline", RUN_EVAL, eval_args(data="{box}/data"), code=0, check=exists(report),
             setup=chain(data(), edit_record("L1", 0, set_key("id", "a\u0000b\nc")))),
        # output folders
        Case("out-a-file", RUN_EVAL, eval_args(out="{box}/f.txt"), A_FILE,
             setup=write("f.txt", "x"), outputs=()),
        Case("out-read-only", RUN_EVAL, eval_args(out="{box}/ro"), RO,
             setup=lambda env: read_only(env, "ro"), outputs=()),
        Case("out-is-data", RUN_EVAL, eval_args(data="{box}/data", out="{box}/data"), OVERLAP,
             setup=data(), outputs=()),
        Case("out-holds-data", RUN_EVAL, eval_args(data="{box}/out/data"), OVERLAP, setup=data(name="out/data"),
             outputs=()),
        Case("out-busy", RUN_EVAL, eval_args(), r"in use by another evaluation \(pid 4242\).*another --out",
             setup=hold_lock),
        Case("out-empty-name", RUN_EVAL, eval_args(out=""), r"--out", outputs=()),
        # reruns made otherwise: refused, the way out named
        Case("rerun-other-model", RUN_EVAL, eval_args(), r"made otherwise \(model: 'other' there, 'ok' now\).*"
             r"--overwrite", setup=earlier_run({"model": "other"})),
        Case("rerun-other-backend-url", RUN_EVAL, eval_args(), r"made otherwise \(base_url: .*--overwrite",
             setup=earlier_run({"base_url": "http://127.0.0.1:9/v1"})),
        Case("rerun-other-coords", RUN_EVAL, eval_args(), r"made otherwise \(coords: 'rel1000' there",
             setup=earlier_run({"coords": "rel1000"})),
        Case("rerun-other-pixels", RUN_EVAL, eval_args(), r"made otherwise \(max_pixels: 50176 there",
             setup=earlier_run({"max_pixels": 50176})),
        Case("rerun-other-max-tokens", RUN_EVAL, eval_args(), r"made otherwise \(max_tokens: 100 there",
             setup=earlier_run({"max_tokens": 100})),
        Case("rerun-other-structured", RUN_EVAL, eval_args(), r"made otherwise \(structured: True there",
             setup=earlier_run({"structured": True})),
        Case("rerun-other-prompt", RUN_EVAL, eval_args(), r"made otherwise \(prompt_hash: 'old' there",
             setup=earlier_run(edit=lambda ident: ident.update(prompt_hash="old"))),
        Case("rerun-other-annotations", RUN_EVAL, eval_args(data="{box}/data"), r"made otherwise \(annotations_sha256",
             setup=chain(data(), earlier_run(data_rel="data"), edit_record("L1", 0, set_key("subject", "Art")))),
        Case("rerun-other-model-overwrite", RUN_EVAL, eval_args("--overwrite"), code=0,
             check=report_has("out/run.json", model="ok"), setup=earlier_run({"model": "other"})),
        Case("rerun-bigger-limit", RUN_EVAL, eval_args(limit="3"), code=0,
             check=report_has(report, settings__L1_af__coverage__missing=0, meta__limit=3), setup=earlier_run()),
        Case("run-record-not-json", RUN_EVAL, eval_args(), NOT_VOUCHED.format(tool="run_eval"),
             setup=chain(earlier_run(), write("out/run.json", "{half"))),
        Case("run-record-a-list", RUN_EVAL, eval_args(), NOT_VOUCHED.format(tool="run_eval"),
             setup=chain(earlier_run(), write("out/run.json", "[]"))),
        # --overwrite discards only what a record of the same tool vouches for: a broken record vouches for nothing
        Case("run-record-broken-overwrite", RUN_EVAL, eval_args("--overwrite"), NOT_VOUCHED.format(tool="run_eval"),
             setup=chain(earlier_run(), write("out/run.json", "[]")), outputs=("out/.lock",)),
        Case("run-record-without-predictions", RUN_EVAL, eval_args(), code=0, check=exists(report),
             setup=write("out/run.json", '{"model": "another"}')),
        Case("predictions-torn-middle", RUN_EVAL, eval_args(), r"L1-af\.jsonl.*--overwrite",
             setup=chain(earlier_run(), lambda env: replace_file(
                 env.box / "out/predictions/L1-af.jsonl",
                 '{"id": "p00000_q1", "resp\n{"id": "p00000_q2", "response": "[]"}\n'))),
        Case("predictions-not-utf8", RUN_EVAL, eval_args(), code=0, check=exists(report),
             setup=chain(earlier_run(), write("out/predictions/L1-af.jsonl",
                                              b'{"id": "p00000_q1", "response": "\xff\xfe"}\n'))),
        # the endpoint: refusals, errors, hostile replies, credentials
        Case("endpoint-refuses-one", RUN_EVAL, eval_args(model="refuse-second", limit="3"), code=0,
             check=report_has(report, settings__L1_af__generation_errors__count=1)),
        Case("endpoint-refuses-all", RUN_EVAL, eval_args(model="refuse"), code=0,
             check=report_has(report, settings__L1_af__generation_errors__count=2)),
        Case("endpoint-refuses-three-turn", RUN_EVAL, eval_args("--three-turn", model="refuse"), code=0,
             check=report_has(report, settings__L1_af_3t__generation_errors__count=2)),
        Case("endpoint-401", RUN_EVAL, eval_args(model="auth"), r"endpoint http://127\.0\.0\.1:\d+/v1 answered 401 "
             r".*API key"),
        Case("endpoint-404-model", RUN_EVAL, eval_args(model="missing"), r"endpoint .* answered 404 .*model name"),
        Case("endpoint-401-credentials", RUN_EVAL, eval_args(model="auth", base_url=cred_url),
             r"endpoint http://127\.0\.0\.1:\d+/v1 answered 401"),
        Case("endpoint-credentials-ok", RUN_EVAL, eval_args(base_url=cred_url), code=0,
             check=report_has("out/run.json", base_url=lambda u: "user" not in u)),
        # secrets: an endpoint that echoes the key, a key in the URL's query, a password holding an unencoded @
        # (run.json, report.*, predictions and the console are searched for SECRET after every case)
        Case("endpoint-echoes-the-key-400", RUN_EVAL, eval_args("--api-key-env", "GBTRAIN_TEST_KEY", model="echo-key"),
             code=0, check=report_has(report, settings__L1_af__generation_errors__count=2)),
        Case("endpoint-echoes-the-key-401", RUN_EVAL, eval_args("--api-key-env", "GBTRAIN_TEST_KEY",
                                                                model="echo-key-401"),
             r"endpoint http://127\.0\.0\.1:\d+/v1 answered 401 .*\*\*\*.*API key"),
        Case("endpoint-key-in-query", RUN_EVAL, eval_args(base_url="{url}?api_key=" + SECRET), code=0,
             check=report_has("out/run.json", base_url=lambda u: u.endswith("?api_key=***"))),
        Case("endpoint-password-with-at", RUN_EVAL, eval_args(base_url="{cred_at_url}"), code=0,
             check=report_has("out/run.json", base_url=lambda u: "@" not in u)),
        Case("reply-huge", RUN_EVAL, eval_args(model="huge"), code=0,
             check=report_has(report, settings__L1_af__parse_failures__too_large=2)),
        Case("reply-deep", RUN_EVAL, eval_args(model="deep"), code=0,
             check=report_has(report, settings__L1_af__parse_failures__too_deep=2)),
        Case("reply-big-numbers", RUN_EVAL, eval_args(model="bignum"), code=0,
             check=report_has(report, settings__L1_af__coverage__no_valid_box=2)),
        Case("reply-lone-surrogate", RUN_EVAL, eval_args(model="surrogate"), code=0,
             check=report_has(report, settings__L1_af__coverage__unparsable=2)),
        Case("reply-null-content", RUN_EVAL, eval_args(model="null"), code=0,
             check=report_has(report, settings__L1_af__parse_failures__empty=2)),
        Case("diagnostics-hostile", RUN_EVAL, eval_args("--diagnostics", model="deep"), code=0,
             check=report_has(report, diagnostics__n_records=2)),
    ]


# ----------------------------------------------------------------------------------------------- build_sft.py
BUILD = "data_builders/build_sft.py"


def build_args(*extra: str, data: str = "{synth}", out: str | None = "{box}/out") -> list[str]:
    return ["--data", data, *(["--out", out] if out is not None else []), "target_count=24", "workers=1",
            "vision.min_pixels=3136", "vision.max_pixels=200704", *extra]


def build_cases() -> list[Case]:
    built = exists("out/build_config.yaml", "out/dataset_dict.json")
    return [
        Case("out-is-data", BUILD, build_args(data="{box}/data", out="{box}/data"),
             r"out \S+/data is data \S+/data: write the SFT set to a folder of its own", setup=data(), outputs=()),
        Case("out-inside-data", BUILD, build_args(data="{box}/data", out="{box}/data/images"),
             r"out \S+/data/images lies inside data \S+/data: write", setup=data(), outputs=()),
        Case("data-inside-out", BUILD, build_args(data="{box}/out/data", out="{box}/out"),
             r"out \S+/out holds data \S+/out/data: write", setup=data(name="out/data"), outputs=()),
        Case("out-dotdot-is-data", BUILD, build_args(data="{box}/data", out="{box}/data/x/.."),
             r"out \S+/data/x/\.\. is data \S+/data: write", setup=data(), outputs=()),
        Case("out-a-model-folder", BUILD, build_args(out="{box}/model"), r"model.*not an SFT build.*another --out",
             setup=full_copy("model", "model"), outputs=()),
        Case("out-a-file", BUILD, build_args(out="{box}/f.txt"), A_FILE,
             setup=write("f.txt", "x"), outputs=()),
        Case("out-read-only", BUILD, build_args(out="{box}/ro"), RO,
             setup=lambda env: read_only(env, "ro"), outputs=()),
        Case("out-empty-name", BUILD, build_args(out=""), r"missing required config value\(s\): out", outputs=()),
        Case("out-empty-override", BUILD, build_args("out=", out=None), r"bad config: out: Incompatible value 'None'",
             outputs=()),
        Case("out-empty-in-config", BUILD, ["--config", "{box}/c.yaml", *build_args(out=None)],
             r"out must name a folder \(got an empty value\)", setup=write("c.yaml", 'out: ""\n'), outputs=()),
        Case("unfinished-build-rebuilt", BUILD, build_args(), code=0, check=built,
             setup=chain(copy_fixture("sft", "out", skip=("build_config.yaml",)))),
        Case("finished-build-rebuilt", BUILD, build_args(), code=0, check=built, setup=copy_fixture("sft", "out")),
        Case("data-missing", BUILD, build_args(data="{box}/nodata"), r"data directory not found: .*nodata", outputs=()),
        Case("data-empty-folder", BUILD, build_args(data="{box}/data"), r"no L1/L2/L3 annotation files",
             setup=make_dir("data"), outputs=()),
        Case("data-not-given", BUILD, ["--out", "{box}/out"], r"missing required config value\(s\): data", outputs=()),
        Case("data-no-records", BUILD, build_args(data="{box}/data"), r"no conversations were built from .*data",
             setup=chain(data({"L1": 1}), write("data/annotations/L1.json", "[]"))),
        Case("annotations-nested-100000-deep", BUILD, build_args(data="{box}/data"),
             r"L1\.json: malformed JSON: maximum recursion depth",
             setup=chain(data({"L1": 1}), write("data/annotations/L1.json", "[" * 100_000))),
        Case("annotations-5001-digit-number", BUILD, build_args(data="{box}/data"),
             r"L1\.json: malformed JSON: Exceeds the limit \(4300 digits\)",
             setup=chain(data({"L1": 1}),
                         write("data/annotations/L1.json", '[{"id": "r", "width": ' + "9" * 5001 + "}]"))),
        Case("label-unknown", BUILD, build_args(data="{box}/data"),
             r"L1\.json \[record \S+\]: unknown markLabel 'correct' on 1 mark\(s\): map it in "
             r"annotations/aliases\.yaml \(labels: \{correct: \.\.\.\}\) or pass --lenient",
             setup=chain(data({"L1": 1}), edit_record("L1", 0, set_key("marks.0.markLabel", "correct"))), outputs=()),
        Case("label-unknown-lenient", BUILD, build_args("--lenient", data="{box}/data"), code=0,
             check=printed(r"warning: \S+L1\.json \[record \S+\]: unknown markLabel 'correct' on 1 mark\(s\), taken as "
                           r"'unknown' \(--lenient\)"),
             setup=chain(data({"L1": 1}), edit_record("L1", 0, set_key("marks.0.markLabel", "correct")))),
        Case("label-alias-not-a-label", BUILD, build_args(data="{box}/data"),
             r"aliases\.yaml: labels\.correct: 'yes' is not one of right, wrong",
             setup=chain(data({"L1": 1}), write("data/annotations/aliases.yaml", "labels: {correct: 'yes'}\n")),
             outputs=()),
        Case("label-alias-turns-a-verdict", BUILD, build_args(data="{box}/data"),
             r"aliases\.yaml: labels\.right: 'right' already names 'right'; map only your own words",
             setup=chain(data({"L1": 1}), write("data/annotations/aliases.yaml", "labels: {right: wrong}\n")),
             outputs=()),
        Case("question-type-unknown", BUILD, build_args(data="{box}/data"),
             r"unknown dimension2 'Essay' on 1 mark\(s\): map it in annotations/aliases\.yaml \(question_types:",
             setup=chain(data({"L1": 1}), edit_record("L1", 0, set_key("marks.0.attributes.dimension2", "Essay"))),
             outputs=()),
        Case("record-key-misspelled", BUILD, build_args(data="{box}/data"),
             r"unknown record key 'page_Id' \(did you mean 'page_id'\?\) on 1 record\(s\): rename it, or pass "
             r"--lenient",
             setup=chain(data({"L1": 1}), edit_record("L1", 0, set_key("page_Id", "p1"))), outputs=()),
        Case("attribute-key-misspelled", BUILD, build_args(data="{box}/data"),
             r"unknown mark attribute key 'scroe' \(did you mean 'score'\?\) on 1 mark attribute\(s\): rename it, or "
             r"pass --lenient",
             setup=chain(data({"L1": 1}), edit_record("L1", 0, set_key("marks.0.attributes.scroe", 2))), outputs=()),
        Case("group-id-null", BUILD, build_args(data="{box}/data"), r"mark 0: answer mark without attributes\.id",
             setup=chain(data({"L1": 1}), edit_record("L1", 0, set_key("marks.0.attributes.id", None))), outputs=()),
        Case("crop-without-page-id-unnamed", BUILD, build_args(data="{box}/data"),
             r"L1\.json \[record \S+\]: an L1 crop needs page_id \(the page it was cut from",
             setup=chain(data({"L1": 1}), edit_record("L1", 0, drop_key("page_id")),
                         edit_record("L1", 0, set_key("image", "renamed.jpg"))), outputs=()),
        # a blank or misspelt page_id would hash one page's crops into other splits than the page
        *[Case(f"crop-page-id-{name}", BUILD, build_args(data="{box}/data"),
               r"L1\.json \[record \S+\]: page_id '\s*' is blank: name the page the record was cut from",
               setup=chain(data({"L1": 1, "L3": 1}), edit_record("L1", 0, set_key("page_id", value))), outputs=())
          for name, value in (("empty", ""), ("blank", "   "))],
        Case("crop-page-id-misspelt", BUILD, build_args(data="{box}/data"),
             r"L1\.json \[record \S+\]: page_id 'p0000O' is no page of the L2/L3 files: correct it",
             setup=chain(data({"L1": 1, "L3": 1}), edit_record("L1", 0, set_key("page_id", "p0000O"))), outputs=()),
        Case("config-missing", BUILD, ["--config", "{box}/none.yaml", *build_args()],
             r"/none\.yaml: No such file or directory", outputs=()),
        Case("config-malformed", BUILD, ["--config", "{box}/c.yaml", *build_args()], r"bad config \S+/c\.yaml: ",
             setup=write("c.yaml", "seed: [1, 2\ncoords: {"), outputs=()),
        Case("config-tabs", BUILD, ["--config", "{box}/c.yaml", *build_args()], r"bad config \S+/c\.yaml: ",
             setup=write("c.yaml", "mix:\n\tthree_turn: 0.5\n"), outputs=()),
        Case("config-a-list", BUILD, ["--config", "{box}/c.yaml", *build_args()], r"bad config \S+/c\.yaml: ",
             setup=write("c.yaml", "- 1\n- 2\n"), outputs=()),
        Case("config-not-utf8", BUILD, ["--config", "{box}/c.yaml", *build_args()], r"bad config \S+/c\.yaml: ",
             setup=write("c.yaml", b"seed: \xff\xfe\n"), outputs=()),
        Case("config-unknown-key", BUILD, ["--config", "{box}/c.yaml", *build_args()],
             r"bad config in \S+/c\.yaml: colors: Key 'colors' not in",
             setup=write("c.yaml", "colors: 3\n"), outputs=()),
        Case("config-interpolation", BUILD, ["--config", "{box}/c.yaml", *build_args()],
             r"tokenizer: \$\{\.\.\.\} interpolation is not read", setup=write("c.yaml", "tokenizer: ${oc.env:HOME}\n"),
             outputs=()),
        Case("override-interpolation", BUILD, build_args("tokenizer=${oc.env:HOME}"), r"interpolation is not read",
             outputs=()),
        Case("data-interpolation", BUILD, build_args(data="${oc.env:HOME}"), r"data: \$\{\.\.\.\} interpolation",
             outputs=()),
        Case("override-unknown-key", BUILD, build_args("colors=3"),
             r"bad config: colors: Key 'colors' not in 'BuildConfig'", outputs=()),
        Case("override-without-equals", BUILD, build_args("target_count"), r"overrides must be key=value",
             outputs=()),
        Case("override-wrong-type", BUILD, build_args("target_count=many"), r"target_count: Value 'many'", outputs=()),
        Case("override-lenient-maybe", BUILD, build_args("lenient=maybe"),
             r"lenient: Value 'maybe' is not a valid bool", outputs=()),
        *[Case(f"range-{key}-{value}", BUILD, build_args(f"{key}={value}"),  # a share names its section
               re.escape(key.rsplit(".", 1)[0] if key.startswith(("mix.levels", "mix.modes")) else key) + ".*must be",
               outputs=())
          for key, value in (("target_count", "0"), ("target_count", "-5"), ("max_length", "0"), ("workers", "0"),
                             ("l2_margin", "-1"), ("l2_margin", "nan"), ("l2_margin", "inf"),
                             ("validation_share", "nan"), ("validation_share", "-0.1"), ("test_share", "1.5"),
                             ("mix.three_turn", "1.5"), ("mix.three_turn", "nan"), ("mix.levels.L1", "nan"),
                             ("mix.levels.L1", "-0.45"), ("mix.modes.answer-free", "inf"))],
        Case("shares-sum-over-one", BUILD, build_args("validation_share=0.5", "test_share=0.6"),
             r"validation_share and test_share", outputs=()),
        Case("unknown-level-share", BUILD, build_args("mix.levels.L4=0.1"), r"mix\.levels: unknown keys \['L4'\]",
             outputs=()),
        Case("unknown-mode-share", BUILD, build_args("mix.modes.free=0.5"), r"mix\.modes: unknown keys", outputs=()),
        Case("unknown-coords", BUILD, build_args("coords=pixels"), r"coords='pixels': choose one of", outputs=()),
        Case("pixels-0", BUILD, build_args("vision.min_pixels=0"), r"need 0 < min_pixels <= max_pixels, got 0,",
             outputs=()),
        Case("pixels-min-over-max", BUILD, build_args("vision.min_pixels=900000"), r"min_pixels <= max_pixels",
             outputs=()),
        Case("pixels-nan", BUILD, build_args("vision.max_pixels=nan"), r"vision\.max_pixels: Value 'nan'",
             outputs=()),
        Case("tokenizer-missing", BUILD, build_args("tokenizer={box}/notok"), r"tokenizer=\S+/notok: .*or null",
             outputs=()),
        Case("tokenizer-not-a-tokenizer", BUILD, build_args("tokenizer={synth}"),
             r"tokenizer=\S+synth\w*/data: .*or null", outputs=()),
        Case("config-a-folder", BUILD, ["--config", "{box}/c", *build_args()], r"/c: Is a directory",
             setup=make_dir("c"), outputs=()),
        Case("max-length-drops-all", BUILD, build_args("max_length=10"), r"no conversations were built .*max_length"),
        # annotations
        Case("annotation-id-null", BUILD, build_args(data="{box}/data"), r"\[record None\]: id must be",
             setup=chain(data(), edit_record("L2", 0, set_key("id", None)))),
        Case("annotation-id-bool", BUILD, build_args(data="{box}/data"), r"\[record True\]: id must be",
             setup=chain(data(), edit_record("L2", 0, set_key("id", True)))),
        Case("annotation-hand-an-object", BUILD, build_args(data="{box}/data"), r"attributes\.hand must be text",
             setup=chain(data(), edit_record("L2", 0, set_key("marks.0.attributes.hand", {"x": 1})))),
        Case("annotation-height-negative", BUILD, build_args(data="{box}/data"), r"width/height must be positive",
             setup=chain(data(), edit_record("L3", 0, set_key("height", -4)))),
        Case("annotation-missing-image-key", BUILD, build_args(data="{box}/data"), r"missing key 'image'",
             setup=chain(data(), edit_record("L1", 2, drop_key("image")))),
        Case("annotation-record-a-list", BUILD, build_args(data="{box}/data"), r"record 1 is not an object",
             setup=chain(data(), edit_level("L1", lambda raw: raw.__setitem__(1, [1, 2])))),
        Case("annotation-box-outside", BUILD, build_args(data="{box}/data"), r"lies outside the",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.bbox_2d", [0, 0, 99999, 5])))),
        Case("annotation-box-3-numbers", BUILD, build_args(data="{box}/data"), r"a flat bbox_2d needs 4 numbers",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.bbox_2d", [0, 0, 5])))),
        Case("annotation-answer-without-id", BUILD, build_args(data="{box}/data"),
             r"answer mark without attributes\.id",
             setup=chain(data(), edit_record("L1", 0, set_key("marks.0.attributes.id", "")))),
        Case("image-truncated", BUILD, build_args(data="{box}/data"), r"\[record \S+\]: image .* is truncated",
             setup=chain(data(), damage_image("truncated", "L2", 0))),
        Case("image-bomb", BUILD, build_args(data="{box}/data"), r"\[record \S+\]: cannot read image",
             setup=chain(data(), damage_image("bomb", "L3", 0))),
        Case("image-broken-stream", BUILD, build_args(data="{box}/data"),
             r"\[record \S+\]: cannot read image \S+: broken data stream",
             setup=chain(data(), damage_image("broken-stream"))),
        Case("image-bomb-lenient", BUILD, build_args("--lenient", data="{box}/data"), code=0,
             check=report_has("out/stats.json", skipped_records=lambda s: len(s) == 1 and "record" in s[0]),
             setup=chain(data(), damage_image("bomb", "L1", 1))),
        Case("image-symlink-outside", BUILD, build_args(data="{box}/data"), r"leaves",
             setup=chain(data(), damage_image("symlink-out", "L1", 0))),
        # round two
        Case("overrides-between-flags", BUILD, ["--data", "{box}/nodata", "target_count=24", "--out", "{box}/out",
                                                "workers=1"], r"data directory not found: .*nodata", outputs=()),
        Case("annotation-image-dot", BUILD, build_args(data="{box}/data"), r"L1\.json \[record \S+\]: image",
             setup=chain(data(), edit_record("L1", 0, set_key("image", ".")))),
        Case("image-header-only-12000", BUILD, build_args(data="{box}/data"), r"\[record \S+\]: cannot read image",
             setup=chain(data(), lambda env: replace_file(image_of(env), bomb_png(12_000, 12_000)),
                         edit_record("L1", 0, set_key("width", 12_000)),
                         edit_record("L1", 0, set_key("height", 12_000)))),
        Case("image-aspect-300", BUILD, build_args(data="{box}/data"), r"L1\.json \[record \S+\]: .*aspect",
             setup=chain(data(), sized_image("L1", 0, 3000, 10))),
        Case("image-aspect-300-lenient", BUILD, build_args("--lenient", data="{box}/data"), code=0,
             check=report_has("out/stats.json", skipped_records=lambda s: len(s) == 1 and "aspect" in s[0]),
             setup=chain(data(), sized_image("L1", 1, 9000, 30))),
        Case("l2-without-regions", BUILD, build_args(data="{box}/data"), r"L2\.json \[record \S+\]: ",
             setup=chain(data(), edit_record("L2", 0, set_key("marks", [])))),
        Case("l2-without-regions-lenient", BUILD, build_args("--lenient", data="{box}/data"), code=0,
             check=report_has("out/stats.json", skipped_records=lambda s: len(s) == 1),
             setup=chain(data(), edit_record("L2", 0, set_key("marks", [])))),
        Case("image-wrong-size", BUILD, build_args(data="{box}/data"), r"is \d+x\d+, annotation says \d+x\d+",
             setup=chain(data(), edit_record("L1", 0, set_key("width", 578)))),
    ]


# ----------------------------------------------------------------------------------------------- sft_qwen.py
TRAIN = "recipes/sft_qwen.py"
TRAIN_YAML = """model: {model}
dataset: {sft}
output_dir: {box}/run
finetune: full
freeze: {vision_tower: false, merger: false, llm: false}
max_length: 4096
pack_tokens: 4096
gradient_checkpointing: false
report_to: []
dataloader_num_workers: 0
max_steps: 1
"""


def train_args(*extra: str) -> list[str]:
    return ["--config", "{box}/train.yaml", *extra]


def train_yaml(text: str = TRAIN_YAML) -> Callable[[Env], None]:
    return write("train.yaml", text)


def earlier_training(*overrides: str, work: bool = True) -> Callable[[Env], None]:
    """box/run as an earlier run left it: its gbtrain_run.json (made with `overrides`) and a checkpoint."""
    def setup(env: Env) -> None:
        from gbtrain.config import load_config
        from gbtrain.data.sft_dataset import dataset_pixel_budget
        from gbtrain.train.config import TrainConfig
        from gbtrain.train.trainer import claim_output_dir

        cfg = load_config(TrainConfig, env.box / "train.yaml", list(overrides))
        cfg.vision = dataset_pixel_budget(cfg.dataset)
        claim_output_dir(cfg, write=True)
        if work:
            (env.box / "run" / "checkpoint-2").mkdir()
    return setup


def saved_checkpoint(damage: Callable[[Path], None] | None = None, step: int = 2) -> Callable[[Env], None]:
    """box/run/checkpoint-STEP as the trainer completes a save (files, then the marker naming the run recorded in
    gbtrain_run.json), then `damage` done to it."""
    def setup(env: Env) -> None:
        from gbtrain.train.checkpoints import mark_complete

        folder = env.box / "run" / f"checkpoint-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, size in (("model.safetensors", 64), ("optimizer.pt", 128), ("scheduler.pt", 8),
                           ("rng_state.pth", 16), ("trainer_state.json", 32)):
            (folder / name).write_bytes(b"x" * size)
        run_id = json.loads((env.box / "run" / "gbtrain_run.json").read_text(encoding="utf-8"))["run_id"]
        mark_complete(folder, run_id, step)
        if damage:
            damage(folder)
    return setup


def train_cases() -> list[Case]:
    y = train_yaml()
    past_checks = r"every train sample is longer than max_length=10"  # the first error after the output folder
    return [
        # the disk fills during a checkpoint save (a 5 MB file-size limit: the full model's optimizer state does not
        # fit): one line naming the checkpoint, and the half-written checkpoint is gone
        Case("disk-full-during-a-checkpoint-save", TRAIN, train_args("max_steps=2", "save_steps=1", "eval_steps=100",
                                                                     "limit_eval_samples=2"),
             r"\S+/run/checkpoint-1: the save failed \(.*; a full disk\?\): the partial save was removed; no complete "
             r"checkpoint was saved before it: free space, then run again with --resume",
             setup=y, outputs=("run",), file_size_limit=5_000_000, limit_s=300, check=gone("run/checkpoint-1")),
        Case("no-config", TRAIN, [], r"the following arguments are required: --config", outputs=()),
        Case("config-missing", TRAIN, train_args(), r"/train\.yaml: No such file or directory", outputs=()),
        Case("config-malformed", TRAIN, train_args(), r"bad config \S+/train\.yaml: ",
             setup=write("train.yaml", "lr: {llm: 1e-4\n"), outputs=()),
        Case("config-empty", TRAIN, train_args(), r"missing required config value\(s\): dataset, model, output_dir",
             setup=write("train.yaml", ""), outputs=()),
        Case("config-unknown-key", TRAIN, train_args(), r"bad config in \S+/train\.yaml: learning_rate: Key",
             setup=write("train.yaml", TRAIN_YAML + "learning_rate: 1e-4\n"), outputs=()),
        Case("config-interpolation", TRAIN, train_args(), r"output_dir: \$\{\.\.\.\} interpolation is not read",
             setup=write("train.yaml", TRAIN_YAML.replace("{box}/run", "${oc.env:HOME}/run")), outputs=()),
        Case("override-interpolation", TRAIN, train_args("model=${oc.env:HOME}"), r"model: \$\{\.\.\.\} interpolation",
             setup=y, outputs=()),
        Case("override-unknown-nested", TRAIN, train_args("lora.rank=8"),
             r"lora\.rank: Key 'rank' not in 'LoraSettings'", setup=y, outputs=()),
        Case("override-wrong-type", TRAIN, train_args("per_device_batch_size=two"),
             r"per_device_batch_size: Value 'two' .*could not be converted to Integer", setup=y, outputs=()),
        *[Case(f"range-{key}-{value}", TRAIN, train_args(f"{key}={value}"),
               rf"(unsupported training options:|bad config \S+train\.yaml:).*{re.escape(key)}=",
               setup=y, outputs=())
          for key, value in (("lr.llm", "-1e-4"), ("lr.merger", "nan"), ("lr.vision_tower", "inf"),
                             ("per_device_batch_size", "0"), ("gradient_accumulation_steps", "0"),
                             ("num_train_epochs", "0"), ("num_train_epochs", "nan"), ("warmup_ratio", "nan"),
                             ("warmup_ratio", "-0.1"), ("lora.dropout", "1.0"), ("lora.r", "0"), ("max_steps", "0"),
                             ("max_steps", "-5"), ("save_total_limit", "0"), ("max_grad_norm", "nan"),
                             ("weight_decay", "-1"), ("max_length", "0"), ("pack_tokens", "-1"),
                             ("limit_train_samples", "0"), ("eval_steps", "0"), ("peak_tflops", "nan"))],
        Case("precision-bf16-on-cpu", TRAIN, train_args("precision=bf16"), r"precision=bf16 needs a CUDA GPU", setup=y,
             outputs=()),
        Case("precision-unknown", TRAIN, train_args("precision=fp8"), r"precision='fp8'", setup=y, outputs=()),
        Case("qlora-on-cpu", TRAIN, train_args("finetune=qlora"), r"finetune=qlora needs a CUDA GPU", setup=y,
             outputs=()),
        Case("finetune-unknown", TRAIN, train_args("finetune=dora"), r"finetune='dora'", setup=y, outputs=()),
        Case("flash-attention-on-cpu", TRAIN, train_args("attn_implementation=flash_attention_2"),
             r"flash_attention_2 needs a CUDA GPU", setup=y, outputs=()),
        Case("model-init-unknown", TRAIN, train_args("model_init=magic"), r"model_init='magic'", setup=y, outputs=()),
        Case("lora-unfrozen-vision", TRAIN, train_args("finetune=lora", "freeze.vision_tower=false"),
             r"freeze\.vision_tower=false needs finetune=full", setup=y, outputs=()),
        # the dataset
        Case("dataset-missing", TRAIN, train_args("dataset={box}/nosft"), r"dataset folder not found: .*nosft",
             setup=y, outputs=()),
        Case("dataset-unfinished", TRAIN, train_args("dataset={box}/sft"), r"sft is not a finished build.*build_sft",
             setup=chain(y, copy_fixture("sft", "sft", skip=("build_config.yaml",))), outputs=()),
        Case("dataset-is-raw-pages", TRAIN, train_args("dataset={synth}"), r"is not a finished build", setup=y,
             outputs=()),
        Case("dataset-build-config-broken", TRAIN, train_args("dataset={box}/sft"), r"sft/build_config\.yaml",
             setup=chain(y, copy_fixture("sft", "sft", skip=("build_config.yaml",)),
                         write("sft/build_config.yaml", "vision: [1, 2\n")), outputs=()),
        Case("vision-differs", TRAIN, train_args("vision.min_pixels=3136", "vision.max_pixels=50176"),
             r"differs from the dataset's .*rebuild the data or drop the vision override", setup=y, outputs=()),
        # the output folder
        Case("output-other-run", TRAIN, train_args("--resume"),
             r"holds a run made otherwise \(lr: .*another output_dir",
             setup=chain(y, earlier_training("lr.llm=5e-4")), outputs=()),
        Case("output-other-dataset-resume", TRAIN, train_args("--resume", "dataset={box}/sft2"),
             r"made otherwise \(dataset: ", setup=chain(y, copy_fixture("sft", "sft2"), earlier_training())),
        Case("output-same-run-no-resume", TRAIN, train_args(), r"this run's work \(checkpoint-2\): pass --resume",
             setup=chain(y, earlier_training()), outputs=()),
        # --resume on checkpoints damaged after their save, or saves that never finished
        *[Case(f"resume-{name}", TRAIN, train_args("--resume"),
               rf"cannot resume from \S+/run/checkpoint-2: {message}.*; delete checkpoint-2 to resume from the "
               rf"checkpoint before it",
               setup=chain(y, earlier_training(work=False), saved_checkpoint(damage)), outputs=())
          for name, damage, message in (
              ("optimizer-truncated", lambda f: (f / "optimizer.pt").write_bytes(b"x"),
               r"optimizer\.pt is 1 bytes, 128 when saved: damaged or truncated"),
              ("weights-truncated", lambda f: (f / "model.safetensors").write_bytes(b""), r"model\.safetensors is 0"),
              ("trainer-state-truncated", lambda f: (f / "trainer_state.json").write_bytes(b"{"),
               r"trainer_state\.json is 1 bytes"),
              ("rng-state-deleted", lambda f: (f / "rng_state.pth").unlink(), r"rng_state\.pth is missing"),
              ("scheduler-deleted", lambda f: (f / "scheduler.pt").unlink(), r"scheduler\.pt is missing"),
              ("marker-corrupt", lambda f: (f / "gbtrain_complete.json").write_text("{"),
               r"its gbtrain_complete\.json cannot be read"),
              ("marker-of-another-run", lambda f: (f / "gbtrain_complete.json").write_text(
                  '{"run_id": "elsewhere", "step": 2, "files": {}}'), r"saved by another run \('elsewhere'"))],
        Case("resume-save-never-finished", TRAIN, train_args("--resume", "max_length=10"),
             past_checks,  # after checkpoint-4 was passed over (a line on stdout; tests/train/test_checkpoints.py)
             setup=chain(y, earlier_training("max_length=10", work=False), saved_checkpoint(),
                         make_dir("run/checkpoint-4")),
             outputs=("run",)),
        Case("output-unrecorded-work", TRAIN, train_args(), r"holds work that gbtrain did not record \(checkpoint-1\)",
             setup=chain(y, make_dir("run/checkpoint-1")), outputs=()),
        Case("output-record-corrupt", TRAIN, train_args("--resume"),
             r"run/gbtrain_run\.json cannot be read .*choose another output_dir",
             setup=chain(y, write("run/gbtrain_run.json", "{oops"), make_dir("run/checkpoint-2")), outputs=()),
        Case("output-record-corrupt-no-work", TRAIN, train_args("max_length=10"), past_checks,
             setup=chain(y, write("run/gbtrain_run.json", "{oops")), outputs=("run",)),
        Case("output-claimed-without-work", TRAIN, train_args("max_length=10"), past_checks,
             setup=chain(y, earlier_training("lr.llm=5e-4", work=False)), outputs=("run",)),
        Case("output-is-model", TRAIN, train_args("model={box}/model", "output_dir={box}/model", "max_length=10"),
             OVERLAP,
             setup=chain(y, full_copy("model", "model")), outputs=()),
        Case("output-inside-dataset", TRAIN, train_args("output_dir={sft}/run", "max_length=10"), OVERLAP, setup=y,
             outputs=()),
        Case("output-a-file", TRAIN, train_args("output_dir={box}/f.txt"), A_FILE,
             setup=chain(y, write("f.txt", "x")), outputs=()),
        Case("output-read-only", TRAIN, train_args("output_dir={box}/ro"), RO,
             setup=chain(y, lambda env: read_only(env, "ro")), outputs=()),
        # the model
        Case("model-missing", TRAIN, train_args("model={box}/nomodel"), r"model not found: \S+/nomodel \(a folder",
             setup=y, outputs=()),
        Case("model-hub-offline", TRAIN, train_args("model=Qwen/Qwen2.5-VL-7B-Instruct"),
             r"model Qwen/Qwen2\.5-VL-7B-Instruct is not in the Hugging Face cache \(.*\) and HF_HUB_OFFLINE is set",
             setup=y, outputs=()),
        Case("model-not-a-model", TRAIN, train_args("model={synth}"), r"synth\w*/data\. Can't instantiate a processor",
             setup=y, outputs=("run",)),
        Case("max-length-drops-all", TRAIN, train_args("max_length=10"), past_checks, setup=y, outputs=("run",)),
        Case("report-to-unknown", TRAIN, train_args("report_to=[carrier-pigeon]"), r"carrier-pigeon is not supported",
             setup=y,
             outputs=("run",)),
    ]


# ----------------------------------------------------------------------------------------------- merge_lora.py
MERGE = "recipes/merge_lora.py"


def merge_args(*extra: str, base: str = "{model}", adapter: str = "{adapter}", out: str = "{box}/out") -> list[str]:
    return ["--base", base, "--adapter", adapter, "--out", out, *extra]


def adapter_config(text: str) -> Callable[[Env], None]:
    return chain(copy_fixture("adapter", "lora", skip=("adapter_config.json",)),
                 write("lora/adapter_config.json", text))


def merge_cases() -> list[Case]:
    return [
        Case("other-base", MERGE, merge_args(base="Qwen/Qwen2.5-VL-3B-Instruct"),
             r"trained on .*, not Qwen/Qwen2\.5-VL-3B-Instruct.*--allow-other-base", outputs=()),
        Case("adapter-missing", MERGE, merge_args(adapter="{box}/nolora"), r"no adapter_config\.json in .*nolora",
             outputs=()),
        Case("adapter-a-model", MERGE, merge_args(adapter="{model}"), r"not a LoRA adapter folder", outputs=()),
        Case("adapter-config-not-json", MERGE, merge_args(adapter="{box}/lora"), r"lora/adapter_config\.json",
             setup=adapter_config("{nope"), outputs=()),
        Case("adapter-config-a-list", MERGE, merge_args(adapter="{box}/lora"), r"lora/adapter_config\.json",
             setup=adapter_config("[]"), outputs=()),
        Case("adapter-base-a-number", MERGE, merge_args(adapter="{box}/lora"), r"lora/adapter_config\.json",
             setup=adapter_config('{"base_model_name_or_path": 7}'), outputs=()),
        Case("adapter-half-written", MERGE, merge_args(adapter="{box}/lora"),
             r"no adapter weights \(adapter_model\.safetensors\) in \S+/lora: point --adapter",
             setup=copy_fixture("adapter", "lora", skip=("adapter_model.safetensors",)), outputs=()),
        Case("adapter-truncated", MERGE, merge_args(adapter="{box}/lora"),
             r"lora/adapter_model\.safetensors cannot be read \(.*\): the file is damaged or truncated",
             setup=chain(copy_fixture("adapter", "lora", skip=("adapter_model.safetensors",)),
                         write("lora/adapter_model.safetensors", b"\x20\x00\x00\x00\x00\x00\x00\x00{")), outputs=()),
        Case("base-hub-offline", MERGE, merge_args("--allow-other-base", base="Qwen/Qwen2.5-VL-3B-Instruct"),
             r"--base Qwen/Qwen2\.5-VL-3B-Instruct is not in the Hugging Face cache", outputs=()),
        Case("base-missing", MERGE, merge_args("--allow-other-base", base="{box}/nobase"),
             r"--base not found: \S+/nobase \(a folder, or a hub id", outputs=()),
        Case("unknown-dtype", MERGE, merge_args("--dtype", "int4"), r"--dtype: invalid choice: 'int4'", outputs=()),
        Case("out-is-adapter", MERGE, merge_args(adapter="{box}/lora", out="{box}/lora"), OVERLAP,
             setup=full_copy("adapter", "lora"), outputs=()),
        Case("out-is-base", MERGE, merge_args("--allow-other-base", base="{box}/base", out="{box}/base"), OVERLAP,
             setup=full_copy("model", "base"), outputs=()),
        Case("out-inside-adapter", MERGE, merge_args(adapter="{box}/lora", out="{box}/lora/merged"), OVERLAP,
             setup=full_copy("adapter", "lora"), outputs=()),
        Case("out-a-file", MERGE, merge_args(out="{box}/f.txt"), A_FILE,
             setup=write("f.txt", "x"), outputs=()),
        Case("out-read-only", MERGE, merge_args(out="{box}/ro"), RO,
             setup=lambda env: read_only(env, "ro"), outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- image_reliance.py
RELIANCE = "scripts/image_reliance.py"


def reliance_args(*extra: str, data: str = "{sft}", model: str = "{model}") -> list[str]:
    return ["--model", model, "--data", data, "--limit", "1", "--batch-size", "1", *extra]


def reliance_cases() -> list[Case]:
    return [
        Case("data-missing", RELIANCE, reliance_args(data="{box}/nosft"), r"dataset folder not found: .*nosft",
             outputs=()),
        Case("data-unfinished", RELIANCE, reliance_args(data="{box}/sft"), r"not a finished build",
             setup=copy_fixture("sft", "sft", skip=("build_config.yaml",)), outputs=()),
        Case("data-raw-pages", RELIANCE, reliance_args(data="{synth}"), r"not a finished build", outputs=()),
        Case("unknown-split", RELIANCE, reliance_args("--split", "dev"), r"has no 'dev' split", outputs=()),
        Case("limit-0", RELIANCE, reliance_args("--limit", "0"), r"--limit 0: must be at least 1", outputs=()),
        Case("limit-negative", RELIANCE, reliance_args("--limit", "-2"), r"--limit -2: must be at least 1", outputs=()),
        Case("batch-size-0", RELIANCE, reliance_args("--batch-size", "0"), r"--batch-size 0: must be at least 1",
             outputs=()),
        Case("model-missing", RELIANCE, reliance_args(model="{box}/nomodel"), r"model not found: \S+/nomodel",
             outputs=()),
        Case("model-not-a-model", RELIANCE, reliance_args(model="{synth}"), r"synth\w*/data\. .*config\.json",
             outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- compare.py
COMPARE = "eval/compare.py"


def reports(edit_a: Callable[[dict], None] | None = None, edit_b: Callable[[dict], None] | None = None):
    """box/a.json and box/b.json: copies of one real report, each optionally edited."""
    def setup(env: Env) -> None:
        original = json.loads(env.fixtures["report"].read_text(encoding="utf-8"))
        for name, edit in (("a.json", edit_a), ("b.json", edit_b)):
            doc = json.loads(json.dumps(original))
            if edit:
                edit(doc)
            replace_file(env.box / name, json.dumps(doc))
    return setup


def meta(**changes) -> Callable[[dict], None]:
    return lambda doc: doc["meta"].update(changes)


def compare_args(out: str = "{box}/out/gains.md") -> list[str]:
    return ["{box}/a.json", "{box}/b.json", "--out", out]


def _evaluation_folder(env) -> None:
    """{box}/ev as run_eval leaves it: its report.json (a.json's), report.md and report.html."""
    ev = env.box / "ev"
    ev.mkdir()
    shutil.copy(env.box / "a.json", ev / "report.json")
    for name in ("report.md", "report.html"):
        (ev / name).write_text("the evaluation's own", encoding="utf-8")


def compare_cases() -> list[Case]:
    def drop_setting(doc: dict) -> None:
        doc["settings"] = {k + "-x": v for k, v in doc["settings"].items()}

    def groups(doc: dict) -> None:
        next(iter(doc["settings"].values()))["n_groups"] += 1

    return [
        Case("same-report", COMPARE, compare_args(), code=0, check=exists("out/gains.md", "out/gains.png"),
             setup=reports()),
        Case("other-annotations", COMPARE, compare_args(), r"annotations_sha256: .*evaluate both with the same --data",
             setup=reports(edit_b=meta(annotations_sha256="0" * 16)), outputs=()),
        Case("other-limit", COMPARE, compare_args(), r"limit: 2 vs 3", setup=reports(edit_b=meta(limit=3)), outputs=()),
        # --out BASE/report.md: the comparison's .md and .html would replace the evaluation's own
        Case("out-in-an-evaluation", COMPARE, ["{box}/ev/report.json", "{box}/b.json", "--out", "{box}/ev/report.md"],
             r"--out \S+/ev/report\.md lies in an evaluation's folder \(\S+/ev\): write the comparison to a folder "
             r"of its own", setup=chain(reports(), lambda env: _evaluation_folder(env)), outputs=()),
        *[Case(f"other-{key.replace('_', '-')}", COMPARE, compare_args(), rf"{key}: {re.escape(repr(a))} vs "
               rf"{re.escape(repr(b))}.*evaluate both with the same", setup=reports(edit_a=meta(**{key: a}),
                                                                            edit_b=meta(**{key: b})), outputs=())
          for key, a, b in (("answer_tolerance", 0.05, 0.0), ("rule_first", True, False),
                            ("ignore_missing", False, True))],
        Case("other-judge", COMPARE, compare_args(), r"judge: 'rule' vs 'vllm:x'",
             setup=reports(edit_b=meta(judge="vllm:x")), outputs=()),
        Case("other-scorer", COMPARE, compare_args(), r"scorer_sha256: '\w+' vs 'x'",
             setup=reports(edit_b=meta(scorer_sha256="x")),
             outputs=()),
        Case("no-common-setting", COMPARE, compare_args(), r"no setting in common", setup=reports(edit_b=drop_setting),
             outputs=()),
        Case("other-groups", COMPARE, compare_args(), r"L1-af: 2 vs 3 groups", setup=reports(edit_b=groups),
             outputs=()),
        Case("judge-credentials", COMPARE, compare_args(), r"judge: 'rule' vs 'openai:m@http://host/v1'",
             setup=reports(edit_b=meta(judge=f"openai:m@http://user:{SECRET}@host/v1")), outputs=()),
        Case("file-missing", COMPARE, compare_args(), r"cannot read .*a\.json", outputs=()),
        Case("file-truncated", COMPARE, compare_args(), r"cannot read .*b\.json",
             setup=chain(reports(), lambda env: replace_file(env.box / "b.json",
                                                             (env.box / "b.json").read_bytes()[:99])),
             outputs=()),
        Case("file-a-list", COMPARE, compare_args(), r"a\.json is not a report\.json", setup=chain(
            reports(), write("a.json", "[]")), outputs=()),
        Case("file-a-folder", COMPARE, compare_args(), r"cannot read .*a\.json", setup=chain(reports(),
             lambda env: (env.box / "a.json").unlink(), make_dir("a.json")), outputs=()),
        Case("meta-null", COMPARE, compare_args(), r"a\.json is not a report\.json",
             setup=reports(edit_a=lambda doc: doc.update(meta=None)), outputs=()),
        Case("settings-strings", COMPARE, compare_args(), r"a\.json is not a report\.json",
             setup=reports(edit_a=lambda doc: doc.update(settings={k: "x" for k in doc["settings"]})), outputs=()),
        Case("metric-missing", COMPARE, compare_args(), r"b\.json is not a report\.json",
             setup=reports(edit_b=lambda doc: [s.pop("accuracy") for s in doc["settings"].values()]), outputs=()),
        Case("out-is-input", COMPARE, compare_args(out="{box}/a.json"), r"--out .*a\.json .*input", setup=reports(),
             outputs=()),
        Case("out-a-folder", COMPARE, compare_args(out="{box}/out"), r"out.*(Is a directory|folder)",
             setup=chain(reports(), make_dir("out"))),
        Case("out-read-only", COMPARE, compare_args(out="{box}/ro/g.md"), RO,
             setup=chain(reports(), lambda env: read_only(env, "ro")), outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- synth_pages.py
SYNTH = "data_builders/synth_pages.py"


def synth_cases() -> list[Case]:
    base = ["--out", "{box}/out", "--pages", "1", "--workers", "1"]
    return [
        *[Case(f"{flag[2:]}-{value}", SYNTH, [*base, flag, value], message, outputs=())
          for flag, value, message in (
              ("--pages", "0", r"--pages 0: must be at least 1"),
              ("--pages", "-1", r"--pages -1: must be at least 1"),
              ("--wrong-share", "0.01", r"wrong_share must be in \[0\.1, 0\.9\], got 0\.01"),
              ("--wrong-share", "nan", r"wrong_share must be in .*got nan"),
              ("--wrong-share", "inf", r"wrong_share must be in .*got inf"),
              ("--blank-share", "-0.1", r"blank_share must be in \[0, 0\.3\], got -0\.1"),
              ("--blank-share", "nan", r"blank_share must be in .*got nan"),
              ("--workers", "0", r"--workers 0: must be at least 1"),
              ("--workers", "-2", r"--workers -2: must be at least 1"))],
        Case("pages-not-a-number", SYNTH, [*base, "--pages", "many"], r"--pages: invalid int value", outputs=()),
        Case("out-a-file", SYNTH, ["--out", "{box}/f.txt", "--pages", "1", "--workers", "1"],
             A_FILE, setup=write("f.txt", "x"), outputs=()),
        Case("out-read-only", SYNTH, ["--out", "{box}/ro", "--pages", "1", "--workers", "1"],
             RO, setup=lambda env: read_only(env, "ro"), outputs=()),
        Case("out-empty-name", SYNTH, ["--out", "", "--pages", "1", "--workers", "1"],
             r"--out is empty: name the output folder", outputs=()),
        Case("out-holds-other-data", SYNTH, ["--out", "{box}/data", "--pages", "1", "--workers", "1"],
             r"--out \S+/data holds files that synth_pages did not write \(no readable record of it\): choose "
             r"another --out", setup=data(),
             outputs=()),
        Case("rerun-over-own-output", SYNTH, ["--out", "{box}/out", "--pages", "1", "--workers", "1"], code=0,
             check=exists("out/annotations/L3.json", "out/synth_pages.json"),
             setup=chain(data(name="out"), write("out/synth_pages.json", '{"pages": 3}'))),
    ]


# ----------------------------------------------------------------------------------------------- make_tiny_model.py
TINY = "scripts/make_tiny_model.py"
TINY_EXIT = 2


def tiny_cases() -> list[Case]:
    sizes = r"--hidden >= 64, --vision-hidden >= 32, --layers and --vision-depth >= 1"
    return [
        Case("hidden-0", TINY, ["--out", "{box}/out", "--hidden", "0"], sizes, code=TINY_EXIT, outputs=()),
        Case("hidden-negative", TINY, ["--out", "{box}/out", "--hidden", "-64"], sizes, code=TINY_EXIT, outputs=()),
        Case("layers-0", TINY, ["--out", "{box}/out", "--layers", "0"], sizes, code=TINY_EXIT, outputs=()),
        Case("vision-hidden-16", TINY, ["--out", "{box}/out", "--vision-hidden", "16"], sizes, code=TINY_EXIT,
             outputs=()),
        Case("warmup-negative", TINY, ["--out", "{box}/out", "--vision-warmup-steps", "-1"],
             r"--vision-warmup-steps must be >= 0, got -1", code=TINY_EXIT, outputs=()),
        Case("vision-depth-0", TINY, ["--out", "{box}/out", "--vision-depth", "0"], sizes, code=TINY_EXIT, outputs=()),
        Case("hidden-not-a-number", TINY, ["--out", "{box}/out", "--hidden", "big"], r"--hidden: invalid int value",
             outputs=()),
        Case("out-a-file", TINY, ["--out", "{box}/f.txt"], r"\S*/f\.txt: File exists", code=TINY_EXIT,
             setup=write("f.txt", "x"), outputs=()),
        Case("out-read-only", TINY, ["--out", "{box}/ro/m"], r"\S*/ro/m: (Permission denied|Operation not permitted)",
             code=TINY_EXIT,
             setup=lambda env: read_only(env, "ro"), outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- convert.py
CONVERT = "data_builders/convert.py"
EXPORTS = {"labelstudio": "labelstudio/export.json", "cvat": "cvat/annotations.xml", "labelme": "labelme",
           "coco": "coco/instances.json"}  # in box/x (see `exports`)


def convert_args(*extra: str, fmt: str = "labelstudio", export: str | None = None, out: str = "{box}/out",
                 images: str = "{box}/x/images", mapping: str | None = None) -> list[str]:
    return ["--mapping", mapping or f"{{box}}/x/{fmt}/mapping.yaml", "--export", export or f"{{box}}/x/{EXPORTS[fmt]}",
            "--images", images, "--out", out, *extra]


def exports(env: Env) -> None:
    """box/x: the two pages of tests/fixtures/convert exported by each tool, each tool's mapping beside its export
    (Label Studio's: configs/convert/example.yaml), and their images."""
    copy_fixture("convert", "x")(env)
    shutil.copyfile(ROOT / "configs" / "convert" / "example.yaml", env.box / "x" / "labelstudio" / "mapping.yaml")


def edit_export(fmt: str, *edits: Callable, name: str = "p1.json") -> Callable[[Env], None]:
    """`exports`, then the JSON export of `fmt` (labelme: its file `name`) changed by each edit (set_key style:
    `0.data.image` is task 0's image in Label Studio's list of tasks; {outside} etc. in the values filled in)."""
    def setup(env: Env) -> None:
        exports(env)
        path = env.box / "x" / (f"labelme/{name}" if fmt == "labelme" else EXPORTS[fmt])
        doc = json.loads(path.read_text(encoding="utf-8"))
        for edit in edits:
            edit(doc)
        replace_file(path, env.sub(json.dumps(doc, ensure_ascii=False)))
    return setup


def ls_region(rid: str, edit: Callable[[dict], None], control: str | None = None) -> Callable[[list], None]:
    """An edit of a Label Studio export: the result of region `rid` that holds its shape (rectanglelabels /
    polygonlabels), or the value of its per-region `control` (qid, hand, verdict, ...)."""
    def change(tasks: list) -> None:
        edit(next(r for t in tasks for r in t["annotations"][0]["result"] if r["id"] == rid and (
            r["from_name"] == control if control else r["type"].endswith("labels"))))
    return change


def edit_cvat(*replacements: tuple[str, str]) -> Callable[[Env], None]:
    """`exports`, then the CVAT XML with the first `old` of each (old, new) replaced by `new`."""
    def setup(env: Env) -> None:
        exports(env)
        path = env.box / "x" / EXPORTS["cvat"]
        text = path.read_text(encoding="utf-8")
        for old, new in replacements:
            assert old in text, old
            text = text.replace(old, new, 1)
        replace_file(path, text)
    return setup


def page_image(rel: str, width: int, height: int, kind: str = "PNG") -> Callable[[Env], None]:
    """box/rel: a blank page of width x height (a grey box where an answer would be), in PIL format `kind`."""
    def setup(env: Env) -> None:
        from PIL import Image, ImageDraw

        image = Image.new("RGB", (width, height), "white")
        ImageDraw.Draw(image).rectangle((width // 8, height // 8, width // 2, height // 4), fill="grey")
        buf = io.BytesIO()
        image.save(buf, format=kind)
        replace_file(env.box / rel, buf.getvalue())
    return setup


def cut_short(rel: str, keep: int, fixture: str = "convert") -> Callable[[Env], None]:
    """box/rel: the first `keep` bytes of the same file of a fixture (box/x holds a copy of it)."""
    return lambda env: replace_file(env.box / rel, (env.fixtures[fixture] / Path(rel).relative_to("x")).read_bytes()
                                    [:keep])


def secret_image(env: Env) -> None:
    """outside/p1.jpg: a page image outside the images folder, that no export may make the converter read."""
    shutil.copyfile(env.fixtures["convert"] / "images" / "p1.jpg", env.outside / "p1.jpg")


def earlier_conversion(fmt: str = "cvat") -> Callable[[Env], None]:
    """box/out as an earlier conversion left it."""
    def setup(env: Env) -> None:
        from gbtrain.data.converters import convert, load_mapping

        convert(env.box / "x" / EXPORTS[fmt], load_mapping(env.box / "x" / fmt / "mapping.yaml"), env.box / "out",
                images=env.box / "x" / "images", progress=False)
    return setup


def converted(**expected) -> Callable[[Env, str], str | None]:
    return report_has("out/convert_report.json", status="complete", **expected)


def left_out(n: int, says: str, written: int = 2) -> Callable[[Env, str], str | None]:
    """A lenient conversion that left `n` items out, the first saying `says`, and wrote `written` pages."""
    return converted(pages__written=written,
                     unmapped=lambda u: len(u) == n and re.search(says, u[0]["message"]) is not None)


def convert_cases() -> list[Case]:
    x = exports
    ls, coco = "labelstudio", "coco"
    page1 = r"export\.json \[task 101\]: page left out: "
    escape = "../../../outside/p1.jpg"  # from box/x/images (and from box/x/labelme): tmp/outside
    unmapped = r".*: fix the export or the mapping, or rerun with --lenient"
    mapping_file = "{box}/m.yaml"
    return [
        # the mapping
        Case("mapping-missing", CONVERT, convert_args(mapping="{box}/none.yaml"), r"/none\.yaml: No such file",
             setup=x, outputs=()),
        Case("mapping-a-folder", CONVERT, convert_args(mapping="{box}/x"), r"/x: Is a directory", setup=x,
             outputs=()),
        Case("mapping-malformed", CONVERT, convert_args(mapping=mapping_file), r"bad config \S+/m\.yaml: ",
             setup=chain(x, write("m.yaml", "format: labelstudio\nfields: {id: [qid\n")), outputs=()),
        Case("mapping-not-utf8", CONVERT, convert_args(mapping=mapping_file), r"bad config \S+/m\.yaml: ",
             setup=chain(x, write("m.yaml", b"format: \xff\xfe\n")), outputs=()),
        Case("mapping-unknown-key", CONVERT, convert_args(mapping=mapping_file),
             r"bad config in \S+/m\.yaml: answer_lables: ", setup=chain(x, write("m.yaml", "format: labelstudio\n"
                                                                                    "answer_lables: [answer]\n")),
             outputs=()),
        Case("mapping-without-format", CONVERT, convert_args(mapping=mapping_file),
             r"missing required config value\(s\): format", setup=chain(x, write("m.yaml", "subject: Science\n")),
             outputs=()),
        Case("mapping-format-unknown", CONVERT, convert_args("format=photoshop"),
             r"bad mapping \S+/mapping\.yaml: format: 'photoshop' is not one of labelstudio, cvat", setup=x,
             outputs=()),
        Case("mapping-label-twice", CONVERT, convert_args("question_labels=[answer]"),
             r"question_labels: label 'answer' is also in answer_labels", setup=x, outputs=()),
        Case("mapping-no-answer-label", CONVERT, convert_args("answer_labels=[]"),
             r"answer_labels: name at least one label", setup=x, outputs=()),
        Case("mapping-verdict-unknown", CONVERT, convert_args("verdicts.ok=fine"),
             r"verdicts\.ok: 'fine' is not one of right, wrong", setup=x, outputs=()),
        # no id field: the answers are numbered by their question regions' ids, by position (an export of pages
        # that print no numbers), nothing lost
        Case("mapping-id-field-null", CONVERT, convert_args("fields.id=null"), code=0,
             check=report_has("out/convert_report.json", status="complete", unmapped=[], partial_pages=[]), setup=x),
        Case("mapping-hand-field-null", CONVERT, convert_args("fields.hand=null"),
             r"fields\.hand: required \(the attribute that holds it\)", setup=x, outputs=()),
        Case("mapping-stage-unknown", CONVERT, convert_args("stage=Kindergarten"),
             r"stage: 'Kindergarten' is not a known stage", setup=x, outputs=()),
        Case("mapping-labels-a-number", CONVERT, convert_args("answer_labels=5"),
             r"bad config in \S+/mapping\.yaml: answer_labels: ",
             setup=x, outputs=()),
        Case("override-without-equals", CONVERT, convert_args("subject"), r"overrides must be key=value", setup=x,
             outputs=()),
        Case("override-interpolation", CONVERT, convert_args("subject=${oc.env:HOME}"),
             r"subject: \$\{\.\.\.\} interpolation is not read", setup=x, outputs=()),
        Case("format-unknown", CONVERT, convert_args("--format", "yolo"), r"--format: invalid choice: 'yolo'",
             setup=x, outputs=()),
        Case("format-of-another-tool", CONVERT, convert_args("--format", "cvat"),
             r"export\.json: not an XML file", setup=x, outputs=()),
        # the export
        Case("export-missing", CONVERT, convert_args(export="{box}/none.json"), r"export not found: \S+/none\.json",
             setup=x, outputs=()),
        Case("export-empty", CONVERT, convert_args(), r"export\.json: not a JSON file",
             setup=chain(x, write("x/labelstudio/export.json", "")), outputs=()),
        Case("export-a-zip", CONVERT, convert_args(export="{box}/x/task.zip"), r"task\.zip is a zip archive: unzip it",
             setup=chain(x, write("x/task.zip", b"PK\x03\x04")), outputs=()),
        Case("export-a-folder", CONVERT, convert_args(export="{box}/x/labelstudio"),
             r"--export \S+/labelstudio is a folder: a labelstudio export is one file", setup=x, outputs=()),
        Case("export-not-utf8", CONVERT, convert_args(), r"export\.json: not a JSON file",
             setup=chain(x, write("x/labelstudio/export.json", b'[{"data": {"image": "\xff"}}]')), outputs=()),
        Case("export-bom", CONVERT, convert_args(), code=0, check=converted(records__L3=2),
             setup=chain(x, lambda env: replace_file(env.box / "x/labelstudio/export.json", b"\xef\xbb\xbf" + (
                 env.fixtures["convert"] / EXPORTS[ls]).read_bytes()))),
        Case("export-nested-100000-deep", CONVERT, convert_args(),
             r"export\.json: not a JSON file \(nested too deeply to read \(maximum recursion depth",
             setup=chain(x, write("x/labelstudio/export.json", "[" * 100_000)), outputs=()),
        Case("export-5001-digit-number", CONVERT, convert_args(), r"export\.json: not a JSON file \(Exceeds the limit",
             setup=chain(x, write("x/labelstudio/export.json", '[{"id": ' + "9" * 5001 + "}]")), outputs=()),
        Case("export-json-min", CONVERT, convert_args(), r"export\.json: no task has 'annotations': export with Label "
             r"Studio's \"JSON\" format", setup=chain(x, write("x/labelstudio/export.json",
                                                                '[{"id": 1, "image": "p1.jpg", "label": []}]')),
             outputs=()),
        Case("export-an-object", CONVERT, convert_args(), r"export\.json: not a Label Studio JSON export",
             setup=chain(x, write("x/labelstudio/export.json", '{"tasks": []}')), outputs=()),
        Case("export-no-tasks", CONVERT, convert_args(),
             r"export\.json: no page could be converted \(0 in the export\)",
             setup=chain(x, write("x/labelstudio/export.json", "[]")), outputs=()),
        Case("images-missing", CONVERT, convert_args(images="{box}/noimages"), r"images folder not found: \S+/noimages",
             setup=x, outputs=()),
        # image paths that leave the images folder: never read, never copied into the dataset
        *[Case(f"image-path-{name}", CONVERT, convert_args(),
               page1 + rf"image {re.escape(repr(ref))} is \S+/outside/p1\.jpg, outside the images folder .*--images",
               setup=chain(edit_export(ls, set_key("0.data.image", ref)), secret_image), outputs=())
          for name, ref in (("dotdot", escape), ("url-encoded", escape.replace("..", "%2e%2e")),
                            ("local-files", "/data/local-files/?d=" + escape),
                            ("local-files-encoded", "/data/local-files/?d=" + escape.replace("/", "%2F")),
                            ("backslashes", escape.replace("/", "\\")))],
        Case("image-path-absolute", CONVERT, convert_args(), page1 + r"image file not found: '\S+/outside/p1\.jpg'",
             setup=chain(edit_export(ls, set_key("0.data.image", "{outside}/p1.jpg")), secret_image,
                         lambda env: (env.box / "x/images/p1.jpg").unlink()), outputs=()),
        Case("image-path-dotdot-lenient", CONVERT, convert_args("--lenient"), code=0,
             check=left_out(1, r"outside the images folder", written=1),
             setup=chain(edit_export(ls, set_key("0.data.image", escape)), secret_image)),
        Case("image-symlink-out", CONVERT, convert_args(fmt=coco), r"\[image 'p1\.jpg'\]: page left out: image "
             r"'p1\.jpg' is \S+/outside/p1\.jpg, outside the images folder",
             setup=chain(x, secret_image, lambda env: (env.box / "x/images/p1.jpg").unlink(),
                         lambda env: (env.box / "x/images/p1.jpg").symlink_to(env.outside / "p1.jpg")), outputs=()),
        Case("coco-file-name-dotdot", CONVERT, convert_args(fmt=coco), r"instances\.json \[image '\.\./.*'\]: page "
             r"left out: image .* outside the images folder",
             setup=chain(edit_export(coco, set_key("images.0.file_name", escape)), secret_image), outputs=()),
        Case("cvat-name-dotdot", CONVERT, convert_args(fmt="cvat"), r"annotations\.xml \[image '\.\./.*'\]: page left "
             r"out: image .* outside the images folder",
             setup=chain(edit_cvat(('name="p1.jpg"', f'name="{escape}"')), secret_image), outputs=()),
        Case("labelme-image-path-dotdot", CONVERT, convert_args(fmt="labelme"), r"p1\.json \[image '\.\./.*'\]: page "
             r"left out: image .* outside the images folder",
             setup=chain(edit_export("labelme", set_key("imagePath", escape)), secret_image), outputs=()),
        Case("image-name-ambiguous", CONVERT, convert_args(), page1 + r"image name 'p1\.jpg' matches 2 files under",
             setup=chain(x, make_dir("x/images/a"), make_dir("x/images/b"),
                         lambda env: shutil.copy(env.box / "x/images/p1.jpg", env.box / "x/images/b"),
                         lambda env: (env.box / "x/images/p1.jpg").rename(env.box / "x/images/a/p1.jpg")),
             outputs=()),
        # duplicate ids
        Case("coco-duplicate-image-id", CONVERT, convert_args(fmt=coco), r"instances\.json: two images have id 1 "
             r"\('p1\.jpg' and 'p2\.png'\): give each image its own id",
             setup=edit_export(coco, set_key("images.1.id", 1)), outputs=()),
        Case("ls-duplicate-region-id", CONVERT, convert_args(), r"\[task 101, region 'p1a0'\]: 2 shapes or repeated "
             r"controls share this region id: give each region its own id" + unmapped,
             setup=edit_export(ls, ls_region("p1a1", set_key("id", "p1a0"))), outputs=()),
        Case("ls-duplicate-region-id-lenient", CONVERT, convert_args("--lenient"), code=0,
             check=left_out(1, "share this region id", written=1),
             setup=edit_export(ls, ls_region("p1a1", set_key("id", "p1a0")))),
        # coordinates of the wrong type or size
        *[Case(f"ls-coordinate-{name}", CONVERT, convert_args(),
               r"\[task 101, region 'p1a0'\]: unreadable rectanglelabels coordinates" + unmapped,
               setup=edit_export(ls, ls_region("p1a0", set_key(f"value.{key}", value))), outputs=())
          for name, key, value in (("string", "x", "31.25"), ("bool", "y", True), ("401-digit", "width", 10 ** 401),
                                   ("null", "height", None), ("nan", "x", float("nan")),
                                   ("infinity", "width", float("inf")), ("a-list", "x", [31.25]),
                                   ("rotation-string", "rotation", "90"))],
        Case("ls-polygon-two-points", CONVERT, convert_args(),
             r"\[task 101, region 'p1a2'\]: unreadable polygonlabels coordinates",
             setup=edit_export(ls, ls_region("p1a2", set_key("value.points", [[12.5, 34.4], [52.1, 33.1]]))),
             outputs=()),
        Case("ls-size-a-string", CONVERT, convert_args(),
             r"\[task 101, region 'p1a0'\]: no original_width / original_height",
             setup=edit_export(ls, ls_region("p1a0", set_key("original_width", "480"))), outputs=()),
        Case("coco-bbox-strings", CONVERT, convert_args(fmt=coco),
             r"\[image 'p1\.jpg', annotation 4\]: no polygon segmentation and no bbox",
             setup=edit_export(coco, set_key("annotations.3.bbox", ["150", "80", "60", "40"])), outputs=()),
        Case("coco-bbox-1e999", CONVERT, convert_args(fmt=coco),
             r"\[image 'p1\.jpg', annotation 4\]: no polygon segmentation and no bbox",
             setup=edit_export(coco, set_key("annotations.3.bbox", [float("inf"), 80, 60, 40])), outputs=()),
        Case("coco-category-unknown", CONVERT, convert_args(fmt=coco),
             r"\[image 'p1\.jpg', annotation 4\]: category_id 99 is not in categories",
             setup=edit_export(coco, set_key("annotations.3.category_id", 99)), outputs=()),
        Case("coco-annotation-of-no-image", CONVERT, convert_args(fmt=coco),
             r"instances\.json: annotation 3 names no image of the file \(image_id 99\)",
             setup=edit_export(coco, set_key("annotations.3.image_id", 99)), outputs=()),
        Case("coco-images-an-object", CONVERT, convert_args(fmt=coco), r"instances\.json: not a COCO JSON file",
             setup=edit_export(coco, set_key("images", {"1": "p1.jpg"})), outputs=()),
        Case("cvat-malformed", CONVERT, convert_args(fmt="cvat"), r"annotations\.xml: not an XML file",
             setup=chain(x, write("x/cvat/annotations.xml", "<annotations><image name='p1.jpg'>")), outputs=()),
        Case("cvat-billion-laughs", CONVERT, convert_args(fmt="cvat"), r"annotations\.xml: not an XML file \(",
             setup=chain(x, write("x/cvat/annotations.xml", '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY l0 "lol">'
                                  + "".join(f'<!ENTITY l{i} "' + f"&l{i - 1};" * 10 + '">' for i in range(1, 10))
                                  + "]><annotations>&l9;</annotations>")), outputs=(), limit_s=HOSTILE_S),
        Case("cvat-external-entity", CONVERT, convert_args(fmt="cvat"), r"annotations\.xml: not an XML file \(",
             setup=chain(x, secret_image, write("x/cvat/annotations.xml", '<?xml version="1.0"?><!DOCTYPE a ['
                                                '<!ENTITY s SYSTEM "file://{outside}/p1.jpg">]><annotations><image '
                                                'name="&s;" width="480" height="640"/></annotations>')), outputs=()),
        Case("cvat-video", CONVERT, convert_args(fmt="cvat"), r"annotations\.xml: a 'CVAT for video' export .*"
             r"'CVAT for images 1\.1'", setup=chain(x, write("x/cvat/annotations.xml", "<annotations><track id='0' "
                                                              "label='answer'/></annotations>")), outputs=()),
        Case("cvat-box-nan", CONVERT, convert_args(fmt="cvat"), r"\[image 'p1\.jpg', box #0\]: unreadable box "
             r"coordinates", setup=edit_cvat(('xtl="24.00"', 'xtl="nan"')), outputs=()),
        Case("cvat-polyline", CONVERT, convert_args(fmt="cvat"), r"\[image 'p1\.jpg', polyline #5\]: shape 'polyline' "
             r"cannot be a box: draw a box or polygon",
             setup=edit_cvat(("<polygon", "<polyline"), ("</polygon>", "</polyline>")), outputs=()),
        Case("labelme-not-labelme", CONVERT, convert_args(fmt="labelme"), r"labelme/p1\.json: not a labelme file",
             setup=chain(x, write("x/labelme/p1.json", '{"images": [], "annotations": []}')), outputs=()),
        Case("labelme-empty-folder", CONVERT, convert_args(fmt="labelme", export="{box}/x/none"),
             r"\S+/none: no labelme \*\.json files in this folder", setup=chain(x, make_dir("x/none")), outputs=()),
        Case("labelme-image-data-not-base64", CONVERT, convert_args(fmt="labelme"),
             r"p1\.json \[image '\S+'\]: page left out: imageData is not base64",
             setup=edit_export("labelme", set_key("imageData", "not base64!")), outputs=()),
        Case("labelme-circle", CONVERT, convert_args(fmt="labelme"), r"\[image '\S+', shape #3\]: shape 'circle' "
             r"cannot be a box", setup=edit_export("labelme", set_key("shapes.3.shape_type", "circle")), outputs=()),
        # boxes at and past the image's edge (the reader's 2% tolerance), empty and rotated boxes
        Case("box-past-edge-within-tolerance", CONVERT, convert_args(fmt=coco), code=0, check=converted(records__L3=2),
             setup=edit_export(coco, set_key("annotations.0.bbox", [24, 40, 460.8, 110]))),
        Case("box-past-edge", CONVERT, convert_args(fmt=coco), r"\[image 'p1\.jpg', annotation 1\]: box "
             r"\[24\.0, 40\.0, 494\.0, 150\.0\] lies outside the 480x640 image",
             setup=edit_export(coco, set_key("annotations.0.bbox", [24, 40, 470, 110])), outputs=()),
        Case("box-empty", CONVERT, convert_args(fmt=coco), r"\[image 'p1\.jpg', annotation 4\]: empty box",
             setup=edit_export(coco, set_key("annotations.3.bbox", [150, 80, 0, 40])), outputs=()),
        Case("box-rotated-off-the-page", CONVERT, convert_args(), r"\[task 101, region 'p1q0'\]: box .* lies outside "
             r"the 480x640 image", setup=edit_export(ls, ls_region("p1q0", set_key("value.rotation", 180))),
             outputs=()),
        # the images
        *[Case(f"image-{kind}", CONVERT, convert_args(), page1 + rf"cannot read image \S+/p1\.jpg: {msg}",
               setup=chain(x, damage), outputs=())
          for kind, damage, msg in (("truncated", cut_short("x/images/p1.jpg", 2000), r"image file is truncated"),
                                    ("garbage", write("x/images/p1.jpg", bytes(range(256)) * 16),
                                     "cannot identify image file"),
                                    ("empty", write("x/images/p1.jpg", b""), "cannot identify image file"),
                                    ("bomb", write("x/images/p1.jpg", bomb_png()), r".*(bomb|exceeds limit)"))],
        Case("image-missing", CONVERT, convert_args(),
             page1 + r"image file not found: '/data/upload/7/3f2a9c1e-p1\.jpg' \(looked for .* set --images\)",
             setup=chain(x, lambda env: (env.box / "x/images/p1.jpg").unlink()), outputs=()),
        Case("image-other-size", CONVERT, convert_args(), page1 + r"image \S+/p1\.jpg is 400x600, the export says "
             r"480x640", setup=chain(x, page_image("x/images/p1.jpg", 400, 600)), outputs=()),
        Case("image-bomb-lenient", CONVERT, convert_args("--lenient"), code=0,
             check=left_out(1, "cannot read image", written=1), setup=chain(x, write("x/images/p1.jpg", bomb_png()))),
        Case("image-name-not-ascii", CONVERT, convert_args(fmt=coco), code=0, check=converted(records__L3=2),
             setup=chain(edit_export(coco, set_key("images.0.file_name", "第一页 p1.jpg")),
                         lambda env: (env.box / "x/images/p1.jpg").rename(env.box / "x/images/第一页 p1.jpg"))),
        # the annotations' content
        Case("verdict-unknown", CONVERT, convert_args(), r"\[task 101, region 'p1a0'\]: verdict 'maybe' is not right "
             r"/ wrong / half_right / unanswered / unknown or an alias \(add it under verdicts: in the mapping\)",
             setup=edit_export(ls, ls_region("p1a0", set_key("value.choices", ["maybe"]), control="verdict")),
             outputs=()),
        Case("verdict-an-alias-of-the-mapping", CONVERT, convert_args("verdicts.maybe=unknown"), code=0,
             check=converted(records__L3=2),
             setup=edit_export(ls, ls_region("p1a0", set_key("value.choices", ["maybe"]), control="verdict"))),
        Case("no-transcription", CONVERT, convert_args(), r"\[task 101, region 'p1a0'\]: answer 1-1: no transcription "
             r"\(field 'hand'\); an answer left blank has the verdict unanswered",
             setup=edit_export(ls, ls_region("p1a0", set_key("value.text", []), control="hand")), outputs=()),
        Case("answer-outside-its-question", CONVERT, convert_args(), r"\[task 101, region 'p1a2'\]: answer 5 lies in "
             r"the region of question 2, not of question 5",
             setup=edit_export(ls, ls_region("p1a2", set_key("value.text", ["5"]), control="qid")), outputs=()),
        Case("no-subject", CONVERT, convert_args(fmt=coco), r"\[image 'p1\.jpg'\]: page left out: no subject: set "
             r"subject: in the mapping", setup=edit_export(coco, set_key("images.0.subject", "")), outputs=()),
        Case("every-page-left-out-lenient", CONVERT, convert_args("--lenient", images="{box}/empty"),
             r"export\.json: no page could be converted \(2 in the export\)", setup=chain(x, make_dir("empty")),
             outputs=()),
        # the output folder
        Case("out-is-images", CONVERT, convert_args(out="{box}/x/images"), OVERLAP, setup=x, outputs=()),
        Case("out-inside-images", CONVERT, convert_args(out="{box}/x/images/out"), OVERLAP, setup=x, outputs=()),
        Case("out-holds-images", CONVERT, convert_args(out="{box}/x"), OVERLAP, setup=x, outputs=()),
        Case("out-inside-export-folder", CONVERT, convert_args(fmt="labelme", out="{box}/x/labelme/out"), OVERLAP,
             setup=x, outputs=()),
        Case("out-is-export-file", CONVERT, convert_args(out="{box}/x/labelstudio/export.json"),
             r"export\.json: (File exists|Not a directory)", setup=x, outputs=()),
        *unwritable_out_cases(CONVERT, convert_args, x),
        Case("out-holds-other-files", CONVERT, convert_args(), r"--out \S+/out holds files that convert did not write "
             r"\(no readable record of it\): choose another --out",
             setup=chain(x, write("out/images/mine.jpg", "the user's")), outputs=()),
        *[Case(f"out-report-{name}", CONVERT, convert_args(), r"--out \S+/out holds files that convert did not write "
               r"\(no readable record of it\): choose another --out",
               setup=chain(x, write("out/images/mine.jpg", "the user's"), write("out/convert_report.json", text)),
               outputs=())
          for name, text in (("not-json", "{half"), ("a-list", "[]"), ("of-another-tool", '{"status": "ok"}'),
                             ("nested", "[" * 100_000))],
        Case("out-earlier-conversion", CONVERT, convert_args(fmt=coco), code=0,
             check=all_of(converted(format="coco"), exists("out/notes.txt")),
             setup=chain(x, earlier_conversion("cvat"), write("out/notes.txt", "kept"))),
    ]


# ----------------------------------------------------------------------------------------------- preview.py
PREVIEW = "data_builders/preview.py"


def preview_args(*extra: str, data: str = "{box}/data", out: str = "{box}/out") -> list[str]:
    return ["--data", data, "--out", out, "--pages", "2", *extra]


def printed(pattern: str) -> Callable[[Env, str], str | None]:
    """What the command printed (stdout) matches `pattern`."""
    return lambda env, stdout: None if re.search(pattern, stdout) else f"stdout does not match {pattern!r}"


def previewed(level: str = "L3", drawn: int = 1, **levels) -> Callable[[Env, str], str | None]:
    """summary.json says `drawn` records of `level` were drawn (each a file inside out/) and has `levels` (a
    level's counts: L1__records=3); `problems=n`: that many records rejected in all."""
    problems = levels.pop("problems", None)

    def check(env: Env, stdout: str) -> str | None:
        found = report_has("out/summary.json", drawn__level=level, drawn__files=lambda f: len(f) == drawn and all(
            (env.box / "out").resolve() in Path(p).resolve().parents and Path(p).is_file() for p in f),
            **{f"levels__{k}": v for k, v in levels.items()})(env, stdout)
        if found or problems is None:
            return found
        summary = json.loads((env.box / "out/summary.json").read_text(encoding="utf-8"))
        got = sum(len(s["problems"]) for s in summary["levels"].values())
        return None if got == problems else f"{got} records rejected, not {problems}"
    return check


def earlier_preview(env: Env) -> None:
    """box/out as an earlier preview of box/data left it."""
    from gbtrain.data.preview import preview

    preview(env.box / "data", env.box / "out", pages=1)


def preview_cases() -> list[Case]:
    d = data()
    rejected = previewed(problems=1)
    return [
        # options
        Case("pages-negative", PREVIEW, preview_args("--pages", "-1"), r"--pages -1: must be at least 0", setup=d,
             outputs=()),
        Case("pages-not-a-number", PREVIEW, preview_args("--pages", "all"), r"--pages: invalid int value: 'all'",
             setup=d, outputs=()),
        Case("pages-0", PREVIEW, preview_args("--pages", "0"), code=0, check=previewed(drawn=0), setup=d),
        Case("pages-a-billion", PREVIEW, preview_args("--pages", "1000000000", "--level", "L1"),
             r"--pages 1000000000: must be at most 10,000", setup=d, outputs=()),
        Case("pages-more-than-the-level", PREVIEW, preview_args("--pages", "10000", "--level", "L1"), code=0,
             check=previewed("L1", drawn=3), setup=d),
        Case("level-unknown", PREVIEW, preview_args("--level", "L4"), r"--level: invalid choice: 'L4'", setup=d,
             outputs=()),
        Case("level-absent", PREVIEW, preview_args("--level", "L3"), r"--level L3: \S+/data has no L3 annotations "
             r"\(it has L1\)", setup=data({"L1": 2}), outputs=()),
        Case("data-not-given", PREVIEW, ["--out", "{box}/out"], r"the following arguments are required: --data",
             outputs=()),
        Case("data-missing", PREVIEW, preview_args(data="{box}/nodata"), r"data directory not found: \S+/nodata",
             outputs=()),
        Case("data-a-file", PREVIEW, preview_args(data="{box}/f.txt"), r"data directory not found: \S+/f\.txt",
             setup=write("f.txt", "x"), outputs=()),
        Case("data-empty", PREVIEW, preview_args(), r"annotations: no L1/L2/L3 annotation files",
             setup=make_dir("data"), outputs=()),
        Case("config-unknown-key", PREVIEW, ["--config", "{box}/c.yaml", *preview_args()],
             r"--config \S+/c\.yaml or key=value: unknown key\(s\) colour",
             setup=chain(d, write("c.yaml", "colour: 1\n")), outputs=()),
        # the output folder
        Case("out-is-data", PREVIEW, preview_args(out="{box}/data"), OVERLAP, setup=d, outputs=()),
        Case("out-inside-data", PREVIEW, preview_args(out="{box}/data/images/preview"), OVERLAP, setup=d, outputs=()),
        Case("out-holds-data", PREVIEW, preview_args(data="{box}/out/data"), OVERLAP, setup=data(name="out/data"),
             outputs=()),
        *unwritable_out_cases(PREVIEW, preview_args, d),
        Case("out-holds-other-files", PREVIEW, preview_args(), r"--out \S+/out holds files that are not a preview "
             r"\(no readable summary\.json\): choose another --out",
             setup=chain(d, write("out/p00000.png", "the user's"), write("out/summary.json", '{"total": 3}')),
             outputs=()),
        Case("rerun-over-own-preview", PREVIEW, preview_args("--pages", "1"), code=0, check=previewed(),
             setup=chain(d, earlier_preview)),
        # annotation files the reader cannot read at all: refused, the file named
        *[Case(f"annotations-{name}", PREVIEW, preview_args(), rf"L1\.json: malformed JSON{msg}",
               setup=chain(d, write("data/annotations/L1.json", text)), outputs=())
          for name, text, msg in (("truncated", '[{"id": "p', ""), ("not-utf8", b'[{"id": "\xff"}]', ""),
                                  ("nested-100000-deep", "[" * 100_000, ": maximum recursion depth"),
                                  ("5001-digit-number", '[{"id": "r", "width": ' + "9" * 5001 + "}]",
                                   r": Exceeds the limit \(4300 digits\)"),
                                  ("bom", b"\xef\xbb\xbf[]", ": Unexpected UTF-8 BOM"))],
        Case("annotations-an-object", PREVIEW, preview_args(), r"L1\.json: expected a list of records",
             setup=chain(d, write("data/annotations/L1.json", '{"records": []}')), outputs=()),
        # records the reader rejects: listed (file and record), the others counted and drawn
        *[Case(f"record-{name}", PREVIEW, preview_args(), code=0, check=rejected, setup=chain(d, *damage))
          for name, damage in (
              ("id-null", [edit_record("L1", 1, set_key("id", None))]),
              ("id-duplicated", [edit_record("L1", 1, set_key("id", "p00000_q1"))]),
              ("hand-a-list", [edit_record("L1", 0, set_key("marks.0.attributes.hand", ["4"]))]),
              ("box-outside", [edit_record("L2", 0, set_key("marks.0.bbox_2d", [0, 0, 99999, 5]))]),
              ("box-nan", [edit_record("L1", 0, set_key("marks.0.bbox_2d", [float("nan"), 0, 5, 5]))]),
              ("width-a-string", [edit_record("L2", 1, set_key("width", "577"))]),
              ("other-size", [edit_record("L1", 2, set_key("width", 578))]),
              ("image-traversal", [edit_record("L1", 0, set_key("image", "../../../outside/keep.txt"))]),
              ("image-absolute", [edit_record("L1", 0, set_key("image", "/etc/hostname"))]),
              ("image-missing", [damage_image("missing", "L1", 1)]),
              ("image-truncated", [damage_image("truncated", "L1", 1)]),
              ("image-broken-stream", [damage_image("broken-stream", "L1", 0)]),
              ("image-garbage", [damage_image("garbage", "L1", 2)]),
              ("image-bomb", [damage_image("bomb", "L1", 0)]),
              ("image-symlink-out", [damage_image("symlink-out", "L1", 2)]),
              ("level-l9", [edit_record("L1", 0, set_key("level", "L9"))]),
              ("not-an-object", [edit_level("L1", lambda raw: raw.__setitem__(1, [1, 2]))]))],
        Case("page-rejected", PREVIEW, preview_args(), code=0, check=previewed(drawn=0, problems=1),
             setup=chain(d, damage_image("truncated", "L3", 0))),
        # what a drawn record may hold
        Case("id-climbs-out", PREVIEW, preview_args(), code=0, check=previewed(),
             setup=chain(d, edit_record("L3", 0, set_key("id", "x/" + "../" * 12 + "outside/" + PROBE)))),
        Case("id-absolute", PREVIEW, preview_args(), code=0, check=previewed(),
             setup=chain(d, edit_record("L3", 0, set_key("id", f"/tmp/{PROBE}")))),
        Case("id-nul-newline-not-ascii", PREVIEW, preview_args(), code=0, check=previewed(),
             setup=chain(d, edit_record("L3", 0, set_key("id", "第\u0000一\n页")))),
        Case("transcription-1mb", PREVIEW, preview_args(), code=0, check=previewed(),
             setup=chain(d, edit_record("L3", 0, set_key("marks.0.attributes.hand", "x" * 1_000_000)))),
        # the record the converter left beside the data
        *[Case(f"conversion-report-{name}", PREVIEW, preview_args(), code=0,
               check=all_of(previewed(), printed(r"convert_report\.json cannot be read|did not finish")),
               setup=chain(d, write("data/convert_report.json", text)))
          for name, text in (("not-json", "{half"), ("a-list", "[]"), ("nested", "[" * 100_000),
                             ("unmapped-a-number", '{"status": "complete", "unmapped": 5}'),
                             ("unfinished", '{"status": "unfinished"}'))],
    ]


# ----------------------------------------------------------------------------------------------- grade_pages.py
GRADE = "eval/grade_pages.py"
GRADE_BASE = {"--model": "graded", "--backend": "openai", "--base-url": "{url}", "--pages": "{box}/pages",
              "--out": "{box}/out", "--coords": "qwen25", "--min-pixels": str(TEST_MIN_PIXELS),
              "--max-pixels": str(TEST_MAX_PIXELS)}


def grade_args(*flags: str, **opts: str | None) -> list[str]:
    """grade_pages's arguments: GRADE_BASE with options changed (as eval_args)."""
    return option_args(GRADE_BASE, flags, opts)


def pages(*names: str, width: int = 200, height: int = 280) -> Callable[[Env], None]:
    """box/pages/NAME for each name: a blank page (PNG or JPEG by its suffix)."""
    kinds = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}
    return chain(*(page_image(f"pages/{n}", width, height, kinds.get(Path(n).suffix.lower(), "PNG")) for n in names))


def sized_pdf(rel: str, *sizes_pt: tuple[float, float], keep: int | None = None) -> Callable[[Env], None]:
    """box/rel: a PDF of blank pages of these sizes in points (a file of a few hundred bytes asks for any size), cut
    to its first `keep` bytes when given."""
    def setup(env: Env) -> None:
        import pypdfium2 as pdfium

        pdf = pdfium.PdfDocument.new()
        for width, height in sizes_pt:
            pdf.new_page(width, height)
        buf = io.BytesIO()
        pdf.save(buf)
        pdf.close()
        replace_file(env.box / rel, buf.getvalue()[:keep])
    return setup


def earlier_grading(*flags: str, **opts: str | None) -> Callable[[Env], None]:
    """box/out as an earlier grade_pages run with these arguments left it."""
    def setup(env: Env) -> None:
        from gbtrain.cli import parse_options
        from gbtrain.grading.grade import GradeRun, grade_pages

        grade_pages(parse_options(GradeRun, None, [env.sub(a) for a in grade_args(*flags, **opts)]), progress=False)
    return setup


def graded(**expected) -> Callable[[Env, str], str | None]:
    return report_has("out/summary.json", **expected)


def unreadable(n: int, says: str, pages: int = 1) -> Callable[[Env, str], str | None]:
    """`pages` graded and `n` pages skipped as unreadable, the first saying `says`."""
    return graded(pages=pages, unreadable=lambda u: len(u) == n and re.search(says, u[0]["error"]) is not None)


def csv_column(rel: str, column: str, want: Callable[[list[str]], bool]) -> Callable[[Env, str], str | None]:
    """The values of `column` in the CSV file box/rel satisfy `want`."""
    def check(env: Env, _stdout: str) -> str | None:
        import csv

        path = env.box / rel
        if not path.is_file():
            return f"{rel} was not written"
        with open(path, encoding="utf-8", newline="") as f:
            values = [row[column] for row in csv.DictReader(f)]
        return None if want(values) else f"{rel} {column} = {values!r}"
    return check


def edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    """The JSON file at `path` changed by `edit`, as a hand edit leaves it."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    replace_file(path, json.dumps(doc, ensure_ascii=False))


def page_items(name: str, want: Callable[[list[dict]], bool]) -> Callable[[Env, str], str | None]:
    """The items of out/pages/NAME.json satisfy `want`."""
    def check(env: Env, _stdout: str) -> str | None:
        path = env.box / "out" / "pages" / f"{name}.json"
        if not path.is_file():
            return f"{path.name} was not written"
        items = json.loads(path.read_text(encoding="utf-8"))["items"]
        return None if want(items) else f"{path.name} items = {items!r}"[:600]
    return check


def grade_cases() -> list[Case]:
    p = pages("a.png")
    ab = pages("a.png", "b.jpg")
    key = "{box}/key.yaml"
    return [
        # options
        *[Case(f"option-{flag}-{v}", GRADE, grade_args(**{flag: v}), rf"--{flag.replace('_', '-')} {re.escape(v)}"
               r"(\.0)?: (must be at least|choose 36-600)", setup=p, outputs=())
          for flag, v in (("pdf_dpi", "0"), ("pdf_dpi", "nan"), ("pdf_dpi", "inf"), ("pdf_dpi", "-200"),
                          ("pdf_dpi", "601"), ("batch_size", "0"), ("batch_size", "-1"), ("max_tokens", "0"),
                          ("min_pixels", "0"), ("max_pixels", "-1"), ("concurrency", "0"), ("request_timeout", "0"),
                          ("request_timeout", "nan"), ("max_retries", "-1"), ("max_model_len", "0"))],
        Case("min-over-max", GRADE, grade_args(min_pixels="90000", max_pixels="1000"), r"min_pixels <= max_pixels",
             setup=p, outputs=()),
        Case("pdf-dpi-not-a-number", GRADE, grade_args(pdf_dpi="high"), r"--pdf-dpi: invalid float value: 'high'",
             setup=p, outputs=()),
        Case("backend-unknown", GRADE, grade_args(backend="tgi"), r"--backend: invalid choice: 'tgi'", setup=p,
             outputs=()),
        Case("coords-unknown", GRADE, grade_args(coords="pixels"), r"--coords 'pixels': unknown coordinate convention",
             setup=p, outputs=()),
        Case("coords-not-given", GRADE, grade_args(coords=None), r"cannot tell the coordinate convention of 'graded'; "
             r"pass --coords", setup=p, outputs=()),
        Case("model-missing", GRADE, grade_args(model="{box}/nomodel", backend="hf"), r"model not found: \S+/nomodel",
             setup=p, outputs=()),
        # the pages folder
        Case("pages-missing", GRADE, grade_args(pages="{box}/nopages"), r"pages folder not found: \S+/nopages",
             outputs=()),
        Case("pages-a-file", GRADE, grade_args(pages="{box}/a.png"), r"pages folder not found: \S+/a\.png",
             setup=page_image("a.png", 200, 280), outputs=()),
        Case("pages-empty", GRADE, grade_args(), r"pages: no pages \(image files \.jpg, .*, or PDF files\)",
             setup=make_dir("pages"), outputs=()),
        Case("pages-only-other-files", GRADE, grade_args(),
             r"pages: no pages \(image files \.jpg, .*, or PDF files\)",
             setup=chain(write("pages/notes.txt", "x"), page_image("pages/._a.png", 20, 20),
                         page_image("pages/.thumbs/t.png", 20, 20), page_image("pages/scan.gif", 20, 20, "GIF")),
             outputs=()),
        Case("pages-symlink-loop", GRADE, grade_args(), code=0, check=graded(pages=1),
             setup=chain(p, lambda env: (env.box / "pages/again").symlink_to(env.box / "pages"))),
        Case("only-unreadable-pages", GRADE, grade_args(), r"pages: no page could be graded \(2 unreadable, each "
             r"named in \S+/out/summary\.json\)",
             setup=chain(write("pages/a.png", bomb_png()), write("pages/b.pdf", b"%PDF-1.4 no more"))),
        # pages that cannot be read: skipped, counted and listed, the others graded
        *[Case(f"page-{name}", GRADE, grade_args(), code=0, check=unreadable(1, says), setup=chain(p, damage))
          for name, damage, says in (
              ("truncated", lambda env: replace_file(env.box / "pages/b.png", (env.box / "pages/a.png").read_bytes()
                                                     [:300]), r"cannot read page b\.png: "),
              ("garbage", write("pages/b.jpg", bytes(range(256)) * 16), r"cannot read page b\.jpg: cannot identify"),
              ("empty", write("pages/b.png", b""), r"cannot read page b\.png"),
              ("bomb", write("pages/b.png", bomb_png()), r"cannot read page b\.png: .*(bomb|exceeds limit)"),
              ("text", write("pages/b.jpg", "not an image\n"), r"cannot read page b\.jpg"),
              ("pdf-damaged", write("pages/b.pdf", b"%PDF-1.4 not really"), r"cannot open PDF b\.pdf"),
              ("pdf-empty", write("pages/b.pdf", b""), r"cannot open PDF b\.pdf"),
              ("pdf-cut-short", sized_pdf("pages/b.pdf", (595, 842), keep=200), r"cannot open PDF b\.pdf"),
              ("pdf-larger-than-a0", sized_pdf("pages/b.pdf", (10_000, 10_000)),
               r"cannot read page b\.pdf-p1: it is 10000 x 10000 pt, larger than A0 \(2384 x 3370 pt\); split or "
               r"scale"),
              ("pdf-a-sliver-larger-than-a0", sized_pdf("pages/b.pdf", (14_400, 3)), r"larger than A0"),
              ("aspect-300", page_image("pages/b.png", 3000, 10), r"page b\.png: the image is 3000x10, an aspect "
                                                                   r"ratio of 300: .*crop or pad it"),
              ("pdf-aspect-800", sized_pdf("pages/b.pdf", (2384, 3)), r"page b\.pdf-p1: the image is \d+x\d+, an "
                                                                      r"aspect ratio of \d+"))],
        Case("pdf-without-pages", GRADE, grade_args(), r"pages: no page could be graded \(1 unreadable",
             setup=sized_pdf("pages/b.pdf")),
        Case("pdf-page-1pt", GRADE, grade_args(), code=0, check=graded(pages=2), setup=chain(p, sized_pdf(
            "pages/b.pdf", (1, 1)))),
        Case("page-name-a-formula", GRADE, grade_args(), code=0,
             check=all_of(csv_column("out/grades.csv", "page", lambda v: v == ["'=HYPERLINK(1).png"] * 2),
                          csv_column("out/totals.csv", "page", lambda v: v == ["'=HYPERLINK(1).png"])),
             setup=pages("=HYPERLINK(1).png")),
        Case("page-name-not-utf8", GRADE, grade_args(), code=0, check=graded(pages=2),
             setup=chain(p, lambda env: os.link(env.box / "pages/a.png",
                                                os.fsdecode(os.fsencode(env.box / "pages") + b"/\xff\xfe.png")))),
        Case("page-name-not-ascii", GRADE, grade_args(), code=0, check=graded(pages=1), setup=pages("第一页 #1.png")),
        # the answer key
        Case("key-missing", GRADE, grade_args(answer_key=key), r"/key\.yaml: No such file or directory", setup=p,
             outputs=()),
        Case("key-a-folder", GRADE, grade_args(answer_key="{box}/key.json"), r"/key\.json: Is a directory",
             setup=chain(p, make_dir("key.json")), outputs=()),
        Case("key-another-suffix", GRADE, grade_args(answer_key="{box}/key.txt"),
             r"--answer-key \S+/key\.txt: name a \.yaml, \.yml or \.json file",
             setup=chain(p, write("key.txt", "1: 2")), outputs=()),
        *[Case(f"key-{name}", GRADE, grade_args(answer_key=f"{{box}}/key{suffix}"), rf"--answer-key \S+/key"
               rf"{re.escape(suffix)}: {msg}", setup=chain(p, write(f"key{suffix}", text)), outputs=())
          for name, suffix, text, msg in (
              ("a-list", ".yaml", "- 1\n- 2\n", "must map question ids to reference answers"),
              ("empty", ".yaml", "", "must map question ids"), ("empty-json", ".json", "{}", "must map question ids"),
              ("a-number", ".json", "42", "must map question ids"),
              ("nested-value", ".yaml", "1: [a, b]\n", r"question '1': the reference answer must be one value, not "
                                                       r"list"),
              ("nested-object", ".json", '{"1": {"a": 1}}', r"question '1': unknown key 'a' \(a question's mapping "
                                                             r"holds answer, full_score, rubric, question_type, "
                                                             r"page\)"),
              ("full-score-zero", ".yaml", "1: {answer: 7, full_score: 0}\n",
               "question '1': full_score '0' must be a finite number above 0"),
              ("malformed-yaml", ".yaml", "1: [a\n2: b", "cannot be read"),
              ("malformed-json", ".json", '{"1": ', "cannot be read"),
              ("not-utf8", ".yaml", b"1: \xff\xfe\n", "cannot be read"),
              ("nested-100000-deep-json", ".json", "[" * 100_000, "cannot be read"),
              ("nested-100000-deep-yaml", ".yaml", "[" * 100_000, "cannot be read"),
              ("duplicated-question-yaml", ".yaml", "1: 7\n2: 5\n1: 8\n", "question '1' appears twice"),
              ("duplicated-question-json", ".json", '{"1": "7", "1": "8"}', "question '1' appears twice"),
              ("duplicated-question-quoted", ".yaml", "1: a\n'1': b\n", "question '1' appears twice"),
              ("key-a-list", ".yaml", "[1, 2]: x\n", "cannot be read"))],
        Case("key-bom", GRADE, grade_args(answer_key="{box}/key.json"), code=0,
             check=report_has("out/run.json", mode="answer-based"),
             setup=chain(p, write("key.json", b'\xef\xbb\xbf{"1": "7"}'))),
        Case("key-5001-digit-answer", GRADE, grade_args(answer_key="{box}/key.json"), code=0,
             check=report_has("out/run.json", mode="answer-based"),
             setup=chain(p, write("key.json", '{"1": ' + "9" * 5001 + "}"))),
        Case("key-yaml-values-as-written", GRADE, grade_args(answer_key=key), code=0,
             check=report_has("out/run.json", mode="answer-based"),
             setup=chain(p, write("key.yaml", '1: 1.10\n2: yes\n3:\n"=4": =HYPERLINK("x")\n'))),
        # the output folder
        Case("out-is-pages", GRADE, grade_args(out="{box}/pages"), OVERLAP, setup=p, outputs=()),
        Case("out-inside-pages", GRADE, grade_args(out="{box}/pages/graded"), OVERLAP, setup=p, outputs=()),
        Case("out-holds-pages", GRADE, grade_args(pages="{box}/out/pages"), OVERLAP,
             setup=page_image("out/pages/a.png", 200, 280), outputs=()),
        *unwritable_out_cases(GRADE, grade_args, p),
        Case("out-holds-an-evaluation", GRADE, grade_args(), r"--out \S+/out holds an evaluation \(predictions/\): "
             r"choose another --out", setup=chain(p, earlier_run()), outputs=()),
        *[Case(f"out-holds-users-pages{flag}", GRADE, grade_args(*[flag] if flag else []),
               NOT_VOUCHED.format(tool="grade_pages"),
               setup=chain(p, write("out/pages/scan-notes.json", "the user's"), write("out/overlays/marked.png", "x")),
               outputs=("out/.lock",))
          for flag in ("", "--overwrite")],
        Case("run-record-broken", GRADE, grade_args("--overwrite"), NOT_VOUCHED.format(tool="grade_pages"),
             setup=chain(p, earlier_grading(), write("out/run.json", "{half")), outputs=("out/.lock",)),
        Case("run-record-nested", GRADE, grade_args("--overwrite"), NOT_VOUCHED.format(tool="grade_pages"),
             setup=chain(p, earlier_grading(), write("out/run.json", "[" * 100_000)), outputs=("out/.lock",)),
        Case("run-record-of-run-eval", GRADE, grade_args("--overwrite"), NOT_VOUCHED.format(tool="grade_pages"),
             setup=chain(p, earlier_grading(), lambda env: replace_file(env.box / "out/run.json", json.dumps(
                 json.loads((env.box / "out/run.json").read_text()) | {"tool": "run_eval"}))), outputs=("out/.lock",)),
        Case("rerun-other-key", GRADE, grade_args(answer_key=key), r"holds work made otherwise \(.*mode: "
             r"'answer-free' there, 'answer-based' now.*\): choose another --out, or pass --overwrite",
             setup=chain(p, earlier_grading(), write("key.yaml", "1: 7\n")), outputs=("out/.lock",)),
        Case("rerun-other-dpi", GRADE, grade_args(pdf_dpi="100"),
             r"made otherwise \(pdf_dpi: 200(\.0)? there, 100\.0 now",
             setup=chain(p, earlier_grading()), outputs=("out/.lock",)),
        Case("rerun-other-key-overwrite", GRADE, grade_args("--overwrite", answer_key=key), code=0,
             check=all_of(report_has("out/run.json", mode="answer-based"), printed(r"graded 1 pages now")),
             setup=chain(p, earlier_grading(), write("key.yaml", "1: 7\n"))),
        Case("rerun-resumes", GRADE, grade_args(), code=0,
             check=all_of(graded(pages=2), printed(r"graded 1 pages now")),
             setup=chain(p, earlier_grading(), pages("b.jpg"))),
        Case("page-file-damaged", GRADE, grade_args(),
             r"pages/a\.png\.json: not a page file eval/grade_pages\.py wrote "
             r"\(damaged, or another program's\): grade the pages again \(grade_pages --overwrite\), or choose another "
             r"--out",
             setup=chain(ab, earlier_grading(), write("out/pages/a.png.json", '{"page": "a.png"')),
             outputs=("out",)),
        Case("page-file-nested", GRADE, grade_args(), r"pages/a\.png\.json: not a page file eval/grade_pages\.py wrote",
             setup=chain(ab, earlier_grading(), write("out/pages/a.png.json", "[" * 100_000)), outputs=("out",)),
        Case("out-busy", GRADE, grade_args(), r"in use by another evaluation \(pid 4242\).*another --out",
             setup=chain(p, hold_lock)),
        # the endpoint's replies: hostile ones are counted, never written as formulas, never leak the key
        Case("reply-formula", GRADE, grade_args(model="formula"), code=0,
             check=all_of(csv_column("out/grades.csv", "text", lambda v: v == ["'=HYPERLINK(\"http://x.example/\","
                                                                                 "\"7\")"]),
                          csv_column("out/grades.csv", "answer", lambda v: v == ["'@SUM(A1:A9)"]),
                          csv_column("out/grades.csv", "question_id", lambda v: v == ["'+1+cmd|' /C calc'!A0"])),
             setup=p),
        Case("reply-html", GRADE, grade_args(model="html"), code=0,
             check=page_items("a.png", lambda items: items[0]["text"] == "<script>alert(1)</script>"), setup=p),
        Case("reply-huge", GRADE, grade_args(model="huge"), code=0, check=graded(pages=1, unparsable=1,
                                                                                per_page__0__status="too_large"),
             setup=p, limit_s=HOSTILE_S),
        Case("reply-deep", GRADE, grade_args(model="deep"), code=0,
             check=graded(unparsable=1, per_page__0__status="too_deep"), setup=p, limit_s=HOSTILE_S),
        Case("reply-big-numbers", GRADE, grade_args(model="bignum"), code=0,
             check=page_items("a.png", lambda items: len(items) == 1 and items[0]["box"] is None), setup=p),
        Case("reply-lone-surrogate", GRADE, grade_args(model="surrogate"), code=0, check=graded(unparsable=1), setup=p),
        Case("reply-lone-surrogate-in-text", GRADE, grade_args(model="surrogate-text"), code=0,
             check=graded(pages=1, items=1), setup=p),
        Case("reply-null-content", GRADE, grade_args(model="null"), code=0,
             check=graded(unparsable=1, per_page__0__status="empty"), setup=p),
        Case("endpoint-refuses", GRADE, grade_args(model="refuse"), code=0,
             check=graded(errors=2, per_page__0__status="error"), setup=ab),
        Case("endpoint-401", GRADE, grade_args(model="auth"), r"endpoint http://127\.0\.0\.1:\d+/v1 answered 401 "
             r".*API key", setup=p, outputs=("out",)),
        Case("endpoint-404-model", GRADE, grade_args(model="missing"), r"endpoint .* answered 404 .*model name",
             setup=p, outputs=("out",)),
        Case("endpoint-echoes-the-key-400", GRADE, grade_args("--api-key-env", "GBTRAIN_TEST_KEY", model="echo-key"),
             code=0, check=graded(errors=1), setup=p),
        Case("endpoint-echoes-the-key-401", GRADE, grade_args("--api-key-env", "GBTRAIN_TEST_KEY",
                                                                model="echo-key-401"),
             r"endpoint http://127\.0\.0\.1:\d+/v1 answered 401 .*\*\*\*.*API key", setup=p, outputs=("out",)),
        Case("endpoint-credentials-in-url", GRADE, grade_args(base_url="{cred_url}"), code=0,
             check=report_has("out/run.json", base_url=lambda u: "user" not in u), setup=p),
        Case("endpoint-key-in-query", GRADE, grade_args(base_url="{url}?api_key=" + SECRET), code=0,
             check=report_has("out/summary.json", run__base_url=lambda u: u.endswith("?api_key=***")), setup=p),
    ]



def student_cases() -> list[Case]:
    """grade_pages's --students manifest and --student-pattern (issue 57): every way a manifest or a pattern can
    fail names the flag, the file and the line; a pattern that backtracks ends within its time limit."""
    ab = pages("a.png", "b.jpg")
    folders = pages("ann/1.png", "ann/2.png", "bo/1.png")
    manifest = "{box}/students.csv"
    long_name = "a" * 40 + "!.png"
    return [
        Case("students-and-pattern", GRADE, grade_args(students=manifest, student_pattern="^(.)"),
             r"--students and --student-pattern: give one", setup=chain(ab, write("students.csv", "file,student\n")),
             outputs=()),
        *[Case(f"student-pattern-{name}", GRADE, grade_args(student_pattern=pattern), message, setup=setup)
          for name, pattern, message, setup in (
              ("empty", "", r"--student-pattern is empty: give a pattern whose first group names the student", ab),
              ("blank", "   ", r"--student-pattern is empty", ab),
              ("not-a-regex", "^([^/]+", r"--student-pattern '\^\(\[\^/\]\+': not a regular expression", ab),
              ("unbalanced", "a)", r"--student-pattern 'a\)': not a regular expression", ab),
              ("names-nobody", "^(zz)", r"--student-pattern '\^\(zz\)' names no student in 'a\.png' \(2 page files\)",
               ab),
              ("empty-group", "^()", r"--student-pattern '\^\(\)' names no student in 'a\.png'", ab),
              ("group-not-taken", "^(x)?a", r"names no student in 'a\.png' \(2 page files\)", ab),
              # the regex module (re's syntax) answers ^(a+)+$ at once where re backtracks for ever; ^(a|aa)+$ it
              # cannot: the search's time limit ends it
              ("nested-repeat", "^(a+)+$", r"--student-pattern '\^\(a\+\)\+\$' names no student in 'a{40}!\.png'",
               pages(long_name)),
              ("backtracks", "^(a|aa)+$", r"--student-pattern '\^\(a\|aa\)\+\$' took over 1 s on 'a{40}!\.png' "
                                          r"\(a pattern that backtracks", pages(long_name)),
              ("one-folder-misses", "^([^/]+)/", r"names no student in 'loose\.png' \(1 page files\)",
               chain(folders, pages("loose.png"))))],
        Case("student-pattern-a-folder-each", GRADE, grade_args(student_pattern="^([^/]+)/"), code=0,
             check=all_of(graded(pages=3), csv_column("out/students.csv", "student", lambda v: v == ["ann", "bo"]),
                          csv_column("out/students.csv", "pages", lambda v: v == ["2", "1"])),
             setup=folders),
        Case("student-pattern-no-group", GRADE, grade_args(student_pattern="^[a-z]+"), code=0,
             check=csv_column("out/students.csv", "student", lambda v: sorted(v) == ["ann", "bo"]), setup=folders),
        *[Case(f"students-{name}", GRADE, grade_args(students=manifest), message,
               setup=chain(ab, write("students.csv", text)) if text is not None else ab)
          for name, text, message in (
              ("missing", None, r"--students \S+/students\.csv: cannot be read \(.*No such file or directory"),
              ("empty-file", "", r"--students \S+/students\.csv: needs the columns file and student"),
              ("header-only", "file,student\n", r"--students \S+/students\.csv: needs the columns file and student"),
              ("no-student-column", "file,name\na.png,Ann\n", r"needs the columns file and student"),
              ("named-twice", "file,student\na.png,Ann\na.png,Bo\nb.jpg,Bo\n",
               r"--students \S+/students\.csv line 3: 'a\.png' is named twice: keep one row per file"),
              ("a-row-for-no-page", "file,student\na.png,Ann\nb.jpg,Bo\nc.png,Cy\n",
               r"line 4: 'c\.png' is no page file under --pages"),
              ("a-path-outside", "file,student\n../a.png,Ann\nb.jpg,Bo\n",
               r"line 2: '\.\./a\.png' is no page file under --pages"),
              ("blank-student", "file,student\na.png,  \nb.jpg,Bo\n", r"line 2: no student for 'a\.png'"),
              ("a-page-left-out", "file,student\na.png,Ann\n",
               r"--students \S+/students\.csv: no student for 'b\.jpg' \(1 page files\): add a row for each"),
              ("not-utf8", b"file,student\na.png,\xff\xfe\nb.jpg,Bo\n",
               r"--students \S+/students\.csv: cannot be read"),
              ("unclosed-quote", 'file,student\na.png,"Ann\nb.jpg,Bo\n', r"--students \S+/students\.csv: "
                                                                          r"(cannot be read|no student for)"),
              ("a-short-row", "file,student\na.png\nb.jpg,Bo\n", r"line 2: no student for 'a\.png'"))],
        Case("students-a-folder", GRADE, grade_args(students=manifest), r"--students \S+/students\.csv: cannot be read",
             setup=chain(ab, make_dir("students.csv"))),
        Case("students-flag-empty", GRADE, grade_args(students=""), r"--students is empty: name the CSV manifest",
             setup=ab),
        Case("students-bom-crlf", GRADE, grade_args(students=manifest), code=0,
             check=csv_column("out/students.csv", "student", lambda v: sorted(v) == ["Ann", "Bo"]),
             setup=chain(ab, write("students.csv", b"\xef\xbb\xbffile,student\r\na.png,Ann\r\nb.jpg,Bo\r\n"))),
        Case("students-a-formula-and-chinese", GRADE, grade_args(students=manifest), code=0,
             check=csv_column("out/students.csv", "student", lambda v: sorted(v) == ["'=HYPERLINK(1)", "张三"]),
             setup=chain(ab, write("students.csv", "file,student\na.png,=HYPERLINK(1)\nb.jpg,张三\n"))),
        Case("students-a-path-as-a-name", GRADE, grade_args(students=manifest), code=0,
             check=all_of(csv_column("out/students.csv", "student", lambda v: sorted(v) == ["../../etc/x", "Bo"]),
                          exists("out/students.csv")),
             setup=chain(ab, write("students.csv", "file,student\na.png,../../etc/x\nb.jpg,Bo\n"))),
        Case("students-two-pages-one-student", GRADE, grade_args(students=manifest), code=0,
             check=all_of(csv_column("out/students.csv", "student", lambda v: v == ["Ann"]),
                          csv_column("out/students.csv", "pages", lambda v: v == ["2"])),
             setup=chain(ab, write("students.csv", "file,student\na.png,Ann\nb.jpg,Ann\n"))),
    ]


# ----------------------------------------------------------------------------------------------- select_checkpoint.py
SELECT = "eval/select_checkpoint.py"
SELECT_BASE = {"--run": "{box}/run", "--data": "{synth}", "--out": "{box}/out", "--backend": "hf", "--limit": "1"}


def select_args(*flags: str, **opts: str | None) -> list[str]:
    """select_checkpoint's arguments: SELECT_BASE with options changed (as eval_args)."""
    return option_args(SELECT_BASE, flags, opts)


def training_run(model: str = "{model}", dataset: str | int = "{sft}", run_id: str = "r1",
                 at: str = "run") -> Callable[[Env], None]:
    """box/AT as recipes/sft_qwen.py starts an output_dir: its gbtrain_run.json (base model, dataset, run id)."""
    return write(f"{at}/gbtrain_run.json", json.dumps({"model": model, "dataset": dataset, "run_id": run_id}))


def run_checkpoint(step: int = 2, kind: str = "full", weights: bool = True, run_id: str = "r1",
                   damage: Callable[[Path], None] | None = None, at: str = "run") -> Callable[[Env], None]:
    """box/AT/checkpoint-STEP as the trainer saves it: a model's files (kind full), a LoRA adapter's (lora) or
    neither config (bare), which are not read before a model loads, then the completion marker; then `damage` done
    to it."""
    def setup(env: Env) -> None:
        from gbtrain.train.checkpoints import mark_complete

        folder = env.box / at / f"checkpoint-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / {"lora": "adapter_config.json", "full": "config.json"}.get(kind, "notes.json")).write_text("{}")
        if weights:
            (folder / ("adapter_model.safetensors" if kind == "lora" else "model.safetensors")).write_bytes(b"w")
        mark_complete(folder, run_id, step)
        if damage:
            damage(folder)
    return setup


def checkpoint_record(rel: str, coords: str = "qwen25") -> Callable[[Env], None]:
    """box/rel/gbtrain_checkpoint.json: the coords and pixel budget a training run records in its saves."""
    def setup(env: Env) -> None:
        from gbtrain.coords import PixelBudget
        from gbtrain.train.checkpoints import CheckpointRecord, write_checkpoint_record

        write_checkpoint_record(env.box / rel, CheckpointRecord(coords, PixelBudget(3136, 200704)))
    return setup


# a run whose one checkpoint lost its weights: every case refuses before any model loads (at the latest when
# the checkpoints have been tried: "no checkpoint ... could be evaluated")
NO_WEIGHTS = r"no checkpoint of \S+/run could be evaluated \(checkpoint-2: no weights \(model\.safetensors\)\)"


def earlier_selection(*flags: str, **opts: str | None) -> Callable[[Env], None]:
    """box/out as an earlier selection with these arguments left it (its checkpoints could not be evaluated)."""
    def setup(env: Env) -> None:
        from gbtrain.cli import parse_options
        from gbtrain.evaluation.selection import SelectRun, select_checkpoint

        sel = parse_options(SelectRun, None, [env.sub(a) for a in select_args(*flags, **opts)])
        with contextlib.suppress(ValueError):
            select_checkpoint(sel, progress=False)
    return setup


SCORED = {"settings": {"L1-af": {"accuracy": 0.5, "map_20_50": 12.0}, "L3-ab": {"accuracy": 0.25, "map_20_50": 3.0}}}


def scored_earlier(report: dict | str = SCORED) -> Callable[[Env], None]:
    """box/run with one checkpoint, and box/out as an earlier selection left it after scoring it (its report.json:
    `report`): a rerun takes that score and evaluates no model."""
    return chain(training_run(), run_checkpoint(weights=False), earlier_selection(), run_checkpoint(),
                 write("out/checkpoint-2/report.json", report if isinstance(report, str) else json.dumps(report)))


def shown_as_written(rel: str, *texts: str) -> Callable[[Env, str], str | None]:
    """The Markdown file box/rel, rendered as a Markdown viewer renders it (markdown-it-py, raw HTML off, as the HTML
    reports do), shows each of `texts` as written (whitespace as one space) and holds no image, link or HTML tag a
    text could have brought."""
    def check(env: Env, _stdout: str) -> str | None:
        from html import escape

        from gbtrain.evaluation.html_report import markdown_html

        path = env.box / rel
        if not path.is_file():
            return f"{rel} was not written"
        shown = markdown_html(path.read_text(encoding="utf-8"))
        missing = [t for t in texts if escape(" ".join(t.split()), quote=False).replace('"', "&quot;") not in shown]
        tags = re.findall(r"<(?:img|a|b|i|script)\b[^>]*>|<h[1-6]>Injected", shown)
        return f"{rel} rendered: {missing} not shown as written, tags {tags}" if missing or tags else None
    return check


def select_cases() -> list[Case]:
    run = chain(training_run(), run_checkpoint(weights=False))
    best = report_has("out/selection.json", best__checkpoint="checkpoint-2", evaluated_now=[])
    html = "checkpoint-2<img src=x onerror=alert(1)>"
    not_run = r"\S+/run: no checkpoint-N folder and no final model"
    not_taken = not_run + r" that can be evaluated \("  # then why each one was not taken
    return [
        # options, refused before anything is read
        Case("split-train", SELECT, select_args(split="train"), r"--split: invalid choice: 'train'", setup=run,
             outputs=()),
        Case("metric-loss", SELECT, select_args(metric="loss"), r"--metric: invalid choice: 'loss'", setup=run,
             outputs=()),
        Case("backend-openai", SELECT, select_args(backend="openai"),
             r"--backend 'openai': checkpoint selection runs local checkpoints with vllm or hf", setup=run, outputs=()),
        Case("coords-unknown", SELECT, select_args(coords="pixels"), r"--coords 'pixels': unknown coordinate "
             r"convention", setup=run, outputs=()),
        *[Case(f"option-{flag}-{v}", SELECT, select_args(**{flag: v}),
               rf"--{flag.replace('_', '-')} {re.escape(v)}(\.0)?: must be at least", setup=run, outputs=())
          for flag, v in (("limit", "0"), ("limit", "-1"), ("batch_size", "0"), ("max_tokens", "0"),
                          ("min_pixels", "0"), ("max_pixels", "-5"), ("l2_margin", "-1"), ("l2_margin", "nan"),
                          ("kv_cache_gib", "inf"), ("hf_batch_size", "0"), ("max_model_len", "0"))],
        Case("limit-not-a-number", SELECT, select_args(limit="all"), r"--limit: invalid int value: 'all'", setup=run,
             outputs=()),
        Case("min-over-max", SELECT, select_args(min_pixels="90000", max_pixels="1000"), r"min_pixels <= max_pixels",
             setup=run, outputs=()),
        Case("settings-unknown", SELECT, select_args(settings="L4-af"), r"unknown setting 'L4-af'", setup=run,
             outputs=()),
        Case("settings-empty", SELECT, select_args(settings=","), r"--settings ',' names no setting", setup=run,
             outputs=()),
        Case("settings-a-path", SELECT, select_args(settings="../../x"), r"unknown setting '\.\./\.\./x'", setup=run,
             outputs=()),
        Case("judge-unknown", SELECT, select_args(judge="gpt4"), r"judge 'gpt4' must be rule, vllm:MODEL",
             setup=chain(training_run(), run_checkpoint()), outputs=()),
        Case("judge-without-model", SELECT, select_args(judge="vllm:"), r"judge 'vllm:' must be",
             setup=chain(training_run(), run_checkpoint()), outputs=()),
        Case("out-empty-name", SELECT, select_args(out=""), r"--out is empty: name the output folder", setup=run,
             outputs=()),
        # the training run's record
        Case("run-missing", SELECT, select_args(run="{box}/norun"), r"norun/gbtrain_run\.json not found: --run must "
             r"be a recipes/sft_qwen\.py output_dir", outputs=()),
        Case("run-a-file", SELECT, select_args(run="{box}/f.txt"), r"f\.txt(/gbtrain_run\.json)?: (Not a directory|"
             r"training folder not found|not found)", setup=write("f.txt", "x"), outputs=()),
        *[Case(f"run-record-{name}", SELECT, select_args(), rf"run/gbtrain_run\.json {msg}",
               setup=chain(run, write("run/gbtrain_run.json", text)), outputs=())
          for name, text, msg in (
              ("not-json", "{half", r"cannot be read \(.*\): not a gbtrain training record"),
              ("empty", "", r"cannot be read \(.*\): not a gbtrain training record"),
              ("not-utf8", b'{"model": "\xff"}', "cannot be read"),
              ("nested-100000-deep", "[" * 100_000, r"cannot be read \(.*recursion"),
              ("5001-digit-number", '{"model": "m", "run_id": ' + "9" * 5001 + "}", r"cannot be read \(.*limit"),
              ("a-list", "[]", r"is not a gbtrain training record \(no model\)"),
              ("model-a-number", '{"model": 7}', r"is not a gbtrain training record \(no model\)"))],
        # the run's checkpoints: only complete ones this run saved are taken; why the others are not is said
        Case("run-without-checkpoints", SELECT, select_args(), not_run + r": point --run at a training output_dir",
             setup=training_run(), outputs=()),
        *[Case(f"checkpoint-{name}", SELECT, select_args(), not_taken + rf".*checkpoint-{step} is not evaluated: "
               rf"{msg}.*\)", setup=chain(training_run(), *steps), outputs=())
          for name, step, steps, msg in (
              ("save-never-finished", 2, [make_dir("run/checkpoint-2")], r"no gbtrain_complete\.json"),
              ("of-another-run", 2, [run_checkpoint(run_id="elsewhere")], r"saved by another run \('elsewhere'"),
              ("leading-zero", "0002", [run_checkpoint(), lambda env: (env.box / "run/checkpoint-2").rename(
                  env.box / "run/checkpoint-0002")], r"not a name the trainer writes"),
              ("symlink", 2, [run_checkpoint(step=3), lambda env: (env.box / "run/checkpoint-3").rename(
                  env.outside / "c3"), lambda env: (env.box / "run/checkpoint-2").symlink_to(env.outside / "c3")],
               r"a symbolic link \(to \S+/outside/c3\)"),
              ("a-file", 2, [write("run/checkpoint-2", "x")], r"not a folder"),
              ("weights-truncated", 2, [run_checkpoint(damage=lambda f: (f / "model.safetensors").write_bytes(b""))],
               r"model\.safetensors is 0 bytes, 1 when saved: damaged or truncated"),
              ("marker-corrupt", 2, [run_checkpoint(damage=lambda f: (f / "gbtrain_complete.json").write_text("{"))],
               r"its gbtrain_complete\.json cannot be read"),
              ("marker-nested", 2, [run_checkpoint(damage=lambda f: (f / "gbtrain_complete.json").write_text(
                  "[" * 100_000))], r"its gbtrain_complete\.json cannot be read"),
              ("marker-sizes-strings", 2, [run_checkpoint(damage=lambda f: (f / "gbtrain_complete.json").write_text(
                  '{"run_id": "r1", "step": 2, "files": {"config.json": "2"}}'))],
               r"its gbtrain_complete\.json cannot be read"),
              ("record-of-another-run", 2, [run_checkpoint(), checkpoint_record("run"),
                                             checkpoint_record("run/checkpoint-2", "rel1000")],
               r"its gbtrain_checkpoint\.json differs from the run's: a checkpoint of another run"))],
        Case("final-model-without-summary", SELECT, select_args(), not_taken + r"the final model in \S+/run is not "
             r"evaluated: train_summary\.json, which gives its step, cannot be read\)",
             setup=chain(training_run(), write("run/config.json", "{}"), write("run/model.safetensors", "w"),
                         write("run/train_summary.json", "[" * 100_000)), outputs=()),
        Case("checkpoint-without-weights", SELECT, select_args(), NO_WEIGHTS, setup=run),
        Case("checkpoint-zero-shards", SELECT, select_args(), r"checkpoint-2: holds only DeepSpeed ZeRO shards "
             r"\(global_step2/\): gather the weights",
             setup=chain(training_run(), make_dir("run/checkpoint-2/global_step2"), run_checkpoint(weights=False))),
        Case("checkpoint-not-a-model", SELECT, select_args(), r"checkpoint-2: no config\.json or adapter_config\.json: "
             r"not a saved model", setup=chain(training_run(), run_checkpoint(kind="bare"))),
        Case("trainer-state-nested", SELECT, select_args(), NO_WEIGHTS,
             setup=chain(run, write("run/checkpoint-2/trainer_state.json", "[" * 100_000))),
        Case("train-summary-nested", SELECT, select_args(), NO_WEIGHTS,
             setup=chain(run, write("run/train_summary.json", '{"global_step": ' + "[" * 100_000))),
        Case("lora-base-missing", SELECT, select_args(), r"--base not found: \S+/nobase \(a folder, or a hub id",
             setup=chain(training_run(model="{box}/nobase"), run_checkpoint(kind="lora")), outputs=()),
        Case("lora-base-hub-offline", SELECT, select_args(base="org/mystery"), r"--base org/mystery is not in the "
             r"Hugging Face cache \(.*\) and HF_HUB_OFFLINE is set",
             setup=chain(training_run(), run_checkpoint(kind="lora")), outputs=()),
        # the data and its split
        Case("data-missing", SELECT, select_args(data="{box}/nodata"), r"data directory not found: \S+/nodata",
             setup=run, outputs=()),
        Case("data-annotations-broken", SELECT, select_args(data="{box}/data", split="all"),
             r"L1\.json: malformed JSON", setup=chain(run, data(), write("data/annotations/L1.json", "[{")),
             outputs=()),
        Case("data-annotation-id-null", SELECT, select_args(data="{box}/data", split="all"),
             r"L1\.json \[record None\]: id must be",
             setup=chain(run, data(), edit_record("L1", 1, set_key("id", None))), outputs=()),
        Case("dataset-gone", SELECT, select_args(), r"the run's training dataset \S+/nosft is gone: its build record "
             r"gives the validation split; pass --split all",
             setup=chain(training_run(dataset="{box}/nosft"), run_checkpoint(weights=False)), outputs=()),
        Case("dataset-not-a-build", SELECT, select_args(), r"is not a finished build",
             setup=chain(training_run(dataset="{synth}"), run_checkpoint(weights=False)), outputs=()),
        Case("dataset-a-number", SELECT, select_args(), r"run/gbtrain_run\.json is not a gbtrain training record",
             setup=chain(training_run(dataset=7), run_checkpoint(weights=False)), outputs=()),
        # the output folder and --copy-best
        Case("out-is-run", SELECT, select_args(out="{box}/run"), OVERLAP, setup=run, outputs=()),
        Case("out-inside-run", SELECT, select_args(out="{box}/run/select"), OVERLAP, setup=run, outputs=()),
        Case("out-holds-run", SELECT, select_args(run="{box}/out/run"), OVERLAP,
             setup=chain(training_run(at="out/run"), run_checkpoint(weights=False, at="out/run")), outputs=()),
        Case("out-is-data", SELECT, select_args(data="{box}/data", out="{box}/data", split="all"), OVERLAP,
             setup=chain(run, data()), outputs=()),
        Case("out-a-file", SELECT, select_args(out="{box}/f.txt"), A_FILE, setup=chain(run, write("f.txt", "x")),
             outputs=()),
        Case("out-read-only", SELECT, select_args(out="{box}/ro/out"), RO,
             setup=chain(run, lambda env: read_only(env, "ro")), outputs=()),
        *[Case(f"out-holds-users-work{flag}", SELECT, select_args(*[flag] if flag else []),
               NOT_VOUCHED.format(tool="select_checkpoint"),
               setup=chain(run, write("out/checkpoint-1/model.safetensors", "the user's"),
                           write("out/data/L1.json", "the user's"), write("out/merged/notes.txt", "the user's")),
               outputs=("out/.lock",))
          for flag in ("", "--overwrite")],
        Case("selection-record-broken", SELECT, select_args("--overwrite"),
             NOT_VOUCHED.format(tool="select_checkpoint"),
             setup=chain(run, earlier_selection(), write("out/selection_run.json", "[]")), outputs=("out/.lock",)),
        Case("selection-record-nested", SELECT, select_args("--overwrite"),
             NOT_VOUCHED.format(tool="select_checkpoint"),
             setup=chain(run, earlier_selection(), write("out/selection_run.json", "[" * 100_000)),
             outputs=("out/.lock",)),
        Case("rerun-other-limit", SELECT, select_args(limit="2"),
             r"holds work made otherwise \(limit: 1 there, 2 now\): choose another --out, or pass --overwrite",
             setup=chain(run, earlier_selection()), outputs=("out/.lock",)),
        Case("rerun-other-limit-overwrite", SELECT, select_args("--overwrite", limit="2"), NO_WEIGHTS,
             setup=chain(run, earlier_selection())),
        Case("out-busy", SELECT, select_args(), r"in use by another evaluation \(pid 4242\).*another --out",
             setup=chain(run, hold_lock)),
        Case("copy-best-is-run", SELECT, select_args(copy_best="{box}/run"), r"--copy-best \S+/run is --run \S+/run: "
             r"choose another folder", setup=run, outputs=()),
        Case("copy-best-inside-out", SELECT, select_args(copy_best="{box}/out/best"), r"--copy-best \S+/out/best lies "
             r"inside --out \S+/out: choose another folder", setup=chain(run, make_dir("out")), outputs=()),
        Case("copy-best-holds-users-files", SELECT, select_args(copy_best="{box}/best"), r"--copy-best \S+/best exists "
             r"and holds other files: choose a new or empty folder", setup=chain(run, write("best/mine.txt", "x")),
             outputs=()),
        Case("copy-best-a-file", SELECT, select_args(copy_best="{box}/f.txt"), r"--copy-best \S+/f\.txt exists and "
             r"holds other files", setup=chain(run, write("f.txt", "x")), outputs=()),
        # credentials in an LLM judge's URL: never written into the selection's files
        Case("judge-credentials", SELECT, select_args(judge="openai:yes@{cred_url}"), NO_WEIGHTS, setup=run),
        # a rerun over an earlier selection's scores (no model is evaluated), and what its files may hold
        Case("rerun-scored-earlier", SELECT, select_args(), code=0, check=best, setup=scored_earlier()),
        Case("rerun-metric-map", SELECT, select_args(metric="map"), code=0, check=best, setup=scored_earlier()),
        Case("note-holds-html", SELECT, select_args(), code=0,
             check=all_of(best, shown_as_written("out/selection.md", html)),
             setup=chain(scored_earlier(), make_dir(f"run/{html}"))),
        Case("run-path-holds-html", SELECT, select_args(run="{box}/r<b>un", out="{box}/o"), code=0,
             check=shown_as_written("o/selection.md", "r<b>un"),
             setup=chain(scored_earlier(), lambda env: (env.box / "run").rename(env.box / "r<b>un"),
                         lambda env: (env.box / "out").rename(env.box / "o"),
                         lambda env: replace_file(env.box / "o/selection_run.json", (
                             env.box / "o/selection_run.json").read_text().replace("/run\"", "/r<b>un\""))),
             outputs=("o",)),
        Case("copy-best", SELECT, select_args(copy_best="{box}/best"), code=0,
             check=all_of(best, exists("best/gbtrain_selected.json", "best/model.safetensors")),
             setup=scored_earlier(), outputs=("out", "best")),
        Case("copy-best-over-an-earlier-copy", SELECT, select_args(copy_best="{box}/best"), code=0,
             check=all_of(best, exists("best/model.safetensors")),
             setup=chain(scored_earlier(), write("best/gbtrain_selected.json", '{"checkpoint": "checkpoint-1"}'),
                         write("best/model.safetensors", "old")), outputs=("out", "best")),
        # a damaged earlier score is not taken: the checkpoint is evaluated again (here its weights do not load)
        *[Case(f"earlier-report-{name}", SELECT, select_args(), r"no checkpoint of \S+/run could be evaluated "
               r"\(checkpoint-2: \w+Error: ", setup=scored_earlier(report))
          for name, report in (("accuracy-a-string", {"settings": {s: {"accuracy": "0.5", "map_20_50": 1}
                                                                   for s in ("L1-af", "L3-ab")}}),
                               ("map-nan", {"settings": {s: {"accuracy": 0.5, "map_20_50": float("nan")}
                                                         for s in ("L1-af", "L3-ab")}}),
                               ("a-setting-missing", {"settings": {"L1-af": SCORED["settings"]["L1-af"]}}),
                               ("nested", "[" * 100_000))],
    ]


# ----------------------------------------------------------------------------------------------- review.py
REVIEW = "eval/review.py"
REVIEW_IMPORT = ["import", "--graded", "{box}/out", "--out", "{box}/imported"]


def exported_review(env: Env) -> None:
    """box/out/review as eval/review.py export writes it (box/out: a graded folder)."""
    from gbtrain.grading.review import ReviewRun
    from gbtrain.grading.review_export import export_review

    export_review(ReviewRun("export", str(env.box / "out")))


def reviewed_sheet(edit: Callable[[list[dict]], None]) -> Callable[[Env], None]:
    """box/reviewed.csv: the exported sheet with `edit` applied to its rows, as a teacher saves it."""
    def setup(env: Env) -> None:
        import csv

        with open(env.box / "out" / "review" / "review.csv", encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        edit(rows)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        replace_file(env.box / "reviewed.csv", buf.getvalue())
    return setup


def one_changed(rows: list[dict]) -> None:
    """Every item reviewed, the first one's verdict changed."""
    for row in rows:
        row["reviewed"] = "yes"
    rows[0]["correctness"] = "wrong"


def review_cases() -> list[Case]:
    graded = chain(pages("a.png"), earlier_grading(), exported_review)
    other_project = [{"id": 7, "data": {"image": "/data/upload/3/x.png", "review_id": "r0123456789abcdef"},
                      "annotations": [{"id": 1, "result": [], "was_cancelled": False}]}]
    return [
        Case("import-missing-file", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/none.json"],
             r"reviewed file not found: \S+/none\.json", setup=graded, outputs=()),
        Case("import-another-project", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.json"],
             r"reviewed\.json task 7: review id 'r0123456789abcdef' names no page of \S+/out .*: import what "
             r"eval/review\.py export wrote from this folder, or export again",
             setup=chain(graded, write("reviewed.json", json.dumps(other_project))), outputs=()),
        Case("import-score-not-a-number", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.csv"],
             r"reviewed\.csv line 2 \(page a\.png, item 1\): score 'a lot' is not a number of points: write a "
             r"number, or leave it empty",
             setup=chain(graded, reviewed_sheet(lambda rows: rows[0].update(score="a lot"))), outputs=()),
        Case("import-a-sheet-of-another-tool", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/out/grades.csv"],
             r"grades\.csv: not a review sheet .*: pass the review\.csv that eval/review\.py export wrote",
             setup=graded, outputs=()),
        # a cell past the csv module's field limit (131,072 characters): a one-line refusal, not csv.Error's traceback
        Case("import-a-cell-past-the-field-limit", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.csv"],
             r"reviewed\.csv after line \d+: not a CSV row \(field larger than field limit .*save the sheet again",
             setup=chain(graded, reviewed_sheet(lambda rows: rows[0].update(text="7" * 200_000))), outputs=()),
        # a teacher's reason is text in review_report.md, never an image that loads, a link, HTML or a new line
        *[Case(f"import-reason-{name}", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.csv"], code=0,
               check=shown_as_written("imported/review_report.md", reason),
               setup=chain(graded, reviewed_sheet(lambda rows, reason=reason: (one_changed(rows),
                                                                              rows[0].update(reason=reason)))),
               outputs=("imported",))
          for name, reason in (
              ("an-image", "![seen](http://tracker.example/p.png)"), ("html", "<img src=x onerror=alert(1)>"),
              ("a-link", "[click](javascript:alert(1))"), ("a-cell", "too low | 3 points"),
              ("a-heading", "see below\n# Injected heading"), ("a-code-fence", "```\nrm -rf /"),
              ("emphasis", "**all wrong** __really__"), ("an-entity", "&lt;b&gt; & <b>bold</b>"))],
        # a box the teacher cleared, or moved past the page's edge to nothing: its page is named and kept out of the
        # training data (it was dropped, or written with a box of no area, without a word)
        Case("import-a-box-cleared", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.csv"], code=0,
             check=report_has("imported/review_report.json", written__left_out=lambda left: len(left) == 1 and
                              "has no box (cleared, or never drawn): draw its box" in left[0]["why"]),
             setup=chain(graded, reviewed_sheet(lambda rows: [one_changed(rows), rows[0].update(
                 x1="", y1="", x2="", y2="")])), outputs=("imported",)),
        Case("import-a-box-moved-off-the-page", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.csv"],
             code=0, check=report_has("imported/review_report.json", written__left_out=lambda left: len(left) == 1
                                      and "has a box of no area" in left[0]["why"]),
             setup=chain(graded, reviewed_sheet(lambda rows: [one_changed(rows), rows[0].update(
                 x1="-3", y1="10", x2="-1", y2="30")])), outputs=("imported",)),
        # a page file whose source was edited to name a file outside the pages folder: nothing of it is copied
        *[Case(f"export-source-{name}", REVIEW, ["export", "--graded", "{box}/out"],
               r"page a\.png: its source '.*' is no file under the pages folder \S+/pages \(the page file was edited\)",
               setup=chain(graded, page_image("private.png", 200, 280, "PNG"),
                           lambda env, src=source: edit_json(env.box / "out" / "pages" / "a.png.json",
                                                             lambda d: d.update(source=env.sub(src)))),
               outputs=("out",))
          for name, source in (("parent", "../private.png"), ("absolute", "{box}/private.png"))],
        # a task whose annotations are an object (an edited file): named, not counted unreviewed without a word
        Case("import-annotations-an-object", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.json"],
             r"reviewed\.json task 7: 'annotations' is \{\"id\": 1.*not a list of annotations: export the project "
             r"again", setup=chain(graded, write("reviewed.json", json.dumps(
                 [{"id": 7, "data": {"image": "x.png", "review_id": "r1"},
                   "annotations": {"id": 1, "result": [], "was_cancelled": False}}]))), outputs=()),
        Case("export-not-graded", REVIEW, ["export", "--graded", "{box}"],
             r"--graded \S+: not a grade_pages folder .*: pass the --out of eval/grade_pages\.py", outputs=()),
        Case("import-ok", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.csv"], code=0,
             check=report_has("imported/review_report.json", reviewed=2, changed=1, regrade_rate=0.5),
             setup=chain(graded, reviewed_sheet(one_changed)),
             outputs=("imported",)),
        *review_sheet_cases(graded), *review_labelstudio_cases(graded), *review_folder_cases(graded),
    ]


SHEET = [*REVIEW_IMPORT, "--reviewed", "{box}/reviewed.csv"]
LINE2 = r"reviewed\.csv line 2 \(page a\.png, item 1\): "


def first_row(**cells: str) -> Callable[[list[dict]], None]:
    """The sheet's first row reviewed, with these cells as the teacher typed them."""
    def edit(rows: list[dict]) -> None:
        rows[0].update({"reviewed": "yes", **cells})
    return edit


def sheet_text(edit: Callable[[str], str | bytes]) -> Callable[[Env], None]:
    """box/reviewed.csv: the exported sheet's text (every row reviewed) changed by `edit`, as another program saves
    it."""
    def setup(env: Env) -> None:
        reviewed_sheet(lambda rows: [r.update(reviewed="yes") for r in rows])(env)
        replace_file(env.box / "reviewed.csv", edit((env.box / "reviewed.csv").read_text(encoding="utf-8")))
    return setup


def review_sheet_cases(graded: Callable[[Env], None]) -> list[Case]:
    """Hostile cells of a reviewed sheet: each refused naming the line, page, item and the way out."""
    refused = [
        ("score-negative", dict(score="-1", full_score="2"), r"score -1 .*0\.\.2"),
        ("score-thousands", dict(score="1,000", full_score="2"), r"score '1,000' is not a number of points"),
        ("score-401-digits", dict(score="9" * 401), r"score '9{30}.* is not a number of points: write a number"),
        ("score-nan", dict(score="nan"), r"score 'nan' is not a number of points"),
        ("score-inf", dict(score="inf"), r"score 'inf' is not a number of points"),
        ("score-exponent", dict(score="1e400"), r"score '1e400' is not a number of points"),
        ("score-over-full", dict(score="7", full_score="5"), r"score 7(\.0)? .*full"),
        ("full-score-negative", dict(full_score="-3"), r"full_score"),
        ("full-score-zero", dict(full_score="0", score="0"), r"full_score"),
        ("score-2-without-score", dict(score_2="3"), r"score_2 .*without score: fill score too"),
        ("score-2-not-a-number", dict(score="1", score_2="two"), r"score_2 'two' is not a number of points"),
        ("verdict-unknown", dict(correctness="maybe"), r"correctness 'maybe' is not a verdict: write one of"),
        ("verdict-misspelt", dict(correctness="corect"), r"correctness 'corect' is not a verdict"),
        ("reviewed-maybe", dict(reviewed="maybe"), r"reviewed 'maybe' is neither yes nor no"),
        ("reviewed-no-with-correction", dict(reviewed="no", correctness="wrong"),
         r"reviewed says 'no' but the row holds a correction \(correctness\)"),
        ("question-type-unknown", dict(question_type="essay-ish"), r"question type 'essay-ish' is not one of"),
        ("box-inverted", dict(x1="90", x2="10"), r"box .* is not a box on the 200x280 page"),
        ("box-far-outside", dict(x2="5000"), r"box .* is not a box on the 200x280 page"),
        ("box-401-digits", dict(y2="9" * 401), r"y2 '9{30}.* is not a pixel position: write a number"),
        ("box-partial", dict(x1="", y1=""), r"give all four of x1, y1, x2, y2 \(in page pixels\), or none"),
        ("box-text", dict(x1="left"), r"x1 'left' is not a pixel position"),
    ]
    bad_rows = [
        ("item-out-of-range", lambda rows: rows[0].update(reviewed="yes", item="99"),
         r"reviewed\.csv line 2: item '99' is not an item of page a\.png \(1-2\): keep the sheet's page"),
        ("item-not-a-number", lambda rows: rows[0].update(reviewed="yes", item="first"),
         r"reviewed\.csv line 2: item 'first' is not an item of page a\.png"),
        ("review-id-unknown", lambda rows: rows[0].update(reviewed="yes", review_id="r0000000000000000"),
         r"reviewed\.csv line 2: review id 'r0000000000000000' names no page of \S+/out"),
        ("review-id-blank", lambda rows: rows[0].update(reviewed="yes", review_id=""),
         r"reviewed\.csv line 2: review id '' names no page of \S+/out"),
        ("row-twice", lambda rows: rows.append(dict(rows[0], reviewed="yes")),
         r"reviewed\.csv line 4 \(page a\.png, item 1\): the item is on line 2 too: keep one row per item"),
        ("nothing-reviewed", lambda rows: None, r"nothing in it is reviewed"),
    ]
    texts = [
        ("latin-1", lambda s: s.replace("35", "35é").encode("latin-1"), r"not UTF-8 text: save the sheet as CSV UTF-8"),
        ("empty", lambda s: "", r"reviewed\.csv: not a review sheet"),
        ("header-only", lambda s: s.split("\n", 1)[0] + "\n", r"nothing in it is reviewed"),
        ("column-dropped", lambda s: s.replace("reviewed,", "", 1), r"not a review sheet \(its header lacks"),
        ("binary", lambda s: bytes(range(256)) * 8, r"not UTF-8 text"),
        ("nul-bytes", lambda s: s.replace("35", "3\x005"),
         r"--reviewed \S+/reviewed\.csv line 3: a NUL character, which no spreadsheet writes"
),
    ]
    return [
        *[Case(f"sheet-{name}", REVIEW, SHEET, LINE2 + message, setup=chain(graded, reviewed_sheet(first_row(**cells))),
               outputs=()) for name, cells, message in refused],
        *[Case(f"sheet-{name}", REVIEW, SHEET, message, setup=chain(graded, reviewed_sheet(edit)), outputs=())
          for name, edit, message in bad_rows],
        *[Case(f"sheet-{name}", REVIEW, SHEET, message, setup=chain(graded, sheet_text(edit)), outputs=())
          for name, edit, message in texts],
        Case("sheet-a-folder", REVIEW, [*REVIEW_IMPORT, "--reviewed", "{box}/sheet"],
             r"--reviewed \S+/sheet is a folder: pass the reviewed review\.csv",
             setup=chain(graded, make_dir("sheet")), outputs=()),
        # a box the teacher did not transcribe: counted in the rate, its page not written as data (named with why)
        Case("sheet-blank-text-correct", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", written__left_out=lambda v: len(
                 v) == 1 and "has a box but no transcription" in v[0]["why"]),
             setup=chain(graded, reviewed_sheet(lambda rows: ([r.update(reviewed="yes") for r in rows], rows[0].update(
                 text="", correctness="right", question_id="1")))), outputs=("imported",)),
        Case("sheet-verdict-fullwidth", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", reviewed=2, changed=1),
             setup=chain(graded, reviewed_sheet(lambda rows: (one_changed(rows), rows[0].update(
                 correctness="ＷＲＯＮＧ")))), outputs=("imported",)),
        Case("sheet-bom-crlf-semicolons", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", reviewed=2, changed=1),
             setup=chain(graded, reviewed_sheet(one_changed), lambda env: replace_file(
                 env.box / "reviewed.csv", "\ufeff" + (env.box / "reviewed.csv").read_text(encoding="utf-8")
                 .replace(",", ";").replace("\r\n", "\n").replace("\n", "\r\n"))),
             outputs=("imported",)),
        Case("sheet-score-decimal-comma", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", reviewed=2),
             setup=chain(graded, reviewed_sheet(lambda rows: (one_changed(rows),
                                                              rows[0].update(score="0,5", full_score="1")))),
             outputs=("imported",)),
        # two items given one question id are one group (an answer in two boxes): they must agree on their points,
        # else the page is named and kept out of the training data; the grades still count in the rate
        Case("sheet-one-question-two-scores", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", reviewed=2, written__left_out=lambda v: len(v) == 1 and
                              "is given 2 boxes with different scores" in v[0]["why"]),
             setup=chain(graded, reviewed_sheet(lambda rows: [r.update(reviewed="yes", question_id="1",
                                                                       full_score="2", score=str(2 * k))
                                                              for k, r in enumerate(rows)])),
             outputs=("imported",)),
        Case("sheet-one-question-two-boxes-agree", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", reviewed=2, written__left_out=[]),
             setup=chain(graded, reviewed_sheet(lambda rows: [r.update(reviewed="yes", question_id="1",
                                                                       full_score="2", score="1") for r in rows])),
             outputs=("imported",)),
        Case("sheet-question-id-cleared", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", written__left_out=lambda v: len(v) == 1 and
                              "has no question id" in v[0]["why"]),
             setup=chain(graded, reviewed_sheet(lambda rows: (one_changed(rows), rows[0].update(question_id="  ")))),
             outputs=("imported",)),
        Case("sheet-question-id-chinese", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", reviewed=2, written__left_out=[]),
             setup=chain(graded, reviewed_sheet(lambda rows: [r.update(reviewed="yes", question_id=q)
                                                              for r, q in zip(rows, ("第8题", "Q5"), strict=True)])),
             outputs=("imported",)),
        Case("sheet-formula-text", REVIEW, SHEET, code=0,
             check=report_has("imported/review_report.json", reviewed=2),
             setup=chain(graded, reviewed_sheet(lambda rows: (one_changed(rows), rows[0].update(
                 text='=HYPERLINK("http://x.example/","7")')))), outputs=("imported",)),
    ]


LS_IMPORT = [*REVIEW_IMPORT, "--reviewed", "{box}/tasks.json"]


def ls_tasks(edit: Callable[[list[dict]], object]) -> Callable[[Env], None]:
    """box/tasks.json: the exported Label Studio tasks, each annotated with its predictions as they stand, as Label
    Studio's JSON export writes them, then changed by `edit`."""
    def setup(env: Env) -> None:
        tasks = json.loads((env.box / "out" / "review" / "labelstudio_tasks.json").read_text(encoding="utf-8"))
        for n, task in enumerate(tasks, start=1):
            task["id"] = n
            results = [dict(r) for p in task.get("predictions", []) for r in p["result"]]
            task["annotations"] = [{"id": 100 + n, "completed_by": 1, "result": results, "was_cancelled": False,
                                    "ground_truth": False, "lead_time": 12.5}]
        edited = edit(tasks)
        replace_file(env.box / "tasks.json", edited if isinstance(edited, (str, bytes)) else json.dumps(tasks))
    return setup


def ls_results(edit: Callable[[dict], None], kind: str | None = None) -> Callable[[list[dict]], None]:
    """`edit` applied to each result (of type `kind`, or all) of the first task's annotation."""
    def apply(tasks: list[dict]) -> None:
        for r in tasks[0]["annotations"][0]["result"]:
            if kind is None or r.get("type") == kind:
                edit(r)
    return apply


def review_labelstudio_cases(graded: Callable[[Env], None]) -> list[Case]:
    """Hostile Label Studio exports of the review tasks."""
    task1 = r"tasks\.json task 1"
    cases = [
        ("not-json", lambda tasks: "{not json", r"tasks\.json.*(JSON|json)"),
        ("nested", lambda tasks: "[" * 100_000, r"tasks\.json.*"),
        ("an-object", lambda tasks: json.dumps({"tasks": tasks}), r"tasks\.json.*"),
        ("a-number", lambda tasks: "42", r"tasks\.json.*"),
        ("third-annotation", lambda tasks: tasks[0]["annotations"].extend(
            [dict(tasks[0]["annotations"][0], id=201), dict(tasks[0]["annotations"][0], id=202)]),
         task1 + r".*3 submitted annotations: the review keeps two teachers"),
        ("label-not-a-verdict", ls_results(lambda r: r["value"].update(rectanglelabels=["maybe"]), "rectanglelabels"),
         task1 + r".*label 'maybe' is not a verdict"),
        ("width-401-digits", ls_results(lambda r: r["value"].update(width=int("9" * 401))),
         task1 + r".*"),
        ("x-nan", ls_results(lambda r: r["value"].update(x=float("nan"))), task1 + r".*"),
        ("x-a-string", ls_results(lambda r: r["value"].update(x="left")), task1 + r".*"),
        ("value-missing", ls_results(lambda r: r.pop("value")), task1 + r".*"),
        ("review-id-foreign", lambda tasks: tasks[0]["data"].update(review_id="r0000000000000000"),
         task1 + r": review id 'r0000000000000000' names no page of"),
        ("page-twice", lambda tasks: tasks.append(dict(tasks[0], id=9)),
         r"tasks\.json task 9: page a\.png is task 1 too"),
    ]
    return [
        *[Case(f"labelstudio-{name}", REVIEW, LS_IMPORT, message, setup=chain(graded, ls_tasks(edit)), outputs=())
          for name, edit, message in cases],
        Case("labelstudio-as-exported", REVIEW, LS_IMPORT, code=0,
             check=report_has("imported/review_report.json", reviewed=2, changed=0),
             setup=chain(graded, ls_tasks(lambda tasks: None)), outputs=("imported",)),
        # regions as Label Studio writes them after a teacher's edit (round four)
        Case("labelstudio-a-box-a-little-past-the-edge", REVIEW, LS_IMPORT, code=0,
             check=report_has("imported/review_report.json", reviewed=2),
             setup=chain(graded, ls_tasks(ls_results(lambda r: r["value"].update(
                 width=100.4 - r["value"]["x"]), "rectanglelabels"))), outputs=("imported",)),
        Case("labelstudio-a-box-rotated", REVIEW, LS_IMPORT, code=0,
             check=report_has("imported/review_report.json", reviewed=2),
             setup=chain(graded, ls_tasks(ls_results(lambda r: r["value"].update(rotation=30), "rectanglelabels"))),
             outputs=("imported",)),
        Case("labelstudio-annotations-null", REVIEW, LS_IMPORT, r"tasks\.json: nothing in it is reviewed",
             setup=chain(graded, ls_tasks(lambda tasks: tasks[0].update(annotations=None))), outputs=()),
        Case("labelstudio-review-id-missing", REVIEW, LS_IMPORT, r"tasks\.json task 1: .*review",
             setup=chain(graded, ls_tasks(lambda tasks: [tasks[0]["data"].pop("review_id"), None][1])), outputs=()),
        Case("labelstudio-question-id-chinese", REVIEW, LS_IMPORT, code=0,
             check=report_has("imported/review_report.json", reviewed=2, written__left_out=[]),
             setup=chain(graded, ls_tasks(ls_results(lambda r: r["value"].update(text=["第8题"]) if r.get(
                 "from_name") == "qid" else None))), outputs=("imported",)),
        Case("labelstudio-cancelled-only", REVIEW, LS_IMPORT, r"nothing in it is reviewed",
             setup=chain(graded, ls_tasks(lambda tasks: tasks[0]["annotations"][0].update(was_cancelled=True))),
             outputs=()),
    ]


def review_folder_cases(graded: Callable[[Env], None]) -> list[Case]:
    """The review's folders: --out over its inputs, unwritable or holding other work; a touched sheet; gone pages."""
    ok = chain(graded, reviewed_sheet(one_changed))
    return [
        Case("import-out-is-graded", REVIEW, ["import", "--graded", "{box}/out", "--out", "{box}/out", "--reviewed",
                                              "{box}/reviewed.csv"], OVERLAP, setup=ok, outputs=()),
        Case("import-out-inside-graded", REVIEW, ["import", "--graded", "{box}/out", "--out", "{box}/out/imp",
                                                  "--reviewed", "{box}/reviewed.csv"], OVERLAP, setup=ok, outputs=()),
        Case("import-out-a-file", REVIEW, [*REVIEW_IMPORT[:-1], "{box}/f.txt", "--reviewed", "{box}/reviewed.csv"],
             A_FILE, setup=chain(ok, write("f.txt", "x")), outputs=()),
        Case("import-out-read-only", REVIEW, [*REVIEW_IMPORT[:-1], "{box}/ro/imp", "--reviewed",
                                              "{box}/reviewed.csv"], RO,
             setup=chain(ok, lambda env: read_only(env, "ro")), outputs=()),
        Case("import-out-holds-users-work", REVIEW, SHEET,
             r"--out \S+/imported holds mine\.txt \(1 entries\) that an import did not write: choose another --out",
             setup=chain(ok, write("imported/mine.txt", "the user's")), outputs=()),
        Case("import-box-iou-zero", REVIEW, [*SHEET, "--box-iou", "0"],
             r"--box-iou 0(\.0)?: choose a value in \(0, 1\]",
             setup=ok, outputs=()),
        Case("import-box-iou-nan", REVIEW, [*SHEET, "--box-iou", "nan"], r"--box-iou nan: choose a value in",
             setup=ok, outputs=()),
        Case("import-subject-blank", REVIEW, [*SHEET, "--subject", " "], r"--subject: name the pages' subject",
             setup=ok, outputs=()),
        Case("import-page-image-gone", REVIEW, SHEET, r"the page image the review showed is gone",
             setup=chain(ok, lambda env: [p.unlink() for p in (env.box / "out" / "review").rglob("*.png")]),
             outputs=()),
        Case("import-sheet-of-another-grading", REVIEW, SHEET, r"review id '\w+' names no page of \S+/out",
             setup=chain(ok, lambda env: shutil.rmtree(env.box / "out"), pages("a.png"), earlier_grading(model="yes")),
             outputs=()),
        Case("export-over-a-touched-sheet", REVIEW, ["export", "--graded", "{box}/out"],
             r"review\.csv was edited since it was exported",
             setup=chain(graded, lambda env: replace_file(env.box / "out/review/review.csv", (
                 env.box / "out/review/review.csv").read_text(encoding="utf-8").replace(",,", ",yes,", 1))),
             outputs=()),
        Case("export-twice", REVIEW, ["export", "--graded", "{box}/out"], code=0,
             check=exists("out/review/review.csv", "out/review/labelstudio_tasks.json"), setup=graded,
             outputs=("out/review",)),
        Case("export-graded-damaged", REVIEW, ["export", "--graded", "{box}/out"],
             r"pages/a\.png\.json: not a page file eval/grade_pages\.py wrote .*grade the pages again",


             setup=chain(pages("a.png"), earlier_grading(), lambda env: replace_file(
                 next((env.box / "out" / "pages").glob("*.json")), "[" * 50_000)), outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- the interval flags
INTERVAL_VALUES = (("a-billion", "1000000000", r"--bootstrap-resamples 1000000000: must be at most 20,000"),
                   ("20001", "20001", r"--bootstrap-resamples 20001: must be at most 20,000"),
                   ("99", "99", r"--bootstrap-resamples 99: must be at least 100"),
                   ("0", "0", r"--bootstrap-resamples 0: must be at least 100"),
                   ("negative", "-5", r"--bootstrap-resamples -5: must be at least 100"),
                   ("a-word", "many", r"--bootstrap-resamples: invalid int value: 'many'"),
                   ("a-float", "1e9", r"--bootstrap-resamples: invalid int value: '1e9'"))
SEED_VALUES = (("negative", "-1", r"--bootstrap-seed -1: must be at least 0"),
               ("2-to-the-32", "4294967296", r"--bootstrap-seed 4294967296: must be at most 4,294,967,295"),
               ("401-digits", "9" * 401, r"--bootstrap-seed 9{20}.*: must be at most 4,294,967,295"))


def interval_cases() -> list[Case]:
    """--bootstrap-resamples and --bootstrap-seed of every tool that takes them, each value refused before any
    work (a billion resamples asked numpy for 22 GiB once the evaluation had run)."""
    tools = {SCORE: lambda *a: score_args(*a), COMPARE: lambda *a: [*compare_args(), *a],
             RUN_EVAL: lambda *a: eval_args(*a)}
    setups = {SCORE: predictions(good(0), good(1)), COMPARE: reports(), RUN_EVAL: None}
    return [Case(f"{flag[2:]}-{name}", script, args(flag, value), message, setup=setups[script], outputs=())
            for script, args in tools.items()
            for flag, values in (("--bootstrap-resamples", INTERVAL_VALUES), ("--bootstrap-seed", SEED_VALUES))
            for name, value, message in values]


# ----------------------------------------------------------------------------------------------- compare's outcomes
def evaluations(edit_sft: Callable[[dict], None] | None = None,
                edit_outcomes: Callable[[str], str] | None = None) -> Callable[[Env], None]:
    """box/base and box/sft: two copies of one real evaluation's report.json with its outcomes.jsonl beside it, the
    second's report and outcomes optionally edited (the outcomes' hash in the report kept as written)."""
    def setup(env: Env) -> None:
        folder = env.fixtures["report"].parent
        for name in ("base", "sft"):
            (env.box / name).mkdir()
            doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
            outcomes = (folder / "outcomes.jsonl").read_text(encoding="ascii")
            if name == "sft":
                if edit_sft:
                    edit_sft(doc)
                if edit_outcomes:
                    outcomes = edit_outcomes(outcomes)
            replace_file(env.box / name / "report.json", json.dumps(doc))
            replace_file(env.box / name / "outcomes.jsonl", outcomes)
    return setup


def setting_figure(metric: str, value) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        doc["settings"]["L1-af"][metric] = value
    return edit


def compare_outcome_cases() -> list[Case]:
    """A report whose figures or outcomes were edited after run_eval wrote them: a gain outside its own interval."""
    args = ["{box}/base/report.json", "{box}/sft/report.json", "--out", "{box}/out/gains.md"]
    edited = r"sft/report\.json: L1-af {} .* is not .*, which its outcomes\.jsonl gives: the report was edited"
    return [
        Case("same-evaluation-twice", COMPARE, args, code=0, check=exists("out/gains.md"), setup=evaluations()),
        *[Case(f"edited-{metric}", COMPARE, args, edited.format(metric), setup=evaluations(setting_figure(metric, v)),
               outputs=())
          for metric, v in (("accuracy", 0.99), ("localized", 0.999), ("map_20_50", 99.0), ("reasoned", 0.75))],
        Case("edited-within-rounding", COMPARE, args, code=0, check=exists("out/gains.md"),
             setup=evaluations(lambda doc: doc["settings"]["L1-af"].update(
                 accuracy=doc["settings"]["L1-af"]["accuracy"] + 1e-7))),
        Case("outcomes-edited", COMPARE, args, r"sft/outcomes\.jsonl is not the file \S+/sft/report\.json was "
             r"written with \(its sha256 differs\)",
             setup=evaluations(edit_outcomes=lambda s: s.replace('"gates":[', '"gates":[ ', 1)), outputs=()),
        Case("outcomes-record-a-string", COMPARE, args, r"sft/outcomes\.jsonl is not the file",
             setup=evaluations(lambda doc: doc["meta"].update(outcomes="outcomes.jsonl")), outputs=()),
        Case("outcomes-missing", COMPARE, args, code=0, check=printed(r"outcomes\.jsonl is missing"),
             setup=chain(evaluations(), lambda env: (env.box / "sft" / "outcomes.jsonl").unlink())),
    ]


# ----------------------------------------------------------------------------------------------- selective thresholds
def selective_cases() -> list[Case]:
    """The flags that choose a review threshold, refused before any model runs, in both tools that take them."""
    values = [
        ("max-error-0", ("--max-error", "0"), r"--max-error 0(\.0)?: give a share above 0 and below 1"),
        ("max-error-1", ("--max-error", "1"), r"--max-error 1(\.0)?: give a share above 0 and below 1"),
        ("max-error-nan", ("--max-error", "nan"), r"--max-error nan: give a share above 0 and below 1"),
        ("max-error-negative", ("--max-error", "-0.1"), r"--max-error -0\.1: give a share"),
        ("max-error-a-percent", ("--max-error", "5%"), r"--max-error: invalid float value: '5%'"),
        ("delta-0", ("--max-error", "0.05", "--delta", "0"), r"--delta 0(\.0)?: give a chance above 0 and below 1"),
        ("delta-1", ("--max-error", "0.05", "--delta", "1"), r"--delta 1(\.0)?: give a chance above 0 and below 1"),
        ("delta-inf", ("--max-error", "0.05", "--delta", "inf"), r"--delta inf: give a chance"),
        ("delta-alone", ("--delta", "5"), r"--delta 5(\.0)?: give --max-error too"),
        ("delta-with-a-target", ("--target-accuracy", "0.9", "--delta", "0.1"), r"--delta 0\.1: give --max-error too"),
        ("target-accuracy-0", ("--target-accuracy", "0"), r"--target-accuracy 0(\.0)?: give a share above 0"),
        ("target-accuracy-95", ("--target-accuracy", "95"), r"--target-accuracy 95(\.0)?: give a share above 0 and "
                                                             r"at most 1"),
        ("review-budget-nan", ("--review-budget", "nan"), r"--review-budget nan: "),
        ("two-rules", ("--max-error", "0.05", "--target-accuracy", "0.9"),
         r"--target-accuracy and --max-error: give one"),
        ("certify-alone", ("--certify", "points"), r"--certify points: give --max-error too"),
        ("review-budget-1.5", ("--review-budget", "1.5"), r"--review-budget 1\.5: give a share from 0 up to \(not "
                                                          r"including\) 1"),
        ("review-budget-negative", ("--review-budget", "-1"), r"--review-budget -1(\.0)?: give a share"),
        ("target-accuracy-negative", ("--target-accuracy", "-0.5"), r"--target-accuracy -0\.5: give a share above 0"),
        ("target-accuracy-inf", ("--target-accuracy", "inf"), r"--target-accuracy inf: give a share above 0"),
        ("budget-and-max-error", ("--max-error", "0.05", "--review-budget", "0.2"),
         r"--review-budget and --max-error: give one"),
        ("certify-pages", ("--max-error", "0.05", "--certify", "pages"), r"--certify: invalid choice: 'pages'"),
    ]
    return [
        *[Case(f"selective-{name}", SELECT, select_args(*flags), message, setup=training_run(), outputs=())
          for name, flags, message in values],
        *[Case(f"selective-{name}", GRADE, grade_args(*flags), message, setup=pages("a.png"), outputs=())
          for name, flags, message in values],
    ]


# ----------------------------------------------------------------------------------------------- export_hub.py
HUB = "data_builders/export_hub.py"
HUB_ARGS = ["--build", "{box}/sft", "--out", "{box}/out"]


def build_copy(env: Env) -> None:
    """box/sft: a copy of the shared SFT build (its images hard-linked)."""
    link_tree(env.fixtures["sft"], env.box / "sft")


def linked_image(env: Env) -> None:
    """box/sft's first image replaced by a link to box/private.jpg (a copy of its bytes, standing for a private
    photo)."""
    image = sorted((env.box / "sft" / "images").rglob("*.jpg"))[0]
    replace_file(env.box / "private.jpg", image.read_bytes())
    image.unlink()
    image.symlink_to(env.box / "private.jpg")


def build_row_image(path: str) -> Callable[[Env], None]:
    """box/sft's first train row edited to name `path` ({box} filled) as its image, as an edited build would."""
    def setup(env: Env) -> None:
        from datasets import load_from_disk

        split = load_from_disk(str(env.fixtures["sft"] / "train"))
        bad = env.sub(path)
        split = split.map(lambda row, i: {"images": [bad] if i == 0 else row["images"]}, with_indices=True,
                          keep_in_memory=True)
        shutil.rmtree(env.box / "sft" / "train")
        split.save_to_disk(str(env.box / "sft" / "train"))
    return setup


def earlier_export(env: Env) -> None:
    """box/out as a finished export of box/sft left it."""
    from gbtrain.data.hub_export import HubExportRun, export_hub

    export_hub(HubExportRun(str(env.box / "sft"), str(env.box / "out")))


def unfinished_export(env: Env) -> None:
    """box/out as an export stopped after its first shard: the unfinished record, a split's Arrow file and state."""
    earlier_export(env)
    (env.box / "out" / "README.md").unlink()
    replace_file(env.box / "out" / "gbtrain_export.json", json.dumps({"status": "unfinished",
                                                                       "build": str(env.box / "sft")}))


def hub_cases() -> list[Case]:
    foreign = r"--out \S+/out holds files that export_hub did not write \(no readable record of it\): choose another"
    unlisted = r"--out \S+/out holds {} \(1 files\) that export_hub did not write"
    return [
        Case("as-built", HUB, HUB_ARGS, code=0, check=exists("out/gbtrain_export.json", "out/README.md"),
             setup=build_copy),
        Case("over-an-earlier-export", HUB, HUB_ARGS, code=0, check=exists("out/gbtrain_export.json"),
             setup=chain(build_copy, earlier_export)),
        Case("over-a-stopped-export", HUB, HUB_ARGS, code=0, check=exists("out/gbtrain_export.json", "out/README.md"),
             setup=chain(build_copy, unfinished_export)),
        # nothing is deleted that a record of export_hub did not write
        Case("out-holds-users-csv", HUB, HUB_ARGS, foreign, setup=chain(build_copy, write("out/train/mine.csv", "x")),
             outputs=()),
        Case("out-holds-users-readme", HUB, HUB_ARGS, foreign, setup=chain(build_copy, write("out/README.md", "x")),
             outputs=()),
        Case("earlier-export-and-users-csv", HUB, HUB_ARGS, unlisted.format(r"train/mine\.csv"),
             setup=chain(build_copy, earlier_export, write("out/train/mine.csv", "x")), outputs=()),
        Case("stopped-export-and-users-csv", HUB, HUB_ARGS, unlisted.format(r"train/mine\.csv"),
             setup=chain(build_copy, unfinished_export, write("out/train/mine.csv", "x")), outputs=()),
        Case("stopped-export-and-users-parquet", HUB, HUB_ARGS,
             unlisted.format(r"validation/part-0\.parquet"),
             setup=chain(build_copy, unfinished_export, write("out/validation/part-0.parquet", "PAR1")), outputs=()),
        Case("stopped-export-linking-outside", HUB, HUB_ARGS, r"--out \S+/out holds test, a link \(to \S+/outside\): "
             r"export_hub replaces no linked folder: remove the link, or choose another --out",
             setup=chain(build_copy, unfinished_export, lambda env: shutil.rmtree(env.box / "out" / "test"),
                         lambda env: (env.box / "out" / "test").symlink_to(env.outside)), outputs=()),
        Case("record-damaged", HUB, HUB_ARGS, foreign,
             setup=chain(build_copy, earlier_export, write("out/gbtrain_export.json", "[" * 100_000)), outputs=()),
        Case("record-lists-a-file-outside", HUB, HUB_ARGS, r"--out \S+/out holds dataset_dict\.json \(\d+ files\) "
             r"that export_hub did not write \(its gbtrain_export\.json does not list them\)", outputs=(),
             setup=chain(build_copy, earlier_export, lambda env: replace_file(
                 env.box / "out" / "gbtrain_export.json", json.dumps(
                     json.loads((env.box / "out" / "gbtrain_export.json").read_text()) | {
                         "files": ["../outside/keep.txt", "README.md"]})))),
        # every path read from the build is confined to it
        Case("row-names-a-file-beside-the-build", HUB, HUB_ARGS, r"a train row names the image \S*secret\.jpg.*which "
             r"is not under images/ of a build",
             setup=chain(build_copy, write("private/secret.jpg", "x"), build_row_image("../private/secret.jpg")),
             outputs=()),
        Case("row-names-an-absolute-path", HUB, HUB_ARGS, r"a train row names the image '/etc/passwd'.*not under "

             r"images/ of a build", setup=chain(build_copy, build_row_image("/etc/passwd")), outputs=()),
        # the folders and the push
        Case("build-missing", HUB, ["--build", "{box}/none", "--out", "{box}/out"], r"\S+/none", outputs=()),
        Case("build-not-a-build", HUB, ["--build", "{box}/data", "--out", "{box}/out"], r"\S+/data",
             setup=data(), outputs=()),
        Case("out-is-build", HUB, ["--build", "{box}/sft", "--out", "{box}/sft"], r"--out \S+/sft is --build "
             r"\S+/sft: write the export to a folder of its own", setup=build_copy, outputs=()),
        Case("out-inside-build", HUB, ["--build", "{box}/sft", "--out", "{box}/sft/hub"], r"--out \S+/sft/hub lies "
             r"inside --build \S+/sft: write the export to a folder of its own", setup=build_copy, outputs=()),
        # an image of the build replaced by a link to a private file: not published
        Case("image-a-link", HUB, HUB_ARGS, r"sft/images/\S+\.jpg: a link \(to \S+/private\.jpg\), where a build "
             r"holds its images as files", setup=chain(build_copy, linked_image), outputs=()),
        Case("out-a-file", HUB, ["--build", "{box}/sft", "--out", "{box}/f.txt"], r"f\.txt",
             setup=chain(build_copy, write("f.txt", "x")), outputs=()),
        Case("out-read-only", HUB, ["--build", "{box}/sft", "--out", "{box}/ro/out"], RO,
             setup=chain(build_copy, lambda env: read_only(env, "ro")), outputs=()),
        Case("out-empty-name", HUB, ["--build", "{box}/sft", "--out", ""], r"--out is empty: name the output folder",
             setup=build_copy, outputs=()),
        Case("push-offline", HUB, [*HUB_ARGS, "--push-to-hub", "me/exams", "--license", "cc-by-4.0"],
             r"--push-to-hub me/exams: HF_HUB_OFFLINE is set, so nothing can be uploaded", setup=build_copy,
             outputs=()),
        Case("push-without-licence", HUB, [*HUB_ARGS, "--push-to-hub", "me/exams"], r"HF_HUB_OFFLINE is set|licence",
             setup=build_copy, outputs=()),
        *[Case(f"license-{name}", HUB, [*HUB_ARGS, "--license", value], r"--license .*: give a Hub licence id",
               setup=build_copy, outputs=())
          for name, value in (("empty", ""), ("spaces", "cc by 4.0"), ("upper-case", "CC-BY-4.0"),
                              ("html", "<img src=x onerror=alert(1)>"), ("yaml-lines", "mit\nprivate: false"),
                              ("markdown", "[mit](http://x.example)"), ("a-path", "../LICENSE"))],
        Case("license-an-id", HUB, [*HUB_ARGS, "--license", "cc-by-nc-sa-4.0"], code=0,
             check=exists("out/gbtrain_export.json", "out/README.md"), setup=build_copy),
        Case("push-bad-repo-id", HUB, [*HUB_ARGS, "--push-to-hub", "../../etc", "--license", "cc-by-4.0"],
             r"\.\./\.\./etc", setup=build_copy, outputs=()),
    ]


# ----------------------------------------------------------------------------------------------- demo.sh
DEMO = "scripts/demo.sh"


def fake_environment(env: Env) -> None:
    """box/venv: an environment whose python fails at once (exit 3): the demo's first stage fails."""
    replace_file(env.box / "venv" / "bin" / "python", "#!/bin/sh\nexit 3\n")
    (env.box / "venv" / "bin" / "python").chmod(0o755)


def demo_cases() -> list[Case]:
    """The demo's arguments and sizes, refused before it writes anything (or installs an environment)."""
    sizes = [("DEMO_PAGES", "abc"), ("DEMO_PAGES", "0"), ("DEMO_TRAIN_STEPS", "-5"), ("DEMO_HIDDEN", "1e3"),
             ("DEMO_EVAL_RECORDS", "9999999"), ("DEMO_CONVERSATIONS", "12 34"), ("DEMO_WARMUP_STEPS", "-1")]
    return [
        *[Case(f"{name.lower()}-{value.replace(' ', '-')}", DEMO, ["{box}/out"], rf"{name}={re.escape(value)}: give a "
               r"whole number from [01] to 999999", env={name: value}, outputs=(), limit_s=30)
          for name, value in sizes],
        Case("coords-unknown", DEMO, ["{box}/out"], r"DEMO_COORDS=pixels: one of qwen25, abs, rel1000",
             env={"DEMO_COORDS": "pixels"}, outputs=(), limit_s=30),
        Case("smoke-yes", DEMO, ["{box}/out"], r"DEMO_SMOKE=yes: 1 \(smoke-test sizes\) or 0",
             env={"DEMO_SMOKE": "yes"}, outputs=(), limit_s=30),
        Case("unknown-option", DEMO, ["--ful", "{box}/out"], r"unknown option '--ful': scripts/demo\.sh \[--full\] "
             r"\[--seed N\] \[OUT_DIR\]", outputs=(), limit_s=30),
        *[Case(f"seed-{name}", DEMO, args, rf"--seed {re.escape(shown)}: give a whole number from 0 to 9999",
               outputs=(), limit_s=30)
          for name, args, shown in (("missing", ["--seed"], ""), ("negative", ["--seed", "-1", "{box}/out"], "-1"),
                                    ("word", ["--seed", "one", "{box}/out"], "one"),
                                    ("huge", ["--seed", "123456", "{box}/out"], "123456"))],
        Case("two-folders", DEMO, ["{box}/a", "{box}/b"], r"2 folders given .*takes one", outputs=(), limit_s=30),
        # flags that would be taken and change nothing (round four)
        Case("seed-twice", DEMO, ["--seed", "1", "--seed", "2", "{box}/out"], r"--seed given twice \(1, then 2\): give "
             r"one", outputs=(), limit_s=30),
        Case("full-with-smoke", DEMO, ["--full", "{box}/out"], r"--full and DEMO_SMOKE=1: the smoke sizes would "
             r"replace the full demo's", env={"DEMO_SMOKE": "1"}, outputs=(), limit_s=30),
        *[Case(f"{name.lower()}-{value or 'empty'}", DEMO, ["{box}/out"], rf"{name}={re.escape(value)}: {says}",
               env={name: value}, outputs=(), limit_s=30)
          for name, value, says in (
              ("DEMO_DETERMINISTIC", "yes", r"1 \(torch's deterministic kernels\) or 0"),
              ("DEMO_DETERMINISTIC", "2", r"1 \(torch's deterministic kernels\) or 0"),
              ("DEMO_HELDOUT_PAGES", "0", "give a whole number from 1"),
              ("DEMO_EVAL_EVERY", "often", "give a whole number from 1"),
              ("DEMO_LAYERS", "0", "give a whole number from 1"),
              ("DEMO_MAX_TOKENS", "1234567", "give a whole number from 1"),
              ("DEMO_HIDDEN", "0x100", "give a whole number from 1"),
              ("DEMO_CONVERSATIONS", "-60", "give a whole number from 1"),
              ("DEMO_PAGES", "٣", "give a whole number from 1"),  # an Arabic-Indic digit: not 0-9
              ("DEMO_COORDS", "QWEN25", "one of qwen25"))],
        Case("out-a-file", DEMO, ["{box}/f.txt"], r"OUT_DIR \S+/f\.txt is a file: name a new folder",
             setup=write("f.txt", "x"), outputs=(), limit_s=30),
        Case("out-holds-files", DEMO, ["{box}/out"], r"OUT_DIR \S+/out holds files: name a new or empty folder",
             setup=write("out/mine.txt", "x"), outputs=(), limit_s=30),
        Case("venv-without-python", DEMO, ["{box}/out"], r"GBTRAIN_VENV=\S+/none has no bin/python",
             env={"GBTRAIN_VENV": "{box}/none"}, outputs=(), limit_s=30),
        # demo.sh demo-out, started in another folder: its OUT is there, never in the checkout
        Case("relative-out-from-another-folder", DEMO, ["demo-out"], r"the stage '\w+' failed \(exit 3\); its whole "
             r"output: \S+/box/demo-out/logs/\w+\.log", code=3, env={"GBTRAIN_VENV": "{box}/venv"},
             setup=fake_environment, outputs=("demo-out",), limit_s=60),
    ]


# ----------------------------------------------------------------------------------------------- round three, more
def agreement_more_cases() -> list[Case]:
    """Teachers' files with values no teacher writes, and band flags out of their range."""
    ok = scores(score_line("1", "6"), score_line("2", "2"))

    def teacher(**fields) -> str:
        return json.dumps({"submission": "Ann Lee", "question": "1", "score": 7, "full_score": 10} | fields) + "\n"

    refused = [
        ("teacher-score-401-digits", teacher(score=int("9" * 401)), r"t\.jsonl:1: \"score\" must be a finite number"),
        ("teacher-full-score-401-digits", teacher(full_score=int("9" * 401)),
         r"t\.jsonl:1: \"full_score\" must be a finite number"),
        ("teacher-score-a-string", teacher(score="7"), r"t\.jsonl:1: \"score\" must be a finite number"),
        ("teacher-score-2-above-full", teacher(score_2=11), r"t\.jsonl:1: score_2 11 is outside 0\.\.10"),
        ("teacher-question-a-list", teacher(question=[1]), r"t\.jsonl:1: .*question"),
        ("teacher-a-list-line", "[1, 2]\n", r"t\.jsonl:1: "),
    ]
    bands = [("0.6,0.6", r"--point-bands 0\.6,0\.6: give increasing shares"),
             ("0.5,nan", r"--point-bands 0\.5,nan: give increasing shares"),
             ("=-0.1,0.5", r"--point-bands -0\.1,0\.5: give increasing shares"),
             ("0.5,1.5", r"--point-bands 0\.5,1\.5: give increasing shares"),
             (",".join(f"0.{i:03d}" for i in range(1, 400)), r"--point-bands 0\.001,.*: give at most 9 edges")]
    return [
        *[Case(name, AGREEMENT, agreement_args(), message, setup=scores(score_line("1", "6"), teacher=text),
               outputs=()) for name, text, message in refused],
        *[Case(f"bands-{n}", AGREEMENT, agreement_args(*(["--point-bands" + value] if value.startswith("=") else
                                                         ["--point-bands", value])), message, setup=ok, outputs=())
          for n, (value, message) in enumerate(bands)],
        *[Case(f"large-error-{value}", AGREEMENT, agreement_args("--large-error", value),
               rf"--large-error {re.escape(value)}(\.0)?: give a share", setup=ok, outputs=())

          for value in ("0", "1.5", "-1", "inf")],
        Case("out-is-the-model-file", AGREEMENT, agreement_args(out="{box}/m.jsonl"),
             r"--out \S+/m\.jsonl is --model \S+: choose another --out", setup=ok, outputs=()),
        Case("question-ids-fullwidth", AGREEMENT, agreement_args(), code=0,
             check=report_has("out/report.json", points__coverage__missing=0),
             setup=scores(score_line("１", "6"), score_line("２", "2"))),
    ]


def points_in_annotation_cases() -> list[Case]:
    """A mark's points and corners as no annotation tool writes them: one line naming the record."""
    mark = "marks.0.attributes"
    cases = [
        ("score-401-digits", {f"{mark}.score": int("9" * 401), f"{mark}.full_score": 10},
         r"mark 0 attributes\.score must be a finite number of points, got 9{20}"),
        ("full-score-401-digits", {f"{mark}.score": 1, f"{mark}.full_score": int("9" * 401)},
         r"mark 0 attributes\.full_score must be a finite number of points"),
        ("score-thousands", {f"{mark}.score": "1,000", f"{mark}.full_score": 10},
         r"mark 0 attributes\.score must be a number of points, got str '1,000'"),
        ("score-nan", {f"{mark}.score": float("nan"), f"{mark}.full_score": 10},
         r"mark 0 attributes\.score must be a finite number of points, got nan"),
        ("corner-401-digits", {"marks.0.bbox_2d.0.0": int("9" * 401)},
         r"mark 0: bbox_2d has a non-finite coordinate: \[\[9{20}.{0,60}$"),
        ("corner-infinite", {"marks.0.bbox_2d.0.0": float("inf")}, r"mark 0: bbox_2d has a non-finite coordinate"),
        ("corner-nan", {"marks.0.bbox_2d.0.1": float("nan")}, r"mark 0: bbox_2d has a non-finite coordinate"),
        ("corner-a-string", {"marks.0.bbox_2d.0.1": "12px"}, r"mark 0: bbox_2d point must be \[x, y\], got "),
        ("corner-a-boolean", {"marks.0.bbox_2d.0.1": True}, r"mark 0: bbox_2d point must be \[x, y\], got "),
    ]

    def edits(changes: dict) -> Callable[[dict], None]:
        def edit(raw: dict) -> None:
            for key, value in changes.items():
                set_key(key, value)(raw)
        return edit
    return [Case(f"annotation-{name}", BUILD, build_args(data="{box}/data"), r"L1\.json \[record \S+\].*" + message,
                 setup=chain(data({"L1": 1}), edit_record("L1", 0, edits(changes))), outputs=())
            for name, changes, message in cases]


def alias_cases() -> list[Case]:
    """annotations/aliases.yaml as a user may get it wrong: refused naming the file and the key."""
    cases = [
        ("a-list", "- correct\n- right\n", r"aliases\.yaml: it must be a mapping of keys to values"),
        ("unknown-section", "verdicts: {correct: right}\n", r"aliases\.yaml: verdicts: Key 'verdicts' not in"),
        ("value-a-list", "labels: {correct: [right]}\n", r"aliases\.yaml: labels\.correct: \['right'\] is not one of"),
        ("section-a-string", "labels: right\n", r"aliases\.yaml: labels: Cannot assign str"),
        ("duplicate-word", "labels: {correct: right, correct: wrong}\n", r"aliases\.yaml.*duplicate key correct"),
        ("not-utf8", b"labels: {\xff: right}\n", r"aliases\.yaml: 'utf-8' codec can't decode"),

        ("anchor-bomb", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                        "labels: {correct: right}\n", r"aliases\.yaml"),
        ("question-type-unknown", "question_types: {Essay: Poem}\n", r"aliases\.yaml: question_types\.Essay: "
                                                                      r"'Poem' is not one of"),
    ]
    return [Case(f"aliases-{name}", BUILD, build_args(data="{box}/data"), message,
                 setup=chain(data({"L1": 1}), write("data/annotations/aliases.yaml", text)), outputs=())
            for name, text, message in cases]


def key_id_cases() -> list[Case]:
    """Answer keys typed as teachers type them: fullwidth digits and spaces name the model's questions."""
    found = csv_column("out/questions.csv", "status", lambda v: v == ["found", "found"])
    return [Case(f"key-ids-{name}", GRADE, grade_args(model="ided", answer_key="{box}/key.yaml"), code=0, check=found,
                 setup=chain(pages("a.png"), write("key.yaml", text)))
            for name, text in (("fullwidth", "１: 7\n２: 30\n"), ("quoted-with-spaces", "' 1 ': 7\n'2 ': 30\n"),
                               ("ascii", "1: 7\n2: 30\n"), ("printed", "Q1: 7\n第2题: 30\n"),
                               ("chinese-numerals", "一、: 7\n第二题: 30\n"),
                               ("numbered-in-brackets", "(1): 7\n2.: 30\n"),
                               ("placed-past-the-document", "1: {answer: '7', page: 1}\n2: {answer: '30', page: 2}\n"))]


def printed_id_cases() -> list[Case]:
    """A model that writes ids as the page prints them (Q1, 第二题) against a key of 1 and 2; keys whose ids read
    alike, or that place a question on no page."""
    found = csv_column("out/questions.csv", "status", lambda v: v == ["found", "found"])
    key = chain(pages("a.png"), write("key.yaml", "1: 7\n2: 30\n"))
    return [Case("model-ids-printed", GRADE, grade_args(model="printed", answer_key="{box}/key.yaml"), code=0,
                 check=found, setup=key),
            Case("key-ids-read-alike", GRADE, grade_args(answer_key="{box}/key.yaml"),
                 r"--answer-key \S+key\.yaml: questions '5' and 'Q5' are one question as a page prints it",
                 setup=chain(pages("a.png"), write("key.yaml", "5: 7\nQ5: 30\n")), outputs=()),
            *(Case(f"key-page-{name}", GRADE, grade_args(answer_key="{box}/key.yaml"),
                   rf"--answer-key \S+key\.yaml: question '1': page '{page}' must be a page number 1-1000",
                   setup=chain(pages("a.png"), write("key.yaml", f"1: {{answer: '7', page: '{page}'}}\n")), outputs=())
              for name, page in (("zero", "0"), ("word", "two"), ("negative", "-1"), ("past-a-thousand", "1001")))]


def stats_say(want: Callable[[dict], bool], what: str) -> Callable[[Env, str], str | None]:
    """out/stats.json of a build satisfies `want` (`what` says what it should show)."""
    def check(env: Env, _stdout: str) -> str | None:
        path = env.box / "out" / "stats.json"
        if not path.is_file():
            return "out/stats.json was not written"
        stats = json.loads(path.read_text(encoding="utf-8"))
        shown = json.dumps({k: stats.get(k) for k in ("sources", "replaced_pages", "pages_by_split")})[:400]
        return None if want(stats) else f"stats.json does not show {what}: {shown}"
    return check


def renamed_page(name: str, new: str) -> Callable[[Env], None]:
    """box/name's L3 page saved under another id and file name (its image byte for byte): the page a review import
    writes of a scan graded again."""
    def setup(env: Env) -> None:
        path = env.box / name / "annotations" / "L3.json"
        raw = json.loads(path.read_text(encoding="utf-8"))
        old = raw[0]["image"]
        raw[0]["id"], raw[0]["image"] = new, f"{old.rsplit('/', 1)[0]}/{new}.jpg"
        replace_file(path, json.dumps(raw, ensure_ascii=False))
        images = env.box / name / "images" / "L3"
        shutil.copyfile(images / old, images / raw[0]["image"])
        (images / old).unlink()
    return setup


def other_pixels(name: str) -> Callable[[Env], None]:
    """box/name's page images with other pixels (another student's page of the same exam, named alike)."""
    def setup(env: Env) -> None:
        from PIL import Image, ImageOps

        for level in ("L2", "L3"):
            for path in (env.box / name / "images" / level).rglob("*.jpg"):
                with Image.open(path) as im:
                    turned = ImageOps.invert(im.convert("RGB"))
                path.unlink()
                turned.save(path)
    return setup


def multi_source_cases() -> list[Case]:
    """Several --data folders: the same pages in both, pages named alike that are not the same, the same page
    renamed (so its own name would hash it to another split), and folder lists that cannot be built."""
    both = ["--data", "{box}/newer"]
    pages = {"L3": 1, "L2": 0, "L1": 0}
    return [
        Case("two-folders-same-pages", BUILD, build_args(*both, data="{box}/data"), code=0,
             check=stats_say(lambda s: len(s["replaced_pages"]) == 1 and s["sources"][0]["records"] == 0,
                             "the older copy replaced"),
             setup=chain(data(pages), data(pages, name="newer"))),
        Case("two-folders-conflicting-page-ids", BUILD, build_args(*both, data="{box}/data"), code=0,
             check=stats_say(lambda s: not s["replaced_pages"] and [x["records"] for x in s["sources"]] == [1, 1],
                             "both pages kept"),
             setup=chain(data(pages), data(pages, name="newer"), other_pixels("newer"))),
        Case("two-folders-page-in-two-splits", BUILD, build_args(*both, "test_share=0.5", "validation_share=0",
                                                                   data="{box}/data"), code=0,
             check=stats_say(lambda s: len(s["replaced_pages"]) == 1 and sum(s["pages_by_split"].values()) == 1,
                             "the renamed page taken once"),
             setup=chain(data(pages), data(pages, name="newer"), renamed_page("newer", "scan_0042"))),
        Case("more-data-not-a-gradingbench-folder", BUILD, build_args("--data", "{box}/notes", data="{box}/data"),
             r"no L1/L2/L3 annotation files", setup=chain(data(pages), write("notes/readme.txt", "notes")),
             outputs=()),
        Case("more-data-missing", BUILD, build_args("--data", "{box}/nowhere", data="{box}/data"),
             r"data directory not found: \S+nowhere", setup=data(pages), outputs=()),
        Case("more-data-the-same-folder", BUILD, build_args("--data", "{box}/./data", data="{box}/data"),
             r"data folder \S+ is given twice \(as \S+/data too\): name each folder once", setup=data(pages),
             outputs=()),
        *(Case(f"data-weights-{name}", BUILD, build_args(*both, f"data_weights={value}", data="{box}/data"), message,
               setup=chain(data(pages), data(pages, name="newer")), outputs=())
          for name, value, message in (
              ("one-for-two", "[1]", r"data_weights has 1 value\(s\) for 2 folder\(s\)"),
              ("zero", "[1,0]", r"data_weights: 0\.0 is not a finite number above 0"),
              ("negative", "[1,-2]", r"data_weights: -2\.0 is not a finite number above 0"),
              ("nan", "[1,.nan]", r"data_weights: nan is not a finite number above 0"),
              ("a-word", "[1,two]", r"data_weights"))),
        Case("a-page-with-no-answers", BUILD, build_args(data="{box}/data"), code=0,
             check=printed(r"warning: conversations whose target is empty \(records with no answer marks\), by level: "
                           r"\{'L3': \d+\}"),
             setup=chain(data(pages), edit_record("L3", 0, set_key("marks", [])))),
        Case("answers-numbered-by-position", BUILD, build_args(data="{box}/data"), code=0,
             check=stats_say(lambda s: s["total"] > 0 and not s["empty_targets"], "conversations with answers"),
             setup=chain(data(pages), edit_level("L3", lambda raw: [m["attributes"].update(id=f"#{k}") for k, m in
                                                                   enumerate(raw[0]["marks"], start=1)]))),
        Case("more-data-inside-out", BUILD, build_args("--data", "{box}/out/newer", data="{box}/data"),
             r"out \S+/out holds data \S+/out/newer: write", setup=chain(data(pages), data(pages, name="out/newer")),
             outputs=()),
    ]


CASES = [*score_cases(), *agreement_cases(), *eval_cases(), *build_cases(), *train_cases(), *merge_cases(),
         *reliance_cases(), *compare_cases(), *synth_cases(), *tiny_cases(), *convert_cases(), *preview_cases(),
         *grade_cases(), *select_cases(), *review_cases(), *interval_cases(), *compare_outcome_cases(),
         *selective_cases(), *hub_cases(), *demo_cases(), *agreement_more_cases(), *points_in_annotation_cases(),
         *alias_cases(), *key_id_cases(), *printed_id_cases(),
         *multi_source_cases(), *student_cases()]


# ----------------------------------------------------------------------------------------------- the fake endpoint
REPLIES = {"ok": "[]", "yes": "yes", "huge": "[" * 1_200_000, "deep": "[" * 5000,
           "bignum": '[{"bbox_2d": [1e999999999, 0, ' + "9" * 401 + ', 5], "text": "1", "answer": "1e999999999", '
                     '"correctness": true}]', "surrogate": "\ud800[\udfff", "null": None,
           # a page's grading: two items; and items whose text a spreadsheet would run as a formula, or that is HTML
           "ided": json.dumps([{"question_id": "1", "bbox_2d": [10, 10, 100, 60], "text": "7", "answer": "7",
                                "correctness": True},
                               {"question_id": "2", "bbox_2d": [10, 80, 100, 120], "text": "35", "answer": "30",
                                "correctness": False}]),
           "printed": json.dumps([{"question_id": "Q1", "bbox_2d": [10, 10, 100, 60], "text": "7", "answer": "7",
                                   "correctness": True},
                                  {"question_id": "第二题", "bbox_2d": [10, 80, 100, 120], "text": "35", "answer": "30",
                                   "correctness": False}]),
           "graded": json.dumps([{"bbox_2d": [10, 10, 100, 60], "text": "7", "answer": "7", "correctness": True},
                                 {"bbox_2d": [10, 80, 100, 120], "text": "35", "answer": "30", "correctness": False}]),
           "formula": json.dumps([{"bbox_2d": [10, 10, 100, 60], "text": '=HYPERLINK("http://x.example/","7")',
                                   "answer": "@SUM(A1:A9)", "correctness": True,
                                   "question_id": "+1+cmd|' /C calc'!A0"}]),
           "html": json.dumps([{"bbox_2d": [10, 10, 100, 60], "text": "<script>alert(1)</script>",
                                "answer": "<img src=x onerror=alert(1)>", "correctness": None}]),
           "surrogate-text": '[{"bbox_2d": [10, 10, 100, 60], "text": "a\ud800b", "answer": "\udfff", '
                             '"correctness": true}]'}


def answer_by_model(model: str, n: int) -> tuple[int, str | None]:
    """What the fake endpoint answers depends on the requested model name: ok ("[]"), yes, graded (two items), ided
    (the two items with their question ids), printed (with ids as a page prints them), echo-key-reply (a reply
    holding the request's key),
    refuse (400), refuse-second (400 to its second request), auth (401), missing (404), huge, deep, bignum,
    surrogate, surrogate-text, formula, html (hostile REPLIES) and null (no content)."""
    status = 400 if model in ("refuse", "echo-key") or (model == "refuse-second" and n == 2) else \
        {"auth": 401, "echo-key-401": 401, "missing": 404}.get(model, 200)
    if model == "echo-key-reply":  # a reply (status 200) that repeats the request's key: a judge's example
        return 200, f"I cannot tell. Request: Authorization: Bearer {SECRET}; key {SECRET}"
    if model.startswith("echo-key"):  # an endpoint whose error text repeats the request's key
        return status, f"invalid request (Authorization: Bearer {SECRET}; key {SECRET})"
    return (status, REPLIES.get(model, "[]")) if status == 200 else (status, f"refused ({status})")


# ----------------------------------------------------------------------------------------------- running a case
class CaseTimeout(BaseException):
    """Raised in the main thread when a case passes its time limit (BaseException: no `except Exception` hides it)."""


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root with its kind, and a file's size and modification time (what a write changes; a
    folder's own time changes with its entries, which are listed themselves). Plain strings and os.scandir: taken
    twice per case over the shared fixtures, a pathlib walk was a quarter of the corpus's time."""
    out = {}
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                kind = st.st_mode >> 12
                if entry.is_dir(follow_symlinks=False):
                    out[entry.path] = (kind, 0, 0)
                    stack.append(entry.path)
                else:
                    out[entry.path] = (kind, st.st_size, st.st_mtime_ns)
    return out


def changed(before: dict, after: dict) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def run_process(script: str, argv: list[str], cwd: Path, env: dict[str, str], limit_s: float,
                file_size_limit: int | None = None) -> tuple[str, int | None, str, str]:
    """(how it ended, exit code, stdout, stderr) of a script run in its own process: a shell script by bash, a
    Python one by this interpreter (with its files limited to `file_size_limit` bytes)."""
    def limit_files() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    runner = ["bash"] if script.endswith(".sh") else [sys.executable]
    try:
        proc = subprocess.run([*runner, str(ROOT / script), *argv], cwd=cwd, env=os.environ | env, capture_output=True,
                              text=True, timeout=limit_s, preexec_fn=limit_files if file_size_limit else None)
    except subprocess.TimeoutExpired as e:
        return "hang", None, e.stdout or "", e.stderr or ""
    ended = "traceback" if "Traceback (most recent call last)" in proc.stderr else "exit"
    return ended, proc.returncode, proc.stdout, proc.stderr


def run_script(script: str, argv: list[str], cwd: Path, env: dict[str, str], limit_s: float,
               file_size_limit: int | None = None) -> tuple[str, int | None, str, str]:
    """(how it ended: exit / traceback / hang, exit code, stdout, stderr) of `script` run as __main__ here (a shell
    script, or a case whose file sizes are limited: in its own process)."""
    if script.endswith(".sh") or file_size_limit:
        return run_process(script, argv, cwd, env, limit_s, file_size_limit)
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd, saved_env = sys.argv, os.getcwd(), dict(os.environ)

    def on_alarm(*_):
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    ended, code = "exit", 0
    try:
        os.chdir(cwd)
        os.environ.update(env)
        sys.argv = [str(ROOT / script), *argv]
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(ROOT / script), run_name="__main__")
            except SystemExit as e:
                if isinstance(e.code, str):  # what the interpreter does with sys.exit("message")
                    err.write(e.code + "\n")
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except CaseTimeout:
                ended = "hang"
            except Exception:  # a bug's traceback, kept for the assertion message
                import traceback

                err.write(traceback.format_exc())
                ended = "traceback"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return ended, code, out.getvalue(), err.getvalue()


_NOISE = re.compile(r"(^\S+: warning: |Warning: |^\s*warnings\.warn|it/s\]|s/it\]|^\s*$)")


def final_message(stderr: str, prog: str) -> tuple[str | None, bool]:
    """The refusal at the end of stderr: its last `prog: ...` line with any indented problem list after it,
    and whether nothing else follows it (warnings and progress bars aside)."""
    lines = [ln for ln in re.split(r"[\r\n]+", stderr) if not _NOISE.search(ln)]
    prefixes = (f"{prog}: ", f"{prog}.py: error: ")
    heads = [i for i, ln in enumerate(lines) if ln.startswith(prefixes)]
    if not heads:
        return (lines[-1] if lines else None), False
    block = lines[heads[-1]:]
    return "\n".join(block), all(ln.startswith("  ") for ln in block[1:])


def classify(case: Case, ended: str, code: int | None, stdout: str, stderr: str, escaped: list[str], env: Env) -> str:
    """One outcome class for a run (see the module docstring)."""
    if ended in ("hang", "traceback") or "Traceback (most recent call last)" in stderr:
        return "hang" if ended == "hang" else "traceback"
    if escaped or SECRET in stdout or SECRET in stderr:
        return "escaped"
    if case.code == 0:
        if code != 0:
            return "unclear"
        return "silent" if case.check and case.check(env, stdout) else "clear"
    if code == 0:
        return "silent"
    message, alone = final_message(stderr, Path(case.script).stem)
    if code != case.code or message is None or not alone or not re.search(case.message, message, re.S):
        return "unclear"
    return "unclear" if case.check and case.check(env, stdout) else "clear"  # a refusal that left work behind


def leaked(paths) -> list[str]:
    """The written (new or changed) files that hold the secret."""
    return [p for p in paths if Path(p).is_file() and not Path(p).is_symlink()
            and SECRET.encode() in Path(p).read_bytes()]


def run_case(case: Case, tmp_path: Path, fixtures: dict[str, Path], url: str) -> tuple[str, str]:
    """Set the case up in its sandbox, run it, and classify it; returns (class, a description for failures)."""
    box, outside = tmp_path / "box", tmp_path / "outside"
    box.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("must not change\n")
    env = Env(box, outside, fixtures, url)
    try:
        if case.setup:
            case.setup(env)
        roots = [tmp_path, *{p if p.is_dir() else p.parent for p in fixtures.values()}]
        before = {r: snapshot(r) for r in roots}
        probes_before = set(Path("/tmp").glob(f"*{PROBE}*"))
        argv = [env.sub(a) for a in case.args]
        started = time.perf_counter()
        ended, code, stdout, stderr = run_script(case.script, argv, box,
                                                 FIXED_ENV | {k: env.sub(v) for k, v in case.env.items()},
                                                 case.limit_s, case.file_size_limit)
        took = time.perf_counter() - started
        allowed = [str(box / o) for o in case.outputs]
        escaped = sorted(p for r in roots for p in changed(before[r], snapshot(r))
                         if not any(p == a or p.startswith(a + "/") for a in allowed))
        escaped += [str(p) for p in set(Path("/tmp").glob(f"*{PROBE}*")) - probes_before]
        escaped += [str(ROOT / o) for o in case.outputs if case.script.endswith(".sh") and (ROOT / o).exists()]
        escaped += leaked(p for p in changed(before[tmp_path], snapshot(tmp_path)) if p.startswith(str(box)))
        outcome = classify(case, ended, code, stdout, stderr, escaped, env)
    finally:
        release(env)
        while _HELD:
            _HELD.pop().close()
    problem = case.check(env, stdout) if case.check and outcome in ("silent", "unclear") and code == case.code else None
    detail = (f"{case.id}: {outcome} (exit {code}, expected {case.code}, {took:.1f} s)\n"
              f"  argv: {argv}\n  expected message: {case.message!r}\n"
              + (f"  check: {problem}\n" if problem else "") + (f"  changed outside the output: {escaped[:8]}\n"
                                                                 if escaped else "")
              + f"  stderr tail:\n{stderr[-2500:]}\n  stdout tail:\n{stdout[-800:]}")
    return outcome, detail


FIXED_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
             "OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "HF_DATASETS_OFFLINE": "1", "GBTRAIN_TEST_KEY": SECRET}


# ----------------------------------------------------------------------------------------------- fixtures and tests
@pytest.fixture(scope="module")
def endpoint():
    server = ChatEndpoint(answer_by_model)
    yield server
    server.server.shutdown()


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory):
    """A LoRA adapter of the tiny model (untrained: merge_lora only needs its files)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    peft = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    out = tmp_path_factory.mktemp("adapter") / "lora"
    peft.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def report_json(synth_dir, endpoint, tmp_path_factory):
    """A real report.json (two settings, two records each) for compare.py."""
    from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint

    out = tmp_path_factory.mktemp("report") / "ev"
    evaluate_checkpoint(EvalRun(model="ok", data=str(synth_dir), out=str(out), backend="openai", base_url=endpoint.url,
                                settings="L1-af,L3-ab", limit=2, coords="qwen25", overlays=0,
                                min_pixels=TEST_MIN_PIXELS, max_pixels=TEST_MAX_PIXELS), progress=False)
    return out / "report.json"


@pytest.fixture(scope="module")
def fixtures(tiny_model_dir, synth_dir, sft_dir, adapter_dir, report_json):
    return {"model": Path(tiny_model_dir), "synth": Path(synth_dir), "sft": Path(sft_dir), "adapter": adapter_dir,
            "report": report_json, "convert": ROOT / "tests" / "fixtures" / "convert"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, fixtures, endpoint, tmp_path, record_property):
    outcome, detail = run_case(case, tmp_path, fixtures, endpoint.url)
    record_property(CORPUS_OUTCOME, (case.id, outcome))  # counted by conftest.py at the end, over every worker
    assert outcome == "clear", detail


def counts_table(outcomes: dict[str, str]) -> str:
    counts = Counter(outcomes.values())
    by_script = Counter(case_id.split("-", 1)[0] for case_id in outcomes)
    lines = [f"cases tried: {len(outcomes)} ({', '.join(f'{k} {v}' for k, v in sorted(by_script.items()))})"]
    lines += [f"{name:>10}: {counts.get(name, 0)}" for name in CLASSES]
    bad = sorted(f"{c} ({o})" for c, o in outcomes.items() if o != "clear")
    return "\n".join(lines + ([f"not clear: {', '.join(bad)}"] if bad else []))


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES) >= 980


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
