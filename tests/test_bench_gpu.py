"""scripts/bench_gpu.py, the device benchmark, runs end to end on CPU with the tiny model before a GPU is used."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "bench_gpu.py"


@pytest.mark.slow
def test_device_benchmark_runs_on_cpu(sft_dir, tiny_model_dir, tmp_path):
    lengths = tmp_path / "lengths.json"
    subprocess.run([sys.executable, str(SCRIPT), "--record-lengths", str(sft_dir), "--samples", "8", "--out",
                    str(lengths)], check=True, capture_output=True, text=True)
    recorded = json.loads(lengths.read_text())
    assert [s["level"] for s in recorded["samples"][:4]] == ["L3", "L1", "L1", "L1"]
    assert all(s["num_tokens"] > s["grid_thw"][1] * s["grid_thw"][2] // 4 + s["answer_tokens"]
               for s in recorded["samples"])
    proc = subprocess.run([sys.executable, str(SCRIPT), "--model-config", str(tiny_model_dir), "--lengths",
                           str(lengths), "--modes", "naive-sdpa-gc,packed-sdpa-gc,packed-flex,packed-fa2-gc",
                           "--seconds", "60", "--max-steps", "2", "--warmup-steps", "1", "--pack-tokens", "4096",
                           "--profile", "--profile-top", "5"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {r.get("mode", r["bench"]): r for r in map(json.loads, proc.stdout.splitlines())}
    naive, packed = lines["naive-sdpa-gc"], lines["packed-sdpa-gc"]
    assert naive["steps_timed"] == packed["steps_timed"] == 2
    # every packed row is padded to the one pack length (one compiled shape); only its real tokens count
    assert naive["packing_efficiency"] < 1.0 and packed["packing_efficiency"] < 1.0
    assert packed["settings"]["pack_length_multiple"] == 4096 and packed["settings"]["gradient_checkpointing"]
    assert naive["loss_path"] == packed["loss_path"] == "trl fused lm head"  # as TRL's SFTTrainer computes it
    profile = packed["profile"]
    assert profile["aten_calls"] > 100 and len(profile["top_cpu"]) == 5 and profile["top_device"] == []
    assert naive["real_tokens_per_s"] > 0 and packed["real_tokens_per_s"] > 0
    # on CPU the GPU-only modes end in one clear line each, and the others' figures are kept
    assert "flex attention has no backward on CPU" in lines["packed-flex"]["error"]
    assert "flash_attention_2 needs a CUDA GPU" in lines["packed-fa2-gc"]["error"]
    ratio = lines["gpu_train_ratio"]["real_tokens_per_s_over_baseline"]
    assert ratio["naive-sdpa-gc"] == 1.0 and set(ratio) == {"naive-sdpa-gc", "packed-sdpa-gc"}
