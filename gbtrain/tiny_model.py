"""A tiny Qwen2.5-VL built locally (no hub access), shaped like the hub checkpoint: for CPU tests, CI and the demo.

It has the file set and JSON keys of Qwen/Qwen2.5-VL-7B-Instruct as downloaded from the hub (recorded in
tests/fixtures/hub_qwen25vl_7b_instruct.json, from the hub repository's history): the flat config.json
with `rope_scaling`, generation_config.json with the hub's sampling defaults (do_sample, temperature 1e-6,
repetition_penalty 1.05), preprocessor_config.json with the legacy `min_pixels`/`max_pixels` keys and the
hub's values, tokenizer.json + vocab.json + merges.txt + tokenizer_config.json with the 22 added tokens,
chat_template.json, and sharded weights under the hub's tensor names (`model.`, `visual.`, `lm_head.`).
So every code path meets what a user's Qwen2.5-VL-7B brings, at about a million parameters: a byte-level
BPE tokenizer trained on exam-grading text and a text head_dim of 64 (vLLM's CPU attention needs >= 32).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from gbtrain.config import option
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L2, LEVELS, MODES
from gbtrain.warmup import WarmupOptions, warm_up_vision

# The hub tokenizer's added tokens, in id order after the BPE vocabulary; the first 14 are special.
ADDED_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
SPECIAL_TOKENS = ADDED_TOKENS[:14]
# The hub checkpoint's image processor settings (its budget is NOT gbtrain's: callers must impose theirs).
HUB_PREPROCESSOR = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                    "image_std": [0.26862954, 0.26130258, 0.27577711],
                    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"}
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
    for level in LEVELS:
        for mode in MODES:
            for coords in CONVENTIONS:
                lines.append(prompts.single_turn(level, mode, coords, [[12, 40, 300, 95]], [("1-1", "85")]))
    lines += [prompts.turn_locate(L2, "qwen25", [[1, 2, 3, 4]]), prompts.turn_solve(ANSWER_FREE),
              prompts.turn_solve(ANSWER_BASED, [("3", "B")]), prompts.turn_compare()]
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
    """Byte-level BPE with Qwen's split pattern; the hub's added tokens follow the vocabulary, as in Qwen's."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(ADDED_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=t in SPECIAL_TOKENS, normalized=False) for t in ADDED_TOKENS])
    fast = Qwen2TokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                              pad_token="<|endoftext|>", unk_token=None, errors="replace",
                              additional_special_tokens=SPECIAL_TOKENS[1:])
    fast.chat_template = stock_chat_template()
    return fast


def hub_config(tokenizer, hidden: int = 128, layers: int = 2, vision_hidden: int = 64, vision_depth: int = 2) -> dict:
    """config.json in the hub's layout and key order (flat text keys, `rope_scaling`), at tiny sizes."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    heads = hidden // 64  # text head_dim 64
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0,
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|vision_pad|>"], "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"], "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": hidden * 2, "max_position_embeddings": 32768,
        "max_window_layers": layers, "model_type": "qwen2_5_vl", "num_attention_heads": heads,
        "num_hidden_layers": layers, "num_key_value_heads": heads, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "float32",
        "transformers_version": "4.41.2", "use_cache": True, "use_sliding_window": False,
        "vision_config": {
            "depth": vision_depth, "hidden_act": "silu", "hidden_size": vision_hidden,
            "intermediate_size": vision_hidden * 2, "num_heads": vision_hidden // 32, "in_chans": 3,
            "out_hidden_size": hidden, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
            "window_size": 112, "fullatt_block_indexes": [vision_depth - 1], "tokens_per_second": 2,
            "temporal_patch_size": 2,
        },
        "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
        "vocab_size": -(-len(tokenizer) // 64) * 64,  # padded past the tokenizer, like the hub's 152064
    }


def _tokenizer_config(tokenizer) -> dict:
    """tokenizer_config.json with the hub's keys (the chat template inside, as on the hub)."""
    added = {str(tokenizer.convert_tokens_to_ids(t)): {
        "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
        "special": t in SPECIAL_TOKENS} for t in ADDED_TOKENS}
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
            "additional_special_tokens": SPECIAL_TOKENS[1:], "bos_token": None,
            "chat_template": stock_chat_template(), "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
            "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>",
            "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}


