#!/usr/bin/env bash
# The test command: build (or reuse) .venv with the pinned CPU stack, then run the whole suite,
# slow end-to-end tests included (first: tests/conftest.py), on one worker per core (pytest-xdist; tests that
# must not run at once share an xdist_group), and list the 25 slowest (where to look when CI nears 25 minutes).
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow" -x; GBTRAIN_TEST_WORKERS=0 runs in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh .venv
export TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 TQDM_MININTERVAL=5
WORKERS=${GBTRAIN_TEST_WORKERS:-$(nproc)}
# One torch thread per worker: the workers share the cores. A process that starts more threads anyway (a vLLM
# engine binds all cores) lets them sleep when they wait rather than spin on the core the other worker needs.
if [ "$WORKERS" -gt 1 ]; then export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE; fi
.venv/bin/ruff check gbtrain data_builders eval recipes scripts tests
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n "$WORKERS" --dist loadgroup "$@"
