"""The SFT run behind recipes/sft_qwen.py: data, collator, TRL SFTTrainer, throughput, save/resume."""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import SFTConfig, SFTTrainer

from gbtrain.config import identity_differences, require_model, to_yaml
from gbtrain.coords import PixelBudget
from gbtrain.data.sft_dataset import (
    LengthCounter,
    dataset_coords,
    dataset_l2_margin,
    dataset_pixel_budget,
    finished_build,
    load_sft_dataset,
)
from gbtrain.files import write_atomic
from gbtrain.outputs import TRAINING_RECORD, overlapping
from gbtrain.progress import Eta
from gbtrain.train.checkpoints import (
    CheckpointRecord,
    mark_complete,
    resume_point,
    saving,
    write_checkpoint_record,
)
from gbtrain.train.collator import GradingCollator, RopeIndex, packed_dataset, plan_packs, pop_real_tokens
from gbtrain.train.config import TrainConfig
from gbtrain.train.modeling import (
    check_options,
    llm_parameter_count,
    load_processor,
    parameter_groups,
    setup_model,
    train_dtype,
)
from gbtrain.train.vision_cache import install_vision_cache


def resolve_budget(cfg: TrainConfig) -> PixelBudget:
    """The dataset's pixel budget (its target boxes depend on it); a different configured one is an error."""
    finished_build(cfg.dataset)
    built = dataset_pixel_budget(cfg.dataset)
    if cfg.vision is None:
        return built
    wanted = cfg.vision
    if built != wanted:
        raise ValueError(f"vision {wanted} differs from the dataset's {built} ({cfg.dataset}/build_config.yaml): "
                         f"its boxes were computed for that budget; rebuild the data or drop the vision override")
    return wanted


def filter_by_length(ds, counter: LengthCounter, max_length: int, name: str):
    """Drop samples longer than max_length (counted, never truncated); add exact `num_tokens`."""
    lengths = counter.count(ds["messages"], list(zip(ds["image_width"], ds["image_height"], strict=True)))
    ds = ds.remove_columns("num_tokens").add_column("num_tokens", lengths)
    keep = [i for i, n in enumerate(lengths) if n <= max_length]
    dropped = len(lengths) - len(keep)
    if not keep:
        raise ValueError(f"every {name} sample is longer than max_length={max_length} (shortest {min(lengths)})")
    return ds.select(keep), dropped


class ThroughputMeter:
    """Real (non-padding) tokens per second and MFU between two log calls."""

    def __init__(self, flops_per_token: float, peak_flops: float):
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.tokens = 0
        self.since = time.perf_counter()

    def add(self, n: int) -> None:
        self.tokens += n

    def read(self, world_tokens: int, world_size: int) -> dict[str, float]:
        now = time.perf_counter()
        elapsed = max(now - self.since, 1e-9)
        out = {"real_tokens_per_s": round(world_tokens / elapsed, 1)}
        if self.peak_flops > 0:
            out["mfu"] = round(world_tokens / elapsed * self.flops_per_token / (self.peak_flops * world_size), 5)
        self.tokens, self.since = 0, now
        return out


