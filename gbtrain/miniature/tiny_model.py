"""Tiny Qwen2.5-VL and Qwen3-VL built locally (no hub access), shaped like the hub checkpoints: for CPU tests, CI
and the demo.

Each has the file set and JSON keys of its family's hub checkpoint (recorded in tests/fixtures/hub_*.json):
- Qwen/Qwen2.5-VL-7B-Instruct: the flat config.json with `rope_scaling`, generation_config.json with the hub's
  sampling defaults (do_sample, temperature 1e-6, repetition_penalty 1.05), preprocessor_config.json with the
  legacy `min_pixels`/`max_pixels` keys and the hub's values, 22 added tokens, weights under the hub's old tensor
  names (`model.`, `visual.`, `lm_head.`);
- Qwen/Qwen3-VL-8B-Instruct: config.json with a nested `text_config` (interleaved mRoPE) and a `vision_config`
  with DeepStack layers, preprocessor_config.json with `size` {shortest_edge, longest_edge} (no legacy keys),
  video_preprocessor_config.json, generation_config.json (temperature 0.7, top_p 0.8, top_k 20), 26 added tokens
  (`<think>` and `<tool_response>` pairs too), weights under transformers 5 names (`model.language_model.`,
  `model.visual.`, `lm_head.`);
and both tokenizer.json + vocab.json + merges.txt + tokenizer_config.json and chat_template.json with the stock
template. So every code path meets what a user's checkpoint brings, at about a million parameters: a byte-level
BPE tokenizer trained on exam-grading text and a text head_dim of 64 (vLLM's CPU attention needs >= 32).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from gbtrain.config import option
from gbtrain.data.synth.generate import CHARSETS
from gbtrain.families import FAMILIES, QWEN2_5_VL, QWEN3_VL, ModelFamily, family_named
from gbtrain.miniature.warmup import WarmupOptions, warm_up_vision
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L2, LEVELS, MODES

# The hub tokenizer's added tokens, in id order after the BPE vocabulary; the first 14 are special.
ADDED_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
SPECIAL_TOKENS = ADDED_TOKENS[:14]
QWEN3_ADDED_TOKENS = [*ADDED_TOKENS, "<tool_response>", "</tool_response>", "<think>", "</think>"]


@dataclass(frozen=True)
class HubLayout:
    """What a family's hub checkpoint holds besides its sizes (the hub's budgets are NOT gbtrain's: callers must
    impose theirs)."""

    family: ModelFamily
    architecture: str
    # config.json at tiny sizes: (special token ids, vocab size, hidden, layers, vision hidden, vision depth) -> dict
    make_config: Callable[..., dict]
    added_tokens: tuple[str, ...]
    chat_template: str  # TRL's byte-identical copy of the hub template, in trl/chat_templates
    preprocessor: dict
    video_preprocessor: dict | None
    generation: dict  # sampling defaults; the token ids are the tokenizer's
    model_max_length: int
    # transformers 5 module path -> the hub's tensor name (transformers and vLLM map it back)
    tensor_renames: tuple[tuple[str, str], ...] = ()


# Qwen2's pre-tokenizer split pattern (contractions, letters, single digits, punctuation, whitespace).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")


def stock_chat_template(family: str = QWEN2_5_VL.name) -> str:
    """The family's stock chat template (TRL ships a byte-identical copy and recognises it)."""
    return (files("trl") / "chat_templates" / HUB_LAYOUTS[family].chat_template).read_text(encoding="utf-8")


def training_corpus(n_pages: int = 60, seed: int = 0) -> list[str]:
    """Text like what the model will read and write: prompts, JSON answers, bank questions."""
    from gbtrain import prompts
    from gbtrain.coords import CONVENTIONS
    from gbtrain.data.synth.banks import BANKS
    from gbtrain.schema import STAGES

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


def build_tokenizer(vocab_size: int = 1200, family: str = QWEN2_5_VL.name):
    """Byte-level BPE with Qwen's split pattern; the hub's added tokens follow the vocabulary, as in Qwen's."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    added = HUB_LAYOUTS[family].added_tokens
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(added), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=t in SPECIAL_TOKENS, normalized=False) for t in added])
    fast = Qwen2TokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                              pad_token="<|endoftext|>", unk_token=None, errors="replace",
                              additional_special_tokens=SPECIAL_TOKENS[1:])
    fast.chat_template = stock_chat_template(family)
    return fast


def hub_config(tokenizer, family: str = QWEN2_5_VL.name, hidden: int = 128, layers: int = 2, vision_hidden: int = 64,
               vision_depth: int = 2) -> dict:
    """config.json in the family's hub layout and key order, at tiny sizes (text head_dim 64, vision head_dim 32)."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    vocab = -(-len(tokenizer) // 64) * 64  # padded past the tokenizer, like the hubs' 152064 / 151936
    return HUB_LAYOUTS[family].make_config(ids, vocab, hidden, layers, vision_hidden, vision_depth)


