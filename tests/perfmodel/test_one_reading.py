"""`explain` and calibration read a log once (logparse.steptimes): on every real log, whole or pasted with
warm-up lines elided, calibration reads the very run, intervals and phase figures `explain` shows, and
with the release's order in place of the log's own the timed stretches stay the same stretches."""

from __future__ import annotations

import pytest

from tuner.explain import explain
from tuner.logparse.steptimes import events_of, read_step_times
from tuner.perfmodel.evidence import step_order
from tuner.perfmodel.target import DeviceModel, ModelTarget, predict
from tuner.space.schema import TrialSettings
from tuner.study.logcalibration import read_for_calibration

from ..conftest import LOG_SAMPLES
from .pastes import elided

LOGS = sorted(str(p.relative_to(LOG_SAMPLES)) for p in LOG_SAMPLES.rglob("*.log"))
F117 = "fork-v0.5.3-gaudi-1.17_readme_startup.log"


def _stretches(run):
    return [(iv.start_line, iv.end_line, iv.seconds, iv.kind, iv.spans) for iv in run.intervals] if run else []


@pytest.mark.parametrize("paste", ["as is", "elided"])
@pytest.mark.parametrize("name", LOGS)
def test_calibration_reads_what_explain_shows(name, paste):
    lines = (LOG_SAMPLES / name).read_text().splitlines()
    lines = elided(lines) if paste == "elided" else lines
    shown = explain(lines)
    read, _ = read_for_calibration(lines)
    assert _stretches(read.reading.primary) == _stretches(shown.reading.primary)
    assert read.timeline.phases == shown.timeline.phases
    assert read.timeline.warmup_total_s == shown.timeline.warmup_total_s
    assert read.bucket_counts == shown.bucket_counts


def test_the_release_order_times_the_same_stretches_as_the_log_order():
    """The fork 1.17 README run placed in the release's order: the same intervals, the same seconds,
    the same steps and gaps; only which buckets a gap spans comes from the release."""
    lines = (LOG_SAMPLES / F117).read_text().splitlines()[:27]
    x = explain(lines)
    ctx = ModelTarget("fork-1.17", DeviceModel("gaudi2", "llama-3.1-8b", "bf16"))
    pred = predict(ctx, TrialSettings(server={"block_size": 128, "max_num_seqs": 4, "max_model_len": 2048,
                                              "gpu_memory_utilization": 0.5},
                                      env={"VLLM_GRAPH_RESERVED_MEM": "0.4", "VLLM_GRAPH_PROMPT_RATIO": "0.5"},
                                      params={}))
    st = read_step_times(events_of(x.reading.events), x.reading.elisions, step_order(pred))
    mine = [(iv.start_line, iv.end_line, iv.seconds, iv.kind, iv.steps) for iv in x.reading.primary.intervals]
    theirs = [(iv.start_line, iv.end_line, iv.seconds, iv.kind, iv.steps) for iv in st.run.intervals]
    assert mine == theirs
    assert [iv.kind for iv in st.run.intervals].count("gap") == 3
