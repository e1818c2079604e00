"""When a checkpoint is complete: a marker written last, after every rank has saved, lists each file's size and
names the run that saved it. A save cut short (a kill, a full disk) leaves no marker, so it is never resumed from
or evaluated; a file truncated or deleted afterwards no longer matches the marker and is named."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from gbtrain.coords import CONVENTIONS, DEFAULT_L2_MARGIN, PixelBudget
from gbtrain.data.sft_dataset import dataset_coords, dataset_l2_margin, dataset_pixel_budget
from gbtrain.families import DEFAULT_FAMILY
from gbtrain.files import read_json, write_atomic
from gbtrain.outputs import COMPLETE_MARKER, TRAINING_RECORD
from gbtrain.text import brief

# The trainer's own names: `checkpoint-` and the step in ASCII digits without leading zeros, so no two name one step.
_TRAINER_NAME = re.compile(r"checkpoint-(0|[1-9][0-9]*)", re.ASCII)


def is_trainer_name(name: str) -> bool:
    return _TRAINER_NAME.fullmatch(name) is not None


def checkpoint_files(folder: Path) -> dict[str, int]:
    """Every file under `folder` (DeepSpeed's shard folders included) with its size, the marker left out."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != COMPLETE_MARKER}


_WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO, errno.EROFS)
# what torch.save and safetensors raise when a write is cut short (torch: its zip writer's position check;
# safetensors: the Rust io error), besides an OSError
_WRITE_FAILURE = re.compile(r"PytorchStreamWriter|file write failed|unexpected pos \d+|inline_container|IoError|"
                            r"No space left|File too large|Disk quota", re.IGNORECASE)


def write_failure(error: BaseException) -> str | None:
    """Why a save failed when it was the disk (full, over a quota or a file-size limit, read-only, an I/O error),
    in a few words; None for any other error (a bug's, which keeps its traceback)."""
    for e in (error, error.__cause__, error.__context__):
        if isinstance(e, OSError) and e.errno in _WRITE_ERRNOS:
            return e.strerror or os.strerror(e.errno)
        if e is not None and _WRITE_FAILURE.search(str(e)):
            return " ".join(str(e).split())[:120]
    return None


@contextmanager
def saving(folder: str | Path, output_dir: str | Path, run_id: str | None, partial_removed: bool) -> Iterator[None]:
    """A save into `folder` (a checkpoint of output_dir, or the final model in it) that the disk cuts short ends in
    one OSError a user reads (sft_qwen: ..., exit 2) instead of a traceback, naming the checkpoint a --resume takes;
    `partial_removed`: the half-written folder is deleted first (a checkpoint: it has no marker, so it would never
    be resumed from, but it holds the space that is short)."""
    try:
        yield
    except Exception as e:
        reason = write_failure(e)
        if reason is None:
            raise
        if partial_removed:
            shutil.rmtree(folder, ignore_errors=True)
        last = None
        with suppress(ValueError):
            last = resume_point(output_dir, run_id)[0]
        kept = f"the last complete checkpoint, {last.name}, stays" if last else "no complete checkpoint was saved " \
            "before it"
        raise OSError(f"{folder}: the save failed ({reason}; a full disk?): "
                      f"{'the partial save was removed; ' if partial_removed else ''}{kept}: free space, then run "
                      f"again with --resume") from e


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


# A checkpoint trained by the recipe records how its training prompts and targets were made: the box
# convention, the pixel budget and the margin of derived L2 regions.
CHECKPOINT_RECORD = "gbtrain_checkpoint.json"


@dataclass(frozen=True)
class CheckpointRecord:
    coords: str
    budget: PixelBudget
    l2_margin: float = DEFAULT_L2_MARGIN
    dataset: str | None = None  # the training build (its absolute path): whose held-out pages evaluate it

    def same_making(self, other: CheckpointRecord) -> bool:
        """Whether prompts and targets were made alike (a record written before builds were recorded has none)."""
        return (self.coords, self.budget, self.l2_margin) == (other.coords, other.budget, other.l2_margin)


