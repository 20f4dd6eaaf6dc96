"""A log of a past boot is a free observation: `tune --calibrate-from LOG` and `explain`'s predictions.

The log is read as `explain` reads it (logparse.steptimes: one reading of runs and timed intervals for
both); when it holds several runs or excerpts, only the run whose warm-up counts and the bucket lines
it ran with are read. The settings it
shows (bucket configs and strategy, the memory split's gpu_memory_utilization and
VLLM_GRAPH_RESERVED_MEM, the graph prompt ratio, max_num_seqs) fill in the study's server defaults; the
performance model predicts that configuration with the documented constants, and the log's own
figures become observations with their own noise: memory (free memory, KV block bytes, graph memory)
as a boot's, warm-up step timings as perfmodel.evidence reads them (contiguous intervals only; gaps
as coarse samples over the steps they span; the rest dropped, each said), load and profiling time
where both ends are timed. The sample joins the study's calibration as one source, which never
weighs more than a boot of the same configuration (perfmodel.calibration).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..explain import Explanation, explain
from ..explain.advice import env_from_configs, server_from_log, strategy_from_configs
from ..explain.timeline import loader_seconds
from ..logparse import GraphBudget
from ..logparse.steptimes import events_of, line_ranges, read_step_times
from ..perfmodel import Corrections
from ..perfmodel.calibration import (
    ADDITIVE,
    WARMUP_FACTORS,
    Calibration,
    Observation,
    combination,
    evidence_sample,
    memory_sample,
)
from ..perfmodel.evidence import MIN_TICKS, step_order, warmup_evidence
from ..perfmodel.projection import prediction_facts
from ..space.schema import TrialSettings


class LogCalibrationError(ValueError):
    """A log that cannot calibrate this study; the message names the log and why."""


@dataclass
class LogSample:
    source: str
    settings: TrialSettings
    sample: dict[str, Any]  # as the study stores it (calibration.evidence_sample)
    prior: dict[str, Any]
    observed: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what the reading kept, merged, dropped and why
    observations: list[Observation] = field(default_factory=list)
    described: list[str] = field(default_factory=list)  # one line per observation

    def factor(self, name: str) -> float | None:
        """The log's own reading of one correction (log ratio; GiB for the offset), where it has one."""
        return next((o.value for o in self.observations if set(o.weights) == {name}), None)

    def calibration(self) -> Calibration:
        """The model calibrated with this log alone."""
        return Calibration.from_samples([self.sample])

    def corrections_text(self) -> str:
        """The corrections this log alone sets, each with its 95% range: what a study starts from."""
        cal = self.calibration()
        parts = []
        for name, f in cal.fits().items():
            if f.n == 0 and not (name in WARMUP_FACTORS and any(cal.fit(k).n for k in WARMUP_FACTORS)):
                continue
            lo, hi = f.mean - 2 * f.se, f.mean + 2 * f.se
            if name in ADDITIVE:
                parts.append(f"{name} {f.mean:+.2f} GiB ({lo:+.2f}..{hi:+.2f})")
            else:
                parts.append(f"{name} x{f.value:.3g} ({math.exp(lo):.3g}-{math.exp(hi):.3g})")
        notes = "; " + "; ".join(cal.notes) if cal.notes else ""
        return "corrections from this log (95% range): " + (", ".join(parts) or "none") + notes


