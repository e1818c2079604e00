"""Backends on the hub-shaped miniature: the pixel budget is the one in force on every path (its processor
says 3136-12845056), sampling never comes from its generation_config.json (which samples), and vLLM's
memory is sized by gbtrain."""

import base64
import io
import json

import pytest
from conftest import run_script
from PIL import Image

from gbtrain.coords import PixelBudget
from gbtrain.inference.base import SamplingOptions, VLLMMemory, message
from gbtrain.inference.openai import OpenAIBackend

BUDGET = PixelBudget()  # GradingBench's 50176-1724800, what a user's 7B run uses
# An A4 scan at 300 dpi (L3, and an L2 page), a question crop (L1) and a phone photo of a page.
SIZES = [(2480, 3508), (620, 240), (1240, 1754)]
PROMPTS = ["Grade this page.", "Transcribe the answer.", "Is it right?"]


def gray(w, h, shade=180):
    return Image.new("RGB", (w, h), (shade, shade, shade))


def image_token_count(ids, tokenizer) -> int:
    return int(sum(int(i) == tokenizer.convert_tokens_to_ids("<|image_pad|>") for i in ids))


def test_the_builders_count_is_not_the_hub_processors():
    """What this file guards against: the hub processor's own budget gives ~5x the tokens for an A4 page."""
    hub = PixelBudget(3136, 12845056)
    assert BUDGET.image_tokens(2480, 3508) == 2145 and hub.image_tokens(2480, 3508) == 11125


def test_training_batches_see_the_builders_image_tokens(tiny_model_dir):
    from gbtrain.train.collator import GradingCollator
    from gbtrain.train.modeling import load_processor

    processor = load_processor(str(tiny_model_dir), BUDGET)
    collator = GradingCollator(processor, max_length=1 << 20)
    for w, h in SIZES:
        batch = collator([{"messages": [{"role": "user", "content": "Grade."}, {"role": "assistant", "content": "[]"}],
                           "images": [gray(w, h)]}])
        assert image_token_count(batch["input_ids"][0], processor.tokenizer) == BUDGET.image_tokens(w, h), (w, h)


def test_a_processor_saved_after_loading_keeps_the_budget(tiny_model_dir, tmp_path):
    from transformers import AutoProcessor

    from gbtrain.train.modeling import load_processor

    load_processor(str(tiny_model_dir), BUDGET).save_pretrained(tmp_path)
    size = AutoProcessor.from_pretrained(tmp_path).image_processor.size
    assert (size.shortest_edge, size.longest_edge) == (BUDGET.min_pixels, BUDGET.max_pixels)


def test_openai_backend_sends_images_at_the_size_boxes_are_defined_for():
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", budget=BUDGET)
    for w, h in SIZES:
        (content,) = backend.messages([message("Grade.", gray(w, h))])[0]["content"][:1]
        data = base64.b64decode(content["image_url"]["url"].split(",", 1)[1])
        assert Image.open(io.BytesIO(data)).size == BUDGET.resized(w, h)
    assert not backend.openai_itself
    assert OpenAIBackend("gpt-4o", base_url="https://api.openai.com/v1").openai_itself


def test_vllm_memory_is_sized_by_gbtrain():
    cpu = VLLMMemory().engine_kwargs(on_cpu=True)
    assert 0.5 * 2**30 <= cpu["kv_cache_memory_bytes"] <= 4 * 2**30
    assert VLLMMemory(kv_cache_gib=1.5).engine_kwargs(on_cpu=True)["kv_cache_memory_bytes"] == int(1.5 * 2**30)
    # a small model's cache is what 64 sequences of its context need, not the memory share (vLLM writes it all)
    assert VLLMMemory().engine_kwargs(on_cpu=True, needed_bytes=2**20)["kv_cache_memory_bytes"] == 2**20
    assert VLLMMemory(kv_cache_gib=1.5).engine_kwargs(on_cpu=True, needed_bytes=2**20)["kv_cache_memory_bytes"] \
        == int(1.5 * 2**30)  # a size the user gave stands
    gpu = VLLMMemory(gpu_memory_utilization=0.45).engine_kwargs(on_cpu=False)
    assert gpu == {"gpu_memory_utilization": 0.45}
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMMemory(gpu_memory_utilization=1.5)


