"""Convert an annotation tool's export (Label Studio JSON, CVAT for images 1.1 XML, labelme JSON, COCO JSON) into
the GradingBench layout, ready for data_builders/build_sft.py and eval/run_eval.py.

    python data_builders/convert.py --mapping configs/convert/example.yaml --export EXPORT --out DATA \
        [--images IMAGES] [--format labelstudio|cvat|labelme|coco] [--lenient] [key=value ...]

The mapping (see configs/convert/example.yaml) says which label is an answer area or a question region and which
attribute holds the id, transcription, reference answer and verdict. Strict by default: the first item that
cannot be mapped stops the conversion, naming the export file and the item; --lenient leaves such items out and
lists them (OUT/convert_report.json and this summary). Check the result with data_builders/preview.py.
"""

from __future__ import annotations

import argparse

from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.converters import FORMATS, convert, load_mapping, summary_lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--mapping", required=True, help="YAML mapping (configs/convert/example.yaml)")
    ap.add_argument("--export", required=True, help="the export file (labelme: a folder of JSON files, or one)")
    ap.add_argument("--out", required=True, help="output folder (GradingBench layout)")
    ap.add_argument("--images", help="folder holding the page images (default: the export's folder)")
    ap.add_argument("--format", choices=FORMATS, help="the export's tool (default: the mapping's format)")
    ap.add_argument("--lenient", action="store_true", help="leave unmappable items out, listed in the report")
    ap.add_argument("overrides", nargs="*", help="key=value mapping overrides (e.g. subject=Mathematics)")
    args = ap.parse_args()
    overrides = list(args.overrides) + ([f"format={args.format}"] if args.format else [])
    with user_errors("convert"):
        mapping = load_mapping(args.mapping, overrides)
        report = convert(args.export, mapping, args.out, images=args.images, lenient=args.lenient)
    print("\n".join(summary_lines(report, args.out)))


if __name__ == "__main__":
    main()
