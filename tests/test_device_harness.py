"""scripts/device_harness.py and scripts/check_packing.py, the device check, proven on CPU with the tiny model before a
device is lent: its parts, their timeouts, the JSON lines under --out, and the packing check's leak control."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
HARNESS, CHECK = ROOT / "scripts" / "device_harness.py", ROOT / "scripts" / "check_packing.py"
LENGTHS = ROOT / "configs" / "bench" / "mixed_l1_l3_lengths.json"


def harness(out, model, *flags, timeout=600):
    return subprocess.run([sys.executable, str(HARNESS), "--out", str(out), "--model-config", str(model),
                           "--lengths", str(LENGTHS), "--pack-tokens", "4096", *flags],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.slow
def test_packing_check_passes_sdpa_and_catches_a_leaking_row(tiny_model_dir):
    proc = subprocess.run([sys.executable, str(CHECK), "--model-config", str(tiny_model_dir), "--lengths",
                           str(LENGTHS), "--pack-tokens", "4096"], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={"PYTHONPATH": f"{ROOT}:{ROOT / 'scripts'}", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(ln) for ln in proc.stdout.splitlines()]
    variants = {r["variant"]: r for r in lines if r["check"] == "packing"}
    verdict = lines[-1]
    sdpa, control = variants["sdpa"], variants["sdpa-leak-control"]
    assert sdpa["passed"] and sdpa["worst_grad_rel_error"] < verdict["grad_tolerance"] / 100
    assert sdpa["parameters_compared"] > 20  # every LoRA matrix of the LLM and the merger's weights
    # the row whose positions do not restart leaks attention across samples: far outside the tolerance
    assert control["passed"] and control["worst_grad_rel_error"] > 10 * verdict["grad_tolerance"]
    assert "no backward on CPU" in variants["flex"]["skipped"]
    assert verdict == {"check": "packing_verdict", "passed": True, "loss_tolerance": 1e-4, "grad_tolerance": 1e-3,
                       "skipped": ["flex"]}


@pytest.mark.slow
def test_harness_parts_timeouts_and_json_lines(tiny_model_dir, tmp_path):
    """A part past its timeout is stopped and reported, and the next part still runs; GPU-only modes fail in one
    line; the measured mode is profiled (once: it is both the slowest and the fastest); every line is also in
    OUT/harness.jsonl. (Two measured modes' ratio: test_the_summary_compares_each_mode_with_the_naive_one.)"""
    out = tmp_path / "device"
    proc = harness(out, tiny_model_dir, "--modes", "packed-4k-flex-liger,naive-sdpa-gc",
                   "--correctness-timeout", "3", "--seconds", "2", "--warmup-steps", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert records == [json.loads(ln) for ln in (out / "harness.jsonl").read_text().splitlines()]
    assert sorted(p.name for p in out.iterdir()) == ["harness.jsonl"]
    parts = [(r["part"], r.get("mode"), r["status"]) for r in records[:-1]]
    assert parts == [("environment", None, "ok"), ("correctness", None, "timeout"),
                     ("speed", "packed-4k-flex-liger", "failed"), ("speed", "naive-sdpa-gc", "ok"),
                     ("profile", "naive-sdpa-gc", "ok")]
    assert records[1]["error"] == "timed out after 3 s" and records[1]["seconds"] < 10
    assert "flex attention has no backward on CPU" in records[2]["error"]
    assert "\n" not in records[2]["error"] and "Traceback" not in records[2]["error"]
    assert records[4]["profile"]["aten_calls"] > 100 and records[4]["profile"]["top_cpu"]
    summary = records[-1]
    assert summary["part"] == "summary" and summary["correctness"] == "timeout"
    assert summary["real_tokens_per_s"] == {"naive-sdpa-gc": records[3]["real_tokens_per_s"]}
    assert summary["over_naive"] == {"naive-sdpa-gc": 1.0}

    again = harness(out, tiny_model_dir, "--modes", "")  # never mixed with an earlier run's lines
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"device_harness: {out / 'harness.jsonl'} exists (an earlier run's results): choose another --out"]


def test_the_summary_compares_each_mode_with_the_naive_one():
    sys.path.insert(0, str(ROOT / "scripts"))
    from device_harness import summary

    speed = [{"part": "speed", "mode": m, "status": "ok", "real_tokens_per_s": v, "mfu": 0.1}
             for m, v in (("packed-4k-sdpa", 900.0), ("naive-sdpa-gc", 300.0))]
    records = [{"part": "correctness", "status": "ok"}, *speed,
               {"part": "speed", "mode": "packed-4k-flex-liger", "status": "failed"}]
    said = summary(records)
    assert said["over_naive"] == {"packed-4k-sdpa": 3.0, "naive-sdpa-gc": 1.0}
    assert said["parts"] == {"ok": 3, "failed": 1, "timeout": 0} and said["correctness"] == "ok"
    assert summary(records[:2])["over_naive"] is None  # no naive mode measured: no ratio


def test_a_budget_that_is_spent_stops_every_part(tiny_model_dir, tmp_path):
    proc = harness(tmp_path / "d", tiny_model_dir, "--modes", "packed-4k-sdpa", "--budget", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert [(r["part"], r["status"]) for r in records[1:3]] == [("correctness", "timeout"), ("speed", "timeout")]


def test_the_cut_keeps_the_widths_and_renumbers_a_smaller_vocabulary(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from cut_config import cut_config

    full = json.loads((ROOT / "configs/bench/qwen25vl_7b/config.json").read_text())
    cut = json.loads((cut_config(str(ROOT / "configs/bench/qwen25vl_7b"), 1, 4, tmp_path, vocab=4096)
                      / "config.json").read_text())
    assert (cut["num_hidden_layers"], cut["vision_config"]["depth"]) == (1, 4)
    assert cut["vision_config"]["fullatt_block_indexes"] == [3]  # windowed blocks and one full one, as in the 7B
    assert (cut["hidden_size"], cut["vision_config"]["hidden_size"]) == (full["hidden_size"], 1280)
    ids = [cut[k] for k in ("bos_token_id", "eos_token_id", "vision_start_token_id", "image_token_id")]
    assert cut["vocab_size"] == 4096 and all(4000 < i < 4096 for i in ids) and ids == sorted(ids)
