"""How well the performance model predicts real Gaudi servers: the public logs that time something.

For every start in the `fidelity` lists of tests/data/log-samples/facts.yaml (hand-read facts: the
settings each start ran with and what its log shows), the model predicts each logged quantity (warm-up
total and per phase, KV blocks, graph memory, weights and their load) with its 2-sd band, in four ways:

    prior        the documented constants (docs/calibration.md), no calibration
    itself       calibrated from this very log, read as `tune --calibrate-from` reads it (in sample)
    other logs   calibrated from the other logs of the same release, device and model (leave one log
                 out; `--calibrate-from` refuses a log another release wrote)
    other phase  calibrated from one timed phase of the same log, predicting another (leave one phase out)

and says the error (predicted / logged - 1) and whether the band holds the logged figure. A prior row
is out of sample unless the facts say the constants were read off that quantity of that log; the
leave-one-out rows are out of sample likewise. Deterministic (no clocks, no randomness):
`python benchmarks/model_fidelity.py [--write]` prints the tables; --write also stores
benchmarks/results/model_fidelity.{json,md}. tests/perfmodel/test_fidelity_guard.py holds the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.perfmodel import Corrections  # noqa: E402
from tuner.perfmodel.calibration import Calibration, Observation, evidence_sample  # noqa: E402
from tuner.perfmodel.hardware import GiB, is_generic, model_for  # noqa: E402
from tuner.perfmodel.projection import correction_of, step_key  # noqa: E402
from tuner.perfmodel.target import DeviceModel, ModelTarget, predict  # noqa: E402
from tuner.space.schema import TrialSettings  # noqa: E402
from tuner.study.logcalibration import log_evidence, read_for_calibration  # noqa: E402

SAMPLES = ROOT / "tests" / "data" / "log-samples"
FACTS = SAMPLES / "facts.yaml"
INHERITED = ("release", "device", "model", "dtype", "tp", "buckets")  # a start takes these from its file's entry
Z = 2.0
METHODS = ("prior", "itself", "other logs", "other phase")
WARMUP = ("prompt_warmup", "decode_warmup", "capture")


@dataclass
class Case:
    id: str
    file: str
    release: str
    device: str
    model: str
    dtype: str
    tp: int
    server: dict
    env: dict
    observed: dict
    fitted: list = field(default_factory=list)
    lines: list | None = None
    drop: list = field(default_factory=list)
    buckets: dict | None = None

    @property
    def ctx(self) -> ModelTarget:
        return ModelTarget(release=self.release,
                            device_model=DeviceModel(self.device, self.model, self.dtype))

    @property
    def node(self) -> tuple[str, str]:
        """The device and the model shape (a table's name for a served model path)."""
        return self.device, model_for(self.model).name

    @property
    def settings(self) -> TrialSettings:
        server = {**self.server, **({"tensor_parallel_size": self.tp} if self.tp != 1 else {})}
        return TrialSettings(server=server, env={k: str(v) for k, v in self.env.items()}, params={})

    def log_lines(self) -> list[str]:
        """The file with every line outside this start blanked (line numbers stay)."""
        lines = (SAMPLES / self.file).read_text(encoding="utf-8").splitlines()
        lo, hi = self.lines or (1, len(lines))
        return [x if lo <= n <= hi and n not in self.drop else "" for n, x in enumerate(lines, start=1)]


@dataclass
class Row:
    case: str
    quantity: str
    logged: float
    unit: str
    method: str
    predicted: float | None = None
    low: float | None = None
    high: float | None = None
    out_of_sample: bool = True
    note: str = ""  # what it was calibrated from

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.logged - 1

    @property
    def covered(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low <= self.logged <= self.high


def load_cases(path: Path = FACTS) -> list[Case]:
    """Every start of every log that has `fidelity` facts, with what it inherits from its file's entry."""
    out = []
    for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
        for start in entry.get("fidelity") or []:
            out.append(Case(file=entry["file"], **{**{k: entry.get(k) for k in INHERITED}, **start}))
    return out


# --- evidence -------------------------------------------------------------------------------------

def evidence(case: Case, lines: list[str] | None = None):
    """The case's log (or `lines`, the same log pasted another way) read as `tune --calibrate-from` reads
    it, against its hand-read settings."""
    x, notes = read_for_calibration(case.log_lines() if lines is None else lines, source=case.id)
    return log_evidence(x, case.ctx, case.settings, case.id, notes)


def _sample(name: str, observations: list[Observation]) -> dict | None:
    return evidence_sample(name, observations) if observations else None


def _calibration(case: Case, samples: list[dict | None]) -> Calibration:
    return Calibration.from_samples([s for s in samples if s],
                                    generic=is_generic(case.device, case.model))


# --- what the model predicts for one quantity -----------------------------------------------------

def _steps_in(pred, ranges) -> list:
    if ranges == "all":
        return list(pred.steps)
    out = []
    for s in pred.steps:
        if any(step_key(s) == key and a <= s.index <= b for key, a, b in ranges):
            out.append(s)
    return out


def _time_band(cal: Calibration, steps: list, fixed: float = 0.0) -> tuple[float, float, float]:
    by: dict[str, float] = {}
    for s in steps:
        by[correction_of(s)] = by.get(correction_of(s), 0.0) + s.seconds
    total = sum(by.values())
    sd = cal.log_sd({k: v / total for k, v in by.items()}) if total > 0 else 0.0
    return fixed + total, fixed + total * math.exp(-Z * sd), fixed + total * math.exp(Z * sd)


WEIGHTS_BAND = 0.05


def predict_quantity(case: Case, quantity: str, cal: Calibration) -> tuple[float, float, float] | None:
    """(central, low, high) of one logged quantity, the model calibrated by `cal`."""
    pred = predict(case.ctx, case.settings, cal.corrections)
    if pred is None or (pred.failure is not None and quantity != "load"):
        return None
    fits = cal.fits()
    obs = case.observed
    if quantity == "warmup" or quantity in (obs.get("phases") or {}):
        fact = obs["warmup"] if quantity == "warmup" else obs["phases"][quantity]
        steps = _steps_in(pred, fact["steps"])
        fixed = pred.sampler_seconds if fact["steps"] == "all" else 0.0
        return _time_band(cal, steps, fixed)
    if quantity == "kv_blocks":
        def blocks(z: float) -> int:
            corr = Corrections(**{**cal.corrections.to_dict(), "kv_block": fits["kv_block"].at(z),
                                  "free_mem_offset_gib": fits["free_mem_offset_gib"].at(-z)})
            p = predict(case.ctx, case.settings, corr)
            return p.num_blocks if p is not None else 0
        return float(pred.num_blocks), float(blocks(Z)), float(blocks(-Z))
    if quantity == "graph_mem_gib":
        gib = (pred.prompt_graph_mem + pred.decode_graph_mem) / GiB
        f = fits["graph_mem"]
        sd = math.hypot(f.se, f.spread)
        return gib, gib * math.exp(-Z * sd), gib * math.exp(Z * sd)
    if quantity == "weights_gib":
        # Weights come from the model's config as stored (tuner/models), not from a fitted factor: the band
        # is the allocator's and the checkpoint's unknowns (scales, buffers), a stated +-5%.
        if pred.memory is None:
            return None
        gib = pred.memory.weights / GiB
        return gib, gib * (1 - WEIGHTS_BAND), gib * (1 + WEIGHTS_BAND)
    if quantity == "load_s":
        f = fits["load"]
        sd = math.hypot(f.se, f.spread)
        return pred.load_seconds, pred.load_seconds * math.exp(-Z * sd), pred.load_seconds * math.exp(Z * sd)
    raise ValueError(f"unknown quantity {quantity!r}")


def quantities(case: Case) -> list[tuple[str, float, str]]:
    obs, out = case.observed, []
    if "warmup" in obs:
        out.append(("warmup", float(obs["warmup"]["seconds"]), "s"))
    out += [(name, float(p["seconds"]), "s") for name, p in (obs.get("phases") or {}).items()]
    out += [(k, float(obs[k]), unit) for k, unit in (("kv_blocks", "blocks"), ("graph_mem_gib", "GiB"),
                                                     ("weights_gib", "GiB"), ("load_s", "s")) if k in obs]
    return out


def _fitted(case: Case, quantity: str) -> bool:
    name = {"kv_blocks": "kv_blocks", "graph_mem_gib": "graph_mem", "load_s": "load"}.get(quantity, quantity)
    return name in case.fitted


# --- the four ways ---------------------------------------------------------------------------------

def _phase_factors(case: Case, phase: str) -> set[str]:
    pred = predict(case.ctx, case.settings)
    return {correction_of(s) for s in _steps_in(pred, case.observed["phases"][phase]["steps"])}


def compute(cases: list[Case] | None = None) -> list[Row]:
    cases = load_cases() if cases is None else cases
    got = {c.id: evidence(c) for c in cases}
    rows: list[Row] = []
    for case in cases:
        own = got[case.id]
        peers = [c for c in cases if c.id != case.id and (c.release, c.node) == (case.release, case.node)]
        methods = {
            "prior": (_calibration(case, []), "documented constants"),
            "itself": (_calibration(case, [own.sample]), "this log"),
        }
        if peers:
            methods["other logs"] = (_calibration(case, [got[c.id].sample for c in peers]),
                                     ", ".join(c.id for c in peers))
        for quantity, logged, unit in quantities(case):
            for method, (cal, note) in methods.items():
                rows.append(_row(case, quantity, logged, unit, method, cal, note,
                                 out_of_sample=method != "itself" and not _fitted(case, quantity)))
        phases = list(case.observed.get("phases") or {})
        for train in phases:
            factors = _phase_factors(case, train)
            kept = [o for o in own.observations if set(o.weights) <= factors and set(o.weights) & set(WARMUP)]
            cal = _calibration(case, [_sample(f"{case.id} {train}", kept)])
            for target in phases:
                if target == train or _phase_factors(case, target) <= factors:
                    continue  # the same corrections: not another phase
                logged = float(case.observed["phases"][target]["seconds"])
                rows.append(_row(case, target, logged, "s", "other phase", cal, f"its {train} phase",
                                 out_of_sample=not _fitted(case, target)))
    return rows


def _row(case: Case, quantity: str, logged: float, unit: str, method: str, cal: Calibration, note: str,
         out_of_sample: bool) -> Row:
    got = predict_quantity(case, quantity, cal)
    row = Row(case.id, quantity, logged, unit, method, out_of_sample=out_of_sample, note=note)
    if got is not None:
        row.predicted, row.low, row.high = got
    return row


# --- the figures -------------------------------------------------------------------------------------

def summary(rows: list[Row]) -> list[dict[str, Any]]:
    """Per method: rows, median and largest |error|, band coverage; out-of-sample rows, then all rows."""
    out = []
    for method in METHODS:
        for scope in ("out of sample", "all"):
            sel = [r for r in rows if r.method == method and r.predicted is not None
                   and (scope == "all" or r.out_of_sample)]
            if not sel:
                continue
            errs = sorted(abs(r.error) for r in sel)
            covered = [r.covered for r in sel if r.covered is not None]
            out.append({"method": method, "rows": scope, "n": len(sel),
                        "median_abs_error": errs[len(errs) // 2] if len(errs) % 2 else
                        (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2,
                        "max_abs_error": errs[-1],
                        "coverage": sum(covered) / len(covered) if covered else None})
    return out


def builds(cases: list[Case] | None = None) -> dict[str, dict[str, int]]:
    """Bucket counts the facts' settings rebuild, of the phases the log states a count for."""
    out = {}
    for case in cases or load_cases():
        pred = predict(case.ctx, case.settings)
        if pred is not None and pred.plan is not None:
            built = {"prompt": len(pred.plan.prompt), "decode": len(pred.plan.decode)}
            out[case.id] = {k: v for k, v in built.items() if not case.buckets or k in case.buckets}
    return out


def _fmt(v: float, unit: str) -> str:
    if unit == "GiB":
        return f"{v:.2f} GiB"
    if unit == "blocks":
        return f"{v:,.0f}"
    return f"{v:.0f} s" if v >= 10 else f"{v:.1f} s"


def _cell(r: Row | None) -> str:
    if r is None or r.predicted is None:
        return "-"
    mark = "" if r.covered is None else (" in" if r.covered else " **out**")
    sample = "" if r.out_of_sample or r.method == "itself" else "*"
    low, high = _fmt(r.low, r.unit), _fmt(r.high, r.unit)
    return f"{_fmt(r.predicted, r.unit)} ({r.error:+.0%}{sample}; {low}-{high}{mark})"


LABELS = {"warmup": "warm-up", "kv_blocks": "KV blocks", "graph_mem_gib": "graph memory", "load_s": "weights load",
          "weights_gib": "weights"}


def markdown(rows: list[Row]) -> str:
    lines = ["| log | quantity | logged | prior | calibrated on itself | other logs (same release) | other phase |",
             "|---|---|---|---|---|---|---|"]
    keys = list(dict.fromkeys((r.case, r.quantity) for r in rows))
    for case, quantity in keys:
        sel = {r.method: r for r in rows if (r.case, r.quantity) == (case, quantity)}
        first = next(iter(sel.values()))
        other = sel.get("other phase")
        lines.append(f"| {case} | {LABELS.get(quantity, quantity)} | {_fmt(first.logged, first.unit)} | "
                     f"{_cell(sel.get('prior'))} | {_cell(sel.get('itself'))} | {_cell(sel.get('other logs'))} | "
                     f"{_cell(other) + (' from ' + other.note if other else '')} |")
    lines += ["", "| method | rows | n | median abs error | largest abs error | 2-sd coverage |",
              "|---|---|---|---|---|---|"]
    for s in summary(rows):
        cov = "-" if s["coverage"] is None else f"{s['coverage']:.0%}"
        lines.append(f"| {s['method']} | {s['rows']} | {s['n']} | {s['median_abs_error']:.0%} | "
                     f"{s['max_abs_error']:.0%} | {cov} |")
    return "\n".join(lines) + "\n"


# --- every real log whose model is now known from its config ---------------------------------------
KNOWN_MODEL_SETTINGS = {"max_model_len": 4096, "max_num_seqs": 64, "gpu_memory_utilization": 0.9}


def known_model_rows(path: Path = FACTS) -> list[dict[str, Any]]:
    """For each log of facts.yaml that names its model (`model_config`, else `model`) and whose config is
    known (tuner/models): what the model reads from the config and predicts for the log's release,
    device and TP under KNOWN_MODEL_SETTINGS, beside the figure the log shows where it shows one.
    Nothing is refitted on these models."""
    from tuner.models import UnknownModelError, resolve
    from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
    from tuner.perfmodel.hardware import normalize_dtype

    out = []
    for entry in yaml.safe_load(path.read_text()):
        name = entry.get("model_config") or entry.get("model")
        if not name:
            continue
        try:
            shape = resolve(name)
        except UnknownModelError:
            out.append({"file": entry["file"], "model": name, "known": False})
            continue
        tp, device = int(entry.get("tp") or 1), entry.get("device") or "gaudi3"
        dtype = normalize_dtype(entry.get("dtype"), "fp8" if shape.quantization else None)
        release = entry.get("release") or "gaudi-main"
        pred = predict_startup(release, SimSettings(model=name, device=device, dtype=dtype, tp=tp,
                                                    gpu_memory_utilization=KNOWN_MODEL_SETTINGS[
                                                        "gpu_memory_utilization"]),
                               ServerInputs(max_model_len=KNOWN_MODEL_SETTINGS["max_model_len"],
                                            max_num_seqs=KNOWN_MODEL_SETTINGS["max_num_seqs"]), {})
        observed = {k: v for e in entry.get("fidelity") or [] for k, v in (e.get("observed") or {}).items()}
        out.append({"file": entry["file"], "model": name, "known": True, "source": shape.source,
                    "release": release, "device": device, "tp": tp,
                    "kv_bytes_per_token": shape.kv_bytes_per_token("bf16", tp),
                    "weights_gib": shape.weight_bytes(dtype, tp) / GiB, "logged_weights_gib": observed.get(
                        "weights_gib"), "kv_blocks": pred.num_blocks if pred.failure is None else None,
                    "warmup_s": pred.warmup_seconds if pred.failure is None else None,
                    "failure": None if pred.failure is None else f"{pred.failure.phase}: {pred.failure.message[:80]}"})
    return out


def known_models_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| log | model (source) | release, device, TP | KV B/token/card | weights/card (logged) | "
             "KV blocks | warm-up |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["known"]:
            lines.append(f"| {r['file']} | {r['model']} (no config known) | - | - | - | - | - |")
            continue
        logged = f" ({r['logged_weights_gib']:.2f} GiB logged)" if r["logged_weights_gib"] else ""
        blocks = f"{r['kv_blocks']:,}" if r["kv_blocks"] else f"fails: {r['failure']}"
        warm = f"{r['warmup_s']:.0f} s" if r["warmup_s"] else "-"
        lines.append(f"| {r['file']} | {r['model']} ({r['source']}) | {r['release']}, {r['device']}, TP {r['tp']} | "
                     f"{r['kv_bytes_per_token']:,} | {r['weights_gib']:.2f} GiB{logged} | {blocks} | {warm} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="store benchmarks/results/model_fidelity.{json,md}")
    args = parser.parse_args()
    cases = load_cases()
    for case in cases:
        built = builds([case]).get(case.id)
        if case.buckets and built != case.buckets:
            print(f"warning: {case.id}: the facts' settings build {built}, the log has {case.buckets}")
    rows = compute(cases)
    text = markdown(rows)
    known = known_model_rows()
    text += ("\nEvery log whose model is known from its config (settings the log does not show: "
             f"{json.dumps(KNOWN_MODEL_SETTINGS)}; nothing refitted):\n\n" + known_models_markdown(known))
    print(text)
    if args.write:
        out = ROOT / "benchmarks" / "results"
        out.mkdir(exist_ok=True)
        (out / "model_fidelity.md").write_text(text, encoding="utf-8")
        doc = {"rows": [{**asdict(r), "error": r.error, "covered": r.covered} for r in rows],
               "summary": summary(rows), "known_models": known}
        (out / "model_fidelity.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
