"""Text that leaves the program: without credentials (redact), names safe as file names (safe_name), users' values
quoted briefly in messages (brief)."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_SECRETS: set[str] = set()  # credentials this process holds (register_secret)
_USERINFO = re.compile(r"//[^/\s?#]*@")  # up to the last @ before the host: a password may hold an unencoded @
_QUERY_SECRET = re.compile(r"([?&;](?:api[_-]?key|key|token|access[_-]?token|auth|password|passwd|secret|sig|"
                           r"signature|x-api-key)=)[^&#\s]*", re.I)
_BEARER = re.compile(r"(\bBearer\s+)[\w.~+/=-]+", re.I)
REDACTED = "***"


def register_secret(value: str | None) -> None:
    """A credential this process holds (an API key read from the environment): from now on redact() removes it
    wherever it appears, e.g. in an endpoint's error text that echoes the request."""
    if value and len(value) >= 4:
        _SECRETS.add(value)


def redact(text: str) -> str:
    """Text without credentials: what may be written to reports, records and logs, or printed. Removes a URL's
    `user:password@` part, credential query parameters (`?api_key=...`, `token=`, ...), bearer tokens, and every
    registered secret. Every writer of text that may hold one (an option, an endpoint's reply) passes it here."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _USERINFO.sub("//", text)
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


_NAME_BYTES = 100  # of the kept stem, in UTF-8: with a hash and a suffix far below every file system's 255
_WINDOWS_DEVICE = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9¹²³]|LPT[0-9¹²³])(\..*)?", re.IGNORECASE)


def _kept(char: str) -> bool:
    """Letters, digits and combining marks of any script, `.`, `_` and `-`: characters no common file system
    (Windows, macOS, Linux) reserves; separators, controls, spaces, quotes and symbols are not kept."""
    return char in "._-" or unicodedata.category(char)[0] in "LNM"


def brief(value, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters, the cut marked (…) and the closing quote kept: a user's value
    quoted in a one-line message, however long the value (a path, a pattern, a hostile string)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return text[:limit - 2] + "…" + text[-1] if text[-1] in "'\"" else text[:limit - 1] + "…"


def safe_name(text: str) -> str:
    """A file name made from any id (ids come from annotation files, page ids from image names such as
    期中试卷_03.jpg): runs of characters that are not kept (see _kept) become `_`, the stem is in NFC (macOS
    compares names in a normal form) and at most _NAME_BYTES long, and a changed id (or a Windows device name such
    as CON) gets a hash of the original, so `x/../../f` stays in its folder and two ids never share a file."""
    stem = unicodedata.normalize("NFC", "".join(c if _kept(c) else "\0" for c in text))
    stem = re.sub("\0+", "_", stem).strip(".")
    stem = stem.encode("utf-8")[:_NAME_BYTES].decode("utf-8", "ignore")  # a character cut in two is left out
    if stem == text and stem and not _WINDOWS_DEVICE.fullmatch(stem):
        return stem
    # surrogatepass: a file name's undecodable bytes (surrogate escapes) hash too
    return f"{stem or 'id'}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


_PLAIN_NUMBER = re.compile(r"[+-]?(\d+([.,]\d*)?|[.,]\d+)")


def csv_cell(value):
    """A CSV cell a spreadsheet shows as text: one that would start a formula (`=`, `+`, `-`, `@`, a tab or a carriage
    return; a model may write `=HYPERLINK(...)`) gets a leading `'`; a plain number such as -5 stays as it is."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


# inline syntax: escapes, code, emphasis, links and images, HTML and entities, cells, strikethrough; an underscore
# between two letters or digits (my_exam) can neither open nor close emphasis (CommonMark), so it stays as it is
_MARKDOWN_ACTIVE = re.compile(r"([\\`*\[\]<>&|~]|(?<![^\W_])_|_(?![^\W_]))")
_MARKDOWN_LINE_START = re.compile(r"^(?:([#+=-])|(\d+)([.)]))")  # a heading, list item or underline at a line's start


def markdown_text(value) -> str:
    """Any text quoted in a Markdown report (a model's name, a folder, a teacher's reason): shown as written, never
    as HTML, a link, an image, emphasis or table structure: every character with a meaning in CommonMark/GFM inline
    text is backslash-escaped, whitespace (new lines included) becomes one space."""
    text = _MARKDOWN_ACTIVE.sub(r"\\\1", " ".join(str(value).split()))
    return _MARKDOWN_LINE_START.sub(lambda m: f"\\{m[1]}" if m[1] else f"{m[2]}\\{m[3]}", text, count=1)


def markdown_code(value) -> str:
    """Text quoted as a code span outside a table (a path, a folder): shown as written, letter for letter. Backslash
    escapes do not work inside code spans, so the span's fence is one backtick longer than any run of backticks in
    the text (CommonMark), and HTML inside a code span is never HTML."""
    text = " ".join(str(value).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
