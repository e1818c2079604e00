"""Files written whole: a run killed (or a disk filling) mid-write leaves the old file or none, never half of one,
so a file's presence can mark work done; JSON records read back, whatever a disk or a user left in them; and the one
CSV writer of gbtrain's tables."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from gbtrain.text import csv_cell

# The page images every tool reads (converters, the reader's checks, grade_pages), lower case: what Pillow decodes
# from a scanner or a phone. A PDF is read apart, page by page.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename. backslashreplace keeps a model reply's lone
    surrogate the JSON escape it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"cannot write {path}: {e.strerror or e}") from None


def read_json(path: str | Path, errors: str = "strict"):
    """A JSON file's value. Every way its text can be bad is a ValueError: malformed JSON, bytes that are not UTF-8
    (with errors="strict"), digits past Python's limit, and nesting past its recursion limit (which json raises as
    RecursionError, past a reader's `except ValueError`); a file that cannot be opened is an OSError. A UTF-8 byte
    order mark (a file saved again by a Windows editor) is read past, as RFC 8259 allows."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8-sig", errors=errors))
    except RecursionError:
        raise ValueError("nested too deeply to read (maximum recursion depth exceeded)") from None


def table_value(value):
    """A table cell of a value that may be absent (None: an empty cell), a whole number without `.0`."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return "" if value is None else value


def write_table(path: str | Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    """The one CSV writer of gbtrain's tables: a header, then each row's columns (table_value; a text a spreadsheet
    would run as a formula quoted, gbtrain.text.csv_cell). errors="backslashreplace": a lone surrogate (in a reply,
    or a file name's undecodable bytes) is written as its escape, as write_atomic writes JSON."""
    with open(path, "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows({k: csv_cell(table_value(row.get(k))) for k in columns} for row in rows)
