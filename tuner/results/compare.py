"""Studies side by side: the release-upgrade check (same workload, same search, several releases).

Per study: how much of the union of all feasible fronts its own front covers (hypervolume on one
common reference point, as a share of the union's), its best trial per criterion, its best throughput
within each warmup budget, and what differs between the balanced picks. Everything is compared with
the first study (the baseline) and worse results are flagged as regressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..study.estimates import Spread, formatter, verdict
from ..study.pareto import hypervolume, measured_front, pareto_indices
from ..vocabulary.record import TrialRecord
from .export import ExportError, Filters, pick_trial

CRITERIA = ("throughput", "latency", "warmup", "balanced")
REGRESSION = 0.05  # worse by more than 5% (or 5 points of front share) is flagged
MAX_BUDGETS = 8
NO_PICK = "(no feasible trial)"


@dataclass
class Comparison:
    names: list[str]
    releases: list[str | None]
    objective_names: list[str]
    directions: list[str]
    reference: list[float]
    hypervolume: list[float]
    union_hypervolume: float
    trials: list[int]
    fronts: list[list[FrozenTrial]]
    best: dict[str, list[dict | None]] = field(default_factory=dict)
    at_budget: list[tuple[float, list[float | None]]] = field(default_factory=list)
    setting_diffs: list[tuple[str, list[Any]]] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)

    @property
    def share(self) -> list[float]:
        """Each front's hypervolume as a share of the union front's (1.0: it is the whole union)."""
        u = self.union_hypervolume
        return [h / u if u else 0.0 for h in self.hypervolume]


def _summary(t: FrozenTrial | None, study: optuna.Study | None = None, spread: Spread | None = None) -> dict | None:
    if t is None:
        return None
    from ..recipecache.warmupmode import warmup_figures

    rec = TrialRecord.from_frozen(t)
    obs = rec.observed
    reboot = ((study.user_attrs.get("cold_reboots") or {}) if study is not None else {}).get(str(t.number))
    return {"trial": t.number, "values": list(t.values), "params": dict(t.params),
            "prompt_buckets": obs.get("prompt_buckets"), "decode_buckets": obs.get("decode_buckets"),
            "kv_blocks": obs.get("kv_blocks"), "env": rec.env,
            "warmups": warmup_figures(rec.observed, rec.predicted, reboot),
            # the configuration's boots: n and, per objective, the mean and interval (study/estimates.py)
            "n": spread.n(t.number) if spread is not None else 1,
            "spread": spread.of(t.number) if spread is not None else []}


def _pick(study: optuna.Study, criterion: str):
    try:
        return pick_trial(study, criterion, Filters())
    except ExportError:
        return None


def common_reference(points: list, directions: list[str]) -> list[float]:
    """Slightly worse than the worst front point on every objective (0 for a maximised one)."""
    ref = []
    for i, d in enumerate(directions):
        col = [p[i] for p in points] or [0.0]
        ref.append(0.0 if d == "maximize" else max(col) * 1.1 + 1e-9)
    return ref


def compare_studies(*studies: optuna.Study) -> Comparison:
    if len(studies) < 2:
        raise ValueError("compare needs at least two studies")
    names = studies[0].metric_names or []
    for s in studies[1:]:
        if (s.metric_names or []) != names:
            raise ValueError(f"the studies have different objectives: {names} vs {s.metric_names} "
                             f"({studies[0].study_name} vs {s.study_name})")
    directions = [d.name.lower() for d in studies[0].directions]
    fronts = [sorted(measured_front(s), key=lambda t: -t.values[0]) for s in studies]
    points = [t.values for f in fronts for t in f]
    reference = common_reference(points, directions)
    union = [points[i] for i in pareto_indices(points, directions)] if points else []
    cmp = Comparison(
        names=_unique([s.study_name for s in studies]),
        releases=[(s.user_attrs.get("space") or {}).get("release") for s in studies],
        objective_names=names, directions=directions, reference=reference,
        hypervolume=[hypervolume([t.values for t in f], reference, directions) for f in fronts],
        union_hypervolume=hypervolume(union, reference, directions),
        trials=[len(s.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))) for s in studies],
        fronts=fronts,
    )
    spreads = [Spread.of_study(s) for s in studies]
    for c in CRITERIA:
        cmp.best[c] = [_summary(_pick(s, c), s, sp) for s, sp in zip(studies, spreads)]
    for budget in _budgets(fronts):
        row = []
        for f in fronts:
            fits = [t.values[0] for t in f if t.values[2] <= budget]
            row.append(max(fits) if fits else None)
        cmp.at_budget.append((budget, row))
    picks = cmp.best["balanced"]
    present = [p for p in picks if p]
    if len(present) >= 2:
        keys = sorted(set().union(*(set(p["params"]) | set(p["env"]) for p in present)))
        for k in keys:
            values = [p["params"].get(k, p["env"].get(k)) for p in present]
            if any(str(v) != str(values[0]) for v in values[1:]):
                cmp.setting_diffs.append((k, [p["params"].get(k, p["env"].get(k)) if p else NO_PICK for p in picks]))
    cmp.regressions = regressions(cmp)
    return cmp


def _unique(names: list[str]) -> list[str]:
    """The same study given twice (a sanity check) still gets two columns: 'a', 'a (2)'."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return out


