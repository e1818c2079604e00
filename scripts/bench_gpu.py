"""Training throughput of the real-size architecture on one GPU, lever by lever, as the recipe runs them.

    PYTHONPATH=. python scripts/bench_gpu.py --model-config configs/bench/qwen25vl_7b \
        --lengths configs/bench/mixed_l1_l3_lengths.json | tee bench_gpu.jsonl

A mode names the recipe's levers (`--modes`, e.g. `naive-sdpa-gc`, `packed-8k-flex-liger`): padded batches or
packed rows (every row padded to its pack length, `pack_length_multiple`, so compiled kernels see one shape),
sdpa / flex attention / flash-attn varlen, checkpointing of every (or every n-th) layer, Liger kernels (through
transformers' own integration, as `liger: true` makes the Trainer apply them), the frozen-vision feature cache.
It needs only torch, transformers, peft and gbtrain (plus omegaconf, and liger-kernel for its modes): no trl,
datasets, deepspeed or vllm, so it runs on a bare GPU machine. The model is built from config.json alone with
random bf16 weights (`model_init=random`), set up by the recipe's own `setup_model` (LoRA r=64 on the LLM linears,
vision frozen, merger trained) plus what TRL and the Trainer add. Samples are synthetic token rows with the lengths
and image grids recorded from a built SFT set (one L3 page, three L1 crops, repeated), batched by the collator's
own code. Each mode runs in a child process (its own peak memory; `--timeout` stops it) and prints one JSON line:
real (non-padding) tokens/s, packing efficiency, peak memory, MFU (4N FLOPs per real token for LoRA, 6N for full;
N = LLM parameters), build and warm-up (compile) seconds, and with `--profile` one profiled step. A last line gives
each mode's ratio to the first. scripts/device_harness.py runs it as one part of the device check.

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

# A mode is a dash-joined list of the recipe's levers, e.g. packed-8k-flex-liger or naive-sdpa-gc:
ATTENTION = {"sdpa": "sdpa", "flex": "flex_attention", "fa2": "flash_attention_2"}
LAYOUTS = ("naive", "packed")
DEFAULT_MODES = ("naive-sdpa-gc,packed-16k-sdpa-gc,packed-8k-flex-liger,packed-8k-sdpa-liger,packed-8k-flex-liger-gc2,"
                 "packed-16k-flex-liger-gc")
MODE_HELP = ("naive|packed (padded batches or packed rows), sdpa|flex|fa2, optional 8k/16k (tokens per packed row), "
             "gc or gcN (checkpoint every (N-th) layer; absent: none), liger, cache (frozen merger, feature cache)")


def mode_settings(mode: str, pack_tokens: int) -> dict:
    """The TrainConfig values a mode name stands for (packed rows padded to one fixed length: one compiled shape)."""
    settings = {"gradient_checkpointing": False, "liger": False, "pack_tokens": pack_tokens}
    for token in mode.split("-"):
        if token in LAYOUTS:
            settings["packing"] = token == "packed"
        elif token in ATTENTION:
            settings["attn_implementation"] = ATTENTION[token]
        elif token.endswith("k") and token[:-1].isdigit() and int(token[:-1]) > 0:
            settings["pack_tokens"] = int(token[:-1]) * 1024
        elif token == "gc" or (token.startswith("gc") and token[2:].isdigit() and int(token[2:]) > 0):
            settings["gradient_checkpointing"] = True
            settings["checkpoint_every_n_layers"] = int(token[2:] or 1)
        elif token == "liger":
            settings["liger"] = True
        elif token == "cache":
            settings["vision_cache_mib"] = 8192
        else:
            raise ValueError(f"mode {mode!r}: unknown part {token!r} ({MODE_HELP})")
    if "packing" not in settings or "attn_implementation" not in settings:
        raise ValueError(f"mode {mode!r} names no layout or no attention ({MODE_HELP})")
    settings["max_length"] = settings["pack_tokens"]
    settings["pack_length_multiple"] = settings["pack_tokens"] if settings["packing"] else 0
    return settings


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


def synthetic_rows(model, lengths: list[dict], device: str) -> list[tuple]:
    """One (EncodedSample, mRoPE ids) per recorded sample: prompt text, the image block, answer tokens (labelled),
    with the model's own mRoPE positions and random pixels of the recorded grid."""
    import torch

    from gbtrain.train.collator import EncodedSample

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
        patches = torch.randn(t * h * w, cfg.vision_config.in_channels * cfg.vision_config.temporal_patch_size
                              * cfg.vision_config.patch_size ** 2)
        rows.append((EncodedSample(ids, labels, mm, patches, grid), pos[:, 0].cpu()))
    return rows


def batches_for(settings: dict, rows: list[tuple], pad_id: int, naive_batch: int) -> list[dict]:
    """The mode's batches, made by the collator's own code: packed rows (planned as the trainer plans them) or
    padded batches of `naive_batch` samples."""
    from gbtrain.train.collator import pack_samples, pad_samples, plan_packs

    samples = [s for s, _ in rows]
    if settings["packing"]:
        packs = plan_packs([len(s) for s in samples], settings["pack_tokens"])
        return [pack_samples([samples[i] for i in p], [rows[i][1] for i in p], pad_id,
                             settings["pack_length_multiple"],
                             seq_lens=settings["attn_implementation"] == "flash_attention_2") for p in packs]
    return [pad_samples(samples[i:i + naive_batch], pad_id) for i in range(0, len(samples), naive_batch)]


