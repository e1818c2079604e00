"""Stage 4, the metric. The scorer fingerprint (``scoring.scorer_sha256``) hashes the modules that decide a score
(``scoring.SCORER_MODULES``: all of these but ``agreement``, with core's schema, coords, values and vocabulary).

- ``parsing``: a model's reply read into items, never crashing.
- ``answers``: answers judged by their type (numbers within a tolerance, choices, truth values, text).
- ``text_scores``: token F1 and ANLS beside the CER gate, and the text normalisation the two share.
- ``judges``: answer equivalence (the typed rule, or an LLM through an inference backend).
- ``points``: a model's points against teachers' (errors, banded kappa, coverage).
- ``scoring``: the GradingBench gated metric and localization mAP.
- ``agreement``: the points report from two score files (eval/agreement.py).
- ``intervals``: confidence intervals over pages, and paired gains between two evaluations.
- ``confidence``: each item's judgment and box confidence from the reply's token logprobs.
- ``selective``: coverage-accuracy tables and the review threshold chosen from them.
"""
