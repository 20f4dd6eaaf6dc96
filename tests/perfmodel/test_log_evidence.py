"""What a log's warm-up timings are worth (tuner/perfmodel/evidence.py): a simulated node whose prompt
compiles x2, decode x1.5 and captures x2 slower than documented writes its startup log; that log, whole
or pasted with lines left out, must give each phase's factor, with a noise that grows as the log shows
less and never a sample that claims more than it saw."""

from __future__ import annotations

import math
import re

import pytest

from tuner.perfmodel import Corrections, ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.calibration import Calibration
from tuner.perfmodel.target import DeviceModel, ModelTarget
from tuner.sim.startup import run_startup_virtual
from tuner.study.logcalibration import log_sample

SERVER = {"max_model_len": 4096, "block_size": 128, "max_num_batched_tokens": 8192}
ENV = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_GRAPH_RESERVED_MEM": "0.1", "VLLM_DECODE_BS_BUCKET_STEP": "16",
       "VLLM_DECODE_BS_BUCKET_MAX": "64"}
TRUTH = Corrections(prompt_warmup=2.0, decode_warmup=1.5, capture=2.0)
CTX = ModelTarget(release="fork-1.21.2",
                   device_model=DeviceModel("gaudi2", "llama-3.1-8b", "bf16"))
STEP = re.compile(r"\[Warmup\]\[(Prompt|Decode|Graph/Prompt|Graph/Decode)\]\[(\d+)/(\d+)\]")


@pytest.fixture(scope="module")
def node_log() -> list[str]:
    sim = SimSettings(model="llama-3.1-8b", device="gaudi2", dtype="bf16", gpu_memory_utilization=0.9)
    inputs = ServerInputs(block_size=128, max_num_seqs=64, max_model_len=4096, max_num_batched_tokens=8192)
    run = run_startup_virtual(predict_startup("fork-1.21.2", sim, inputs, ENV, corrections=TRUTH))
    return [part for line in run.lines for part in line.split("\n")]


def _single(got, name):
    return next(o for o in got.observations if set(o.weights) == {name})


def _factors(got):
    return {k: math.exp(got.factor(k)) for k in ("prompt_warmup", "decode_warmup", "capture") if got.factor(k)}


def test_a_whole_log_gives_each_phase_its_factor_with_little_noise(node_log):
    got = log_sample(node_log, CTX, SERVER, source="node.log")
    f = _factors(got)
    assert f["prompt_warmup"] == pytest.approx(2.0, rel=0.03) and f["decode_warmup"] == pytest.approx(1.5, rel=0.03)
    assert f["capture"] == pytest.approx(2.0, rel=0.05)
    for name in f:
        assert _single(got, name).noise < 0.02, name  # whole phases: only the 1-s stamps are uncertain
    assert not any("steps in" in n for n in got.notes)  # nothing elided, nothing to say


def test_elided_middles_still_time_each_phase_once(node_log):
    """Only the first and last three lines of each phase kept, `...` in between: one coarse sample per
    phase over the steps it spans, not the gap charged to one step."""
    cut: list[str] = []
    for line in node_log:
        m = STEP.search(line)
        if m and 3 < int(m[2]) < int(m[3]) - 2:
            if cut[-1] != "...":
                cut.append("...")
            continue
        cut.append(line)
    got = log_sample(cut, CTX, SERVER, source="pasted.log")
    f = _factors(got)
    assert f["prompt_warmup"] == pytest.approx(2.0, rel=0.03) and f["decode_warmup"] == pytest.approx(1.5, rel=0.03)
    assert any("kept as one sample over the steps it spans" in n for n in got.notes)


def test_left_out_decode_lines_are_one_coarse_sample_over_the_steps_they_span(node_log):
    cut = [line for line in node_log if not re.search(r"\[Warmup\]\[Decode\]", line)]
    got = log_sample(cut, CTX, SERVER, source="no-decode.log")
    (gap,) = [o for o in got.observations if "decode_warmup" in o.weights]
    assert gap.weights["decode_warmup"] > 0.9 and math.exp(gap.value) == pytest.approx(1.5, rel=0.05)
    assert any("257 steps in" in n and "one sample" in n for n in got.notes)


def test_untimed_decode_lines_are_timed_by_the_servers_total(node_log):
    """Decode lines without their timestamps (bare prints): no interval times them, the server's own
    'Warmup finished' does, over exactly the steps no timed line covers."""
    untimed = [re.sub(r"^INFO \d\d-\d\d \S+ \[[^\]]+\] ", "", line) if re.search(r"\[Warmup\]\[Decode\]", line)
               else line for line in node_log]
    got = log_sample(untimed, CTX, SERVER, source="untimed.log")
    assert any("untimed" in n for n in got.notes) and any("no timed line covers" in n for n in got.notes)
    total = [o for o in got.observations if "decode_warmup" in o.weights]
    assert len(total) == 1 and math.exp(total[0].value) == pytest.approx(1.5, rel=0.1)
    assert got.calibration().corrections.decode_warmup == pytest.approx(1.5, rel=0.15)


def test_a_log_cut_early_is_noisier_and_weighs_less(node_log):
    """The first 20 prompt steps only: the rest of the phase is unseen, so its sample is noisier and the
    calibration from it less sure than from the whole log; never surer than a boot."""
    steps = [i for i, line in enumerate(node_log) if STEP.search(line)]
    cut = node_log[:steps[20]]
    early, whole = (log_sample(x, CTX, SERVER, source="x") for x in (cut, node_log))
    assert _single(early, "prompt_warmup").noise > 3 * _single(whole, "prompt_warmup").noise
    assert "decode_warmup" not in _factors(early)
    ce, cw = early.calibration(), whole.calibration()
    assert ce.fit("prompt_warmup").se > cw.fit("prompt_warmup").se
    boot = Calibration.from_samples([{"prompt_warmup": math.log(2.0), "decode_warmup": math.log(1.5),
                                      "capture": math.log(2.0)}])
    for name in ("prompt_warmup", "decode_warmup", "capture"):
        assert cw.fit(name).se >= boot.fit(name).se * 0.999, name
    # prompt evidence alone moves decode (the shared node-speed factor)
    assert ce.corrections.decode_warmup > 1.4
