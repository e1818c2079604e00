"""Shared fixtures: a tiny Qwen2.5-VL and a few synthetic pages, each built once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Small images keep the CPU tests fast; the rule (gbtrain.coords) is the same at any budget.
# (tests/test_sft_dataset.py repeats these two numbers.)
TEST_MIN_PIXELS = 28 * 28 * 4
TEST_MAX_PIXELS = 28 * 28 * 256


@pytest.fixture(scope="session")
def budget():
    from gbtrain.coords import PixelBudget

    return PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, budget):
    from gbtrain.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", budget)


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory):
    """Twelve synthetic pages in the GradingBench layout."""
    from gbtrain.synth.generate import generate_dataset

    out = tmp_path_factory.mktemp("synth") / "data"
    generate_dataset(out, pages=12, seed=7, workers=2, progress=False)
    return out
