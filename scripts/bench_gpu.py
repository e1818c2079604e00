"""Training throughput of the real-size architecture on one GPU: naive padded batches vs packed rows with
sdpa, flex attention (and flash-attn varlen where installed), with and without gradient checkpointing.

    PYTHONPATH=. python scripts/bench_gpu.py --model-config configs/bench/qwen25vl_7b \
        --lengths configs/bench/mixed_l1_l3_lengths.json | tee bench_gpu.jsonl

It needs only torch, transformers, peft and gbtrain (plus omegaconf, which gbtrain's configs use): no
trl, datasets, deepspeed, vllm or flash-attn, so it runs on a bare GPU machine. The model is built from
config.json alone with random bf16 weights (`model_init=random`), set up by the recipe's own
`setup_model` (LoRA r=64 on the LLM linears, vision frozen, merger trained). Samples are synthetic token
rows with the lengths and image grids recorded from a built SFT set (one L3 page, three L1 crops,
repeated), so no pages travel. Each mode runs in a child process (its own peak memory) and prints one
JSON line: real (non-padding) tokens/s, computed tokens, peak memory, MFU (4N FLOPs per real token for
LoRA, 6N for full; N = LLM parameters). A last line gives each mode's ratio to the first.

Record the lengths of a built set (on a machine with `datasets`):
    python scripts/bench_gpu.py --record-lengths runs/sft --samples 64 --out configs/bench/mixed_l1_l3_lengths.json
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass

from bench_child import emit, run_child

from gbtrain.cli import parse_options, user_errors
from gbtrain.config import option

# mode -> (packed, attention, gradient checkpointing)
MODES = {
    "naive-sdpa-gc": (False, "sdpa", True),
    "packed-sdpa-gc": (True, "sdpa", True),
    "packed-flex-gc": (True, "flex_attention", True),
    "packed-flex": (True, "flex_attention", False),
    "packed-fa2-gc": (True, "flash_attention_2", True),
}
DEFAULT_MODES = "naive-sdpa-gc,packed-sdpa-gc,packed-flex-gc,packed-flex"


def record_lengths(data: str, samples: int, out: str) -> None:
    """Lengths (tokens, image grid, answer tokens) of an interleaved L3/L1 selection of a built set's train split."""
    from transformers import AutoTokenizer

    from gbtrain.data.sft_dataset import dataset_pixel_budget, finished_build, load_sft_dataset
    from gbtrain.vocabulary import L1, L3

    built = finished_build(data)
    train = load_sft_dataset(data, decode_images=False)["train"]
    budget = dataset_pixel_budget(data)
    tokenizer = AutoTokenizer.from_pretrained(str(built.tokenizer))
    levels = train["level"]
    queues = {lvl: [i for i, x in enumerate(levels) if x == lvl] for lvl in (L1, L3)}
    order: list[int] = []
    while len(order) < samples and (queues[L1] or queues[L3]):
        for lvl, k in ((L3, 1), (L1, 3)):
            order += [queues[lvl].pop(0) for _ in range(min(k, len(queues[lvl])))]
    rows = []
    for i in order[:samples]:
        r = train[i]
        w, h = budget.resized(r["image_width"], r["image_height"])
        answer = sum(len(tokenizer(m["content"])["input_ids"]) + 1 for m in r["messages"] if m["role"] == "assistant")
        rows.append({"level": r["level"], "num_tokens": r["num_tokens"], "grid_thw": [1, h // 14, w // 14],
                     "answer_tokens": answer})
    meta = {"source": os.path.abspath(data), "tokenizer": str(built.tokenizer),
            "min_pixels": budget.min_pixels, "max_pixels": budget.max_pixels}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "samples": rows}, f, indent=1)
        f.write("\n")
    print(json.dumps({"recorded": len(rows), "out": out}))


