#!/usr/bin/env bash
# On the GPU machine (the run tool's command, from the repository root): install the carried wheels beside the image's
# torch, then the device harness, its JSON lines under $OUT (docs/benchmarks.md#the-device-harness).
#   run(command="scripts/device_check.sh", carry=[".device-wheels"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the folder for the results}"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target "$site" .device-wheels/*.whl
export PYTHONPATH="$site:$PWD:$PWD/scripts" TOKENIZERS_PARALLELISM=false
exec python3 scripts/device_harness.py --out "$OUT/harness" "$@"
