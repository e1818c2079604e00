"""A checkpoint's completion marker (gbtrain.train.checkpoints): what --resume continues from, what it passes over
and what it refuses. The recipe end to end, killed and resumed, is in test_training.py; a save the disk cuts short
(one line, the partial checkpoint removed) is the bad-input corpus's sft_qwen-disk-full-during-a-checkpoint-save."""

import json

import pytest

from gbtrain.outputs import COMPLETE_MARKER
from gbtrain.train.checkpoints import checkpoint_problem, mark_complete, resume_point


def _checkpoint(run, step, run_id="ours", complete=True):
    folder = run / f"checkpoint-{step}"
    (folder / "global_step2").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "optimizer.pt").write_bytes(b"state" * 10)
    (folder / "global_step2" / "shard.pt").write_bytes(b"s")  # DeepSpeed's shards are listed too
    if complete:
        mark_complete(folder, run_id, step)
    return folder


def test_the_marker_lists_every_file_and_the_run(tmp_path):
    folder = _checkpoint(tmp_path, 2)
    marker = json.loads((folder / COMPLETE_MARKER).read_text())
    assert marker == {"run_id": "ours", "step": 2, "files": {"global_step2/shard.pt": 1, "model.safetensors": 7,
                                                              "optimizer.pt": 50}}
    assert checkpoint_problem(folder) is None and checkpoint_problem(folder, "ours") is None
    assert checkpoint_problem(folder, "theirs") == "saved by another run ('ours', this folder's run is 'theirs')"
    (folder / "global_step2" / "shard.pt").unlink()
    assert checkpoint_problem(folder) == "global_step2/shard.pt is missing (it was saved with the checkpoint)"


def test_resume_passes_over_a_save_that_did_not_finish_and_names_it(tmp_path):
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 4)
    _checkpoint(tmp_path, 10, complete=False)  # killed (or the disk filled) while saving
    (tmp_path / "checkpoint-0012").mkdir()  # not a name the trainer writes: never a candidate
    folder, notes = resume_point(tmp_path, "ours")
    assert folder == tmp_path / "checkpoint-4"
    assert notes == ["checkpoint-10 is passed over: no gbtrain_complete.json: its save did not finish (or gbtrain "
                     "did not save it)"]
    assert resume_point(tmp_path / "absent", "ours") == (None, [])


@pytest.mark.parametrize(("damage", "message"), [
    (lambda f: (f / "optimizer.pt").write_bytes(b"st"), "optimizer.pt is 2 bytes, 50 when saved: damaged or truncated"),
    (lambda f: (f / "optimizer.pt").unlink(), "optimizer.pt is missing"),
    (lambda f: (f / COMPLETE_MARKER).write_text('{"files": [1]}'), "cannot be read (files is not a map of sizes)"),
], ids=["truncated", "deleted", "bad-marker"])
def test_a_damaged_checkpoint_is_refused_naming_the_file_and_the_way_out(tmp_path, damage, message):
    _checkpoint(tmp_path, 2)
    damage(_checkpoint(tmp_path, 4))
    with pytest.raises(ValueError, match=r"cannot resume from .*checkpoint-4: ") as e:
        resume_point(tmp_path, "ours")
    assert message in str(e.value) and str(e.value).endswith("delete checkpoint-4 to resume from the checkpoint "
                                                             "before it")


def test_a_checkpoint_of_another_run_is_not_resumed(tmp_path):
    _checkpoint(tmp_path, 2, run_id="theirs")
    with pytest.raises(ValueError, match=r"saved by another run \('theirs'"):
        resume_point(tmp_path, "ours")


def test_a_checkpoint_copied_under_another_step_is_named(tmp_path):
    import shutil

    shutil.copytree(_checkpoint(tmp_path, 2), tmp_path / "checkpoint-6")
    assert checkpoint_problem(tmp_path / "checkpoint-6") == ("its gbtrain_complete.json was written at step 2: a "
                                                             "checkpoint copied or renamed")


def test_write_failures_are_told_from_bugs():
    import errno

    from gbtrain.train.checkpoints import write_failure

    assert write_failure(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4509120 vs 4509008")
    assert "unexpected pos" in write_failure(torch_error)
    assert write_failure(RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })"))
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert write_failure(wrapped) == "Disk quota exceeded"
    assert write_failure(KeyError("model.embed_tokens")) is None
    assert write_failure(OSError(errno.ENOENT, "No such file or directory")) is None
