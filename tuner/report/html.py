"""report.html: one self-contained file (plotly.js inlined once, no network), answer first."""

from __future__ import annotations

from pathlib import Path

import optuna

from ..vocabulary.errors.disk import write_text
from . import deploycost, sections, summary
from .data import gather
from .facts import release_notes
from .tables import CSS, SORT_JS, esc

SECTION_IDS = ("summary", "pareto", "warmup", "workload", "failures", "convergence", "trials")
TITLES = {"summary": "What to deploy", "plan": "The plan", "pareto": "Pareto front", "warmup": "Warmup",
          "workload": "Workload", "failures": "Failures", "convergence": "Convergence", "trials": "All trials",
          "deploy": "Deploying it"}


def chart(fig, div_id: str) -> str:
    import plotly.io as pio

    return "<div class='chart'>" + pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                                               config={"displaylogo": False, "responsive": True}) + "</div>"


def page(title: str, intro: str, body: list[str], ids=SECTION_IDS, titles=TITLES) -> str:
    from plotly.offline import get_plotlyjs

    nav = "".join(f"<a href='#{i}'>{esc(titles.get(i, i))}</a>" for i in ids)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<style>{CSS}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<h1>{esc(title)}</h1>{intro}<nav>{nav}</nav>{''.join(body)}"
            f"<script>{SORT_JS}</script></body></html>")


def write_html(study: optuna.Study, path: Path) -> Path:
    return write_text(path, html_text(study))


def html_text(study: optuna.Study, check=None) -> str:
    """report.html's content; `check`: the price and stated probe of the deploy section (deploycost.DeployCheck)."""
    d = gather(study)
    objectives = ", ".join(f"{n} ({x})" for n, x in zip(d.names, d.dirs))
    intro = summary.sim_banner(d) + (f"<p>Study <b>{esc(study.study_name)}</b>"
             + (f" on release profile <b>{esc(d.release)}</b>" if d.release else "")
             + f" ({esc(d.backend.get('kind', 'unknown'))} backend, {esc(d.backend.get('model', ''))}): "
             f"{len(d.trials)} trials, {len(d.front)} on the feasible Pareto front. Objectives: {esc(objectives)}.</p>")
    intro += "".join(f"<p class='note'>{esc(line)}</p>" for line in release_notes(study))
    body = [summary.section(d), sections.pareto(d, chart), sections.warmup(d, chart), sections.workload(d, chart),
            sections.failures(d), sections.convergence_section(d, chart), sections.trials(d)]
    ids = SECTION_IDS
    if study.user_attrs.get("plan"):  # tune --from-plan: the plan's predictions against its picks, second
        body.insert(1, sections.plan_section(d))
        ids = (SECTION_IDS[0], "plan", *SECTION_IDS[1:])
    body.insert(1, deploycost.section(d, check))  # start-up limits, probe check and cost: right after the answer
    ids = (ids[0], "deploy", *ids[1:])
    return page(f"bucket-tuner study {study.study_name}", intro, body, ids=ids)
