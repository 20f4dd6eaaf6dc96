"""The plan file: what `plan --json` prints and `plan --out` writes, and what `tune --from-plan` reads.

A JSON object (KIND, VERSION): the space, target, workload and limits it was planned for, the counts and
grouped reasons of what is infeasible, the predicted front with bands, the picks (their parameters, to
enqueue first) and, with --baseline, the baseline and each pick's predicted gain against it. Secret-
looking values never reach it.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

from ..serve.redact import redact_env
from .build import Plan
from .evaluate import FEASIBLE, INFEASIBLE, LIKELY, Point

KIND, VERSION = "bucket-tuner plan", 1
WARMUP = "warmup_s"


class PlanFileError(ValueError):
    """A plan file that cannot be used; the message names the file and the problem."""


def _num(v: Any, digits: int = 4) -> Any:
    if isinstance(v, float):
        return round(v, digits) if math.isfinite(v) else None
    return v


def predicted(plan: Plan, p: Point) -> dict[str, Any]:
    """A configuration's prediction: the objectives (with their bands) and what its start builds."""
    lat = plan.limits.latency_key
    out: dict[str, Any] = {}
    if p.vector is not None:
        out.update({"output_throughput": _num(p.vector[0], 1), lat: _num(p.vector[1], 1), WARMUP: _num(p.vector[2], 1),
                    "bands": {"output_throughput": [_num(p.worst[0], 1), _num(p.best[0], 1)],
                              lat: [_num(p.best[1], 1), _num(p.worst[1], 1)],
                              WARMUP: [_num(p.best[2], 1), _num(p.worst[2], 1)]}})
    keys = ("warmup_cold_s", "warmup_cached_s", "median_ttft_ms", "median_tpot_ms", "prompt_buckets",
            "decode_buckets", "kv_blocks", "prompt_graphs", "decode_graphs", "graph_mem_gib", "runtime_compiles")
    out.update({k: _num(p.figures[k], 3) for k in keys if p.figures.get(k) is not None})
    if p.verdict != FEASIBLE:
        out.update(verdict=p.verdict, reason=p.reason, detail=p.detail)
    return out


def gain(plan: Plan, p: Point) -> dict[str, Any] | None:
    """A configuration against the baseline: each objective's difference, absolute and in percent."""
    b = plan.baseline.point if plan.baseline is not None else None
    if b is None or b.vector is None or p.vector is None:
        return None
    out = {}
    for name, new, old in zip(objective_names(plan), p.vector, b.vector):
        out[name] = {"change": _num(new - old, 2), "percent": _num(100 * (new - old) / old, 1) if old else None}
    return out


def objective_names(plan: Plan) -> list[str]:
    return ["output_throughput", plan.limits.latency_key, WARMUP]


