"""The device check in one command, for a machine lent for minutes: parts in order of value, each in its own process
with its own timeout, every result a JSON line (on stdout and in OUT/harness.jsonl), the whole within --budget.

    PYTHONPATH=.:scripts python scripts/device_harness.py --out "$OUT"

1. environment: the GPU, torch / transformers / peft / liger-kernel versions;
2. correctness (scripts/check_packing.py): a packed row against its samples alone, loss and every trainable gradient,
   sdpa and flex attention, on a layer-cut copy of the architecture, with the leak control that must fail;
3. speed (scripts/bench_gpu.py): each mode of --modes in turn, most valuable first;
4. profile: one profiled step of the slowest and of the fastest mode measured (top kernels and CPU operators).

A part that overruns its timeout (or the budget left) is stopped, reported as `"status": "timeout"`, and the next
part starts; a failing part never loses the others. The first flex-attention compile of a cold machine took over
70 s on 2026-12-04 (gpu-h200 notes): the correctness part pads its row to the speed modes' 8k pack length, so the
speed modes find its kernels compiled. The last line sums it up.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench_child import PREFIX, ChildTimeout, run_process
from bench_gpu import DEFAULT_MODES, mode_settings

from gbtrain.cli import parse_options, user_errors
from gbtrain.config import option

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent


@dataclass
class DeviceHarness:
    """The harness's options; each field is one of its flags (gbtrain.cli)."""

    out: str | None = option(None, "folder for harness.jsonl (created; nothing is written elsewhere)")
    model_config: str = option(str(ROOT / "configs/bench/qwen25vl_7b"), "architecture (config.json; random weights)")
    lengths: str = option(str(ROOT / "configs/bench/mixed_l1_l3_lengths.json"), "recorded sample lengths")
    modes: str = option(DEFAULT_MODES, "speed modes, most valuable first (scripts/bench_gpu.py --modes)")
    budget: float = option(540.0, "seconds for everything; each part gets at most what is left (at most 3600)")
    correctness_timeout: float = option(180.0, "seconds for the correctness part (a cold flex compile included)")
    mode_timeout: float = option(100.0, "seconds for each speed mode (build, compile, warm-up, timing)")
    profile_timeout: float = option(90.0, "seconds for each profiled mode")
    seconds: float = option(15.0, "timed seconds per speed mode")
    warmup_steps: int = option(2, "untimed first steps per speed mode")
    cut_layers: int = option(2, "decoder layers of the correctness part's cut")
    cut_vision_depth: int = option(4, "vision blocks of the correctness part's cut")
    pack_tokens: int = option(8192, "the correctness row's pack length, and the speed modes' where a mode names none")


class Harness:
    """Runs the parts against one deadline and writes each result as it comes."""

    def __init__(self, args: DeviceHarness):
        self.args = args
        self.deadline = time.monotonic() + args.budget
        self.log = Path(args.out) / "harness.jsonl"

    def emit(self, record: dict) -> dict:
        line = json.dumps(record)
        print(line, flush=True)
        with self.log.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        return record

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def child(self, part: str, script: str, flags: list[str], timeout: float, **extra) -> dict:
        """Run one part's process within `timeout` and what is left of the budget; its result, or why there is none.
        A check's JSON lines are its result (exit status 1: a check failed); a benchmark's is its RESULT line."""
        if self.left() < 5:
            return self.emit({"part": part, **extra, "status": "timeout", "error": "no budget left"})
        limit = min(timeout, self.left())
        started = time.monotonic()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(SCRIPTS), os.environ.get("PYTHONPATH", "")]))
        cmd = [sys.executable, str(SCRIPTS / script), *flags]
        try:
            returncode, stdout, stderr = run_process(cmd, env, limit)
        except ChildTimeout as e:
            returncode, stdout, stderr = None, "", str(e)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        results = [json.loads(ln[len(PREFIX):]) for ln in stdout.splitlines() if ln.startswith(PREFIX)]
        record = {"part": part, **extra, "status": ("timeout" if returncode is None else "ok" if returncode == 0
                                                    else "failed"), "seconds": round(time.monotonic() - started, 1)}
        if results:
            record |= results[-1]
        elif lines:
            record["results"] = [json.loads(ln) for ln in lines]
        if returncode != 0:
            record["error"] = " ".join([ln.strip() for ln in stderr.splitlines() if ln.strip()][-3:])[-600:]
        return self.emit(record)

    def environment(self) -> dict:
        import importlib.metadata as md

        import torch

        versions = {}
        for package in ("torch", "transformers", "peft", "liger-kernel", "triton", "flash-attn"):
            try:
                versions[package] = md.version(package)
            except md.PackageNotFoundError:
                versions[package] = None
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        return self.emit({"part": "environment", "status": "ok", "gpu": gpu, "versions": versions,
                          "python": sys.version.split()[0], "budget_s": self.args.budget})

    def correctness(self) -> dict:
        a = self.args
        return self.child("correctness", "check_packing.py",
                          [f"--model-config={a.model_config}", f"--lengths={a.lengths}",
                           f"--pack-tokens={a.pack_tokens}", f"--layers={a.cut_layers}",
                           f"--vision-depth={a.cut_vision_depth}"], a.correctness_timeout)

    def speed(self, mode: str, profile: bool = False) -> dict:
        a = self.args
        flags = [f"--model-config={a.model_config}", f"--lengths={a.lengths}", f"--mode={mode}",
                 f"--pack-tokens={a.pack_tokens}"]
        if profile:
            flags += ["--seconds=0", "--max-steps=1", "--warmup-steps=1", "--profile"]
        else:
            flags += [f"--seconds={a.seconds}", f"--warmup-steps={a.warmup_steps}"]
        return self.child("profile" if profile else "speed", "bench_gpu.py", flags,
                          a.profile_timeout if profile else a.mode_timeout, mode=mode)


def summary(records: list[dict]) -> dict:
    speeds = [r for r in records if r["part"] == "speed" and r["status"] == "ok"]
    base = next((r for r in speeds if r["mode"].startswith("naive")), None)
    correctness = next((r for r in records if r["part"] == "correctness"), {})
    return {"part": "summary", "correctness": correctness.get("status"),
            "parts": {s: sum(r["status"] == s for r in records) for s in ("ok", "failed", "timeout")},
            "real_tokens_per_s": {r["mode"]: r["real_tokens_per_s"] for r in speeds},
            "mfu": {r["mode"]: r["mfu"] for r in speeds},
            "over_naive": {r["mode"]: round(r["real_tokens_per_s"] / base["real_tokens_per_s"], 2)
                           for r in speeds} if base else None}


def main() -> None:
    args = parse_options(DeviceHarness, __doc__)
    with user_errors("device_harness"):
        if not args.out:
            raise ValueError("--out is required (the folder for harness.jsonl)")
        if not (0 < args.budget <= 3600):
            raise ValueError(f"--budget={args.budget:g}: give 1-3600 seconds")
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        for mode in modes:
            mode_settings(mode, args.pack_tokens)
        log = Path(args.out) / "harness.jsonl"
        if log.exists():
            raise ValueError(f"{log} exists (an earlier run's results): choose another --out")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    harness = Harness(args)
    records = [harness.environment(), harness.correctness()]
    records += [harness.speed(mode) for mode in modes]
    timed = sorted((r for r in records if r["part"] == "speed" and r["status"] == "ok"),
                   key=lambda r: r["real_tokens_per_s"])
    for mode in dict.fromkeys(r["mode"] for r in (timed[:1] + timed[-1:])):
        records.append(harness.speed(mode, profile=True))
    harness.emit(summary(records))


if __name__ == "__main__":
    main()
