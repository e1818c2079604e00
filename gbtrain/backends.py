"""Inference backends behind one interface: a batch of chat conversations in, one reply per conversation out.

- ``vllm``: the offline engine; a whole batch is ONE ``LLM.chat`` call.
- ``hf``: transformers ``generate``, batched with left padding (machines without vLLM).
- ``openai``: any OpenAI-compatible endpoint (a hosted model, or ``vllm serve`` of a checkpoint); images
  go as base64 data URLs, requests run concurrently with a bound, and the client retries 429/5xx and
  timeouts with exponential backoff. The API key is read from an environment variable and never stored.

``BACKENDS`` names them: the `--backend` choices, the kinds of a `KIND:MODEL` spec (``make_backend``) and the
backends the evaluator opens all come from it. A new backend is a ``RegisteredBackend`` subclass and one line there.

Messages use one neutral form: ``{"role": ..., "content": [{"type": "image", "image": PIL.Image} |
{"type": "text", "text": str}]}``; each backend converts it.
"""

from __future__ import annotations

import base64
import io
import os
import re
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

from gbtrain.config import option
from gbtrain.coords import PixelBudget
from gbtrain.judges import judge_from_spec as judge_from_spec  # re-exported: judges are named in judges.JUDGES
from gbtrain.vocabulary import one_of


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


def without_credentials(text: str) -> str:
    """A URL or backend spec with any `user:key@` part removed: what may be written to reports and logs."""
    return re.sub(r"//[^/@\s]*@", "//", text)


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


def _backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)


@dataclass(kw_only=True)
class ModelOptions:
    """The options of every tool that asks a checkpoint (eval/run_eval.py, eval/grade_pages.py,
    eval/select_checkpoint.py): which backend, how its inputs are drawn, how its engine is sized. Defined once here;
    each tool's options dataclass extends it, and gbtrain.cli.add_options makes every flag from the fields."""

    backend: str = option("vllm", "what runs the model", choices=_backend_names)
    coords: str | None = option(None, "default: the checkpoint's record, else its model_type or name")
    min_pixels: int | None = option(None, "default: the budget the recipe recorded in the checkpoint, else 50176")
    max_pixels: int | None = option(None, "default: as --min-pixels, else 1724800")
    max_tokens: int = option(8192, "most tokens generated per reply")
    max_model_len: int = option(32768, "vllm: context length (prompt and reply)")
    tensor_parallel_size: int = option(1, "vllm: GPUs per engine")
    data_parallel_size: int = option(1, "vllm: independent engines, a share of each batch")
    kv_cache_gib: float | None = option(None, "vllm: KV-cache size in GiB (default on CPU: a quarter of free memory, "
                                              "0.5-4 GiB; on a GPU: what --gpu-memory-utilization leaves)")
    gpu_memory_utilization: float = option(0.9, "vllm on a GPU: share of the card the engine (and a vllm judge) may "
                                                "take")
    structured: bool = option(False, "JSON-schema constrained output (single-turn)")
    base_url: str | None = option(None, "openai backend: endpoint (default $OPENAI_BASE_URL)")
    api_key_env: str = option("OPENAI_API_KEY", "openai backend: variable holding the key")
    concurrency: int = option(8, "openai backend: requests in flight")
    hf_batch_size: int = option(8, "hf backend: sequences per generate call")


@dataclass(frozen=True)
class VLLMMemory:
    """How much memory a vLLM engine may take; gbtrain sizes it instead of vLLM's node-wide defaults.

    On CPU vLLM would reserve `gpu_memory_utilization` (0.92) of the whole NUMA node and refuse to start
    when other processes hold more than 8% of it; an explicit KV-cache size skips that reservation.
    ``kv_cache_gib`` None means: on CPU, a quarter of the memory available at start, between 0.5 and
    4 GiB; on a GPU, whatever `gpu_memory_utilization` of the card leaves after the weights.
    """

    kv_cache_gib: float | None = None
    gpu_memory_utilization: float = 0.9

    def __post_init__(self):
        if self.kv_cache_gib is not None and not self.kv_cache_gib > 0:  # NaN included
            raise ValueError(f"kv_cache_gib must be positive, got {self.kv_cache_gib}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")

    def engine_kwargs(self, on_cpu: bool) -> dict:
        """`LLM(...)` keyword arguments for this machine."""
        kwargs: dict = {"gpu_memory_utilization": self.gpu_memory_utilization}
        gib = self.kv_cache_gib
        if gib is None and on_cpu:
            import psutil

            gib = min(4.0, max(0.5, psutil.virtual_memory().available / 2**30 / 4))
        if gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(gib * 2**30)
        return kwargs


