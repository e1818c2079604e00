"""Training batches: tokenization with the real processor, assistant-only labels for any number of
turns, and padding-free packing with per-sample 3D mRoPE positions.

TRL refuses packing, padding-free batches and generic multi-turn masking for vision-language data,
so gbtrain brings its own collator:

- ``ConversationEncoder`` renders a conversation with the processor's chat template, expands the image
  tokens, and labels exactly the assistant contents and their ``<|im_end|>``: system, user, image
  tokens and each ``<|im_start|>assistant\\n`` header are -100.
- ``GradingCollator(packing=False)`` right-pads a batch (used with length-grouped sampling).
- ``GradingCollator(packing=True)`` concatenates the samples of a pack into ONE row with no padding.
  Position ids are ``[4, 1, L]``: row 0 restarts at 0 for every sample (transformers builds a
  block-diagonal causal mask from it for sdpa/eager/flex, and flash-attention uses varlen), rows 1-3
  are each sample's mRoPE ids from the model's own ``get_rope_index``. With ``seq_lens=True`` a packed
  row also carries its samples' lengths for the flash-attn varlen kernel (gbtrain.train.attention). With
  ``pad_to_multiple_of`` a row is padded up to a multiple of that many tokens by a padding sample of its own
  (positions restarting at 0, no labels: it attends to itself only, and changes no sample's loss or gradient), so a
  compiled kernel sees a few row lengths instead of one per pack. Packed rows carry their count of real tokens
  (``REAL_TOKENS_KEY``, taken out before the model call) for the throughput meter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from gbtrain.data.conversations import with_image_placeholder
from gbtrain.families import family_of_config
from gbtrain.train.attention import SEQ_LENS_KEY

IGNORE_INDEX = -100
REAL_TOKENS_KEY = "num_real_tokens"  # a packed row's tokens less its padding sample (an int; not a model input)


@dataclass
class EncodedSample:
    input_ids: torch.Tensor  # (L,)
    labels: torch.Tensor  # (L,)
    mm_token_type_ids: torch.Tensor  # (L,)
    pixel_values: torch.Tensor | None  # (patches, dim)
    image_grid_thw: torch.Tensor | None  # (images, 3)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


class ConversationEncoder:
    """Tokenize one conversation (messages + images) and build its assistant-only labels."""

    def __init__(self, processor):
        self.processor = processor
        tok = processor.tokenizer
        self.im_start = tok.convert_tokens_to_ids("<|im_start|>")
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")
        self.header = tok.encode("assistant\n", add_special_tokens=False)

    def encode(self, messages: list[dict], images: list) -> EncodedSample:
        structured = with_image_placeholder(messages) if images else [
            {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in messages]
        text = self.processor.apply_chat_template(structured, tokenize=False)
        enc = self.processor(text=[text], images=images or None, return_tensors="pt")
        ids = enc["input_ids"][0]
        mm = enc.get("mm_token_type_ids")
        return EncodedSample(
            input_ids=ids,
            labels=self.assistant_labels(ids),
            mm_token_type_ids=mm[0] if mm is not None else torch.zeros_like(ids),
            pixel_values=enc.get("pixel_values"),
            image_grid_thw=enc.get("image_grid_thw"),
        )

    def assistant_labels(self, ids: torch.Tensor) -> torch.Tensor:
        """-100 everywhere except each assistant turn's content and its <|im_end|>."""
        labels = torch.full_like(ids, IGNORE_INDEX)
        seq = ids.tolist()
        h = len(self.header)
        i = 0
        while i < len(seq):
            if seq[i] == self.im_start and seq[i + 1:i + 1 + h] == self.header:
                start = i + 1 + h
                end = start
                while end < len(seq) and seq[end] != self.im_end:
                    end += 1
                stop = min(end + 1, len(seq))  # include <|im_end|>
                labels[start:stop] = ids[start:stop]
                i = stop
            else:
                i += 1
        return labels


class RopeIndex:
    """The model's own mRoPE index logic without its weights (picklable for dataloader workers)."""

    def __init__(self, config):
        import transformers

        family = family_of_config(config)  # raises for a model gbtrain does not know
        # the family's backbone class for this model type (Qwen2VLModel for qwen2_vl, Qwen3VLMoeModel for the MoE)
        self._cls = getattr(transformers, family.backbone_classes[family.model_types.index(config.model_type)])
        self.config = config

    def __call__(self, sample: EncodedSample) -> torch.Tensor:
        """(3, L) mRoPE position ids of one sample."""
        proxy = _RopeProxy(self.config, self._cls)
        pos, _ = self._cls.get_rope_index(
            proxy, sample.input_ids[None], mm_token_type_ids=sample.mm_token_type_ids[None],
            image_grid_thw=sample.image_grid_thw, attention_mask=torch.ones_like(sample.input_ids)[None])
        return pos[:, 0, :]


class _RopeProxy:
    """Just enough of the model object for `get_rope_index` (config and its vision-position helper)."""

    def __init__(self, config, model_cls):
        self.config = config
        self._cls = model_cls

    def __getattr__(self, name):
        attr = getattr(self._cls, name)
        return attr.__get__(self) if callable(attr) else attr


