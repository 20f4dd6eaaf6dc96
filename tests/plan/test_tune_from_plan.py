"""The two tiers in one workflow, on the simulator: `plan` picks, `tune --from-plan --baseline` boots the
user's settings exactly as trial 0 and the plan's picks next, and the report says the gain against the
baseline first and shows the plan's predictions against what its picks measured."""

from __future__ import annotations

import json
import re

import optuna
import yaml

from tuner.cli import main

SPACE = {"name": "tiers", "release": "fork-1.21.2",
         "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
         "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
         "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]},
                        "VLLM_GRAPH_RESERVED_MEM": {"type": "categorical", "choices": [0.05, 0.2]},
                        "VLLM_PROMPT_SEQ_BUCKET_STEP": {"type": "categorical", "choices": [128, 256]}}}
LOAD = ["--num-prompts", "16", "--max-concurrency", "8", "--random-input-len", "200", "--random-output-len", "16"]
SIM = ["--num-warmups", "2", "--time-scale", "0.2", "--startup-time-scale", "0.002"]
# What the user runs today, as an exported env file: two values outside the space, a variable the space
# never searches, and a token that must never be stored.
TODAY = ("# vllm serve flags: --max-num-seqs 12 --gpu-memory-utilization 0.88\n"
         "VLLM_GRAPH_RESERVED_MEM=0.2\n"
         "VLLM_PROMPT_SEQ_BUCKET_STEP=192\n"
         "VLLM_DECODE_BLOCK_BUCKET_STEP=256\n"
         "HF_TOKEN=hf_not_a_real_token\n")
USER_ENV = {"VLLM_GRAPH_RESERVED_MEM": "0.2", "VLLM_PROMPT_SEQ_BUCKET_STEP": "192",
            "VLLM_DECODE_BLOCK_BUCKET_STEP": "256"}


def test_plan_then_tune_boots_the_baseline_exactly_and_the_picks_first(tmp_path, capsys):
    space, today, plan = tmp_path / "tiers.yaml", tmp_path / "today.env", tmp_path / "plan.json"
    space.write_text(yaml.safe_dump(SPACE))
    today.write_text(TODAY)
    assert main(["plan", "--space", str(space), "--out", str(plan), "--picks", "2", "--baseline", str(today),
                 "--json", *LOAD]) == 0
    picks = [p["params"] for p in json.loads(plan.read_text())["picks"]]
    assert len(picks) == 2
    capsys.readouterr()

    results = tmp_path / "results"
    assert main(["tune", "--space", str(space), "--results", str(results), "--from-plan", str(plan),
                 "--baseline", str(today), "--n-trials", "4", *LOAD, *SIM]) == 0
    study = optuna.load_study(study_name="tiers", storage=f"sqlite:///{results / 'tiers' / 'study.db'}")
    trials = sorted(study.trials, key=lambda t: t.number)

    base = trials[0]
    assert base.user_attrs["seed"] == "baseline" and base.user_attrs["status"] == "ok" and base.user_attrs["booted"]
    assert base.user_attrs["env"] == USER_ENV  # exactly the user's settings, the secret left out
    assert base.user_attrs["server"] == {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048,
                                         "max_num_seqs": 12, "gpu_memory_utilization": 0.88}
    assert base.params == {"VLLM_GRAPH_RESERVED_MEM": 0.2}  # the only value the space can take
    env_file = (results / "tiers" / "trials" / "0000" / "trial.env").read_text().splitlines()
    assert env_file == [f"{k}={v}" for k, v in sorted(USER_ENV.items())]
    assert "hf_not_a_real_token" not in (results / "tiers" / "study.db").read_bytes().decode("latin-1")

    assert [t.user_attrs.get("seed") for t in trials[1:3]] == ["plan pick 1", "plan pick 2"]
    assert [t.params for t in trials[1:3]] == picks
    assert study.user_attrs["plan"]["source"] == str(plan)

    html = (results / "tiers" / "report.html").read_text()
    summary = re.search(r"<section id='summary'>(.*?)</section>", html, re.S).group(1)
    assert "over your baseline (trial 0" in summary or "your baseline itself" in summary
    # the baseline's column comes right after the pick's, before the seeds the study started from
    others = [summary.index(label) for label in ("release defaults: trial", "calculator: trial") if label in summary]
    assert others and summary.index("your baseline: trial 0") < min(others)
    assert re.search(r"Against your baseline \(trial 0, [^)]*\): [+-][\d,]+ tok/s \([+-]?\d+%\) throughput",
                     summary) or "It is your baseline" in summary
    section = re.search(r"<section id='plan'>(.*?)</section>", html, re.S).group(1)
    assert "picks are on the measured front" in section and "plan pick" not in section
    assert html.index("id='plan'") < html.index("id='pareto'")


def test_a_plan_for_another_space_is_refused(tmp_path, capsys):
    space, plan = tmp_path / "tiers.yaml", tmp_path / "plan.json"
    space.write_text(yaml.safe_dump(SPACE))
    plan.write_text(json.dumps({"kind": "bucket-tuner plan", "version": 1, "space": {"name": "tiers"},
                                "picks": [{"rank": 1, "params": {"max_num_seqs": 64}}]}))
    assert main(["tune", "--space", str(space), "--results", str(tmp_path / "r"), "--from-plan", str(plan),
                 "--n-trials", "1"]) == 2
    assert "pick 1 sets max_num_seqs=64, which is outside" in capsys.readouterr().err
