"""Convert an annotation tool's export (Label Studio JSON, CVAT for images 1.1 XML, labelme JSON, COCO JSON) into
the GradingBench layout, ready for data_builders/build_sft.py and eval/run_eval.py.

    python data_builders/convert.py --mapping configs/convert/example.yaml --export EXPORT --out DATA \
        [--images IMAGES] [--format labelstudio|cvat|labelme|coco] [--lenient [--keep-partial-pages]] [key=value ...]

The mapping (see configs/convert/example.yaml) says which label is an answer area or a question region and which
attribute holds the id, transcription, reference answer and verdict. Strict by default: the first item that
cannot be mapped stops the conversion, naming the export file and the item; --lenient leaves such items out and
lists them (OUT/convert_report.json and this summary), and leaves a page that lost an answer region out of L3 (with
the L2/L1 records of the questions it touches) unless --keep-partial-pages. Check the result with
data_builders/preview.py.
"""

from __future__ import annotations

from gbtrain.cli import parse_options, user_errors
from gbtrain.data.converters import ConvertRun, convert, load_mapping, summary_lines


def main() -> None:
    args = parse_options(ConvertRun, __doc__)
    with user_errors("convert"):
        mapping = load_mapping(args.mapping, args.mapping_overrides())
        report = convert(args.export, mapping, args.out, images=args.images, lenient=args.lenient,
                         keep_partial_pages=args.keep_partial_pages)
    print("\n".join(summary_lines(report, args.out)))


if __name__ == "__main__":
    main()
