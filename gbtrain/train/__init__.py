"""Stage 2, training: the SFT recipe.

- ``collator``: labels (assistant tokens only), packing of short conversations into rows.
- ``attention``: attention for packed rows (sdpa, flex, flash-attn varlen) without cross-talk.
- ``modeling``: the model, its processor at the recorded pixel budget, LoRA and what is frozen.
- ``trainer``: the TRL trainer run, its resume rules and the checkpoint record.
- ``merge``: a LoRA adapter merged into its base, ready for vLLM.
"""
