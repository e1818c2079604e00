"""The recipe end to end through `accelerate launch`: one process, 2-process DDP, 2-process ZeRO-3,
resume after a kill, LoRA merge (of the run tests/conftest.py's recipe_lora shares), and an overfit check."""

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import FAMILY_RUN_FIXTURES, RECIPE_LORA, launch, run_script

from gbtrain.coords import PixelBudget
from gbtrain.train.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]


def summaries(proc):
    """Each rank's summary line (ranks share the pipe: one may start where another's line has not ended)."""
    decoder, text = json.JSONDecoder(), proc.stdout
    return [decoder.raw_decode(text, m.start())[0] for m in re.finditer(r'\{"train_samples"', text)]


@pytest.mark.slow
def test_one_process(sft_dir, tiny_model_dir, tmp_path, budget):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = tmp_path / "run"
    # torch's deterministic kernels on (deterministic=true: transformers' full_determinism), as the demo's
    # DEMO_DETERMINISTIC=1 trains
    proc = launch(sft_dir, tiny_model_dir, out, "max_steps=4", "eval_steps=2", "save_steps=2", "logging_steps=1",
                  "deterministic=true")
    (summary,) = summaries(proc)
    assert summary["global_step"] == 4 and summary["eval_loss"] > 0
    # the console's progress line, once per logged step (the trainer's dicts stay as they were)
    assert [ln.split(" (")[0] for ln in proc.stdout.splitlines() if ln.startswith("[train] step") and "eval_loss"
            not in ln][-1] == "[train] step 4/4" and " left" in proc.stdout
    assert summary["packing_efficiency"] >= 0.9
    history = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    logged = [h for h in history if "loss" in h]
    assert logged and all(h["real_tokens_per_s"] > 0 for h in logged)
    seen = [h["num_tokens"] for h in logged]  # cumulative real tokens; a pack holds hundreds per step
    assert all(b - a > 100 for a, b in zip([0, *seen], seen, strict=False))
    assert AutoModelForImageTextToText.from_pretrained(out) is not None
    assert AutoProcessor.from_pretrained(out).image_processor.size.longest_edge == budget.max_pixels
    # every checkpoint says what it was trained with, as the final model does (the evaluator reads it)
    record = (out / "gbtrain_checkpoint.json").read_text()
    assert json.loads(record)["max_pixels"] == budget.max_pixels
    assert [(out / c / "gbtrain_checkpoint.json").read_text() for c in ("checkpoint-2", "checkpoint-4")] == [record] * 2


@pytest.mark.slow
def test_two_process_ddp(sft_dir, tiny_model_dir, tmp_path):
    proc = launch(sft_dir, tiny_model_dir, tmp_path / "ddp", "max_steps=3", "eval_steps=3", "save_steps=3",
                  accelerate_args=("--config_file", str(ROOT / "configs/accelerate/cpu_ddp2.yaml")))
    runs = summaries(proc)
    assert len(runs) == 2 and all(s["global_step"] == 3 for s in runs)  # one summary per rank
    assert not any(s["zero3_partitioned_at_load"] for s in runs)


FAMILY_RUNS = pytest.mark.parametrize(("model_fixture", "sft_fixture"), list(FAMILY_RUN_FIXTURES.values()),
                                      ids=list(FAMILY_RUN_FIXTURES))


@pytest.mark.slow
@FAMILY_RUNS
def test_two_process_deepspeed_zero3(request, model_fixture, sft_fixture, tmp_path):
    """Qwen2.5-VL as the 7B LoRA config runs it (frozen tower, checkpointing, which TRL makes reentrant under ZeRO-3
    with PEFT: the tower's guard in gbtrain.train.modeling would stop the run if it built a graph); Qwen3-VL fully."""
    sft_dir, tiny_model_dir = request.getfixturevalue(sft_fixture), request.getfixturevalue(model_fixture)
    out = tmp_path / "z3"
    lora = (*RECIPE_LORA[:4], "gradient_checkpointing=true") if model_fixture == "tiny_model_dir" else ()
    proc = launch(sft_dir, tiny_model_dir, out, *lora, "max_steps=3", "eval_steps=3", "save_steps=3",
                  accelerate_args=("--config_file", str(ROOT / "configs/accelerate/cpu_zero3_2.yaml")))
    runs = summaries(proc)
    assert len(runs) == 2 and all(s["global_step"] == 3 for s in runs)
    assert all(s["zero3_partitioned_at_load"] for s in runs)  # zero3_init_flag took effect
    assert (out / "checkpoint-3" / "global_step3").is_dir()  # a DeepSpeed checkpoint
    saved = "adapter_model.safetensors" if lora else "model.safetensors"
    assert (out / saved).exists()  # ZeRO-3 weights gathered on save
    assert "deepspeed_shm_comm" not in proc.stdout + proc.stderr  # the inference-only op is not compiled on CPU


