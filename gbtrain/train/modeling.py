"""Model setup for SFT: loading (pretrained or random init), GPU-only option checks, freezing,
LoRA / QLoRA, optimizer parameter groups with separate learning rates, and the ZeRO-3 vision guard.

Qwen2.5-VL and Qwen3-VL in transformers 5: ``model.model.visual`` (vision blocks + ``merger``, and Qwen3-VL's
``deepstack_merger_list``) and ``model.model.language_model`` (+ ``model.lm_head``); gbtrain.families names them.
"""

from __future__ import annotations

import importlib.util

import torch

from gbtrain.config import below_minimum, out_of_bounds
from gbtrain.coords import PixelBudget
from gbtrain.families import FAMILIES
from gbtrain.train.attention import attn_implementation_for, precompute_varlen_kwargs
from gbtrain.train.config import TrainConfig

VISION, MERGER, LLM = "vision_tower", "merger", "llm"


def load_processor(model: str, budget: PixelBudget):
    """The model's processor with `budget` in force: the one loader of training, the hf backend and probes.

    A hub checkpoint's preprocessor_config.json carries legacy `min_pixels`/`max_pixels` (3136 / 12845056
    for Qwen2.5-VL) that win over a `size` argument to `from_pretrained` (an A4 scan would then cost ~5x the
    image tokens the builder counted), so the size is set on the loaded image processor instead; a
    processor saved afterwards carries it."""
    from transformers import AutoProcessor
    from transformers.image_utils import SizeDict

    processor = AutoProcessor.from_pretrained(model)
    if hasattr(processor, "image_processor"):  # a text-only model (an LLM judge) has a tokenizer only
        image_processor = processor.image_processor
        side = image_processor.patch_size * image_processor.merge_size
        if side != budget.factor:
            raise ValueError(f"{model} cuts images into {side} px tokens, but vision.factor={budget.factor}: set "
                             f"vision.factor={side} (and build the data with it)")
        image_processor.size = SizeDict(**budget.processor_size())
    return processor


def cuda_available() -> bool:
    return torch.cuda.is_available()


def _range_problems(cfg: TrainConfig) -> list[str]:
    """Numbers outside their range (NaN included): each would train something other than what was asked."""
    at_least = {"lr.llm": (cfg.lr.llm, 0), "lr.merger": (cfg.lr.merger, 0), "lr.vision_tower": (cfg.lr.vision_tower, 0),
                "num_train_epochs": (cfg.num_train_epochs, 1e-12), "weight_decay": (cfg.weight_decay, 0),
                "max_grad_norm": (cfg.max_grad_norm, 1e-12), "peak_tflops": (cfg.peak_tflops, 0)}
    problems = out_of_bounds(cfg) + below_minimum(at_least)  # the counts' bounds are their options
    if not (0 <= cfg.lora.dropout < 1):
        problems.append(f"lora.dropout={cfg.lora.dropout!r}: must be in [0, 1)")
    if not (0 <= cfg.warmup_ratio <= 1):
        problems.append(f"warmup_ratio={cfg.warmup_ratio!r}: must be in [0, 1]")
    if cfg.max_steps != -1 and cfg.max_steps < 1:
        problems.append(f"max_steps={cfg.max_steps!r}: -1 (use num_train_epochs) or at least 1")
    return problems


def check_options(cfg: TrainConfig) -> None:
    """Refuse GPU-only settings where they cannot run, with a message that says what to change."""
    gpu = cuda_available()
    problems = []
    if cfg.precision not in ("auto", "bf16", "fp32"):
        problems.append(f"precision={cfg.precision!r}: choose auto, bf16 or fp32")
    if cfg.precision == "bf16" and not gpu:
        problems.append("precision=bf16 needs a CUDA GPU; use precision=auto (fp32 on CPU)")
    if cfg.attn_implementation not in ("sdpa", "eager", "flash_attention_2", "flex_attention"):
        problems.append(f"attn_implementation={cfg.attn_implementation!r}: choose sdpa, eager, flash_attention_2 or "
                        f"flex_attention")
    if cfg.attn_implementation == "flash_attention_2" and not (gpu and importlib.util.find_spec("flash_attn")):
        problems.append("attn_implementation=flash_attention_2 needs a CUDA GPU and the flash-attn package; "
                        "use sdpa")
    if cfg.attn_implementation == "flex_attention" and not gpu:
        problems.append("attn_implementation=flex_attention trains on a CUDA GPU only (PyTorch's flex attention has "
                        "no backward on CPU); use sdpa")
    if cfg.liger and not (gpu and importlib.util.find_spec("liger_kernel")):
        problems.append("liger=true needs a CUDA GPU and the liger-kernel package (pip install liger-kernel==0.8.5); "
                        "or set liger=false")
    if cfg.finetune not in ("lora", "full", "qlora"):
        problems.append(f"finetune={cfg.finetune!r}: choose lora, full or qlora")
    if cfg.finetune == "qlora" and not (gpu and importlib.util.find_spec("bitsandbytes")):
        problems.append("finetune=qlora needs a CUDA GPU and bitsandbytes; use finetune=lora")
    if cfg.finetune in ("lora", "qlora") and not cfg.freeze.vision_tower:
        problems.append("freeze.vision_tower=false needs finetune=full (LoRA adapts the LLM; the merger can train "
                        "fully with freeze.merger=false)")
    if cfg.vision_cache_mib and not (cfg.freeze.vision_tower and cfg.freeze.merger):
        problems.append(f"vision_cache_mib={cfg.vision_cache_mib} reuses features of a frozen vision side: set "
                        f"freeze.vision_tower=true and freeze.merger=true, or vision_cache_mib=0")
    if cfg.model_init not in ("pretrained", "random"):
        problems.append(f"model_init={cfg.model_init!r}: choose pretrained or random")
    problems += _range_problems(cfg)
    if problems:
        raise ValueError("unsupported training options:\n  " + "\n  ".join(problems))


