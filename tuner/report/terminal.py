"""Terminal tables that stay readable at 80 columns and in a CI log: short headers that are never cut,
values in human units, and the settings folded into one wrapping column."""

from __future__ import annotations

import optuna

from ..study.estimates import LEVEL, formatter
from ..vocabulary import display
from .facts import balanced_rule, closest_admission, settings_text

MIN_SETTINGS = 24  # below this the settings go on their own lines under the table


def console_for_output(console=None):
    """Rich picks the terminal's width, else $COLUMNS, else 80 (a pipe, a CI log)."""
    from rich.console import Console

    return console or Console()


def numeric_table(title: str, headers: list[str], console, settings: bool = True):
    """A rich Table whose numeric headers keep their full width; the last column (settings) folds."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for h in headers:
        table.add_column(h, justify="right", min_width=len(h), no_wrap=True)
    if settings:
        table.add_column("settings", overflow="fold", ratio=1, min_width=len("settings"))
    return table


def print_pareto(study: optuna.Study, console=None, limit: int = 15) -> None:
    from .data import gather

    console = console_for_output(console)
    d = gather(study)
    counts: dict[str, int] = {}
    for t in d.trials:
        rec = d.record(t)
        status = rec.status_text
        if status == "ok" and t.state.name == "COMPLETE" and rec.told_infeasible:
            status = "outside a limit"  # measured, but an SLO, the warm-up budget or a recompile ruled it out
        counts[status] = counts.get(status, 0) + 1
    console.print(f"[bold]{study.study_name}[/]: {len(d.trials)} trials ("
                  + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
    settled: dict[str, int] = {}
    for t in d.trials:
        how = d.record(t).settled
        settled[how] = settled.get(how, 0) + 1
    order = ("measured", "reused", "predicted", "rejected", "failed", "running", "waiting", "told by hand")
    console.print("settled: " + ", ".join(f"{k} {settled[k]}" for k in order if k in settled)
                  + " (reused: the same settings' earlier measurement; predicted: not booted, behind a "
                    "measured trial; rejected: before boot)")
    if not d.front:
        console.print("No feasible trial yet: no Pareto front. See trials.csv or report.html for the reasons.")
        admit = closest_admission(study)
        if admit is not None:
            console.print(admit.sentence()[0].upper() + admit.sentence()[1:] + ".", soft_wrap=True, markup=False)
        return
    spread = d.spread
    repeated = spread is not None and spread.repeated(t.number for t in d.front)
    headers = ["#", *(["n"] if repeated else []), *[display.short(n) for n in d.names]]
    plural = "s" if len(d.front) != 1 else ""
    table = numeric_table(f"Pareto front: {len(d.front)} feasible trial{plural}", headers, console)
    for t in d.front[:limit]:
        mark = "*" if d.pick is not None and t.number == d.pick.number else ""
        cells = [display.metric(n, v) for n, v in zip(d.names, t.values)]
        if repeated:  # the configuration's mean over its boots, +- half its 95% t-interval
            cells = [str(spread.n(t.number)), *[e.short(formatter(n)) if e is not None else c
                                                for n, e, c in zip(d.names, spread.of(t.number), cells)]]
        table.add_row(f"{mark}{t.number}", *cells, settings_text(t, " ", drop_prefix="VLLM_"))
    console.print(table)
    if repeated:
        console.print(f"(n: boots of the same settings; a figure is their mean ± half its {LEVEL:.0%} t-interval; "
                      "n 1: one measurement, no interval)", markup=False)
        for a, b in spread.indistinguishable([t.number for t in d.front]):
            console.print(f"trials {a} and {b} are indistinguishable: their intervals overlap on every objective "
                          "where they differ", markup=False)
    if any(k.startswith("VLLM_") for t in d.front for k in t.params):
        console.print("(settings: the VLLM_ prefix left out)")
    if len(d.front) > limit:
        console.print(f"... and {len(d.front) - limit} more in pareto.csv")
    if d.pick is not None:
        line = f"* balanced pick: trial {d.pick.number}"
        base = d.defaults
        if base is not None and d.record(base).ok and base.number != d.pick.number:
            _, p = display.change(d.pick.values[0], base.values[0])
            line += f", {display.percent(p)} throughput vs the release defaults (trial {base.number})"
        console.print(line)
        rule = balanced_rule(d.front, d.pick, d.names, d.dirs, d.spread)
        if rule:
            console.print(rule, soft_wrap=False, markup=False)
