"""eval/score.py end to end: a prediction file in, report.json out (rule judge, and a real vLLM judge)."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_script

from gbtrain.coords import PixelBudget
from gbtrain.data.annotations import load_level
from gbtrain.data.conversations import answer_items

ROOT = Path(__file__).resolve().parents[2]


def write_predictions(path, records, coords="qwen25", drop=0):
    with open(path, "w", encoding="utf-8") as f:
        for r in records[drop:]:
            items = answer_items(r, coords, PixelBudget())
            f.write(json.dumps({"id": r.record_id, "response": json.dumps(items, ensure_ascii=False)},
                               ensure_ascii=False) + "\n")


def run_score(*args):
    return subprocess.run([sys.executable, str(ROOT / "eval" / "score.py"), *map(str, args)], capture_output=True,
                          text=True, timeout=600)


def test_cli_scores_and_reports(synth_dir, tmp_path):
    records = load_level(synth_dir, "L1").records
    write_predictions(tmp_path / "p.jsonl", records, drop=2)
    out = tmp_path / "report.json"
    proc = run_score("--data", synth_dir, "--level", "L1", "--mode", "answer-free", "--predictions",
                     tmp_path / "p.jsonl", "--coords", "qwen25", "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    missing_groups = sum(len(r.groups) for r in records[:2])
    assert report["coverage"]["missing"] == 2
    assert report["accuracy"] == pytest.approx(1 - missing_groups / report["n_groups"], abs=1e-6)
    assert "accuracy" in proc.stdout and "missing 2" in proc.stdout
    with open(tmp_path / "report.questions.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(report["groups"]) and {r["setting"] for r in rows} == {"L1-answer-free"}
    answered = [r for r in rows if r["record_id"] not in {rec.record_id for rec in records[:2]}]
    assert all(r["accurate"] == "True" and r["iou"] and r["text_f1"] == "1" and r["answer_by"] == "rule"
               for r in answered)
    assert {r["accurate"] for r in rows if r not in answered} == {"False"}
    # --ignore-missing: the answered records only, and it says so
    proc = run_score("--data", synth_dir, "--level", "L1", "--mode", "answer-free", "--predictions",
                     tmp_path / "p.jsonl", "--coords", "qwen25", "--ignore-missing", "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["accuracy"] == 1 and report["n_records"] == len(records) - 2
    assert f"scored the {len(records) - 2} records answered, 2 missing and 0 unparsable left out" in proc.stderr


def test_cli_self_check():
    proc = run_score("--self-check")
    assert proc.returncode == 0 and proc.stdout.startswith("self-check passed"), proc.stderr


def test_cli_refuses_duplicates_with_exit_2(synth_dir, tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "x", "response": ""}\n{"id": "x", "response": ""}\n')
    proc = run_score("--data", synth_dir, "--level", "L3", "--mode", "answer-based", "--predictions", p,
                     "--coords", "abs", "--out", tmp_path / "r.json")
    assert proc.returncode == 2 and "duplicated id" in proc.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_cli_with_a_real_vllm_judge(synth_dir, tiny_qwen3_dir, tmp_path):
    """A Qwen3 judge (Qwen3's chat template, thinking off) that is untrained answers neither a strict yes nor
    no: every answer gate it decides fails, so only groups without a reference (unverifiable) can pass, and
    each of its replies is reported as unclear rather than silently taken as "no". It is asked only what the
    typed rule cannot decide: here every answer differs from its reference by a letter, which the rule fails for
    numbers and choices and leaves to the judge for texts."""
    records = load_level(synth_dir, "L3").records[:3]
    ids = {r.record_id for r in records}
    write_predictions(tmp_path / "p.jsonl", records)
    lines = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line["response"] = json.dumps([it | {"answer": it["answer"] + "x"} for it in json.loads(line["response"])],
                                      ensure_ascii=False)
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                                      encoding="utf-8")
    out = tmp_path / "r.json"
    proc = run_score("--data", synth_dir, "--level", "L3", "--mode", "answer-free", "--predictions",
                     tmp_path / "p.jsonl", "--coords", "qwen25", "--judge", f"vllm:{tiny_qwen3_dir}",
                     "--kv-cache-gib", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["settings"]["judge"] == f"vllm:{tiny_qwen3_dir}"
    scored = [g for g in report["groups"] if g["record_id"] in ids]
    assert scored and all(g["reasoned"] == g["unverifiable"] for g in scored)
    replies, gate = report["judge_replies"], report["answer_gate"]
    assert replies["asked"] > 0 and replies["unclear"] == replies["asked"] - replies["yes"] - replies["no"]
    assert gate["by_judge"] > 0 and gate["by_rule"] > 0
    assert all(g["answer_by"] == f"vllm:{tiny_qwen3_dir}" for g in scored if g["answer_type"] == "text")
    if replies["unclear"]:
        assert "neither yes nor no" in proc.stderr


@pytest.mark.slow
def test_the_vllm_judge_turns_thinking_off(tiny_qwen3_dir, tmp_path):
    """The judge's prompt, as vLLM renders it with Qwen3's template, ends in an empty think block."""
    prompt = run_script(tmp_path, f"""
        import json
        from gbtrain.inference.base import SamplingOptions, VLLMMemory, message
        from gbtrain.inference.registry import judge_backend
        if __name__ == "__main__":
            backend = judge_backend("vllm:{tiny_qwen3_dir}", VLLMMemory(1))
            out = backend.generate([[message("Are 4 and 4.0 equivalent?")]], SamplingOptions(max_tokens=4))
            print("RESULT", json.dumps(out[0].prompt))
    """)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize(("args", "message"), [
    (("--match-radius", "nan"), "match radius"), (("--match-radius", "0"), "match radius"),
    (("--match-radius", "-1"), "match radius"), (("--match-radius", "inf"), "match radius"),
    (("--min-pixels", "0"), "--min-pixels 0: must be at least 1"),
    (("--min-pixels", "90000", "--max-pixels", "1000"), "min_pixels"),
    (("--judge", "gpt4"), "judge"),
])
def test_bad_options_exit_2_before_scoring(synth_dir, tmp_path, args, message):
    records = load_level(synth_dir, "L1").records[:2]
    write_predictions(tmp_path / "p.jsonl", records)
    proc = run_score("--data", synth_dir, "--level", "L1", "--mode", "answer-based", "--predictions",
                     tmp_path / "p.jsonl", "--coords", "qwen25", "--out", tmp_path / "r.json", *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r.json").exists()
