"""`explain`'s advice names only variables its release reads, on every log in the repository and on the
simulator's log of every release; its text prints the tune command it points to and states what it
assumed before the advice that depends on it."""

from __future__ import annotations

import pytest

from tuner.buckets import names, profiles
from tuner.explain import explain
from tuner.explain.render import render_text
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.sim.startup import run_startup_virtual

from ..conftest import LOG_SAMPLES

LOGS = sorted(LOG_SAMPLES.rglob("*.log"))
SMALL = ServerInputs(block_size=128, max_num_seqs=16, max_model_len=2048, max_num_batched_tokens=4096)


def _lines(path):
    return [x for x in path.read_text(errors="replace").splitlines() if not x.startswith("# SOURCE")]


def _sim_lines(profile: str) -> list[str]:
    run = run_startup_virtual(predict_startup(profile, SimSettings(), SMALL, {}))
    return [part for line in run.lines for part in line.split("\n")]


def _check(x) -> None:
    profile = x.advice.profile
    for alt in x.advice.alternatives:
        unread = [n for n in alt.env if names.judged(n) and n not in names.release_variables(profile)]
        assert not unread, f"{alt.name} on {profile} sets {unread}, which {profile} does not read"
    text = render_text(x).splitlines()
    advice_at = next((i for i, line in enumerate(text) if line.startswith("Advice:")), None)
    if advice_at is not None:
        assert not any(line.strip().startswith("assumed:") for line in text[advice_at:]), "assumed: after the advice"
    if any("tune command below" in line for line in text):
        assert any(line.strip().startswith("bucket-tuner tune ") for line in text), "no tune command printed"


def test_the_sweep_sees_the_logs():
    assert len(LOGS) >= 15


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_advice_on_every_log_names_only_variables_its_release_reads(log):
    x = explain(_lines(log), source=str(log))
    _check(x)


@pytest.mark.parametrize("profile", list(profiles()))
def test_advice_on_every_release_names_only_variables_it_reads(profile):
    x = explain(_sim_lines(profile))
    assert profile in x.release.profiles and x.advice.profile in x.release.profiles and x.advice.alternatives
    _check(x)
    assert x.advice.tune_command and "bucket-tuner" in x.advice.tune_command[0]


def test_fork_117_readme_advice_uses_the_decode_seq_variables():
    x = explain(_lines(LOG_SAMPLES / "fork-v0.5.3-gaudi-1.17_readme_startup.log"), source="f117.log")
    calc = next(a for a in x.advice.alternatives if a.name == "calculator")
    assert {"VLLM_DECODE_SEQ_BUCKET_MIN", "VLLM_DECODE_SEQ_BUCKET_STEP", "VLLM_DECODE_SEQ_BUCKET_MAX"} <= set(calc.env)
    assert not any(n.startswith("VLLM_DECODE_BLOCK_BUCKET") for a in x.advice.alternatives for n in a.env)
    logged = next(a for a in x.advice.alternatives if a.name == "as logged")
    assert logged.env["VLLM_DECODE_SEQ_BUCKET_MAX"] == "2048" and logged.decode_buckets == 48
    text = render_text(x)
    assert "verify it with the tune command below" in text
    assert "--release fork-1.17" in text.split("Verify with a study")[1]
    assert text.index("assumed: max_num_seqs=4") < text.index("Advice:")
