"""Every tool's output folder: what each one's record is called, how a folder is claimed before any work, and
what may be replaced in it. A tool deletes only what a record of its own vouches for, never writes into its own
input, and never mixes its work with work made otherwise (another model, config or data).

| tool | its folder holds | record (written when) |
|---|---|---|
| data_builders/synth_pages.py | a GradingBench folder | SYNTH_RECORD (last) |
| data_builders/convert.py | a GradingBench folder | CONVERT_REPORT (first, "unfinished"; then complete) |
| data_builders/build_sft.py | the SFT dataset | the build's own files (gbtrain.data.sft_dataset.BUILD_FILES) |
| data_builders/export_hub.py | a Hub dataset | HUB_EXPORT_RECORD (first, "unfinished"; then the files it wrote) |
| recipes/sft_qwen.py | checkpoints | TRAINING_RECORD (first); each checkpoint's COMPLETE_MARKER |
| eval/run_eval.py, eval/grade_pages.py | predictions; graded pages | RUN_RECORD (claim_output_folder) |
| eval/select_checkpoint.py | evaluations, the copy | SELECTION_RECORD; COPY_MARKER and SELECTIVE_RECORD in the copy |
| eval/review.py export / import | GRADED/review; the reviewed pages | REVIEW_RECORD in each |
| eval/score.py | a report and its table beside it (claim_output_files) | the report itself |
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from gbtrain.config import identity_differences
from gbtrain.files import read_json, write_atomic

SYNTH_RECORD = "synth_pages.json"
CONVERT_REPORT = "convert_report.json"
HUB_EXPORT_RECORD = "gbtrain_export.json"
TRAINING_RECORD = "gbtrain_run.json"  # an output_dir's run: its identity and id (gbtrain.train.trainer)
COMPLETE_MARKER = "gbtrain_complete.json"  # in a checkpoint saved whole (gbtrain.train.checkpoints)
RUN_RECORD = "run.json"  # an evaluation's or a grading's identity
SELECTION_RECORD = "selection_run.json"
COPY_MARKER = "gbtrain_selected.json"  # in the copy of the chosen checkpoint: where it came from
SELECTIVE_RECORD = "selective_threshold.json"  # in a checkpoint folder: the review threshold chosen on validation
REVIEW_RECORD = "review_run.json"  # in GRADED/review (what made its images), and in an import's folder


def require_out(out: str | Path, flag: str = "--out") -> None:
    """An output folder must be named: an empty value (an unset shell variable) would mean the current folder."""
    if not str(out).strip():
        raise ValueError(f"{flag} is empty: name the output folder")


def overlapping(out_name: str, out: str | Path, inputs: dict[str, str | Path]) -> list[str]:
    """`OUT_NAME X is/lies inside/holds NAME Y` for each input folder that an output folder shares a tree with: a
    tool that replaces files in its output would overwrite (or mix its work into) its own input. Inputs that are
    not local folders (hub ids) are skipped."""
    out_abs = Path(out).resolve()
    problems = []
    for name, path in inputs.items():
        if not path or not Path(path).is_dir():
            continue
        how = relation(out_abs, Path(path).resolve())
        if how:
            problems.append(f"{out_name} {out} {how} {name} {path}")
    return problems


def relation(out: Path, src: Path) -> str | None:
    """How an output path lies to an input (both resolved): "is", "lies inside", "holds", or None (apart)."""
    return "is" if out == src else "lies inside" if src in out.parents else "holds" if out in src.parents else None


class FolderLock:
    """An exclusive lock on OUTDIR/.lock for the whole run (released by the OS if the process dies), so two
    runs never append to the same prediction files; the holder's pid is in the file for the message."""

    def __init__(self, out: Path):
        self.path = out / ".lock"

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise ValueError(f"{self.path.parent} is in use by another evaluation ({holder}): wait for it to "
                             f"finish, or choose another --out") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()}")
        self.file.flush()
        return self

    def __exit__(self, *exc):
        self.file.close()


def _recorded_identity(path: Path) -> dict | None:
    """An earlier run's run.json; None when it cannot be read (it cannot vouch for the predictions beside it)."""
    try:
        recorded = read_json(path)
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) else None


def claim_output_folder(out: Path, identity: dict, overwrite: bool, work: Iterable[str] = ("predictions",),
                        record: str = RUN_RECORD, discard: bool = False) -> None:
    """Record what makes this folder's work (`identity`, whose "tool" names the tool) in `record`; a rerun with
    anything else is refused rather than mixed with it, or with --overwrite the old work goes first (`discard`: even
    work made the same way, for a tool whose --overwrite redoes everything). `work`: the entries of `out` that hold
    it. Work that no readable record of the same tool vouches for was not written by it: it is never reused, and
    never deleted, --overwrite or not. A record without work (a run that stopped before its first batch) is
    replaced."""
    path = out / record
    present = [out / name for name in work if (out / name).exists()]
    held = [p for p in present if not _empty_folder(p)]  # an empty folder holds no work to vouch for
    if held:
        recorded = _recorded_identity(path) if path.is_file() else None
        tool = identity["tool"]
        if recorded is None or recorded.get("tool") != tool:
            raise ValueError(f"{out} holds {', '.join(p.name for p in held[:3])} that no readable {record} of {tool} "
                             f"vouches for: choose another --out (--overwrite discards only work that {tool} "
                             f"recorded)")
        differs = identity_differences(recorded, identity)
        if differs and not overwrite:
            raise ValueError(f"{out} holds work made otherwise ({'; '.join(differs)}): choose another --out, or pass "
                             f"--overwrite to discard it")
        if overwrite and (differs or discard):
            for folder in present:
                shutil.rmtree(folder)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(identity, indent=1) + "\n")


def _empty_folder(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def claim_rebuilt_folder(out: str | Path, flag: str, tool: str, ours: bool) -> None:
    """A folder that `tool` rewrites whole on a rerun must be named (not empty), and be empty, missing, or `ours`
    (it holds that tool's record): anything else may be a user's own files, which a rerun would replace."""
    require_out(out, flag)
    out = Path(out)
    if out.is_dir() and any(out.iterdir()) and not ours:
        raise ValueError(f"{flag} {out} holds files that {tool} did not write (no readable record of it): choose "
                         f"another {flag} (or an empty one)")


def claim_output_files(files: Iterable[tuple[Path, Callable[[Path], bool]]], inputs: dict[str, str | Path | None],
                       flag: str, tool: str) -> None:
    """A tool that writes named files (a report, and tables beside it) writes none of them over what it reads or into
    a folder it reads (`inputs`: flag -> file or folder), and replaces an existing file only where `ours` recognises
    it as this tool's own output: anything else may be a teacher's annotations or another tool's report."""
    sources = {flag_name: Path(p).resolve() for flag_name, p in inputs.items() if p and str(p).strip()}
    for path, ours in files:
        target = path.resolve()
        for name, src in sources.items():
            how = relation(target, src)
            if how in ("is", "lies inside"):  # a file that holds an input is a folder: refused below
                raise ValueError(f"{flag} {path} {how} {name} {src}, which {tool} reads: write it elsewhere")
        if path.is_dir():
            raise ValueError(f"{flag} {path} is a folder: name a file")
        if path.exists() and not ours(path):
            raise ValueError(f"{path} exists and is not a file {tool} wrote: choose another {flag} (it is never "
                             f"replaced)")
