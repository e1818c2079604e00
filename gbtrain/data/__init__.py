"""Stage 1, data: annotated pages in, SFT conversations out.

- ``annotations``: read, validate and write the GradingBench on-disk layout.
- ``pages``: a page's images, its questions' L2 records and L1 crops as that layout stores them (every writer of
  pages calls it).
- ``build_config``: the dataset build's config (data_builders/build_sft.py).
- ``fonts``, ``drawing``: the committed font subsets, and the one drawer of boxes and labels on a page.
- ``hub_export``: a finished build as a self-contained Hub dataset (data_builders/export_hub.py).
- ``conversations``: SFT conversations (targets as JSON) built from records.
- ``splits``: which split each page is in (a hash of the page, or of its student or exam).
- ``contents``: what a build holds, by content: each image it read, by its pixels' hash, with its split.
- ``merge``: several GradingBench folders as one set: a page taken once, from the newest, in the oldest's split.
- ``sft_dataset``: the SFT DatasetDict build, its card, and loading it for training.
- ``held_out``: the records an evaluation scores: by default the held-out pages of the model's training build, told
  by their pixels.
- ``preview``: pages drawn with their annotations, to check a conversion by eye.
- ``converters``: exports of annotation tools (Label Studio, CVAT, COCO, labelme) to the GradingBench layout.
- ``synth``: the synthetic exam-page generator (the embedded default dataset); only it and the miniatures import it.
"""
