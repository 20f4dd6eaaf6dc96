"""How long a deployment must let the pick start: probes and time limits sized from its warm-up band.

A server is not ready until it has loaded its weights, profiled its memory and warmed up every bucket; an
orchestrator that gives up earlier restarts it, and the next start is just as long (OPEA GenAIExamples
#1557: pods restarting in a loop because warm-up outlasted a 900 s startup probe). The tuner knows each
part of the pick's start: the weights load and profiling it measured (else predicted), and the warm-up
with its 2-sd band, cold and with a prepared recipe cache (tuner/recipecache/warmupmode.py). The limit
covers the band's upper end (or the measured warm-up, if longer) plus the time before warm-up, with a
stated margin:

    start   = before warm-up + max(band high, measured warm-up)
    limit   = ceil(start x (1 + margin))
    probe   = failureThreshold x periodSeconds >= limit (Kubernetes kills a container whose startupProbe
              failed failureThreshold times in a row)

From the limit: the Deployment's progressDeadlineSeconds and `kubectl rollout status --timeout` (the
limit plus SCHEDULING_S for scheduling and container start, the image already on the node), and a Slurm
serving job's time limit (the limit plus the serving window) with its wait for readiness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..recipecache.warmupmode import CACHED, COLD, MODES, Figure, warmup_figures
from ..vocabulary.record import TrialRecord

MARGIN = 0.25  # over the upper end of the band: the band is ~95% for one configuration, a node is not a model
PERIOD_S = 10  # the startup probe's periodSeconds (Kubernetes' default)
SCHEDULING_S = 120  # scheduling and container start before the server's own clock starts (no image pull)


@dataclass(frozen=True)
class StartLimit:
    """One start (cold or cached) of one trial: its parts, where they come from, and the limits."""

    mode: str  # "cold" or "cached"
    before_s: float  # process start to warm-up: weights load, profiling
    before_from: str  # "measured" or "predicted"
    warmup: Figure  # the mode's warm-up figure (measured, or predicted with its band)
    band_high_s: float | None  # the prediction's 2-sd band, scaled to this boot (None: no band kept)
    band_low_s: float | None
    measured_s: float | None  # the warm-up this trial measured in this mode
    margin: float
    period_s: int

    @property
    def warmup_upper_s(self) -> float:
        figures = [x for x in (self.band_high_s, self.measured_s, self.warmup.seconds) if x is not None]
        return max(figures)

    @property
    def start_upper_s(self) -> float:
        return self.before_s + self.warmup_upper_s

    @property
    def limit_s(self) -> int:
        return math.ceil(self.start_upper_s * (1 + self.margin))

    @property
    def failure_threshold(self) -> int:
        return max(1, math.ceil(self.limit_s / self.period_s))

    @property
    def probe_s(self) -> int:
        """What the probe allows: failureThreshold x periodSeconds."""
        return self.failure_threshold * self.period_s

    @property
    def rollout_timeout_s(self) -> int:
        return self.probe_s + SCHEDULING_S

    def evidence(self) -> str:
        """One line: where every figure of the limit comes from."""
        band = (f"predicted band {self.band_low_s:,.0f}-{self.band_high_s:,.0f} s" if self.band_high_s is not None
                and self.band_low_s is not None else "no predicted band")
        measured = f"measured {self.measured_s:,.0f} s in this trial" if self.measured_s is not None else "not measured"
        return (f"{self.mode} start: {self.before_from} {self.before_s:,.0f} s before warm-up + warm-up "
                f"{self.warmup_upper_s:,.0f} s ({band}; {measured}) = {self.start_upper_s:,.0f} s, "
                f"+{self.margin:.0%} margin = {self.limit_s:,} s")


def _before_warmup(rec: TrialRecord) -> tuple[float, str]:
    """Seconds from process start to warm-up: measured by the trial's boot when it was, else predicted. A
    launch-to-ready warm-up (a server whose log has no warm-up total) already includes them: 0."""
    obs, pred = rec.observed, rec.predicted
    if obs.get("warmup_source") == "launch to ready":
        return 0.0, "measured (in the launch-to-ready time)"
    if obs.get("load_s") is not None:
        return float(obs["load_s"]) + float(obs.get("profile_s") or 0.0), "measured"
    return float(pred.get("load_s") or 0.0) + float(pred.get("profile_s") or 0.0), "predicted"


def start_limits(rec: TrialRecord, reboot: dict | None = None, margin: float = MARGIN,
                 period_s: int = PERIOD_S) -> dict[str, StartLimit]:
    """The cold and cached start limits of a trial (a mode with no figure at all is left out). `reboot`: the
    trial's cold re-boot at the end of a shared-cache study (study attr "cold_reboots"), if any."""
    if margin < 0 or period_s < 1:
        raise ValueError(f"margin {margin} must be >= 0 and the period {period_s} s at least 1")
    figures = warmup_figures(rec.observed, rec.predicted, reboot)
    before, before_from = _before_warmup(rec)
    out = {}
    for mode in MODES:
        fig = figures[mode]
        measured = fig.seconds if fig.measured else None
        if mode == COLD and measured is None and rec.observed.get("warmup_source") == "launch to ready":
            measured = rec.observed.get("warmup_s")  # no Gaudi warm-up: what was timed is the cold start
        low, high = rec.predicted.get(f"warmup_{mode}_low_s"), rec.predicted.get(f"warmup_{mode}_high_s")
        if fig.seconds is None and measured is None and high is None:
            continue
        out[mode] = StartLimit(mode, before, before_from, fig, None if high is None else float(high),
                               None if low is None else float(low), None if measured is None else float(measured),
                               margin, period_s)
    return out