def _qwen25_config(ids: dict, vocab: int, hidden: int, layers: int, vision_hidden: int, vision_depth: int) -> dict:
    """Qwen2.5-VL's flat text keys with `rope_scaling`."""
    heads = hidden // 64
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
        "vocab_size": vocab,  # padded past the tokenizer, like the hub's 152064
    }


def _qwen3_config(ids: dict, vocab: int, hidden: int, layers: int, vision_hidden: int, vision_depth: int) -> dict:
    """Qwen3-VL's nested text_config (interleaved mRoPE, sections in the hub's 24:20:20 proportion of head_dim / 2)
    and a vision_config whose first block also feeds DeepStack features to the first LLM layer."""
    heads = hidden // 64
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"], "image_token_id": ids["<|image_pad|>"],
        "model_type": "qwen3_vl",
        "text_config": {
            "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": ids["<|endoftext|>"],
            "dtype": "float32", "eos_token_id": ids["<|im_end|>"], "head_dim": 64, "hidden_act": "silu",
            "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": hidden * 2,
            "max_position_embeddings": 262144, "model_type": "qwen3_vl_text", "num_attention_heads": heads,
            "num_hidden_layers": layers, "num_key_value_heads": heads, "rms_norm_eps": 1e-06,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": [12, 10, 10], "rope_type": "default"},
            "rope_theta": 5000000, "use_cache": True, "vocab_size": vocab,
        },
        "tie_word_embeddings": False, "transformers_version": "4.57.0.dev0", "video_token_id": ids["<|video_pad|>"],
        "vision_config": {
            "deepstack_visual_indexes": [0], "depth": vision_depth, "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": vision_hidden, "in_channels": 3, "initializer_range": 0.02,
            "intermediate_size": vision_hidden * 2, "model_type": "qwen3_vl", "num_heads": vision_hidden // 32,
            "num_position_embeddings": 2304, "out_hidden_size": hidden, "patch_size": 16, "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        "vision_end_token_id": ids["<|vision_end|>"], "vision_start_token_id": ids["<|vision_start|>"],
    }


_QWEN3_VL_PIXELS = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                    "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}
HUB_LAYOUTS = {
    QWEN2_5_VL.name: HubLayout(
        QWEN2_5_VL, "Qwen2_5_VLForConditionalGeneration", _qwen25_config, tuple(ADDED_TOKENS), "qwen2_5_vl.jinja",
        preprocessor={"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                      "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                      "image_std": [0.26862954, 0.26130258, 0.27577711],
                      "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"},
        video_preprocessor=None,
        generation={"do_sample": True, "repetition_penalty": 1.05, "temperature": 1e-06,
                    "transformers_version": "4.37.0"},
        model_max_length=131072, tensor_renames=(("model.language_model.", "model."), ("model.visual.", "visual."))),
    QWEN3_VL.name: HubLayout(
        QWEN3_VL, "Qwen3VLForConditionalGeneration", _qwen3_config, tuple(QWEN3_ADDED_TOKENS), "qwen3_vl.jinja",
        preprocessor={"size": {"longest_edge": 16777216, "shortest_edge": 65536}, **_QWEN3_VL_PIXELS,
                      "image_processor_type": "Qwen2VLImageProcessorFast"},
        video_preprocessor={"size": {"longest_edge": 25165824, "shortest_edge": 4096}, **_QWEN3_VL_PIXELS,
                            "video_processor_type": "Qwen3VLVideoProcessor"},
        generation={"do_sample": True, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0, "temperature": 0.7,
                    "transformers_version": "4.56.0"},
        model_max_length=262144),
}


def _tokenizer_config(tokenizer, layout: HubLayout) -> dict:
    """tokenizer_config.json with the hub's keys (the chat template inside, as on the hub)."""
    added = {str(tokenizer.convert_tokens_to_ids(t)): {
        "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
        "special": t in SPECIAL_TOKENS} for t in layout.added_tokens}
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
            "additional_special_tokens": SPECIAL_TOKENS[1:], "bos_token": None,
            "chat_template": stock_chat_template(layout.family.name), "clean_up_tokenization_spaces": False,
            "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": layout.model_max_length,
            "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None}