def prepared_model(cfg, device: str):
    """The model as the recipe's trainer runs it: setup_model, then what TRL's SFTTrainer and transformers' Trainer
    add (TRL's fused LM head, which scores the labelled positions in tiles without the row's full logits;
    checkpointing with its every-n-layers choice and the input-embedding hooks TRL adds for PEFT; Liger's layer
    kernels as TRL configures them; the feature cache). Without TRL installed (a bare GPU machine may lack its
    datasets/pyarrow) the loss comes from the model's full logits, or Liger's fused linear cross-entropy with Liger,
    and `loss_path` says so."""
    import torch

    from gbtrain.train.modeling import setup_model
    from gbtrain.train.vision_cache import install_vision_cache

    torch.manual_seed(0)
    with torch.device(device):
        model = setup_model(cfg)
    model.train()
    try:
        from trl.trainer.utils import add_fused_lm_head
    except ImportError:
        add_fused_lm_head = None
    if add_fused_lm_head is not None:
        add_fused_lm_head(model.get_base_model() if hasattr(model, "peft_config") else model,
                          outputs=("log_probs", "entropy", "is_top1"))
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False},
                                            every_n_layers=cfg.checkpoint_every_n_layers)
        if hasattr(model, "peft_config"):
            model.enable_input_require_grads()
    if cfg.liger:
        from transformers.integrations.liger import apply_liger_kernel

        apply_liger_kernel(model, {"fused_linear_cross_entropy": False} if add_fused_lm_head else None)
    cache = install_vision_cache(model, cfg.vision_cache_mib) if cfg.vision_cache_mib else None
    loss_path = ("trl fused lm head" if add_fused_lm_head else
                 "liger fused linear cross-entropy (trl absent)" if cfg.liger else "full logits (trl absent)")
    return model, cache, loss_path


def train_config(args, mode: str):
    from gbtrain.train.config import FreezeSettings, LoraSettings, TrainConfig

    settings = mode_settings(mode, args.pack_tokens)
    freeze = FreezeSettings(vision_tower=True, merger="vision_cache_mib" in settings)
    lora = LoraSettings(r=args.lora_r, alpha=2 * args.lora_r, dropout=0.0)
    return TrainConfig(model=args.model_config, dataset="-", output_dir="-", model_init="random",
                       finetune=args.finetune, lora=lora, freeze=freeze, **settings), settings


def step(model, batch: dict, device: str, bf16: bool, optimizer, fused: bool) -> tuple[float, int, int]:
    """One optimizer step on one batch; returns the loss and the batch's real and computed tokens."""
    import torch

    from gbtrain.train.collator import pop_real_tokens

    batch = dict(batch)
    real = pop_real_tokens(batch)
    batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):  # as the trainer's bf16=True does
        if fused:  # TRL's SFTTrainer.compute_loss
            out = model(**batch, use_cache=False, fused_lm_head=True)
            loss = -out.log_probs.sum() / out.label_mask.sum().clamp(min=1)
        else:
            loss = model(**batch, use_cache=False).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, real, batch["input_ids"].numel()


