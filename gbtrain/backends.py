"""Inference backends behind one interface: a batch of chat conversations in, one reply per conversation out.

- ``vllm``: the offline engine; a whole batch is ONE ``LLM.chat`` call.
- ``hf``: transformers ``generate``, batched with left padding (machines without vLLM).
- ``openai``: any OpenAI-compatible endpoint (a hosted model, or ``vllm serve`` of a checkpoint); images
  go as base64 data URLs, requests run concurrently with a bound, and the client retries 429/5xx and
  timeouts with exponential backoff. The API key is read from an environment variable and never stored.

Messages use one neutral form: ``{"role": ..., "content": [{"type": "image", "image": PIL.Image} |
{"type": "text", "text": str}]}``; each backend converts it.
"""

from __future__ import annotations

import base64
import io
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from gbtrain.coords import PixelBudget


@dataclass(frozen=True)
class SamplingOptions:
    """Defaults are the GradingBench reference inference settings."""

    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.1
    max_tokens: int = 8192
    json_schema: dict | None = field(default=None, hash=False, compare=False)  # structured output (optional)


class Backend(Protocol):
    name: str
    model: str

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]: ...


def message(text: str, image=None, role: str = "user") -> dict:
    """One message in the neutral form (the image, when given, comes before the text)."""
    return {"role": role, "content": ([{"type": "image", "image": image}] if image is not None else [])
            + [{"type": "text", "text": text}]}


def _convert(conv: list[dict], image_part) -> list[dict]:
    """Neutral messages -> a backend's form; `image_part(image)` makes that backend's image entry."""
    return [{"role": m["role"], "content": [image_part(p["image"]) if p["type"] == "image"
                                            else {"type": "text", "text": p["text"]} for p in m["content"]]}
            for m in conv]


def _jpeg_data_url(image) -> str:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=92)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


class VLLMBackend:
    """vLLM offline engine. Pixel budget, context length and parallelism come from the caller's config."""

    name = "vllm"

    def __init__(self, model: str, budget: PixelBudget = PixelBudget(), max_model_len: int = 32768,
                 tensor_parallel_size: int = 1, data_parallel_size: int = 1, structured: bool = False,
                 seed: int = 0, **engine_kwargs):
        from vllm import LLM

        self.model = model
        kwargs = dict(model=model, max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                      limit_mm_per_prompt={"image": 1}, mm_processor_kwargs=budget.mm_processor_kwargs(),
                      seed=seed, **engine_kwargs)
        if data_parallel_size > 1:
            kwargs["data_parallel_size"] = data_parallel_size
        if structured:
            kwargs["structured_outputs_config"] = {"backend": "xgrammar", "disable_any_whitespace": True}
        self.llm = LLM(**kwargs)

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]:
        from vllm import SamplingParams

        kwargs = dict(temperature=sampling.temperature, top_p=sampling.top_p,
                      repetition_penalty=sampling.repetition_penalty, max_tokens=sampling.max_tokens)
        if sampling.json_schema is not None:
            from vllm.sampling_params import StructuredOutputsParams

            kwargs["structured_outputs"] = StructuredOutputsParams(json=sampling.json_schema)
        messages = [_convert(c, lambda im: {"type": "image_pil", "image_pil": im}) for c in conversations]
        outputs = self.llm.chat(messages, SamplingParams(**kwargs), use_tqdm=False)
        return [o.outputs[0].text for o in outputs]


class HFBackend:
    """transformers generate, left-padded batches of `batch_size` conversations."""

    name = "hf"

    def __init__(self, model: str, budget: PixelBudget = PixelBudget(), batch_size: int = 8, device: str | None = None):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.model = model
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.processor = AutoProcessor.from_pretrained(model, size=budget.processor_size())
        self.processor.tokenizer.padding_side = "left"
        self.net = AutoModelForImageTextToText.from_pretrained(model, dtype=dtype).to(self.device).eval()
        self.batch_size = batch_size

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]:
        import torch

        replies: list[str] = []
        for i in range(0, len(conversations), self.batch_size):
            batch = conversations[i:i + self.batch_size]
            inputs = self.processor.apply_chat_template(batch, add_generation_prompt=True, tokenize=True,
                                                        return_dict=True, return_tensors="pt", padding=True)
            inputs = inputs.to(self.device)
            gen = dict(max_new_tokens=sampling.max_tokens, repetition_penalty=sampling.repetition_penalty,
                       pad_token_id=self.processor.tokenizer.pad_token_id)
            if sampling.temperature > 0:
                gen.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p)
            else:
                gen.update(do_sample=False)
            with torch.no_grad():
                out = self.net.generate(**inputs, **gen)
            new = out[:, inputs["input_ids"].shape[1]:]
            replies += self.processor.batch_decode(new, skip_special_tokens=True)
        return replies


class OpenAIBackend:
    """An OpenAI-compatible chat endpoint. The key comes from `api_key_env` (default OPENAI_API_KEY);
    a local server without auth needs none."""

    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, timeout: float = 300.0, max_retries: int = 6):
        from openai import OpenAI

        self.model = model
        self.concurrency = max(1, concurrency)
        self.client = OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                             api_key=os.environ.get(api_key_env) or "EMPTY", timeout=timeout,
                             max_retries=max_retries)

    def _one(self, conv: list[dict], sampling: SamplingOptions) -> str:
        messages = _convert(conv, lambda im: {"type": "image_url", "image_url": {"url": _jpeg_data_url(im)}})
        kwargs = dict(model=self.model, messages=messages, temperature=sampling.temperature,
                      top_p=sampling.top_p, max_tokens=sampling.max_tokens)
        extra = {}
        if sampling.repetition_penalty != 1.0:
            extra["repetition_penalty"] = sampling.repetition_penalty  # vLLM servers accept it; others ignore
        if sampling.json_schema is not None:
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "grading", "schema": sampling.json_schema}}
        resp = self.client.chat.completions.create(**kwargs, extra_body=extra or None)
        return resp.choices[0].message.content or ""

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda c: self._one(c, sampling), conversations))


def make_backend(spec: str, budget: PixelBudget = PixelBudget(), **kwargs) -> Backend:
    """`vllm:MODEL`, `hf:MODEL` or `openai:MODEL[@BASE_URL]`."""
    kind, _, target = spec.partition(":")
    if not target:
        raise ValueError(f"backend spec {spec!r} must look like vllm:MODEL, hf:MODEL or openai:MODEL[@URL]")
    if kind == "vllm":
        return VLLMBackend(target, budget, **kwargs)
    if kind == "hf":
        return HFBackend(target, budget, **kwargs)
    if kind == "openai":
        model, _, url = target.partition("@")
        return OpenAIBackend(model, url or None, **kwargs)
    raise ValueError(f"unknown backend {kind!r} in {spec!r}: choose vllm, hf or openai")


def judge_from_spec(spec: str, **backend_kwargs):
    """`rule`, or an LLM judge on a backend spec (temperature 0, short replies)."""
    from gbtrain.judges import LLMJudge, RuleJudge

    if spec == "rule":
        return RuleJudge()
    backend = make_backend(spec, **backend_kwargs)
    sampling = SamplingOptions(temperature=0.0, repetition_penalty=1.0, max_tokens=8)

    def generate(prompts: list[str]) -> list[str]:
        return backend.chat([[message(p)] for p in prompts], sampling)

    return LLMJudge(generate, name=spec)