def settings_from_log(x: Explanation, server_defaults: dict[str, Any], release: str) -> tuple[TrialSettings, list[str]]:
    """The configuration the log ran with, as far as it shows it; the study's server defaults for the rest."""
    from ..buckets import get_profile

    notes: list[str] = []
    by_phase = {p.phase: p for p in x.phases if p.count or p.config}
    server = dict(server_defaults)
    # the formats the log's engine ran with: the KV bytes per token and the weights' size follow them
    if x.server.kv_cache_dtype not in (None, "auto"):
        server.setdefault("kv_cache_dtype", x.server.kv_cache_dtype)
    if x.server.quantization:
        server.setdefault("quantization", x.server.quantization)
    for name in ("mamba_cache_dtype", "mamba_ssm_cache_dtype"):  # a hybrid's state sizes follow them
        if getattr(x.server, name) not in (None, "auto"):
            server.setdefault(name, getattr(x.server, name))
    if x.server.speculative_config:  # the draft tokens the buckets and states make room for; an MTP draft's weights
        server.setdefault("speculative_config", json.loads(x.server.speculative_config))
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
                                       # the study's, else the engine's own line (as explain's rebuild reads it)
                                       max_num_batched_tokens=(server.get("max_num_batched_tokens")
                                                               or x.server.max_num_batched_tokens),
                                       token_budget=omitted.token_budget if omitted else None)
        server["max_num_seqs"] = cfg.max_num_seqs
        notes += [a for a in assumed if a.startswith("max_num_seqs")]
        for key in ("max_model_len", "max_num_batched_tokens"):  # what the study leaves open, as the log shows it
            if server.get(key) is None:
                server[key] = getattr(cfg, key)
                notes += [a for a in assumed if a.startswith(key)]
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


def read_for_calibration(lines: Iterable[str], source: str = "-") -> tuple[Explanation, list[str]]:
    """The log as calibration reads it: (explanation of the run whose warm-up counts and of the bucket
    lines it ran with, the other lines blanked so that line numbers stay; notes on what was left out)."""
    lines = list(lines)
    x = explain(lines, source=source)
    first = x.reading.step_times
    keep = first.kept_lines()
    if keep is None:
        return x, []
    read = {t.line_no for t in x.reading.events}
    notes = [*first.run_notes, f"read lines {line_ranges(keep & read)} (the run whose warm-up counts and the "
             f"bucket lines it ran with); left out lines {line_ranges(read - keep)}"]
    lines = [line if n in keep else "" for n, line in enumerate(lines, start=1)]
    return explain(lines, source=source), notes


def log_sample(lines: Iterable[str], ctx, server_defaults: dict[str, Any], source: str = "-") -> LogSample:
    """One calibration sample from a log, against the study's release, device and model (ctx)."""
    x, notes = read_for_calibration(lines, source)
    if ctx.release is None or ctx.device_model is None:
        raise LogCalibrationError(f"--calibrate-from {source}: the study has no performance model "
                                  "(a release and --model-shape are needed)")
    if x.release.profiles and ctx.release not in x.release.profiles:
        raise LogCalibrationError(f"--calibrate-from {source}: the log was written by {x.release.family} "
                                  f"({', '.join(x.release.profiles)}; decided by: "
                                  f"{'; '.join(x.release.decided_by)}), the study tunes {ctx.release}")
    if not x.phases and not x.counted and x.memory.kv_blocks is None:
        raise LogCalibrationError(f"--calibrate-from {source}: no bucket, warm-up or memory lines in it; nothing "
                                  "to compare with the model")
    from ..buckets import BucketConfigError

    try:
        settings, more = settings_from_log(x, server_defaults, ctx.release)
    except BucketConfigError as exc:
        raise LogCalibrationError(f"--calibrate-from {source}: its settings cannot be read back ({exc})") from None
    return log_evidence(x, ctx, settings, source, notes + more)


