"""The pages to grade: every image under a folder and every page of every PDF there, found, rendered and
decoded one at a time (bounded in pixels), a page that cannot be read named rather than stopping the run."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps

from gbtrain.coords import aspect_problem
from gbtrain.files import IMAGE_SUFFIXES
from gbtrain.patterns import UserPattern
from gbtrain.text import brief, safe_name

PDF_SUFFIX = ".pdf"
PDF_DPI_RANGE = (36, 600)  # a page the model sees at --max-pixels anyway; 600 dpi A4 is already 35 Mpx
# A PDF states its page size, so a file of a few hundred bytes can ask for gigapixels. A page larger than A0
# (841 x 1189 mm) is not an exam page and is refused before it is rendered; any page is rendered at no more
# than RENDER_PIXELS (600 dpi A4), at a lower dpi than --pdf-dpi when it would be more (its record says which).
A0_PT = (2384, 3370)
RENDER_PIXELS = 35_000_000


@dataclass(frozen=True)
class Page:
    """One page to grade: an image file, or page `index` (0-based) of a PDF; `rel` is the file's path under the
    pages folder."""

    source: Path
    rel: str
    index: int | None = None

    @property
    def name(self) -> str:
        """What the tables show: the file's path, with `-p<n>` for a PDF's page n."""
        return self.rel if self.index is None else f"{self.rel}-p{self.index + 1}"

    @property
    def stem(self) -> str:
        """The page's file name in OUT: any name stays inside OUT/pages and OUT/overlays (see safe_name)."""
        return safe_name(self.name)


@dataclass(frozen=True)
class PageSize:
    """What the scorer's box mapping (gbtrain.metric.scoring.item_boxes) reads from a record."""

    width: int
    height: int


@dataclass
class LoadedPage:
    """A decoded page. It has the `width` and `height` that the evaluator's length check and box mapping read
    from a record, so both take it in a record's place; `dpi`: what a PDF page was rendered at."""

    page: Page
    image: Image.Image
    dpi: float | None = None

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height


def _pdf_page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        return len(pdf)
    finally:
        pdf.close()


def find_pages(folder: Path) -> tuple[list[Page], list[dict]]:
    """Every page under `folder` in path order, and the PDFs that cannot be opened ({"page", "error"}). Hidden
    files and folders (`.DS_Store`, `._scan.jpg`) are not pages."""
    import pypdfium2 as pdfium

    pages, unreadable = [], []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        suffix = path.suffix.lower()
        if any(part.startswith(".") for part in rel.parts) or suffix not in (*IMAGE_SUFFIXES, PDF_SUFFIX):
            continue
        if suffix in IMAGE_SUFFIXES:
            pages.append(Page(path, rel.as_posix()))
            continue
        try:
            count = _pdf_page_count(path)
        except (pdfium.PdfiumError, OSError) as e:
            unreadable.append({"page": rel.as_posix(), "error": f"cannot open PDF {rel.as_posix()}: {e}"})
            continue
        pages += [Page(path, rel.as_posix(), i) for i in range(count)]
    return pages, unreadable


