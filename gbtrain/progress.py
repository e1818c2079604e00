"""One line of progress for a long loop, with the time it still needs: what a console shows of the vision warm-up
and of training (the libraries' bars and loss dicts stay in the logs)."""

from __future__ import annotations

import time


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`: a time span as a reader takes it in at a glance."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Eta:
    """The time left of `total` steps, from the pace since `start` (the step a resumed run starts from)."""

    def __init__(self, total: int, start: int = 0, clock=time.monotonic):
        self.total, self.clock = total, clock
        self.start_step, self.start_time = start, clock()

    def line(self, step: int, what: str = "") -> str:
        """`step 120/400 (30%) <what> · 1m52s left` (`? left` before the first step is done)."""
        now = self.clock()
        done = step - self.start_step
        left = f"{duration((self.total - step) * (now - self.start_time) / done)} left" if done > 0 else "? left"
        share = f"{100 * step / self.total:.0f}%" if self.total else "-"
        return " ".join(part for part in (f"step {step}/{self.total} ({share})", what, f"· {left}") if part)
