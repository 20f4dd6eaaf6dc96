"""Warm-up step timings: only contiguous, complete, ordered intervals are per-step samples; gaps,
elisions, restarts, second runs, excerpts out of time order and untimed lines are each recognised and
said (tuner/logparse/steptimes.py)."""

from __future__ import annotations

import pytest

from tuner.explain import read_log
from tuner.logparse.steptimes import StepOrder, elision_lines, events_of, is_elision, read_step_times

from ..conftest import LOG_SAMPLES

F117 = LOG_SAMPLES / "fork-v0.5.3-gaudi-1.17_readme_startup.log"
F122 = LOG_SAMPLES / "fork-v0.9.0.1-gaudi-1.22_readme_exponential.log"


def _times(lines, order=None):
    return read_step_times(events_of(read_log(lines).events), elision_lines(lines), order)


def _step(t: str, phase: str, i: int, n: int, shape: str = "batch_size:1 seq_len:128") -> str:
    return f"INFO 08-02 {t} habana_model_runner.py:1066] [Warmup][{phase}][{i}/{n}] {shape} free_mem:55.43 GiB"


FINISHED = ("INFO 08-02 17:40:00 habana_model_runner.py:1206] Warmup finished in {} secs, allocated 1 GiB of "
            "device memory")


def test_consecutive_steps_are_per_step_samples():
    lines = [_step("17:37:54", "Prompt", 1, 3), _step("17:37:56", "Prompt", 2, 3), _step("17:37:59", "Prompt", 3, 3),
             _step("17:38:00", "Decode", 1, 2), _step("17:38:04", "Decode", 2, 2),
             FINISHED.replace("17:40:00", "17:38:05").format(11)]
    st = _times(lines)
    run = st.run
    assert [(iv.kind, iv.seconds, iv.steps) for iv in run.intervals] == [
        ("step", 2, 1), ("step", 3, 1), ("step", 1, 1), ("step", 4, 1), ("step", 1, 1)]
    assert run.finished_s == 11 and st.resolution_s == 1.0 and st.notes == []


def test_the_1_17_readme_gap_is_one_coarse_sample_not_one_slow_step():
    """Prompt 1/24 followed by Decode 48/48: 28 s over 71 steps, never 28 s for bucket (4, 1024)."""
    st = _times(F117.read_text().splitlines())
    first = st.run.intervals[0]
    assert (first.start.label, first.end.label) == ("prompt 1/24", "decode 48/48")
    assert first.kind == "gap" and first.seconds == 28 and first.steps == 71
    assert not any(iv.kind == "step" and iv.seconds > 5 for iv in st.run.intervals)
    assert any("71 steps in 28 s" in n for n in st.notes)


def test_a_second_run_in_the_same_log_is_found_and_dropped():
    st = _times(F117.read_text().splitlines())
    assert len([r for r in st.runs if r.steps]) == 2
    assert st.run.finished_s == 49 and st.run.first_line == 2  # the complete 08-02 run is the one used
    assert any("time goes back" in n for n in st.notes)
    assert any("only the one at lines 2-26 is used" in n and "30-38" in n for n in st.notes)
    assert st.kept_lines() == set(range(2, 27))


def test_bucket_lines_of_another_start_pasted_in_between_are_left_out():
    """The fork 1.22 README pastes a second start's bucket lines (19:27) between the first start's
    bucket lines (19:15:36) and its warm-up (19:15:38)."""
    st = _times(F122.read_text().splitlines())
    assert any("prompt buckets printed again" in n for n in st.notes) or any(
        "buckets printed again" in r.why_new for r in st.runs)
    assert st.kept_lines() == {2, 3, 4, *range(8, 18)}
    kinds = [(iv.kind, iv.steps) for iv in st.run.intervals]
    assert kinds.count(("gap", 32)) == 1 and kinds.count(("gap", 38)) == 1
    assert st.run.intervals[-1].kind == "dropped"  # the paste ends during decode 42/42
    assert any("log ends during this step" in n for n in st.notes)


@pytest.mark.parametrize("marker", ["...", "  [...]", "…", "<snip>", "(cut)", "[truncated]",
                                    "-- 120 lines omitted --", "# excerpt 2"])
def test_elision_markers_are_recognised(marker):
    assert is_elision(marker)
    lines = [_step("17:37:54", "Prompt", 1, 3), marker, _step("17:37:56", "Prompt", 2, 3),
             _step("17:37:59", "Prompt", 3, 3)]
    iv = _times(lines).run.intervals[0]
    assert iv.elided and iv.kind == "step"  # the indices prove nothing was left out in between


@pytest.mark.parametrize("line", [
    "INFO 08-02 17:37:54 habana_model_runner.py:1066] [Warmup][Prompt][1/24] batch_size:4 seq_len:1024",
    "Loading safetensors checkpoint shards: 100% 163/163 [01:12<00:00,  2.25it/s]",
    "INFO 09-30 14:31:53 habana_model_runner.py:1670] Omitted 25 prompt buckets due to exceeded token budget",
    "", "   "])
def test_log_lines_are_not_elisions(line):
    assert not is_elision(line)


