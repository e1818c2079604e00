"""Stage 1, data: annotated pages in, SFT conversations out.

- ``annotations``: read, validate and write the GradingBench on-disk layout.
- ``conversations``: SFT conversations (targets as JSON) built from records.
- ``sft_dataset``: the SFT DatasetDict build, its card, and loading it for training.
- ``preview``: pages drawn with their annotations, to check a conversion by eye.
- ``converters``: exports of annotation tools (Label Studio, CVAT, COCO, labelme) to the GradingBench layout.
- ``synth``: the synthetic exam-page generator (the embedded default dataset).
"""