def _hub_tensor_name(name: str, layout: HubLayout) -> str:
    """transformers 5 module path -> the hub checkpoint's tensor name."""
    for new, old in layout.tensor_renames:
        if name.startswith(new):
            return old + name[len(new):]
    return name


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@dataclass
class TinyModelRun:
    """Everything one `scripts/make_tiny_model.py` call needs; each field is one of its flags (gbtrain.cli)."""

    out: str = option(help="folder to write the model into")
    family: str = option(QWEN2_5_VL.name, "model family, shaped like its hub checkpoint (gbtrain.families)",
                         choices=tuple(f.name for f in FAMILIES))
    hidden: int = option(128, "text hidden size (head_dim is 64)", bounds=(64, 8192))
    layers: int = option(2, "text layers", bounds=(1, 128))
    vision_hidden: int = option(64, "vision tower width (head_dim is 32)", bounds=(32, 8192))
    vision_depth: int = option(2, "vision tower blocks", bounds=(1, 128))
    seed: int = option(0, "weights seed", bounds=(0, 2**32 - 1))
    vision_warmup_steps: int = option(0, "train the vision tower and merger to read handwriting first "
                                         "(gbtrain.miniature.warmup; 2,000 steps with --vision-hidden 128 "
                                         "--vision-depth 3: about 10 minutes on 2 cores); 0 leaves random weights",
                                         bounds=(0, 10**6))
    vision_profile: str = option("legible", "the synthetic profile whose handwriting the warm-up teaches: its "
                                 "characters and sizes (gbtrain.miniature.warmup.warmup_for_profile)",
                                 choices=tuple(CHARSETS))

    def __post_init__(self):
        if min(self.hidden // 64, self.layers, self.vision_hidden // 32, self.vision_depth) < 1:
            raise ValueError("--hidden >= 64, --vision-hidden >= 32, --layers and --vision-depth >= 1")
        if self.vision_warmup_steps < 0:
            raise ValueError(f"--vision-warmup-steps must be >= 0, got {self.vision_warmup_steps}")


def make_tiny_model(out: str | Path, seed: int = 0, shards: int = 2, vision_warmup: WarmupOptions | None = None,
                    family: str = QWEN2_5_VL.name, **sizes) -> Path:
    """Write a hub-shaped tiny model of `family` (random weights) that the Auto* classes and vLLM load. With
    `vision_warmup`, its vision tower and merger are first trained to see handwriting (gbtrain.miniature.warmup), and
    gbtrain_warmup.json records how and how well."""
    import torch
    import transformers

    layout = HUB_LAYOUTS[family_named(family).name]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(family=layout.family.name)
    _write_json(out / "config.json", hub_config(tokenizer, layout.family.name, **sizes))
    model_class = getattr(transformers, layout.architecture)
    model = model_class(transformers.AutoConfig.from_pretrained(out)).eval()
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    generation = {"bos_token_id": pad, "pad_token_id": pad, "do_sample": True, "eos_token_id": [eos, pad]}
    _write_json(out / "generation_config.json", generation | layout.generation)
    _write_json(out / "preprocessor_config.json", layout.preprocessor)
    if layout.video_preprocessor is not None:
        _write_json(out / "video_preprocessor_config.json", layout.video_preprocessor)
    tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    tokenizer.backend_tokenizer.model.save(str(out))  # vocab.json and merges.txt
    _write_json(out / "tokenizer_config.json", _tokenizer_config(tokenizer, layout))
    _write_json(out / "chat_template.json", {"chat_template": stock_chat_template(layout.family.name)})
    if vision_warmup is not None:  # after the processor files: the crops go through the model's own processor
        from gbtrain.coords import PixelBudget
        from gbtrain.train.modeling import load_processor

        side = layout.family.patch_factor
        width, height = vision_warmup.crop_px(side)
        budget = PixelBudget(min(3136, width * height), width * height, side)
        record = warm_up_vision(model, vision_warmup, load_processor(str(out), budget).image_processor)
        _write_json(out / "gbtrain_warmup.json", record)
    _write_weights(model, out, shards, layout)  # last: a folder without weights is visibly unfinished
    return out


def _write_weights(model, out: Path, shards: int, layout: HubLayout) -> None:
    """The state dict as the hub shards it: `model-0000N-of-0000M.safetensors` under the hub's names, and the index."""
    from safetensors.torch import save_file

    tensors = {_hub_tensor_name(k, layout): v.contiguous() for k, v in model.state_dict().items()}
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
