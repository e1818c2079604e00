"""The command lines of the tools that ask a checkpoint are made from their options dataclasses: every flag is a
field, with the field's default, and --help shows each default."""

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from gbtrain.backends import BACKENDS, ModelOptions
from gbtrain.evaluation import EvalRun
from gbtrain.grading import GradeRun
from gbtrain.selection import SelectRun

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"eval/run_eval.py": (EvalRun, ["--model", "m", "--data", "d", "--out", "o"]),
         "eval/grade_pages.py": (GradeRun, ["--model", "m", "--pages", "p", "--out", "o"]),
         "eval/select_checkpoint.py": (SelectRun, ["--run", "r", "--data", "d", "--out", "o"])}


def load_parser(script: str):
    spec = importlib.util.spec_from_file_location(Path(script).stem, ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parser()


@pytest.mark.parametrize("script", TOOLS)
def test_flags_are_the_fields_with_their_defaults(script):
    options, required = TOOLS[script]
    args = vars(load_parser(script).parse_args(required))
    assert set(args) == {f.name for f in dataclasses.fields(options)}
    assert options(**args) == options(**{k: v for k, v in args.items() if k in ("model", "run", "data", "pages",
                                                                                 "out")})
    model_flags = {f.name for f in dataclasses.fields(ModelOptions)}
    assert model_flags <= set(args)  # every tool offers every model option


def test_help_shows_each_default_and_the_registered_backends():
    shown = subprocess.run([sys.executable, str(ROOT / "eval/run_eval.py"), "--help"], capture_output=True,
                           text=True, check=True).stdout
    assert "{" + ",".join(BACKENDS) + "}" in shown
    for default in ("(default: 8192)", "(default: 32768)", "(default: vllm)", "(default: 256)", "(default: rule)"):
        assert default in " ".join(shown.split()), default
