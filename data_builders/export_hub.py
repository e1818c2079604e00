"""Export a finished SFT build as a self-contained, Hub-ready DatasetDict: images embedded, README.md for the Hub.

    python data_builders/export_hub.py --build runs/sft --out runs/sft-hub [--license cc-by-4.0]
        [--push-to-hub OWNER/NAME [--no-private]]

OUT opens with plain `datasets.load_from_disk(OUT)` (images decode to PIL; no gbtrain needed) and goes into TRL's
SFTTrainer as it is. Each row embeds its own copy of its image, so OUT is larger than the build (the ratio is
printed and written into OUT/README.md). --push-to-hub also publishes it (needs a licence and network access).
OUT must be a folder of its own: empty, or an earlier export, which is replaced.
"""

from __future__ import annotations

from gbtrain.cli import parse_options, user_errors
from gbtrain.data.hub_export import HubExportRun, export_hub


def main() -> None:
    run = parse_options(HubExportRun, __doc__)
    with user_errors("export_hub"):
        record = export_hub(run)
    rows = sum(record["rows"].values())
    print(f"wrote {rows} rows {record['rows']} to {run.out} in {record['seconds']} s: {record['export_bytes']:,} "
          f"bytes (the build: {record['build_bytes']:,}); {record['distinct_images']:,} images embedded "
          f"{record['duplication']}x over (one copy per row)")
    if run.push_to_hub:
        print(f"pushed to https://huggingface.co/datasets/{run.push_to_hub} ({'private' if run.private else 'public'})")
    elif record["license"] == "unknown":
        print(f"licence: unknown; set it in {run.out}/README.md (or pass --license) before publishing")


if __name__ == "__main__":
    main()
