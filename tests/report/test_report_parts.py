"""The report's building blocks on inputs whose answers are known: startup phases timed from a log,
padding against bucket edges, the convergence verdict, seed trials, human units."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.logparse import GeneratedBuckets
from tuner.report.convergence import convergence
from tuner.report.facts import accelerator_hours, cards, seed_trial
from tuner.report.padding import padding
from tuner.report.startup import read_log
from tuner.vocabulary import display as units

P = "[hpu_model_runner.py:2679]"
MEM = "of device memory (14.97 GiB/94.62 GiB used) and 2.95 GiB of host memory (475.2 GiB/1007 GiB used)"
GRAPHS = "Using 7.131 GiB/15.05 GiB of free device memory for HPUGraphs, 2.139 GiB for prompt and 4.992 GiB for decode"
LOG = f"""INFO 01-01 10:00:00 [api_server.py:242] vLLM API server version 0.7.2+gaudi1212
INFO 01-01 10:00:09 [hpu_model_runner.py:661] Loading model weights took in total 14.97 GiB {MEM}
INFO 01-01 10:00:11 [hpu_worker.py:182] Model profiling run took 504.3 MiB {MEM}
INFO 01-01 10:00:12 [common.py:85] Generated 2 prompt buckets [bs, seq]: [(1, 128), (1, 256)]
INFO 01-01 10:00:12 {P} [Warmup][Prompt][1/2] batch_size:1 seq_len:256 free_mem:15.05 GiB
INFO 01-01 10:00:20 {P} [Warmup][Prompt][2/2] batch_size:1 seq_len:128 free_mem:15.05 GiB
INFO 01-01 10:00:30 {P} [Warmup][Decode][1/1] batch_size:1 num_blocks:128 free_mem:15.05 GiB
INFO 01-01 10:01:00 [hpu_model_runner.py:2813] {GRAPHS} (VLLM_GRAPH_PROMPT_RATIO=0.3)
INFO 01-01 10:01:05 {P} [Warmup][Graph/Prompt][1/2] batch_size:1 seq_len:128 free_mem:15.05 GiB
INFO 01-01 10:02:00 [hpu_model_runner.py:2893] Warmup finished in 108 secs, allocated 734.8 MiB of device memory
WARNING 01-01 10:03:00 [hpu_model_runner.py:1958] Configuration: (prompt, 8, 384) was not warmed-up!
INFO:     127.0.0.1:43994 - "POST /v1/completions HTTP/1.1" 200 OK
"""


def test_startup_phases_are_timed_from_the_log(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(LOG)
    facts = read_log(path)
    assert facts.phase_s == {"start to weights loaded": 9.0, "profiling": 3.0, "prompt warmup": 18.0,
                             "decode warmup": 30.0, "graph capture": 60.0}
    assert facts.weights_s is None  # this log gives the weights' memory, not their time
    assert facts.warmup_s == 108.0
    assert facts.generated["prompt"].buckets == ((1, 128), (1, 256))
    assert facts.not_warmed_up == ["prompt (8, 384)"]
    assert not any("POST /v1" in line for line in facts.excerpt)  # access-log lines are left out
    assert read_log(tmp_path / "missing.log") is None


def test_the_log_excerpt_starts_at_the_first_error(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("INFO 01-01 10:00:00 [a.py:1] fine\n" * 30 + "Traceback (most recent call last):\n"
                    "  File \"x.py\", line 1\nRuntimeError: boom\n")
    assert read_log(path).excerpt[0].startswith("Traceback") and read_log(path).excerpt[-1] == "RuntimeError: boom"


def _trial(number, values, attrs, state=TrialState.COMPLETE, params=None, system=None):
    t = create_trial(state=state, values=values if state == TrialState.COMPLETE else None,
                     params=params or {"x": 1}, distributions={"x": CategoricalDistribution([1, 2])},
                     user_attrs=attrs, system_attrs=system or {})
    t.number = number
    return t


def test_padding_against_the_bucket_edges(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"input_lens": [100, 200, 512, 600], "output_lens": [28, 56, 0, 10],
                                 "errors": ["", "", "", "timeout"]}))
    t = _trial(0, [1, 1, 1], {"artifacts": {"bench_json": str(bench)},
                              "server": {"block_size": 128, "max_num_seqs": 4}})
    generated = {
        "prompt": GeneratedBuckets(phase="prompt", count=3, dims=("bs", "seq"), buckets=((1, 128), (1, 256), (2, 512))),
        "decode": GeneratedBuckets(phase="decode", count=4, dims=("bs", "total_blocks"),
                                   buckets=((1, 2), (1, 4), (4, 8), (4, 16))),
    }
    pad = padding(t, generated, max_concurrency=8)
    assert pad.input_lens == [100, 200, 512]  # the failed request is left out
    assert pad.prompt_edges == [128, 256, 512]
    assert pad.prompt_waste == pytest.approx(1 - (100 + 200 + 512) / (128 + 256 + 512))
    # 4 running sequences (max_num_seqs) -> batch bucket 4; 8 and 16 total blocks = 2 and 4 per sequence
    assert pad.decode_bs == 4 and pad.decode_edges == [256, 512]
    mids = [114, 228, 512]  # prompt + half the output, padded to blocks (128, 256, 512) then to an edge
    assert pad.decode_waste == pytest.approx(1 - sum(mids) / (256 + 256 + 512))
    assert pad.beyond_prompt == 0 and pad.beyond_decode == 0


def _study(values_by_trial) -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    for i, v in enumerate(values_by_trial):
        study.add_trial(_trial(i, v, {"status": "ok", "feasible": True,
                                      "timings": {"boot_and_warmup_s": 1.0, "load_s": 2.0}}))
    study.set_user_attr("backend", {"kind": "sim", "time_scale": 0.5, "startup_time_scale": 0.01})
    return study


def test_convergence_says_whether_more_trials_would_pay_off():
    flat = [[100 + i, 50.0, 100.0] for i in range(3)] + [[50, 60.0, 110.0]] * 9
    late = [[100, 50.0, 100.0]] * 9 + [[100, 50.0, 100.0], [150, 40.0, 90.0], [300, 30.0, 80.0]]
    settled, growing = convergence(_study(flat)), convergence(_study(late))
    assert settled.share[-1] == pytest.approx(1.0) and settled.last_improved == 2 and settled.gain == 0
    assert "add little" in settled.verdict
    assert growing.last_improved == 11 and growing.gain > 0.5 and "would likely pay off" in growing.verdict
    # accelerator-hours: 1 s of boot and warmup at 1/100 speed, 2 s of load at 1/2 speed, one card
    assert growing.hours[0] == pytest.approx((1.0 / 0.01 + 2.0 / 0.5) / 3600)
    assert convergence(_study(flat[:1])).verdict.startswith("Only 1 of 1 trials are feasible")


def test_cards_and_accelerator_hours_follow_tensor_parallelism():
    t = _trial(0, [1, 1, 1], {"argv": ["vllm", "serve", "m", "--tensor-parallel-size", "2"],
                              "timings": {"boot_and_warmup_s": 1800.0, "load_s": 1800.0}})
    assert cards(t) == 2 and accelerator_hours(t, {"kind": "vllm"}) == pytest.approx(2.0)


def test_seed_trial_follows_a_rerun():
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    study.add_trial(_trial(0, None, {"seed": "release defaults", "requeued": True}, state=TrialState.FAIL))
    study.add_trial(_trial(1, [1, 1, 1], {"seed": "calculator"}))
    study.add_trial(_trial(2, [2, 1, 1], {"requeued_from": 0}))
    assert seed_trial(study, "release defaults").number == 2
    assert seed_trial(study, "calculator").number == 1
    assert seed_trial(study, "nothing") is None


@pytest.mark.parametrize("name, value, text", [
    ("output_throughput", 1469.04, "1,469 tok/s"), ("p99_ttft_ms", 1617.0, "1,617 ms"),
    ("warmup_s", 297.0, "4 min 57 s"), ("warmup_s", 45.0, "45 s"), ("warmup_s", 7200.0, "2.0 h"),
    ("kv_blocks", 4103, "4,103"), ("p99_itl_ms", 5.5, "5.5 ms"),
])
def test_human_units(name, value, text):
    assert units.metric(name, value) == text


def test_short_headers():
    assert [units.short(n) for n in ("output_throughput", "p99_ttft_ms", "warmup_s", "median_tpot_ms")] == \
        ["tok/s", "p99 TTFT", "warmup", "median TPOT"]


@pytest.mark.parametrize("args, text", [
    ((49.2, 35.1, 70.3), "49 s (35-70 s)"),
    ((49, 35, 70, None, "3 boots + a log"), "49 s (35-70 s, 3 boots + a log)"),
    ((600, 450, 800, None, "prior"), "10 min 00 s (7.5-13 min, prior)"),
    ((13320, 3209, 52560), "3.7 h (0.9-15 h)"), ((141, 36, 564), "2 min 21 s (0.6-9.4 min)"),
    ((49, None, None), "49 s"), ((None, 1, 2), "-"),
])
def test_a_prediction_is_shown_with_its_band_and_source(args, text):
    assert units.band(*args) == text


def test_the_trials_table_shows_the_warmup_band():
    from tuner.report.sections import _pred_obs

    cell, err = _pred_obs(49, 51, units.seconds, (35, 70, "3 boots"))
    assert cell == "49 s (35-70 s, 3 boots) / 51 s (-4%)" and round(err) == -4
    assert _pred_obs(49, 51, units.seconds, (None, None, None))[0] == "49 s / 51 s (-4%)"  # older records
