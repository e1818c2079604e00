#!/usr/bin/env bash
# Here, before a device call: the pure-Python wheels the GPU machine's image lacks (its torch and triton stay), into
# .device-wheels/ (git-ignored; carry it: the run tool's carry=[".device-wheels"], about 15 MB). The versions are the
# CPU stack's and the GPU constraints' (scripts/constraints-gpu.txt); liger-kernel is the one the 2026-12-04 run used.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.device-wheels
mkdir -p "$out"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$out" \
  transformers==5.19.0 peft==0.21.2 omegaconf==2.3.0 liger-kernel==0.8.5
# antlr4-python3-runtime (omegaconf's parser) is published as an sdist only: build its wheel here
python3 -m pip wheel -q --no-deps -w "$out" antlr4-python3-runtime==4.9.3
ls -l "$out"
