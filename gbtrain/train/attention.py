"""Attention for packed training rows: kernels that skip the blocks between a pack's samples.

A packed row (gbtrain.train.collator) holds several samples whose text position ids restart at 0. sdpa and eager
evaluate the block-diagonal causal mask densely over the whole row, so packing removes padding but not
the work between samples. Two paths skip it:

- ``attn_implementation: flex_attention`` - PyTorch flex attention with a document mask (a BlockMask
  built once per forward from the position ids; fully masked blocks are never computed). transformers
  5 marks Qwen2.5-VL as not supporting flex attention, because of its vision tower's per-window calls,
  so gbtrain registers transformers' own flex kernels under another name for the language model
  only; the vision tower keeps sdpa (its windows are already separate calls).
- ``attn_implementation: flash_attention_2`` - the varlen kernel. transformers recomputes
  ``cu_seq_lens``/``max_length`` from the position ids in every layer (with a device-to-host sync each
  time); the collator computes the sample lengths on the CPU instead (``packed_seq_lens``) and
  `precompute_varlen_kwargs` hands them to every layer as tensors made once per forward.
"""

from __future__ import annotations

import torch

PACKED_FLEX = "gbtrain_packed_flex"
SEQ_LENS_KEY = "packed_seq_lens"  # the collator's per-sample lengths of a packed row (a list of ints)


def register_packed_flex() -> None:
    """Make transformers' flex attention kernel and its BlockMask builder available as PACKED_FLEX."""
    from transformers import AttentionInterface
    from transformers.integrations.flex_attention import flex_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, flex_attention_mask

    AttentionInterface.register(PACKED_FLEX, flex_attention_forward)
    AttentionMaskInterface.register(PACKED_FLEX, flex_attention_mask)


def attn_implementation_for(name: str) -> str | dict[str, str]:
    """What `from_pretrained(attn_implementation=...)` gets for gbtrain's config value `name`."""
    if name == "flex_attention":
        register_packed_flex()
        return {"": "sdpa", "vision_config": "sdpa", "text_config": PACKED_FLEX}
    return name


def varlen_kwargs(seq_lens: list[int], device: torch.device | str) -> dict:
    """flash-attn varlen arguments for one packed row of samples of these lengths; no device sync."""
    starts = [0]
    for n in seq_lens:
        starts.append(starts[-1] + n)
    cu = torch.tensor(starts, dtype=torch.int32).to(device, non_blocking=True)
    longest = max(seq_lens)
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


def precompute_varlen_kwargs(model) -> None:
    """Turn the collator's `packed_seq_lens`, which travels with the model call's keywords, into the
    language model's varlen arguments, made once per forward; the vision tower (its own cu_seqlens) drops it.
    Hooks on the two submodules, so they work through PEFT and DeepSpeed wrappers alike."""

    def to_varlen(module, args, kwargs):
        lengths = kwargs.pop(SEQ_LENS_KEY, None)
        if lengths is not None:
            embeds = kwargs.get("inputs_embeds")
            device = embeds.device if embeds is not None else kwargs["input_ids"].device
            kwargs.update(varlen_kwargs([int(n) for n in lengths], device))
        return args, kwargs

    def drop(module, args, kwargs):
        kwargs.pop(SEQ_LENS_KEY, None)
        return args, kwargs

    model.model.language_model.register_forward_pre_hook(to_varlen, with_kwargs=True)
    model.model.visual.register_forward_pre_hook(drop, with_kwargs=True)
