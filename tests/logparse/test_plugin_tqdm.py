"""vllm-gaudi 0.14/0.15 warm-up output: tqdm bars (`Prompt warmup processing: ..`, `Decode warmup processing:
..`, `Unified Attention warmup: ..`, v1/worker/hpu_model_runner.py warmup_graphs / warmup_unified_graphs),
redrawn with `\\r` on one physical line, coloured, with other processes' records spliced in; the
`Usable num_blocks` line; bucket lists printed twice by one runner. Lines are built from the upstream
f-strings (vllm-gaudi v0.14.1 / v0.15.1) and tqdm's own meter format, since no public paste of a whole
plugin warm-up was found (tests/data/log-samples/SOURCES.md)."""

from __future__ import annotations

import pytest

from tuner.explain import explain
from tuner.logparse import LogWatcher, UsableBlocks, WarmupProgress, parse_line

CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"
TAG = f"{CYAN}(EngineCore_DP0 pid=4242){RESET} "


def _clock(s: float) -> str:
    s = int(s)
    h, m, sec = s // 3600, s // 60 % 60, s % 60
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def bar(desc: str, n: int, total: int, elapsed: float, rate: float | None, unit: str = "item") -> str:
    """One tqdm redraw as tqdm 4.x formats it (desc 'X: ' kept, 10-wide bar, rate s/unit below 1 unit/s)."""
    pct = 100 * n / total
    fill = int(10 * n / total)
    body = ("█" * fill + " " * (10 - fill))[:10]
    left = "?" if not n else _clock(elapsed / n * (total - n))
    if rate is None:
        r = f"?{unit}/s"
    elif rate >= 1:
        r = f"{rate:5.2f}s/{unit}"
    else:
        r = f"{1 / rate:5.2f}{unit}/s"
    post = f", {n - 1}/{total}" if n else ""
    return f"{desc}{pct:3.0f}%|{body}| {n}/{total} [{_clock(elapsed)}<{left}, {r}{post}]"


def bar_line(desc: str, total: int, step_s: list[float], tag: str = TAG, splice: dict | None = None) -> str:
    """A whole bar as the log file holds it: the process tag once (written before tqdm's first `\\r`), every
    redraw after a `\\r`, `splice` records glued after the redraw of the given count, a newline at the end."""
    out, t = [tag], 0.0
    out.append("\r" + bar(desc, 0, total, 0.0, None))
    for n, dt in enumerate(step_s, start=1):
        t += dt
        out.append("\r" + bar(desc, n, total, t, t / n))
        if splice and n in splice:
            out.append(splice[n])
    return "".join(out)


def rec(level: str, ts: str, src: str, msg: str, tag: str = TAG) -> str:
    return f"{tag}{level} 11-27 {ts} [{src}] {msg}"


PROMPT = [2.0, 3.0, 4.0, 5.0, 6.0, 10.0]          # 30 s over 6 prompt buckets
DECODE = [1.0, 1.0, 2.0, 2.0]                      # 6 s over 4 decode buckets


