"""The training config (recipes/sft_qwen.py --config configs/sft/*.yaml): model, LoRA, what is frozen, learning
rates, and every lever of the run (packing, attention, checkpointing, kernels, the feature cache)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gbtrain.config import option
from gbtrain.coords import PixelBudget


@dataclass
class LoraSettings:
    r: int = option(64, "adapter rank", bounds=(1, 4096))
    alpha: int = option(128, "adapter scale numerator (scale = alpha / r)", bounds=(1, 65_536))
    dropout: float = option(0.05, "dropout on the adapters' input")
    target_modules: str = option(r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
                                 "regex on module paths: the LLM's linears only (the vision blocks have gate/up/down "
                                 "projections too)")


@dataclass
class FreezeSettings:
    """Which parts do not train (full fine-tuning; with LoRA the base weights are frozen anyway)."""

    vision_tower: bool = option(True, "the vision tower does not train (false needs finetune=full)")
    merger: bool = option(False, "the vision-language merger does not train (with LoRA it trains fully unless "
                                 "frozen)")
    llm: bool = option(False, "full fine-tuning only: the language model does not train (LoRA configs leave it "
                                "out)")


@dataclass
class LearningRates:
    """One optimizer group per part (no weight decay on biases and norms)."""

    llm: float = option(1e-4, "learning rate of the language model (its adapters with LoRA)")
    merger: float = option(1e-5, "learning rate of the merger")
    vision_tower: float = option(2e-6, "learning rate of the vision tower")


@dataclass
class TrainConfig:
    """recipes/sft_qwen.py: TRL + PEFT SFT of a Qwen2.5-VL-class model on the builder's output."""

    model: str = option("???", "hub id or folder (with model_init=random only its config is read)")
    model_init: str = option("pretrained", "pretrained, or random: the architecture from the model's config with "
                                           "random weights (benchmarks, no download)")
    dataset: str = option("???", "data_builders/build_sft.py output folder")
    output_dir: str = option("???", "where checkpoints and the result go")
    finetune: str = option("lora", "lora, full, or qlora (4-bit NF4: GPU + bitsandbytes)")
    lora: LoraSettings = field(default_factory=LoraSettings)
    freeze: FreezeSettings = field(default_factory=FreezeSettings)
    lr: LearningRates = field(default_factory=LearningRates)
    vision: PixelBudget | None = option(None, "pixel budget (null: the dataset's); must equal the one the dataset's "
                                              "boxes were built with (checked)")
    max_length: int = option(8192, "longer samples are rejected before training, counted in train_summary.json, "
                                   "never truncated", bounds=(1, 2**20))
    packing: bool = option(True, "padding-free packing into rows of pack_tokens; false: padded batches, "
                                 "length-grouped sampling")
    pack_tokens: int = option(16384, "tokens per packed row", bounds=(1, 2**20))
    pack_length_multiple: int = option(0, "pad each packed row up to a multiple of this many tokens (a padding "
                                          "sample of its own, without loss), so compiled kernels (flex attention) "
                                          "see few shapes: pack_tokens gives one; 0: each row as long as its samples",
                                          bounds=(0, 65_536))
    per_device_batch_size: int = option(1, "packed rows (packing) or samples (no packing) per device step",
                                        bounds=(1, 4096))
    gradient_accumulation_steps: int = option(8, "device steps per optimizer step", bounds=(1, 65_536))
    num_train_epochs: float = option(1.0, "passes over the training split")
    max_steps: int = option(-1, "optimizer steps (-1: as num_train_epochs gives)", bounds=(-1, 10**9))
    warmup_ratio: float = option(0.03, "share of the total steps spent warming up")
    weight_decay: float = option(0.0, "AdamW weight decay (never on biases and norms)")
    lr_scheduler: str = option("cosine", "transformers scheduler name")
    max_grad_norm: float = option(1.0, "gradient clipping")
    gradient_checkpointing: bool = option(True, "non-reentrant activation checkpointing of the language model")
    checkpoint_every_n_layers: int = option(1, "with gradient_checkpointing: checkpoint every n-th decoder layer "
                                               "only (more memory, less recompute); 1: every layer", bounds=(1, 1024))
    vision_cache_mib: int = option(0, "with the vision tower and merger frozen: keep each image's vision features "
                                      "(host memory, up to this many MiB) and encode an image once, not once per "
                                      "epoch; 0 disables; not under ZeRO-3", bounds=(0, 2**20))
    attn_implementation: str = option("sdpa", "sdpa or eager; on a GPU flex_attention (packed rows skip the blocks "
                                              "between samples; no extra package) or flash_attention_2 (varlen, "
                                              "flash-attn installed; docs/benchmarks.md)")
    precision: str = option("auto", "auto (bf16 on GPU, fp32 on CPU), bf16 (refused on a CPU machine) or fp32")
    liger: bool = option(False, "Liger kernels (GPU + liger-kernel): fused RMSNorm, SwiGLU, mRoPE and a linear "
                                "cross-entropy that never holds the logits")
    eval_steps: int = option(200, "eval loss on the validation split every this many steps", bounds=(1, 10**9))
    save_steps: int = option(200, "checkpoint every this many steps", bounds=(1, 10**9))
    save_total_limit: int = option(3, "checkpoints kept", bounds=(1, 10**5))
    logging_steps: int = option(10, "log loss, learning rate, real tokens/s and MFU every this many steps",
                                bounds=(1, 10**9))
    report_to: list[str] = option(["tensorboard"], "loggers ([wandb] for W&B)")
    seed: int = option(42, "seed of the model's new weights, the data order and packing", bounds=(0, 2**32 - 1))
    deterministic: bool = option(False, "torch's deterministic kernels (transformers' full_determinism: "
                                        "use_deterministic_algorithms, cuDNN and cuBLAS settings): the same run gives "
                                        "the same weights on the same machine and software, more slowly on a GPU")
    resume: bool = option(False, "continue from the last checkpoint in output_dir")
    dataloader_num_workers: int = option(2, "data loading processes", bounds=(0, 256))
    peak_tflops: float = option(989.0, "per-device dense bf16 peak for the MFU column (H100/H200 SXM); 0 disables "
                                       "MFU")
    limit_train_samples: int | None = option(None, "train on the first N samples only (smoke runs)", bounds=(1, 10**9))
    limit_eval_samples: int | None = option(None, "evaluate on the first N samples only (smoke runs)",
                                            bounds=(1, 10**9))
