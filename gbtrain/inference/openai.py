"""Any OpenAI-compatible chat endpoint as a backend (a hosted model, or ``vllm serve`` of a checkpoint): images go
as base64 data URLs, requests run concurrently with a bound, and the client retries 429/5xx and timeouts with
exponential backoff. The API key is read from an environment variable and never stored."""

from __future__ import annotations

import base64
import io
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import urlsplit

from gbtrain.coords import PixelBudget
from gbtrain.inference.base import (
    BackendOptions,
    EndpointError,
    FailedReply,
    RegisteredBackend,
    SamplingOptions,
    convert_messages,
)
from gbtrain.inference.logprobs import Reply
from gbtrain.text import redact, register_secret


def _jpeg_data_url(image) -> str:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=92)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


class OpenAIBackend(RegisteredBackend):
    """An OpenAI-compatible chat endpoint. The key comes from `api_key_env` (default OPENAI_API_KEY);
    a local server without auth needs none. Images are sent already resized to `budget`, the size that
    `qwen25` boxes are defined for (a server cannot be told the budget; one that resizes again with its own
    rule keeps an image whose sides are multiples of 28 inside its range)."""

    name = "openai"
    usage = "openai:MODEL[@URL]"
    loads_model = False

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, timeout: float = 180.0, max_retries: int = 2,
                 budget: PixelBudget = PixelBudget(), chat_template_kwargs: dict | None = None):
        from openai import OpenAI

        self.model = model
        self.chat_template_kwargs = chat_template_kwargs
        self.budget = budget
        url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        register_secret(os.environ.get(api_key_env))  # an endpoint may echo it in an error: never written
        register_secret(urlsplit(url).password)
        self.url, self.api_key_env = redact(url), api_key_env
        self.openai_itself = "api.openai.com" in url
        self.concurrency = max(1, concurrency)
        self.timeout, self.max_retries = timeout, max_retries
        self.client = OpenAI(base_url=url, api_key=os.environ.get(api_key_env) or "EMPTY", timeout=timeout,
                             max_retries=max_retries)

    @classmethod
    def from_options(cls, model: str, options: BackendOptions) -> OpenAIBackend:
        o = options
        return cls(model, o.base_url, api_key_env=o.api_key_env, concurrency=o.concurrency, timeout=o.request_timeout,
                   max_retries=o.max_retries, budget=o.budget, chat_template_kwargs=o.chat_template_kwargs)

    @classmethod
    def from_spec(cls, target: str, options: BackendOptions) -> OpenAIBackend:
        """`MODEL[@URL]`: the URL, when given, is the endpoint's."""
        model, _, url = target.partition("@")
        return cls.from_options(model, replace(options, base_url=url or None))

    def messages(self, conv: list[dict]) -> list[dict]:
        """The request's messages: images resized to the budget, as base64 JPEG data URLs."""
        return convert_messages(conv, lambda im: {"type": "image_url",
                                          "image_url": {"url": _jpeg_data_url(self.budget.resize(im))}})

    def _one(self, conv: list[dict], sampling: SamplingOptions) -> str:
        """One request. A refusal of this request (400, 413, 422) is a FailedReply; anything else (bad key,
        unknown model, an endpoint down after the client's retries) is an EndpointError that stops the run,
        which resumes later."""
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        try:
            return self._request(conv, sampling)
        except APIStatusError as e:
            if e.status_code in (400, 413, 422):
                return FailedReply(redact(f"{e.status_code} {type(e).__name__}: {str(e)[:300]}"))
            hint = {401: f"check the API key (${self.api_key_env})", 403: f"check the API key (${self.api_key_env})",
                    404: "check the model name and the URL"}.get(e.status_code, "a rerun resumes what was answered")
            raise EndpointError(redact(f"the endpoint {self.url} answered {e.status_code} for model {self.model!r} "
                                       f"({str(e)[:200]}): {hint}")) from None
        except APITimeoutError:
            raise EndpointError(redact(f"the endpoint {self.url} did not answer within {self.timeout:g} s, "
                                       f"{self.max_retries + 1} tries: raise --request-timeout for a slow model, or "
                                       f"check the server; a rerun resumes what was answered")) from None
        except APIConnectionError as e:  # after the client's retries
            raise EndpointError(redact(f"the endpoint {self.url} cannot be reached ({e}): check the URL; a rerun "
                                       f"resumes what was answered")) from None

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
        if not self.openai_itself:  # vLLM and SGLang servers give them; OpenAI's reasoning models refuse the field
            kwargs["logprobs"] = True
        resp = self.client.chat.completions.create(**kwargs, extra_body=extra)
        return _reply(resp.choices[0])

    def chat(self, conversations: list[list[dict]], sampling: SamplingOptions) -> list[str]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda c: self._one(c, sampling), conversations))

    def close(self) -> None:
        self.client.close()


def _reply(choice) -> str:
    """The reply, with its tokens' logprobs (a Reply) where the endpoint gave them and their texts spell the reply
    (the offsets are their cumulative lengths); otherwise the plain text, which has no confidences. Credentials are
    redacted first (an endpoint that echoes the request's Authorization header would put the key into predictions,
    judge examples and reports): a reply they were cut from has no confidences."""
    content = redact(choice.message.content or "")
    tokens = getattr(getattr(choice, "logprobs", None), "content", None) or []
    if not tokens or "".join(t.token for t in tokens) != content:
        return content
    offsets = [0]
    for t in tokens[:-1]:
        offsets.append(offsets[-1] + len(t.token))
    return Reply(content, [[o, round(float(t.logprob), 6)] for o, t in zip(offsets, tokens, strict=True)])
