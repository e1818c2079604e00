"""What every inference backend shares: the neutral message form, sampling options, the errors a backend raises,
how a vLLM engine's memory is sized, and the options and interface a registered backend implements.

Messages use one neutral form: ``{"role": ..., "content": [{"type": "image", "image": PIL.Image} |
{"type": "text", "text": str}]}``; each backend converts it (``convert_messages``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gbtrain.coords import PixelBudget


@dataclass(frozen=True)
class SamplingOptions:
    """Defaults are the GradingBench reference inference settings. Every backend sets every one of these
    fields explicitly, so a checkpoint's generation_config.json (the hub's samples with temperature 1e-6,
    repetition penalty 1.05) never decides what is decoded; top-k and min-p are off."""

    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.1
    max_tokens: int = 8192
    json_schema: dict | None = field(default=None, hash=False, compare=False)  # structured output (optional)


class FailedReply(str):
    """The reply of a record the backend could not answer (an endpoint refused that request): empty text
    that carries the error, so the run goes on and the evaluator writes the error in the record's line."""

    def __new__(cls, error: str):
        reply = super().__new__(cls, "")
        reply.error = error
        return reply


class EndpointError(ValueError):
    """An endpoint failed the whole run, not one record (a bad key, an unknown model, a server down after the
    client's retries): the user fixes the endpoint or the options, and a rerun resumes what was answered."""


class Backend(Protocol):
    name: str
    model: str

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]: ...

    def close(self) -> None: ...


def message(text: str, image=None, role: str = "user") -> dict:
    """One message in the neutral form (the image, when given, comes before the text)."""
    return {"role": role, "content": ([{"type": "image", "image": image}] if image is not None else [])
            + [{"type": "text", "text": text}]}


def convert_messages(conv: list[dict], image_part) -> list[dict]:
    """Neutral messages -> a backend's form; `image_part(image)` makes that backend's image entry."""
    return [{"role": m["role"], "content": [image_part(p["image"]) if p["type"] == "image"
                                            else {"type": "text", "text": p["text"]} for p in m["content"]]}
            for m in conv]


@dataclass(frozen=True)
class VLLMMemory:
    """How much memory a vLLM engine may take; gbtrain sizes it instead of vLLM's node-wide defaults.

    On CPU vLLM would reserve `gpu_memory_utilization` (0.92) of the whole NUMA node and refuse to start
    when other processes hold more than 8% of it; an explicit KV-cache size skips that reservation.
    ``kv_cache_gib`` None means: on CPU, a quarter of the memory available at start, between 0.5 and
    4 GiB, and no more than the model's CPU_KV_SEQUENCES full-length sequences need (vLLM writes every byte of
    its cache at start: 4 GiB took 5.8 s of an engine's start on one core, 0.25 GiB 0.1 s, 2026-12-08); on a
    GPU, whatever `gpu_memory_utilization` of the card leaves after the weights.
    """

    kv_cache_gib: float | None = None
    gpu_memory_utilization: float = 0.9

    def __post_init__(self):
        if self.kv_cache_gib is not None and not self.kv_cache_gib > 0:  # NaN included
            raise ValueError(f"kv_cache_gib must be positive, got {self.kv_cache_gib}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")

    def engine_kwargs(self, on_cpu: bool, needed_bytes: int | None = None) -> dict:
        """`LLM(...)` keyword arguments for this machine; `needed_bytes`: what CPU_KV_SEQUENCES sequences of the
        model's context need (kv_cache_bytes), where the model's config could be read."""
        kwargs: dict = {"gpu_memory_utilization": self.gpu_memory_utilization}
        if self.kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_gib * 2**30)
        elif on_cpu:
            import psutil

            share = int(min(4.0, max(0.5, psutil.virtual_memory().available / 2**30 / 4)) * 2**30)
            kwargs["kv_cache_memory_bytes"] = min(share, needed_bytes) if needed_bytes else share
        return kwargs


# Sequences of the full context a CPU engine's cache holds by default: an evaluation's requests are a few hundred
# to a few thousand tokens, so this is room for hundreds of them at once.
CPU_KV_SEQUENCES = 64


def kv_cache_bytes(model: str, max_model_len: int) -> int | None:
    """The KV cache of CPU_KV_SEQUENCES sequences of `max_model_len` tokens for the model folder's language model
    (keys and values of every layer at 4 bytes a number, the widest dtype vLLM runs on CPU); None when `model` is
    no folder with a readable config.json (a hub id), and the memory share alone sizes the cache."""
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
        text = config.get("text_config") or config
        heads = int(text["num_attention_heads"])
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        per_token = 2 * int(text["num_hidden_layers"]) * int(text.get("num_key_value_heads") or heads) * head_dim * 4
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError, AttributeError):
        return None
    return per_token * max_model_len * CPU_KV_SEQUENCES if per_token > 0 and max_model_len > 0 else None


@dataclass(frozen=True)
class BackendOptions:
    """How any registered backend is started; each reads the fields that concern it (defaults: EvalRun's)."""

    budget: PixelBudget = PixelBudget()
    max_model_len: int = 32768  # vllm
    tensor_parallel_size: int = 1  # vllm
    data_parallel_size: int = 1  # vllm
    structured: bool = False  # vllm: the engine-wide structured-output settings (hf: refused)
    memory: VLLMMemory = VLLMMemory()  # vllm
    hf_batch_size: int = 8  # hf
    base_url: str | None = None  # openai
    api_key_env: str = "OPENAI_API_KEY"  # openai
    concurrency: int = 8  # openai
    request_timeout: float = 180.0  # openai
    max_retries: int = 2  # openai
    chat_template_kwargs: dict | None = field(default=None, hash=False)


class RegisteredBackend(ABC):
    """What BACKENDS asks of a backend beyond `Backend` (chat, close): how it starts from the shared options and
    from a `KIND:MODEL` spec, and the tokenizer that measures its prompts."""

    name: str
    usage: str  # how a spec names it
    loads_model: bool = True  # the model is a folder or hub id opened here (not an endpoint's name for it)

    @classmethod
    @abstractmethod
    def from_options(cls, model: str, options: BackendOptions) -> RegisteredBackend: ...

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> RegisteredBackend:
        """`target`: the spec after `KIND:`, the model."""
        return cls.from_options(target, options)

    def tokenizer(self):
        """None: this backend's prompts cannot be measured here (the evaluator sends them all)."""
        return None

