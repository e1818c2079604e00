"""transformers ``generate`` as a backend, batched with left padding (machines without vLLM)."""

from __future__ import annotations

from gbtrain.coords import PixelBudget
from gbtrain.inference.base import BackendOptions, RegisteredBackend, SamplingOptions


class HFBackend(RegisteredBackend):
    """transformers generate, left-padded batches of `batch_size` conversations."""

    name = "hf"
    usage = "hf:MODEL"

    def __init__(self, model: str, budget: PixelBudget = PixelBudget(), batch_size: int = 8, device: str | None = None,
                 chat_template_kwargs: dict | None = None):
        import torch
        from transformers import AutoModelForImageTextToText

        from gbtrain.train.modeling import load_processor

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


