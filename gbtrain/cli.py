"""What entry scripts share: the options of every tool that asks a checkpoint, and how a user error ends:
one line on stderr, `prog: what is wrong (and the way out)`, and exit code 2, the code argparse gives a bad
option; a bug keeps its traceback.

User errors are ValueError (bad options, configs, annotations, predictions, records of earlier runs, endpoint
refusals; gbtrain raises them with the file, record or option named) and OSError (missing, unreadable or
unwritable files and folders, a full disk). A message that is a headline with an indented list (every annotation
problem, every bad training option) keeps its list; any other multi-line message is joined into one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from gbtrain.backends import BACKENDS, without_credentials

USER_ERRORS = (ValueError, OSError)
USAGE_ERROR = 2


def describe(error: BaseException) -> str:
    """The error as the line a user reads: an OSError as `path: reason`, credentials in URLs removed."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.filename}: {error.strerror}" + (f" -> {error.filename2}" if error.filename2 else "")
    else:
        text = str(error) or type(error).__name__
    head, *rest = text.strip().splitlines() or [""]
    if rest and not all(line.startswith("  ") for line in rest):
        text = " ".join(line.strip() for line in [head, *rest] if line.strip())
    else:
        text = "\n".join([head, *rest])
    return without_credentials(text)


@contextmanager
def user_errors(prog: str) -> Iterator[None]:
    """Run an entry script's work; a user error ends it with `prog: message` and exit code 2."""
    try:
        yield
    except USER_ERRORS as e:
        _close_progress_bars()
        print(f"{prog}: {describe(e)}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def _close_progress_bars() -> None:
    """Close the progress bars the failed work left open, so that the message starts a line of its own."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def add_model_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of every tool that asks a checkpoint (eval/run_eval.py, eval/grade_pages.py): the backend,
    how its inputs are drawn and how the engine is sized. Defaults are EvalRun's."""
    ap.add_argument("--backend", default="vllm", choices=tuple(BACKENDS))
    ap.add_argument("--coords", default=None, help="default: the checkpoint's record, else its model_type or name")
    ap.add_argument("--min-pixels", type=int, default=None,
                    help="default: the budget the recipe recorded in the checkpoint, else 50176")
    ap.add_argument("--max-pixels", type=int, default=None, help="default: as --min-pixels, else 1724800")
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--max-model-len", type=int, default=32768)
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--data-parallel-size", type=int, default=1)
    ap.add_argument("--kv-cache-gib", type=float, default=None,
                    help="vllm: KV-cache size in GiB (default on CPU: a quarter of free memory, 0.5-4 GiB; "
                         "on a GPU: what --gpu-memory-utilization leaves)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                    help="vllm on a GPU: share of the card the engine (and a vllm judge) may take")
    ap.add_argument("--structured", action="store_true", help="JSON-schema constrained output (single-turn)")
    ap.add_argument("--base-url", default=None, help="openai backend: endpoint (default $OPENAI_BASE_URL)")
    ap.add_argument("--api-key-env", default="OPENAI_API_KEY", help="openai backend: variable holding the key")
    ap.add_argument("--concurrency", type=int, default=8, help="openai backend: requests in flight")