def plugin_log(splice: bool = True) -> list[str]:
    """A Qwen3-VL start on the 0.14 plugin: buckets printed twice by the runner, the KV line with
    _PAD_BLOCK_ID=0, a stamped multimodal warm-up (13 s), the sampler, then the graph warm-up as bars."""
    glued = {3: rec("INFO", "10:00:09", "metrics.py:1", "spliced record from another process",
                    tag=f"{CYAN}(APIServer pid=1){RESET} ")} if splice else None
    return [
        rec("INFO", "09:59:00", "hpu_model_runner.py:4796", "Loading model weights took 33.1523 GB"),
        rec("INFO", "09:59:30", "exponential.py:36",
            "Prompt bucket config (min, step, max_warmup, limit) bs:[1, 2, 1, 1], query:[128, 128, 1024, 3]"),
        rec("INFO", "09:59:30", "common.py:85",
            "Generated 6 prompt buckets [bs, query, num_blocks]: [(1, 128, 0), (1, 256, 0), (1, 512, 0), "
            "(1, 1024, 0), (1, 128, 4), (1, 256, 4)]"),
        rec("INFO", "09:59:40", "hpu_worker.py:432", "Free device memory: 90.12 GiB, 81.11 GiB usable "
            "(gpu_memory_utilization=0.9), 8.111 GiB reserved for HPUGraphs (VLLM_GRAPH_RESERVED_MEM=0.1), "
            "16 MiB reserved for KV cache dummy block 72.98 GiB reserved for usable KV cache"),
        rec("INFO", "09:59:41", "hpu_worker.py:297", "Usable num_blocks: 4671, actual allocated num_blocks: 4672 "
            "(_PAD_BLOCK_ID=0, _PAD_SLOT_ID=-1)"),
        rec("INFO", "09:59:42", "exponential.py:36",
            "Prompt bucket config (min, step, max_warmup, limit) bs:[1, 2, 1, 1], query:[128, 128, 1024, 3]"),
        rec("INFO", "09:59:42", "common.py:85",
            "Generated 6 prompt buckets [bs, query, num_blocks]: [(1, 128, 0), (1, 256, 0), (1, 512, 0), "
            "(1, 1024, 0), (1, 128, 4), (1, 256, 4)]"),
        rec("INFO", "09:59:42", "common.py:85",
            "Generated 4 decode buckets [bs, query, num_blocks]: [(1, 1, 128), (1, 1, 256), (2, 1, 128), "
            "(2, 1, 256)]"),
        rec("INFO", "09:59:45", "hpu_model_runner.py:4184", "[Warmup][Graph/Multimodal(image)][1/2] batch_size:1 "
            "seq_len:0 resolution:448X448 free_mem:40.1 GiB"),
        rec("INFO", "09:59:52", "hpu_model_runner.py:4184", "[Warmup][Graph/Multimodal(image)][2/2] batch_size:1 "
            "seq_len:0 resolution:896X896 free_mem:40.1 GiB"),
        rec("INFO", "09:59:58", "hpu_model_runner.py:4675", "Starting sampler warmup..."),
        rec("INFO", "10:00:00", "hpu_model_runner.py:4764", "Sampler warmup completed successfully"),
        bar_line("Prompt warmup processing: ", 6, PROMPT, splice=glued),
        rec("INFO", "10:00:30", "hpu_model_runner.py:4163", "Graph/Prompt captured:6 used_mem:1.25 GiB"),
        bar_line("Decode warmup processing: ", 4, DECODE),
        rec("INFO", "10:00:36", "hpu_model_runner.py:4163", "Graph/Decode captured:4 used_mem:0 B"),
        rec("INFO", "10:00:37", "hpu_model_runner.py:4301", "Warmup finished in 52 secs, allocated 1.25 GiB of "
            "device memory"),
    ]


@pytest.mark.parametrize("text,expected", [
    ("Prompt warmup processing:  45%|####5     | 10/22 [00:05<00:06,  1.80item/s, 9/22]",
     ("prompt", 10, 22, 5.0, 6.0, 1 / 1.8)),
    ("Decode warmup processing: 100%|██████████| 96/96 [1:02:03<00:00, 38.78s/item, 95/96]",
     ("decode", 96, 96, 3723.0, 0.0, 38.78)),
    ("Unified Attention warmup:   0%|          | 0/375 [00:00<?, ?item/s]", ("unified", 0, 375, 0.0, None, None)),
    ("Prompt warmup processing:   3%|▎         | 3/96 [00:09<04:39,  3.00s/it]", ("prompt", 3, 96, 9.0, 279.0, 3.0)),
    ("Prompt warmup processing:  10%|#         | 1/10 [00:00<00:00, 12.50it/s, 0/10]",
     ("prompt", 1, 10, 0.0, 0.0, 0.08)),
    (f"{CYAN}(Worker_TP3 pid=17){RESET} Decode warmup processing:  50%|█████     | 2/4 [00:02<00:02,  1.00s/item, 1/4]",
     ("decode", 2, 4, 2.0, 2.0, 1.0)),
    ("^[[1;36m(EngineCore_DP0 pid=9)^[[0;0m Prompt warmup processing:  50%|#####     | 1/2 "
     "[00:07<00:07,  7.00s/item, 0/2]^M",
     ("prompt", 1, 2, 7.0, 7.0, 7.0)),
])
def test_every_tqdm_form_is_read(text, expected):
    e = parse_line(text)
    assert isinstance(e, WarmupProgress)
    got = (e.phase, e.done, e.total, e.elapsed_s, e.remaining_s, e.seconds_per_step)
    assert got[:5] == expected[:5] and got[5] == pytest.approx(expected[5])


