"""gbtrain: supervised fine-tuning of vision-language models for end-to-end exam grading.

Modules, one job each:
- ``schema``: typed annotation records (pages, marks, question groups) and the label vocabularies.
- ``annotations``: read, validate and write the GradingBench on-disk layout.
- ``coords``: the Qwen2.5-VL resize rule and every box coordinate convention.
- ``synth``: the synthetic exam-page generator (the embedded default dataset).
- ``prompts``: the instructions shown to the model, shared by training and evaluation.
- ``conversations``: SFT conversations (targets as JSON) built from records.
- ``sft_dataset``: the SFT DatasetDict build, its card, and loading for training.
- ``config``: YAML configs with command-line overrides.
- ``collator``, ``modeling``, ``training``, ``merge``: the SFT recipe (labels, packing, model setup,
  trainer, LoRA merge).
- ``backends``, ``evaluation``, ``reports``: inference backends, resumable batch evaluation, tables,
  plots, overlays and gains.
- ``parsing``, ``judges``, ``scoring``: the metric.
- ``tiny_model``: a tiny, locally built Qwen2.5-VL for CPU tests and the demo.
- ``cli``: how every entry script ends a user error (one line naming the input, exit code 2).
"""

__version__ = "0.1.0"
