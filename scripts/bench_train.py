"""Training throughput: naive padded batches vs gbtrain's packed collator, on the same mixed L1+L3 samples.

    python scripts/bench_train.py --config configs/sft/tiny_cpu.yaml model=M dataset=D output_dir=unused \
        [--samples 48] [--naive-batch 4] [--steps 0]

One run measures both modes, each in a child process (so peak memory is per mode): real (non-padding)
tokens/s, packing efficiency (real tokens / computed tokens), peak memory, and the ratio. The sample
set interleaves one L3 page with three L1 crops (the mix that wastes most padding). On a GPU use a
real-size config, e.g. configs/sft/qwen25vl_7b_lora.yaml model_init=random.
Targets: CPU (tiny model) packing efficiency >= 0.95; GPU (7B, LoRA r=64, H200) >= 3x naive real
tokens/s at <= 80 GiB.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from dataclasses import dataclass

from bench_child import emit, run_child

from gbtrain.cli import parse_options
from gbtrain.config import option

MODES = ("naive", "packed")


@dataclass
class BenchTrain:
    """The benchmark's options; each field is one of its flags (gbtrain.cli). `config` and `overrides` are the
    recipe's (gbtrain.train.config.TrainConfig): its YAML file and key=value, as recipes/sft_qwen.py takes them."""

    config: str = option(help="the recipe's config (configs/sft/*.yaml)")
    samples: int = option(48, "samples of the mix (one L3 page, three L1 crops, ...) run in each mode")
    naive_batch: int = option(4, "samples per padded batch (naive mode)")
    steps: int = option(0, "limit timed steps per mode (0 = all)")
    mix: str = option("l3-l1", "which samples: l3-l1 (one L3 page, three L1 crops, ...: the mix that wastes most "
                               "padding) or as-built (the first ones of the training split, its own mix of levels)",
                      choices=("l3-l1", "as-built"))
    epochs: int = option(1, "passes over the samples, timed together (scripts/bench_vision_cache.py: later passes "
                            "read a frozen tower's features from the cache when the recipe sets vision_cache_mib)")
    mode: str | None = option(None, "run this mode only, in this process (what each child runs; default: both, each "
                                    "in a child process)", choices=MODES)
    overrides: list[str] = option([], "the recipe's key=value (model=M dataset=D output_dir=unused)",
                                  positional=True)  # (option copies a list default for each instance)


def _mixed_indices(ds, n: int) -> list[int]:
    from gbtrain.vocabulary import L1, L3

    l1 = [i for i, lvl in enumerate(ds["level"]) if lvl == L1]
    l3 = [i for i, lvl in enumerate(ds["level"]) if lvl == L3]
    out: list[int] = []
    while len(out) < n and (l1 or l3):
        if l3:
            out.append(l3.pop(0))
        for _ in range(3):
            if l1 and len(out) < n:
                out.append(l1.pop(0))
    return out


def run_mode(args: BenchTrain) -> dict:
    import torch

    from gbtrain.config import load_config
    from gbtrain.data.sft_dataset import LengthCounter
    from gbtrain.train.collator import GradingCollator, RopeIndex, plan_packs, pop_real_tokens
    from gbtrain.train.config import TrainConfig
    from gbtrain.train.modeling import load_processor, parameter_groups, setup_model, train_dtype
    from gbtrain.train.trainer import filter_by_length, resolve_budget
    from gbtrain.train.vision_cache import install_vision_cache

    cfg = load_config(TrainConfig, args.config, args.overrides)
    torch.manual_seed(cfg.seed)
    budget = resolve_budget(cfg)
    processor = load_processor(cfg.model, budget)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = setup_model(cfg).to(device).train()  # trainable parameters in fp32 under a bf16 base
    cache = install_vision_cache(model, cfg.vision_cache_mib) if cfg.vision_cache_mib else None
    bf16 = train_dtype(cfg) == torch.bfloat16
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    from gbtrain.data.sft_dataset import load_sft_dataset

    train = load_sft_dataset(cfg.dataset)["train"]
    train, _ = filter_by_length(train, LengthCounter(processor.tokenizer, budget), cfg.max_length, "train")
    chosen = _mixed_indices(train, args.samples) if args.mix == "l3-l1" else range(min(args.samples, len(train)))
    rows = train.select(chosen)
    examples = [rows[i] for i in range(len(rows))]
    if args.mode == "naive":
        collator = GradingCollator(processor, cfg.max_length)
        batches = [examples[i:i + args.naive_batch] for i in range(0, len(examples), args.naive_batch)]
    else:
        rope = RopeIndex(model.config if not hasattr(model, "peft_config") else model.base_model.model.config)
        collator = GradingCollator(processor, cfg.max_length, packing=True, rope_index=rope)
        pack_budget = max(cfg.pack_tokens, cfg.max_length)
        packs = plan_packs(rows["num_tokens"], pack_budget, cfg.seed)
        batches = [[examples[i] for i in p] for p in packs]
        fill = round(sum(rows["num_tokens"]) / (len(packs) * pack_budget), 4)
    optimizer = torch.optim.AdamW([{k: v for k, v in g.items() if k not in ("names", "part")}
                                   for g in parameter_groups(model, cfg)])
    encoded = [collator(b) for b in batches]  # tokenization and image preprocessing are not what is measured
    if args.steps:
        encoded = encoded[:args.steps]
    encoded = encoded * args.epochs
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    real = computed = 0
    start = None
    for step, batch in enumerate(encoded):
        if step == 1:  # the first step warms up kernels and allocators
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            real = computed = 0
        batch = dict(batch)
        tokens = pop_real_tokens(batch)
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):  # as the trainer's bf16=True does
            loss = model(**batch, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        real += tokens
        computed += int(batch["input_ids"].numel())
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start if start else float("nan")
    peak = (torch.cuda.max_memory_allocated() if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    extra = ({"pack_fill": fill} if args.mode == "packed" else {}) | (cache.summary() if cache else {})
    return {**extra, "mode": args.mode, "device": device, "samples": len(examples),
            "steps_timed": max(len(encoded) - 1, 0),
            "real_tokens_per_s": round(real / elapsed, 1), "packing_efficiency": round(real / max(computed, 1), 4),
            "peak_memory_gib": round(peak / 2**30, 2),
            "peak_memory_kind": "cuda max allocated" if device == "cuda" else "process max RSS"}


def main() -> None:
    args = parse_options(BenchTrain, __doc__)
    if args.mode:
        emit(run_mode(args))
        return
    results = {}
    for mode in MODES:
        cmd = [sys.executable, __file__, "--config", args.config, "--samples", str(args.samples), "--naive-batch",
               str(args.naive_batch), "--steps", str(args.steps), "--mix", args.mix, "--epochs", str(args.epochs),
               "--mode", mode, *args.overrides]
        results[mode] = run_child(cmd, f"{mode} run", dict(os.environ))
        print(json.dumps({"bench": "train", **results[mode]}), flush=True)
    ratio = results["packed"]["real_tokens_per_s"] / max(results["naive"]["real_tokens_per_s"], 1e-9)
    print(json.dumps({"bench": "train_ratio", "packed_over_naive_real_tokens_per_s": round(ratio, 2),
                      "packing_efficiency_packed": results["packed"]["packing_efficiency"],
                      "packing_efficiency_naive": results["naive"]["packing_efficiency"]}))


if __name__ == "__main__":
    main()
