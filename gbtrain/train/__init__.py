"""Stage 2, training: the SFT recipe.

- ``config``: the training config (recipes/sft_qwen.py) and every lever of the run.
- ``collator``: labels (assistant tokens only), packing of short conversations into rows.
- ``attention``: attention for packed rows (sdpa, flex, flash-attn varlen) without cross-talk.
- ``modeling``: the model, its processor at the recorded pixel budget, LoRA and what is frozen.
- ``vision_cache``: the frozen tower's features encoded once per image and read back.
- ``checkpoints``: the checkpoint record (coords, budget), completion markers, a run's checkpoints found.
- ``trainer``: the TRL trainer run, its resume rules and the checkpoint record.
- ``merge``: a LoRA adapter merged into its base, ready for vLLM.
"""
