"""Regular expressions a user gives (a student pattern, a split group), run with a time limit: a pattern such as
`^(a+)+$` backtracks exponentially on a long name with Python's re, which has no limit, so these run on the regex
module (re's syntax) with a timeout, and a search that passes it is a one-line error naming the pattern and text."""

from __future__ import annotations

import regex

from gbtrain.text import brief

SEARCH_TIMEOUT_S = 1.0  # per search: a name or path of a few hundred characters takes microseconds


class UserPattern:
    """A user's pattern, compiled once: `search` as re.search, `groups` as re.Pattern.groups."""

    def __init__(self, pattern: str, flag: str):
        try:
            self.rule = regex.compile(pattern, flags=regex.VERSION0)
        except regex.error as e:
            raise ValueError(f"{flag} {brief(pattern)}: not a regular expression ({e})") from None
        self.pattern, self.flag, self.groups = pattern, flag, self.rule.groups

    def search(self, text: str):
        try:
            return self.rule.search(text, timeout=SEARCH_TIMEOUT_S)
        except TimeoutError:
            raise ValueError(f"{self.flag} {brief(self.pattern)} took over {SEARCH_TIMEOUT_S:g} s on {brief(text)} "
                             f"(a pattern that backtracks, such as (a+)+): write it without nested repeats") from None
