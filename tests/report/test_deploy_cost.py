"""Deploying the answer (issue #36 items 1 and 2): start-up limits sized from the warm-up band, a stated
probe checked against the pick, and the cost per million tokens with the payback, on a study whose
figures are known by hand, then on a study on the simulator (the `studies` fixture of conftest.py)."""

from __future__ import annotations

import math

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial
from rich.console import Console

from tuner.cli import main
from tuner.report import DeployCheck, print_costs
from tuner.report.html import html_text
from tuner.results.export import env_file_text
from tuner.results.orchestrators import DeployOptions, deploy_comments
from tuner.results.startlimits import ManifestError, ProbeVerdict, manifest_probe, start_limits
from tuner.trial.cost import CostRate
from tuner.vocabulary.record import TrialRecord

# --- a study whose answers are known -------------------------------------------------------------------
# $2 a card-hour. Trial 0, the baseline: 1 card, 500 tok/s -> $2/h over 1.8 Mtok/h = $1.11 per million;
# it held its card 1 h. Trial 1: TP 2, 2,000 tok/s -> $4/h over 7.2 Mtok/h = $0.56 per million, and at its
# load sweep's best point within the SLO (rate=8, 2,400 tok/s) $4 / 8.64 = $0.46; it held 2 cards 2 h.
# The study: 5 card-hours = $10. An hour of trial 1's tokens costs $8 on the baseline: $4 saved an hour,
# so 2.5 h repay the study; a restart costs $4 x 450 s - $2 x 90 s = $0.45 more: 0.11 h.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # set_metric_names
RATE = CostRate(2.0, "$2/card-hour")
SWEEP = [{"point": "rate=4", "meets_slo": True, "metrics": {"output_throughput": 1500.0}},
         {"point": "rate=8", "meets_slo": True, "metrics": {"output_throughput": 2400.0}},
         {"point": "rate=16", "meets_slo": False, "metrics": {"output_throughput": 3000.0}}]


def _trial(tp: int, thr: float, lat: float, warm: float, hours: float, seed: str | None = None, **observed):
    attrs = {"status": "ok", "booted": True, "feasible": True, "server": {"max_num_seqs": tp * 8},
             "argv": ["vllm", "serve", "m", "--tensor-parallel-size", str(tp)],
             "metrics": {"output_throughput": thr, "p99_ttft_ms": lat},
             "observed": {"warmup_s": warm, "warmup_cold_s": warm, "load_s": 30.0, "profile_s": 10.0, **observed},
             "predicted": {"warmup_cold_s": warm, "warmup_cold_low_s": warm * 0.75, "warmup_cold_high_s": warm * 1.5},
             "timings": {"boot_and_warmup_s": hours * 1800, "load_s": hours * 1800}}
    if seed:
        attrs["seed"] = seed
    return create_trial(values=[thr, lat, warm], params={"max_num_seqs": tp * 8},
                        distributions={"max_num_seqs": CategoricalDistribution([8, 16, 32])}, user_attrs=attrs)


@pytest.fixture
def known() -> optuna.Study:
    study = optuna.create_study(study_name="known", directions=["maximize", "minimize", "minimize"])
    study.set_metric_names(["output_throughput", "p99_ttft_ms", "warmup_s"])
    study.set_user_attr("backend", {"kind": "vllm", "model": "m"})
    study.add_trial(_trial(1, 500.0, 200.0, 90.0, 1.0, seed="baseline"))
    study.add_trial(_trial(2, 2000.0, 150.0, 450.0, 2.0, load_sweep=SWEEP))
    return study


def test_the_report_shows_each_trials_cost_and_the_payback(known):
    page = html_text(known, DeployCheck(RATE))
    section = page[page.index("<section id='deploy'>"):]
    section = section[:section.index("</section>")]
    assert "$1.11" in section and "$0.56" in section and "$0.46 (rate=8)" in section
    assert "Payback against the baseline (trial 0): 2.5 h of serving repay the study ($10.00" in section
    assert "each restart adds 0.11 h" in section