class ProgressLines(TrainerCallback):
    """A console line per logging step on the main process: the step, the losses, real tokens/s and the time left
    (`[train] step 300/1000 (30%) loss 0.5812 eval_loss 0.6010 4,816 tok/s · 5m10s left`); the trainer's own
    dicts and bars stay in the logs."""

    def __init__(self):
        self.eta: Eta | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.eta = Eta(state.max_steps, start=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.eta is None or not logs:
            return
        shown = [f"{key} {logs[key]:.4f}" for key in ("loss", "eval_loss") if isinstance(logs.get(key), int | float)]
        if isinstance(logs.get("real_tokens_per_s"), int | float):
            shown.append(f"{logs['real_tokens_per_s']:,.0f} tok/s")
        if shown:
            print(f"[train] {self.eta.line(state.global_step, ' '.join(shown))}", flush=True)


class GradingSFTTrainer(SFTTrainer):
    """SFTTrainer with per-part learning rates and real-token throughput / MFU in the logs."""

    def __init__(self, *args, gb_config: TrainConfig, meter: ThroughputMeter, eval_collator=None,
                 checkpoint_record: CheckpointRecord | None = None, run_id: str | None = None, **kwargs):
        self.gb_config = gb_config
        self.checkpoint_record = checkpoint_record
        self.run_id = run_id
        self.meter = meter
        self.eval_collator = eval_collator
        self.real_tokens_seen = 0
        super().__init__(*args, **kwargs)

    def get_eval_dataloader(self, eval_dataset=None):
        """Packed eval rows index the validation split, so they need their own collator."""
        if self.eval_collator is None:
            return super().get_eval_dataloader(eval_dataset)
        train_collator, self.data_collator = self.data_collator, self.eval_collator
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.data_collator = train_collator

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            groups = parameter_groups(self.model, self.gb_config)
            optim_cls, optim_kwargs = self.get_optimizer_cls_and_kwargs(self.args, self.model)
            optim_kwargs.pop("lr", None)
            self.optimizer = optim_cls([{k: v for k, v in g.items() if k not in ("names", "part")} for g in groups],
                                       **optim_kwargs)
        return self.optimizer

    def _save_checkpoint(self, model, trial):
        """Every checkpoint-N carries the coords, budget and L2 margin it was trained with, so the evaluator (or a
        checkpoint selection) reads them from the checkpoint itself, as it does from the final model; it is marked
        complete once every rank has saved, and only then are older checkpoints rotated out (a save cut short must
        not leave the run without a complete checkpoint)."""
        from transformers.trainer_utils import rotate_checkpoints

        run_dir = self._get_output_dir(trial=trial)
        folder = Path(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        try:
            with saving(folder, run_dir, self.run_id, partial_removed=self.is_world_process_zero()):
                super()._save_checkpoint(model, trial)
                if self.checkpoint_record is not None and self.is_world_process_zero():
                    write_checkpoint_record(folder, self.checkpoint_record)
        finally:
            self.args.save_total_limit = limit
        self.accelerator.wait_for_everyone()
        if self.is_world_process_zero():
            mark_complete(folder, self.run_id, self.state.global_step)
        if self.args.should_save:
            rotate_checkpoints(output_dir=run_dir, save_total_limit=limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        real = pop_real_tokens(inputs)
        if model.training:
            self.meter.add(real)
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training and "loss" in logs:
            tokens = int(self.accelerator.gather(torch.tensor([self.meter.tokens], device=self.args.device)).sum())
            logs.update(self.meter.read(tokens, self.accelerator.num_processes))
            # TRL counts a padding-free batch as position_ids.size(1) tokens, which is 1 for the [4, 1, L]
            # M-RoPE ids of a pack; report the real tokens seen instead.
            self.real_tokens_seen += tokens
            self._metrics["train"]["num_tokens"] = [self.real_tokens_seen]
        super().log(logs, start_time)


def build_datasets(cfg: TrainConfig, processor, budget: PixelBudget) -> tuple[dict, dict]:
    """{"train", "eval"} datasets (packed views when packing) and {"train", "eval"} row sources, plus stats."""
    dd = load_sft_dataset(cfg.dataset)
    train, evald = dd["train"], dd["validation"] if len(dd["validation"]) else None
    if cfg.limit_train_samples:
        train = train.select(range(min(cfg.limit_train_samples, len(train))))
    if evald is not None and cfg.limit_eval_samples:
        evald = evald.select(range(min(cfg.limit_eval_samples, len(evald))))
    counter = LengthCounter(processor.tokenizer, budget)
    train, dropped_train = filter_by_length(train, counter, cfg.max_length, "train")
    stats = {"train_samples": len(train), "dropped_over_max_length_train": dropped_train}
    if evald is not None:
        evald, dropped_eval = filter_by_length(evald, counter, cfg.max_length, "validation")
        stats |= {"eval_samples": len(evald), "dropped_over_max_length_eval": dropped_eval}
    sources = {"train": train, "eval": evald}
    if cfg.packing:
        budget_tokens = max(cfg.pack_tokens, cfg.max_length)
        train_packs = plan_packs(train["num_tokens"], budget_tokens, cfg.seed)
        real = sum(train["num_tokens"])
        stats |= {"train_packs": len(train_packs), "packing_efficiency": round(
            real / (len(train_packs) * budget_tokens), 4)}
        train = packed_dataset(train, train_packs)
        if evald is not None:
            evald = packed_dataset(evald, plan_packs(evald["num_tokens"], budget_tokens, cfg.seed))
    return {"train": train, "eval": evald}, sources, stats


def skip_cpu_inference_op() -> None:
    """On CPU, DeepSpeed's communication backend compiles its shared-memory all-reduce op when it starts (57-135 s
    of one core, measured on two machines; a killed compile leaves a lock that hangs later runs). Only
    tensor-parallel inference calls that op, never training, so a CPU DeepSpeed run marks it unbuildable first."""
    if torch.cuda.is_available() or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() != "true":
        return
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        deepspeed.ops.__compatible_ops__[builder.NAME] = False


def sft_config(cfg: TrainConfig, has_eval: bool) -> SFTConfig:
    bf16 = train_dtype(cfg) == torch.bfloat16
    return SFTConfig(
        output_dir=cfg.output_dir, per_device_train_batch_size=cfg.per_device_batch_size,
        per_device_eval_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_train_epochs=cfg.num_train_epochs, max_steps=cfg.max_steps, learning_rate=cfg.lr.llm,
        warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay, lr_scheduler_type=cfg.lr_scheduler,
        max_grad_norm=cfg.max_grad_norm, gradient_checkpointing=cfg.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False, "every_n_layers": cfg.checkpoint_every_n_layers},
        bf16=bf16, use_cpu=not torch.cuda.is_available(),
        eval_strategy="steps" if has_eval else "no", eval_steps=cfg.eval_steps, save_strategy="steps",
        save_steps=cfg.save_steps, save_total_limit=cfg.save_total_limit, logging_steps=cfg.logging_steps,
        report_to=list(cfg.report_to), seed=cfg.seed, full_determinism=cfg.deterministic,
        dataloader_num_workers=cfg.dataloader_num_workers,
        remove_unused_columns=False, max_length=None, dataset_kwargs={"skip_prepare_dataset": True},
        use_liger_kernel=cfg.liger, train_sampling_strategy="random" if cfg.packing else "group_by_length",
        length_column_name="num_tokens",
    )


# Keys a continued run may change: where and how long it runs, and what it logs. Everything else makes
# the weights, so a run with other values must not continue (or overwrite) this folder's checkpoints.
_NOT_IDENTITY = {"output_dir", "resume", "num_train_epochs", "max_steps", "eval_steps", "save_steps",
                 "save_total_limit", "logging_steps", "report_to", "dataloader_num_workers", "peak_tflops",
                 "limit_eval_samples", "attn_implementation", "gradient_checkpointing", "liger", "vision_cache_mib"}


def run_identity(cfg: TrainConfig) -> dict:
    """What makes this run's weights: its config (less _NOT_IDENTITY), the model and dataset folders resolved,
    and a hash of the dataset's build record."""
    from dataclasses import asdict

    identity = {k: v for k, v in asdict(cfg).items() if k not in _NOT_IDENTITY}
    for key in ("model", "dataset"):
        if Path(identity[key]).is_dir():
            identity[key] = str(Path(identity[key]).resolve())
    built = Path(cfg.dataset) / "build_config.yaml"
    identity["dataset_build_sha256"] = (hashlib.sha256(built.read_bytes()).hexdigest()[:16] if built.is_file()
                                        else None)
    return identity


def _recorded_run(record: Path) -> dict:
    """The identity an output_dir's record holds; unreadable, it cannot vouch for the checkpoints beside it."""
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{record} cannot be read ({e}): choose another output_dir") from None
    if not isinstance(recorded, dict):
        raise ValueError(f"{record} is not a gbtrain run record: choose another output_dir")
    return recorded


def claim_output_dir(cfg: TrainConfig, write: bool) -> str | None:
    """Refuse an output_dir that holds another run's work (its checkpoints would be continued, mixed or deleted
    by save_total_limit), or this run's finished or saved work without --resume; record this run's identity and
    return its id (kept when the run continues; it names the run in each checkpoint's completion marker).
    A record without work (a run that stopped before its first save) is replaced: nothing of it can be mixed."""
    out = Path(cfg.output_dir)
    problems = overlapping("output_dir", out, {"model": cfg.model, "dataset": cfg.dataset})
    if problems:  # the trainer saves weights and config.json into output_dir
        raise ValueError(f"{'; '.join(problems)}: choose another output_dir")
    record = out / TRAINING_RECORD
    identity = run_identity(cfg)
    work = sorted(p.name for p in out.glob("checkpoint-*")) + (["train_summary.json"] if
                                                               (out / "train_summary.json").exists() else [])
    run_id = None
    if record.is_file() and work:
        recorded = _recorded_run(record)
        differs = identity_differences(recorded, identity)
        if differs:
            raise ValueError(f"output_dir {out} holds a run made otherwise ({'; '.join(differs[:6])}): choose "
                             f"another output_dir")
        if not cfg.resume:
            raise ValueError(f"output_dir {out} holds this run's work ({', '.join(work[:5])}): pass --resume to "
                             f"continue it, or choose another output_dir")
        run_id = recorded.get("run_id")
    elif work:
        raise ValueError(f"output_dir {out} holds work that gbtrain did not record ({', '.join(work[:5])}): "
                         f"choose another output_dir")
    if write:
        run_id = run_id or uuid.uuid4().hex
        text = json.dumps({**identity, "run_id": run_id}, indent=1) + "\n"
        if not record.is_file() or record.read_text(encoding="utf-8") != text:  # a continued run's is kept as it is
            out.mkdir(parents=True, exist_ok=True)
            write_atomic(record, text)
    return run_id


def resume_checkpoint(cfg: TrainConfig, run_id: str | None) -> str | None:
    """The checkpoint --resume continues from (None: from the start), checked before any model loads."""
    if not cfg.resume:
        return None
    folder, notes = resume_point(cfg.output_dir, run_id)
    for note in notes:
        print(f"[gbtrain] {note}", flush=True)
    return str(folder) if folder else None


def train(cfg: TrainConfig) -> dict:
    """Run the recipe; returns a summary (also written to OUTPUT_DIR/train_summary.json on the main process)."""
    check_options(cfg)
    require_model(cfg.model)
    budget = resolve_budget(cfg)
    cfg.vision = budget
    run_id = claim_output_dir(cfg, write=int(os.environ.get("RANK", "0")) == 0)  # every rank checks, the first records
    resume = resume_checkpoint(cfg, run_id)
    processor = load_processor(cfg.model, budget)
    datasets, sources, stats = build_datasets(cfg, processor, budget)
    train_ds, eval_ds = datasets["train"], datasets["eval"]
    skip_cpu_inference_op()  # before the training arguments start DeepSpeed's communication backend
    # The training arguments come first: under an accelerate DeepSpeed launch they put the ZeRO config in
    # force, so that a `zero3_init_flag: true` model is partitioned while it loads instead of whole per rank.
    args = sft_config(cfg, eval_ds is not None)
    model = setup_model(cfg, fp32_trainable=args.deepspeed_plugin is None)
    stats["zero3_partitioned_at_load"] = any(hasattr(p, "ds_id") for p in model.parameters())
    vision_cache = install_vision_cache(model, cfg.vision_cache_mib) if cfg.vision_cache_mib else None
    rope = RopeIndex(model.config if not hasattr(model, "peft_config") else model.base_model.model.config)
    collators = {split: GradingCollator(processor, cfg.max_length, packing=cfg.packing,
                                        rope_index=rope if cfg.packing else None, source=sources[split],
                                        seq_lens=cfg.attn_implementation == "flash_attention_2",
                                        pad_to_multiple_of=(cfg.pack_length_multiple or None) if cfg.packing else None)
                 for split in ("train", "eval")}
    coords = dataset_coords(cfg.dataset)  # the evaluator reads it, so a model trained otherwise is not misread
    record = CheckpointRecord(coords, budget, dataset_l2_margin(cfg.dataset), str(Path(cfg.dataset).resolve())) \
        if coords else None
    n_llm = llm_parameter_count(model)
    meter = ThroughputMeter((6 if cfg.finetune == "full" else 4) * n_llm,
                            cfg.peak_tflops * 1e12 if torch.cuda.is_available() else 0.0)
    trainer = GradingSFTTrainer(model=model, args=args, train_dataset=train_ds,
                                eval_dataset=eval_ds, data_collator=collators["train"], processing_class=processor,
                                gb_config=cfg, meter=meter, eval_collator=collators["eval"],
                                checkpoint_record=record, run_id=run_id, callbacks=[ProgressLines()])
    result = trainer.train(resume_from_checkpoint=resume)
    with saving(cfg.output_dir, cfg.output_dir, run_id, partial_removed=False):
        trainer.save_model(cfg.output_dir)
    summary = {**stats, "resumed_from": resume, "global_step": result.global_step,
               "training_loss": result.training_loss, "llm_parameters": n_llm,
               **(vision_cache.summary() if vision_cache else {})}
    if eval_ds is not None:
        summary["eval_loss"] = trainer.evaluate().get("eval_loss")
    if trainer.is_world_process_zero():
        processor.save_pretrained(cfg.output_dir)
        if record:
            write_checkpoint_record(cfg.output_dir, record)
        Path(cfg.output_dir, "gbtrain_train_config.yaml").write_text(to_yaml(cfg), encoding="utf-8")
        Path(cfg.output_dir, "train_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    # The process group goes now, not at interpreter exit, where a rank of a two-process ZeRO-3 run on CPU was seen
    # to abort ("terminate called without an active exception") after everything was saved.
    trainer.accelerator.end_training()
    return summary