def log_evidence(x: Explanation, ctx, settings: TrialSettings, source: str = "-",
                 notes: list[str] | None = None) -> LogSample:
    """The sample of a log read by read_for_calibration, against the prediction of `settings` (the
    settings it ran with: read from it, or known otherwise, as the fidelity benchmark's facts)."""
    from ..perfmodel.target import predict

    notes = list(notes or [])
    prior_pred = predict(ctx, settings)
    if prior_pred is None or prior_pred.failure is not None:
        why = prior_pred.failure.message if prior_pred is not None and prior_pred.failure else "no prediction"
        raise LogCalibrationError(f"--calibrate-from {source}: the model cannot predict the logged "
                                  f"configuration ({why})")
    memory_obs = _observed_memory(x)
    memory = memory_sample(prediction_facts(prior_pred), memory_obs)
    # The bucket lists follow the KV blocks (decode ranges end at the block count): the warm-up steps are
    # compared with the prediction that has the log's own memory, so that both sides hold the same steps.
    # Its time constants are still the documented ones, so the time factors mean what a boot's do.
    corrected = Corrections(kv_block=math.exp(memory.get("kv_block", 0.0)),
                            graph_mem=math.exp(memory.get("graph_mem", 0.0)),
                            free_mem_offset_gib=memory.get("free_mem_offset_gib", 0.0))
    steps_pred = predict(ctx, settings, corrected)
    if steps_pred is None or steps_pred.failure is not None:
        steps_pred = prior_pred
    steps_pred = _logged_lists(x, steps_pred, notes)
    steps_pred = _logged_images(x, steps_pred, notes)
    st = read_step_times(events_of(x.reading.events), x.reading.elisions, step_order(steps_pred))
    counts = {p.phase: p.count for p in x.phases + x.counted if p.phase in ("prompt", "decode") and p.count}
    built = {"prompt": len(steps_pred.plan.prompt), "decode": len(steps_pred.plan.decode)}
    same = all(built[ph] == n for ph, n in counts.items())
    warm = warmup_evidence(st, steps_pred, total=same)
    notes += st.notes + warm.notes
    if not same:
        notes.append(f"the log's buckets {counts} differ from the rebuilt configuration's "
                     f"{ {ph: built[ph] for ph in counts} }: its steps are placed by their share of each phase"
                     + ("; its 'Warmup finished' total, of another configuration, is not used"
                        if st.run is not None and st.run.finished_s is not None else ""))
    observations = [Observation({k: 1.0}, v, MEMORY_NOISE[k]) for k, v in memory.items()]
    described = [f"{k} {_ratio(k, v)}: {_memory_words(k, memory_obs)}" for k, v in memory.items()]
    for o, what in zip(warm.observations, warm.described):
        observations.append(o)
        described.append(f"{combination(o.weights)} x{math.exp(o.value):.3g} (+-{o.noise:.2f}): {what}")
    for o, what in _startup_observations(x, st, steps_pred, notes):
        observations.append(o)
        described.append(f"{combination(o.weights)} x{math.exp(o.value):.3g} (+-{o.noise:.2f}): {what}")
    if not observations:
        why = ("its warm-up is of another configuration than the settings it is read with "
               f"(the log shows {counts} buckets, they build { {ph: built[ph] for ph in counts} }: give the "
               "server settings it ran with)" if not same else "no timestamps, memory split or KV blocks")
        raise LogCalibrationError(f"--calibrate-from {source}: nothing in it could be compared with the model ({why})")
    prior = prediction_facts(steps_pred)
    return LogSample(source, settings, evidence_sample(source, observations), prior,
                     {**memory_obs, "warmup_s": x.timeline.warmup_total_s}, notes, observations, described)


# What the printed figures leave open: GiB with three or four digits, whole blocks.
MEMORY_NOISE = {"kv_block": 0.003, "graph_mem": 0.01, "free_mem_offset_gib": 0.02}