def _budgets(fronts: list[list[FrozenTrial]]) -> list[float]:
    """The warmups at which some study's best throughput steps up (at most MAX_BUDGETS of them)."""
    steps = set()
    for f in fronts:
        best = None
        for t in sorted(f, key=lambda t: t.values[2]):
            if best is None or t.values[0] > best:
                best = t.values[0]
                steps.add(round(t.values[2], 1))
    out = sorted(steps)
    if len(out) > MAX_BUDGETS:
        idx = sorted({round(i * (len(out) - 1) / (MAX_BUDGETS - 1)) for i in range(MAX_BUDGETS)})
        out = [out[i] for i in idx]
    return out


def regressions(cmp: Comparison) -> list[str]:
    """Plain sentences: where a study does worse than the first one."""
    from ..vocabulary.display import metric, seconds, short

    out = []
    base = cmp.names[0]
    share = cmp.share
    thr = cmp.objective_names[0] if cmp.objective_names else "throughput"
    for i, name in enumerate(cmp.names[1:], start=1):
        if share[i] < share[0] - REGRESSION:
            out.append(f"{name}: its front covers {share[i]:.0%} of the union front, {base}'s {share[0]:.0%}")
        for c in CRITERIA:
            a, b = cmp.best[c][0], cmp.best[c][i]
            if a and not b:
                out.append(f"{name}: no feasible trial for the {c} pick ({base} has trial {a['trial']})")
                continue
            if not (a and b):
                continue
            for j, (obj, d) in enumerate(zip(cmp.objective_names, cmp.directions)):
                old, new = a["values"][j], b["values"][j]
                worse = (new < old) if d == "maximize" else (new > old)
                if old and worse and abs(new - old) / abs(old) > REGRESSION:
                    out.append(f"{name}: {c} pick {short(obj)} {metric(obj, new)} vs {metric(obj, old)} in "
                               f"{base} ({(new - old) / abs(old):+.0%}){noise_note(a, b, j)}")
        for budget, row in cmp.at_budget:
            old, new = row[0], row[i]
            if old is not None and (new is None or new < old * (1 - REGRESSION)):
                got = "nothing feasible" if new is None else f"{metric(thr, new)} ({(new - old) / old:+.0%})"
                out.append(f"{name}: within a warmup of {seconds(budget)}: {got}; {base}: {metric(thr, old)}")
    return out


def pick_noise(cmp: Comparison) -> list[str]:
    """Per criterion, each study's pick against the baseline's where both were booted more than once: the
    same within the noise (intervals overlapping on every objective where they differ) or apart."""
    from ..vocabulary.display import short

    out = []
    for c, row in cmp.best.items():
        a = row[0]
        for name, b in zip(cmp.names[1:], row[1:]):
            if not (a and b and a.get("n", 1) > 1 and b.get("n", 1) > 1):
                continue
            same, differ = verdict(a["spread"], b["spread"])
            apart = [short(cmp.objective_names[k]) for k in differ
                     if a["spread"][k].overlaps(b["spread"][k]) is False]
            out.append(f"{c} pick: {name} (trial {b['trial']}) and {cmp.names[0]} (trial {a['trial']}) "
                       + ("are indistinguishable: their 95% intervals overlap on every objective where they differ"
                          if same else f"differ beyond the noise on {', '.join(apart)}"))
    return out


def noise_note(a: dict, b: dict, j: int) -> str:
    """What the noise says of a difference between two picks on objective j: nothing when either is one
    measurement (the figures carry no interval), else whether their 95% intervals overlap."""
    ea, eb = (s.get("spread") or [None] * (j + 1) for s in (a, b))
    if ea[j] is None or eb[j] is None or ea[j].overlaps(eb[j]) is None:
        return ""
    boots = f"the 95% intervals over {ea[j].n} and {eb[j].n} boots"
    if ea[j].overlaps(eb[j]):
        return f" (inside the noise: {boots} overlap)"
    return f" (beyond the noise: {boots} are apart)"


