"""Reuse a frozen vision encoder's features across epochs: with the tower and its merger frozen, an image's
features are a function of its pixels alone, so each distinct image is encoded once and read back after that.

What it saves is the encoder's share of a step times the share of passes after the first: 1.06x real tokens/s
over three passes for the demo's miniature (scripts/bench_vision_cache.py, docs/benchmarks.md), less for a 7B
language model. It costs host memory (an image's features are its merged tokens x the language model's width),
hence a budget in MiB."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from gbtrain.train.modeling import MERGER, VISION, backbone, part_of


def _image_key(patches: torch.Tensor, grid: torch.Tensor) -> bytes:
    """A digest of one image's patch rows and its grid: equal pixels at an equal size give equal features."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(grid.detach().cpu().numpy().tobytes())
    digest.update(patches.detach().cpu().contiguous().numpy().tobytes())
    return digest.digest()


@dataclass
class VisionFeatureCache:
    """Features per image (the merged tokens, and Qwen3-VL's DeepStack features), kept on the CPU up to
    `budget_bytes`; images past the budget are encoded every time. Counts images encoded (misses) and images
    read back (hits, a repeat within a batch included)."""

    budget_bytes: int
    entries: dict[bytes, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = field(default_factory=dict)
    used_bytes: int = 0
    hits: int = 0
    misses: int = 0

    def get(self, key: bytes, device: torch.device):
        found = self.entries.get(key)
        if found is not None:
            features, deepstack = found
            return features.to(device), tuple(f.to(device) for f in deepstack)
        return None

    def put(self, key: bytes, features: torch.Tensor, deepstack: tuple[torch.Tensor, ...]) -> None:
        size = sum(t.numel() * t.element_size() for t in (features, *deepstack))
        if key in self.entries or self.used_bytes + size > self.budget_bytes:
            return
        self.entries[key] = (features.detach().cpu(), tuple(f.detach().cpu() for f in deepstack))
        self.used_bytes += size

    def summary(self) -> dict[str, int | float]:
        return {"vision_cache_images": len(self.entries), "vision_cache_used_mib": round(self.used_bytes / 2**20, 1),
                "vision_cache_hits": self.hits, "vision_cache_misses": self.misses}


def install_vision_cache(model, budget_mib: int) -> VisionFeatureCache:
    """Route the backbone's `get_image_features` through a cache. Refused unless every vision parameter (tower
    and merger) is frozen (a trainable one would make yesterday's features wrong), and under ZeRO-3."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        raise ValueError(f"vision_cache_mib={budget_mib} under ZeRO-3: a rank that reads its features from the cache "
                         f"would skip the tower's collective gathers while others run them; set vision_cache_mib=0")
    trainable = [n for n, p in model.named_parameters() if p.requires_grad and part_of(n) in (VISION, MERGER)]
    if trainable:
        raise ValueError(f"vision_cache_mib={budget_mib} needs freeze.vision_tower=true and freeze.merger=true "
                         f"({len(trainable)} vision parameters train, e.g. {trainable[0]}); or set vision_cache_mib=0")
    inner = backbone(model)
    encode = inner.get_image_features
    cache = VisionFeatureCache(budget_mib * 2**20)
    output_class = None

    def cached_image_features(pixel_values, image_grid_thw=None, **kwargs):
        nonlocal output_class
        patches = torch.split(pixel_values, image_grid_thw.prod(-1).tolist())
        keys = [_image_key(p, g) for p, g in zip(patches, image_grid_thw, strict=True)]
        found = [cache.get(k, pixel_values.device) for k in keys]
        missing: dict[bytes, list[int]] = {}  # each new image once, however often the batch holds it
        for i, key in enumerate(keys):
            if found[i] is None:
                missing.setdefault(key, []).append(i)
        cache.misses += len(missing)
        cache.hits += len(keys) - len(missing)
        if missing:
            firsts = [places[0] for places in missing.values()]
            encoded = encode(torch.cat([patches[i] for i in firsts]), image_grid_thw[firsts], **kwargs)
            output_class = type(encoded)
            levels = getattr(encoded, "deepstack_features", None) or []
            for j, (key, places) in enumerate(missing.items()):
                features = (encoded.pooler_output[j], tuple(level[j] for level in levels))
                cache.put(key, *features)
                for i in places:
                    found[i] = features
        # what the model's forward reads: the merged tokens per image (and DeepStack's per level), in order
        output = output_class(pooler_output=tuple(f for f, _ in found))
        if found[0][1]:
            output.deepstack_features = [tuple(f[1][level] for f in found) for level in range(len(found[0][1]))]
        return output

    inner.get_image_features = cached_image_features
    return cache