def _hub_tensor_name(name: str) -> str:
    """transformers 5 module path -> the hub checkpoint's tensor name (transformers and vLLM map it back)."""
    for new, old in (("model.language_model.", "model."), ("model.visual.", "visual.")):
        if name.startswith(new):
            return old + name[len(new):]
    return name


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@dataclass
class TinyModelRun:
    """Everything one `scripts/make_tiny_model.py` call needs; each field is one of its flags (gbtrain.cli)."""

    out: str = option(help="folder to write the model into")
    hidden: int = option(128, "text hidden size (head_dim is 64)")
    layers: int = option(2, "text layers")
    vision_hidden: int = option(64, "vision tower width (head_dim is 32)")
    vision_depth: int = option(2, "vision tower blocks")
    seed: int = option(0, "weights seed")
    vision_warmup_steps: int = option(0, "train the vision tower and merger to read handwriting first (gbtrain.warmup; "
                                         "2,000 steps with --vision-hidden 128 --vision-depth 3: about 10 minutes on "
                                         "2 cores); 0 leaves random weights")

    def __post_init__(self):
        if min(self.hidden // 64, self.layers, self.vision_hidden // 32, self.vision_depth) < 1:
            raise ValueError("--hidden >= 64, --vision-hidden >= 32, --layers and --vision-depth >= 1")
        if self.vision_warmup_steps < 0:
            raise ValueError(f"--vision-warmup-steps must be >= 0, got {self.vision_warmup_steps}")


def make_tiny_model(out: str | Path, seed: int = 0, shards: int = 2, vision_warmup: WarmupOptions | None = None,
                    **sizes) -> Path:
    """Write a hub-shaped tiny Qwen2.5-VL (random weights) that the Auto* classes and vLLM load. With
    `vision_warmup`, its vision tower and merger are first trained to see handwriting (gbtrain.warmup), and
    gbtrain_warmup.json records how and how well."""
    import torch
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    config = hub_config(tokenizer, **sizes)
    _write_json(out / "config.json", config)
    model = Qwen2_5_VLForConditionalGeneration(AutoConfig.from_pretrained(out)).eval()
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    _write_json(out / "generation_config.json", {
        "bos_token_id": pad, "pad_token_id": pad, "do_sample": True, "eos_token_id": [eos, pad],
        "repetition_penalty": 1.05, "temperature": 1e-06, "transformers_version": "4.37.0"})
    _write_json(out / "preprocessor_config.json", HUB_PREPROCESSOR)
    tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    tokenizer.backend_tokenizer.model.save(str(out))  # vocab.json and merges.txt
    _write_json(out / "tokenizer_config.json", _tokenizer_config(tokenizer))
    _write_json(out / "chat_template.json", {"chat_template": stock_chat_template()})
    if vision_warmup is not None:  # after the processor files: the crops go through the model's own processor
        from gbtrain.coords import PixelBudget
        from gbtrain.modeling import load_processor

        budget = PixelBudget(3136, vision_warmup.width * vision_warmup.height)
        record = warm_up_vision(model, vision_warmup, load_processor(str(out), budget).image_processor)
        _write_json(out / "gbtrain_warmup.json", record)
    _write_weights(model, out, shards)  # last: a folder without weights is visibly unfinished
    return out


def _write_weights(model, out: Path, shards: int) -> None:
    """The state dict as the hub shards it: `model-0000N-of-0000M.safetensors` under the hub's names, and the index."""
    from safetensors.torch import save_file

    tensors = {_hub_tensor_name(k): v.contiguous() for k, v in model.state_dict().items()}
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = names[i * len(names) // shards:(i + 1) * len(names) // shards]
        save_file({n: tensors[n] for n in part}, out / shard, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    _write_json(out / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})


def make_tiny_qwen3(out: str | Path, seed: int = 0) -> Path:
    """A tiny text-only Qwen3 with Qwen3's own chat template (thinking on unless `enable_thinking=False`):
    the stand-in for an LLM judge such as Qwen/Qwen3-32B."""
    import torch
    from tokenizers import AddedToken
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    tokenizer.chat_template = (files("trl") / "chat_templates" / "qwen3.jinja").read_text(encoding="utf-8")
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen3Config(vocab_size=-(-len(tokenizer) // 64) * 64, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                         max_position_embeddings=4096, bos_token_id=pad, eos_token_id=eos, pad_token_id=pad,
                         tie_word_embeddings=False)
    model = Qwen3ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad,
                                               do_sample=True, temperature=0.6, top_p=0.95, top_k=20)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
