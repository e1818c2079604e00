#!/usr/bin/env bash
# The test command: build (or reuse) .venv with the pinned CPU stack, then run the whole suite,
# slow end-to-end tests included, on one worker per core (pytest-xdist; a test file stays on one worker, as its
# tests share ports and fixtures; the files with most slow tests start first: tests/conftest.py), and list the
# 25 slowest (where to look when CI nears its 25 minutes).
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow" -x; GBTRAIN_TEST_WORKERS=0 runs in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh .venv
export TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 TQDM_MININTERVAL=5
WORKERS=${GBTRAIN_TEST_WORKERS:-$(nproc)}
# one torch thread per worker: the workers share the cores
if [ "$WORKERS" -gt 1 ]; then export OMP_NUM_THREADS=1; fi
.venv/bin/ruff check gbtrain data_builders eval recipes scripts tests
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n "$WORKERS" --dist loadfile "$@"
