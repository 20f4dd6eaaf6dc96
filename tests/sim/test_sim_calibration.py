"""The simulator against the published example (issue "simulated server", Done when).

fork-1.17, Gaudi 2, Llama-3.1-8B BF16, bs 1..4, seq 128..1024, decode seq 128..2048,
gpu_memory_utilization 0.5, VLLM_GRAPH_RESERVED_MEM 0.4 (vector 01 inputs): the real server logged
24 prompt + 48 decode buckets, 1519 HPU blocks, 15 prompt graphs (62.5%) and 48 decode graphs, and
"Warmup finished in 49 secs" (tests/data/log-samples/fork-v0.5.3-gaudi-1.17_readme_startup.log).
Every figure is printed (run with -s) as well as asserted.
"""

from __future__ import annotations

import re

import pytest

from tuner.perfmodel import CostModel, ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.hardware import GiB
from tuner.sim.startup import run_startup_virtual

from ..conftest import LOG_SAMPLES
from .test_sim_startup import FREE

SAMPLE = LOG_SAMPLES / "fork-v0.5.3-gaudi-1.17_readme_startup.log"
CAL_INPUTS = ServerInputs(block_size=128, max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=4096)
CAL_SIM = SimSettings(model="llama-3.1-8b", device="gaudi2", gpu_memory_utilization=0.5)
CAL_ENV = {"VLLM_GRAPH_RESERVED_MEM": "0.4"}


@pytest.fixture(scope="module")
def calibration():
    pred = predict_startup("fork-1.17", CAL_SIM, CAL_INPUTS, CAL_ENV)
    assert pred.failure is None, pred.failure
    return pred, run_startup_virtual(pred)


def _line(lines, pattern):
    for line in lines:
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matches {pattern!r}")


def test_bucket_counts_and_blocks(calibration):
    pred, start = calibration
    print(f"\nprompt buckets {len(pred.plan.prompt)} (log 24), decode buckets {len(pred.plan.decode)} (log 48), "
          f"HPU blocks {pred.num_blocks} (log 1519)")
    assert (len(pred.plan.prompt), len(pred.plan.decode)) == (24, 48)
    assert pred.num_blocks == 1519
    assert int(_line(start.lines, r"# HPU blocks: (\d+), # CPU blocks: 0").group(1)) == 1519


def test_graph_capture(calibration):
    pred, start = calibration
    prompt = _line(start.lines, r"Graph/Prompt captured:(\d+) \(([\d.]+)%\) used_mem:([\d.]+ \w+) buckets:(.*)$")
    decode = _line(start.lines, r"Graph/Decode captured:(\d+) \(([\d.]+)%\) used_mem:([\d.]+ \w+)")
    print(f"\nprompt graphs {prompt.group(1)} ({prompt.group(2)}%) used {prompt.group(3)} (log: 15 (62.5%) 14.03 GiB); "
          f"decode graphs {decode.group(1)} ({decode.group(2)}%) used {decode.group(3)} (log: 48 (100.0%) 161.9 MiB)")
    assert (prompt.group(1), prompt.group(2)) == ("15", "62.5")
    assert (decode.group(1), decode.group(2)) == ("48", "100.0")
    # The very buckets the real server captured (memory-ratio rules, second pass included).
    assert prompt.group(4) == ("[(1, 128), (1, 256), (1, 384), (1, 512), (1, 640), (1, 768), (1, 896), (1, 1024), "
                               "(2, 128), (2, 256), (2, 384), (2, 512), (2, 640), (4, 128), (4, 256)]")


def test_warmup_time(calibration):
    pred, start = calibration
    secs = int(_line(start.lines, r"Warmup finished in (\d+) secs, allocated ([\d.]+ \w+) of device memory").group(1))
    print(f"\nWarmup finished in {secs} secs (log: 49; model {pred.warmup_seconds:.1f} s); "
          f"deviation {100 * (secs - 49) / 49:+.1f}%")
    assert abs(secs - 49) <= 0.15 * 49


def test_memory_split_matches_log(calibration):
    pred, start = calibration
    m = _line(start.lines, FREE.pattern)
    print(f"\nours: {m.group(0)}\nlog:  Free device memory: 79.16 GiB, 39.58 GiB usable (gpu_memory_utilization=0.5), "
          "15.83 GiB reserved for HPUGraphs (VLLM_GRAPH_RESERVED_MEM=0.4), 23.75 GiB reserved for KV cache")
    assert m.group(1, 2, 4, 6) == ("79.16 GiB", "39.58 GiB", "15.83 GiB", "23.75 GiB")
    budget = _line(start.lines, r"Using ([\d.]+) GiB/([\d.]+) GiB of free device memory for HPUGraphs")
    print(f"graph budget {budget.group(1)} GiB of {budget.group(2)} GiB (log: 15.85 of 55.43)")
    assert abs(float(budget.group(1)) - 15.85) < 0.05 and abs(float(budget.group(2)) - 55.43) < 0.05


def _shape(line: str) -> str:
    """A log line without its timestamp and with every number replaced: what a parser relies on."""
    body = re.sub(r"^(\w+) \d\d-\d\d \d\d:\d\d:\d\d ", r"\1 ", line)
    body = re.sub(r"\.py:\d+\]", ".py:#]", body)
    return re.sub(r"-?\d+(?:\.\d+)?", "#", body)


def test_every_sample_line_has_its_twin(calibration):
    """Each line of the real 1.17 startup log appears in ours with the same shape (numbers aside)."""
    _, start = calibration
    ours = {_shape(line) for line in start.lines}
    sample = [line for line in SAMPLE.read_text().splitlines() if line and not line.startswith("#")]
    missing = [line for line in sample if _shape(line) not in ours]
    print(f"\n{len(sample) - len(missing)}/{len(sample)} sample lines have a same-shaped line in the simulated log")
    assert not missing, "\n".join(missing)


def test_gaudi3_decode_step():
    """Gaudi 3, 8B BF16, batch 64 at ~3k context (1536 blocks of 128): measured 15.4-16.7 ms, ~16 ms."""
    cost = CostModel(SimSettings(device="gaudi3"), block_size=128)
    t = cost.decode_time(64, 64 * 3072 // 128, graphed=True)
    print(f"\nGaudi 3 decode step, bs 64, 1536 blocks: {t * 1000:.2f} ms (published ~16 ms; "
          f"{100 * (t * 1000 - 16) / 16:+.1f}%)")
    assert abs(t * 1000 - 16) <= 0.15 * 16


def test_gaudi2_prefill_and_kv_crosscheck():
    """Section 7.4 sanity figures: 2k-token BF16 prefill on G2 ~135 ms; G3 defaults ~5,750 blocks."""
    t = CostModel(SimSettings(device="gaudi2"), 128).prefill_time(1, 2048, 0, graphed=True)
    pred = predict_startup("fork-1.22", SimSettings(device="gaudi3"), ServerInputs(max_num_seqs=4, max_model_len=4096),
                           {})
    print(f"\nG2 2k prefill {t * 1000:.1f} ms (spec ~135); G3 default KV blocks {pred.num_blocks} (README log 5746); "
          f"free after KV {pred.memory.free_after_kv / GiB:.2f} GiB (README log free_mem 21.06 GiB)")
    assert abs(t * 1000 - 135) < 10
    assert abs(pred.num_blocks - 5746) / 5746 < 0.01
