"""A plan in plain words, answer first, readable at 80 columns: what to boot, against the baseline, the
predicted front with its bands, and what is infeasible and why."""

from __future__ import annotations

import math
import textwrap
from typing import Any

from ..vocabulary import display
from .build import Plan
from .document import gain, objective_names
from .evaluate import FEASIBLE, INFEASIBLE, LIKELY, Point

FRONT_ROWS = 12


def settings_text(values: dict[str, Any]) -> str:
    return " ".join(f"{k.removeprefix('VLLM_')}={display.num(v) if isinstance(v, float) else v}"
                    for k, v in values.items()) or "(no parameter of the space)"


def _value(name: str, v: float) -> str:
    """Compact: 869 tok/s, 519 ms, 168 s."""
    if name == "output_throughput":
        return f"{v:,.0f} tok/s"
    if name.endswith("_ms"):
        return f"{v:,.0f} ms" if v >= 10 else f"{v:.2g} ms"
    return f"{v:,.0f} s"


def vector_text(plan: Plan, p: Point) -> str:
    names = objective_names(plan)
    return (f"{_value(names[0], p.vector[0])}, {display.short(names[1])} {_value(names[1], p.vector[1])}, "
            f"warm-up {_value(names[2], p.vector[2])}"
            + (f" (cached {_value(names[2], p.figures['warmup_cached_s'])})"
               if p.figures.get("warmup_cached_s") is not None and plan.limits.warmup_mode == "cold" else ""))


def bands_text(plan: Plan, p: Point) -> str:
    names = objective_names(plan)
    parts = []
    for i, n in enumerate(names):
        lo, hi = (p.worst[i], p.best[i]) if i == 0 else (p.best[i], p.worst[i])
        unit = _value(n, hi).split(" ", 1)[1]
        parts.append(f"{_value(n, lo).split(' ', 1)[0]}-{_value(n, hi).split(' ', 1)[0]} {unit}")
    return "; ".join(parts)


def gain_text(plan: Plan, p: Point) -> str | None:
    g = gain(plan, p)
    if g is None:
        return None
    names = objective_names(plan)
    return ", ".join(f"{display.percent(g[n]['percent'])} {display.short(n) if n != 'warmup_s' else 'warm-up'}"
                     for n in names)


def render(plan: Plan, console, out_path: str | None, tune_hint: str | None) -> None:
    ev, lim, t = plan.evaluator, plan.limits, plan.evaluator.target
    dm = t.device_model
    p = console.print
    p(f"[bold]Plan of {plan.space.name}[/] on {t.release} ({dm.device}, {dm.model}, {dm.dtype}): nothing booted.")
    timing = plan.timing
    what = (f"a quasi-random sample of {len(plan.points):,} configurations"
            + (f" of {plan.discrete_size:,}" if plan.discrete_size else " (continuous parameters)")
            if plan.sampled else f"every configuration of the space: {len(plan.points):,}")
    p(f"Predicted {what} in {timing.get('wall_s', 0):.1f} s ({timing.get('per_point_ms', 0):.2f} ms of CPU "
      "each)" + (f"; {plan.distinct:,} distinct as the release reads them." if plan.distinct else "."))
    p(f"Workload: {_workload(t)}." + (f" Warm-up budget {lim.warmup_budget_s:g} s." if lim.warmup_budget_s else "")
      + (" SLO " + ", ".join(f"{k} <= {v:g}" for k, v in lim.slos_ms.items()) + "." if lim.slos_ms else ""))
    cal = ev.calibration
    p("Calibration: " + (f"{cal.n} log(s) of past boots" if cal.n else "the documented model (no log)")
      + f"; bands are {ev.z:g} standard deviations of its uncertainty either way.")
    p("")
    if not plan.picks:
        p("[yellow]No configuration is predicted to be feasible: nothing to boot.[/] The reasons are below.")
    else:
        p("[bold]Boot these first[/] (largest expected gain in hypervolume under the model's uncertainty):")
        for rank, (i, _) in enumerate(plan.picks, start=1):
            pt = plan.points[i]
            p(f" {rank}. {vector_text(plan, pt)}")
            p(f"    bands: {bands_text(plan, pt)}")
            p(_indented(settings_text(pt.values), console))
            if (g := gain_text(plan, pt)) is not None:
                p(f"    against the baseline: {g}")
        if tune_hint:
            p("Boot them first with:")
            p(f"  {tune_hint}", soft_wrap=True)
    b = plan.baseline
    if b is not None:
        p("")
        bp = b.point
        p(f"[bold]Baseline[/], what you run today ({b.kind} {b.source}):", soft_wrap=True)
        if bp is None or bp.vector is None:
            p(f"  predicted {bp.verdict if bp else 'unknown'}: {bp.reason if bp else ''}"
              + (f" ({bp.detail})" if bp and bp.detail else ""))
        else:
            p("  " + vector_text(plan, bp) + ("" if bp.verdict == FEASIBLE else
                                             f" [yellow]({bp.verdict}: {bp.reason})[/]"))
            best = _best_gain(plan)
            if best is not None:
                p(f"  Best predicted gain (pick {best[0]}): {best[1]}.")
        for note in b.notes:
            p(f"  [dim]{note}[/]")
    p("")
    _front(plan, console)
    p("")
    _infeasible(plan, console)
    if out_path:
        p("")
        p(f"Plan written to {out_path}", soft_wrap=True)


