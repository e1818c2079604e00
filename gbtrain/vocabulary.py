"""The names every tool gives the benchmark's levels, modes and settings, defined once.

Levels: L1 (one question cropped from a page), L2 (one question on its whole page), L3 (a whole page). Modes:
answer-free (the model derives each answer itself) and answer-based (the reference answers are given). A setting
is a level and a mode, named `L1-af` ... `L3-ab`, with `-3t` for the three-turn decomposition; predictions files,
reports and `--settings` use these names.
"""

from __future__ import annotations

from collections.abc import Iterable

L1, L2, L3 = "L1", "L2", "L3"
LEVELS = (L1, L2, L3)

ANSWER_FREE, ANSWER_BASED = "answer-free", "answer-based"
MODES = (ANSWER_FREE, ANSWER_BASED)
MODE_SHORT = {ANSWER_FREE: "af", ANSWER_BASED: "ab"}  # a mode in setting names
MODE_OF_SHORT = {short: mode for mode, short in MODE_SHORT.items()}
THREE_TURN_SUFFIX = "-3t"

# The one list of words meaning true / false: true/false answers (gbtrain.metric.judges) and the model's right/wrong
# judgments (gbtrain.metric.parsing, which adds the digits and the cross that only a judgment can mean).
TRUE_WORDS = frozenset({"true", "t", "yes", "y", "right", "correct", "对", "正确", "是", "√", "✓", "✔"})
FALSE_WORDS = frozenset({"false", "f", "no", "n", "wrong", "incorrect", "错", "错误", "不对", "不正确", "否", "不是",
                         "×", "✗", "✘"})


def setting_name(level: str, mode: str, three_turn: bool = False) -> str:
    """A setting's name: `L1-af`, `L3-ab-3t`."""
    return f"{level}-{MODE_SHORT[mode]}" + (THREE_TURN_SUFFIX if three_turn else "")


ALL_SETTINGS = tuple(setting_name(level, mode) for level in LEVELS for mode in MODES)


def one_of(names: Iterable[str]) -> str:
    """`a, b or c`: how a message lists the names a user may choose from (a registry's keys, the levels)."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