@dataclass(frozen=True)
class BackendOptions:
    """How any registered backend is started; each reads the fields that concern it (defaults: EvalRun's)."""

    budget: PixelBudget = PixelBudget()
    max_model_len: int = 32768  # vllm
    tensor_parallel_size: int = 1  # vllm
    data_parallel_size: int = 1  # vllm
    structured: bool = False  # vllm: the engine-wide structured-output settings
    memory: VLLMMemory = VLLMMemory()  # vllm
    hf_batch_size: int = 8  # hf
    base_url: str | None = None  # openai
    api_key_env: str = "OPENAI_API_KEY"  # openai
    concurrency: int = 8  # openai
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


class VLLMBackend(RegisteredBackend):
    """vLLM offline engine. Pixel budget, context length, memory and parallelism come from the caller's config.

    On CPU the engine runs eagerly (compiling the graph costs minutes there and buys little).
    `data_parallel_size` N > 1 runs N independent engines, each in its own process on its own
    `tensor_parallel_size` GPUs (on CPU: its own cores), the way vLLM supports data parallelism for offline
    use of a dense model: a batch is cut into N contiguous parts and the replies come back in order."""

    name = "vllm"
    usage = "vllm:MODEL"

    def __init__(self, model: str, budget: PixelBudget = PixelBudget(), max_model_len: int = 32768,
                 tensor_parallel_size: int = 1, data_parallel_size: int = 1, structured: bool = False,
                 seed: int = 0, memory: VLLMMemory = VLLMMemory(), chat_template_kwargs: dict | None = None,
                 **engine_kwargs):
        from vllm.platforms import current_platform

        self.model = model
        self.chat_template_kwargs = chat_template_kwargs
        on_cpu = current_platform.is_cpu()
        kwargs = dict(model=model, max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                      limit_mm_per_prompt={"image": 1}, mm_processor_kwargs=budget.mm_processor_kwargs(),
                      seed=seed, enforce_eager=on_cpu, **memory.engine_kwargs(on_cpu))
        kwargs.update(engine_kwargs)
        if structured:
            kwargs["structured_outputs_config"] = {"backend": "xgrammar", "disable_any_whitespace": True}
        if data_parallel_size > 1:
            self.llm = None
            self.ranks = _start_ranks(kwargs, data_parallel_size, tensor_parallel_size, on_cpu)
        else:
            from vllm import LLM

            self.llm = LLM(**kwargs)
            self.ranks = []

    @classmethod
    def from_options(cls, model: str, options: BackendOptions) -> VLLMBackend:
        o = options
        return cls(model, o.budget, max_model_len=o.max_model_len, tensor_parallel_size=o.tensor_parallel_size,
                   data_parallel_size=o.data_parallel_size, structured=o.structured, memory=o.memory,
                   chat_template_kwargs=o.chat_template_kwargs)

    def tokenizer(self):
        if self.llm is not None:
            return self.llm.get_tokenizer()
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.model)

    def generate(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list:
        """vLLM's RequestOutputs (prompt token ids included) for a batch, in order."""
        if self.ranks:
            return _generate_on_ranks(self.ranks, conversations, sampling, self.chat_template_kwargs)
        return _generate(self.llm, conversations, sampling, self.chat_template_kwargs)

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]:
        return [o.outputs[0].text for o in self.generate(conversations, sampling)]

    def close(self) -> None:
        """Stop the engine(s) and give the memory back (before a judge model starts in the same process)."""
        import gc

        import torch

        for conn, proc in self.ranks:
            conn.send(None)
            proc.join(timeout=120)
        self.ranks = []
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _generate(llm, conversations: list[list[dict]], sampling: SamplingOptions, chat_template_kwargs) -> list:
    from vllm import SamplingParams

    kwargs = dict(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0, min_p=0.0,
                  presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=sampling.repetition_penalty,
                  max_tokens=sampling.max_tokens)
    if sampling.json_schema is not None:
        from vllm.sampling_params import StructuredOutputsParams

        kwargs["structured_outputs"] = StructuredOutputsParams(json=sampling.json_schema)
    messages = [_convert(c, lambda im: {"type": "image_pil", "image_pil": im}) for c in conversations]
    return llm.chat(messages, SamplingParams(**kwargs), use_tqdm=False, chat_template_kwargs=chat_template_kwargs)


