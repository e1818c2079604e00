#!/usr/bin/env bash
# The test command: build (or reuse) .venv with the pinned CPU stack, then run the whole suite,
# slow end-to-end tests included, and list the 25 slowest (where to look when CI nears its 25 minutes).
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow" -x. Two pytest-xdist workers run the tests (one
# where the machine has one core; GBTRAIN_TEST_WORKERS=N sets it, 0 runs them in this process): each keeps to its
# half of the cores with one torch thread, and takes a test file at a time, the slow files first (tests/conftest.py
# says how; docs/testing.md what it gains).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh .venv
export TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 TQDM_MININTERVAL=5
# Bytecode is cached (under .venv, not beside the sources) even where PYTHONDONTWRITEBYTECODE is set, as on this
# project's machines: the slow tests start entry scripts, training ranks and vLLM engines, and each process that
# imports vLLM, transformers and TRL would compile them again (docs/testing.md)
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
CORES=$(nproc)
WORKERS=${GBTRAIN_TEST_WORKERS:-$(( CORES < 2 ? 0 : 2 ))}
# one torch thread per worker: the workers share the cores
if [ "$WORKERS" -gt 1 ]; then export OMP_NUM_THREADS=1; fi
.venv/bin/ruff check gbtrain data_builders eval recipes scripts tests
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n "$WORKERS" --dist loadgroup \
  --no-loadscope-reorder "$@"
