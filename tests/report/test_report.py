"""report.html, the terminal tables and the comparison, on two real (simulated) studies."""

from __future__ import annotations

import re
import warnings
from html.parser import HTMLParser

from plotly.offline import get_plotlyjs

from tuner.report import SECTION_IDS, write_report
from tuner.report.facts import seed_trial, study_limits
from tuner.results.compare import compare_studies
from tuner.vocabulary.display import percent

from .conftest import cli


class _Sections(HTMLParser):
    """Text of every <section id=...> (nested tags included)."""

    def __init__(self):
        super().__init__()
        self.text: dict[str, str] = {}
        self._stack: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self._stack.append(dict(attrs).get("id"))

    def handle_endtag(self, tag):
        if tag == "section" and self._stack:
            self._stack.pop()

    def handle_data(self, data):
        if self._stack and self._stack[-1]:
            self.text[self._stack[-1]] = self.text.get(self._stack[-1], "") + data


def sections(html: str) -> dict[str, str]:
    p = _Sections()
    p.feed(html)
    return p.text


def test_the_study_records_what_the_report_relies_on(studies):
    study = studies.load()
    status = {t.number: t.user_attrs["status"] for t in study.trials}
    assert status == {0: "ok", 1: "ok", 2: "invalid_config", 3: "warmup_oom", 4: "ok"}
    assert seed_trial(study, "release defaults").number == 0
    assert seed_trial(study, "calculator").number == 1
    limits = study_limits(study)  # given to tune as --warmup-budget 50000 --slo p99_ttft_ms=600000
    assert limits.warmup_budget_s == 50000 and limits.slos_ms == {"p99_ttft_ms": 600000}


def test_report_answers_first_and_has_every_section(studies):
    html = (studies.results / "rpt" / "report.html").read_text()
    text = sections(html)
    assert list(SECTION_IDS) == ["summary", "pareto", "warmup", "workload", "failures", "convergence", "trials"]
    for sid in SECTION_IDS:
        assert f"id='{sid}'" in html and text.get(sid), sid
    assert html.index("id='summary'") < html.index("id='pareto'")
    # The summary holds the env file of the pick (the same as best.env) and its gain over the defaults.
    best_env = (studies.results / "rpt" / "best.env").read_text()
    pick = int(re.search(r"trial (\d+), pick balanced", best_env).group(1))
    for line in best_env.splitlines():
        if not line.startswith("#"):
            assert line in text["summary"]
    study = studies.load()
    defaults = seed_trial(study, "release defaults")
    gain = 100 * (study.trials[pick].values[0] - defaults.values[0]) / defaults.values[0]
    assert f"{percent(gain)} throughput over the release defaults" in text["summary"]
    # a simulated study is no deployment yet: the answer names the pick and says to verify it on hardware
    assert f"Trial {pick}, the balanced pick of the feasible front on the simulator" in text["summary"]
    assert "nothing ran on hardware" in text["summary"] and "Deploy trial" not in text["summary"]
    assert "Why it wins" in text["summary"] and "release defaults" in text["summary"]
    # Failures: grouped by class, with the reason and the log of the trial that booted.
    assert "invalid_config" in text["failures"] and "VLLM_PROMPT_BS_BUCKET_MIN" in text["failures"]
    assert "warmup_oom" in text["failures"] and "log excerpt (trial 3)" in text["failures"]
    # Warmup: the startup phases timed from the log, predicted vs observed.
    for phase in ("weights", "profiling", "prompt warmup", "decode warmup"):
        assert phase in text["warmup"]
    assert "Predicted before boot vs observed" in text["warmup"]
    # The calibration in force, as the study holds it, and predicted vs observed for every booted trial.
    cal = study.user_attrs["calibration"]
    assert "Calibration in force" in text["warmup"] and f"{cal['boots']} observation(s)" in text["warmup"]
    assert f"{cal['prompt_warmup']['value']:.3g}" in text["warmup"]
    assert "warmup pred / obs" in text["trials"] and "KV blocks pred / obs" in text["trials"]
    booted = [t for t in study.trials if (t.user_attrs.get("observed") or {}).get("kv_blocks")]
    assert booted and all(f"/ {t.user_attrs['observed']['kv_blocks']:,}" in text["trials"] for t in booted)
    # Every warm-up prediction with its 2-sd band and where the calibration came from.
    pred = next(t.user_attrs["predicted"] for t in booted if "warmup_high_s" in t.user_attrs["predicted"])
    assert pred["warmup_low_s"] <= pred["warmup_s"] <= pred["warmup_high_s"]
    assert re.search(r"\(\d[\d.]*-\d[\d.]* (?:s|min|h), (?:prior|\d+ boots?)", text["trials"])
    assert re.search(r"\(\d[\d.]*-\d[\d.]* (?:s|min|h), (?:prior|\d+ boots?)", text["warmup"])
    assert "prompt padding" in text["workload"]
    assert re.search(r"more trials|too few", text["convergence"])


