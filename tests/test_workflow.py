"""The README's commands as a user runs them: subprocesses with a clean environment (PATH and HOME only),
in order: synthetic pages, a tiny model, SFT conversations, a few training steps through `accelerate
launch`, vLLM evaluation of the base and the fine-tuned model, scoring one setting, and the gains table.
No vLLM, hub or thread variable is set, and the test process holds a few GiB of memory while vLLM starts,
as a user's other programs would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
HELD_GIB = 3


def user_env(home: Path) -> dict[str, str]:
    return {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home)}


def run(cmd: list, env: dict, timeout: int = 900) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{(proc.stdout + proc.stderr)[-4000:]}"
    return proc.stdout


@pytest.mark.slow
def test_readme_commands_in_a_clean_environment(tmp_path):
    env = user_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    pages, model, sft = tmp_path / "pages", tmp_path / "base-model", tmp_path / "sft"
    run(["python", "data_builders/synth_pages.py", "--out", pages, "--pages", 8, "--seed", 0], env)
    run(["python", "scripts/make_tiny_model.py", "--out", model], env)
    run(["python", "data_builders/build_sft.py", "--data", pages, "--out", sft, "--config",
         "configs/data/default.yaml", f"tokenizer={model}", "target_count=60", "vision.min_pixels=3136",
         "vision.max_pixels=50176", "max_length=2048", "coords=rel1000"], env)
    trained = tmp_path / "sft-model"
    run(["accelerate", "launch", "--num_processes", 1, "--cpu", "recipes/sft_qwen.py", "--config",
         "configs/sft/tiny_cpu.yaml", f"model={model}", f"dataset={sft}", f"output_dir={trained}", "max_steps=3",
         "pack_tokens=2048", "max_length=2048", "eval_steps=3", "save_steps=3", "limit_eval_samples=4",
         "report_to=[]"], env)
    assert (trained / "train_summary.json").is_file()

    ballast = b"\x01" * (HELD_GIB * 2**30)  # resident memory held by "other programs" while vLLM starts
    reports = {}
    # the base model is told the budget and convention; the fine-tuned one reads them from its checkpoint
    for name, checkpoint, extra in (("base", model, ["--coords", "rel1000", "--min-pixels", 3136, "--max-pixels",
                                                     50176]), ("sft", trained, [])):
        out = tmp_path / f"eval-{name}"
        run(["python", "eval/run_eval.py", "--model", checkpoint, "--data", pages, "--out", out, "--settings",
             "L1-af,L3-ab", "--limit", 2, "--max-tokens", 32, "--max-model-len", 4096, *extra], env)
        reports[name] = json.loads((out / "report.json").read_text())
    del ballast
    # recorded by the recipe, read by the evaluator
    assert {k: reports["sft"]["meta"][k] for k in ("coords", "min_pixels", "max_pixels")} == {
        "coords": "rel1000", "min_pixels": 3136, "max_pixels": 50176}
    assert all(set(r["settings"]) == {"L1-af", "L3-ab"} for r in reports.values())

    scored = tmp_path / "L3-ab.json"
    printed = run(["python", "eval/score.py", "--data", pages, "--level", "L3", "--mode", "answer-based",
                   "--predictions", tmp_path / "eval-sft" / "predictions" / "L3-ab.jsonl", "--coords", "rel1000",
                   "--min-pixels", 3136, "--max-pixels", 50176, "--out", scored], env)
    assert "L3 answer-based: accuracy" in printed
    assert json.loads(scored.read_text())["coverage"]["missing"] == 8 - 2  # eight pages, two evaluated
    run(["python", "eval/compare.py", tmp_path / "eval-base" / "report.json", tmp_path / "eval-sft" / "report.json",
         "--out", tmp_path / "gains.md"], env)
    assert "| L1-af |" in (tmp_path / "gains.md").read_text()