def primary(limits: dict[str, StartLimit]) -> StartLimit | None:
    """The limit a deployment should carry: the cold one (a recipe cache that misses, or is lost with the
    pod, gives a cold start: a probe sized for the cached one would kill it in a loop)."""
    return limits.get(COLD) or limits.get(CACHED)


@dataclass(frozen=True)
class ProbeVerdict:
    """A stated startup probe against a trial's start."""

    allowed_s: float
    limit: StartLimit

    @property
    def kills(self) -> str | None:
        """'certain' when the probe ends before even the central start, 'possible' before the band's upper
        end, None when it covers the whole band."""
        central = self.limit.before_s + max(x for x in (self.limit.warmup.seconds, self.limit.measured_s, 0.0)
                                            if x is not None)
        if self.allowed_s < central:
            return "certain"
        if self.allowed_s < self.limit.start_upper_s:
            return "possible"
        return None

    def sentence(self, trial: int) -> str:
        lim = self.limit
        if self.kills == "certain":
            what = "would kill it during warm-up on every start: a restart loop"
        elif self.kills == "possible":
            what = "may kill it during warm-up (inside the predicted band)"
        else:
            return (f"the startup probe ({self.allowed_s:,.0f} s) covers trial {trial}'s {lim.mode} start "
                    f"({lim.start_upper_s:,.0f} s at the band's upper end)")
        return (f"the startup probe ({self.allowed_s:,.0f} s) {what}: trial {trial}'s {lim.mode} start takes up to "
                f"{lim.start_upper_s:,.0f} s ({lim.evidence()}); set failureThreshold x periodSeconds to at least "
                f"{lim.probe_s:,} (e.g. {lim.failure_threshold} x {lim.period_s})")


def probe_seconds(probe: dict) -> float:
    """What a Kubernetes startupProbe allows before the kubelet kills the container:
    initialDelaySeconds + failureThreshold x periodSeconds (Kubernetes' defaults: 0, 3, 10)."""
    def number(key: str, default: float) -> float:
        value = probe.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"startupProbe {key}: {value!r} is not a number of seconds or times")
        return float(value)

    return number("initialDelaySeconds", 0) + number("failureThreshold", 3) * number("periodSeconds", 10)


def trial_limits(study, trial, margin: float = MARGIN, period_s: int = PERIOD_S) -> dict[str, StartLimit]:
    """start_limits of a study's trial (a reused trial: the boot it stands for), with its cold re-boot."""
    from ..vocabulary.record import measured_trial

    booted = measured_trial(study, trial)
    reboot = (study.user_attrs.get("cold_reboots") or {}).get(str(booted.number))
    return start_limits(TrialRecord.from_frozen(booted), reboot, margin, period_s)


# --- a probe stated by the user: a number, or the startupProbe of a manifest's vLLM container -----------

class ManifestError(ValueError):
    """A manifest that cannot be read, or holds no container to check; the message names the file."""


def _containers(doc) -> list[dict]:
    """The containers of a Pod, a workload's pod template (Deployment, StatefulSet, Job, ...) or a List."""
    if not isinstance(doc, dict):
        return []
    if doc.get("kind") == "List":
        return [c for item in doc.get("items") or [] for c in _containers(item)]
    spec = doc.get("spec") or {}
    for path in (("template", "spec"), ("jobTemplate", "spec", "template", "spec")):
        node = spec
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get("containers"):
            spec = node
            break
    return [c for c in spec.get("containers") or [] if isinstance(c, dict)]


def _is_vllm(c: dict) -> bool:
    words = [str(c.get("name", "")), str(c.get("image", "")), *map(str, c.get("command") or []),
             *map(str, c.get("args") or [])]
    return any("vllm" in w.lower() for w in words)


def manifest_probe(path) -> tuple[float | None, str]:
    """(seconds the vLLM container's probes allow its start, what was read) from a Kubernetes manifest.
    The startupProbe; without one, the livenessProbe runs from the start and kills a server that does not
    answer yet; with neither, no probe kills it (None)."""
    from pathlib import Path

    import yaml

    try:
        docs = list(yaml.safe_load_all(Path(path).read_text()))
    except OSError as exc:
        raise ManifestError(f"--manifest {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"--manifest {path}: not YAML ({str(exc).splitlines()[0]})") from None
    containers = [c for d in docs for c in _containers(d)]
    chosen = [c for c in containers if _is_vllm(c)] or (containers if len(containers) == 1 else [])
    if not chosen:
        raise ManifestError(f"--manifest {path}: no vLLM container found (" + (
            f"{len(containers)} containers, none named or running vllm)" if containers else "no pod spec)"))
    c = chosen[0]
    for key in ("startupProbe", "livenessProbe"):
        probe = c.get(key)
        if isinstance(probe, dict):
            try:
                seconds = probe_seconds(probe)
            except ValueError as exc:
                raise ManifestError(f"--manifest {path}: container {c.get('name')!r}: {exc}") from None
            note = "" if key == "startupProbe" else " (no startupProbe: the livenessProbe runs from the start)"
            return seconds, f"container {c.get('name')!r} {key}{note}"
    return None, f"container {c.get('name')!r} has no startupProbe or livenessProbe"
