"""What several demo runs (seeds, machines, torch settings) show together: per run and as min / median / max, the
fine-tuned accuracy per setting with its gain's paired p-value, localized share, the image-reliance gap and the
vision warm-up's own test, with the machine's CPU. docs/demo.md's spread table is its output.

    python scripts/demo_spread.py runs/demo-s0 runs/demo-s1 runs/demo-s2 [--json spread.json] [--check]

--check exits 1 unless every run shows what the default demo is to show on any CPU and seed (GAINS_AT,
SIGNIFICANT_AT, GAP_FLOOR below; the README says how far it is from that).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

from gbtrain.cli import user_errors
from gbtrain.evaluation.reports import compare, read_outcomes
from gbtrain.files import read_json

SETTINGS = ("L1-ab", "L2-ab", "L3-ab", "L1-af", "L2-af", "L3-af")
# What every run of the default demo is to show, whatever the CPU and the seed (issue 56): accuracy
# gains at every level answer-based, significant on crops and whole pages, and a model that uses the pixels.
GAINS_AT = ("L1-ab", "L2-ab", "L3-ab")
SIGNIFICANT_AT = ("L1-ab", "L3-ab")
P_BELOW = 0.05
GAP_FLOOR = 0.2


def cpu_name() -> str:
    """The CPU's model name and widest vector extension, as /proc/cpuinfo gives them (else platform's)."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or platform.machine()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model} ({vector})"


def run_figures(out: Path) -> dict:
    """One demo folder's figures: per setting the fine-tuned accuracy, its gain's p-value and the localized share;
    the reliance gap; the warm-up's held-out share of crops read exactly."""
    reports = [out / name / "report.json" for name in ("eval-base", "eval-sft")]
    missing = [str(p) for p in (*reports, out / "image_reliance.json") if not p.is_file()]
    if missing:
        raise ValueError(f"{out}: not a finished demo run ({missing[0]} is missing): give scripts/demo.sh's OUT_DIR")
    base, sft = (read_json(p) for p in reports)
    _, rows = compare(base, sft, (read_outcomes(reports[0], base), read_outcomes(reports[1], sft)))
    reliance = json.loads((out / "image_reliance.json").read_text(encoding="utf-8").splitlines()[0])
    warmup = out / "base-model" / "gbtrain_warmup.json"
    settings = {r["setting"]: {"accuracy": r["accuracy"]["sft"], "gain": r["accuracy"]["gain"],
                               "gain_p": r["accuracy"]["p"],
                               "localized": r["localized"]["sft"],
                               "records": sft["settings"][r["setting"]]["n_records"]} for r in rows}
    return {"run": str(out), "settings": settings, "gap": reliance.get("gap"),
            "warmup_chars_exact": read_json(warmup)["held_out"]["chars_exact"] if warmup.is_file() else None}


def broken_promises(run: dict) -> list[str]:
    """What `run` (run_figures) lacks of those properties: each unmet one, in words; none when all hold."""
    problems = []
    for name in GAINS_AT:
        f = run["settings"].get(name)
        if f is None:
            problems.append(f"{name} was not evaluated")
        elif not f["gain"] > 0:
            problems.append(f"no accuracy gain at {name} ({100 * f['gain']:+.1f} points)")
        elif name in SIGNIFICANT_AT and not (f["gain_p"] is not None and f["gain_p"] < P_BELOW):
            p = "not computed" if f["gain_p"] is None else f"{f['gain_p']:.2g}"
            problems.append(f"the gain at {name} is not significant (p {p}, not below {P_BELOW})")
    if run["gap"] is None or not run["gap"] >= GAP_FLOOR:
        problems.append(f"image-reliance gap {run['gap']} below {GAP_FLOOR}")
    return problems


def _spread(values: list[float], scale: float = 100, digits: int = 1) -> str:
    return " / ".join(f"{scale * v:.{digits}f}" for v in (min(values), statistics.median(values), max(values)))


def spread_table(runs: list[dict]) -> str:
    """Markdown: a row per run (accuracy % and p per answer-based setting, gap) and the min / median / max rows."""
    shown = [s for s in SETTINGS if all(s in r["settings"] for r in runs)]

    def cell(r, s):
        f = r["settings"][s]
        p = "" if f["gain_p"] is None else f" (p {f['gain_p']:.2g})"
        return f"{100 * f['accuracy']:.1f}{p}"

    lines = [f"CPU: {cpu_name()}", "", "| run | " + " | ".join(f"{s} accuracy %" for s in shown)
             + " | L1-af localized % | reliance gap | warm-up crops exact |",
             "|---|" + "---|" * (len(shown) + 3)]
    for r in runs:
        lines.append(f"| {r['run']} | " + " | ".join(cell(r, s) for s in shown)
                     + f" | {100 * r['settings'].get('L1-af', {}).get('localized', 0):.1f} | {r['gap']:.3f} | "
                     + (f"{100 * r['warmup_chars_exact']:.0f}%" if r["warmup_chars_exact"] is not None else "-") + " |")
    lines.append("| min / median / max | " + " | ".join(_spread([r["settings"][s]["accuracy"] for r in runs])
                                                        for s in shown)
                 + f" | {_spread([r['settings'].get('L1-af', {}).get('localized', 0) for r in runs])}"
                 + f" | {_spread([r['gap'] for r in runs], 1, 3)} | |")
    records = sorted({r["settings"][s]["records"] for r in runs for s in shown})
    lines += ["", f"Records per setting: {', '.join(map(str, records))}; p: the exact McNemar p-value of the gain "
                  f"over the base model (paired, docs/metric.md)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="scripts/demo.sh output folders")
    ap.add_argument("--json", help="also write every run's figures to this file")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every run shows what the default demo is to show")
    args = ap.parse_args()
    with user_errors("demo_spread"):
        runs = [run_figures(Path(p)) for p in args.runs]
        table = spread_table(runs)
        if args.json:
            Path(args.json).write_text(json.dumps({"cpu": cpu_name(), "runs": runs}, indent=1) + "\n",
                                       encoding="utf-8")
    print(table, end="")
    if args.check:
        broken = [(r["run"], problem) for r in runs for problem in broken_promises(r)]
        for run, problem in broken:
            print(f"demo_spread: {run}: {problem}")
        print(f"demo_spread: {len(runs) - len({run for run, _ in broken})} of {len(runs)} runs show every property "
              f"the default demo is to show (gains at {', '.join(GAINS_AT)}; p < {P_BELOW} at "
              f"{', '.join(SIGNIFICANT_AT)}; image-reliance gap >= {GAP_FLOOR})")
        raise SystemExit(1 if broken else 0)


if __name__ == "__main__":
    main()
