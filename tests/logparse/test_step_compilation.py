"""vllm-fork's per-step graph compilation line (VLLM_HPU_LOG_STEP_GRAPH_COMPILATION), format from
vllm/worker/hpu_worker.py execute_model (vllm-fork @95af700; hpu_executor.py / habana_executor.py
before 1.21): "VLLM_HPU_STEP_GRAPH_COMPILATION: {stats()}, is_prompt: .., num_seqs: .., max_context_len:
.., max_num_blocks N"."""

from __future__ import annotations

from tuner.logparse import LogWatcher, StepGraphCompilation, parse_line

LINE = ("WARNING 11-24 03:01:35 [hpu_worker.py:246] VLLM_HPU_STEP_GRAPH_COMPILATION: [('TotalNumber', 2), "
        "('TotalTime', 1523400), ('AvgTime', 761700.0)], is_prompt: True, num_seqs: 3, max_context_len: 900, "
        "max_num_blocks 8")


def test_the_line_becomes_an_event():
    e = parse_line(LINE)
    assert isinstance(e, StepGraphCompilation)
    assert (e.compilations, e.is_prompt, e.num_seqs, e.max_context_len, e.max_num_blocks) == (2, True, 3, 900, 8)
    assert e.total_time == 1523400.0 and e.stats[0] == ("TotalNumber", "2")


def test_list_shaped_stats_with_gc_details_and_an_old_prefix():
    line = ("WARNING 08-02 17:40:01 hpu_executor.py:210] VLLM_HPU_STEP_GRAPH_COMPILATION: [['TotalNumber', 1], "
            "['TotalTime', 5], ['AvgTime', 5.0], ['RecipeDetails', [('graph_a', 5)]]], is_prompt: False, "
            "num_seqs: 16, max_context_len: 300, max_num_blocks 3")
    e = parse_line(line)
    assert (e.compilations, e.is_prompt, e.num_seqs, e.max_num_blocks) == (1, False, 16, 3)


def test_the_watcher_counts_compilations_under_load_only():
    w = LogWatcher()
    w.feed(LINE, 0.0)  # before the server is up: not "under load"
    w.feed("INFO:     Application startup complete.", 1.0)
    w.feed(LINE, 2.0)
    w.feed(LINE.replace("('TotalNumber', 2)", "('TotalNumber', 1)"), 3.0)
    s = w.summary()
    assert (s.compile_steps_under_load, s.compilations_under_load, s.compilations_logged) == (2, 3, 5)
    assert w.compilations_under_load == 3


def test_unrelated_or_broken_lines_are_not_compilations():
    assert not isinstance(parse_line("WARNING 11-24 03:01:35 [hpu_worker.py:246] VLLM_HPU_STEP_CPU_FALLBACK: "
                                     "[('TotalNumber', 2)], is_prompt: True, num_seqs: 3, max_context_len: 9, "
                                     "max_num_blocks 1"), StepGraphCompilation)
    assert not isinstance(parse_line("WARNING 11-24 03:01:35 [hpu_worker.py:246] VLLM_HPU_STEP_GRAPH_COMPILATION: "
                                     "[], is_prompt: True, num_seqs: 3, max_context_len: 9, max_num_blocks 1"),
                          StepGraphCompilation)