def test_each_redraw_of_a_cr_line_is_a_step_and_a_spliced_record_is_still_read():
    w = LogWatcher(clock=lambda: 0.0, replay=True)   # a saved log: the line is fed at the stamp before it
    line = bar_line("Prompt warmup processing: ", 6, PROMPT,
                    splice={2: rec("INFO", "10:00:05", "core.py:1", "Generated 4 decode buckets [bs, query, "
                                   "num_blocks]: [(1, 1, 128), (1, 1, 256), (2, 1, 128), (2, 1, 256)]",
                                   tag="(Worker_TP1 pid=8) ")})
    events = w.feed(line, t=100.0)
    bars = [e for e in events if isinstance(e, WarmupProgress)]
    assert [(e.done, e.at_s) for e in bars] == [(0, 100.0), (1, 102.0), (2, 105.0), (3, 109.0), (4, 114.0),
                                                (5, 120.0), (6, 130.0)]
    assert w.summary().generated["decode"].count == 4      # the record glued after a redraw
    assert w.progress() is not None and w.summary().warmup_steps["prompt"] == (6, 6)


def test_a_record_written_mid_bar_does_not_lose_the_bar():
    w = LogWatcher(clock=lambda: 0.0)
    head = "\rPrompt warmup processing:  50%|█████"
    w.feed(head + rec("INFO", "10:00:05", "core.py:1", "Sampler warmup completed successfully") , t=5.0)
    events = w.feed("     | 3/6 [00:09<00:09,  3.00s/item, 2/6]", t=9.0)
    assert [(e.phase, e.done) for e in events] == [("prompt", 3)]


def test_ranks_drawing_the_same_bar_count_once():
    w = LogWatcher(clock=lambda: 0.0)
    line = "".join(f"(Worker_TP{r} pid={10 + r}) \r" + bar("Decode warmup processing: ", n, 4, 2.0 * n, 2.0)
                   for n in range(5) for r in range(4))
    bars = [e for e in w.feed(line, t=0.0) if isinstance(e, WarmupProgress)]
    assert [e.done for e in bars] == [0, 1, 2, 3, 4]


def test_stream_chunks_show_progress_before_the_bar_ends():
    """A live server writes `\\r` + bar with no newline until the bar closes: feed_stream reads each redraw
    as soon as its closing `]` arrived, even cut across reads."""
    w = LogWatcher(clock=lambda: 0.0)
    text = bar_line("Prompt warmup processing: ", 6, PROMPT, tag="")
    cut = text.index("3/6") + 2
    w.feed_stream(text[:cut], t=1.0)
    assert w.summary().warmup_steps["prompt"][0] == 2
    w.feed_stream(text[cut:], t=2.0)
    assert w.summary().warmup_steps["prompt"] == (6, 6)
    assert w.seconds_per_step("prompt") == pytest.approx(5.0)


def test_explain_times_the_bars_and_keeps_one_start():
    x = explain(plugin_log())
    assert len(x.reading.runs) == 1, [r.why for r in x.reading.runs]
    names = {p.name: p.seconds for p in x.timeline.phases}
    assert names["prompt warmup"] == 30 and names["decode warmup"] == 6
    assert names["multimodal warmup"] == 13     # 1/2 -> 2/2 -> the sampler line
    assert x.timeline.warmup_total_s == 52
    slow = x.timeline.slowest[0]
    assert (slow.phase, slow.index, slow.seconds) == ("prompt", 6, 10)
    assert x.memory.kv_blocks == 4671                           # never _PAD_BLOCK_ID=0
    assert x.memory.weights is not None                        # the load line before the reprinted lists
    assert x.bucket_counts == {"prompt": 6, "decode": 4}


def test_bars_without_any_timestamp_still_time_their_steps():
    lines = [bar_line("Prompt warmup processing: ", 6, PROMPT, tag=""),
             bar_line("Decode warmup processing: ", 4, DECODE, tag="")]
    x = explain(lines)
    names = {p.name: p.seconds for p in x.timeline.phases}
    assert names == {"prompt warmup": 30, "decode warmup": 6}