def test_a_restart_splits_the_run_and_the_complete_one_counts():
    lines = [_step("17:37:54", "Prompt", 1, 3), _step("17:37:56", "Prompt", 2, 3),
             _step("17:38:30", "Prompt", 1, 3), _step("17:38:31", "Prompt", 2, 3), _step("17:38:33", "Prompt", 3, 3),
             FINISHED.replace("17:40:00", "17:38:34").format(4)]
    st = _times(lines)
    assert len(st.runs) == 2 and st.chosen == 1
    assert any("prompt 1/3 again after 2/3" in n for n in st.notes)
    assert [iv.seconds for iv in st.run.intervals] == [1, 2, 1]


def test_untimed_steps_are_dropped_and_said():
    lines = ["[Warmup][Prompt][1/2] batch_size:1 seq_len:128 free_mem:55.43 GiB",
             "[Warmup][Prompt][2/2] batch_size:1 seq_len:256 free_mem:55.43 GiB"]
    st = _times(lines)
    assert [iv.kind for iv in st.run.intervals] == ["dropped", "dropped"]
    assert any("untimed" in n for n in st.notes)


def test_the_release_order_places_interleaved_captures():
    """Fork 1.17 captures prompt graphs 1-11, then decode 1-48, then prompt 12-15 with the leftover
    budget: in that order GP11 -> GD1 is one step. A paste that stops before prompt 12 does not show
    the resumption, so in the log's own order GP11 -> GD1 looks like a gap over GP12-24."""
    lines = [_step("17:38:22", "Graph/Prompt", 11, 24), _step("17:38:23", "Graph/Decode", 1, 2),
             _step("17:38:24", "Graph/Decode", 2, 2), _step("17:38:26", "Graph/Prompt", 12, 24),
             _step("17:38:27", "Graph/Prompt", 13, 24)]
    naive = _times(lines[:3])
    assert naive.run.intervals[0].kind == "gap" and naive.run.intervals[0].steps == 14
    ids = ([("graph/prompt", i, 24) for i in range(1, 12)] + [("graph/decode", 1, 2), ("graph/decode", 2, 2)]
           + [("graph/prompt", i, 24) for i in range(12, 14)])
    expected = [("step", 1), ("step", 1), ("step", 2), ("step", 1), ("dropped", None)]
    st = _times(lines, StepOrder(ids))
    assert [(iv.kind, iv.seconds) for iv in st.run.intervals] == expected
    # the whole paste shows prompt 12 after decode 2: the log's own order is reconciled with it
    assert [(iv.kind, iv.seconds) for iv in _times(lines).run.intervals] == expected


def test_a_capture_summary_ends_the_capture_loop_where_it_stopped():
    """Fork <= 1.21 stops capturing when the graph memory is used up: `Graph/Prompt captured:15` after
    prompt graph 15 of 24 closes that step; it is not a gap over graphs 16-24 that never ran."""
    captured = ("INFO 08-02 17:38:43 habana_model_runner.py:1128] Graph/Prompt captured:15 (62.5%) "
                "used_mem:14.03 GiB buckets:[(1, 128)]")
    lines = [_step("17:38:41", "Graph/Prompt", 14, 24), _step("17:38:42", "Graph/Prompt", 15, 24), captured]
    st = _times(lines)
    assert [(iv.kind, iv.seconds, iv.spans) for iv in st.run.intervals] == [
        ("step", 1, (("graph/prompt", 1),)), ("step", 1, (("graph/prompt", 1),))]
    assert st.run.order.total("graph/prompt") == 15


def test_a_step_that_fails_is_no_sample():
    error = "ERROR 08-02 17:38:50 habana_model_runner.py:1066] RuntimeError: graph compile failed"
    lines = [_step("17:38:41", "Prompt", 1, 3), _step("17:38:42", "Prompt", 2, 3), error]
    st = _times(lines)
    assert [iv.kind for iv in st.run.intervals] == ["step", "dropped"]
    assert any("never finished" in n for n in st.notes)


def test_docker_stamps_give_fractional_resolution():
    lines = [f"2024-11-06T03:07:5{i}.{i}21961143Z " + _step(f"03:07:5{i}", "Decode", i + 1, 3) for i in range(3)]
    st = _times(lines)
    assert st.resolution_s < 1.0
    assert [round(iv.seconds, 2) for iv in st.run.intervals[:2]] == [1.1, 1.1]


def test_a_second_start_with_other_settings_is_another_run_before_any_warm_up():
    """vllm-fork PR #206's two starts, the second with another --max-num-batched-tokens: the same bucket
    configs, lists of other lengths, no warm-up line between them; the time only moves forward."""
    cfg = ("INFO 08-27 {} habana_model_runner.py:532] Prompt bucket config (min, step, max_warmup) bs:[1, 32, 64], "
           "seq:[128, 128, 1024]")
    gen = "INFO 08-27 {} habana_model_runner.py:545] Generated {} prompt buckets: [(1, 128), (1, 256)]"
    x = read_log([cfg.format("14:48:57"), gen.format("14:48:57", 23), cfg.format("14:54:41"),
                  gen.format("14:54:41", 52)])
    assert [(r.first_line, r.why) for r in x.runs] == [
        (1, "start of the log"), (3, "52 prompt buckets generated after 23 (another start, with other settings)")]
    # the same list again (the plugin's runner building its lists anew) stays one start
    assert len(read_log([gen.format("14:48:57", 23), gen.format("14:48:58", 23)]).runs) == 1
