"""A reply's text with the log-probabilities of its sampled tokens, so that the scorer can give each parsed item a
confidence (docs/metric.md#confidences) without the model at hand."""

from __future__ import annotations


class Reply(str):
    """A reply's text (a str, so every caller of `chat` keeps working) carrying `logprobs`: one
    [char_offset, logprob] per generated token, the offset where that token's text starts in the reply."""

    def __new__(cls, text: str, logprobs: list[list[float]]):
        reply = super().__new__(cls, text)
        reply.logprobs = logprobs
        return reply

    def __reduce__(self):
        """Pickled whole: a three-turn conversation carries earlier replies to the data-parallel ranks' processes."""
        return Reply, (str(self), self.logprobs)


def token_offsets(tokenizer, ids: list[int], window: int = 8) -> list[int]:
    """Where each token's text starts in the decoded reply. A token's length is what decoding it adds to the
    `window` tokens before it (a character made of several tokens' bytes falls to the first of them), so that an
    8,192-token reply takes 8,192 short decodes, not 8,192 decodes of its whole prefix."""
    offsets, pos = [], 0
    for i in range(len(ids)):
        offsets.append(pos)
        start = max(0, i - window)
        pos += len(tokenizer.decode(ids[start:i + 1], skip_special_tokens=True)) - len(
            tokenizer.decode(ids[start:i], skip_special_tokens=True))
    return offsets


def with_logprobs(text: str, tokenizer, ids: list[int], logprobs: list[float]) -> Reply:
    """`text` with its tokens' logprobs at their character offsets (rounded to 6 decimals: the predictions file
    stays small and the confidence is unchanged to 1e-6)."""
    offsets = token_offsets(tokenizer, ids)
    return Reply(text, [[o, round(float(lp), 6)] for o, lp in zip(offsets, logprobs, strict=True)])