class GradingCollator:
    """Builds model inputs from examples ({"messages", "images"}) or packs ({"pack": [row indices]} of
    `source`, the dataset the packs were planned over)."""

    def __init__(self, processor, max_length: int, packing: bool = False, rope_index: RopeIndex | None = None,
                 pad_to_multiple_of: int | None = None, source=None, seq_lens: bool = False):
        if packing and rope_index is None:
            raise ValueError("packing needs the model's rope index (RopeIndex(model.config))")
        self.source = source
        self.encoder = ConversationEncoder(processor)
        self.pad_id = processor.tokenizer.pad_token_id
        self.max_length = max_length
        self.packing = packing
        self.rope_index = rope_index
        self.pad_to_multiple_of = pad_to_multiple_of
        self.seq_lens = seq_lens  # packed rows also carry their samples' lengths (flash-attn varlen)

    def encode_all(self, examples: list[dict]) -> list[EncodedSample]:
        flat = []
        for item in examples:
            flat += [self.source[i] for i in item["pack"]] if "pack" in item else [item]
        out = []
        for ex in flat:
            s = self.encoder.encode(ex["messages"], list(ex.get("images") or []))
            if len(s) > self.max_length:
                # Lengths are checked before training (gbtrain.train.trainer.filter_by_length); reaching this means
                # the check was skipped, and truncating would cut through image tokens.
                raise ValueError(f"sample {ex.get('sample_id', '?')} has {len(s)} tokens > max_length "
                                 f"{self.max_length}; filter the dataset first")
            out.append(s)
        return out

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        samples = self.encode_all(examples)
        return self.pack(samples) if self.packing else self.pad(samples)

    def pad(self, samples: list[EncodedSample]) -> dict[str, torch.Tensor]:
        return pad_samples(samples, self.pad_id, self.pad_to_multiple_of)

    def pack(self, samples: list[EncodedSample]) -> dict[str, torch.Tensor]:
        return pack_samples(samples, [self.rope_index(s) for s in samples], self.pad_id, self.pad_to_multiple_of,
                            self.seq_lens)


def pad_samples(samples: list[EncodedSample], pad_id: int, pad_to_multiple_of: int | None = None) -> dict:
    """A right-padded batch of `samples` (to the longest, rounded up to `pad_to_multiple_of`) with its mask."""
    length = max(len(s) for s in samples)
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    n = len(samples)
    input_ids = torch.full((n, length), pad_id, dtype=torch.long)
    labels = torch.full((n, length), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((n, length), dtype=torch.long)
    mm = torch.zeros((n, length), dtype=torch.long)
    for i, s in enumerate(samples):
        k = len(s)
        input_ids[i, :k], labels[i, :k], attention[i, :k], mm[i, :k] = s.input_ids, s.labels, 1, s.mm_token_type_ids
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention, "mm_token_type_ids": mm,
            **vision_inputs(samples)}


def pack_samples(samples: list[EncodedSample], mrope: list[torch.Tensor], pad_id: int,
                 pad_to_multiple_of: int | None = None, seq_lens: bool = False) -> dict:
    """One padding-free row of `samples` with their (3, L) mRoPE ids `mrope`; padded up to `pad_to_multiple_of`
    by a sample of its own (the module docstring says why); the real-token count under REAL_TOKENS_KEY."""
    real = sum(len(s) for s in samples)
    mrope = list(mrope)
    if pad_to_multiple_of and real % pad_to_multiple_of:
        n = pad_to_multiple_of - real % pad_to_multiple_of
        samples = [*samples, EncodedSample(torch.full((n,), pad_id), torch.full((n,), IGNORE_INDEX),
                                           torch.zeros(n, dtype=torch.long), None, None)]
        mrope.append(torch.arange(n).expand(3, n))
    text_pos = torch.cat([torch.arange(len(s)) for s in samples])
    return {
        "input_ids": torch.cat([s.input_ids for s in samples])[None],
        "labels": torch.cat([s.labels for s in samples])[None],
        "mm_token_type_ids": torch.cat([s.mm_token_type_ids for s in samples])[None],
        "position_ids": torch.cat([text_pos[None], torch.cat(mrope, dim=1)])[:, None, :],
        **vision_inputs(samples),
        **({SEQ_LENS_KEY: [len(s) for s in samples]} if seq_lens else {}),
        REAL_TOKENS_KEY: real,
    }


def vision_inputs(samples: list[EncodedSample]) -> dict[str, torch.Tensor]:
    """The samples' image patches and grids, concatenated in order (none for text-only samples)."""
    pv = [s.pixel_values for s in samples if s.pixel_values is not None]
    grid = [s.image_grid_thw for s in samples if s.image_grid_thw is not None]
    return {"pixel_values": torch.cat(pv), "image_grid_thw": torch.cat(grid)} if pv else {}


def pop_real_tokens(batch: dict) -> int:
    """Take a packed row's REAL_TOKENS_KEY out of the batch (it is no model input) and return the tokens that are not
    padding: that count, or for a padded batch its attention mask's sum."""
    real = batch.pop(REAL_TOKENS_KEY, None)
    if real is not None:
        return int(real)
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())


def plan_packs(lengths: list[int], budget: int, seed: int = 0) -> list[list[int]]:
    """Group sample indices into packs of at most `budget` tokens (first-fit decreasing), then shuffle
    the packs. A sample longer than the budget gets a pack of its own."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    packs: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = lengths[i]
        for p, free in enumerate(room):
            if n <= free:
                packs[p].append(i)
                room[p] -= n
                break
        else:
            packs.append([i])
            room.append(budget - n)
    random.Random(seed).shuffle(packs)
    return packs


def packed_dataset(base, packs: list[list[int]]):
    """A datasets.Dataset of packs: row k = {"pack": row indices of `base`, "images": their image paths,
    "num_tokens": their total}. The collator (source=base) turns a pack into one padding-free row."""
    from datasets import Dataset

    paths = base.select_columns(["images"]).cast_column("images", _path_feature())["images"]
    lengths = base["num_tokens"]
    return Dataset.from_dict({
        "pack": packs,
        "images": [[im["path"] if isinstance(im, dict) else im for i in p for im in paths[i]] for p in packs],
        "num_tokens": [sum(lengths[i] for i in p) for p in packs],
    })


def _path_feature():
    from datasets import Image, List

    return List(Image(decode=False))
