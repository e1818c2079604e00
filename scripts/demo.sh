#!/usr/bin/env bash
# The whole recipe on a CPU, from nothing: environment, a tiny Qwen2.5-VL whose vision tower is first taught to read
# the pages' handwriting, synthetic exam pages, SFT conversations, base-model evaluation (vLLM), fine-tuning through
# `accelerate launch`, evaluation of the fine-tuned checkpoint, how much of its skill comes from the pixels (its
# loss with real vs. blank images), and the gains.
#   scripts/demo.sh [OUT_DIR]          about 13 minutes from a fresh clone (docs/demo.md): pages whose answers are
#                                      choice letters and true/false marks (--profile marks) at 324 image tokens,
#                                      the six settings
#   scripts/demo.sh --full [OUT_DIR]   about 40 minutes (2,389 s measured; docs/demo.md): numbers as well
#                                      (--profile legible), a longer warm-up, 4.5 times the fine-tuning, and the
#                                      three-turn decomposition
#   --seed N                           another draw of everything random (pages, held-out pages, weights, warm-up,
#                                      split, training order; 0 by default): docs/demo.md gives the spread over seeds
# (default OUT_DIR runs/demo-<timestamp>). Sizes can be changed through the environment: DEMO_PAGES,
# DEMO_HELDOUT_PAGES, DEMO_CONVERSATIONS, DEMO_EVAL_RECORDS, DEMO_TRAIN_STEPS, DEMO_EVAL_EVERY, DEMO_HIDDEN,
# DEMO_LAYERS, DEMO_COORDS, DEMO_WARMUP_STEPS, DEMO_MAX_TOKENS; DEMO_DETERMINISTIC=1 trains with torch's
# deterministic kernels (deterministic=true); DEMO_SMOKE=1 shrinks every count to a smoke
# test's (tests/test_demo.py). Each stage's whole output is in OUT_DIR/logs/.
# On a GPU machine, GBTRAIN_VENV=<an environment with CUDA torch and the extras> makes the same commands train and
# evaluate on the GPU (.venv is CPU-only).
set -euo pipefail
fail() { echo "demo: $*" >&2; exit 2; }  # a refusal before any work: one line, exit 2
FULL=false SEED=0
USAGE="scripts/demo.sh [--full] [--seed N] [OUT_DIR]"
while [ $# -gt 0 ]; do
  case "$1" in
    --full) FULL=true; shift ;;
    --seed)
      [ -z "${SEEDED:-}" ] || fail "--seed given twice ($SEEDED, then ${2:-}): give one"
      [[ "${2:-}" =~ ^[0-9]{1,4}$ ]] || fail "--seed ${2:-}: give a whole number from 0 to 9999 ($USAGE)"
      SEED=$((10#$2)) SEEDED=$2; shift 2 ;;
    -*) fail "unknown option '$1': $USAGE" ;;
    *) break ;;
  esac
