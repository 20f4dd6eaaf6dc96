"""Results of a study: trials.csv, pareto.csv, a self-contained report.html, and a terminal table.

Package map
    frame.py        trials.csv / pareto.csv rows;  sweep.py  load_sweep.csv (tune --load-sweep)
    (tuner/vocabulary/display.py: numbers in human units, shared with compare and the terminal)
    facts.py        limits, seed trials, picks, accelerator cost of a trial
    deploycost.py   the deploy section: a stated startup probe against the pick, cost per token, payback
    startup.py      a trial's server log read back: buckets, graphs, startup phase times, excerpts
    padding.py      the workload's lengths against the bucket boundaries
    convergence.py  hypervolume over trials and accelerator-hours, and the verdict
    data.py         everything above gathered once per study
    summary.py      the answer section;  sections.py  the evidence sections
    charts.py       plotly figures;  tables.py  HTML tables, CSS and the page's scripts
    html.py         report.html;  terminal.py  the 80-column tables
"""

from __future__ import annotations

from pathlib import Path

import optuna

from ..vocabulary.errors.disk import DiskError, explain, write_text, writing
from .deploycost import DeployCheck, print_costs
from .frame import KEY_METRICS, pareto_frame, study_hypervolume, trials_frame, write_csvs
from .html import SECTION_IDS, write_html
from .terminal import print_pareto

__all__ = ["DeployCheck", "print_costs",  # deploycost.py
           "KEY_METRICS", "SECTION_IDS", "pareto_frame", "print_pareto", "study_hypervolume", "trials_frame",
           "write_csvs", "write_html", "write_report"]


def write_report(study: optuna.Study, out_dir: Path, elsewhere: str | None = None,
                 check: DeployCheck | None = None) -> dict[str, Path]:
    """trials.csv, pareto.csv, report.html (and load_sweep.csv after a --load-sweep study) in out_dir, each
    whole or not at all. A file the disk refuses (full, over quota, read-only) does not stop the others:
    those refused are named together in one DiskError raised at the end (its .written: the others);
    `elsewhere` says where else they could go (e.g. "--out DIR"); `check`: the price and stated startup
    probe of report.html's deploy section."""
    from .frame import csv_texts
    from .html import html_text
    from .sweep import CSV_NAME, sweep_csv_text

    with writing(out_dir, elsewhere):
        out_dir.mkdir(parents=True, exist_ok=True)
    texts = csv_texts(study)
    files = [("trials_csv", "trials.csv", lambda: texts[0]), ("pareto_csv", "pareto.csv", lambda: texts[1]),
             ("report_html", "report.html", lambda: html_text(study, check)),
             ("load_sweep_csv", CSV_NAME, lambda: sweep_csv_text(study))]  # tune --load-sweep: every point
    written: dict[str, Path] = {}
    refused: list[tuple[str, DiskError]] = []
    for key, name, content in files:
        text = content()
        if text is None:
            continue
        try:
            written[key] = write_text(out_dir / name, text, elsewhere)
        except DiskError as exc:
            refused.append((name, exc))
    if refused:
        names = ", ".join(name for name, _ in refused)
        first = refused[0][1]
        error = DiskError(explain(first.errno, out_dir, elsewhere).replace(
            f"cannot write {out_dir}", f"cannot write {names} in {out_dir}", 1), out_dir, first.errno)
        error.written = written
        raise error
    return written