def write_checkpoint_record(folder: str | Path, record: CheckpointRecord) -> None:
    data = {"coords": record.coords, "min_pixels": record.budget.min_pixels, "max_pixels": record.budget.max_pixels,
            "factor": record.budget.factor, "l2_margin": record.l2_margin, "dataset": record.dataset}
    (Path(folder) / CHECKPOINT_RECORD).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def read_checkpoint_record(folder: str | Path) -> CheckpointRecord | None:
    """What the recipe recorded in a checkpoint folder; None for any other checkpoint. A record written before
    the margin (or the factor) was recorded carries the builder's default margin (Qwen2.5-VL's 28 px factor), which
    is what its data was built with."""
    path = Path(folder) / CHECKPOINT_RECORD
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        budget = PixelBudget(int(data["min_pixels"]), int(data["max_pixels"]),
                             int(data.get("factor", DEFAULT_FAMILY.patch_factor)))
        dataset = data.get("dataset")
        if dataset is not None and not isinstance(dataset, str):
            raise TypeError(f"dataset {brief(dataset, 60)} is not a folder")
        record = CheckpointRecord(data["coords"], budget, float(data.get("l2_margin", DEFAULT_L2_MARGIN)), dataset)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a gbtrain checkpoint record ({e})") from None
    if record.coords not in CONVENTIONS:
        raise ValueError(f"{path}: unknown coordinate convention {record.coords!r}")
    if not (0 <= record.l2_margin < 1):
        raise ValueError(f"{path}: l2_margin {record.l2_margin!r} is not in [0, 1)")
    return record


WEIGHTS = {"full": ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                    "pytorch_model.bin.index.json"),
           "lora": ("adapter_model.safetensors", "adapter_model.bin")}
# What a copy of the best checkpoint leaves behind: the trainer's state, and a run root's other work.


@dataclass(frozen=True)
class Checkpoint:
    """A saved model of the run: checkpoint-N, or the final model at the run's root (named final-N)."""

    name: str
    step: int
    path: Path
    kind: str  # full | lora
    problem: str | None = None  # why it cannot be evaluated, found before any model loads


def _inspect(folder: Path) -> tuple[str, str | None]:
    """(kind, problem) of a saved model folder."""
    kind = "lora" if (folder / "adapter_config.json").is_file() else "full"
    if kind == "full" and not (folder / "config.json").is_file():
        return kind, "no config.json or adapter_config.json: not a saved model"
    if any((folder / name).is_file() for name in WEIGHTS[kind]):
        return kind, None
    shards = sorted(p.name for p in folder.glob("global_step*") if p.is_dir())
    if shards:
        return kind, (f"holds only DeepSpeed ZeRO shards ({shards[0]}/): gather the weights with its zero_to_fp32.py, "
                      f"or train with stage3_gather_16bit_weights_on_model_save")
    return kind, f"no weights ({WEIGHTS[kind][0]})"


def _not_this_runs(path: Path, run_record: CheckpointRecord | None, run_id: str | None) -> str | None:
    """Why a checkpoint-* entry is not a complete checkpoint the trainer saved in this run (None when it is): its
    name is not the trainer's (so no two name one step), it is a link to elsewhere, its gbtrain record differs from
    the run's, or its completion marker is missing, names another run or no longer matches its files."""
    if not is_trainer_name(path.name):
        return "not a name the trainer writes (checkpoint-N, N in digits without leading zeros)"
    if path.is_symlink():
        return f"a symbolic link (to {path.resolve()}), not a checkpoint saved in this run"
    if not path.is_dir():
        return "not a folder"
    if run_record is not None:
        try:
            recorded = read_checkpoint_record(path)
        except ValueError as e:
            return str(e)
        if recorded is not None and not recorded.same_making(run_record):
            return f"its {CHECKPOINT_RECORD} differs from the run's: a checkpoint of another run"
    return checkpoint_problem(path, run_id)


def _run_id(run_dir: Path) -> str | None:
    """The id the recipe recorded for the run in its output_dir (None: not recorded, any run's marker is taken)."""
    try:
        recorded = read_json(run_dir / TRAINING_RECORD)
    except (OSError, ValueError):
        return None
    return recorded.get("run_id") if isinstance(recorded, dict) else None


