"""Fonts for the synthetic pages and every drawing on a page (previews, overlays), committed as small subsets (see
fonts/README.txt for sources and licences).

Each role (printed text, handwriting) is an ordered list of fonts; a character is drawn with the first
font whose subset covers it, so Latin text gets a Latin face and CJK text a CJK face.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from PIL import ImageFont

FONT_DIR = Path(__file__).parent / "fonts"
ROLES = {
    "print": ("print-latin.ttf", "print-cjk.ttf"),
    "hand": ("hand-latin.otf", "hand-cjk.ttf"),
}


@cache
def coverage() -> dict[str, frozenset[str]]:
    data = json.loads((FONT_DIR / "coverage.json").read_text(encoding="utf-8"))
    return {name: frozenset(chars) for name, chars in data.items()}


@cache
def font(name: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(FONT_DIR / name), size)


def font_name_for(role: str, ch: str) -> str:
    """The font of `role` that draws `ch`; raises if none covers it (the subset missed a character)."""
    cov = coverage()
    for name in ROLES[role]:
        if ch in cov[name]:
            return name
    raise KeyError(f"no {role} font covers {ch!r} (U+{ord(ch):04X}); rerun scripts/subset_fonts.py")


def runs(role: str, text: str) -> list[tuple[str, str]]:
    """Split text into (font name, substring) runs; spaces join the run before them."""
    out: list[tuple[str, str]] = []
    for ch in text:
        name = out[-1][0] if (ch == " " and out) else font_name_for(role, ch)
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1] + ch)
        else:
            out.append((name, ch))
    return out


def text_width(role: str, text: str, size: int) -> float:
    return sum(font(name, size).getlength(seg) for name, seg in runs(role, text))


def draw_text(draw, x: float, baseline: float, text: str, size: int, fill, role: str = "print") -> float:
    """Draw text at a baseline, each character in the role's font that covers it (characters no
    committed subset covers are drawn as '?'); returns the x after the text."""
    cov = coverage()
    known = "".join(ch if ch == " " or any(ch in cov[n] for n in ROLES[role]) else "?" for ch in text)
    for name, seg in runs(role, known):
        f = font(name, size)
        draw.text((x, baseline), seg, font=f, fill=fill, anchor="ls")
        x += f.getlength(seg)
    return x