def test_kv_cache_bytes_from_the_model_config(tmp_path):
    """Keys and values of every layer, at 4 bytes, for 64 sequences of the context, from configs shaped as the hub's
    (Qwen2.5-VL-7B keeps the language model's sizes at the top, Qwen3-VL-8B in text_config with its own head_dim);
    unreadable configs give None and the memory share alone sizes the cache."""
    from gbtrain.inference.base import kv_cache_bytes

    def folder(name: str, config: dict) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        return str(tmp_path / name)

    qwen25 = folder("qwen25", {"model_type": "qwen2_5_vl", "hidden_size": 3584, "num_attention_heads": 28,
                               "num_hidden_layers": 28, "num_key_value_heads": 4, "vision_config": {"depth": 32}})
    qwen3 = folder("qwen3", {"model_type": "qwen3_vl", "text_config": {
        "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
        "head_dim": 128}})
    assert kv_cache_bytes(qwen25, 4096) == 2 * 28 * 4 * 128 * 4 * 4096 * 64  # 28 GiB: the memory share wins
    assert kv_cache_bytes(qwen3, 1024) == 2 * 36 * 8 * 128 * 4 * 1024 * 64
    broken = folder("broken", {"text_config": {"num_attention_heads": 0}})
    assert kv_cache_bytes(broken, 4096) is None and kv_cache_bytes("Qwen/Qwen2.5-VL-7B-Instruct", 4096) is None


@pytest.mark.slow
def test_vllm_ranks_and_hf_see_the_budget_and_decode_the_same_in_order(tiny_model_dir, tmp_path):
    """Through gbtrain's backends, vLLM with --data-parallel-size 2 (two engines in their own processes and cores):
    the image-token counts of vLLM and hf equal the builder's, and greedy replies come back in order as the same
    tokens hf decodes, although the checkpoint's generation_config.json asks for sampling (tokens, not text: the
    random miniature emits ids of the padded vocabulary, which each library decodes its own way)."""
    from gbtrain.inference.hf import HFBackend

    assert json.loads((tiny_model_dir / "generation_config.json").read_text())["do_sample"] is True
    prompts = PROMPTS + [f"Grade question {i}." for i in range(5)]
    sizes = SIZES + [(300 + 40 * i, 200 + 30 * i) for i in range(5)]
    vllm = run_script(tmp_path, f"""
        import json
        from PIL import Image
        from gbtrain.inference.base import SamplingOptions, VLLMMemory, message
        from gbtrain.inference.vllm import VLLMBackend
        from gbtrain.coords import PixelBudget
        if __name__ == "__main__":
            # float32 like the hf backend on CPU, so that greedy replies can be compared token for token
            backend = VLLMBackend({str(tiny_model_dir)!r}, PixelBudget(), max_model_len=4096, data_parallel_size=2,
                                  memory=VLLMMemory(kv_cache_gib=0.5), dtype="float32")
            image_id = backend.tokenizer().convert_tokens_to_ids("<|image_pad|>")
            convs = [[message(p, Image.new("RGB", size, (180, 180, 180)))] for p, size in zip({prompts!r}, {sizes!r})]
            outputs = backend.generate(convs, SamplingOptions(max_tokens=12))
            replies = backend.chat(convs, SamplingOptions(max_tokens=12))
            backend.close()
            print("RESULT " + json.dumps({{"image_tokens": [o.prompt_token_ids.count(image_id) for o in outputs],
                                           "tokens": [list(o.outputs[0].token_ids) for o in outputs],
                                           "logprobs": [r.logprobs for r in replies]}}))
    """)
    builder = [BUDGET.image_tokens(w, h) for w, h in sizes]
    assert vllm["image_tokens"] == builder

    hf = HFBackend(str(tiny_model_dir), BUDGET, batch_size=len(prompts))
    convs = [[message(p, gray(w, h))] for p, (w, h) in zip(prompts, sizes, strict=True)]
    ids = hf.encode(convs)["input_ids"]
    assert [image_token_count(row, hf.processor.tokenizer) for row in ids] == builder
    generated = hf.generate(convs, SamplingOptions(max_tokens=12))
    expected = [ids for ids, _ in generated]
    assert len({tuple(t) for t in expected}) > 1  # distinct replies, so a mixed-up order would show
    assert vllm["tokens"] == expected
    # The sampled tokens' logprobs (raw, before the repetition penalty) agree within 1e-3 in float32 and are <= 0,
    # so each confidence exp(mean) lies in [0, 1]; the offsets are each library's own decode.
    for v_reply, (_, h_lps) in zip(vllm["logprobs"], generated, strict=True):
        v_lps = [lp for _, lp in v_reply]
        assert len(v_lps) == len(h_lps) and all(lp <= 0 for lp in v_lps + h_lps)
        assert max(abs(a - b) for a, b in zip(v_lps, h_lps, strict=True)) < 1e-3


