"""Calibration reads a plugin log whose warm-up is only tqdm bars (the plugin's default output) through the
same step reading as explain: the bars' counts time the steps, in the release's order whether its pass
compiles ("prompt") or captures graphs ("graph/prompt")."""

from __future__ import annotations

import pytest

from tuner.load.workload import FixedWorkload
from tuner.perfmodel import Corrections, ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.calibration import Calibration
from tuner.perfmodel.target import DeviceModel, ModelTarget, predict
from tuner.sim.startup import run_startup_virtual
from tuner.study.logcalibration import log_sample

SERVER = {"max_model_len": 4096, "block_size": 128, "max_num_batched_tokens": 8192}
TRUTH = Corrections(prompt_warmup=2.0, decode_warmup=2.0, capture=2.0, kv_block=1.1)


@pytest.mark.parametrize("env", [{}, {"PT_HPU_LAZY_MODE": "1"}], ids=["compile", "lazy-graphs"])
def test_a_bars_only_plugin_log_calibrates_the_warmup(env):
    sim = SimSettings(model="llama-3.1-8b", device="gaudi2", dtype="bf16", gpu_memory_utilization=0.9)
    inputs = ServerInputs(block_size=128, max_num_seqs=64, max_model_len=4096, max_num_batched_tokens=8192)
    truth = predict_startup("gaudi-main", sim, inputs, env, corrections=TRUTH)
    lines = [p for line in run_startup_virtual(truth, log_style="tqdm").lines for p in line.split("\n")]
    assert not any("[Warmup]" in line for line in lines)
    ctx = ModelTarget(workload=FixedWorkload(128, 16, num_prompts=2), release="gaudi-main",
                      device_model=DeviceModel("gaudi2", "llama-3.1-8b", "bf16"))
    got = log_sample(lines, ctx, SERVER, source="node.log")
    calibrated = predict(ctx, got.settings, Calibration.from_samples([got.sample]).corrections)
    assert calibrated.warmup_seconds == pytest.approx(truth.warmup_seconds, rel=0.10)


def test_bar_counts_take_their_place_in_a_graph_capture_order():
    from tuner.explain.reading import read_log
    from tuner.logparse.steptimes import StepOrder, read_step_times

    from .test_plugin_tqdm import bar_line

    reading = read_log([bar_line("Prompt warmup processing: ", 3, [1.0, 2.0, 3.0], tag="")])
    order = StepOrder([("graph/prompt", i, 3) for i in (1, 2, 3)])
    st = read_step_times([(t.line_no, t.time_s, t.event) for t in reading.events], order=order)
    assert [(iv.kind, iv.seconds) for iv in st.run.intervals] == [("step", 1.0), ("step", 2.0), ("step", 3.0)]
