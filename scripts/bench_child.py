"""Benchmarks measure each variant in a child process (its own peak memory, no shared warm-up):
the child prints one RESULT line, the parent collects it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

PREFIX = "RESULT "


def emit(result: dict) -> None:
    """In the child: hand the result to the parent."""
    print(PREFIX + json.dumps(result), flush=True)


class ChildTimeout(Exception):
    """A child that ran past its time (it and its own children were stopped)."""


def run_process(cmd: list[str], env: dict | None = None, timeout: float | None = None) -> tuple[int, str, str]:
    """Run a child in a session of its own, so a timeout stops its compile workers too; its status and output."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ChildTimeout(f"timed out after {timeout:g} s") from None
    return proc.returncode, stdout, stderr


def run_child(cmd: list[str], label: str, env: dict | None = None, timeout: float | None = None) -> dict:
    """In the parent: run one child and return its result; a failed or timed-out child ends the benchmark with a
    message saying which."""
    try:
        returncode, stdout, stderr = run_process(cmd, env, timeout)
    except ChildTimeout as e:
        sys.exit(f"{label} {e}")
    lines = [ln for ln in stdout.splitlines() if ln.startswith(PREFIX)]
    if returncode != 0 or not lines:
        sys.exit(f"{label} failed:\n{stderr[-4000:]}")
    return json.loads(lines[-1][len(PREFIX):])
