"""`bucket-tuner plan`: every point through the model, the infeasible ones grouped by reason, the predicted
front with bands, the picks, the plan file `tune --from-plan` reads, and plain words at 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.cli import main
from tuner.plan.build import signature
from tuner.plan.document import PlanFileError, read_picks

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
QUICK = ["--num-prompts", "24", "--random-input-len", "256", "--random-output-len", "32", "--max-concurrency", "8"]
# fork 1.21: a token budget below max_num_seqs is refused by the release; a graph-memory and bucket-step mix
MIXED = {"name": "mixed", "release": "fork-1.21.2",
         "server": {"max_model_len": 2048, "block_size": 128},
         "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
         "parameters": {"max_num_batched_tokens": {"type": "categorical", "choices": [64, 2048, 4096]},
                        "max_num_seqs": {"type": "categorical", "choices": [16, 128]},
                        "VLLM_GRAPH_RESERVED_MEM": {"type": "categorical", "choices": [0.05, 0.2]},
                        "VLLM_PROMPT_SEQ_BUCKET_STEP": {"type": "categorical", "choices": [128, 512]}}}


def plan_json(tmp_path: Path, capsys, space: Path, *extra: str) -> dict:
    out = tmp_path / "plan.json"
    assert main(["plan", "--space", str(space), "--json", "--out", str(out), *QUICK, *extra]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == doc
    return doc


def test_every_point_of_a_discrete_space_is_answered(tmp_path, capsys):
    space = tmp_path / "mixed.yaml"
    space.write_text(yaml.safe_dump(MIXED))
    doc = plan_json(tmp_path, capsys, space, "--warmup-budget", "900", "--picks", "3")
    pts = doc["points"]
    assert pts["predicted"] == pts["space_size"] == 24 and not pts["sampled"]
    assert pts["feasible"] + pts["infeasible"] + pts["likely_infeasible"] == 24
    refused = {r["reason"]: r for r in doc["infeasible"]}["refused by the release"]
    # 64 tokens is below both max_num_seqs (v0: also below max_model_len): 8 points, one message shape
    assert refused["count"] == 8 and "max_num_batched_tokens (64)" in refused["examples"][0]["message"]
    front = doc["front"]
    assert 1 <= len(front) <= pts["feasible"]
    for entry in front:
        p = entry["predicted"]
        for name, (lo, hi) in p["bands"].items():
            assert lo <= p[name] <= hi, name
        assert p["warmup_cached_s"] < p["warmup_cold_s"] and p["kv_blocks"] > 0 and p["decode_buckets"] > 0
        assert entry["params"]["max_num_batched_tokens"] != 64
    picks = doc["picks"]
    assert [p["rank"] for p in picks] == [1, 2, 3]
    assert all(p["params"]["max_num_batched_tokens"] != 64 for p in picks)
    assert picks[0]["expected_hypervolume_gain"] >= picks[1]["expected_hypervolume_gain"] > 0
    _, params = read_picks(tmp_path / "plan.json")
    assert params == [p["params"] for p in picks]


def test_picks_are_distinct_configurations_from_the_front_and_its_contenders():
    from tuner.load.workload import RandomWorkload
    from tuner.perfmodel.target import DeviceModel, LoadShape, ModelTarget
    from tuner.plan.build import make_plan
    from tuner.plan.evaluate import Evaluator, Limits
    from tuner.space.schema import SearchSpace

    space = SearchSpace.load(SPACES / "demo.yaml")
    target = ModelTarget("fork-1.21.2", DeviceModel(), workload=RandomWorkload(256, 32, 0.5, num_prompts=24),
                         load=LoadShape(max_concurrency=8))
    plan = make_plan(space, Evaluator(target, Limits(warmup_budget_s=600)), max_points=1000, n_picks=4)
    assert len(plan.points) == 405 and plan.distinct < 405  # bucket steps the release reads the same way
    picked = [plan.points[i] for i, _ in plan.picks]
    assert len({signature(p) for p in picked}) == len(picked) == 4
    assert all(i in plan.could_be for i, _ in plan.picks)
    front_keys = {signature(plan.points[i]) for i in plan.front}
    assert signature(picked[0]) in front_keys
    assert plan.timing["clock_runs"] < 10 and plan.timing["replays"] > 300


def test_the_plan_in_plain_words_fits_80_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    baseline = tmp_path / "today.env"
    baseline.write_text("# vllm serve flags: --max-num-seqs 32\nVLLM_GRAPH_RESERVED_MEM=0.1\n"
                        "VLLM_DECODE_BS_BUCKET_STEP=32\nVLLM_PROMPT_SEQ_BUCKET_STEP=128\n")
    assert main(["plan", "--space", str(SPACES / "demo.yaml"), "--out", str(tmp_path / "p.json"),
                 "--baseline", str(baseline), "--warmup-budget", "600", *QUICK]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("Plan of demo on fork-1.21.2")
    # a command line or a path is not wrapped (copied as is); everything else fits
    assert max(len(line) for line in lines if "bucket-tuner tune" not in line and str(tmp_path) not in line) <= 80
    for heading in ("Boot these first", "Baseline, what you run today", "Predicted front",
                    "Confidently infeasible", "Likely infeasible"):
        assert heading in text
    assert text.index("Boot these first") < text.index("Baseline, what") < text.index("Predicted front")
    assert "against the baseline:" in text and "Best predicted gain (pick" in text
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["baseline"]["params"] == {"max_num_seqs": 32, "VLLM_GRAPH_RESERVED_MEM": 0.1,
                                         "VLLM_DECODE_BS_BUCKET_STEP": 32, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128}
    base = doc["baseline"]["predicted"]
    for pick in doc["picks"]:
        g = pick["vs_baseline"]["warmup_s"]
        assert g["change"] == pytest.approx(pick["predicted"]["warmup_s"] - base["warmup_s"], abs=0.2)
        assert g["percent"] == pytest.approx(100 * g["change"] / base["warmup_s"], abs=0.1)


def test_bad_inputs_are_refused_with_a_clear_line(tmp_path, capsys):
    assert main(["plan", "--space", str(SPACES / "vllm-cpu.yaml"), "--out", str(tmp_path / "x.json")]) == 2
    assert "names no release" in capsys.readouterr().err
    assert main(["plan", "--space", str(SPACES / "demo.yaml"), "--points", "0"]) == 2
    assert "--points must be at least 1" in capsys.readouterr().err
    assert main(["plan", "--space", str(SPACES / "demo.yaml"), "--baseline", str(tmp_path / "nope.env")]) == 2
    assert "nope.env: file not found" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text('{"kind": "something else"}')
    with pytest.raises(PlanFileError, match="not a plan file"):
        read_picks(junk)


def test_a_log_of_a_past_boot_calibrates_the_plan(tmp_path, capsys):
    """A node whose warm-up takes twice the documented time: a plan calibrated from one of its logs predicts
    about twice the warm-up, within narrower bands."""
    from tuner.perfmodel import Corrections, ServerInputs, SimSettings, predict_startup
    from tuner.sim.startup import run_startup_virtual

    env = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_GRAPH_RESERVED_MEM": "0.1"}
    truth = predict_startup("fork-1.21.2", SimSettings(), ServerInputs(max_num_seqs=16, max_model_len=2048,
                                                                      max_num_batched_tokens=4096), env,
                            corrections=Corrections(prompt_warmup=2.0, decode_warmup=2.0, capture=2.0))
    log = tmp_path / "node.log"
    log.write_text("\n".join(part for line in run_startup_virtual(truth).lines for part in line.split("\n")))
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump({"name": "s", "release": "fork-1.21.2", "env": env,
                                     "server": {"max_model_len": 2048, "block_size": 128,
                                                "max_num_batched_tokens": 4096},
                                     "parameters": {"max_num_seqs": {"type": "categorical", "choices": [16, 32]}}}))
    prior = plan_json(tmp_path, capsys, space)
    calibrated = plan_json(tmp_path, capsys, space, "--calibrate-from", str(log))
    assert prior["calibration"]["boots"] == 0 and calibrated["calibration"]["boots"] == 1
    assert calibrated["calibration"]["from_logs"] == [str(log)]

    def warmup(doc, seqs):
        entry = next(e for e in doc["front"] + doc["picks"] if e["params"]["max_num_seqs"] == seqs)
        return entry["predicted"]["warmup_s"], entry["predicted"]["bands"]["warmup_s"]

    (p, (p_lo, p_hi)), (c, (c_lo, c_hi)) = warmup(prior, 16), warmup(calibrated, 16)
    assert c == pytest.approx(truth.warmup_seconds, rel=0.1) and 1.7 < c / p < 2.3
    assert c_hi / c_lo < (p_hi / p_lo) / 2


def test_a_plan_reads_the_model_with_the_servers_hf_overrides(tmp_path, capsys):
    # Qwen3-8B serves 40,960 tokens; a space at 65,536 is refused before anything, unless the server's overrides
    # extend the context, and the plan records them with its target
    long = tmp_path / "long.yaml"
    long.write_text(json.dumps({"name": "long", "release": "gaudi-main",
                                "server": {"max_model_len": "64k", "block_size": 128},
                                "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}}}))
    assert main(["plan", "--space", str(long), "--model", "Qwen/Qwen3-8B", "--out", str(tmp_path / "x.json")]) == 2
    assert "max_model_len 64000 is longer than --model Qwen/Qwen3-8B serves: 40,960 tokens" in capsys.readouterr().err
    doc = plan_json(tmp_path, capsys, long, "--model", "Qwen/Qwen3-8B", "--hf-overrides",
                    '{"max_position_embeddings": 65536}')
    assert doc["target"]["hf_overrides"] == '{"max_position_embeddings":65536}'
