"""Stage 3, inference: a batch of chat conversations in, one reply per conversation out.

- ``base``: the neutral message form, sampling options, errors, vLLM memory sizing, the backend interface.
- ``vllm``, ``hf``, ``openai``: the backends (vLLM offline engine with data-parallel ranks, transformers
  ``generate``, any OpenAI-compatible endpoint).
- ``registry``: ``BACKENDS``, ``make_backend``, the shared model flags (``ModelOptions``) and the judge's backend.
- ``logprobs``: token logprobs as the backends return them, in one form.
"""
