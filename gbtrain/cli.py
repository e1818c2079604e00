"""What entry scripts share: flags made from options dataclasses, and how a user error ends:
one line on stderr, `prog: what is wrong (and the way out)`, and exit code 2, the code argparse gives a bad
option; a bug keeps its traceback.

User errors are ValueError (bad options, configs, annotations, predictions, records of earlier runs, endpoint
refusals; gbtrain raises them with the file, record or option named), OSError (missing, unreadable or unwritable
files and folders, a full disk) and csv.Error (a malformed table). A message that is a headline with an indented list
(every annotation problem, every bad training option) keeps its list; any other multi-line message is joined into
one line. A ValueError the interpreter raised in gbtrain's own code (`a, b = three_things`, zip(strict=True) over
lists of different lengths) is a bug, not a user's mistake: it keeps its traceback.
"""

from __future__ import annotations

import argparse
import csv
import linecache
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, fields
from pathlib import Path
from typing import TypeVar

from omegaconf import OmegaConf

from gbtrain.config import field_default, help_of, load_yaml, out_of_bounds
from gbtrain.text import redact

T = TypeVar("T")
USER_ERRORS = (ValueError, OSError, csv.Error)
USAGE_ERROR = 2
# gbtrain's code, the repository's entry scripts and tests: where a ValueError not raised by `raise` is a bug
_OURS = (Path(__file__).resolve().parent, *(Path(__file__).resolve().parents[1] / d for d in
                                            ("eval", "recipes", "data_builders", "scripts", "tests")))


def is_bug(error: BaseException) -> bool:
    """Whether a ValueError was raised by the interpreter inside gbtrain's code (unpacking, zip(strict=True),
    list.index) rather than by a `raise` naming what is wrong; a text's decoding error is the file's, not a bug."""
    if not isinstance(error, ValueError) or isinstance(error, UnicodeError):
        return False
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    if not any(path.is_relative_to(ours) for ours in _OURS):
        return False
    return not linecache.getline(str(path), tb.tb_lineno).lstrip().startswith("raise")


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
    return redact(text)


@contextmanager
def user_errors(prog: str) -> Iterator[None]:
    """Run an entry script's work; a user error ends it with `prog: message` and exit code 2."""
    try:
        yield
    except USER_ERRORS as e:
        if is_bug(e):
            raise
        _close_progress_bars()
        print(f"{prog}: {describe(e)}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def _close_progress_bars() -> None:
    """Close the progress bars the failed work left open, so that the message starts a line of its own."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def add_options(ap: argparse.ArgumentParser, options: type, defaults: dict | None = None,
                require: bool = True) -> None:
    """One flag per field of a tool's options dataclass (`--kebab-case`, its default, help and choices from
    config.option): the required fields first, then the tool's own, then those of a shared group (the model
    options). `defaults` (a --config file's values) replace the fields' own and make a required flag optional. A
    flag defaulting to true comes with its --no- form (every flag does with require=False: the first pass of
    parse_options). A positional field is an argument given by its place instead."""
    types = {"int": int, "float": float, "str": str}
    defaults = defaults or {}
    ordered = sorted(fields(options), key=lambda f: (field_default(f) is not MISSING, f.metadata.get("group", "")))
    for f in ordered:
        flag = "--" + f.name.replace("_", "-")
        default = defaults.get(f.name, field_default(f))
        help_text, choices = help_of(f) or None, f.metadata.get("choices")
        choices = choices() if callable(choices) else choices
        if choices and default not in (MISSING, None) and default not in choices:
            ap.error(f"{f.name}: {default!r} is not one of {', '.join(map(str, choices))}")
        if f.metadata.get("positional"):
            _add_positional(ap, f.name, default, require, help_text, choices)
        elif default is MISSING:
            ap.add_argument(flag, required=require, help=help_text, choices=choices)
        elif f.type == "bool":
            ap.add_argument(flag, action=argparse.BooleanOptionalAction if default or not require else "store_true",
                            default=default, help=help_text)
        else:
            ap.add_argument(flag, type=types[f.type.split(" | ")[0]], default=default, help=help_text,
                            choices=choices)


def _add_positional(ap: argparse.ArgumentParser, name: str, default, require: bool, help_text: str | None,
                    choices: tuple | None) -> None:
    """A positional argument: a list takes any number; one without a default is required unless `require` is off
    (the first pass of parse_options, where a --config file may still give it). --help names it by its field (its
    choices are in its help), as the docs' key tables do."""
    named = {"help": help_text, "choices": choices, "metavar": name}
    if isinstance(default, list):
        ap.add_argument(name, nargs="*", default=default, **named)
    elif default is MISSING and require:
        ap.add_argument(name, **named)
    else:
        ap.add_argument(name, nargs="?", default=None if default is MISSING else default, **named)


_CONFIG, _OVERRIDES = "options_config", "options_overrides"


def _parser(options: type, description: str | None, defaults: dict | None = None,
            require: bool = True) -> argparse.ArgumentParser:
    """The tool's parser: `--config`, its fields (add_options), then `key=value ...`; a tool whose own fields are
    named `config` or `overrides` (a wrapped config's file and key=value, as bench_train.py's) takes those as its
    own instead."""
    own = {f.name for f in fields(options)}
    ap = argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)
    if "config" not in own:
        ap.add_argument("--config", dest=_CONFIG, metavar="FILE.yaml",
                        help="YAML file of these options (keys: the flags' names with _ for -); flags given too "
                             "override it")
    add_options(ap, options, defaults, require)
    if "overrides" not in own:
        ap.add_argument(_OVERRIDES, nargs="*", metavar="key=value",
                        help="options as the training and data-building tools take them (max_tokens=512), after "
                             "any positional arguments")
    return ap


def parse_options(options: type[T], description: str | None, argv: list[str] | None = None) -> T:
    """A tool's options: its dataclass's defaults, then a `--config FILE.yaml` of field names (configs/eval/), then
    `key=value` overrides, then the flags given (add_options); flags and positional arguments may come in any
    order. A bad config file is one usage error naming it (exit 2)."""
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):  # the dataclass's own defaults
        _parser(options, description).parse_intermixed_args(argv)
    pre = _parser(options, description, require=False)  # config and overrides first: they become the defaults
    known = vars(pre.parse_intermixed_args(argv))
    defaults: dict = {}
    config, overrides = known.get(_CONFIG), known.get(_OVERRIDES, [])
    try:
        if config:
            defaults = OmegaConf.to_container(load_yaml(config))
        bad = [o for o in overrides if "=" not in o]
        if bad:
            raise ValueError(f"{bad[0]}: options after the flags must be key=value")
        defaults |= OmegaConf.to_container(OmegaConf.from_dotlist(overrides))
    except (ValueError, OSError) as e:
        pre.error(describe(e))
    unknown = sorted(set(defaults) - {f.name for f in fields(options)})
    if unknown:
        where = f"--config {config} or key=value" if config else "key=value"
        pre.error(f"{where}: unknown key(s) {', '.join(map(str, unknown))} (keys are the flags' names with _ for -: "
                  f"see --help)")
    parser = _parser(options, description, defaults)
    values = vars(parser.parse_intermixed_args(argv))
    values.pop(_CONFIG, None), values.pop(_OVERRIDES, None)
    parsed = options(**values)
    problems = out_of_bounds(parsed, sep=" ", flags=True)
    if problems:
        parser.error("; ".join(problems))
    return parsed


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Every entry script's --help: its docstring as written, and each option's default after its help (unless
    the help already says what the default is, or there is none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS) or action.required:
            return text
        return super()._get_help_string(action)