def test_usable_blocks_only_from_a_figure_that_means_it():
    for pad, alloc, expected in ((0, 4672, 4671), (-1, 4672, 4671), (4671, 4672, 4671), (4152, 4153, 4152)):
        w = LogWatcher()
        usable = 4671 if expected == 4671 else 4150
        w.feed(f"Usable num_blocks: {usable}, actual allocated num_blocks (max across layers): {alloc} "
               f"(_PAD_BLOCK_ID={pad}, _PAD_SLOT_ID=-1)")
        assert w.hpu_blocks == expected
    assert isinstance(parse_line("Usable num_blocks: 5, actual allocated num_blocks: 6 (_PAD_BLOCK_ID=0, "
                                 "_PAD_SLOT_ID=-1)"), UsableBlocks)


def test_validation_warmup_bars_are_their_own_phase_not_a_restart():
    lines = plugin_log(splice=False)
    at = next(i for i, s in enumerate(lines) if "Decode captured" in s) + 1
    lines[at:at] = [rec("INFO", "10:00:36", "hpu_model_runner.py:6273",
                        "Running validation warmup to trigger guard specializations..."),
                    rec("INFO", "10:00:36", "hpu_model_runner.py:6290", "Validation warmup: 2 prompt buckets "
                        "(seq_len=1024)"),
                    bar_line("Prompt warmup processing: ", 2, [0.5, 0.5]),
                    rec("INFO", "10:00:37", "hpu_model_runner.py:6297", "Validation warmup complete.")]
    x = explain(lines)
    assert len(x.reading.runs) == 1, [r.why for r in x.reading.runs]
    assert "validation" in x.reading.summary.warmup_steps


def _rank_tracebacks(ranks: int, width: int | None = 120, prefix=lambda r: f"(Worker_TP{r} pid={100 + r}) ERROR "
                     "11-27 10:00:40 [multiproc_executor.py:671] ") -> list[str]:
    """The same KeyError: 0 traceback from every rank, interleaved line by line, hard-wrapped at `width`."""
    body = ["Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 666, in '
            "worker_busy_loop",
            "    output = func(*args, **kwargs)",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm_gaudi/v1/worker/hpu_model_runner.py", line 4470, '
            "in warmup_graphs",
            "    self._prepare_dummy_scenario(prompt_cfg, decode_cfg)",
            "KeyError: 0"]
    out = []
    for line in body:
        for r in range(ranks):
            full = prefix(r) + line
            while width and len(full) > width:
                out.append(full[:width])
                full = full[width:]
            out.append(full)
    return out


@pytest.mark.parametrize("lines", [
    _rank_tracebacks(8),
    _rank_tracebacks(4, width=None),
    _rank_tracebacks(2, prefix=lambda r: f"[rank{r}]: "),
    _rank_tracebacks(3, prefix=lambda r: f"(Worker pid={200 + r}) "),
    _rank_tracebacks(2, width=None, prefix=lambda r: ""),      # two untagged tracebacks mixed line by line
], ids=["tagged-wrapped", "tagged", "rank-prefix", "worker-pid", "untagged-interleaved"])
def test_one_root_cause_reported_once(lines):
    x = explain(lines)
    assert [(p.kind, p.message) for p in x.problems] == [("traceback", "KeyError: 0")]


def test_a_file_read_with_universal_newlines_reads_the_same():
    """`bucket-tuner explain FILE` splits lines on `\\r` too (str.splitlines): every redraw is a line of its own."""
    whole = explain(plugin_log())
    split = explain([part for line in plugin_log() for part in line.splitlines()])
    assert [(p.name, p.seconds) for p in split.timeline.phases] == [(p.name, p.seconds) for p in whole.timeline.phases]
    assert len(split.reading.runs) == 1 and split.memory.kv_blocks == 4671


def test_live_a_whole_bar_line_arriving_at_once_ends_at_its_arrival():
    """A line reader hands the watcher a bar only when it closes: its last redraw was drawn on arrival, the
    others its elapsed clock earlier (so the projection's pace is the bar's, not zero)."""
    w = LogWatcher(clock=lambda: 0.0)
    bars = [e for e in w.feed(bar_line("Prompt warmup processing: ", 6, PROMPT, tag=""), t=100.0)
            if isinstance(e, WarmupProgress)]
    assert (bars[0].at_s, bars[-1].at_s) == (70.0, 100.0)
    assert w.seconds_per_step("prompt") == pytest.approx(5.0)
