"""Stage 5, evaluation: checkpoints asked, scored and reported.

- ``engine``: the six settings and the three-turn decomposition asked of a backend in resumable batches.
- ``run``: one evaluation run (eval/run_eval.py): its identity, its output folder and its steps.
- ``reports``, ``html_report``: tables, plots, overlays, gains, and the self-contained HTML report.
- ``selection``: the best checkpoint of a run by validation score (eval/select_checkpoint.py).
- ``probes``: whether a model reads the pixels (its loss on real against blank images).
"""