def _logged_lists(x: Explanation, pred, notes: list[str]):
    """Where the log prints both bucket lists whole and the rebuilt configuration builds other lists,
    time the steps against the logged lists: a step is compared with the cost of the bucket it warmed."""
    from ..perfmodel.predict import with_bucket_lists

    gen = x.reading.summary.generated
    logged = {ph: [tuple(b) for b in gen[ph].buckets] for ph in ("prompt", "decode")
              if ph in gen and gen[ph].complete and len(gen[ph].buckets) == gen[ph].count}
    if len(logged) < 2 or pred.plan is None:
        return pred
    built = {"prompt": [tuple(b) for b in pred.plan.prompt], "decode": [tuple(b) for b in pred.plan.decode]}
    width = {len(b) for ph in built for b in built[ph]} | {len(b) for ph in logged for b in logged[ph]}
    if all(set(logged[ph]) == set(built[ph]) for ph in logged) or len(width) > 1:
        return pred  # the same buckets (a release may print them in another order than it warms them up)
    again = with_bucket_lists(pred, logged["prompt"], logged["decode"])
    if again.failure is not None:
        return pred
    differ = {ph: len(set(logged[ph]) ^ set(built[ph])) for ph in logged}
    notes.append("the rebuilt configuration builds other buckets than the log prints (" + ", ".join(
        f"{ph} {len(built[ph])} vs {len(logged[ph])}, {n} differ" for ph, n in differ.items() if n) +
        "): its steps are timed against the logged lists")
    return again


def _logged_images(x: Explanation, pred, notes: list[str]):
    """Time the log's multimodal steps against the image shapes it shows (`resolution:WxH`, the fork's
    `img_args:N`), where the rebuilt configuration warms other ones or none (its --limit-mm-per-prompt
    is not in the log)."""
    from ..buckets.vision import VisionStep
    from ..logparse import WarmupStep as LoggedStep
    from ..perfmodel.predict import with_vision_steps

    logged = []
    for t in x.reading.run_events():
        e = t.event
        if not isinstance(e, LoggedStep) or e.phase != "multimodal":
            continue
        extra = dict(e.extra)
        width, _, height = extra.get("resolution", "").upper().partition("X")
        img = extra.get("img_args", "")
        logged.append(VisionStep("image", e.batch_size or 1, int(width) if width.isdigit() else 0,
                                 int(height) if height.isdigit() else 0,
                                 image_args=int(img) if img.isdigit() else None, seq_len=e.seq_len or 0,
                                 index=e.index, total=e.total))
    if not logged:
        return pred
    built = [(s.index, s.total, s.bucket) for s in pred.steps if s.phase == "multimodal"]
    again = with_vision_steps(pred, logged)
    if again is pred or again.failure is not None:
        return pred
    if [(s.index, s.total, s.bucket) for s in again.steps if s.phase == "multimodal"] != built:
        notes.append(f"the log's {len(logged)} multimodal steps are timed against the image shapes it shows "
                     f"(the rebuilt configuration warms {len(built)})")
    return again


def _ratio(name: str, value: float) -> str:
    return f"{value:+.2f} GiB" if name in ADDITIVE else f"x{math.exp(value):.3g}"


def _memory_words(name: str, obs: dict[str, Any]) -> str:
    if name == "kv_block":
        return f"{obs.get('kv_blocks')} KV blocks"
    if name == "graph_mem":
        return f"{obs.get('graph_mem_gib', 0):.2f} GiB for {obs.get('graphs')} HPU graphs"
    return f"{obs.get('free_gib', 0):.2f} GiB free after profiling"


def _observed_memory(x: Explanation) -> dict[str, Any]:
    """The log's memory figures in prediction_facts' keys."""
    from ..perfmodel.hardware import GiB

    m, out = x.memory, {}
    if m.free_after_profiling is not None:
        out["free_gib"] = m.free_after_profiling / GiB
    if m.kv_cache:
        out["kv_cache_gib"] = m.kv_cache / GiB
    if m.kv_blocks is not None:
        out["kv_blocks"] = m.kv_blocks
    if m.warmup_allocated:
        out["graph_mem_gib"] = m.warmup_allocated / GiB
    graphs = [c.count for c in x.reading.summary.graph_captured.values()]
    if graphs:
        out["graphs"] = sum(graphs)
    return out


