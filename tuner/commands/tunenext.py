"""The end of a finished `tune` run: the files it wrote (report, CSVs, best.env and the two ways to start
vLLM beside it) and the next commands to type."""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path


def write_results(run, opts, ctx, console) -> None:
    """report.html, the CSVs and best.env; on a full or read-only disk, what could be written and one line.
    Then what to do next, as commands."""
    from .. import report
    from ..results.export import export_best
    from ..vocabulary.errors.disk import DiskError

    elsewhere = f"bucket-tuner report {opts.name} --results {opts.results_root} --out DIR"
    refused = []
    try:
        paths = report.write_report(run.study, opts.study_dir, elsewhere=elsewhere)
    except DiskError as exc:
        paths, refused = exc.written, [exc]
    for label, key in (("report", "report_html"), ("trials", "trials_csv"), ("pareto", "pareto_csv"),
                       ("load sweep points", "load_sweep_csv")):
        if key in paths:
            console.print(f"{label}: {paths[key]}", soft_wrap=True)
    try:
        best = export_best(run.study, opts.study_dir / "best.env", "balanced", ctx.release,
                           elsewhere=f"bucket-tuner export {opts.name} --results {opts.results_root} -o FILE")
    except DiskError as exc:
        best, refused = None, refused + [exc]
    if best is not None:   # trial 0 is a pick too
        console.print(f"best.env (balanced pick, trial {best}): {opts.study_dir / 'best.env'}", soft_wrap=True)
    if refused:
        raise DiskError(f"{refused[0]}; the study itself is intact", refused[0].path, refused[0].errno)
    for line in next_steps(opts.study_dir, opts.name, opts.results_root, best, paths.get("report_html"),
                           simulated=(run.study.user_attrs.get("backend") or {}).get("kind") == "sim"):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def next_steps(study_dir: Path, name: str, results_root: Path, best: int | None, report_html: Path | None,
               *, simulated: bool) -> list[str]:
    """'Next' and the commands to type in the study's folder, each with what it does, within 80 columns
    (the folder itself is printed whole, to be copied)."""
    q = shlex.quote
    inside = Path(study_dir).parent.resolve() == Path(results_root).resolve()
    results = ".." if inside else q(str(results_root))   # the commands run in the study's folder
    steps: list[tuple[str, str]] = []
    if report_html:
        steps.append((f"open {q(Path(report_html).name)}", "the report: the pick, why it wins, every trial"))
    if best is not None and (study_dir / "best.serve.sh").exists():
        what = "start the server with the pick's settings (arguments after it go to the server)"
        steps.append(("sh best.serve.sh --port 8000", what + (", on the simulator as the study ran" if simulated
                                                               else "")))
    if best is not None and (study_dir / "best.vllm.yaml").exists():
        steps.append(("set -a; . ./best.env; set +a; vllm serve --config best.vllm.yaml",
                      "the same through vLLM's own config file"))
    if best is not None:
        steps.append((f"bucket-tuner export {q(name)} --results {results} --pick throughput -o throughput.env",
                      "another pick of the front (throughput, latency, balanced)"))
    steps.append((f"bucket-tuner report {q(name)} --results {results}", "the report again, after more trials"))
    out = ["", f"Next, in the study's folder: {study_dir}"]
    if simulated:
        out += textwrap.wrap("Nothing ran on hardware: this study measured the simulator. Run the same study "
                             "with --backend vllm --model MODEL on a Gaudi node before deploying its pick.", 80)
    for command, what in steps:
        out += textwrap.wrap(what, 80, initial_indent="  # ", subsequent_indent="  # ")
        out.append(f"  {command}")
    return out
