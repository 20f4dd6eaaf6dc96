"""`tune --shared-recipe-cache DIR`: the trials of a study share one recipe cache per device, release,
model, data type and tensor parallelism (a subfolder each: recipes of one never fit another).

Every trial boots with PT_HPU_RECIPE_CACHE_CONFIG=<subfolder>,False,<MB>, so a configuration whose
shapes (and KV block count) an earlier trial compiled finds their recipes and warms up faster. The
hit rate of a boot is measured on the folder, as `export --with-cache` does: recipes it had to write
out of the shapes its warmup compiled (with several slots writing at once, a boot is charged the
others' recipes too, so its rate is a lower bound). Such a trial's cold warmup is not observed; it
is predicted (warmupmode.settle). At the end of the study the Pareto trials without a measured cold
warmup are booted once more, cold, into a fresh empty cache, so every exported point carries one.

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


def reboot_front_cold(study, space, ctx, study_dir: Path, say=lambda text: None) -> list[int]:
    """Boot every Pareto trial whose cold warmup was not measured once more, cold (a fresh empty
    cache; to ready and stopped, no load test: its serving was measured already), and record the
    measured cold warmup beside the prediction, in the study attribute "cold_reboots" (a finished
    trial cannot be updated; warmupmode.warmup_figures reads both). The objective told to Optuna
    stays. A trial that also measured its cached warmup gives the cache factor's calibration
    sample. Returns the trial numbers re-booted."""
    import dataclasses
    import shutil

    from ..perfmodel.costs import CACHE_HIT
    from ..recipecache.warmupmode import cache_hit_sample
    from ..trial import run as trial_mod
    from ..trial.record import TrialRecord
    from .screen import seed_calibration

    opts = ctx.warmup
    if opts is None or opts.shared is None:
        return []
    reboots = dict(study.user_attrs.get(REBOOT_ATTR) or {})
    done = []
    for t in sorted(measured_front(study), key=lambda t: t.number):
        rec = TrialRecord.from_frozen(t)
        if rec.observed.get("warmup_cold_s") is not None or str(t.number) in reboots or not rec.ok:
            continue
        fresh = fresh_cold_cache(opts.shared)
        cold_ctx = dataclasses.replace(ctx, warmup=dataclasses.replace(opts, shared=fresh, budget_s=None),
                                       limits=dataclasses.replace(ctx.limits, warmup_budget_s=None),
                                       progress=None, on_progress=None,
                                       measure_load=False)  # its serving was measured: only the warmup
        predicted = rec.predicted
        say(f"trial {t.number}: cold re-boot (its cold warmup was predicted: {predicted.get('warmup_cold_s', '?')} s)")
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
            continue
        reboots[str(t.number)] = {"warmup_cold_s": cold, "predicted_cold_s": predicted.get("warmup_cold_s")}
        study.set_user_attr(REBOOT_ATTR, reboots)
        cached = rec.observed.get("warmup_cached_s")
        if cached is not None and predicted.get("warmup_cold_s") and predicted.get("warmup_cached_s"):
            dtype = ctx.device_model.dtype if ctx.device_model else "bf16"
            x = cache_hit_sample(cold, cached, predicted["warmup_cold_s"], predicted["warmup_cached_s"],
                                 CACHE_HIT.get(dtype, CACHE_HIT["bf16"]))
            if x is not None:
                seed_calibration(study, [{"cache_hit": round(x, 5)}])
        pred = predicted.get("warmup_cold_s")
        say(f"trial {t.number}: cold warmup measured {cold:.0f} s" + (
            f" (predicted {pred:.0f} s, {100 * (pred / cold - 1):+.0f}%)" if pred and cold else ""))
        done.append(t.number)
    return done
