"""Text that leaves the program: what may be written to reports and logs, and names safe as file names."""

from __future__ import annotations

import hashlib
import re


def without_credentials(text: str) -> str:
    """A URL or backend spec with any `user:key@` part removed: what may be written to reports and logs."""
    return re.sub(r"//[^/@\s]*@", "//", text)


def safe_name(text: str) -> str:
    """A file name made from any id (ids come from annotation files): characters other than letters, digits,
    `.`, `_` and `-` become `_`, and a changed id gets a hash of the original, so `x/../../f` stays in its
    folder and two ids never share a file."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip(".")[:100]
    if stem == text and stem:
        return stem
    return f"{stem or 'id'}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
