"""The plugin's default warm-up output in the simulator (`--sim-log-style tqdm`): progress bars redrawn with
`\\r`, no `[Warmup]` lines. Read back by explain (virtual run) and, live, by a LogWatcher fed the server's
raw output as it arrives."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

from tuner.explain import explain
from tuner.logparse import LogWatcher, WarmupProgress
from tuner.perfmodel import SimSettings, predict_startup
from tuner.serve.ports import find_free_port
from tuner.sim.startup import run_startup_virtual

from .test_sim_startup import SMALL

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _virtual(style: str):
    pred = predict_startup("gaudi-main", SimSettings(device="gaudi3"), SMALL, {"PT_HPU_LAZY_MODE": "1"})
    return pred, run_startup_virtual(pred, log_style=style)


def test_tqdm_style_prints_bars_and_explain_times_the_same_warmup():
    pred, bars = _virtual("tqdm")
    _, lines = _virtual("lines")
    assert not any("[Warmup]" in line for line in bars.lines)
    drawn = [line for line in bars.lines if "warmup processing:" in line]
    assert drawn and all(line.startswith("\r") and line.count("\r") > 1 for line in drawn)
    x = explain(bars.lines)
    steps = {k: v for k, v in x.reading.summary.warmup_steps.items()}
    assert steps == {"prompt": (len(pred.plan.prompt), len(pred.plan.prompt)),
                     "decode": (len(pred.plan.decode), len(pred.plan.decode))}
    timed = sum(p.seconds for p in x.timeline.phases if p.name.endswith("warmup"))
    assert timed == pytest.approx(x.timeline.warmup_total_s, abs=len(drawn) + 1)   # whole-second clocks
    assert explain(lines.lines).timeline.warmup_total_s == x.timeline.warmup_total_s


def test_unknown_log_style_is_an_error():
    pred, _ = _virtual("lines")
    with pytest.raises(ValueError, match="log style 'bars'"):
        run_startup_virtual(pred, log_style="bars")


def test_live_watch_sees_bar_progress_before_the_bar_closes():
    port = find_free_port()
    cmd = [sys.executable, "-m", "tuner.sim", MODEL, "--release", "gaudi-main", "--sim-device", "gaudi3",
           "--max-num-seqs", "8", "--max-model-len", "2048", "--host", "127.0.0.1", "--port", str(port),
           "--sim-time-scale", "0.01", "--sim-log-style", "tqdm"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PT_HPU_LAZY_MODE": "1"})
    watcher = LogWatcher()
    seen_open = []     # (phase, done, total) the watcher reported while the bar's line was still open
    text = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "Warmup finished" not in text:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(proc.stdout.fileno(), 65536).decode("utf-8", "replace")
            if not chunk:
                break
            text += chunk
            events = watcher.feed_stream(chunk)
            line_open = "\r" in text.rsplit("\n", 1)[-1]   # a bar is being drawn, its newline not yet written
            if line_open and any(isinstance(e, WarmupProgress) for e in events):
                seen_open.append(watcher.progress())
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(10)
    assert "Warmup finished" in text, text[-2000:]
    assert any(p and p[0] in ("prompt", "decode") and 0 < p[1] < p[2] for p in seen_open), seen_open
    assert watcher.summary().warmup_finished is not None
