"""scripts/demo.sh end to end at smoke size (DEMO_SMOKE=1 shrinks its counts; the stages and code are the demo's):
every artifact the README names is written, the gains table has the six settings, and the console stays short."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gbtrain.miniature.warmup import warmup_for_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_demo_runs_end_to_end_at_smoke_size(tmp_path):
    out = tmp_path / "demo"
    env = {**os.environ, "DEMO_SMOKE": "1"}
    # started from another folder with a relative OUT, as a user types it: OUT is that folder's, not the checkout's
    done = subprocess.run([str(ROOT / "scripts" / "demo.sh"), "demo"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (ROOT / "demo").exists()
    for artifact in ("gains.md", "eval-base/report.md", "eval-base/report.html", "eval-sft/report.md",
                     "eval-sft/report.html", "eval-sft/report.json", "image_reliance.json",
                     "sft-model/train_summary.json", "logs/train.log", "logs/eval-base.log", "logs/eval-sft.log"):
        assert (out / artifact).is_file(), artifact
    assert list((out / "eval-sft" / "overlays").glob("*.png")), "no overlays"
    assert list((out / "eval-sft" / "plots").glob("*")), "no plots"
    # the base model's vision tower was warmed up on what the default profile's students write
    warmup = json.loads((out / "base-model" / "gbtrain_warmup.json").read_text(encoding="utf-8"))
    expected = warmup_for_profile("marks", steps=4)
    assert warmup["options"]["charset"] == expected.charset
    assert (warmup["options"]["crop_tokens"], warmup["options"]["glyph_px"]) == ([4, 3], [20, 72])
    # the frozen tower's features came from the cache where an image came back (its eval loss reads the same images)
    summary = json.loads((out / "sft-model" / "train_summary.json").read_text(encoding="utf-8"))
    assert summary["vision_cache_misses"] == summary["vision_cache_images"] > 0
    gains = (out / "gains.md").read_text(encoding="utf-8")
    for setting in ("L1-ab", "L1-af", "L2-ab", "L2-af", "L3-ab", "L3-af"):
        assert f"| {setting} |" in gains, setting
    console = done.stdout + done.stderr
    # the console hides what the logs keep: the training's progress bar and the libraries' notices
    train_log = (out / "logs" / "train.log").read_text(encoding="utf-8")
    progress = re.compile(r"(it/s|s/it)\]")
    assert progress.search(train_log) and not progress.search(console), console
    assert console.count("[demo ") >= 9 and "done in" in console and "gains.html" in console
    # each long stage says where it is and how long it still needs
    assert re.search(r"vision warm-up step 4/4 \(100%\) loss [\d.]+ · \S+ left", console), console
    assert re.search(r"\[train\] step 4/4 \(100%\) loss [\d.]+ .*tok/s · \S+ left", console), console
    assert "Warning" not in console, console
    assert console.count("\n") < 60, console
    # the spread over runs (docs/demo.md) reads the run's figures back: one row per run, then min / median / max
    spread = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo_spread.py"),
                             str(out), str(out), "--json", str(tmp_path / "spread.json")],
                            capture_output=True, text=True, timeout=120)
    assert spread.returncode == 0, spread.stderr[-3000:]
    assert spread.stdout.count(f"| {out} |") == 2 and "| min / median / max |" in spread.stdout, spread.stdout
    figures = json.loads((tmp_path / "spread.json").read_text(encoding="utf-8"))
    # four training steps promise nothing: --check says which of the demo's properties each run lacks
    checked = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo_spread.py"), str(out), "--check"],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 1 and "0 of 1 runs show every property the default demo is to show" in checked.stdout
    assert re.search(rf"{re.escape(str(out))}: (no accuracy gain at L1-ab|the gain at L1-ab is not significant)",
                     checked.stdout), checked.stdout
    assert figures["cpu"] and set(figures["runs"][0]["settings"]) == {"L1-ab", "L1-af", "L2-ab", "L2-af", "L3-ab",
                                                                        "L3-af"}


def test_a_failed_stage_leaves_no_page_generator_running(tmp_path):
    """The model stage fails while the pages are drawn beside it (a multiprocessing pool): the demo exits with the
    stage's status and nothing it started is left running, the generator's workers included."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    # the real interpreter, except for the model stage, which fails after the pages have started
    (venv / "python").write_text(f'#!/bin/sh\ncase "$*" in *make_tiny_model*) sleep 4; exit 3 ;; esac\n'
                                 f'exec {sys.executable} "$@"\n')
    (venv / "python").chmod(0o755)
    out = tmp_path / "demo"
    env = {**os.environ, "GBTRAIN_VENV": str(tmp_path / "venv"), "DEMO_PAGES": "400"}
    done = subprocess.run([str(ROOT / "scripts" / "demo.sh"), str(out)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3 and "the stage 'model' failed (exit 3)" in done.stderr, done.stderr[-2000:]
    assert "written" not in (out / "logs" / "pages.log").read_text(encoding="utf-8")  # still drawing at the failure

    def left() -> list[str]:
        found = subprocess.run(["pgrep", "-af", str(out)], capture_output=True, text=True).stdout
        return [line for line in found.splitlines() if "pgrep" not in line]

    for _ in range(20):  # a killed worker may take a moment to go
        if not left():
            break
        time.sleep(0.25)
    assert not left()