def test_credentials_in_a_url_never_reach_a_report():
    from gbtrain.metric.judges import judge_from_spec
    from gbtrain.text import redact

    spec = "openai:judge-model@https://user:sk-secret@example.org/v1"
    assert "sk-secret" not in judge_from_spec(spec).name  # the name goes into every report
    assert redact("https://user:sk-secret@example.org/v1") == "https://example.org/v1"
    assert redact("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert redact("https://user:p@ss@example.org/v1 and //h/x@y") == "https://example.org/v1 and //h/x@y"
    assert redact("http://h/v1?api_key=T1&model=m;token=T2#f") == "http://h/v1?api_key=***&model=m;token=***#f"
    assert redact("Authorization: Bearer abc.DEF-123") == "Authorization: Bearer ***"


def test_a_registered_secret_is_removed_wherever_it_appears(monkeypatch):
    from gbtrain import text

    monkeypatch.setattr(text, "_SECRETS", set())
    text.register_secret("k9")  # too short to tell from ordinary text: not registered
    text.register_secret("sk-abc123")
    text.register_secret(None)
    assert text.redact("400: invalid key sk-abc123 (sk-abc123)") == "400: invalid key *** (***)"
    assert text.redact("k9 stays") == "k9 stays"


def test_a_backend_is_one_class_and_one_registry_line(synth_dir, tmp_path, monkeypatch):
    """BACKENDS is the one list: a class registered there is a `--backend` choice, a spec kind of make_backend and
    what the evaluator opens, with nothing else edited."""
    import argparse

    from conftest import TEST_MAX_PIXELS, TEST_MIN_PIXELS

    from gbtrain.cli import add_options
    from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint
    from gbtrain.inference import registry
    from gbtrain.inference.base import RegisteredBackend

    class EchoBackend(RegisteredBackend):
        """Answers every conversation with "[]" and remembers how many it was asked."""

        name, usage, loads_model = "echo", "echo:MODEL", False

        def __init__(self, model: str, budget: PixelBudget):
            self.model, self.budget, self.asked = model, budget, 0

        @classmethod
        def from_options(cls, model, options):
            return cls(model, options.budget)

        def chat(self, conversations, sampling):
            self.asked += len(conversations)
            return ["[]"] * len(conversations)

        def close(self):
            pass

    monkeypatch.setitem(registry.BACKENDS, "echo", EchoBackend)
    ap = argparse.ArgumentParser()
    add_options(ap, EvalRun)
    assert ap.parse_args(["--model", "m", "--data", "d", "--out", "o", "--backend", "echo"]).backend == "echo"
    made = registry.make_backend("echo:some-model", budget=BUDGET)
    assert isinstance(made, EchoBackend) and made.model == "some-model" and made.budget == BUDGET
    with pytest.raises(ValueError, match=r"choose vllm, hf, openai or echo"):
        registry.make_backend("tgi:m")
    out = tmp_path / "ev"
    report = evaluate_checkpoint(EvalRun(model="m", data=str(synth_dir), out=str(out), backend="echo", settings="L1-af",
                                         limit=2, coords="qwen25", overlays=0, min_pixels=TEST_MIN_PIXELS,
                                         max_pixels=TEST_MAX_PIXELS), progress=False)
    assert report["meta"]["backend"] == "echo" and report["settings"]["L1-af"]["n_records"] == 2
    lines = [json.loads(ln) for ln in (out / "predictions" / "L1-af.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and {(ln["backend"], ln["response"]) for ln in lines} == {("echo", "[]")}


def test_structured_output_is_refused_where_it_would_be_ignored():
    """The hf backend generates freely: a --structured run on it would record a constraint it never applied."""
    from gbtrain.inference.base import BackendOptions
    from gbtrain.inference.hf import HFBackend

    with pytest.raises(ValueError, match="the hf backend generates freely: drop --structured"):
        HFBackend.from_options("any-model", BackendOptions(structured=True))