def _rank_devices(rank: int, size: int, tensor_parallel_size: int, on_cpu: bool) -> dict[str, str]:
    """The environment that gives data-parallel rank `rank` its own GPUs (or, on CPU, its own cores)."""
    if on_cpu:
        cores = sorted(os.sched_getaffinity(0))
        mine = cores[rank::size] or cores
        return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, mine))}
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    if len(devices) < size * tensor_parallel_size:
        raise ValueError(f"data_parallel_size {size} x tensor_parallel_size {tensor_parallel_size} needs "
                         f"{size * tensor_parallel_size} GPUs; {len(devices)} are visible")
    return {"CUDA_VISIBLE_DEVICES": ",".join(devices[rank * tensor_parallel_size:(rank + 1) * tensor_parallel_size])}


def _serve_rank(conn, engine_kwargs: dict, env: dict[str, str]) -> None:
    """One data-parallel rank (a spawned process): an engine that answers batches until it receives None."""
    os.environ.update(env)
    from vllm import LLM

    try:
        llm = LLM(**engine_kwargs)
    except Exception as e:  # reported to the parent, which names the rank
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", None))
    while (request := conn.recv()) is not None:
        conversations, sampling, chat_template_kwargs = request
        conn.send(("ok", _generate(llm, conversations, sampling, chat_template_kwargs)))
    llm.llm_engine.engine_core.shutdown()


def _start_ranks(engine_kwargs: dict, size: int, tensor_parallel_size: int, on_cpu: bool) -> list:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per engine (CUDA cannot be forked)
    ranks = []
    for rank in range(size):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve_rank, name=f"vllm-dp{rank}",
                           args=(child, engine_kwargs, _rank_devices(rank, size, tensor_parallel_size, on_cpu)))
        proc.start()
        ranks.append((parent, proc))
    for rank, (conn, _) in enumerate(ranks):
        status, detail = _receive(conn, rank)
        if status != "ready":
            raise RuntimeError(f"vLLM data-parallel rank {rank} failed to start: {detail}")
    return ranks


def _receive(conn, rank: int):
    try:
        return conn.recv()
    except EOFError:
        raise RuntimeError(f"vLLM data-parallel rank {rank} exited (its log is above)") from None


