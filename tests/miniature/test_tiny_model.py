import json
from pathlib import Path

import torch
from PIL import Image

HUB_RECORDS = {"qwen2_5_vl": "hub_qwen25vl_7b_instruct.json", "qwen3_vl": "hub_qwen3vl_8b_instruct.json"}


def _family(model_dir):
    from gbtrain.families import family_of_model

    return family_of_model(model_dir)


def test_loads_with_auto_classes_and_generates(family_model_dir):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from gbtrain.miniature.tiny_model import HUB_LAYOUTS, stock_chat_template

    family = _family(family_model_dir)
    model = AutoModelForImageTextToText.from_pretrained(family_model_dir)
    proc = AutoProcessor.from_pretrained(family_model_dir)
    assert type(model).__name__ == HUB_LAYOUTS[family.name].architecture
    assert proc.tokenizer.chat_template == stock_chat_template(family.name)
    assert proc.image_processor.patch_size * proc.image_processor.merge_size == family.patch_factor
    cfg = model.config
    tok = proc.tokenizer
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    assert cfg.text_config.hidden_size // cfg.text_config.num_attention_heads == 64
    assert model.model.visual is not None and model.model.language_model is not None
    messages = [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (300, 200), "white")},
                                             {"type": "text", "text": "看拼音，写词语。"}]}]
    inputs = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                      return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5


def test_same_files_and_keys_as_the_hub_checkpoint(family_model_dir):
    """File set and JSON keys equal the family's hub checkpoint's (Qwen/Qwen2.5-VL-7B-Instruct,
    Qwen/Qwen3-VL-8B-Instruct) as recorded in tests/fixtures."""
    import re

    from safetensors import safe_open

    model_dir = family_model_dir
    hub = json.loads((Path(__file__).parents[1] / "fixtures" / HUB_RECORDS[_family(model_dir).name]).read_text())
    files = {p.name for p in model_dir.iterdir()}
    shards = {f for f in files if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)}
    assert files - shards == set(hub["files"]) and shards

    def read(name):
        return json.loads((model_dir / name).read_text())

    config = read("config.json")
    assert list(config) == hub["config.json"]
    assert list(config["vision_config"]) == hub["config.json/vision_config"]
    if "config.json/text_config" in hub:  # Qwen3-VL: nested text keys, interleaved mRoPE
        assert list(config["text_config"]) == hub["config.json/text_config"]
        rope, hub_rope = config["text_config"]["rope_scaling"], hub["config.json/text_config/rope_scaling"]
        assert list(rope) == list(hub_rope)
        assert {k: rope[k] for k in ("mrope_interleaved", "rope_type")} == {
            k: hub_rope[k] for k in ("mrope_interleaved", "rope_type")}
        head_dim = config["text_config"]["head_dim"]
    else:
        assert config["rope_scaling"]["type"] == hub["config.json/rope_scaling"]["type"]
        rope, head_dim = config["rope_scaling"], config["hidden_size"] // config["num_attention_heads"]
    assert sum(rope["mrope_section"]) == head_dim // 2
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        if name in hub:
            assert list(read(name).items()) == list(hub[name].items())
    generation = read("generation_config.json")
    assert list(generation) == list(hub["generation_config.json"])
    sampling = [k for k in ("do_sample", "temperature", "top_p", "top_k", "repetition_penalty") if k in generation]
    assert {k: generation[k] for k in sampling} == {k: hub["generation_config.json"][k] for k in sampling}
    tok_cfg = read("tokenizer_config.json")
    assert sorted(tok_cfg) == hub["tokenizer_config.json"]
    assert [t["content"] for t in tok_cfg["added_tokens_decoder"].values()] == hub["tokenizer_config.json/added_tokens"]
    assert list(read("model.safetensors.index.json")) == hub["model.safetensors.index.json"]
    names = set(read("model.safetensors.index.json")["weight_map"])
    assert {n.split(".")[0] + "." for n in names} == set(hub["weight_prefixes"])
    for shard in shards:
        with safe_open(str(model_dir / shard), "pt") as f:
            assert set(f.keys()) <= names


def test_tokenizer_round_trips_grading_text(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = '[{"bbox_2d": [12, 40, 300, 95], "text": "高兴 goes √", "answer": "5/6", "correctness": false}]'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode())  # BPE merges happened