def cell(name: str, s: dict | None, j: int) -> str:
    """A pick's figure for a table: the configuration's mean +- half its interval when measured more than once."""
    from ..vocabulary.display import metric

    if not s:
        return "-"
    est = (s.get("spread") or [None] * (j + 1))[j]
    return est.short(formatter(name)) if est is not None and est.n > 1 else metric(name, s["values"][j])


def print_comparison(cmp: Comparison, console=None) -> None:
    """80-column tables: short headers that are never cut, human units, long values folded."""
    from rich.console import Console
    from rich.table import Table

    from ..vocabulary import display

    console = console or Console()
    names = cmp.objective_names
    console.print("Comparing " + ", ".join(f"[bold]{n}[/] ({r or 'no release'})"
                                           for n, r in zip(cmp.names, cmp.releases)))
    console.print("[bold]Front coverage[/]: hypervolume as a share of the union of all fronts")
    t = Table()
    t.add_column("study", overflow="fold", ratio=1)
    for h in ("trials", "front", "share"):
        t.add_column(h, justify="right", no_wrap=True, min_width=len(h))
    for i, n in enumerate(cmp.names):
        t.add_row(n, str(cmp.trials[i]), str(len(cmp.fronts[i])), f"{cmp.share[i]:.0%}")
    console.print(t)
    _print_best(cmp, console)
    if cmp.at_budget:
        console.print(f"[bold]Best {display.short(names[0])} within a warmup budget[/]")
        t = Table()
        t.add_column("warmup", justify="right", no_wrap=True)
        for n in cmp.names:
            t.add_column(n, justify="right", overflow="fold")
        for budget, row in cmp.at_budget:
            t.add_row(display.seconds(budget), *["-" if x is None else display.metric(names[0], x) for x in row])
        console.print(t)
    _print_warmups(cmp, console)
    if cmp.setting_diffs:
        console.print("[bold]Balanced picks: settings that differ[/]")
        t = Table()
        t.add_column("setting", overflow="fold", ratio=2)
        for n in cmp.names:
            t.add_column(n, overflow="fold", ratio=1)
        for k, values in cmp.setting_diffs:
            t.add_row(k, *["unset" if v is None else str(v) for v in values])
        console.print(t)
    if cmp.regressions:
        console.print(f"[bold red]Regressions against {cmp.names[0]}:[/]")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for line in cmp.regressions:
            grid.add_row(" -", line)
        console.print(grid)
    else:
        console.print(f"No regression against {cmp.names[0]}.")
    from ..recipecache.manifest import release_change_note

    if note := release_change_note(cmp.releases):
        console.print(f"Recipe cache: {note}", markup=False)


def _print_best(cmp: Comparison, console) -> None:
    """The best trial per criterion of each study; with n and intervals where a pick was booted more than once."""
    from rich.table import Table

    from ..vocabulary import display

    names = cmp.objective_names
    console.print("[bold]Best trial per criterion[/]")
    t = Table()
    t.add_column("pick", no_wrap=True)
    t.add_column("study", overflow="fold", ratio=1, min_width=len("study"))
    repeated = any(s and s.get("n", 1) > 1 for row in cmp.best.values() for s in row)
    for h in ("#", *(["n"] if repeated else []), *[display.short(n) for n in names]):
        t.add_column(h, justify="right", no_wrap=True, min_width=len(h))
    for c, row in cmp.best.items():
        for name, s in zip(cmp.names, row):
            boots = [str(s.get("n", 1)) if s else "-"] if repeated else []
            # a figure's interval on a line of its own: four objectives with intervals fit 80 columns
            figures = [cell(n, s, j).replace(" ±", "\n±") for j, n in enumerate(names)]
            t.add_row(c, name, str(s["trial"]) if s else "-", *boots, *figures)
    console.print(t)
    if repeated:
        console.print("(n: boots of the pick's settings; a figure is their mean ± half its 95% t-interval; n 1: one "
                      "measurement, no interval)", markup=False)
        for line in pick_noise(cmp):
            console.print(line, markup=False)


def _print_warmups(cmp: Comparison, console) -> None:
    """The balanced picks' cold and cached warmups (tune --warmup): measured, or predicted and marked."""
    from ..vocabulary import display

    picks = cmp.best.get("balanced") or []
    known = [(n, s["warmups"]) for n, s in zip(cmp.names, picks) if s and s.get("warmups")]
    if not any(f.seconds is not None for _, w in known for f in w.values()):
        return
    console.print("[bold]Balanced picks: cold / cached warmup[/] (pred.: predicted by the calibrated model, "
                  "with its 2-sd range)")
    for name, w in known:
        console.print(f"  {name}: cold {w['cold'].text(display.seconds)}, cached {w['cached'].text(display.seconds)}",
                      markup=False)
