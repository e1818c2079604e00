"""Shared fixtures: a tiny Qwen2.5-VL and a few synthetic pages, each built once per test session."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


def pytest_configure(config):
    """Under pytest-xdist (scripts/test.sh, docs/testing.md), worker N keeps to its own share of the cores, and so
    do the processes it starts: vLLM binds its threads to the first core it is allowed, and two workers' engines
    on one core while the other idled took two to three times as long."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count:
        cores = sorted(os.sched_getaffinity(0))
        mine = cores[int(worker.removeprefix("gw")) % len(cores)::int(count)]
        if mine:
            os.sched_setaffinity(0, mine)


CORPUS_PARTS = 8  # the bad-input corpus's share of the work units: a part fills what a slow file leaves


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The work units of `--dist loadgroup`: a test file each (its tests share module fixtures), the bad-input
    corpus in CORPUS_PARTS parts; the files with slow tests first, the most slow tests first, so that the
    longest units start early and the short ones even out the workers' ends (xdist hands a worker the next unit
    in this order when it is almost done: scripts/test.sh passes --no-loadscope-reorder)."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.location[0]] = slow.get(item.location[0], 0) + (item.get_closest_marker("slow") is not None)
    for index, item in enumerate(items):
        group = item.location[0]
        if group.endswith("test_bad_input.py"):
            group += f"#{index % CORPUS_PARTS}"
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: -slow[item.location[0]])  # stable: a file's tests keep their order


CORPUS_OUTCOME = "corpus_outcome"  # the user property of a bad-input case: (case id, outcome class)
_CORPUS_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report):
    """The corpus's outcomes, as each case's report reaches this process (a worker's too, under pytest-xdist)."""
    if report.when == "call":
        for key, value in report.user_properties:
            if key == CORPUS_OUTCOME:
                case_id, outcome = value
                _CORPUS_OUTCOMES[case_id] = outcome


def pytest_terminal_summary(terminalreporter):
    """The bad-input corpus's counts by outcome class, over every case this session ran."""
    if _CORPUS_OUTCOMES and not os.environ.get("PYTEST_XDIST_WORKER"):
        from test_bad_input import counts_table

        terminalreporter.write_line("\n" + counts_table(_CORPUS_OUTCOMES))


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder a session fixture builds, once per test run: under pytest-xdist the workers share it (the first
    to ask builds it under a file lock, the others wait, then only read it), rather than each building its own."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    import shutil

    from filelock import FileLock

    folder = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").is_file():  # a worker that failed mid-build left no marker: built anew
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


# Small images keep the CPU tests fast; the rule (gbtrain.coords) is the same at any budget.
# (tests/data/test_sft_dataset.py repeats these two numbers.)
TEST_MIN_PIXELS = 28 * 28 * 4
TEST_MAX_PIXELS = 28 * 28 * 256


@pytest.fixture(scope="session")
def budget():
    from gbtrain.coords import PixelBudget

    return PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """Hub-shaped: its processor carries the hub's budget (3136-12845056), never the tests' one."""
    from gbtrain.miniature.tiny_model import make_tiny_model

    return built_once(tmp_path_factory, "tiny", lambda d: make_tiny_model(d / "model")) / "model"


@pytest.fixture(scope="session")
def tiny_qwen3vl_dir(tmp_path_factory):
    """Hub-shaped tiny Qwen3-VL (its processor carries the hub's 65536-16777216 budget)."""
    from gbtrain.miniature.tiny_model import make_tiny_model

    return built_once(tmp_path_factory, "tiny-qwen3vl",
                      lambda d: make_tiny_model(d / "model", family="qwen3_vl")) / "model"


# Tests that must hold for every model family take `family_model_dir` (or parametrise over FAMILY_MODELS).
FAMILY_MODELS = {"qwen2_5_vl": "tiny_model_dir", "qwen3_vl": "tiny_qwen3vl_dir"}


@pytest.fixture(params=list(FAMILY_MODELS))
def family_model_dir(request):
    """The tiny model of each family in turn."""
    return request.getfixturevalue(FAMILY_MODELS[request.param])


def budget_for(model_dir):
    """The tests' pixel budget in the model's own image token size."""
    from gbtrain.coords import PixelBudget
    from gbtrain.families import family_of_model

    return PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS, family_of_model(model_dir).patch_factor)


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory):
    """A tiny Qwen3 with Qwen3's chat template: the LLM-judge stand-in."""
    from gbtrain.miniature.tiny_model import make_tiny_qwen3

    return built_once(tmp_path_factory, "qwen3", lambda d: make_tiny_qwen3(d / "model")) / "model"


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory):
    """Twelve synthetic pages in the GradingBench layout."""
    from gbtrain.data.synth.generate import generate_dataset

    return built_once(tmp_path_factory, "synth",
                      lambda d: generate_dataset(d / "data", pages=12, seed=7, workers=2, progress=False)) / "data"


@pytest.fixture(scope="session")
def sft_dir(synth_dir, tiny_model_dir, tmp_path_factory):
    """A small built SFT dataset (test pixel budget, exact lengths with the tiny tokenizer)."""
    from gbtrain.coords import PixelBudget
    from gbtrain.data.build_config import BuildConfig, MixConfig
    from gbtrain.data.sft_dataset import build_sft_dataset

    def build(folder: Path) -> None:
        cfg = BuildConfig(data=str(synth_dir), out=str(folder / "data"), target_count=160, seed=3,
                          validation_share=0.2, test_share=0.1, vision=PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS),
                          max_length=4096, tokenizer=str(tiny_model_dir), mix=MixConfig(three_turn=0.25), workers=2)
        build_sft_dataset(cfg, progress=False)

    return built_once(tmp_path_factory, "sft-train", build) / "data"