def _startup_observations(x: Explanation, st, pred, notes: list[str]) -> list[tuple[Observation, str]]:
    """Weights load (the model runner's start, its attention-backend or bucket-config line, to 'Loading
    model weights took': what the documented load constants were read from) and the profiling run (to
    the memory split), where the chosen run shows both ends with timestamps."""
    from ..logparse import BucketConfig, BucketVariable, GeneratedBuckets, MemorySplit, Milestone, ModelLoaded

    run = st.run
    if run is None:
        return []
    timed = [t for t in x.reading.events if t.time_s is not None and run.first_line <= t.line_no <= run.last_line]
    loads = [t for t in timed if isinstance(t.event, ModelLoaded)]
    # vLLM's loader builds the model ("Initializing model took") before it loads the weights: the weights' line
    loaded = next((t for t in loads if t.event.part == "weights"), loads[0] if loads else None)
    split = next((t for t in timed if isinstance(t.event, MemorySplit)), None)
    tick = st.resolution_s
    pair = math.sqrt(2 * tick**2 / 6)  # two truncated stamps
    out = []
    took = loader_seconds(loads)  # the loader's own figures, when it times itself (vLLM's base and default loaders)
    if "weights" in took and pred.load_seconds > 0 and (secs := sum(took.values())) > 0:
        out.append((Observation({"load": 1.0}, math.log(secs / pred.load_seconds), pair / max(secs, tick)),
                    f"weights loaded in {secs:.0f} s (the loader's own figure; predicted {pred.load_seconds:.0f} s)"))
    elif loaded is not None:
        starts = [t for t in timed if t.line_no < loaded.line_no and (
            isinstance(t.event, (BucketConfig, BucketVariable, GeneratedBuckets))
            or (isinstance(t.event, Milestone) and t.event.name == "attention_backend"))]
        secs = loaded.time_s - starts[-1].time_s if starts else None
        if secs is not None and secs >= MIN_TICKS * tick and pred.load_seconds > 0:
            out.append((Observation({"load": 1.0}, math.log(secs / pred.load_seconds), pair / secs),
                        f"weights loaded {secs:.0f} s after the model runner started (line {starts[-1].line_no}; "
                        f"predicted {pred.load_seconds:.0f} s)"))
        elif not starts:
            notes.append("weights load not timed: no timed model-runner start (attention backend or bucket "
                         "config line) before 'Loading model weights'")
    if loaded is not None and split is not None and split.time_s - loaded.time_s >= MIN_TICKS * tick:
        secs = split.time_s - loaded.time_s
        out.append((Observation({"profile": 1.0}, math.log(secs / pred.profile_seconds), pair / secs),
                    f"profiling run {secs:.0f} s (predicted {pred.profile_seconds:.0f} s)"))
    return out


def model_advice(x: Explanation, lines: list[str], device: str, model_shape: str, dtype: str,
                 server_defaults: dict[str, Any], hf_overrides: str | None = None) -> None:
    """Re-predict explain's alternatives with the performance model, calibrated with this very log, so
    that `explain` and a study started with `--calibrate-from` the same log say the same thing."""
    from dataclasses import replace

    from ..perfmodel.target import DeviceModel, ModelTarget, predict
    from ..perfmodel.uncertainty import warmup_band

    release = x.advice.profile
    if release is None or not x.advice.alternatives:
        return
    ctx = ModelTarget(release, DeviceModel(device=device, model=model_shape, dtype=dtype, hf_overrides=hf_overrides))
    got = log_sample(lines, ctx, server_defaults, source=x.source)
    cal = got.calibration()
    corrections = cal.corrections
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
        band = warmup_band(pred, cal)
        out.append(replace(alt, prompt_buckets=len(pred.plan.prompt), decode_buckets=len(pred.plan.decode),
                           predicted_warmup_s=pred.warmup_seconds, predicted_kv_blocks=pred.num_blocks,
                           predicted_warmup_band=(band.low, band.high) if band else None))
    x.advice.alternatives = out
    x.advice.predicted_by = (f"the performance model ({device}, {model_shape}, {dtype}) calibrated with this log")
    x.advice.notes += [f"calibration: {n}" for n in got.notes if n not in x.timeline.notes]  # not twice
