"""The command lines of the tools are made from their options dataclasses: every flag is a field, with the field's
default, and --help shows each default."""

import argparse
import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gbtrain.cli import add_options, parse_options
from gbtrain.config import field_default
from gbtrain.data.converters import ConvertRun
from gbtrain.data.hub_export import HubExportRun
from gbtrain.data.preview import PreviewRun
from gbtrain.data.synth.generate import SynthRun
from gbtrain.evaluation.probes import RelianceRun
from gbtrain.evaluation.reports import CompareRun
from gbtrain.evaluation.run import EvalRun
from gbtrain.evaluation.selection import SelectRun
from gbtrain.grading.grade import GradeRun
from gbtrain.grading.review import ReviewRun
from gbtrain.inference.registry import BACKENDS, ModelOptions
from gbtrain.metric.agreement import AgreementRun
from gbtrain.metric.scoring import ScoreRun
from gbtrain.miniature.tiny_model import TinyModelRun
from gbtrain.train.merge import MergeRun

ROOT = Path(__file__).resolve().parents[2]


def script_options(script: str, name: str) -> type:
    """An options dataclass that a bench script defines itself (they import bench_child beside them)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(Path(script).stem, ROOT / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


TOOLS = {"eval/run_eval.py": (EvalRun, ["--model", "m", "--data", "d", "--out", "o"]),
         "eval/grade_pages.py": (GradeRun, ["--model", "m", "--pages", "p", "--out", "o"]),
         "eval/select_checkpoint.py": (SelectRun, ["--run", "r", "--data", "d", "--out", "o"]),
         "eval/score.py": (ScoreRun, ["--data", "d", "--level", "L1", "--mode", "answer-free", "--predictions", "p",
                                      "--coords", "qwen25", "--out", "o"]),
         "eval/agreement.py": (AgreementRun, ["--teacher", "t.jsonl", "--model", "m.jsonl", "--out", "r.json"]),
         "eval/compare.py": (CompareRun, ["a.json", "b.json", "--out", "g.md"]),
         "eval/review.py": (ReviewRun, ["import", "--graded", "g"]),
         "recipes/merge_lora.py": (MergeRun, ["--base", "b", "--adapter", "a", "--out", "o"]),
         "data_builders/preview.py": (PreviewRun, ["--data", "d", "--out", "o"]),
         "data_builders/convert.py": (ConvertRun, ["--mapping", "m.yaml", "--export", "e.json", "--out", "o"]),
         "scripts/image_reliance.py": (RelianceRun, ["--model", "m", "--data", "d"]),
         "scripts/make_tiny_model.py": (TinyModelRun, ["--out", "o"]),
         "data_builders/synth_pages.py": (SynthRun, ["--out", "o"]),
         "data_builders/export_hub.py": (HubExportRun, ["--build", "b", "--out", "o"]),
         "scripts/bench_data.py": (script_options("scripts/bench_data.py", "BenchData"), []),
         "scripts/bench_eval.py": (script_options("scripts/bench_eval.py", "BenchEval"),
                                   ["--model", "m", "--data", "d"]),
         "scripts/bench_score.py": (script_options("scripts/bench_score.py", "BenchScore"), []),
         "scripts/bench_train.py": (script_options("scripts/bench_train.py", "BenchTrain"), ["--config", "c.yaml"]),
         "scripts/bench_vision_cache.py": (script_options("scripts/bench_vision_cache.py", "BenchVisionCache"),
                                           ["--config", "c.yaml"]),
         "scripts/bench_gpu.py": (script_options("scripts/bench_gpu.py", "BenchGpu"), []),
         "scripts/bench_pdf_memory.py": (script_options("scripts/bench_pdf_memory.py", "BenchPdf"),
                                         ["--model", "m", "--work", "w"]),
         "scripts/bench_hub_export.py": (script_options("scripts/bench_hub_export.py", "BenchHub"), []),
         "scripts/bench_certify.py": (script_options("scripts/bench_certify.py", "BenchCertify"), [])}


def shown_as(f: dataclasses.Field) -> str:
    """How --help names a field: its flag, or its own name for a positional argument."""
    return f.name if f.metadata.get("positional") else "--" + f.name.replace("_", "-")


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
    given = {f.name: args[f.name] for f in dataclasses.fields(options) if field_default(f) is dataclasses.MISSING}
    assert parse_options(options, None, required) == options(**given)  # defaults: the dataclass's own
    assert all(f.metadata.get("help") for f in dataclasses.fields(options)), "a field without help"
    shown = help_text(script)  # the script's --help lists every field's flag
    assert all(shown_as(f) in shown for f in dataclasses.fields(options))


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


def test_positional_arguments_come_in_any_order_with_the_flags_or_from_a_config(tmp_path, capsys):
    """compare.py's two reports keep their places, before, between or after the flags; key=value follow them."""
    expected = CompareRun(base="a.json", sft="b.json", out="g.md")
    for argv in (["a.json", "b.json", "--out", "g.md"], ["--out", "g.md", "a.json", "b.json"],
                 ["a.json", "--out", "g.md", "b.json"], ["a.json", "b.json", "out=g.md"]):
        assert parse_options(CompareRun, None, argv) == expected, argv
    path = tmp_path / "compare.yaml"
    path.write_text("base: a.json\nsft: b.json\n", encoding="utf-8")
    assert parse_options(CompareRun, None, ["--config", str(path), "--out", "g.md"]) == expected
    assert parse_options(CompareRun, None, ["--config", str(path), "x.json", "--out", "g.md"]).base == "x.json"
    with pytest.raises(SystemExit) as stop:
        parse_options(CompareRun, None, ["a.json", "--out", "g.md"])
    assert stop.value.code == 2
    assert "the following arguments are required: sft" in capsys.readouterr().err


