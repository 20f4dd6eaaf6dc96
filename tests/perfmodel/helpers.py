"""A boot of the simulated server, read back the way the tuner reads it: the release's startup log
lines, in simulated time, through the tuner's LogWatcher into a BootTracker."""

from __future__ import annotations

from tuner.logparse import LogWatcher
from tuner.perfmodel import Corrections, ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.projection import BootTracker
from tuner.sim.logfmt import SimLog
from tuner.sim.startup import SimTime, emit, startup_events

LINEAR_ENV = {"VLLM_PROMPT_SEQ_BUCKET_STEP": "256", "VLLM_DECODE_BLOCK_BUCKET_STEP": "256"}


def predict(corrections=Corrections(), release="fork-1.21.2", max_num_seqs=64, env=None, device="gaudi2",
            model="llama-3.1-8b", tp=1, **inputs):
    sim = SimSettings(model=model, device=device, tp=tp)
    ins = ServerInputs(max_num_seqs=max_num_seqs, max_model_len=inputs.pop("max_model_len", 4096),
                       max_num_batched_tokens=inputs.pop("max_num_batched_tokens", 8192), **inputs)
    return predict_startup(release, sim, ins, dict(LINEAR_ENV if env is None else env), corrections=corrections)


def boot(real, tracker: BootTracker, on_line=None) -> float:
    """Play `real`'s startup log into `tracker` (server seconds); on_line(t) after each line. Returns the
    simulated seconds the startup took."""
    clock, sink = SimTime(), []
    log = SimLog(real.rules.style, clock, 0.0, sink=sink)
    watcher = LogWatcher(expect_graphs=bool(real.graphed_prompt), clock=lambda: clock.t)
    for ev in startup_events(real):
        if ev[0] in ("fail", "ready", "hang"):
            break
        if ev[0] == "advance":
            if on_line is not None:
                on_line(clock.t + ev[1] - 1e-6)  # just before the next line (the trial polls)
            clock.t += ev[1]
        elif ev[0] in ("log", "raw"):
            emit(log, ev)
            for line in sink:
                for event in watcher.feed(line, clock.t):
                    tracker.on_event(event, clock.t)
            sink.clear()
            if on_line is not None:
                on_line(clock.t)
    return clock.t


def observed_facts(real, prior) -> dict:
    """What one boot of `real` shows, as trial.record_model_check collects it."""
    tracker = BootTracker(prior)
    boot(real, tracker)
    return {**tracker.facts(), "kv_blocks": real.num_blocks,
            "graphs": len(real.graphed_prompt) + len(real.graphed_decode)}
