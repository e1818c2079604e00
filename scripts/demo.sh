#!/usr/bin/env bash
# The whole recipe on a CPU, from nothing: environment, a tiny Qwen2.5-VL, synthetic exam pages, SFT
# conversations, base-model evaluation (vLLM), fine-tuning through `accelerate launch`, evaluation of the
# fine-tuned checkpoint, the gains, and how much of the fine-tuned model's skill comes from the pixels (its loss
# with real vs. blank images).
#   scripts/demo.sh [OUT_DIR]          about 12 minutes from a fresh clone (683 s measured): the benchmark's page
#                                      mix at 64 image tokens, the six settings; the model learns the answer
#                                      format, not to read (docs/demo.md)
#   scripts/demo.sh --full [OUT_DIR]   about 50 minutes (3,063 s measured; docs/demo.md): legible pages
#                                      (--profile legible) at 324 image tokens, and a base model whose vision
#                                      tower was first warmed up on handwriting (gbtrain.miniature.warmup), frozen in SFT
# (default OUT_DIR runs/demo-<timestamp>). Sizes can be changed through the environment: DEMO_PAGES,
# DEMO_CONVERSATIONS, DEMO_EVAL_RECORDS, DEMO_TRAIN_STEPS, DEMO_HIDDEN, DEMO_LAYERS, DEMO_COORDS,
# DEMO_WARMUP_STEPS. On a GPU machine, GBTRAIN_VENV=<an environment with CUDA torch and the extras> makes the same
# commands train and evaluate on the GPU (.venv is CPU-only).
set -euo pipefail
cd "$(dirname "$0")/.."
FULL=false
if [ "${1:-}" = "--full" ]; then FULL=true; shift; fi
OUT=${1:-runs/demo-$(date +%Y%m%d-%H%M%S)}
EVAL_RECORDS=${DEMO_EVAL_RECORDS:-16}
HIDDEN=${DEMO_HIDDEN:-256}
LAYERS=${DEMO_LAYERS:-4}
MIN_PX=3136        # 56*56
# A model trained from random weights has no notion of an image's size in pixels, so the demo's targets
# use 0-1000 coordinates relative to the image (the real recipe keeps Qwen2.5-VL's own qwen25 pixels).
COORDS=${DEMO_COORDS:-rel1000}
if $FULL; then
  PAGES=${DEMO_PAGES:-240}
  CONVERSATIONS=${DEMO_CONVERSATIONS:-2400}
  STEPS=${DEMO_TRAIN_STEPS:-1800}
  EVAL_EVERY=300
  THREE_TURN=(--three-turn)
  MAX_PX=254016    # 324 * 28*28: a legible page's handwriting stays about one image token tall
  PROFILE=legible
  # A tower that reads 18 handwritten characters needs more width than the 64 of the plain miniature; it is
  # trained before SFT (gbtrain.miniature.warmup) and frozen during it, with the language model at a rate that keeps it
  MODEL_ARGS=(--vision-hidden 128 --vision-depth 3 --vision-warmup-steps "${DEMO_WARMUP_STEPS:-2000}")
  TRAIN_ARGS=(freeze.vision_tower=true freeze.merger=true lr.llm=5e-4)
else
  PAGES=${DEMO_PAGES:-160}
  CONVERSATIONS=${DEMO_CONVERSATIONS:-1200}
  STEPS=${DEMO_TRAIN_STEPS:-420}
  EVAL_EVERY=140
  MAX_PX=50176     # 64 * 28*28: at most 64 image tokens per image keep CPU training fast
  PROFILE=gradingbench
  MODEL_ARGS=()
  TRAIN_ARGS=()
  THREE_TURN=()  # the three-turn decomposition takes 3.5x the six settings' generation time: --full runs it
fi
mkdir -p "$OUT"
log() { echo "[demo $(date +%H:%M:%S)] $*"; }
start=$(date +%s)

if [ -n "${GBTRAIN_VENV:-}" ]; then  # an environment of your own, e.g. CUDA torch + the extras on a GPU machine
  log "environment: $GBTRAIN_VENV"
  VENV=$GBTRAIN_VENV
else
  log "environment (.venv, the pinned CPU stack; built once, about 3 minutes)"
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
export VLLM_CACHE_ROOT="$OUT/.vllm-cache"

log "tiny Qwen2.5-VL (hidden $HIDDEN, $LAYERS layers)"
$PY scripts/make_tiny_model.py --out "$OUT/base-model" --hidden "$HIDDEN" --layers "$LAYERS" "${MODEL_ARGS[@]}"

log "synthetic exam pages ($PROFILE): $PAGES for training, 24 held out (another seed)"
$PY data_builders/synth_pages.py --out "$OUT/pages" --pages "$PAGES" --seed 0 --profile "$PROFILE"
$PY data_builders/synth_pages.py --out "$OUT/heldout" --pages 24 --seed 1 --profile "$PROFILE"

log "SFT conversations"
$PY data_builders/build_sft.py --data "$OUT/pages" --out "$OUT/sft" --config configs/data/default.yaml \
  target_count="$CONVERSATIONS" coords="$COORDS" vision.min_pixels=$MIN_PX vision.max_pixels=$MAX_PX max_length=2048 \
  tokenizer="$OUT/base-model" test_share=0.0 validation_share=0.05

EVAL_ARGS=(--data "$OUT/heldout" --coords "$COORDS" --min-pixels $MIN_PX --max-pixels $MAX_PX --settings all
           "${THREE_TURN[@]}" --limit "$EVAL_RECORDS" --max-tokens 384 --max-model-len 4096 --batch-size 64 --overlays 3)
log "evaluate the base model (six settings${THREE_TURN:+ + three-turn}, $EVAL_RECORDS held-out records per level)"
$PY eval/run_eval.py --model "$OUT/base-model" --out "$OUT/eval-base" "${EVAL_ARGS[@]}" > "$OUT/eval-base.log"

log "fine-tune ($STEPS steps, accelerate launch recipes/sft_qwen.py)"
$VENV/bin/accelerate launch --num_processes 1 "${DEVICE[@]}" recipes/sft_qwen.py --config configs/sft/tiny_cpu.yaml \
  model="$OUT/base-model" dataset="$OUT/sft" output_dir="$OUT/sft-model" max_steps="$STEPS" \
  max_length=2048 pack_tokens=2048 \
  eval_steps=$EVAL_EVERY save_steps=$EVAL_EVERY logging_steps=25 limit_eval_samples=32 "${TRAIN_ARGS[@]}" 2>&1 \
  | tee "$OUT/train.log" \
  | grep -E "^\{|'loss'" || true
test -f "$OUT/sft-model/train_summary.json"

log "evaluate the fine-tuned model"
$PY eval/run_eval.py --model "$OUT/sft-model" --out "$OUT/eval-sft" "${EVAL_ARGS[@]}" > "$OUT/eval-sft.log"

log "gains"
$PY eval/compare.py "$OUT/eval-base/report.json" "$OUT/eval-sft/report.json" --out "$OUT/gains.md"

log "does the fine-tuned model look at the image? (loss on validation conversations, real vs. blank images)"
$PY scripts/image_reliance.py --model "$OUT/sft-model" --data "$OUT/sft" 2>/dev/null | tee "$OUT/image_reliance.json"
log "done in $(( $(date +%s) - start )) s: $OUT/gains.md, $OUT/eval-*/report.md, plots/ and overlays/"
