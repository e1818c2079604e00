#!/usr/bin/env bash
# The test command: build (or reuse) .venv with the pinned CPU stack, then run the whole suite,
# slow end-to-end tests included, and list the 25 slowest (where to look when CI nears 30 minutes).
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow" -x
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh .venv
export TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 TQDM_MININTERVAL=5
.venv/bin/ruff check gbtrain data_builders eval recipes scripts tests
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
