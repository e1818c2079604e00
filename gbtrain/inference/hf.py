"""transformers ``generate`` as a backend, batched with left padding (machines without vLLM)."""

from __future__ import annotations

from gbtrain.coords import PixelBudget
from gbtrain.inference.base import BackendOptions, RegisteredBackend, SamplingOptions
from gbtrain.inference.logprobs import Reply, with_logprobs


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
        if options.structured:
            raise ValueError("--structured decodes under the grading schema with the vllm or openai backend; the hf "
                             "backend generates freely: drop --structured or choose --backend vllm")
        return cls(model, options.budget, batch_size=options.hf_batch_size,
                   chat_template_kwargs=options.chat_template_kwargs)

    def tokenizer(self):
        return self.processor.tokenizer

    def encode(self, conversations: list[list[dict]]):
        """Model inputs of one batch: chat template, image tokens at the budget, left padding."""
        return self.processor.apply_chat_template(conversations, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True, return_tensors="pt",
                                                  processor_kwargs={"padding": True}, **self.chat_template_kwargs)

    def generate(self, conversations: list[list[dict]], sampling: SamplingOptions
                 ) -> list[tuple[list[int], list[float]]]:
        """Per conversation, the generated token ids (up to and including the stop token) and each one's
        log-probability under the model's raw logits (before the repetition penalty or temperature, as vLLM's
        default `raw_logprobs`), in float32. One step's distribution is kept at a time (ChosenLogprobs):
        `output_logits` would keep every step's, batch x vocabulary x reply length (by arithmetic, 8 replies x 8,192
        tokens x Qwen's 152k vocabulary x 2 bytes = 20 GB)."""
        import torch

        # Every field set here, None = off: the checkpoint's generation_config.json fills nothing else.
        sample = sampling.temperature > 0
        gen = dict(max_new_tokens=sampling.max_tokens, repetition_penalty=sampling.repetition_penalty,
                   do_sample=sample, temperature=sampling.temperature if sample else None,
                   top_p=sampling.top_p if sample else None, top_k=None, min_p=None,
                   pad_token_id=self.processor.tokenizer.pad_token_id)
        pad = self.processor.tokenizer.pad_token_id
        out: list[tuple[list[int], list[float]]] = []
        for i in range(0, len(conversations), self.batch_size):
            inputs = self.encode(conversations[i:i + self.batch_size]).to(self.device)
            recorder = ChosenLogprobs()
            hook = self.net.register_forward_hook(recorder, with_kwargs=True)
            try:
                with torch.no_grad():
                    sequences = self.net.generate(**inputs, **gen)
            finally:
                hook.remove()
            new = sequences[:, inputs["input_ids"].shape[1]:]
            for row, lps in zip(new.tolist(), recorder.finish(new).tolist(), strict=True):
                while row and row[-1] == pad:  # right padding of the shorter replies in a batch
                    row.pop()
                out.append((row, lps[:len(row)]))
        return out

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[Reply]:
        tok = self.processor.tokenizer
        return [with_logprobs(tok.decode(ids, skip_special_tokens=True), tok, ids, lps)
                for ids, lps in self.generate(conversations, sampling)]

    def close(self) -> None:
        import torch

        del self.net
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class ChosenLogprobs:
    """A forward hook on the model that records each generated token's log-probability under the raw logits while
    holding one step's distribution: generate's forward k receives the token chosen at step k - 1 (its last input
    id), whose log-probability is read from the distribution kept from forward k - 1; `finish` reads the last."""

    def __init__(self):
        self.previous = None
        self.steps: list = []

    def __call__(self, module, args, kwargs, output):
        import torch

        if self.previous is not None:
            self.steps.append(self.previous.gather(-1, kwargs["input_ids"][:, -1:]).squeeze(-1))
        self.previous = torch.log_softmax(output.logits[:, -1, :].float(), dim=-1)

    def finish(self, new_ids):
        """The (batch, generated tokens) log-probabilities of `new_ids`, the ids generate returned."""
        import torch

        if self.previous is None:
            return torch.zeros(new_ids.shape, dtype=torch.float32)
        steps = [*self.steps, self.previous.gather(-1, new_ids[:, -1:]).squeeze(-1)]
        return torch.stack(steps, dim=1)[:, :new_ids.shape[1]]