def test_the_terminal_table_shows_the_fronts_cost_and_the_payback(known):
    console = Console(record=True, width=100)
    print_costs(known, console, DeployCheck(RATE))
    text = console.export_text()
    row = next(line for line in text.splitlines() if line.startswith("│ 1 "))
    assert "$0.56" in row and "$0.46" in row and "balanced" in row
    assert "payback against the baseline (trial 0): 2.5 h of serving repay the study" in text


def test_the_export_header_states_the_cost(known):
    trial = known.trials[1]
    text = env_file_text(known, trial, "balanced", None, comments=deploy_comments(known, trial, DeployOptions(
        cost=RATE)))
    assert "# cost: $0.56 per million output tokens at the measured load (2,000 tok/s; 2 cards x $2/card-hour" in text
    assert "# cost: $0.46 per million output tokens at the highest load within the SLO (rate=8)" in text


def test_the_cost_pick_is_the_most_tokens_per_card_not_the_most_tokens(known):
    from tuner.results.export import Filters, pick_trial

    known.add_trial(_trial(4, 2500.0, 140.0, 500.0, 1.0))  # the fastest, on 4 cards: 625 tok/s a card
    assert pick_trial(known, "throughput", Filters()).number == 2
    assert pick_trial(known, "cost", Filters()).number == 1  # 1,000 tok/s a card


def test_the_price_the_study_was_tuned_with_is_the_default(known):
    known.set_user_attr("cost", RATE.to_json())
    assert "$0.56" in html_text(known)


# --- start-up limits on hand figures ---------------------------------------------------------------------

def test_the_limit_covers_the_bands_upper_end_and_the_time_before_warmup():
    rec = TrialRecord.from_frozen(_trial(1, 500.0, 200.0, 400.0, 1.0))
    rec.predicted.update(warmup_cached_s=100.0, warmup_cached_low_s=80.0, warmup_cached_high_s=200.0)
    limits = start_limits(rec, margin=0.25, period_s=10)
    cold, cached = limits["cold"], limits["cached"]
    # cold: 30 s load + 10 s profile + max(band high 600, measured 400) = 640 s, x 1.25 = 800 s: 80 x 10
    assert (cold.start_upper_s, cold.limit_s, cold.failure_threshold, cold.probe_s) == (640.0, 800, 80, 800)
    # cached: 40 + 200 = 240 s, x 1.25 = 300 s
    assert (cached.limit_s, cached.failure_threshold) == (300, 30)
    assert "predicted band 300-600 s; measured 400 s in this trial" in cold.evidence()
    assert ProbeVerdict(900, cold).kills is None
    assert ProbeVerdict(500, cold).kills == "possible"  # over the measured 440 s, under the band's 640 s
    assert ProbeVerdict(400, cold).kills == "certain"


def test_a_manifests_vllm_container_gives_the_probe(tmp_path):
    path = tmp_path / "m.yaml"
    sidecar = {"name": "proxy", "image": "envoy", "startupProbe": {"failureThreshold": 1, "periodSeconds": 1}}
    vllm = {"name": "server", "image": "opea/vllm-gaudi:1.2",
            "startupProbe": {"initialDelaySeconds": 30, "failureThreshold": 87, "periodSeconds": 10}}
    doc = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [sidecar, vllm]}}}}
    path.write_text(yaml.safe_dump_all([{"kind": "Service"}, doc]))
    assert manifest_probe(path) == (900.0, "container 'server' startupProbe")
    del vllm["startupProbe"]
    vllm["livenessProbe"] = {}  # Kubernetes' defaults: 3 x 10 s, from the start
    path.write_text(yaml.safe_dump(doc))
    seconds, said = manifest_probe(path)
    assert seconds == 30.0 and "livenessProbe runs from the start" in said
    del vllm["livenessProbe"]
    path.write_text(yaml.safe_dump(doc))
    assert manifest_probe(path)[0] is None
    vllm["image"] = "other"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ManifestError, match="no vLLM container found"):
        manifest_probe(path)
    path.write_text("a: [")
    with pytest.raises(ManifestError, match="not YAML"):
        manifest_probe(path)


# --- a study on the simulator: export writes the limits, recomputed here from the prediction's band ----

