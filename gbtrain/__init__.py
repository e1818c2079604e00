"""gbtrain: supervised fine-tuning of vision-language models for end-to-end exam grading.

The package is laid out by the pipeline's stages, each importing only from the stages before it
(tests/test_layering.py holds it):

0. core (these top-level modules): ``vocabulary`` (levels, modes, settings), ``schema`` (typed annotation
   records, label words), ``values`` (one reader of label words and of points), ``families`` (what differs between
   Qwen2.5-VL and Qwen3-VL), ``coords`` (the resize rule and every box convention), ``prompts`` (the instructions
   shared by training and evaluation), ``config`` (options, YAML configs, overrides), ``outputs`` (every tool's
   output folder and record), ``files`` (files written whole, JSON read back, image suffixes), ``cli`` (flags and
   one-line user errors), ``text`` (what may leave the program), ``progress`` (a long loop's console line and the
   time it still needs), ``patterns`` (users' regular expressions, with a time limit).
1. ``data``: annotations, page images, drawing, converters, the synthetic generator, SFT conversations and datasets.
2. ``train``: config, collator, packed attention, model setup, feature cache, checkpoints, trainer, LoRA merge.
3. ``inference``: the vLLM, transformers and OpenAI-compatible backends.
4. ``metric``: reply parsing, judges, points against teachers', the gated metric and mAP, intervals, confidences.
5. ``evaluation``: the benchmark's evaluation runs, reports, checkpoint selection, probes.
6. ``grading``: new pages graded, and the teachers' review of those grades.
7. ``miniature``: tiny hub-shaped models and the vision warm-up, for CPU work.
"""

__version__ = "0.1.0"