def students_of(files: list[str], manifest: str | None, pattern: str | None) -> dict[str, str] | None:
    """Each page file's student (`files`: paths under the pages folder), from a CSV manifest (columns file,
    student) or the first group of `pattern` searched in the path; None when neither is given. A file neither
    names, a file named twice, or a manifest row for no page file is a ValueError naming it."""
    if manifest is not None and pattern is not None:
        raise ValueError("--students and --student-pattern: give one (a manifest, or a pattern on the file paths)")
    if pattern is not None and not pattern.strip():  # an unset shell variable: every page would be one student's
        raise ValueError("--student-pattern is empty: give a pattern whose first group names the student, e.g. "
                         "'^([^/]+)/', or leave the flag out")
    if manifest is not None and not manifest.strip():
        raise ValueError("--students is empty: name the CSV manifest (columns file, student), or leave the flag out")
    if pattern:
        rule = UserPattern(pattern, "--student-pattern")
        found = {f: m.group(1) if rule.groups else m.group(0) for f in files if (m := rule.search(f))}
        missing = [f for f in files if not found.get(f)]
        if missing:
            raise ValueError(f"--student-pattern {brief(pattern)} names no student in {brief(missing[0])} ("
                             f"{len(missing)} page files): change the pattern, or give --students")
        return found
    if not manifest:
        return None
    try:
        with open(manifest, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"--students {manifest}: cannot be read ({e})") from None
    if not rows or not {"file", "student"} <= set(rows[0]):
        raise ValueError(f"--students {manifest}: needs the columns file and student (one row per page file)")
    found: dict[str, str] = {}
    for n, row in enumerate(rows, start=2):
        name, student = (row["file"] or "").strip(), (row["student"] or "").strip()
        if name in found:
            raise ValueError(f"--students {manifest} line {n}: {brief(name)} is named twice: keep one row per file")
        if name not in files:
            raise ValueError(f"--students {manifest} line {n}: {brief(name)} is no page file under --pages (give each "
                             f"file's path under it, e.g. class1/scan.pdf)")
        if not student:
            raise ValueError(f"--students {manifest} line {n}: no student for {brief(name)}")
        found[name] = student
    missing = [f for f in files if f not in found]
    if missing:
        raise ValueError(f"--students {manifest}: no student for {brief(missing[0])} ({len(missing)} page files): add "
                         f"a row for each")
    return found


def render_dpi(width_pt: float, height_pt: float, dpi: float) -> float:
    """The dpi a PDF page of this size is rendered at: `dpi`, or less where that would exceed RENDER_PIXELS (the
    largest scale s with (w s + 1)(h s + 1) <= RENDER_PIXELS, as the renderer rounds each side up)."""
    w, h = width_pt, height_pt
    scale = (math.sqrt((w + h) ** 2 + 4 * w * h * (RENDER_PIXELS - 1)) - (w + h)) / (2 * w * h)
    return min(dpi, 72 * scale)


def load_page(page: Page, dpi: float) -> LoadedPage:
    """The page as an RGB image, upright: a photo turned by its EXIF orientation (what a viewer shows, so the boxes
    match what the user sees; new pages have no annotations tied to the stored orientation), a PDF page rendered
    at `dpi` (render_dpi). A page that cannot be read, a PDF page larger than A0, or a page too long and thin for
    the model's processor is a ValueError naming it."""
    import pypdfium2 as pdfium

    try:
        if page.index is None:
            with Image.open(page.source) as im:
                if getattr(im, "n_frames", 1) > 1:  # only the first would be graded
                    raise ValueError(f"cannot read page {page.name}: it holds {im.n_frames} images (a multi-page "
                                     f"scan): save them as a PDF or as one file each")
                loaded = LoadedPage(page, ImageOps.exif_transpose(im).convert("RGB"))
        else:
            pdf = pdfium.PdfDocument(page.source)
            try:
                pdf_page = pdf[page.index]
                width, height = pdf_page.get_size()
                if not min(width, height) > 0:  # NaN too
                    raise ValueError(f"cannot read page {page.name}: its size is {width} x {height} pt")
                if max(width, height) > A0_PT[1] or min(width, height) > A0_PT[0]:
                    raise ValueError(f"cannot read page {page.name}: it is {width:.0f} x {height:.0f} pt, larger than "
                                     f"A0 ({A0_PT[0]} x {A0_PT[1]} pt); split or scale the PDF's pages")
                used = render_dpi(width, height, dpi)
                loaded = LoadedPage(page, pdf_page.render(scale=used / 72).to_pil().convert("RGB"), round(used, 2))
            finally:
                pdf.close()
    except (OSError, SyntaxError, Image.DecompressionBombError, pdfium.PdfiumError) as e:
        raise ValueError(f"cannot read page {page.name}: {e}") from None
    aspect = aspect_problem(loaded.width, loaded.height)  # the backend would refuse the whole batch over it
    if aspect:
        raise ValueError(f"cannot grade page {page.name}: {aspect}")
    return loaded
