"""The command lines of the tools that ask a checkpoint are made from their options dataclasses: every flag is a
field, with the field's default, and --help shows each default."""

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gbtrain.backends import BACKENDS, ModelOptions
from gbtrain.cli import add_options, parse_options
from gbtrain.evaluation import EvalRun
from gbtrain.grading import GradeRun
from gbtrain.scoring import ScoreRun
from gbtrain.selection import SelectRun

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"eval/run_eval.py": (EvalRun, ["--model", "m", "--data", "d", "--out", "o"]),
         "eval/grade_pages.py": (GradeRun, ["--model", "m", "--pages", "p", "--out", "o"]),
         "eval/select_checkpoint.py": (SelectRun, ["--run", "r", "--data", "d", "--out", "o"]),
         "eval/score.py": (ScoreRun, ["--data", "d", "--level", "L1", "--mode", "answer-free", "--predictions", "p",
                                      "--coords", "qwen25", "--out", "o"])}


def help_text(script: str) -> str:
    shown = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                           check=True).stdout
    return " ".join(shown.split())


@pytest.mark.parametrize("script", TOOLS)
def test_flags_are_the_fields_with_their_defaults(script):
    options, required = TOOLS[script]
    ap = argparse.ArgumentParser()
    add_options(ap, options)
    args = vars(ap.parse_args(required))
    assert set(args) == {f.name for f in dataclasses.fields(options)}
    if issubclass(options, ModelOptions):  # every tool that asks a model offers every model option
        assert {f.name for f in dataclasses.fields(ModelOptions)} <= set(args)
    given = {f.name: args[f.name] for f in dataclasses.fields(options) if f.default is dataclasses.MISSING}
    assert parse_options(options, None, required) == options(**given)  # defaults: the dataclass's own
    shown = help_text(script)  # the script's --help lists every field's flag
    assert all("--" + f.name.replace("_", "-") in shown for f in dataclasses.fields(options))


def test_help_shows_each_default_the_registered_backends_and_no_forms():
    shown = help_text("eval/run_eval.py")
    assert "{" + ",".join(BACKENDS) + "}" in shown
    for default in ("(default: 8192)", "(default: 32768)", "(default: vllm)", "(default: 256)", "(default: rule)"):
        assert default in shown, default
    assert "--keep-merged, --no-keep-merged" in help_text("eval/select_checkpoint.py")
    assert parse_options(SelectRun, None, [*TOOLS["eval/select_checkpoint.py"][1], "--no-keep-merged"]).keep_merged \
        is False


@pytest.mark.parametrize("config", sorted((ROOT / "configs/eval").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_eval_configs_parse_and_flags_override_them(config):
    run = parse_options(EvalRun, None, ["--config", str(config), *TOOLS["eval/run_eval.py"][1]])
    header = config.read_text(encoding="utf-8").split("\n\n")[0]
    assert "python eval/run_eval.py --config configs/eval/" + config.name in header  # the launch command
    assert parse_options(EvalRun, None, ["--config", str(config), "--model", "m", "--data", "d", "--out", "o",
                                         "--max-tokens", "7"]).max_tokens == 7
    assert run != EvalRun(model="m", data="d", out="o")  # the file changed something


@pytest.mark.parametrize(("text", "message"), [
    ("bogus: 1\n", r"unknown key\(s\) bogus"),
    ("backend: tgi\n", r"backend: 'tgi' is not one of vllm, hf, openai"),
    ("- a list\n", r"must be a mapping"),
    ("max_tokens: [1\n", r"bad config"),
])
def test_a_bad_config_is_one_usage_error_naming_it(tmp_path, capsys, text, message):
    path = tmp_path / "eval.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        parse_options(EvalRun, None, ["--config", str(path), *TOOLS["eval/run_eval.py"][1]])
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(message, last), last


def test_a_config_can_give_the_required_options(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text("model: m\ndata: d\nout: o\nthree_turn: true\n", encoding="utf-8")
    run = parse_options(EvalRun, None, ["--config", str(path), "--no-three-turn"])
    assert (run.model, run.out, run.three_turn) == ("m", "o", False)


def test_key_value_overrides_as_the_training_tools_take_them(capsys):
    required = TOOLS["eval/run_eval.py"][1]
    run = parse_options(EvalRun, None, [*required, "max_tokens=12", "three_turn=true", "settings=L1-af"])
    assert (run.max_tokens, run.three_turn, run.settings) == (12, True, "L1-af")
    assert parse_options(EvalRun, None, ["model=m", "data=d", "out=o"]) == EvalRun(model="m", data="d", out="o")
    assert parse_options(EvalRun, None, [*required, "max_tokens=12", "--max-tokens", "5"]).max_tokens == 5  # flags win
    for argv, message in (([*required, "max_tokenz=1"], r"unknown key\(s\) max_tokenz"),
                          ([*required, "stray"], r"stray: options after the flags must be key=value")):
        with pytest.raises(SystemExit):
            parse_options(EvalRun, None, argv)
        assert re.search(message, capsys.readouterr().err.strip().splitlines()[-1])