def _final_step(run_dir: Path) -> int | None:
    try:
        return int(read_json(run_dir / "train_summary.json")["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def find_checkpoints(run_dir: str | Path) -> tuple[list[Checkpoint], list[str]]:
    """Every checkpoint-N folder of a training output_dir and its final model, by step, with notes on what was not
    taken. The final model is the last checkpoint's weights when the trainer saved one at the same step (it saves
    the last step), so it is evaluated only when that checkpoint is gone."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"training folder not found: {run_dir}")
    found, notes = [], []
    run_record, run_id = read_checkpoint_record(run_dir), _run_id(run_dir)
    for path in sorted(run_dir.iterdir()):
        if not path.name.startswith("checkpoint-"):
            continue
        why_not = _not_this_runs(path, run_record, run_id)
        if why_not:
            notes.append(f"{path.name} is not evaluated: {why_not}")
        else:
            found.append(Checkpoint(path.name, int(path.name.removeprefix("checkpoint-")), path, *_inspect(path)))
    kind, problem = _inspect(run_dir)
    if problem is None:
        step = _final_step(run_dir)
        if step is None:
            notes.append(f"the final model in {run_dir} is not evaluated: train_summary.json, which gives its step, "
                         f"cannot be read")
        elif any(c.step == step for c in found):
            notes.append(f"the final model in {run_dir} is checkpoint-{step}'s weights (saved at the same step)")
        else:
            found.append(Checkpoint(f"final-{step}", step, run_dir, kind))
    if not found:  # the notes say why each checkpoint-N folder (or the final model) was not taken
        why = f" that can be evaluated ({'; '.join(notes)})" if notes else ""
        raise ValueError(f"{run_dir}: no checkpoint-N folder and no final model{why}: point --run at a training "
                         f"output_dir (recipes/sft_qwen.py output_dir=...)")
    return sorted(found, key=lambda c: (c.step, c.name)), notes


def read_training_run(run_dir: str | Path) -> dict:
    """The recipe's record of the run (base model, dataset); the selection cannot know them otherwise."""
    path = Path(run_dir) / TRAINING_RECORD
    try:
        record = read_json(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: --run must be a recipes/sft_qwen.py output_dir") from None
    except ValueError as e:
        raise ValueError(f"{path} cannot be read ({e}): not a gbtrain training record") from None
    if not isinstance(record, dict) or not isinstance(record.get("model"), str):
        raise ValueError(f"{path} is not a gbtrain training record (no model)")
    if not isinstance(record.get("dataset", ""), str | None):  # the folder whose build record gives the split
        raise ValueError(f"{path} is not a gbtrain training record (dataset {brief(record['dataset'], 60)} is not a "
                         f"folder)")
    return record


def training_record(run_dir: str | Path, training: dict, checkpoints: list[Checkpoint]) -> CheckpointRecord | None:
    """Coords, pixel budget and L2 margin of the run's training data: the root's record (written when the run
    finished), else that of one of `checkpoints` (those find_checkpoints took: a run still going), else the
    dataset's build record; None when none is there (the evaluator then guesses)."""
    for folder in [Path(run_dir), *(c.path for c in checkpoints)]:
        recorded = read_checkpoint_record(folder)
        if recorded:
            return recorded
    dataset = training.get("dataset")
    if isinstance(dataset, str) and (Path(dataset) / "build_config.yaml").is_file():
        coords, budget = dataset_coords(dataset), dataset_pixel_budget(dataset)
        if coords and budget:
            return CheckpointRecord(coords, budget, dataset_l2_margin(dataset), str(Path(dataset).resolve()))
    return None


def eval_losses(run_dir: str | Path) -> dict[int, float]:
    """Eval loss by step from the trainer's log history (the newest checkpoint's holds the deleted ones' too) and
    from train_summary.json (the final evaluation)."""
    run_dir = Path(run_dir)
    losses: dict[int, float] = {}
    for state in run_dir.glob("checkpoint-*/trainer_state.json"):
        try:
            history = read_json(state)["log_history"]
            losses |= {int(h["step"]): float(h["eval_loss"]) for h in history if "eval_loss" in h}
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged checkpoint's state: its row says why when the checkpoint itself fails
    step = _final_step(run_dir)
    if step is not None and step not in losses:
        with suppress(OSError, ValueError, KeyError, TypeError):
            losses[step] = float(read_json(run_dir / "train_summary.json")["eval_loss"])
    return losses
