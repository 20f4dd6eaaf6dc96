"""`tune --shared-recipe-cache DIR`: the trials of a study share one recipe cache per device, release,
model, data type and tensor parallelism (a subfolder each: recipes of one never fit another).

Every trial boots with PT_HPU_RECIPE_CACHE_CONFIG=<subfolder>,False,<MB>, so a configuration whose
shapes (and KV block count) an earlier trial compiled finds their recipes and warms up faster. The
hit rate of a boot is measured on the folder, as `export --with-cache` does: recipes it had to write
out of the shapes its warmup compiled (with several slots writing at once, a boot is charged the
others' recipes too, so its rate is a lower bound). Such a trial's cold warmup is not observed; it
is predicted (warmupmode.settle). At the end of the study the trials that need a measured cold warmup
are booted once more, cold, into a fresh empty cache: the exported picks first (best.env and the
report's columns carry their figures), then the other Pareto trials whose predicted cold warmup is
uncertain: the share of it extrapolated from a boot that hit the cache, times the error per share the
re-booted picks showed, over WIDE_BAND. Re-booting the whole front cost more than the cache saved
(benchmarks/README.md); the others keep their predicted cold warmup, marked predicted.

A server that ignores the variable (vLLM on CPU or CUDA: no Gaudi bridge, no recipes) writes nothing
and compiles no [Warmup] shapes; the first such boot switches the shared cache off for the study,
said once, and its trials count as cold.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..recipecache.manifest import DEFAULT_MAX_MB, VARIABLE, format_value, normalize_dtype, recipe_files
from .pareto import measured_front

IGNORED_NOTE = (f"the server wrote no recipe and compiled no warmup shape: it ignores {VARIABLE} (not a Gaudi "
                "server); the shared recipe cache is off and warmups are cold")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "x"


@dataclass
class SharedCache:
    root: Path
    release: str | None
    device: str
    model: str
    dtype: str
    max_mb: int = DEFAULT_MAX_MB
    enabled: bool = True
    notes: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def folder(self, server: dict) -> Path:
        tp = int(server.get("tensor_parallel_size") or 1)
        name = "-".join(_slug(x) for x in (self.device, self.release or "generic", self.model,
                                            normalize_dtype(self.dtype), f"tp{tp}"))
        return Path(self.root).resolve() / name

    def env(self, server: dict) -> dict[str, str]:
        """The variable a trial boots with (never part of its settings: it is not exported)."""
        if not self.enabled:
            return {}
        folder = self.folder(server)
        folder.mkdir(parents=True, exist_ok=True)
        return {VARIABLE: format_value(folder, False, self.max_mb)}

    def snapshot(self, server: dict) -> frozenset[str]:
        return frozenset(recipe_files(self.folder(server))) if self.enabled else frozenset()

    def hit_rate(self, server: dict, before: frozenset[str], shapes_compiled: int) -> float | None:
        """The boot's share of shapes found in the cache; None when the cache was off or unusable."""
        if not self.enabled:
            return None
        added = len(set(recipe_files(self.folder(server))) - set(before))
        if shapes_compiled <= 0 and added == 0:
            with self._lock:
                if self.enabled:
                    self.enabled = False
                    self.notes.append(IGNORED_NOTE)
            return None
        total = max(shapes_compiled, added)
        return max(0.0, 1.0 - added / total)

    def take_notes(self) -> list[str]:
        with self._lock:
            out, self.notes = self.notes, []
        return out


def fresh_cold_cache(like: SharedCache) -> SharedCache:
    """An empty cache of its own, for a cold re-boot: nothing in it can hit."""
    root = Path(tempfile.mkdtemp(prefix="bucket-tuner-cold-"))
    return SharedCache(root=root, release=like.release, device=like.device, model=like.model,
                       dtype=like.dtype, max_mb=like.max_mb)


REBOOT_ATTR = "cold_reboots"  # study attr: trial number -> what its cold re-boot measured
# A trial whose boot hit the cache ran only part of its cold warmup; the rest of its cold figure is the
# model's extrapolation. Its band: the share extrapolated (hit rate x the cached part of the cold
# warmup, as predicted) times the error per extrapolated share, measured on the picks re-booted first
# (before any, PRIOR_ERROR_PER_SHARE: the model's compile/cache split may be 30% off). A band over
# WIDE_BAND of the figure is measured by a cold re-boot; a narrower one stays predicted, marked so.
WIDE_BAND = 0.05
PRIOR_ERROR_PER_SHARE = 0.3


def extrapolated_share(t) -> float | None:
    """The share of a trial's cold warmup its boot did not run (cached), as predicted; None: unknown."""
    from ..vocabulary.record import TrialRecord

    rec = TrialRecord.from_frozen(t)
    rate = rec.observed.get("recipe_cache_hit_rate")
    cold, cached = rec.predicted.get("warmup_cold_s"), rec.predicted.get("warmup_cached_s")
    if rate is None or not cold or cached is None:
        return None
    return max(0.0, float(rate) * (float(cold) - float(cached)) / float(cold))


