"""The vLLM offline engine as a backend: a whole batch is ONE ``LLM.chat`` call, or, with data parallelism,
one call per engine process (the rank helpers below)."""

from __future__ import annotations

import functools
import os

from gbtrain.coords import PixelBudget
from gbtrain.inference.base import (
    BackendOptions,
    RegisteredBackend,
    SamplingOptions,
    VLLMMemory,
    convert_messages,
    kv_cache_bytes,
)
from gbtrain.inference.logprobs import Reply, with_logprobs


class VLLMBackend(RegisteredBackend):
    """vLLM offline engine. Pixel budget, context length, memory and parallelism come from the caller's config.

    On CPU the engine runs eagerly (compiling the graph costs minutes there and buys little) and in the caller's
    process, unless VLLM_ENABLE_V1_MULTIPROCESSING says otherwise.
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
        if on_cpu:  # the engine in this process: a spawned engine-core process re-imports vLLM (~20 s per engine)
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        kwargs = dict(model=model, max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                      limit_mm_per_prompt={"image": 1}, mm_processor_kwargs=budget.mm_processor_kwargs(),
                      seed=seed, enforce_eager=on_cpu,
                      **memory.engine_kwargs(on_cpu, kv_cache_bytes(model, max_model_len) if on_cpu else None))
        kwargs.update(engine_kwargs)
        if structured:  # whitespace as the model writes it: the builder's targets have a space after , and :
            kwargs["structured_outputs_config"] = {"backend": "xgrammar", "disable_any_whitespace": False}
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

    @functools.cached_property
    def _rank_tokenizer(self):
        """The tokenizer that measures the replies of the data-parallel ranks (loaded once)."""
        return self.tokenizer()

    def generate(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list:
        """vLLM's RequestOutputs (prompt token ids included) for a batch, in order."""
        if self.ranks:
            return _generate_on_ranks(self.ranks, conversations, sampling, self.chat_template_kwargs)
        return _generate(self.llm, conversations, sampling, self.chat_template_kwargs)

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[Reply]:
        """The replies with their sampled tokens' logprobs (vLLM's raw logprobs, before penalties)."""
        tok = self.llm.get_tokenizer() if self.llm is not None else self._rank_tokenizer
        replies = []
        for o in self.generate(conversations, sampling):
            c = o.outputs[0]
            lps = [step[t].logprob for t, step in zip(c.token_ids, c.logprobs or [], strict=False)]
            replies.append(with_logprobs(c.text, tok, list(c.token_ids), lps) if len(lps) == len(c.token_ids)
                           else c.text)
        return replies

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
                  max_tokens=sampling.max_tokens, logprobs=0)  # 0: the sampled token's logprob only
    if sampling.json_schema is not None:
        from vllm.sampling_params import StructuredOutputsParams

        kwargs["structured_outputs"] = StructuredOutputsParams(json=sampling.json_schema)
    messages = [convert_messages(c, lambda im: {"type": "image_pil", "image_pil": im}) for c in conversations]
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
    try:
        for rank, conn in busy:
            status, result = _receive(conn, rank)
            if status != "ok":
                raise RuntimeError(f"vLLM data-parallel rank {rank}: {result}")
            outputs += result
    except RuntimeError:  # the other ranks would wait for a request forever, and the exit for them
        for _, proc in ranks:
            proc.terminate()
        raise
    return outputs