def _indented(text: str, console, indent: str = "    ") -> str:
    return textwrap.fill(text, width=max(40, console.width - 1), initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)


def _best_gain(plan: Plan) -> tuple[int, str] | None:
    """The pick with the largest predicted throughput gain over the baseline."""
    scored = [(rank, gain(plan, plan.points[i])) for rank, (i, _) in enumerate(plan.picks, start=1)]
    scored = [(r, g) for r, g in scored if g is not None]
    if not scored:
        return None
    rank, _ = max(scored, key=lambda x: x[1]["output_throughput"]["change"] or 0)
    return rank, gain_text(plan, plan.points[plan.picks[rank - 1][0]])


def _front(plan: Plan, console) -> None:
    from ..report.terminal import numeric_table

    names = objective_names(plan)
    n = len(plan.front)
    console.print(f"[bold]Predicted front[/]: {n} configuration{'s' if n != 1 else ''} of "
                  f"{plan.count(FEASIBLE):,} predicted feasible; {max(0, len(plan.could_be) - n):,} more could be on "
                  "it within one configuration's scatter.")
    if not n:
        return
    table = numeric_table("", ["#", display.short(names[0]), display.short(names[1]), "warm-up", "cached"], console)
    from .build import signature

    ranks = {signature(plan.points[i]): r for r, (i, _) in enumerate(plan.picks, start=1)}
    rows, twins = [], {}
    for i in sorted(plan.front, key=lambda i: (-plan.points[i].vector[0], plan.points[i].vector[2])):
        key = signature(plan.points[i])
        if key in twins:
            twins[key] += 1
        else:
            twins[key] = 0
            rows.append(i)
    for i in rows[:FRONT_ROWS]:
        pt = plan.points[i]
        same = twins[signature(pt)]
        table.add_row(str(ranks.get(signature(pt), "")), display.metric(names[0], pt.vector[0]),
                      display.metric(names[1], pt.vector[1]), _value("warmup_s", pt.figures["warmup_cold_s"]),
                      _value("warmup_s", pt.figures["warmup_cached_s"]),
                      settings_text(pt.values) + (f" (+{same} read the same)" if same else ""))
    console.print(table)
    if len(rows) > FRONT_ROWS:
        console.print(f"... and {len(rows) - FRONT_ROWS} more in the plan file")
    console.print("(#: pick rank; warm-up cold and with a prepared recipe cache; +N: settings the release "
                  "reads the same way)")


def _infeasible(plan: Plan, console) -> None:
    for verdict, title in ((INFEASIBLE, "Confidently infeasible"), (LIKELY, "Likely infeasible")):
        groups = plan.reasons(verdict)
        total = sum(n for _, n, _ in groups)
        console.print(f"[bold]{title}[/]: {total:,}" + ("." if not total else " (the model's bands cannot save "
                      "them):" if verdict == INFEASIBLE else " (as predicted; a band reaches back):"))
        for reason, n, examples in groups:
            console.print(f"  {n:>6,}  {reason}")
            for message, count in examples[:2]:
                short = message if len(message) <= 160 else message[:157] + "..."
                console.print(f"          [dim]{count:,} x {short}[/]")


def _workload(t) -> str:
    w = t.workload.describe()
    lo = t.load
    kind = w.get("dataset") or w.get("kind") or "workload"
    lengths = (f"{w.get('input_len')}/{w.get('output_len')} tokens" if w.get("input_len") else "")
    arrivals = (f"{lo.max_concurrency} at a time" if lo.max_concurrency else "all at once") \
        if math.isinf(lo.request_rate) else f"{lo.request_rate:g} req/s" + (
            f", at most {lo.max_concurrency} at a time" if lo.max_concurrency else "")
    return ", ".join(x for x in (f"{kind} {lengths}".strip(), f"{w.get('num_prompts', '?')} prompts", arrivals) if x)