def test_report_is_self_contained_with_plotly_inlined_once(studies):
    html = (studies.results / "rpt" / "report.html").read_text()
    bundle = get_plotlyjs()
    assert html.count(bundle) == 1
    ours = html.replace(bundle, "")  # plotly.js itself names its web site and map tiles (unused here)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", ours)
    assert "<script src" not in ours and "<link" not in ours
    assert "Plotly.newPlot" in html and html.count("class=\"plotly-graph-div\"") >= 5


def test_charts_have_no_colour_bar_under_the_legend(studies):
    from tuner.report import sections as sec
    from tuner.report.data import gather

    figures = []
    sec.pareto(gather(studies.load()), lambda fig, div_id: figures.append(fig) or "")
    assert len(figures) >= 3
    for fig in figures:
        assert fig.layout.legend.orientation == "h" and fig.layout.legend.y >= 1
        for trace in fig.data:
            marker = getattr(trace, "marker", None)
            assert marker is None or marker.showscale in (None, False)
            assert marker is None or marker.color is None or isinstance(marker.color, str)


def _assert_fits(output: str, width: int = 80):
    lines = output.splitlines()
    assert lines
    # A file path is printed whole (to be copied); everything else, tables first, fits.
    too_long = [ln for ln in lines if len(ln.rstrip()) > width and not re.search(r": \S*/\S+$", ln)]
    assert not too_long, too_long
    assert "…" not in output  # rich's mark of a cut cell or header
    assert not re.search(r"\d\.\d+e[+-]\d\d", output), "raw scientific notation"


def test_terminal_tables_fit_80_columns(studies):
    tune_tail = studies.tune_output[studies.tune_output.index("rpt: 5 trials"):]
    _assert_fits(tune_tail)
    for header in ("tok/s", "p99 TTFT", "warmup", "settings"):
        assert header in tune_tail
    report = cli("report", "rpt", "--results", str(studies.results))
    assert report.returncode == 0, report.stderr
    _assert_fits(report.stdout)
    assert "balanced pick: trial" in report.stdout
    out = studies.results.parent / "cmp.html"
    compare = cli("compare", "rpt", "rpt2", "--results", str(studies.results), "--html", str(out))
    assert compare.returncode == 0, compare.stderr
    _assert_fits(compare.stdout)
    for header in ("study", "trials", "front", "share", "pick", "p99 TTFT", "warmup"):
        assert header in compare.stdout
    assert "hypervolume" in compare.stdout
    alone = cli("compare", "rpt", "--results", str(studies.results))
    assert alone.returncode == 2 and "at least two studies" in alone.stderr


def test_compare_shares_and_budgets_are_consistent(studies):
    a, b = studies.load("rpt"), studies.load("rpt2")
    same = compare_studies(a, a)
    assert same.names == ["rpt", "rpt (2)"] and same.share == [1.0, 1.0] and not same.regressions
    cmp = compare_studies(a, b, a)
    assert len(cmp.share) == 3 and all(0.0 <= s <= 1.0 + 1e-9 for s in cmp.share)
    assert max(cmp.share) > 0 and cmp.share[0] == cmp.share[2]
    for budget, row in cmp.at_budget:  # best throughput within a budget, straight from the fronts
        for front, best in zip(cmp.fronts, row):
            fits = [t.values[0] for t in front if t.values[2] <= budget]
            assert best == (max(fits) if fits else None)
    # A study compared with a copy of itself that found nothing is flagged.
    for line in compare_studies(a, b).regressions:
        assert line.startswith("rpt2: ")


def test_report_of_a_study_without_feasible_trials(tmp_path, studies):
    study = studies.load("rpt")
    # Only the failed trials: a copy of the study with the good ones left out.
    import optuna

    empty = optuna.create_study(directions=["maximize", "minimize", "minimize"], study_name="empty")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        empty.set_metric_names(study.metric_names)
    for t in study.trials:
        if t.user_attrs["status"] != "ok":
            empty.add_trial(t)
    paths = write_report(empty, tmp_path)
    text = sections(paths["report_html"].read_text())
    assert "nothing to deploy" in text["summary"]
    assert "warmup_oom" in text["failures"]