@pytest.mark.slow
def test_resume_after_kill(sft_dir, tiny_model_dir, tmp_path):
    """Killed mid-run, the run resumes from its newest complete checkpoint, and a save that never finished is passed
    over with a line saying so. (A damaged complete checkpoint is refused before any model loads: the corpus's
    sft_qwen-resume-* cases.)"""
    from gbtrain.train.checkpoints import checkpoint_problem

    out = tmp_path / "resume"
    args = ("max_steps=16", "save_steps=2", "eval_steps=1000", "save_total_limit=5")
    proc = launch(sft_dir, tiny_model_dir, out, *args, popen=True)
    deadline = time.time() + 600
    while not (out / "checkpoint-4" / "gbtrain_complete.json").exists():
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "train_summary.json").exists()
    run_id = json.loads((out / "gbtrain_run.json").read_text())["run_id"]
    complete = sorted((p for p in out.glob("checkpoint-*") if checkpoint_problem(p, run_id) is None),
                      key=lambda p: int(p.name.rsplit("-", 1)[1]))
    assert len(complete) >= 2
    partial = out / "checkpoint-1000"  # a save cut short (a kill, a full disk): no completion marker
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    done = launch(sft_dir, tiny_model_dir, out, *args, "--resume")
    assert "checkpoint-1000 is passed over: no gbtrain_complete.json" in done.stdout
    (summary,) = summaries(done)
    assert summary["resumed_from"] == str(complete[-1]) and summary["global_step"] == 16


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILY_RUN_FIXTURES))
def test_lora_merge_changes_what_was_trained_and_keeps_the_record(recipe_lora, family):
    """recipes/merge_lora.py on the recipe's LoRA run: the language model and every merger (Qwen3-VL's DeepStack
    too) changed, the frozen vision blocks did not, and the merged folder carries the chat template, generation
    config and gbtrain record (test_evaluation evaluates it with vLLM)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from gbtrain.train.modeling import MERGER, part_of

    tiny_model_dir, _, adapter, merged = recipe_lora(family)
    assert (adapter / "adapter_model.safetensors").exists()
    base = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    model = AutoModelForImageTextToText.from_pretrained(merged)
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, dict(base.named_parameters())[n])]
    assert any("language_model" in n for n in changed)
    mergers = {n.rsplit(".", 2)[0] for n, _ in model.named_parameters() if part_of(n) == MERGER}
    assert mergers == {n.rsplit(".", 2)[0] for n in changed if part_of(n) == MERGER}
    assert not any(".visual.blocks." in n for n in changed)
    assert (merged / "chat_template.jinja").exists() and (merged / "generation_config.json").exists()
    assert (merged / "gbtrain_checkpoint.json").read_text() == (adapter / "gbtrain_checkpoint.json").read_text()


@pytest.mark.slow
def test_overfit_reproduces_the_json(sft_dir, tiny_model_dir, tmp_path, budget):
    """Trained on three conversations, the tiny model answers each with exactly its target JSON:
    data, label masks, chat template and generation agree."""
    import torch
    from datasets import DatasetDict
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from gbtrain.data.sft_dataset import load_sft_dataset

    rows = load_sft_dataset(sft_dir, decode_images=False)["train"].filter(
        lambda r: r["level"] == "L1" and r["turns"] == 1 and r["num_tokens"] < 600).select(range(3))
    data = tmp_path / "three"
    DatasetDict({"train": rows, "validation": rows, "test": rows}).save_to_disk(str(data))
    shutil.copyfile(sft_dir / "build_config.yaml", data / "build_config.yaml")  # a finished subset of that build
    out = tmp_path / "overfit"
    # 100 epochs end at an eval loss of 0.0046 per token on these rows (2026-12-07; 150 before, for CI's time)
    launch(data, tiny_model_dir, out, "num_train_epochs=100", "eval_steps=100000", "save_steps=100000",
           "logging_steps=50", "warmup_ratio=0.0", "lr_scheduler=constant",
           f"vision.min_pixels={budget.min_pixels}", f"vision.max_pixels={budget.max_pixels}")
    model = AutoModelForImageTextToText.from_pretrained(out).eval()
    proc = AutoProcessor.from_pretrained(out)
    from PIL import Image

    for row in rows:
        messages = [{"role": "user", "content": [{"type": "image", "image": Image.open(row["images"][0])},
                                                 {"type": "text", "text": row["messages"][0]["content"]}]}]
        inputs = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                          return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(**inputs, max_new_tokens=300, do_sample=False)
        reply = proc.decode(gen[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        assert reply == row["messages"][1]["content"]
    # decoded by vLLM under the reply schema (eval/run_eval.py --structured), the trained replies pass unchanged:
    # the schema admits the builder's keys in its order (`score` included) and its whitespace
    targets = [row["messages"][1]["content"] for row in rows]
    assert any('"score": ' in t for t in targets)
    asked = [(row["messages"][0]["content"], row["images"][0]) for row in rows]
    structured = run_script(tmp_path, f"""
        import json
        from PIL import Image
        from gbtrain.coords import PixelBudget
        from gbtrain.evaluation.engine import GRADING_SCHEMA
        from gbtrain.inference.base import BackendOptions, SamplingOptions, VLLMMemory, message
        from gbtrain.inference.vllm import VLLMBackend
        if __name__ == "__main__":  # opened as eval/run_eval.py --structured opens it
            backend = VLLMBackend.from_options({str(out)!r}, BackendOptions(
                PixelBudget({budget.min_pixels}, {budget.max_pixels}), max_model_len=4096, structured=True,
                memory=VLLMMemory(kv_cache_gib=0.5)))
            convs = [[message(text, Image.open(path))] for text, path in {asked!r}]
            replies = backend.chat(convs, SamplingOptions(max_tokens=300, json_schema=GRADING_SCHEMA))
            backend.close()
            print("RESULT " + json.dumps([str(r) for r in replies]))
    """)
    assert structured == targets


def test_overlong_samples_rejected_before_training(sft_dir, tiny_model_dir, budget):
    from gbtrain.train.modeling import load_processor
    from gbtrain.train.trainer import build_datasets

    cfg = TrainConfig(model=str(tiny_model_dir), dataset=str(sft_dir), output_dir="unused", max_length=600,
                      packing=True, pack_tokens=4096)
    _, sources, stats = build_datasets(cfg, load_processor(str(tiny_model_dir), budget), budget)
    assert stats["dropped_over_max_length_train"] > 0
    assert max(sources["train"]["num_tokens"]) <= 600
    assert stats["train_samples"] + stats["dropped_over_max_length_train"] == len(
        __import__("datasets").load_from_disk(str(sft_dir))["train"])


def test_vision_must_match_the_dataset(sft_dir, tiny_model_dir):
    from gbtrain.train.trainer import resolve_budget

    cfg = TrainConfig(model=str(tiny_model_dir), dataset=str(sft_dir), output_dir="o",
                      vision=PixelBudget(224 * 224, 2200 * 28 * 28))
    with pytest.raises(ValueError, match="differs from the dataset"):
        resolve_budget(cfg)
    cfg.vision = None
    assert resolve_budget(cfg).max_pixels == 28 * 28 * 256


def test_an_output_dir_holding_other_work_is_refused(sft_dir, tiny_model_dir, tmp_path):
    """A new run into another run's output_dir would continue, mix or (save_total_limit) delete its
    checkpoints: refused, naming what differs; the same run continues only with --resume."""
    from gbtrain.train.config import TrainConfig
    from gbtrain.train.trainer import claim_output_dir

    out = tmp_path / "run"
    cfg = TrainConfig(model=str(tiny_model_dir), dataset=str(sft_dir), output_dir=str(out),
                      vision=PixelBudget(28 * 28 * 4, 28 * 28 * 256))
    claim_output_dir(cfg, write=True)
    (out / "checkpoint-2").mkdir()
    with pytest.raises(ValueError, match=r"this run's work \(checkpoint-2\): pass --resume"):
        claim_output_dir(cfg, write=True)
    cfg.resume = True
    cfg.max_steps = 10  # running longer is a continuation, not another run
    claim_output_dir(cfg, write=True)
    cfg.lr.llm = 5e-4
    with pytest.raises(ValueError, match=r"made otherwise \(lr: .*choose another output_dir"):
        claim_output_dir(cfg, write=True)
    (out / "gbtrain_run.json").unlink()
    with pytest.raises(ValueError, match="did not record"):
        claim_output_dir(cfg, write=True)
    assert (out / "checkpoint-2").is_dir()  # nothing was touched


def test_a_truncated_adapter_is_named_before_the_base_loads(tiny_model_dir, tmp_path):
    from gbtrain.train.merge import merge_lora

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tiny_model_dir)}))
    (adapter / "adapter_model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": {")
    with pytest.raises(ValueError, match=r"adapter_model\.safetensors cannot be read \(.*\): the file is damaged or "
                                         r"truncated"):
        merge_lora(str(tiny_model_dir), str(adapter), str(tmp_path / "merged"))
    assert not (tmp_path / "merged").exists()


def test_an_adapter_is_merged_only_onto_its_base(tmp_path):
    from gbtrain.train.merge import check_base

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct"}))
    check_base("Qwen/Qwen2.5-VL-7B-Instruct", str(adapter))
    check_base("/models/Qwen2.5-VL-7B-Instruct", str(adapter))  # the hub id downloaded into a folder
    with pytest.raises(ValueError, match=r"trained on Qwen/Qwen2\.5-VL-7B-Instruct, not Qwen/Qwen2\.5-VL-3B"):
        check_base("Qwen/Qwen2.5-VL-3B-Instruct", str(adapter))
    with pytest.raises(FileNotFoundError, match="not a LoRA adapter"):
        check_base("x", str(tmp_path))
