"""Does a packed row train exactly as its samples alone? Loss and every trainable gradient of one packed row, through
each attention kernel, against the samples run one by one through sdpa, on a layer-cut copy of the architecture.

    PYTHONPATH=.:scripts python scripts/check_packing.py --model-config configs/bench/qwen25vl_7b \
        --lengths configs/bench/mixed_l1_l3_lengths.json

The cut keeps the real widths, heads and vocabulary (2 decoder layers, 4 vision blocks with one full-attention block
by default), with random weights and random LoRA B matrices (so every adapter has a gradient), in float32 with TF32
off, so the only differences left are summation order: a relative error of 1e-4 on the loss and 1e-3 on each
parameter's gradient (its norm) is the tolerance. The packed row is padded to its pack length (one compiled shape),
as training pads it. A control row whose positions do not restart between samples (sdpa then sees one causal
sequence: attention leaks across samples) must fail that tolerance, or the check could not tell. One JSON line per
variant and a verdict; exit status 1 when a kernel fails or the control passes.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench_gpu import synthetic_rows
from cut_config import cut_config

from gbtrain.cli import parse_options, user_errors
from gbtrain.config import option

LOSS_TOLERANCE, GRAD_TOLERANCE = 1e-4, 1e-3
KERNELS = {"sdpa": "sdpa", "flex": "flex_attention"}


def build(model_dir: Path, attention: str, lora_r: int, device: str, state: dict | None):
    """The recipe's model (setup_model: LoRA, vision frozen, merger trained) in float32 with `attention`; the
    weights of `state` when given, else random ones with random LoRA B matrices."""
    import torch

    from gbtrain.train.config import FreezeSettings, LoraSettings, TrainConfig
    from gbtrain.train.modeling import check_options, setup_model

    cfg = TrainConfig(model=str(model_dir), dataset="-", output_dir="-", model_init="random", precision="fp32",
                      lora=LoraSettings(r=lora_r, alpha=2 * lora_r, dropout=0.0),
                      freeze=FreezeSettings(vision_tower=True, merger=False), attn_implementation=attention)
    check_options(cfg)
    torch.manual_seed(0)
    with torch.device(device):
        model = setup_model(cfg)
    if state is None:
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
    else:
        model.load_state_dict(state)
    return model.train()


def loss_and_grads(model, batch: dict, device: str):
    """Summed token loss and summed gradients, with the count of predicted tokens: rows of different sizes add."""
    batch = {k: v.to(device) for k, v in batch.items()}
    model.zero_grad(set_to_none=True)
    count = int((batch["labels"][:, 1:] != -100).sum())
    loss = model(**batch, use_cache=False).loss * count
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads, count


def compare(label: str, got, want, tolerance_met: bool | None = None) -> dict:
    import torch

    (loss, grads, count), (ref_loss, ref_grads, ref_count) = got, want
    if grads.keys() != ref_grads.keys() or count != ref_count:
        return {"variant": label, "passed": False, "problem": f"{len(grads)} gradients and {count} predicted tokens, "
                                                              f"against {len(ref_grads)} and {ref_count} alone"}
    loss_err = abs(loss - ref_loss) / abs(ref_loss)
    errors = {n: float(torch.linalg.norm(grads[n] - g) / torch.linalg.norm(g).clamp_min(1e-30))
              for n, g in ref_grads.items()}
    worst = max(errors, key=errors.get)
    passed = loss_err <= LOSS_TOLERANCE and errors[worst] <= GRAD_TOLERANCE
    return {"variant": label, "passed": passed, "loss_rel_error": float(f"{loss_err:.3g}"),
            "worst_grad_rel_error": float(f"{errors[worst]:.3g}"), "worst_parameter": worst,
            "parameters_compared": len(errors), "predicted_tokens": count}


def run(args) -> list[dict]:
    import torch

    from gbtrain.train.collator import pack_samples, pad_samples, pop_real_tokens

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = cut_config(args.model_config, args.layers, args.vision_depth, Path(tmp) / "cut")
        reference = build(model_dir, "sdpa", args.lora_r, device, None)
        base = reference.base_model.model
        lengths = json.loads(Path(args.lengths).read_text(encoding="utf-8"))["samples"][:args.samples]
        rows = synthetic_rows(base, lengths, device)
        pad_id = base.config.get_text_config().pad_token_id or 0
        alone = [loss_and_grads(reference, pad_samples([s], pad_id), device)
                 for s, _ in rows]
        want = (sum(a[0] for a in alone), {n: sum(a[1][n] for a in alone) for n in alone[0][1]},
                sum(a[2] for a in alone))
        packed = pack_samples([s for s, _ in rows], [m for _, m in rows], pad_id, args.pack_tokens)
        pop_real_tokens(packed)
        results = []
        for label, attention in KERNELS.items():
            try:
                model = reference if attention == "sdpa" else build(model_dir, attention, args.lora_r, device,
                                                                    reference.state_dict())
            except ValueError as e:  # a kernel this machine cannot train with (flex attention on a CPU)
                results.append({"variant": label, "skipped": str(e).splitlines()[-1].strip()})
                continue
            results.append(compare(label, loss_and_grads(model, packed, device), want))
        leaking = dict(packed, position_ids=packed["position_ids"].clone())
        leaking["position_ids"][0] = torch.arange(leaking["position_ids"].shape[-1])  # no restart: one sequence
        control = compare("sdpa-leak-control", loss_and_grads(reference, leaking, device), want)
        results.append({**control, "passed": not control["passed"], "expected": "outside the tolerance"})
    return results


@dataclass
class CheckPacking:
    """The check's options; each field is one of its flags (gbtrain.cli)."""

    model_config: str | None = option(None, "folder with the architecture's config.json (weights are random)")
    lengths: str | None = option(None, "recorded sample lengths (scripts/bench_gpu.py --record-lengths)")
    samples: int = option(4, "recorded samples packed into the row (the first ones: an L3 page and three L1 crops)")
    pack_tokens: int = option(8192, "the row is padded to a multiple of this (as training pads it)")
    layers: int = option(2, "decoder layers kept")
    vision_depth: int = option(4, "vision blocks kept")
    lora_r: int = option(8, "LoRA rank")


def main() -> None:
    args = parse_options(CheckPacking, __doc__)
    with user_errors("check_packing"):
        if not (args.model_config and args.lengths):
            raise ValueError("--model-config and --lengths are required")
        if not (1 <= args.samples <= 64 and 1 <= args.layers <= 512 and 1 <= args.vision_depth <= 512):
            raise ValueError("--samples must be 1-64, --layers and --vision-depth 1-512")
    results = run(args)
    for result in results:
        print(json.dumps({"check": "packing", **result}), flush=True)
    checked = [r for r in results if "skipped" not in r]
    verdict = all(r["passed"] for r in checked)
    print(json.dumps({"check": "packing_verdict", "passed": verdict, "loss_tolerance": LOSS_TOLERANCE,
                      "grad_tolerance": GRAD_TOLERANCE,
                      "skipped": [r["variant"] for r in results if "skipped" in r]}), flush=True)
    raise SystemExit(0 if verdict else 1)


if __name__ == "__main__":
    main()