def _generate_on_ranks(ranks: list, conversations: list[list[dict]], sampling: SamplingOptions,
                       chat_template_kwargs) -> list:
    """Contiguous parts to the ranks at once, then the replies in the original order."""
    n = len(ranks)
    bounds = [len(conversations) * i // n for i in range(n + 1)]
    busy = []
    for rank, (conn, _) in enumerate(ranks):
        part = conversations[bounds[rank]:bounds[rank + 1]]
        if part:
            conn.send((part, sampling, chat_template_kwargs))
            busy.append((rank, conn))
    outputs = []
    for rank, conn in busy:
        status, result = _receive(conn, rank)
        if status != "ok":
            raise RuntimeError(f"vLLM data-parallel rank {rank}: {result}")
        outputs += result
    return outputs


class HFBackend(RegisteredBackend):
    """transformers generate, left-padded batches of `batch_size` conversations."""

    name = "hf"
    usage = "hf:MODEL"

    def __init__(self, model: str, budget: PixelBudget = PixelBudget(), batch_size: int = 8, device: str | None = None,
                 chat_template_kwargs: dict | None = None):
        import torch
        from transformers import AutoModelForImageTextToText

        from gbtrain.modeling import load_processor

        self.model = model
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.processor = load_processor(model, budget)
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.processor.tokenizer.padding_side = "left"
        self.net = AutoModelForImageTextToText.from_pretrained(model, dtype=dtype).to(self.device).eval()
        self.batch_size = batch_size

    @classmethod
    def from_options(cls, model: str, options: BackendOptions) -> HFBackend:
        return cls(model, options.budget, batch_size=options.hf_batch_size,
                   chat_template_kwargs=options.chat_template_kwargs)

    def tokenizer(self):
        return self.processor.tokenizer

    def encode(self, conversations: list[list[dict]]):
        """Model inputs of one batch: chat template, image tokens at the budget, left padding."""
        return self.processor.apply_chat_template(conversations, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True, return_tensors="pt",
                                                  processor_kwargs={"padding": True}, **self.chat_template_kwargs)

    def generate(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[list[int]]:
        """Generated token ids per conversation (up to and including the stop token)."""
        import torch

        # Every field set here, None = off: the checkpoint's generation_config.json fills nothing else.
        sample = sampling.temperature > 0
        gen = dict(max_new_tokens=sampling.max_tokens, repetition_penalty=sampling.repetition_penalty,
                   do_sample=sample, temperature=sampling.temperature if sample else None,
                   top_p=sampling.top_p if sample else None, top_k=None, min_p=None,
                   pad_token_id=self.processor.tokenizer.pad_token_id)
        pad = self.processor.tokenizer.pad_token_id
        out_ids: list[list[int]] = []
        for i in range(0, len(conversations), self.batch_size):
            inputs = self.encode(conversations[i:i + self.batch_size]).to(self.device)
            with torch.no_grad():
                out = self.net.generate(**inputs, **gen)
            for row in out[:, inputs["input_ids"].shape[1]:].tolist():
                while row and row[-1] == pad:  # right padding of the shorter replies in a batch
                    row.pop()
                out_ids.append(row)
        return out_ids

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]:
        return self.processor.batch_decode(self.generate(conversations, sampling), skip_special_tokens=True)

    def close(self) -> None:
        import torch

        del self.net
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class OpenAIBackend(RegisteredBackend):
    """An OpenAI-compatible chat endpoint. The key comes from `api_key_env` (default OPENAI_API_KEY);
    a local server without auth needs none. Images are sent already resized to `budget`, the size that
    `qwen25` boxes are defined for (a server cannot be told the budget; one that resizes again with its own
    rule keeps an image whose sides are multiples of 28 inside its range)."""

    name = "openai"
    usage = "openai:MODEL[@URL]"
    loads_model = False

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, timeout: float = 300.0, max_retries: int = 6,
                 budget: PixelBudget = PixelBudget(), chat_template_kwargs: dict | None = None):
        from openai import OpenAI

        self.model = model
        self.chat_template_kwargs = chat_template_kwargs
        self.budget = budget
        url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.url, self.api_key_env = without_credentials(url), api_key_env
        self.openai_itself = "api.openai.com" in url
        self.concurrency = max(1, concurrency)
        self.client = OpenAI(base_url=url, api_key=os.environ.get(api_key_env) or "EMPTY", timeout=timeout,
                             max_retries=max_retries)

    @classmethod
    def from_options(cls, model: str, options: BackendOptions) -> OpenAIBackend:
        o = options
        return cls(model, o.base_url, api_key_env=o.api_key_env, concurrency=o.concurrency, budget=o.budget,
                   chat_template_kwargs=o.chat_template_kwargs)

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> OpenAIBackend:
        """`MODEL[@URL]`: the URL, when given, is the endpoint's."""
        model, _, url = target.partition("@")
        return cls.from_options(model, replace(options, base_url=url or None))

    def messages(self, conv: list[dict]) -> list[dict]:
        """The request's messages: images resized to the budget, as base64 JPEG data URLs."""
        return _convert(conv, lambda im: {"type": "image_url",
                                          "image_url": {"url": _jpeg_data_url(self.budget.resize(im))}})

    def _one(self, conv: list[dict], sampling: SamplingOptions) -> str:
        """One request. A refusal of this request (400, 413, 422) is a FailedReply; anything else (bad key,
        unknown model, an endpoint down after the client's retries) is an EndpointError that stops the run,
        which resumes later."""
        from openai import APIConnectionError, APIStatusError

        try:
            return self._request(conv, sampling)
        except APIStatusError as e:
            if e.status_code in (400, 413, 422):
                return FailedReply(f"{e.status_code} {type(e).__name__}: {str(e)[:300]}")
            hint = {401: f"check the API key (${self.api_key_env})", 403: f"check the API key (${self.api_key_env})",
                    404: "check the model name and the URL"}.get(e.status_code, "a rerun resumes what was answered")
            raise EndpointError(f"the endpoint {self.url} answered {e.status_code} for model {self.model!r} "
                                f"({str(e)[:200]}): {hint}") from None
        except APIConnectionError as e:  # timeouts included, after the client's retries
            raise EndpointError(f"the endpoint {self.url} cannot be reached ({e}): check the URL; a rerun resumes "
                                f"what was answered") from None

    def _request(self, conv: list[dict], sampling: SamplingOptions) -> str:
        kwargs = dict(model=self.model, messages=self.messages(conv), temperature=sampling.temperature,
                      top_p=sampling.top_p, max_tokens=sampling.max_tokens)
        # A self-hosted server (vLLM, SGLang) would otherwise take these from the checkpoint's
        # generation_config.json; OpenAI's own API refuses fields it does not know.
        extra = None if self.openai_itself else {"repetition_penalty": sampling.repetition_penalty, "top_k": -1}
        if self.chat_template_kwargs and not self.openai_itself:
            extra["chat_template_kwargs"] = self.chat_template_kwargs
        if sampling.json_schema is not None:
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "grading", "schema": sampling.json_schema}}
        resp = self.client.chat.completions.create(**kwargs, extra_body=extra)
        return resp.choices[0].message.content or ""

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda c: self._one(c, sampling), conversations))

    def close(self) -> None:
        self.client.close()


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
            raise EndpointError(f"judge {without_credentials(spec)}: {e}") from None

    return generate
