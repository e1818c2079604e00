"""Benchmarks measure each variant in a child process (its own peak memory, no shared warm-up):
the child prints one RESULT line, the parent collects it."""

from __future__ import annotations

import json
import subprocess
import sys

PREFIX = "RESULT "


def emit(result: dict) -> None:
    """In the child: hand the result to the parent."""
    print(PREFIX + json.dumps(result), flush=True)


def run_child(cmd: list[str], label: str, env: dict | None = None) -> dict:
    """In the parent: run one child and return its result; a failed child ends the benchmark."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(PREFIX)]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{label} failed:\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len(PREFIX):])