def train_dtype(cfg: TrainConfig) -> torch.dtype:
    if cfg.precision == "bf16" or (cfg.precision == "auto" and cuda_available()):
        return torch.bfloat16
    return torch.float32


def load_model(cfg: TrainConfig):
    """The model to train, in the training dtype, with the chosen attention implementation."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    dtype = train_dtype(cfg)
    attn = attn_implementation_for(cfg.attn_implementation)
    if cfg.model_init == "random":
        config = AutoConfig.from_pretrained(cfg.model)
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype,
                                                        attn_implementation=attn)
    else:
        kwargs = {}
        if cfg.finetune == "qlora":
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
                bnb_4bit_use_double_quant=True, llm_int8_skip_modules=["visual", "lm_head"])
        model = AutoModelForImageTextToText.from_pretrained(cfg.model, dtype=dtype,
                                                            attn_implementation=attn, **kwargs)
    # Packed rows need the block-diagonal mask, which transformers builds only without a KV cache; the
    # language model of transformers 5 reads its own text_config, so both are switched off.
    model.config.use_cache = False
    model.config.get_text_config().use_cache = False
    return model


_MERGER_MARKERS = tuple({m for f in FAMILIES for m in f.merger_markers})


def part_of(name: str) -> str:
    """Which part a parameter belongs to, from its name (works through PEFT/DeepSpeed wrappers)."""
    dotted = f".{name}"
    if any(f".{marker}" in dotted for marker in _MERGER_MARKERS):
        return MERGER
    if ".visual." in dotted:
        return VISION
    return LLM


def apply_freezing(model, cfg: TrainConfig) -> None:
    """Full fine-tuning: freeze the vision tower, the merger and/or the LLM (embeddings and head included)."""
    frozen = {VISION: cfg.freeze.vision_tower, MERGER: cfg.freeze.merger, LLM: cfg.freeze.llm}
    for name, p in model.named_parameters():
        if frozen[part_of(name)]:
            p.requires_grad_(False)


def _merger_modules(model) -> list[str]:
    """The outermost merger modules (Qwen2.5-VL's `merger`; Qwen3-VL's also each DeepStack merger): what LoRA
    keeps fully trainable when the merger trains. A ModuleList is no module PEFT can wrap, so its entries stand."""
    def marked(name: str) -> bool:
        return part_of(f"{name}.weight") == MERGER

    modules = dict(model.named_modules())
    return [name for name, module in modules.items()
            if marked(name) and not isinstance(module, torch.nn.ModuleList)
            and (not marked(name.rpartition(".")[0]) or isinstance(modules[name.rpartition(".")[0]],
                                                                    torch.nn.ModuleList))]


def apply_lora(model, cfg: TrainConfig):
    """Wrap with PEFT LoRA on the LLM linears (regex on module paths); the merger can still train fully."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if cfg.finetune == "qlora":
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
    modules_to_save = _merger_modules(model) if not cfg.freeze.merger else None
    lora = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=cfg.lora.target_modules, modules_to_save=modules_to_save, task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def setup_model(cfg: TrainConfig, fp32_trainable: bool = True):
    """Load, then freeze (full) or wrap with LoRA (lora/qlora); returns the model to hand to the trainer.

    With a bf16 base, every trainable parameter is kept in fp32 (`fp32_trainable`; the forward runs under
    bf16 autocast): AdamW steps of ~1e-5 relative size round to nothing in bf16. DeepSpeed keeps fp32
    master weights itself, so the recipe passes False under it."""
    model = load_model(cfg)
    if cfg.freeze.vision_tower:  # before PEFT, whose QLoRA preparation hooks the input embeddings
        keep_frozen_tower_out_of_autograd(model)
    if cfg.attn_implementation == "flash_attention_2" and cfg.packing:
        precompute_varlen_kwargs(model)
    if cfg.finetune == "full":
        apply_freezing(model, cfg)
    else:
        model = apply_lora(model, cfg)
    if fp32_trainable:
        for p in model.parameters():
            if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16):
                p.data = p.data.float()
    always_run_vision_tower(model)
    return model


