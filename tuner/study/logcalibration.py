"""A log of a past boot is a free observation: `tune --calibrate-from LOG` and `explain`'s predictions.

The log is read as `explain` reads it; the settings it shows (bucket configs and strategy, the memory
split's gpu_memory_utilization and VLLM_GRAPH_RESERVED_MEM, the graph prompt ratio, max_num_seqs) fill
in the study's server defaults; the performance model predicts that configuration with the documented
constants, and the log's own figures (load and profiling time, free memory, KV blocks and bytes, the
time of every warm-up step, graph memory) are compared with it exactly as a booted trial's are
(perfmodel.calibration.observation_sample). The sample joins the study's calibration like a boot's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..explain import Explanation, explain
from ..explain.advice import env_from_configs, server_from_log, strategy_from_configs
from ..logparse import GraphBudget
from ..perfmodel import Corrections
from ..perfmodel.calibration import observation_sample
from ..perfmodel.projection import BootTracker, prediction_facts
from ..space.schema import TrialSettings


class LogCalibrationError(ValueError):
    """A log that cannot calibrate this study; the message names the log and why."""


@dataclass
class LogSample:
    source: str
    settings: TrialSettings
    sample: dict[str, float]
    prior: dict[str, Any]
    observed: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def settings_from_log(x: Explanation, server_defaults: dict[str, Any], release: str) -> tuple[TrialSettings, list[str]]:
    """The configuration the log ran with, as far as it shows it; the study's server defaults for the rest."""
    from ..buckets import get_profile

    notes: list[str] = []
    by_phase = {p.phase: p for p in x.phases if p.count or p.config}
    server = dict(server_defaults)
    m = x.memory
    if m.gpu_memory_utilization is not None:
        server["gpu_memory_utilization"] = m.gpu_memory_utilization
    env: dict[str, str] = {}
    if m.graph_reserved_fraction is not None:
        env["VLLM_GRAPH_RESERVED_MEM"] = f"{m.graph_reserved_fraction:g}"
    budget = next((t.event for t in x.reading.events if isinstance(t.event, GraphBudget)), None)
    if budget is not None:
        env["VLLM_GRAPH_PROMPT_RATIO"] = f"{budget.prompt_ratio:g}"
    if by_phase:
        omitted = x.reading.summary.omitted.get("prompt")
        cfg, assumed = server_from_log(by_phase, m.kv_blocks, block_size=int(server.get("block_size", 128)),
                                       max_model_len=server.get("max_model_len"), max_num_seqs=None,
                                       max_num_batched_tokens=server.get("max_num_batched_tokens"),
                                       token_budget=omitted.token_budget if omitted else None)
        server["max_num_seqs"] = cfg.max_num_seqs
        notes += [a for a in assumed if a.startswith("max_num_seqs")]
        profile = get_profile(release)
        logged = strategy_from_configs(by_phase)
        strategy = logged if logged in profile.strategies else profile.default_strategy
        env.update(profile.strategy_env(strategy))
        if strategy == "linear":
            env.update(_bucket_env(profile, cfg, strategy, env, env_from_configs(by_phase), x))
    return TrialSettings(server=server, env=env, params={}), notes


def _bucket_env(profile, cfg, strategy: str, base: dict[str, str], logged: dict[str, str],
                x: Explanation) -> dict[str, str]:
    """The bucket variables that reproduce the log's bucket lists. A config line prints resolved values
    (a default, a clamp), not what was set, so each logged value is kept only where setting it brings
    the engine's lists closer to the logged ones (the log's KV blocks as the engine's input)."""
    from dataclasses import replace

    from ..buckets import BucketConfigError

    target = {ph: set(map(tuple, g.buckets)) for ph, g in x.reading.summary.generated.items()
              if ph in ("prompt", "decode") and g.complete}
    if not target:
        return logged  # nothing to check against: the logged values are the best guess

    def distance(env: dict[str, str]) -> float:
        try:
            plan = profile.build(replace(cfg, env=env), strategy)
        except BucketConfigError:
            return float("inf")
        built = {"prompt": set(map(tuple, plan.prompt)), "decode": set(map(tuple, plan.decode))}
        return sum(len(built[ph] ^ buckets) for ph, buckets in target.items())

    env = dict(base)
    best = distance(env)
    for name, value in logged.items():
        trial = {**env, name: value}
        d = distance(trial)
        if d < best:
            env, best = trial, d
    return {k: v for k, v in env.items() if k not in base}


