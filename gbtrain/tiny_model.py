"""A tiny Qwen2.5-VL built locally (no hub access): for CPU tests, CI and the demo.

Same architecture classes, processor and chat template as Qwen2.5-VL-7B-Instruct, at about a million
parameters: a byte-level BPE tokenizer trained on exam-grading text (digits, Latin, Chinese, JSON),
the Qwen special tokens, and a text head_dim of 64 (vLLM's CPU attention needs >= 32).
"""

from __future__ import annotations

import random
from importlib.resources import files
from pathlib import Path

from gbtrain.coords import PixelBudget

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>"]
# Qwen2's pre-tokenizer split pattern (contractions, letters, single digits, punctuation, whitespace).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")


def stock_chat_template() -> str:
    """The stock Qwen2.5-VL chat template (TRL ships a byte-identical copy and recognises it)."""
    return (files("trl") / "chat_templates" / "qwen2_5_vl.jinja").read_text(encoding="utf-8")


def training_corpus(n_pages: int = 60, seed: int = 0) -> list[str]:
    """Text like what the model will read and write: prompts, JSON answers, bank questions."""
    from gbtrain import prompts
    from gbtrain.coords import CONVENTIONS
    from gbtrain.schema import STAGES
    from gbtrain.synth.banks import BANKS

    rng = random.Random(seed)
    lines: list[str] = []
    for level in ("L1", "L2", "L3"):
        for mode in prompts.MODES:
            for coords in CONVENTIONS:
                lines.append(prompts.single_turn(level, mode, coords, [[12, 40, 300, 95]], [("1-1", "85")]))
    lines += [prompts.turn_locate("L2", "qwen25", [[1, 2, 3, 4]]), prompts.turn_solve("answer-free"),
              prompts.turn_solve("answer-based", [("3", "B")]), prompts.turn_compare()]
    for _ in range(n_pages):
        for kinds in BANKS.values():
            for makers in kinds.values():
                q = rng.choice(makers)(rng, rng.choice(STAGES))
                lines.append(q.stem + " " + " ".join(q.options))
                for p in q.parts:
                    box = [rng.randint(0, 1400) for _ in range(4)]
                    lines.append(p.prompt)
                    lines.append(f'[{{"bbox_2d": {box}, "text": "{p.right_answer}", "answer": "{p.std}", '
                                 f'"correctness": {rng.choice(["true", "false"])}}}]')
                    lines.append(p.wrong_answer)
    lines.append("0123456789 " * 20)
    return lines


def build_tokenizer(vocab_size: int = 1200):
    """Byte-level BPE with Qwen's split pattern and special tokens, wrapped as Qwen2TokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    fast = Qwen2TokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                              pad_token="<|endoftext|>", unk_token=None, errors="replace",
                              additional_special_tokens=SPECIAL_TOKENS[1:])
    fast.chat_template = stock_chat_template()
    fast.model_max_length = 32768
    return fast


def build_config(tokenizer, hidden: int = 128, layers: int = 2, vision_hidden: int = 64, vision_depth: int = 2):
    from transformers import Qwen2_5_VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    heads = hidden // 64  # text head_dim 64
    return Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": hidden, "intermediate_size": hidden * 2,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": heads,
            "max_position_embeddings": 32768, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                                                  "mrope_section": [8, 12, 12]},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"], "tie_word_embeddings": False,
        },
        vision_config={
            "depth": vision_depth, "hidden_size": vision_hidden, "intermediate_size": vision_hidden * 2,
            "num_heads": vision_hidden // 32, "out_hidden_size": hidden, "fullatt_block_indexes": [vision_depth - 1],
            "window_size": 112, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def make_tiny_model(out: str | Path, budget: PixelBudget = PixelBudget(), seed: int = 0, **sizes) -> Path:
    """Build and save model, tokenizer and processor so that the Auto* classes and vLLM load them."""
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
    )
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    out = Path(out)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    config = build_config(tokenizer, **sizes)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    image_processor = Qwen2VLImageProcessor(size=budget.processor_size())
    processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                    video_processor=Qwen2VLVideoProcessor(), chat_template=stock_chat_template())
    model.generation_config = GenerationConfig(
        bos_token_id=config.text_config.bos_token_id, eos_token_id=[config.text_config.eos_token_id],
        pad_token_id=config.text_config.pad_token_id, do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
