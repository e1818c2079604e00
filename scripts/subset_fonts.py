"""Rebuild the committed font subsets of the synthetic page generator (a maintainer's tool).

Needs the Debian font packages below (`apt-get install fonts-dejavu-core fonts-droid-fallback
fonts-comic-neue fonts-arphic-ukai`) and fontTools. Collects every character the question banks and
page templates can print, subsets each font to it, writes gbtrain/data/fonts/*.{ttf,otf}, the
coverage table the renderer reads, and the licence texts.

    python scripts/subset_fonts.py
"""

from __future__ import annotations

import json
import random
import shutil
import string
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTFont

from gbtrain.data.fonts import FONT_DIR
from gbtrain.data.synth.banks import BANKS, EXAM_TITLES, GRADES, SECTION_TITLES
from gbtrain.data.synth.render import FIXED_TEXT
from gbtrain.schema import STAGES, SUBJECTS

SOURCES = {  # committed name: (system path, font index in a collection, licence file)
    "print-latin.ttf": ("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf", 0,
                        "/usr/share/doc/fonts-dejavu-core/copyright"),
    "print-cjk.ttf": ("/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf", 0,
                      "/usr/share/doc/fonts-droid-fallback/copyright"),
    "hand-latin.otf": ("/usr/share/fonts/opentype/comic-neue/ComicNeue-Regular.otf", 0,
                       "/usr/share/doc/fonts-comic-neue/copyright"),
    "hand-cjk.ttf": ("/usr/share/fonts/truetype/arphic/ukai.ttc", 0, "/usr/share/doc/fonts-arphic-ukai/copyright"),
}
LATIN_ONLY = {"print-latin.ttf", "hand-latin.otf"}  # these take no CJK even where they have glyphs


def needed_characters(samples_per_kind: int = 400) -> str:
    chars = set(string.printable) - set("\t\n\r\x0b\x0c")
    chars |= set(FIXED_TEXT) | set("".join(EXAM_TITLES.values())) | set(str(GRADES)) | set(str(SECTION_TITLES))
    rng = random.Random(0)
    for kinds in BANKS.values():
        for makers in kinds.values():
            for make in makers:
                for _ in range(samples_per_kind):
                    q = make(rng, rng.choice(STAGES))
                    chars |= set(q.stem) | set("".join(q.options))
                    if q.chart:
                        chars |= set(q.chart.title) | set("".join(q.chart.labels))
                    for p in q.parts:
                        chars |= set(p.prompt + p.std + p.right_answer + p.wrong_answer)
    assert set(SUBJECTS) == set(BANKS)
    return "".join(sorted(chars))


def main() -> None:
    text = needed_characters()
    FONT_DIR.mkdir(parents=True, exist_ok=True)
    coverage = {}
    licences = []
    for name, (src, index, licence) in SOURCES.items():
        cmap = TTFont(src, fontNumber=index).getBestCmap()
        keep = [c for c in text if ord(c) in cmap and (name not in LATIN_ONLY or ord(c) < 0x2E80)]
        opts = subset.Options()
        opts.font_number = index
        opts.layout_features = ["*"]
        opts.name_IDs = ["*"]
        opts.notdef_outline = True
        font = subset.load_font(src, opts)
        sub = subset.Subsetter(opts)
        sub.populate(text="".join(keep))
        sub.subset(font)
        subset.save_font(font, str(FONT_DIR / name), opts)
        coverage[name] = "".join(keep)
        licences.append((name, src, licence))
        print(f"{name}: {len(keep)} characters, {(FONT_DIR / name).stat().st_size / 1024:.0f} KiB")
    (FONT_DIR / "coverage.json").write_text(json.dumps(coverage, ensure_ascii=False, indent=0) + "\n",
                                            encoding="utf-8")
    missing = [c for c in text if not any(c in v for v in coverage.values()) and not c.isspace()]
    if missing:
        raise SystemExit(f"no font covers: {''.join(missing)!r}")
    readme = ["Font subsets for the synthetic exam pages, made by scripts/subset_fonts.py.", ""]
    for name, src, licence in licences:
        lic_name = f"LICENSE-{name.rsplit('.', 1)[0]}.txt"
        shutil.copyfile(licence, FONT_DIR / lic_name)
        readme.append(f"{name}: subset of {Path(src).name} (Debian package licence copied to {lic_name})")
    (FONT_DIR / "README.txt").write_text("\n".join(readme) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