def log_sample(lines: Iterable[str], ctx, server_defaults: dict[str, Any], source: str = "-") -> LogSample:
    """One calibration sample from a log, against the study's release, device and model (ctx)."""
    from ..perfmodel.target import predict

    x = explain(list(lines), source=source)
    if ctx.release is None or ctx.device_model is None:
        raise LogCalibrationError(f"--calibrate-from {source}: the study has no performance model "
                                  "(a release and --model-shape are needed)")
    if x.release.profiles and ctx.release not in x.release.profiles:
        raise LogCalibrationError(f"--calibrate-from {source}: the log was written by {x.release.family} "
                                  f"({', '.join(x.release.profiles)}), the study tunes {ctx.release}")
    if not x.phases and x.memory.kv_blocks is None:
        raise LogCalibrationError(f"--calibrate-from {source}: no bucket or memory lines in it; nothing to "
                                  "compare with the model")
    from ..buckets import BucketConfigError

    try:
        settings, notes = settings_from_log(x, server_defaults, ctx.release)
    except BucketConfigError as exc:
        raise LogCalibrationError(f"--calibrate-from {source}: its settings cannot be read back ({exc})") from None
    prior_pred = predict(ctx, settings)
    if prior_pred is None or prior_pred.failure is not None:
        why = prior_pred.failure.message if prior_pred is not None and prior_pred.failure else "no prediction"
        raise LogCalibrationError(f"--calibrate-from {source}: the model cannot predict the logged "
                                  f"configuration ({why})")
    observed = _observed(x, prior_pred)
    sample = {k: v for k, v in observation_sample(prediction_facts(prior_pred), observed).items()
              if k in MEMORY_KEYS}
    # The bucket lists follow the KV blocks (decode ranges end at the block count): the warm-up steps are
    # compared with the prediction that has the log's own memory, so that both sides hold the same steps.
    # Its time constants are still the documented ones, so the time factors mean what a boot's do.
    memory = Corrections(kv_block=math.exp(sample.get("kv_block", 0.0)),
                         graph_mem=math.exp(sample.get("graph_mem", 0.0)),
                         free_mem_offset_gib=sample.get("free_mem_offset_gib", 0.0))
    steps_pred = predict(ctx, settings, memory)
    if steps_pred is None or steps_pred.failure is not None:
        steps_pred = prior_pred
    observed = _observed(x, steps_pred)
    prior = prediction_facts(steps_pred)
    sample.update({k: v for k, v in observation_sample(prior, observed).items() if k not in MEMORY_KEYS})
    if not any(k in sample for k in WARMUP_KEYS) and observed.get("warmup_s") and prior.get("warmup_s"):
        # Untimed warm-up lines (vllm-gaudi's tqdm bars carry no timestamp): the server's own total says
        # how much slower or faster this node warms up; both phases take that factor.
        ratio = math.log(observed["warmup_s"] / prior["warmup_s"])
        sample.update({k: ratio for k in WARMUP_KEYS})
        notes.append("no warm-up step could be timed against the prediction: the total warm-up calibrates "
                     "both phases")
    counts = {p.phase: p.count for p in x.phases}
    predicted_counts = {"prompt": len(steps_pred.plan.prompt), "decode": len(steps_pred.plan.decode)}
    if counts and counts != predicted_counts:
        notes.append(f"the log's buckets {counts} differ from the rebuilt configuration's {predicted_counts}: "
                     "only the warm-up steps both share are compared")
    if not sample:
        raise LogCalibrationError(f"--calibrate-from {source}: nothing in it could be compared with the model "
                                  "(no timestamps, memory split or KV blocks)")
    return LogSample(source, settings, sample, prior, observed, notes)


MEMORY_KEYS = ("kv_block", "graph_mem", "free_mem_offset_gib")
WARMUP_KEYS = ("prompt_warmup", "decode_warmup")


def _observed(x: Explanation, pred) -> dict[str, Any]:
    """The log's figures in prediction_facts' keys (step times placed against `pred`'s steps)."""
    tracker = BootTracker(pred)
    times = [t.time_s for t in x.reading.events if t.time_s is not None]
    for timed in x.reading.events:
        if timed.time_s is not None:
            tracker.on_event(timed.event, timed.time_s)
    graphs = [c.count for c in x.reading.summary.graph_captured.values()]
    observed = {**tracker.facts(), "kv_blocks": x.memory.kv_blocks, "graphs": sum(graphs) if graphs else None}
    if any(b < a - 1 for a, b in zip(times, times[1:])):
        # Lines out of time order (excerpts pasted together, a log across restarts): no step is timed
        # reliably, so none is compared; the server's own warm-up total still is.
        observed["steps"] = {}
    if x.timeline.warmup_total_s is not None:
        observed["warmup_s"] = x.timeline.warmup_total_s
    return observed


def model_advice(x: Explanation, lines: list[str], device: str, model_shape: str, dtype: str,
                 server_defaults: dict[str, Any]) -> None:
    """Re-predict explain's alternatives with the performance model, calibrated with this very log, so
    that `explain` and a study started with `--calibrate-from` the same log say the same thing."""
    from dataclasses import replace

    from ..perfmodel.calibration import Calibration
    from ..perfmodel.target import DeviceModel, ModelTarget, predict

    release = x.advice.profile
    if release is None or not x.advice.alternatives:
        return
    ctx = ModelTarget(release, DeviceModel(device=device, model=model_shape, dtype=dtype))
    got = log_sample(lines, ctx, server_defaults, source=x.source)
    corrections = Calibration.from_samples([got.sample]).corrections
    memory_env = {k: v for k, v in got.settings.env.items() if not k.startswith("VLLM_") or "GRAPH" in k}
    out = []
    for alt in x.advice.alternatives:
        if alt.error is not None:
            out.append(alt)
            continue
        settings = TrialSettings(server=dict(got.settings.server), env={**memory_env, **alt.env}, params={})
        pred = predict(ctx, settings, corrections)
        if pred is None or pred.failure is not None:
            out.append(replace(alt, error=pred.failure.message if pred is not None and pred.failure else
                               "no prediction"))
            continue
        out.append(replace(alt, prompt_buckets=len(pred.plan.prompt), decode_buckets=len(pred.plan.decode),
                           predicted_warmup_s=pred.warmup_seconds, predicted_kv_blocks=pred.num_blocks))
    x.advice.alternatives = out
    x.advice.predicted_by = (f"the performance model ({device}, {model_shape}, {dtype}) calibrated with this log")
    x.advice.notes += [f"calibration: {n}" for n in got.notes]