def error_per_share(checks: list[tuple[float | None, float | None, float]]) -> float:
    """The largest relative error per extrapolated share among (share, predicted, measured) cold
    warmups of re-booted trials; the prior when none tells."""
    rates = [abs(pred / measured - 1) / share for share, pred, measured in checks
             if share and pred and measured]
    return max(rates) if rates else PRIOR_ERROR_PER_SHARE


def needs_cold_figure(t, reboots: dict) -> bool:
    from ..vocabulary.record import TrialRecord

    rec = TrialRecord.from_frozen(t)
    return rec.ok and rec.observed.get("warmup_cold_s") is None and str(t.number) not in reboots


def cold_reboots(study, picks, measure, say=lambda text: None) -> list[int]:
    """Measure the cold warmups the front needs: first the exported picks (`picks`: trial numbers),
    then every other Pareto trial whose band (see WIDE_BAND) is too wide. `measure(t, why)` boots
    one cold and returns its cold warmup (None: it did not measure one); each is recorded in the
    study attribute "cold_reboots" beside the prediction. Returns the trials re-booted."""
    reboots = dict(study.user_attrs.get(REBOOT_ATTR) or {})
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    pending = [t for t in sorted(measured_front(study), key=lambda t: t.number) if needs_cold_figure(t, reboots)]
    done: list[int] = []

    def reboot(t, why: str) -> None:
        from ..vocabulary.record import TrialRecord

        predicted = TrialRecord.from_frozen(t).predicted.get("warmup_cold_s")
        say(f"trial {t.number}: cold re-boot, {why} (its cold warmup was predicted: {predicted or '?'} s)")
        cold = measure(t, why)
        if cold is None:
            return
        reboots[str(t.number)] = {"warmup_cold_s": cold, "predicted_cold_s": predicted, "why": why}
        study.set_user_attr(REBOOT_ATTR, reboots)
        say(f"trial {t.number}: cold warmup measured {cold:.0f} s" + (
            f" (predicted {predicted:.0f} s, {100 * (predicted / cold - 1):+.0f}%)" if predicted else ""))
        done.append(t.number)

    for t in pending:
        if t.number in picks:
            reboot(t, "an exported pick")
    checks = [(extrapolated_share(by_number[int(n)]), r.get("predicted_cold_s"), r["warmup_cold_s"])
              for n, r in reboots.items() if int(n) in by_number]
    per_share = error_per_share(checks)
    for t in pending:
        if t.number in picks:
            continue
        share = extrapolated_share(t)
        if share is None:
            reboot(t, "no prediction of its cold warmup")
        elif share * per_share > WIDE_BAND:
            reboot(t, f"its predicted cold warmup is uncertain (band {100 * share * per_share:.0f}%: "
                      f"{100 * share:.0f}% of it extrapolated)")
    return done


def reboot_front_cold(study, space, ctx, study_dir: Path, say=lambda text: None, picks=frozenset()) -> list[int]:
    """The cold re-boots cold_reboots chooses, each a boot of the trial's settings into a fresh empty
    cache, to ready and stopped (no load test: its serving was measured already). The objective told
    to Optuna stays (a finished trial cannot be updated; warmupmode.warmup_figures reads the study
    attribute). A trial that also measured its cached warmup gives the cache factor's calibration
    sample. Returns the trial numbers re-booted."""
    import dataclasses
    import shutil

    from ..perfmodel.costs import CACHE_HIT
    from ..recipecache.warmupmode import cache_hit_sample
    from ..trial import run as trial_mod
    from ..vocabulary.record import TrialRecord
    from .screen import seed_calibration

    opts = ctx.warmup
    if opts is None or opts.shared is None:
        return []

    def measure(t, why: str) -> float | None:
        rec = TrialRecord.from_frozen(t)
        predicted = rec.predicted
        fresh = fresh_cold_cache(opts.shared)
        cold_ctx = dataclasses.replace(ctx, warmup=dataclasses.replace(opts, shared=fresh, budget_s=None),
                                       limits=dataclasses.replace(ctx.limits, warmup_budget_s=None),
                                       progress=None, on_progress=None,
                                       measure_load=False)  # its serving was measured: only the warmup
        where = study_dir / "trials" / f"{t.number:04d}" / "cold-reboot"
        try:
            result = trial_mod.run_trial(cold_ctx, space.settings_for(t.params), where)
        finally:
            shutil.rmtree(fresh.root, ignore_errors=True)
        (where / "result.json").write_text(json.dumps(result.to_json(), indent=2, default=str))
        cold = result.observed.get("warmup_cold_s")
        if not result.ok or cold is None:
            say(f"trial {t.number}: the cold re-boot did not measure a cold warmup ({result.status}: "
                f"{result.reason[:160]})")
            return None
        cached = rec.observed.get("warmup_cached_s")
        if cached is not None and predicted.get("warmup_cold_s") and predicted.get("warmup_cached_s"):
            dtype = ctx.device_model.dtype if ctx.device_model else "bf16"
            x = cache_hit_sample(cold, cached, predicted["warmup_cold_s"], predicted["warmup_cached_s"],
                                 CACHE_HIT.get(dtype, CACHE_HIT["bf16"]))
            if x is not None:
                seed_calibration(study, [{"cache_hit": round(x, 5)}])
        return cold

    return cold_reboots(study, picks, measure, say)