def _no_decay(name: str, p: torch.nn.Parameter) -> bool:
    return p.ndim < 2 or "norm" in name.lower() or name.endswith(".bias")


def parameter_groups(model, cfg: TrainConfig) -> list[dict]:
    """Optimizer groups: one learning rate per part (vision tower, merger, LLM incl. adapters), and no
    weight decay on biases and norms. Frozen parameters are left out."""
    rates = {VISION: cfg.lr.vision_tower, MERGER: cfg.lr.merger, LLM: cfg.lr.llm}
    groups: dict[tuple[str, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        part, nd = part_of(name), _no_decay(name, p)
        g = groups.setdefault((part, nd), {"params": [], "names": [], "lr": rates[part], "part": part,
                                           "weight_decay": 0.0 if nd else cfg.weight_decay})
        g["params"].append(p)
        g["names"].append(name)
    return [groups[k] for k in sorted(groups)]


def llm_parameter_count(model) -> int:
    """Parameters of the language model (embeddings excluded): the N of the 6N / 4N FLOPs per token."""
    return sum(getattr(p, "ds_numel", p.numel()) for n, p in model.named_parameters()  # ZeRO-3: full size
               if part_of(n) == LLM and "embed_tokens" not in n and "lora_" not in n)


def backbone(model):
    """The inner model of a supported family (it owns `visual` and `get_image_features`), under any wrapper."""
    classes = {c for f in FAMILIES for c in f.backbone_classes}
    inner = next((m for m in model.modules() if type(m).__name__ in classes), None)
    if inner is None:
        raise ValueError(f"no backbone of a supported family ({', '.join(sorted(classes))}) found in "
                         f"{type(model).__name__}")
    return inner


def keep_frozen_tower_out_of_autograd(model) -> None:
    """A frozen vision tower builds no graph, so it is neither recomputed nor back-propagated.

    `enable_input_require_grads()` (called by `gradient_checkpointing_enable()`, by TRL's SFTTrainer for PEFT with
    checkpointing, and by PEFT's QLoRA preparation) hooks the input embeddings of every sub-model that names them;
    Qwen2.5-VL's tower names its `patch_embed`, whose output then requires grad, and the whole frozen tower (a Python
    loop over windows in each of its 32 blocks) ran its backward every step. Nothing upstream of the merger trains, so
    the tower reports no input embeddings, its blocks are never checkpointed (there is nothing to recompute; the
    trainer enables checkpointing on every layer when training starts, so it is switched off at each call), and its
    first block refuses an input that requires grad: a bug that would otherwise cost time silently."""
    visual = backbone(model).visual
    visual.get_input_embeddings = lambda: None
    name = type(visual).__name__

    def no_checkpointing(module, args, kwargs):
        for block in module.blocks:
            block.gradient_checkpointing = False
        return None

    def refuse_graph(module, args, kwargs):
        hidden = args[0] if args else next(iter(kwargs.values()))
        if torch.is_grad_enabled() and hidden.requires_grad:
            raise RuntimeError(f"gbtrain bug: the frozen vision tower ({name}) receives an input that requires grad, "
                               f"so it would be back-propagated every step; something hooked its input embeddings")
        return None

    visual.register_forward_pre_hook(no_checkpointing, with_kwargs=True)
    visual.blocks[0].register_forward_pre_hook(refuse_graph, with_kwargs=True)


def always_run_vision_tower(model) -> None:
    """ZeRO-3 gathers parameters collectively: a rank whose batch has no image would skip the vision tower
    while others run it, and training hangs. A forward hook runs the tower on a dummy image of one merged token
    (2x2 patches) when a training batch carries none, and adds 0 x its outputs (Qwen3-VL's DeepStack features
    too), so every rank takes part."""
    inner = backbone(model)
    vcfg = inner.config.vision_config
    patch = vcfg.in_channels * vcfg.temporal_patch_size * vcfg.patch_size ** 2

    def hook(module, args, kwargs, output):
        if not module.training or kwargs.get("pixel_values") is not None:
            return output
        visual = module.visual
        dummy = torch.zeros(4, patch, dtype=visual.dtype, device=visual.device)
        grid = torch.tensor([[1, 2, 2]], device=visual.device)
        out = visual(dummy, grid_thw=grid)
        feats = out.pooler_output if hasattr(out, "pooler_output") else out
        feats = torch.cat(list(feats)) if isinstance(feats, list | tuple) else feats
        touched = feats.sum() + sum(f.sum() for f in getattr(out, "deepstack_features", None) or [])
        output.last_hidden_state = output.last_hidden_state + 0.0 * touched
        return output

    inner.register_forward_hook(hook, with_kwargs=True)