def _recomputed(rec: TrialRecord, margin: float, period: int) -> tuple[int, int]:
    before = rec.observed["load_s"] + (rec.observed.get("profile_s") or 0.0)
    warm = max(rec.predicted["warmup_cold_high_s"], rec.observed.get("warmup_cold_s") or 0.0)
    limit = math.ceil((before + warm) * (1 + margin))
    return limit, math.ceil(limit / period)


def test_export_writes_probe_and_limits_sized_from_the_band(studies, tmp_path):
    out = tmp_path / "pick.env"
    assert main(["export", "rpt", "--results", str(studies.results), "-o", str(out), "--probe-margin", "0.5",
                 "--probe-period", "15", "--serve-window", "8h", "--cost-per-hour", "16/node"]) == 0
    env = out.read_text()
    number = int(env.split("trial ", 1)[1].split(",", 1)[0])
    study = studies.load("rpt")
    rec = TrialRecord.from_frozen(study.trials[number])
    limit, threshold = _recomputed(rec, 0.5, 15)
    assert f"+50% margin = {limit:,} s" in env
    assert f"failureThreshold {threshold} x periodSeconds 15 = {threshold * 15:,} s" in env
    low, high = rec.predicted["warmup_cold_low_s"], rec.predicted["warmup_cold_high_s"]
    assert f"predicted band {low:,.0f}-{high:,.0f} s" in env
    thr = rec.metrics["output_throughput"]
    per_card = 16 / 8  # $16 a node of 8 cards; the trial's server holds one (no TP)
    assert f"# cost: ${per_card / (thr * 3600) * 1e6:,.2f} per million output tokens" in env
    manifest = yaml.safe_load(out.with_name("pick.k8s.yaml").read_text())
    assert manifest["spec"]["progressDeadlineSeconds"] == threshold * 15 + 120
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    probe = container["startupProbe"]
    assert (probe["failureThreshold"], probe["periodSeconds"]) == (threshold, 15)
    assert probe["failureThreshold"] * probe["periodSeconds"] >= limit
    job = out.with_name("pick.sbatch").read_text()
    minutes = math.ceil((8 * 3600 + limit) / 60)
    assert f"#SBATCH --time={minutes // 60:02d}:{minutes % 60:02d}:00" in job
    assert f"deadline=$((SECONDS + {limit}))" in job
    # the exported manifest passes the report's own check; a 900 s probe is named when it would kill the pick
    assert manifest_probe(out.with_name("pick.k8s.yaml"))[0] == threshold * 15


def test_report_warns_when_a_stated_probe_would_kill_the_pick(studies, tmp_path, capsys):
    assert main(["report", "rpt", "--results", str(studies.results), "--out", str(tmp_path),
                 "--startup-probe-seconds", "1"]) == 0
    said = capsys.readouterr().out
    assert "warning: --startup-probe-seconds: the startup probe (1 s) would kill it during warm-up on every start" \
        in " ".join(said.split())
    assert "restart loop" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("flags, said", [
    (["--cost-per-hour", "10/gpu"], "--cost-per-hour '10/gpu': expected dollars per hour per card or per node"),
    (["--cards-per-node", "4"], "--cards-per-node needs --cost-per-hour PRICE/node"),
    (["--manifest", "missing.yaml"], "--manifest missing.yaml: No such file or directory"),
    (["--startup-probe-seconds", "5", "--manifest", "m.yaml"], "give --startup-probe-seconds or --manifest, not both"),
])
def test_bad_report_flags_give_one_clear_line(studies, flags, said, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "rpt", "--results", str(studies.results), "--out", str(tmp_path), *flags]) == 2
    assert said in capsys.readouterr().err


def test_a_cost_limit_needs_a_price(tmp_path, capsys):
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump({"name": "s", "release": "fork-1.21.2", "server": {"max_model_len": 1024},
                                     "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8]}}}))
    assert main(["tune", "--space", str(space), "--results", str(tmp_path / "r"), "--slo", "cost_per_mtok=0.4"]) == 2
    assert "--slo cost_per_mtok=...: give the price with --cost-per-hour" in capsys.readouterr().err
    assert not (tmp_path / "r" / "s" / "study.db").exists()
