"""The backend registry and what is built on it: ``BACKENDS`` names them (the `--backend` choices, the kinds of a
`KIND:MODEL` spec read by ``make_backend``, the backends the evaluator opens), ``ModelOptions`` are the flags of
every tool that asks a checkpoint, and ``judge_generator`` is what an LLM judge asks through.

A new backend is a ``RegisteredBackend`` subclass in a module of its own and one line in ``BACKENDS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gbtrain.config import option
from gbtrain.coords import PixelBudget
from gbtrain.inference.base import (
    Backend,
    BackendOptions,
    EndpointError,
    RegisteredBackend,
    SamplingOptions,
    VLLMMemory,
    message,
)
from gbtrain.inference.hf import HFBackend
from gbtrain.inference.openai import OpenAIBackend
from gbtrain.inference.vllm import VLLMBackend
from gbtrain.text import redact
from gbtrain.vocabulary import one_of

MODEL_GROUP = "model"  # the config.option group of ModelOptions: listed after each tool's own flags


def model_option(default: Any, help: str, **kwargs: Any) -> Any:
    """A ModelOptions field: config.option in the model group."""
    return option(default, help, group=MODEL_GROUP, **kwargs)


def _backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)


@dataclass(kw_only=True)
class ModelOptions:
    """The options of every tool that asks a checkpoint (eval/run_eval.py, eval/grade_pages.py,
    eval/select_checkpoint.py): which backend, how its inputs are drawn, how its engine is sized. Defined once here;
    each tool's options dataclass extends it, and gbtrain.cli.add_options makes every flag from the fields."""

    backend: str = model_option("vllm", "what runs the model", choices=_backend_names)
    coords: str | None = model_option(None, "default: the checkpoint's record, else its model_type or name")
    min_pixels: int | None = model_option(None, "default: the budget the recipe recorded in the checkpoint, else 50176",
                                          bounds=(1, 10**9))
    max_pixels: int | None = model_option(None, "default: as --min-pixels, else 1724800", bounds=(1, 10**9))
    max_tokens: int = model_option(8192, "most tokens generated per reply", bounds=(1, 2**20))
    max_model_len: int = model_option(32768, "vllm: context length (prompt and reply)", bounds=(1, 2**22))
    tensor_parallel_size: int = model_option(1, "vllm: GPUs per engine", bounds=(1, 1024))
    data_parallel_size: int = model_option(1, "vllm: independent engines, a share of each batch", bounds=(1, 1024))
    kv_cache_gib: float | None = model_option(None, "vllm: KV-cache size in GiB (default on CPU: a quarter of free "
                                                    "memory, 0.5-4 GiB, at most 64 full contexts' worth; on a GPU: "
                                                    "what --gpu-memory-utilization leaves)")
    gpu_memory_utilization: float = model_option(0.9, "vllm on a GPU: share of the card the engine (and a vllm judge) "
                                                      "may take")
    structured: bool = model_option(False, "JSON-schema constrained output (single-turn)")
    base_url: str | None = model_option(None, "openai backend: endpoint (default $OPENAI_BASE_URL)")
    api_key_env: str = model_option("OPENAI_API_KEY", "openai backend: variable holding the key")
    concurrency: int = model_option(8, "openai backend: requests in flight", bounds=(1, 1024))
    request_timeout: float = model_option(180.0, "openai backend: seconds one request may wait for its reply")
    max_retries: int = model_option(2, "openai backend: retries of a request that timed out or got a 429/5xx",
                                    bounds=(0, 100))
    hf_batch_size: int = model_option(8, "hf backend: sequences per generate call", bounds=(1, 4096))


# The registry: the `--backend` choices, the kinds make_backend reads and the backends the evaluator opens.
BACKENDS: dict[str, type[RegisteredBackend]] = {cls.name: cls for cls in (
    VLLMBackend,
    HFBackend,
    OpenAIBackend,
)}


def make_backend(spec: str, budget: PixelBudget = PixelBudget(), memory: VLLMMemory = VLLMMemory(),
                 chat_template_kwargs: dict | None = None, max_model_len: int = 32768) -> Backend:
    """`vllm:MODEL`, `hf:MODEL` or `openai:MODEL[@BASE_URL]` (`memory` and `max_model_len` size a vllm engine)."""
    kind, _, target = spec.partition(":")
    if not target:
        raise ValueError(f"backend spec {spec!r} must look like {one_of(c.usage for c in BACKENDS.values())}")
    if kind not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r} in {spec!r}: choose {one_of(BACKENDS)}")
    options = BackendOptions(budget, max_model_len, memory=memory, chat_template_kwargs=chat_template_kwargs)
    return BACKENDS[kind].from_spec(target, options)


# Qwen3-style chat templates think before answering unless told not to; a judge has a few tokens to say yes/no.
JUDGE_TEMPLATE_KWARGS = {"enable_thinking": False}
JUDGE_MAX_MODEL_LEN = 2048  # two short answers and the fixed question; a small KV cache suffices


def judge_backend(spec: str, memory: VLLMMemory = VLLMMemory()) -> Backend:
    """The backend an LLM judge asks: thinking off, a short context."""
    return make_backend(spec, memory=memory, chat_template_kwargs=JUDGE_TEMPLATE_KWARGS,
                        max_model_len=JUDGE_MAX_MODEL_LEN)


def judge_generator(spec: str, memory: VLLMMemory | None = None):
    """What an LLM judge on a backend spec asks: prompts in, replies out (temperature 0, short replies, thinking
    off). The backend starts at the first question, so an evaluator can release its own model first."""
    sampling = SamplingOptions(temperature=0.0, repetition_penalty=1.0, max_tokens=8)
    backend: list[Backend] = []

    def generate(prompts: list[str]) -> list[str]:
        if not backend:
            backend.append(judge_backend(spec, memory or VLLMMemory()))
        try:
            return backend[0].chat([[message(p)] for p in prompts], sampling)
        except EndpointError as e:  # say which endpoint: the judge's, not the evaluated model's
            raise EndpointError(f"judge {redact(spec)}: {e}") from None

    return generate