def to_document(plan: Plan, *, space_path: str | None = None, calibrated_from: list[str] | None = None
                ) -> dict[str, Any]:
    ev, lim = plan.evaluator, plan.limits
    t = ev.target
    from .build import signature

    twins: dict[tuple, list[int]] = {}  # one entry per distinct configuration, its twins counted
    for i in sorted(plan.front, key=lambda i: (-plan.points[i].vector[0], plan.points[i].vector[2])):
        twins.setdefault(signature(plan.points[i]), []).append(i)
    front = [members[0] for members in twins.values()]
    same = {members[0]: len(members) - 1 for members in twins.values()}
    doc: dict[str, Any] = {
        "kind": KIND, "version": VERSION,
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "space": {"name": plan.space.name, "source": space_path or plan.space.source, "release": t.release},
        "target": {"release": t.release, "device": t.device_model.device, "model": t.device_model.model,
                   "dtype": t.device_model.dtype,
                   **({"hf_overrides": t.device_model.hf_overrides} if t.device_model.hf_overrides else {})},
        "workload": t.workload.describe(),
        "load": {"request_rate": None if math.isinf(t.load.request_rate) else t.load.request_rate,
                 "burstiness": t.load.burstiness, "max_concurrency": t.load.max_concurrency},
        "objectives": objective_names(plan),
        "limits": {"warmup": lim.warmup_mode, "warmup_budget_s": lim.warmup_budget_s, "slos_ms": lim.slos_ms,
                   "allow_recompiles": lim.allow_recompiles, "allow_failed_requests": lim.allow_failed_requests},
        "calibration": {**ev.calibration.summary(), "from_logs": list(calibrated_from or [])},
        "points": {"predicted": len(plan.points), "space_size": plan.discrete_size, "sampled": plan.sampled,
                   "feasible": plan.count(FEASIBLE), "infeasible": plan.count(INFEASIBLE),
                   "likely_infeasible": plan.count(LIKELY), "distinct": plan.distinct, "on_front": len(plan.front),
                   "could_be_on_front": len(plan.could_be)},
        "infeasible": _reasons(plan, INFEASIBLE),
        "likely_infeasible": _reasons(plan, LIKELY),
        "reference_point": list(plan.reference) if plan.reference else None,
        "front": [{"params": plan.points[i].values, "predicted": predicted(plan, plan.points[i]),
                   "read_the_same": same[i],
                   **({"vs_baseline": g} if (g := gain(plan, plan.points[i])) else {})} for i in front],
        "picks": [{"rank": r + 1, "params": plan.points[i].values, "expected_hypervolume_gain": _num(g_, 6),
                   "predicted": predicted(plan, plan.points[i]),
                   **({"vs_baseline": g} if (g := gain(plan, plan.points[i])) else {})}
                  for r, (i, g_) in enumerate(plan.picks)],
        "timing": {k: _num(v, 4) for k, v in plan.timing.items()},
    }
    if plan.baseline is not None:
        b = plan.baseline
        doc["baseline"] = {"source": b.source, "kind": b.kind, "server": b.settings.server,
                           "env": redact_env(b.settings.env), "params": b.settings.params, "notes": b.notes,
                           "predicted": predicted(plan, b.point) if b.point is not None else None}
    return json.loads(json.dumps(doc, default=str))


def _reasons(plan: Plan, verdict: str) -> list[dict[str, Any]]:
    return [{"reason": reason, "count": n, "examples": [{"message": m, "count": c} for m, c in examples]}
            for reason, n, examples in plan.reasons(verdict)]


def write(doc: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n")


def read_picks(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the plan document, its picks' parameters in rank order) for `tune --from-plan`."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanFileError(f"--from-plan {path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanFileError(f"--from-plan {path}: not a plan file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise PlanFileError(f"--from-plan {path}: not a plan file (write one with `bucket-tuner plan --out`)")
    if doc.get("version") != VERSION:
        raise PlanFileError(f"--from-plan {path}: plan file version {doc.get('version')!r}; this tuner reads "
                            f"version {VERSION}")
    picks = doc.get("picks")
    if not isinstance(picks, list) or not all(isinstance(p, dict) and isinstance(p.get("params"), dict)
                                              for p in picks):
        raise PlanFileError(f"--from-plan {path}: its picks are not a list of parameter sets")
    return doc, [p["params"] for p in sorted(picks, key=lambda p: p.get("rank", 0))]


def study_record(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """What a study keeps of the plan it started from (study attribute "plan"; the report's plan section)."""
    return {"source": source, "created": doc.get("created"), "points": doc.get("points"),
            "objectives": doc.get("objectives"), "limits": doc.get("limits"),
            "infeasible": [{"reason": r["reason"], "count": r["count"]} for r in doc.get("infeasible") or []],
            "likely_infeasible": [{"reason": r["reason"], "count": r["count"]}
                                  for r in doc.get("likely_infeasible") or []],
            "picks": [{"rank": p.get("rank"), "params": p.get("params"), "predicted": p.get("predicted")}
                      for p in doc.get("picks") or []],
            "baseline": (doc.get("baseline") or {}).get("predicted")}
