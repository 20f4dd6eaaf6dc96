"""Results of a study: trials.csv, pareto.csv, a self-contained report.html, and a terminal table.

Package map
    frame.py        trials.csv / pareto.csv rows;  sweep.py  load_sweep.csv (tune --load-sweep)
    (tuner/display.py: numbers in human units, shared with compare and the terminal)
    facts.py        limits, seed trials, picks, accelerator cost of a trial
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

from .frame import KEY_METRICS, pareto_frame, study_hypervolume, trials_frame, write_csvs
from .html import SECTION_IDS, write_html
from .terminal import print_pareto

__all__ = ["KEY_METRICS", "SECTION_IDS", "pareto_frame", "print_pareto", "study_hypervolume", "trials_frame",
           "write_csvs", "write_html", "write_report"]


def write_report(study: optuna.Study, out_dir: Path) -> dict[str, Path]:
    trials_csv, pareto_csv = write_csvs(study, out_dir)
    report = write_html(study, out_dir / "report.html")
    paths = {"trials_csv": trials_csv, "pareto_csv": pareto_csv, "report_html": report}
    from .sweep import write_sweep_csv

    if (sweep_csv := write_sweep_csv(study, out_dir)) is not None:  # tune --load-sweep: every point
        paths["load_sweep_csv"] = sweep_csv
    return paths
