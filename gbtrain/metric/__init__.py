"""Stage 4, the metric: every module here is what the scorer fingerprint (``scoring.scorer_sha256``) hashes.

- ``parsing``: a model's reply read into items, never crashing.
- ``judges``: answer equivalence (rules, or an LLM through an inference backend).
- ``points``: a model's points against teachers' (errors, banded kappa, coverage).
- ``scoring``: the GradingBench gated metric and localization mAP.
- ``agreement``: the points report from two score files (eval/agreement.py).
- ``intervals``: confidence intervals over pages, and paired gains between two evaluations.
- ``confidence``: each item's judgment and box confidence from the reply's token logprobs.
- ``selective``: coverage-accuracy tables and the review threshold chosen from them.
"""