@pytest.fixture(scope="session")
def sft_qwen3vl_dir(synth_dir, tiny_qwen3vl_dir, tmp_path_factory):
    """A small SFT set built for the tiny Qwen3-VL: its own box convention (rel1000) and 32 px image tokens."""
    from gbtrain.coords import PixelBudget
    from gbtrain.data.build_config import BuildConfig
    from gbtrain.data.sft_dataset import build_sft_dataset

    def build(folder: Path) -> None:
        cfg = BuildConfig(data=str(synth_dir), out=str(folder / "data"), target_count=40, seed=3, validation_share=0.2,
                          test_share=0.1, coords="rel1000", vision=PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS, 32),
                          max_length=4096, tokenizer=str(tiny_qwen3vl_dir), workers=2)
        build_sft_dataset(cfg, progress=False)

    return built_once(tmp_path_factory, "sft-qwen3vl", build) / "data"


ROOT = Path(__file__).resolve().parents[1]
# each family's tiny model with the SFT set built for it
FAMILY_RUN_FIXTURES = {"qwen2_5_vl": ("tiny_model_dir", "sft_dir"), "qwen3_vl": ("tiny_qwen3vl_dir", "sft_qwen3vl_dir")}
RECIPE_LORA = ("finetune=lora", "lora.r=4", "lora.alpha=8", "freeze={vision_tower: true, merger: false, llm: true}",
               "max_steps=4", "save_steps=2", "eval_steps=2")


def launch(sft_dir, tiny_model_dir, out, *overrides, accelerate_args=("--num_processes", "1", "--cpu"),
           timeout=900, popen=False):
    """`accelerate launch recipes/sft_qwen.py` with the tiny CPU config, as a user runs it."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "accelerate.commands.launch", *accelerate_args, str(ROOT / "recipes" / "sft_qwen.py"),
           "--config", str(ROOT / "configs" / "sft" / "tiny_cpu.yaml"), f"model={tiny_model_dir}",
           f"dataset={sft_dir}", f"output_dir={out}", "report_to=[]", "limit_eval_samples=6", *overrides]
    # unbuffered: each rank's summary line reaches the shared pipe in one write, not cut where a buffer filled
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    if popen:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc


@pytest.fixture(scope="session")
def recipe_lora(request, tmp_path_factory):
    """`recipe_lora(family)`: one LoRA run of the recipe per model family (checkpoints at steps 2 and 4, the final
    adapter at the root) and its merge by recipes/merge_lora.py, made when a test first asks. The merge, evaluation
    and selection tests share them and only read them (a test that changes a run works on a copy)."""
    import subprocess
    import sys

    runs: dict[str, tuple] = {}

    def get(family: str):
        if family not in runs:
            model_fixture, sft_fixture = FAMILY_RUN_FIXTURES[family]
            model, sft = request.getfixturevalue(model_fixture), request.getfixturevalue(sft_fixture)

            def build(folder: Path) -> None:
                launch(sft, model, folder / "run", *RECIPE_LORA)
                proc = subprocess.run([sys.executable, str(ROOT / "recipes" / "merge_lora.py"), "--base", str(model),
                                       "--adapter", str(folder / "run"), "--out", str(folder / "merged")],
                                      capture_output=True, text=True, timeout=300)
                assert proc.returncode == 0, proc.stderr[-3000:]

            folder = built_once(tmp_path_factory, f"lora-{family}", build)
            runs[family] = (model, sft, folder / "run", folder / "merged")
        return runs[family]

    return get


def run_script(tmp_path, source: str, timeout: int = 600):
    """Run `source` (which must guard its work with `if __name__ == "__main__":`, as vLLM spawns processes)
    in a child Python and return the JSON it prints after "RESULT "."""
    import json
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "child_script.py"
    path.write_text(textwrap.dedent(source))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


class ChatEndpoint:
    """A real HTTP server speaking the OpenAI chat API on 127.0.0.1 (`url`; stop it with `server.shutdown()`).
    `answer(model, n)` decides the n-th request (1-based, counted per requested model name): (200, reply text or
    None for no content), or (an error status, the error's message). `logprob`, when given: each character of a
    reply is a token of that logprob, sent when the request asks for logprobs."""

    def __init__(self, answer: Callable[[str, int], tuple[int, str | None]], logprob: float | None = None):
        import http.server
        import json
        import threading
        from collections import Counter

        counts: Counter = Counter()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model = body.get("model", "")
                counts[model] += 1
                status, text = answer(model, counts[model])
                if status != 200:
                    doc = {"error": {"message": text, "type": "invalid_request_error"}}
                else:
                    doc = {"id": "x", "object": "chat.completion", "created": 0, "model": model,
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text}}]}
                    if logprob is not None and body.get("logprobs") and text:
                        doc["choices"][0]["logprobs"] = {"content": [
                            {"token": ch, "logprob": logprob, "bytes": None, "top_logprobs": []} for ch in text]}
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
