"""Size and time of the Hub export of a synthetic set (prints JSON lines, asserts nothing).

    python scripts/bench_hub_export.py --work runs/bench-hub [--pages 700] [--workers 2]

Runs the three commands as a user does, each in its own process: data_builders/synth_pages.py (--pages, seed 0),
data_builders/build_sft.py (configs/data/default.yaml, the default 10,000 conversations, estimated lengths) and
data_builders/export_hub.py, then reports the pages, rows, the build's and the export's sizes (bytes of their files)
and the export's time (the command's wall time, Python's start included, and the export's own). Everything is
written under --work (synth/, sft/, hub/); a rerun replaces it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gbtrain.cli import parse_options
from gbtrain.config import option

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class BenchHub:
    """The benchmark's options; each field is one of its flags (gbtrain.cli)."""

    work: str = option("runs/bench-hub", "folder for the pages (WORK/synth), the build (WORK/sft), the export "
                                         "(WORK/hub)")
    pages: int = option(700, "synthetic pages generated")
    workers: int = option(os.cpu_count() or 1, "processes generating the pages and threads placing the build's "
                                               "images (default: this machine's CPUs)")


def timed(script: str, *args: str) -> float:
    """Seconds one entry script took, run as a user runs it; a failure ends the benchmark with its message."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{script} failed:\n{proc.stderr[-4000:]}")
    return time.perf_counter() - start


def main() -> None:
    args = parse_options(BenchHub, __doc__)
    work = Path(args.work).resolve()
    synth, sft, hub = work / "synth", work / "sft", work / "hub"
    machine = {"cpus": os.cpu_count(), "workers": args.workers, "python": platform.python_version()}
    synth_s = timed("data_builders/synth_pages.py", "--out", str(synth), "--pages", str(args.pages), "--seed", "0",
                    "--workers", str(args.workers))
    print(json.dumps({"bench": "synth_pages", "pages": args.pages, "seconds": round(synth_s, 1), **machine}))
    build_s = timed("data_builders/build_sft.py", "--data", str(synth), "--out", str(sft), "--config",
                    str(ROOT / "configs/data/default.yaml"), f"workers={args.workers}")
    print(json.dumps({"bench": "build_sft", "seconds": round(build_s, 1), **machine}))
    export_s = timed("data_builders/export_hub.py", "--build", str(sft), "--out", str(hub))
    record = json.loads((hub / "gbtrain_export.json").read_text(encoding="utf-8"))
    print(json.dumps({"bench": "hub_export", "pages": args.pages, "rows": sum(record["rows"].values()),
                      "rows_by_split": record["rows"], "build_bytes": record["build_bytes"],
                      "export_bytes": record["export_bytes"],
                      "export_to_build": round(record["export_bytes"] / record["build_bytes"], 2),
                      "distinct_images": record["distinct_images"], "image_duplication": record["duplication"],
                      "export_seconds": round(export_s, 1), "export_seconds_in_process": record["seconds"],
                      **machine}))


if __name__ == "__main__":
    main()