def profile_step(run_one, device: str, top: int) -> dict:
    """One step under torch.profiler: operator calls, and the top operators by self CPU time and by self device
    time (CUDA kernels on a GPU); where the step's time goes, Python and dispatch overhead included."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        run_one()
        if device == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - start
    events = prof.key_averages()

    def row(e) -> dict:
        return {"name": e.key[:120], "calls": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 2),
                "self_device_ms": round(getattr(e, "self_device_time_total", 0) / 1e3, 2)}

    cpu_ops = [e for e in events if e.key.startswith("aten::")]
    return {"wall_s": round(wall, 3), "aten_calls": sum(e.count for e in cpu_ops),
            "self_cpu_s": round(sum(e.self_cpu_time_total for e in events) / 1e6, 3),
            "self_device_s": round(sum(getattr(e, "self_device_time_total", 0) for e in events) / 1e6, 3),
            "top_cpu": [row(e) for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]],
            "top_device": [row(e) for e in sorted(events, key=lambda e: -getattr(e, "self_device_time_total", 0))
                           [:top]] if device == "cuda" else []}


def run_mode(args) -> dict:
    import torch

    from gbtrain.train.modeling import check_options, llm_parameter_count, parameter_groups, train_dtype

    cfg, settings = train_config(args, args.mode)
    check_options(cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    built = time.perf_counter()
    model, cache, loss_path = prepared_model(cfg, device)
    fused = loss_path == "trl fused lm head"
    base = model.base_model.model if hasattr(model, "peft_config") else model
    with open(args.lengths, encoding="utf-8") as f:
        lengths = json.load(f)["samples"]
    batches = batches_for(settings, synthetic_rows(base, lengths, device),
                          base.config.get_text_config().pad_token_id or 0, args.naive_batch)
    optimizer = torch.optim.AdamW([{k: v for k, v in g.items() if k not in ("names", "part")}
                                   for g in parameter_groups(model, cfg)])
    bf16 = train_dtype(cfg) == torch.bfloat16
    build_s = time.perf_counter() - built
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    real = computed = steps = 0
    start = warm = None
    first = time.perf_counter()
    for n in range(10**6):
        if n == args.warmup_steps:
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            warm = start - first  # the first steps' compile (flex attention, Liger's Triton kernels) included
        elif start is not None and (time.perf_counter() - start > args.seconds or steps >= args.max_steps):
            break
        loss, r, c = step(model, batches[n % len(batches)], device, bf16, optimizer, fused)
        if start is not None:
            real, computed, steps = real + r, computed + c, steps + 1
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated() if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    flops_per_token = (6 if cfg.finetune == "full" else 4) * llm_parameter_count(model)
    tokens_per_s = real / elapsed
    mfu = tokens_per_s * flops_per_token / (args.peak_tflops * 1e12) if device == "cuda" else None
    result = {"mode": args.mode, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "settings": settings, "loss_path": loss_path, "steps_timed": steps, "build_s": round(build_s, 1),
              "warmup_s": round(warm, 1), "step_s": round(elapsed / max(steps, 1), 3),
              "real_tokens_per_s": round(tokens_per_s, 1), "packing_efficiency": round(real / computed, 4),
              "peak_memory_gib": round(peak / 2**30, 2), "mfu": round(mfu, 4) if mfu is not None else None,
              "peak_memory_kind": "cuda max allocated" if device == "cuda" else "process max RSS",
              "final_loss": round(loss.item(), 4), **(cache.summary() if cache else {})}
    if args.profile:
        result["profile"] = profile_step(lambda: step(model, batches[0], device, bf16, optimizer, fused), device,
                                         args.profile_top)
    return result


@dataclass
class BenchGpu:
    """The benchmark's options; each field is one of its flags (gbtrain.cli)."""

    model_config: str | None = option(None, "folder with the architecture's config.json (weights are random)")
    lengths: str | None = option(None, "recorded sample lengths (JSON from --record-lengths)")
    modes: str = option(DEFAULT_MODES, f"comma-separated modes, each a dash-joined list of: {MODE_HELP}")
    seconds: float = option(45.0, "timed seconds per mode (after the warm-up steps)")
    max_steps: int = option(10**6, "at most this many timed steps per mode")
    warmup_steps: int = option(3, "untimed first steps (flex attention and Liger compile in the first)")
    naive_batch: int = option(4, "samples per padded batch (naive mode)")
    pack_tokens: int = option(16384, "tokens per packed row where a mode names none (every row padded to it)")
    finetune: str = option("lora", "what is trained", choices=("lora", "full"))
    lora_r: int = option(64, "LoRA rank (alpha is twice it)")
    peak_tflops: float = option(989.0, "dense bf16 peak of the GPU, for MFU")
    timeout: float = option(600.0, "seconds each mode's process may take (build, compile and timing) before it is "
                                   "stopped and reported as timed out")
    profile: bool = option(False, "after timing, profile one step of each mode (top operators by self CPU and "
                                  "device time, operator calls)")
    profile_top: int = option(15, "with --profile: operators listed per table")
    record_lengths: str | None = option(None, "a built SFT folder: write the lengths of its samples and stop")
    samples: int = option(64, "with --record-lengths: samples to record")
    out: str | None = option(None, "with --record-lengths: the JSON file to write")
    mode: str | None = option(None, "run this mode only, in this process (what each child runs)")


def as_flag(name: str, value) -> str:
    """An option as the child's command line takes it (a boolean as --name or --no-name)."""
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag}={value}"


def main() -> None:
    args = parse_options(BenchGpu, __doc__)
    with user_errors("bench_gpu"):
        if args.record_lengths and not args.out:
            raise ValueError("--record-lengths needs --out")
        if not args.record_lengths and not (args.model_config and args.lengths):
            raise ValueError("--model-config and --lengths are required")
        modes = [m.strip() for m in (args.mode or args.modes).split(",") if m.strip()]
        for mode in modes:
            mode_settings(mode, args.pack_tokens)
        if args.mode:  # a setting this machine cannot run (flex attention or Liger on a CPU) is one line
            from gbtrain.train.modeling import check_options

            check_options(train_config(args, args.mode)[0])
    if args.record_lengths:
        record_lengths(args.record_lengths, args.samples, args.out)
        return
    if args.mode:
        emit(run_mode(args))
        return
    passed = [as_flag(k, v) for k, v in asdict(args).items()
              if v is not None and k not in ("modes", "mode", "record_lengths", "out", "samples")]
    results = []
    for mode in modes:
        cmd = [sys.executable, __file__, *passed, "--mode", mode]
        try:
            result = run_child(cmd, f"{mode} run", dict(os.environ), timeout=args.timeout)
        except SystemExit as e:  # one failing mode (out of memory, a timeout) does not lose the others' figures
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