def synthetic_rows(model, lengths: list[dict], device: str):
    """One token row per recorded sample: prompt text, the image block, answer tokens (labelled), with the
    model's own mRoPE positions and random pixels of the recorded grid."""
    import torch

    cfg = model.config
    text = cfg.get_text_config()
    vocab = min(i for i in (text.bos_token_id, text.eos_token_id, cfg.vision_start_token_id, cfg.image_token_id)
                if i is not None)  # ordinary tokens only: the special ones (Qwen's come last) would mean images
    rows = []
    for s in lengths:
        t, h, w = s["grid_thw"]
        n_image = t * h * w // 4
        n_text = s["num_tokens"] - n_image - 2
        answer = min(s["answer_tokens"], n_text - 1)
        prompt = n_text - answer
        ids = torch.cat([torch.randint(0, vocab, (prompt // 2,)), torch.tensor([cfg.vision_start_token_id]),
                         torch.full((n_image,), cfg.image_token_id), torch.tensor([cfg.vision_end_token_id]),
                         torch.randint(0, vocab, (prompt - prompt // 2 + answer,))])
        labels = torch.full_like(ids, -100)
        labels[-answer:] = ids[-answer:]
        mm = (ids == cfg.image_token_id).long()
        grid = torch.tensor([[t, h, w]])
        one = {"input_ids": ids[None], "mm_token_type_ids": mm[None], "image_grid_thw": grid,
               "attention_mask": torch.ones_like(ids)[None]}
        pos, _ = model.model.get_rope_index(**{k: v.to(device) for k, v in one.items()})
        rows.append({"input_ids": ids, "labels": labels, "mm_token_type_ids": mm, "image_grid_thw": grid,
                     "pixel_values": torch.randn(t * h * w, 3 * 2 * 14 * 14), "mrope": pos[:, 0].cpu()})
    return rows


def padded_batch(rows: list[dict], pad_id: int) -> dict:
    import torch

    length = max(len(r["input_ids"]) for r in rows)
    batch = {"input_ids": torch.full((len(rows), length), pad_id), "labels": torch.full((len(rows), length), -100),
             "attention_mask": torch.zeros((len(rows), length), dtype=torch.long),
             "mm_token_type_ids": torch.zeros((len(rows), length), dtype=torch.long)}
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        for key in ("input_ids", "labels", "mm_token_type_ids"):
            batch[key][i, :n] = r[key]
        batch["attention_mask"][i, :n] = 1
    return batch | _vision(rows)


def packed_row(rows: list[dict], seq_lens: bool) -> dict:
    import torch

    from gbtrain.train.attention import SEQ_LENS_KEY

    text = torch.cat([torch.arange(len(r["input_ids"])) for r in rows])
    batch = {key: torch.cat([r[key] for r in rows])[None] for key in ("input_ids", "labels", "mm_token_type_ids")}
    batch["position_ids"] = torch.cat([text[None], torch.cat([r["mrope"] for r in rows], dim=1)])[:, None, :]
    if seq_lens:
        batch[SEQ_LENS_KEY] = [len(r["input_ids"]) for r in rows]
    return batch | _vision(rows)


def _vision(rows: list[dict]) -> dict:
    import torch

    return {"pixel_values": torch.cat([r["pixel_values"] for r in rows]),
            "image_grid_thw": torch.cat([r["image_grid_thw"] for r in rows])}


def run_mode(args) -> dict:
    import torch

    from gbtrain.config import LoraSettings, TrainConfig
    from gbtrain.train.collator import plan_packs
    from gbtrain.train.modeling import check_options, llm_parameter_count, parameter_groups, setup_model, train_dtype

    packed, attn, checkpointing = MODES[args.mode]
    cfg = TrainConfig(model=args.model_config, dataset="-", output_dir="-", model_init="random", finetune=args.finetune,
                      lora=LoraSettings(r=args.lora_r, alpha=2 * args.lora_r, dropout=0.0),
                      attn_implementation=attn, gradient_checkpointing=checkpointing, packing=packed,
                      pack_tokens=args.pack_tokens, max_length=args.pack_tokens)
    check_options(cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = setup_model(cfg)
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    base = model.base_model.model if hasattr(model, "peft_config") else model
    with open(args.lengths, encoding="utf-8") as f:
        lengths = json.load(f)["samples"]
    rows = synthetic_rows(base, lengths, device)
    if packed:
        packs = plan_packs([len(r["input_ids"]) for r in rows], args.pack_tokens)
        batches = [packed_row([rows[i] for i in p], attn == "flash_attention_2") for p in packs]
    else:
        pad_id = base.config.get_text_config().pad_token_id or 0
        batches = [padded_batch(rows[i:i + args.naive_batch], pad_id) for i in range(0, len(rows), args.naive_batch)]
    optimizer = torch.optim.AdamW([{k: v for k, v in g.items() if k not in ("names", "part")}
                                   for g in parameter_groups(model, cfg)])
    bf16 = train_dtype(cfg) == torch.bfloat16
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    real = computed = steps = 0
    start = None
    for step in range(10**6):
        if step == args.warmup_steps:
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        elif start is not None and (time.perf_counter() - start > args.seconds or steps >= args.max_steps):
            break
        batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batches[step % len(batches)].items()}
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):  # as the trainer's bf16=True does
            loss = model(**batch, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if start is not None:
            mask = batch.get("attention_mask")
            real += int(mask.sum()) if mask is not None else batch["input_ids"].numel()
            computed += batch["input_ids"].numel()
            steps += 1
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated() if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    flops_per_token = (6 if cfg.finetune == "full" else 4) * llm_parameter_count(model)
    tokens_per_s = real / elapsed
    mfu = tokens_per_s * flops_per_token / (args.peak_tflops * 1e12) if device == "cuda" else None
    return {"mode": args.mode, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "attention": attn, "packed": packed, "gradient_checkpointing": checkpointing, "steps_timed": steps,
            "real_tokens_per_s": round(tokens_per_s, 1), "packing_efficiency": round(real / computed, 4),
            "peak_memory_gib": round(peak / 2**30, 2), "mfu": round(mfu, 4) if mfu is not None else None,
            "peak_memory_kind": "cuda max allocated" if device == "cuda" else "process max RSS",
            "final_loss": round(loss.item(), 4)}


@dataclass
class BenchGpu:
    """The benchmark's options; each field is one of its flags (gbtrain.cli)."""

    model_config: str | None = option(None, "folder with the architecture's config.json (weights are random)")
    lengths: str | None = option(None, "recorded sample lengths (JSON from --record-lengths)")
    modes: str = option(DEFAULT_MODES, f"comma-separated, from: {', '.join(MODES)}")
    seconds: float = option(45.0, "timed seconds per mode (after the warm-up steps)")
    max_steps: int = option(10**6, "at most this many timed steps per mode")
    warmup_steps: int = option(3, "untimed first steps (flex attention compiles for the first and second shapes)")
    naive_batch: int = option(4, "samples per padded batch (naive mode)")
    pack_tokens: int = option(16384, "tokens per packed row")
    finetune: str = option("lora", "what is trained", choices=("lora", "full"))
    lora_r: int = option(64, "LoRA rank (alpha is twice it)")
    peak_tflops: float = option(989.0, "dense bf16 peak of the GPU, for MFU")
    record_lengths: str | None = option(None, "a built SFT folder: write the lengths of its samples and stop")
    samples: int = option(64, "with --record-lengths: samples to record")
    out: str | None = option(None, "with --record-lengths: the JSON file to write")
    mode: str | None = option(None, "run this mode only, in this process (what each child runs)",
                              choices=tuple(MODES))


def main() -> None:
    args = parse_options(BenchGpu, __doc__)
    with user_errors("bench_gpu"):
        if args.record_lengths and not args.out:
            raise ValueError("--record-lengths needs --out")
        if not args.record_lengths and not (args.model_config and args.lengths):
            raise ValueError("--model-config and --lengths are required")
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        unknown = [m for m in modes if m not in MODES]
        if unknown:
            raise ValueError(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    if args.record_lengths:
        record_lengths(args.record_lengths, args.samples, args.out)
        return
    if args.mode:
        emit(run_mode(args))
        return
    passed = [f"--{k.replace('_', '-')}={v}" for k, v in asdict(args).items()
              if v is not None and k not in ("modes", "mode", "record_lengths", "out", "samples")]
    results = []
    for mode in modes:
        cmd = [sys.executable, __file__, *passed, "--mode", mode]
        try:
            result = run_child(cmd, f"{mode} run", dict(os.environ))
        except SystemExit as e:  # one failing mode (e.g. out of memory) does not lose the others' figures
            lines = [ln for ln in str(e.code).splitlines() if ln.strip()]
            result = {"mode": mode, "error": " ".join(lines[-2:])[-400:]}
        print(json.dumps({"bench": "gpu_train", **result}), flush=True)
        results.append(result)
    measured = [r for r in results if "real_tokens_per_s" in r]
    if measured:
        base = measured[0]
        print(json.dumps({"bench": "gpu_train_ratio", "baseline": base["mode"], "real_tokens_per_s_over_baseline": {
            r["mode"]: round(r["real_tokens_per_s"] / base["real_tokens_per_s"], 2) for r in measured}}), flush=True)


if __name__ == "__main__":
    main()
