"""Evaluator throughput: records/s of the vLLM backend vs the hf backend on the same model and records.

    python scripts/bench_eval.py --model runs/tiny-qwen25vl --data runs/synth [--records 24] [--max-tokens 64]

Both backends answer the same L1 single-turn prompts (greedy, same max_tokens); each runs in a child
process with its own warm-up batch excluded from the timing. Target: vLLM >= 3x hf.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

from bench_child import emit, run_child

from gbtrain.cli import parse_options
from gbtrain.config import option

TIMED = ("vllm", "hf")  # the backends compared


@dataclass
class BenchEval:
    """The benchmark's options; each field is one of its flags (gbtrain.cli)."""

    model: str = option(help="the model both backends load (hub id or folder)")
    data: str = option(help="GradingBench-layout folder; its first L1 records are asked")
    records: int = option(24, "records timed per backend (two more warm it up)")
    max_tokens: int = option(64, "most tokens generated per reply (greedy)")
    hf_batch: int = option(8, "hf backend: sequences per generate call")
    kv_cache_gib: float | None = option(None, "vllm KV cache (default: gbtrain sizes it)")
    backend: str | None = option(None, "time this backend only, in this process (what each child runs; default: "
                                        "both, each in a child process)", choices=TIMED)


def run_backend(args: BenchEval) -> dict:
    from gbtrain.data.annotations import load_level
    from gbtrain.evaluation.engine import EvalOptions, Evaluator, Setting, default_budget
    from gbtrain.inference.base import BackendOptions, SamplingOptions, VLLMMemory, message
    from gbtrain.inference.registry import BACKENDS
    from gbtrain.vocabulary import ANSWER_FREE, L1

    budget = default_budget(args.model)
    options = BackendOptions(budget, max_model_len=4096, memory=VLLMMemory(args.kv_cache_gib),
                             hf_batch_size=args.hf_batch)
    backend = BACKENDS[args.backend].from_options(args.model, options)
    records = load_level(args.data, L1).records[:args.records + 2]
    sampling = SamplingOptions(max_tokens=args.max_tokens)
    ev = Evaluator(backend, args.data, "unused", EvalOptions("qwen25", budget, sampling), progress=False)
    setting = Setting(L1, ANSWER_FREE)
    convs = [[message(ev.first_prompt(r, setting), ev.image(r))] for r in records]
    backend.chat(convs[:2], ev.opts.sampling)  # warm-up
    start = time.perf_counter()
    replies = backend.chat(convs[2:], ev.opts.sampling)
    took = time.perf_counter() - start
    return {"backend": args.backend, "records": len(replies), "seconds": round(took, 2),
            "records_per_s": round(len(replies) / took, 3)}


def main() -> None:
    args = parse_options(BenchEval, __doc__)
    if args.backend:
        emit(run_backend(args))
        return
    results = {}
    for backend in TIMED:
        cmd = [sys.executable, __file__, "--model", args.model, "--data", args.data, "--records", str(args.records),
               "--max-tokens", str(args.max_tokens), "--hf-batch", str(args.hf_batch), "--backend", backend,
               *(["--kv-cache-gib", str(args.kv_cache_gib)] if args.kv_cache_gib else [])]
        results[backend] = run_child(cmd, backend)
        print(json.dumps({"bench": "eval", **results[backend]}), flush=True)
    ratio = results["vllm"]["records_per_s"] / max(results["hf"]["records_per_s"], 1e-9)
    print(json.dumps({"bench": "eval_ratio", "vllm_over_hf": round(ratio, 2), "target": 3.0}))


if __name__ == "__main__":
    main()