def test_a_tool_that_wraps_a_config_takes_its_file_and_key_values_as_its_own():
    """bench_train.py's --config and key=value are the recipe's; convert.py's key=value change the mapping."""
    bench = TOOLS["scripts/bench_train.py"][0]
    run = parse_options(bench, None, ["--config", "c.yaml", "model=M", "dataset=D", "--samples", "8", "output_dir=o"])
    assert (run.config, run.overrides, run.samples) == ("c.yaml", ["model=M", "dataset=D", "output_dir=o"], 8)
    assert parse_options(bench, None, ["--config", "c.yaml"]).overrides == []
    convert = parse_options(ConvertRun, None, [*TOOLS["data_builders/convert.py"][1], "subject=Mathematics",
                                               "--format", "coco"])
    assert convert.mapping_overrides() == ["subject=Mathematics", "format=coco"]
    assert ConvertRun("m", "e", "o").overrides is not ConvertRun("m", "e", "o").overrides  # one list each


def _unpack_three() -> None:
    first, second = [1, 2, 3]  # noqa: F841 - the bug under test


def _raise_named() -> None:
    raise ValueError("data/L1.json [record 7]: id must be text")


def test_a_user_error_is_one_line_and_a_bug_keeps_its_traceback(tmp_path, capsys):
    """Issue 57: a ValueError the interpreter raises in gbtrain's code ("too many values to unpack") is a bug and
    keeps its traceback; one raised with a message, a malformed CSV (csv.Error) and a file's bad bytes end the tool
    with one line and exit 2."""
    import csv

    from gbtrain.cli import is_bug, user_errors

    with pytest.raises(ValueError, match="too many values to unpack"), user_errors("tool"):
        _unpack_three()
    assert is_bug(_caught(_unpack_three)) and not is_bug(_caught(_raise_named))
    table = tmp_path / "t.csv"
    table.write_text('a,"b\n')
    for work in (_raise_named, lambda: list(csv.reader(open(table, newline=""), strict=True)),  # noqa: SIM115
                 lambda: b"\xff".decode("utf-8")):
        with pytest.raises(SystemExit) as stop, user_errors("tool"):
            work()
        assert stop.value.code == 2
        assert capsys.readouterr().err.startswith("tool: ")


def _caught(work) -> BaseException:
    try:
        work()
    except ValueError as e:
        return e
    raise AssertionError("no error")
