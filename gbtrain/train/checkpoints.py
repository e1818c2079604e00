"""When a checkpoint is complete: a marker written last, after every rank has saved, lists each file's size and
names the run that saved it. A save cut short (a kill, a full disk) leaves no marker, so it is never resumed from
or evaluated; a file truncated or deleted afterwards no longer matches the marker and is named."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gbtrain.files import read_json, write_atomic

RUN_RECORD = "gbtrain_run.json"  # an output_dir's run: its identity and id (gbtrain.train.trainer)
COMPLETE_MARKER = "gbtrain_complete.json"
# The trainer's own names: `checkpoint-` and the step in ASCII digits without leading zeros, so no two name one step.
_TRAINER_NAME = re.compile(r"checkpoint-(0|[1-9][0-9]*)", re.ASCII)


def is_trainer_name(name: str) -> bool:
    return _TRAINER_NAME.fullmatch(name) is not None


def checkpoint_files(folder: Path) -> dict[str, int]:
    """Every file under `folder` (DeepSpeed's shard folders included) with its size, the marker left out."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != COMPLETE_MARKER}


def mark_complete(folder: str | Path, run_id: str | None, step: int) -> None:
    """Call once every file of the checkpoint is written (by every rank)."""
    folder = Path(folder)
    marker = {"run_id": run_id, "step": step, "files": checkpoint_files(folder)}
    write_atomic(folder / COMPLETE_MARKER, json.dumps(marker, indent=1) + "\n")


def checkpoint_problem(folder: str | Path, run_id: str | None = None) -> str | None:
    """Why `folder` is not a complete checkpoint of run `run_id` (any run when None), or None when it is."""
    folder = Path(folder)
    path = folder / COMPLETE_MARKER
    if not path.is_file():
        return f"no {COMPLETE_MARKER}: its save did not finish (or gbtrain did not save it)"
    try:
        marker = read_json(path)
        files = marker["files"]
        if not isinstance(files, dict) or not all(isinstance(v, int) for v in files.values()):
            raise TypeError("files is not a map of sizes")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"its {COMPLETE_MARKER} cannot be read ({e})"
    if run_id is not None and marker.get("run_id") != run_id:
        return f"saved by another run ({marker.get('run_id')!r}, this folder's run is {run_id!r})"
    if is_trainer_name(folder.name) and marker.get("step") != int(folder.name.removeprefix("checkpoint-")):
        return f"its {COMPLETE_MARKER} was written at step {marker.get('step')!r}: a checkpoint copied or renamed"
    for name, size in files.items():
        file = folder / name
        if not file.is_file():
            return f"{name} is missing (it was saved with the checkpoint)"
        if file.stat().st_size != size:
            return f"{name} is {file.stat().st_size:,} bytes, {size:,} when saved: damaged or truncated"
    return None


def resume_point(output_dir: str | Path, run_id: str | None) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint of this run to resume from, and a note on each newer one passed over (a save
    that did not finish). A damaged complete checkpoint is an error: the files it needs are named, and deleting it
    resumes from the one before."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None, []
    folders = sorted((p for p in output_dir.iterdir() if p.is_dir() and is_trainer_name(p.name)),
                     key=lambda p: int(p.name.removeprefix("checkpoint-")), reverse=True)
    notes = []
    for folder in folders:
        problem = checkpoint_problem(folder, run_id)
        if problem is None:
            return folder, notes
        if not (folder / COMPLETE_MARKER).is_file():
            notes.append(f"{folder.name} is passed over: {problem}")
            continue
        raise ValueError(f"cannot resume from {folder}: {problem}; delete {folder.name} to resume from the "
                         f"checkpoint before it")
    return None, notes