done
[ $# -le 1 ] || fail "$# folders given ($*): $USAGE takes one"
# OUT as given is read from the folder the demo was started in (demo.sh demo-out writes ./demo-out there, never
# into the checkout); the default lies in the checkout's runs/
if [ -n "${1:-}" ]; then
  case "$1" in /*) OUT=$1 ;; *) OUT="$PWD/$1" ;; esac
  [ ! -e "$OUT" ] || [ -d "$OUT" ] || fail "OUT_DIR $OUT is a file: name a new folder"
  if [ -d "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
    fail "OUT_DIR $OUT holds files: name a new or empty folder (a demo's stages would mix with what is there)"
  fi
fi
# The sizes, checked before anything is written: a whole number each (the warm-up may be 0 steps)
for name in DEMO_PAGES DEMO_HELDOUT_PAGES DEMO_CONVERSATIONS DEMO_EVAL_RECORDS DEMO_TRAIN_STEPS DEMO_EVAL_EVERY \
            DEMO_HIDDEN DEMO_LAYERS DEMO_WARMUP_STEPS DEMO_MAX_TOKENS; do
  value=${!name-}
  low=1; [ "$name" = DEMO_WARMUP_STEPS ] && low=0
  if [ -n "$value" ] && { ! [[ "$value" =~ ^[0-9]{1,6}$ ]] || [ $((10#$value)) -lt $low ]; }; then
    fail "$name=$value: give a whole number from $low to 999999 (or unset it for the demo's own)"
  fi
done
case "${DEMO_COORDS:-rel1000}" in qwen25|abs|rel1000|rel1000-yxyx|rel1|rel1-cxcywh) ;;
  *) fail "DEMO_COORDS=$DEMO_COORDS: one of qwen25, abs, rel1000, rel1000-yxyx, rel1, rel1-cxcywh" ;; esac
case "${DEMO_SMOKE:-0}" in 0|1) ;; *) fail "DEMO_SMOKE=$DEMO_SMOKE: 1 (smoke-test sizes) or 0" ;; esac
if $FULL && [ "${DEMO_SMOKE:-0}" = 1 ]; then fail "--full and DEMO_SMOKE=1: the smoke sizes would replace the full demo's; give one"; fi
case "${DEMO_DETERMINISTIC:-0}" in 0|1) ;; *) fail "DEMO_DETERMINISTIC=$DEMO_DETERMINISTIC: 1 (torch's deterministic kernels) or 0" ;; esac
if [ -n "${GBTRAIN_VENV:-}" ] && [ ! -x "$GBTRAIN_VENV/bin/python" ]; then
  fail "GBTRAIN_VENV=$GBTRAIN_VENV has no bin/python: name a Python environment with gbtrain's dependencies"
fi
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/demo-$(date +%Y%m%d-%H%M%S)}
if [ "${DEMO_SMOKE:-0}" = 1 ]; then  # the same stages and code at the smallest counts that exercise them
  : "${DEMO_PAGES:=8}" "${DEMO_HELDOUT_PAGES:=4}" "${DEMO_CONVERSATIONS:=60}" "${DEMO_TRAIN_STEPS:=4}"
  : "${DEMO_WARMUP_STEPS:=4}" "${DEMO_EVAL_RECORDS:=2}" "${DEMO_EVAL_EVERY:=4}" "${DEMO_MAX_TOKENS:=32}"
fi
# 64 held-out records per level (64 pages): at 16, a gain was one or two records and every interval touched 0
EVAL_RECORDS=${DEMO_EVAL_RECORDS:-64}
HIDDEN=${DEMO_HIDDEN:-256}
MIN_PX=3136        # 56*56
HELDOUT_PAGES=${DEMO_HELDOUT_PAGES:-64}
# A model trained from random weights has no notion of an image's size in pixels, so the demo's targets
# use 0-1000 coordinates relative to the image (the real recipe keeps Qwen2.5-VL's own qwen25 pixels).
COORDS=${DEMO_COORDS:-rel1000}
# A miniature trained from random weights cannot read handwriting; both profiles give it a vision tower first
# taught to read the profile's handwriting (gbtrain.miniature.warmup), frozen with its merger during SFT
# (docs/miniatures.md#a-tiny-model-that-can-see-the-vision-warm-up).
# Frozen, the tower gives an image the same features every epoch: each is encoded once and kept (vision_cache_mib;
# the demo's 392 distinct images took 110 MiB; 1.06x faster steps, docs/benchmarks.md)
TRAIN_ARGS=(freeze.vision_tower=true freeze.merger=true vision_cache_mib=1024)
MAX_PX=254016      # 324 * 28*28: a legible page's handwriting stays about one image token tall
if $FULL; then
  PROFILE=legible  # digits, angles, choice letters and ticks: 18 characters, answers of 1-3 of them
  LAYERS=${DEMO_LAYERS:-4}
  MAX_TOKENS=${DEMO_MAX_TOKENS:-384}
  PAGES=${DEMO_PAGES:-240}
  CONVERSATIONS=${DEMO_CONVERSATIONS:-2400}
  STEPS=${DEMO_TRAIN_STEPS:-1800}
  WARMUP_STEPS=${DEMO_WARMUP_STEPS:-2000}
  EVAL_EVERY=${DEMO_EVAL_EVERY:-300}
  THREE_TURN=(--three-turn)
  DATA_ARGS=()
  TRAIN_ARGS+=(lr.llm=5e-4 packing=true pack_tokens=2048)
else
  PROFILE=marks    # choice letters and true/false marks: six characters, one per answer
  # Two layers: a step costs 0.65 s instead of 0.72-1.0 s with four, and more steps read better in 15 minutes
  # (docs/demo.md#how-the-default-demo-was-sized)
  LAYERS=${DEMO_LAYERS:-2}
  MAX_TOKENS=${DEMO_MAX_TOKENS:-256}  # a page's reply holds at most four short items
  PAGES=${DEMO_PAGES:-120}
  CONVERSATIONS=${DEMO_CONVERSATIONS:-1200}
  # 1,000 steps: at 720 a fresh clone took 673 s, and 1,000 read more at every level (docs/demo.md, runs 14-15)
  STEPS=${DEMO_TRAIN_STEPS:-1000}
  WARMUP_STEPS=${DEMO_WARMUP_STEPS:-400}
  EVAL_EVERY=${DEMO_EVAL_EVERY:-300}
  THREE_TURN=()    # the three-turn decomposition (3.5x the six settings' generation time) is --full's,
  DATA_ARGS=(mix.three_turn=0)  # and so are its training conversations
  # Padded batches of 3 conversations grouped by length: on a CPU, sdpa computes a packed row's attention over the
  # whole row, so unpacked batches train twice the tokens per second here (docs/demo.md)
  TRAIN_ARGS+=(lr.llm=1e-3 packing=false per_device_batch_size=3)
fi
if [ "${DEMO_DETERMINISTIC:-0}" = 1 ]; then TRAIN_ARGS+=(deterministic=true); fi
MODEL_ARGS=(--seed "$SEED" --vision-hidden 128 --vision-depth 3 --vision-warmup-steps "$WARMUP_STEPS" --vision-profile "$PROFILE")
mkdir -p "$OUT"
log() { echo "[demo $(date +%H:%M:%S)] $*"; }
start=$(date +%s)

if [ -n "${GBTRAIN_VENV:-}" ]; then  # an environment of your own, e.g. CUDA torch + the extras on a GPU machine
  log "environment: $GBTRAIN_VENV"
  VENV=$GBTRAIN_VENV
else
  log "environment (.venv, the pinned CPU stack; built once, about a minute)"
  scripts/setup_env.sh .venv
  VENV=.venv
fi
PY=$VENV/bin/python
# Bytecode cached under the environment even where PYTHONDONTWRITEBYTECODE is set (as in scripts/test.sh): each
# stage's process would otherwise compile vLLM, transformers and TRL again (docs/testing.md)
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$VENV/pycache"
DEVICE=(--cpu)
if $PY -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then DEVICE=(); fi
# Optional, for speed and quiet (docs/evaluation.md#memory-and-environment); gbtrain sizes vLLM's memory itself.
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1
export PYTHONUNBUFFERED=1  # each stage's lines reach the console as they come
export VLLM_CACHE_ROOT="$OUT/.vllm-cache"

# Each stage's whole output goes to $OUT/logs/<stage>.log; the console shows it without the libraries' warnings
# (vLLM's FutureWarnings, NUMA and Triton notices, transformers' deprecations), and a failed stage's log tail.
mkdir -p "$OUT/logs"
NOISE='Warning|warnings\.warn\(|^  (if hasattr|wrapper = )|Triton not available|^\[transformers\]|^\s*$'
once() {  # each line as it comes, a repeated one once (tqdm prints a finished bar twice)
  local line last=""
  while IFS= read -r line; do
    if [ "$line" != "$last" ]; then printf '%s\n' "$line"; fi
    last=$line
  done
}
stage() {  # stage NAME SHOWN COMMAND...: SHOWN is a grep -E pattern of what the console shows of the output
  local name=$1 shown=$2 status=0
  shift 2
  "$@" 2>&1 | tee "$OUT/logs/$name.log" | { grep --line-buffered -v -E "$NOISE" | grep --line-buffered -oE "$shown" \
    | once || true; } || status=$?
  if [ "$status" -ne 0 ]; then
    tail -n 15 "$OUT/logs/$name.log" >&2
    echo "demo: the stage '$name' failed (exit $status); its whole output: $OUT/logs/$name.log" >&2
    exit "$status"
  fi
}

# The pages are drawn beside the warm-up, which leaves part of the CPU idle while it draws its own crops
log "synthetic exam pages ($PROFILE): $PAGES for training, $HELDOUT_PAGES held out (another seed), beside the model"
set -m  # the pages job in a process group of its own, so that the trap below ends it whole (the generator's workers)
(
  stage pages '^wrote .*' $PY data_builders/synth_pages.py --out "$OUT/pages" --pages "$PAGES" --seed $((2 * SEED)) \
    --profile "$PROFILE"
  stage heldout '^wrote .*' $PY data_builders/synth_pages.py --out "$OUT/heldout" --pages "$HELDOUT_PAGES" \
    --seed $((2 * SEED + 1)) \
    --profile "$PROFILE"
) &
pages_job=$!
set +m
# a failed or interrupted model stage does not leave the pages being drawn, nor their workers waiting
trap 'kill -- -"$pages_job" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM

log "tiny Qwen2.5-VL (hidden $HIDDEN, $LAYERS layers), its vision tower warmed up on $PROFILE handwriting ($WARMUP_STEPS steps)"
stage model 'vision warm-up (step|done).*|tiny .* written to .*' $PY scripts/make_tiny_model.py \
  --out "$OUT/base-model" --hidden "$HIDDEN" --layers "$LAYERS" "${MODEL_ARGS[@]}"
wait "$pages_job"  # its stage has said what failed; set -e stops here with its status
trap - EXIT INT TERM

log "SFT conversations"
stage conversations '^wrote .*' $PY data_builders/build_sft.py --data "$OUT/pages" --out "$OUT/sft" \
  --config configs/data/default.yaml target_count="$CONVERSATIONS" coords="$COORDS" vision.min_pixels=$MIN_PX \
  vision.max_pixels=$MAX_PX max_length=2048 tokenizer="$OUT/base-model" seed="$SEED" test_share=0.0 validation_share=0.05 "${DATA_ARGS[@]}"

# Both models' replies are decoded under the grading schema (--structured, docs/evaluation.md): every reply parses,
# and the figures measure what a model finds and reads, not how often its JSON breaks
EVAL_ARGS=(--data "$OUT/heldout" --coords "$COORDS" --min-pixels $MIN_PX --max-pixels $MAX_PX --settings all
           "${THREE_TURN[@]}" --limit "$EVAL_RECORDS" --max-tokens "$MAX_TOKENS" --max-model-len 4096 --batch-size 64 --overlays 3
           --structured)
BAR='L[123]-a[bf][^:]*: +100%[|][^|]*[|] *[0-9]+/[0-9]+'  # each setting's finished progress bar, once
log "evaluate the base model (six settings${THREE_TURN:+ + three-turn}, $EVAL_RECORDS held-out records per level)"
stage eval-base "$BAR" $PY eval/run_eval.py --model "$OUT/base-model" --out "$OUT/eval-base" "${EVAL_ARGS[@]}"

LOG_EVERY=$(( STEPS < 50 ? STEPS : 50 ))
log "fine-tune ($STEPS steps, accelerate launch recipes/sft_qwen.py; the loss every $LOG_EVERY steps)"
stage train '\[train\] step .*' $VENV/bin/accelerate launch --num_processes 1 "${DEVICE[@]}" recipes/sft_qwen.py \
  --config configs/sft/tiny_cpu.yaml model="$OUT/base-model" dataset="$OUT/sft" output_dir="$OUT/sft-model" \
  max_steps="$STEPS" max_length=2048 eval_steps="$EVAL_EVERY" save_steps="$EVAL_EVERY" \
  logging_steps=$LOG_EVERY limit_eval_samples=32 seed=$((42 + SEED)) "${TRAIN_ARGS[@]}"
test -f "$OUT/sft-model/train_summary.json"

log "evaluate the fine-tuned model"
stage eval-sft "$BAR" $PY eval/run_eval.py --model "$OUT/sft-model" --out "$OUT/eval-sft" "${EVAL_ARGS[@]}"

log "does the fine-tuned model look at the image? (loss on validation conversations, real vs. blank images)"
stage reliance '^\{.*' $PY scripts/image_reliance.py --model "$OUT/sft-model" --data "$OUT/sft"
grep '^{' "$OUT/logs/reliance.log" > "$OUT/image_reliance.json"

log "gains (base -> fine-tuned; $OUT/gains.md gives each gain's interval)"
stage gains '.*' $PY eval/compare.py "$OUT/eval-base/report.json" "$OUT/eval-sft/report.json" --out "$OUT/gains.md"
log "done in $(( $(date +%s) - start )) s (seed $SEED): $OUT/gains.html (gains.md), $OUT/eval-*/report.html (plots/, overlays/), logs in $OUT/logs"
