"""Peak memory of grading a PDF: eval/grade_pages.py on PDFs of 10 and 100 synthetic A4 pages (prints figures).

    python scripts/bench_pdf_memory.py --model runs/tiny-qwen25vl --work runs/bench-pdf [--pages 10,100]
        [--pdf-dpi 200] [--batch-size 8] [--backend hf]

Each PDF is graded by the real command in a child process of its own, whose peak resident memory (the kernel's
high-water mark) is reported with its time; the last line is the ratio of the largest PDF's peak to the
smallest's. grade_pages renders one page at a time into batches of at most --batch-size pages and 300 Mpx, so
the peak should not grow with the page count: target ratio <= 1.2. Everything is written under --work.
"""

from __future__ import annotations

import json
import resource
import runpy
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench_child import emit, run_child

from gbtrain.cli import parse_options
from gbtrain.config import option
from gbtrain.outputs import require_out

ROOT = Path(__file__).resolve().parents[1]
PDF_RESOLUTION = 150  # pixels per inch the synthetic page images are placed at, so that a page is about A4


@dataclass
class BenchPdf:
    """The benchmark's options; each field is one of its flags (gbtrain.cli)."""

    model: str = option(help="the checkpoint grade_pages loads (a folder or hub id)")
    work: str = option(help="folder for the PDFs and the grading outputs")
    pages: str = option("10,100", "page counts of the PDFs graded, comma-separated")
    pdf_dpi: float = option(200.0, "grade_pages --pdf-dpi")
    batch_size: int = option(8, "grade_pages --batch-size")
    backend: str = option("hf", "grade_pages --backend")
    max_tokens: int = option(16, "grade_pages --max-tokens")
    child: str | None = option(None, "grade this PDF in this process and report its peak (what each child runs)")


def make_pdf(work: Path, pages: int) -> Path:
    """A PDF of `pages` pages, the synthetic pages repeated (the renderer's work per page is what is measured)."""
    from PIL import Image

    from gbtrain.data.synth.generate import generate_dataset

    synth = work / "synth"
    if not synth.is_dir():
        generate_dataset(synth, pages=4, seed=0, progress=False)
    images = [Image.open(p).convert("RGB") for p in sorted((synth / "images" / "L3").rglob("*.jpg"))]
    pdf = work / f"pages-{pages}" / "exam.pdf"
    pdf.parent.mkdir(parents=True, exist_ok=True)
    sequence = [images[i % len(images)] for i in range(pages)]
    sequence[0].save(pdf, save_all=True, append_images=sequence[1:], resolution=PDF_RESOLUTION)
    return pdf


def grade_in_this_process(args: BenchPdf) -> dict:
    pdf = Path(args.child)
    out = pdf.parent.with_name(f"graded-{pdf.parent.name}")  # regraded whole each time (--overwrite)
    sys.argv = [str(ROOT / "eval" / "grade_pages.py"), "--model", args.model, "--pages", str(pdf.parent),
                "--out", str(out), "--backend", args.backend, "--pdf-dpi", str(args.pdf_dpi), "--batch-size",
                str(args.batch_size), "--max-tokens", str(args.max_tokens), "--overwrite"]
    start = time.perf_counter()
    runpy.run_path(sys.argv[0], run_name="__main__")
    took = time.perf_counter() - start
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return {"pages": summary["pages"], "unreadable": len(summary["unreadable"]), "seconds": round(took, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    args = parse_options(BenchPdf, __doc__)
    if args.child:
        emit(grade_in_this_process(args))
        return
    require_out(args.work, "--work")
    work = Path(args.work)
    counts = sorted(int(n) for n in args.pages.split(","))
    results = []
    for n in counts:
        pdf = make_pdf(work, n)
        cmd = [sys.executable, __file__, "--model", args.model, "--work", args.work, "--pdf-dpi", str(args.pdf_dpi),
               "--batch-size", str(args.batch_size), "--backend", args.backend, "--max-tokens", str(args.max_tokens),
               "--child", str(pdf)]
        results.append(run_child(cmd, f"{n} pages"))
        print(json.dumps({"bench": "pdf_memory", "pdf_pages": n, **results[-1]}), flush=True)
    ratio = results[-1]["peak_rss_mib"] / results[0]["peak_rss_mib"]
    print(json.dumps({"bench": "pdf_memory_ratio", "pages": [counts[0], counts[-1]],
                      "peak_ratio": round(ratio, 3), "target": 1.2}))


if __name__ == "__main__":
    main()
