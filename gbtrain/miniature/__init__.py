"""Miniatures for CPU work, last in the order: nothing in the pipeline imports them.

- ``tiny_model``: a tiny, hub-shaped Qwen2.5-VL or Qwen3-VL built locally (tests, the demo).
- ``warmup``: the vision warm-up that teaches a miniature's tower to read handwriting.
"""
