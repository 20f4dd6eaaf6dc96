"""The model against real evidence (benchmarks/model_fidelity.py), recomputed: a change that makes it
worse on the public logs that time something fails here. The figures are deterministic computations on
fixed data (the `fidelity` starts of the hand-read facts, tests/data/log-samples/facts.yaml), not timings.

Held: every row's error no worse than today's (LIMITS, a point of slack), every band that holds its
logged figure today still holding it, 2-sd coverage of at least 90% on the out-of-sample rows, and the
issue-23 criteria for every log with a timed warm-up, pasted in every way `explain` reads: calibrating
from it predicts its own configuration's warm-up within 30%, with a band that holds the logged figure.
Logs added to the facts later are held to the general criteria at once and to their own limits once
their row is written into LIMITS. The facts are one file: each start's figures agree with the figures
read off its log for `explain`, and every log with a timed warm-up has a start or says why not."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml

from ..conftest import ROOT
from .pastes import PASTES as LINE_PASTES


@pytest.fixture(scope="module")
def mf():
    spec = importlib.util.spec_from_file_location("model_fidelity", ROOT / "benchmarks" / "model_fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def rows(mf):
    return mf.compute()


# Today's absolute errors (benchmarks/README.md "Model fidelity on real logs"): (log, quantity, method).
LIMITS = {
    ("fork-1.17-readme", "warmup", "prior"): 0.00, ("fork-1.17-readme", "warmup", "itself"): 0.00,
    ("fork-1.17-readme", "warmup", "other logs"): 0.03,
    ("fork-1.17-readme", "compile", "prior"): 0.07, ("fork-1.17-readme", "compile", "itself"): 0.02,
    ("fork-1.17-readme", "compile", "other logs"): 0.04, ("fork-1.17-readme", "compile", "other phase"): 0.17,
    ("fork-1.17-readme", "capture", "prior"): 0.10, ("fork-1.17-readme", "capture", "itself"): 0.04,
    ("fork-1.17-readme", "capture", "other logs"): 0.12, ("fork-1.17-readme", "capture", "other phase"): 0.15,
    ("fork-1.17-readme", "kv_blocks", "prior"): 0.00, ("fork-1.17-readme", "kv_blocks", "itself"): 0.00,
    ("fork-1.17-readme", "kv_blocks", "other logs"): 0.00,
    ("fork-1.17-readme", "graph_mem_gib", "prior"): 0.00, ("fork-1.17-readme", "graph_mem_gib", "itself"): 0.00,
    ("fork-1.17-readme", "graph_mem_gib", "other logs"): 0.00,
    ("fork-1.17-readme", "load_s", "prior"): 0.01, ("fork-1.17-readme", "load_s", "itself"): 0.00,
    ("fork-1.17-readme", "load_s", "other logs"): 0.01,
    ("fork-1.17-readme-nographs", "warmup", "prior"): 0.02, ("fork-1.17-readme-nographs", "warmup", "itself"): 0.00,
    ("fork-1.17-readme-nographs", "warmup", "other logs"): 0.03,
    ("fork-1.17-readme-nographs", "prompt", "prior"): 0.17, ("fork-1.17-readme-nographs", "prompt", "itself"): 0.04,
    ("fork-1.17-readme-nographs", "prompt", "other logs"): 0.11,
    ("fork-1.17-readme-nographs", "prompt", "other phase"): 0.28,
    ("fork-1.17-readme-nographs", "decode", "prior"): 0.10, ("fork-1.17-readme-nographs", "decode", "itself"): 0.04,
    ("fork-1.17-readme-nographs", "decode", "other logs"): 0.14,
    ("fork-1.17-readme-nographs", "decode", "other phase"): 0.21,
    ("fork-1.22-readme", "warmup", "prior"): 0.50, ("fork-1.22-readme", "warmup", "itself"): 0.02,
    ("fork-1.22-readme", "prompt", "prior"): 0.44, ("fork-1.22-readme", "prompt", "itself"): 0.02,
    ("fork-1.22-readme", "prompt", "other phase"): 0.09,
    ("fork-1.22-readme", "decode", "prior"): 0.54, ("fork-1.22-readme", "decode", "itself"): 0.05,
    ("fork-1.22-readme", "decode", "other phase"): 0.24,
    ("fork-1.22-readme", "kv_blocks", "prior"): 0.00, ("fork-1.22-readme", "kv_blocks", "itself"): 0.00,
    ("fork-1.18-perf-tuning", "warmup", "prior"): 0.28, ("fork-1.18-perf-tuning", "warmup", "itself"): 0.01,
    ("fork-1.18-perf-tuning", "kv_blocks", "prior"): 0.00, ("fork-1.18-perf-tuning", "kv_blocks", "itself"): 0.02,
    ("fork-1.18-perf-tuning", "graph_mem_gib", "prior"): 0.24,
    ("fork-1.18-perf-tuning", "graph_mem_gib", "itself"): 0.06,
    ("fork-1.16-enterprise-rag-eager", "warmup", "prior"): 0.06,
    ("fork-1.16-enterprise-rag-eager", "warmup", "itself"): 0.00,
    ("fork-1.20-issue776-gaudi1", "load_s", "prior"): 0.34, ("fork-1.20-issue776-gaudi1", "load_s", "itself"): 0.09,
    ("fork-1.20-issue809-deepseek-tp8", "load_s", "prior"): 0.60,
    # 0.05 while DeepSeek-R1 was a generic shape with a wide prior; read from its config (issue 32) the
    # prior is the documented one, so one log moves the load factor less.
    ("fork-1.20-issue809-deepseek-tp8", "load_s", "itself"): 0.075,
    # Weights from the config as stored (FP8, 671B, TP 8): 78.37 GiB against the logged 79.41 GiB.
    ("fork-1.20-issue809-deepseek-tp8", "weights_gib", "prior"): 0.015,
    ("fork-1.20-issue809-deepseek-tp8", "weights_gib", "itself"): 0.015,
}
SLACK = 0.01


def test_the_facts_rebuild_the_logged_buckets(mf):
    built = mf.builds()
    for case in mf.load_cases():
        if case.buckets:
            assert built[case.id] == case.buckets, case.id


def test_the_fidelity_starts_agree_with_the_facts_of_their_log(mf):
    """One facts file: a start's figures are those read off its log for `explain` (the server's total,
    the KV blocks, the memory "Warmup finished" allocated), and `fit` says whether any was fitted."""
    from tuner.logparse import parse_bytes
    from tuner.perfmodel.hardware import GiB

    entries = yaml.safe_load(mf.FACTS.read_text())
    for entry in entries:
        starts = entry.get("fidelity") or []
        timed = entry.get("warmup_total_s") is not None or any(p.get("seconds") for p in entry.get("phases") or [])
        assert not timed or starts or entry.get("no_fidelity"), entry["file"]  # a row, or why not
        for start in starts:
            obs = start["observed"]
            if (obs.get("warmup") or {}).get("steps") == "all":
                assert obs["warmup"]["seconds"] == entry["warmup_total_s"], start["id"]
            if obs.get("kv_blocks") is not None and entry.get("kv_blocks") is not None:
                assert obs["kv_blocks"] == entry["kv_blocks"], start["id"]
            if obs.get("graph_mem_gib") is not None:
                logged = parse_bytes(entry["warmup_allocated"]) / GiB
                assert obs["graph_mem_gib"] == pytest.approx(logged, rel=0.005), start["id"]
        if starts:
            assert entry["fit"] == any(s["fitted"] for s in starts), entry["file"]
    assert sum(len(e.get("fidelity") or []) for e in entries) == len(mf.load_cases()) >= 7


def test_no_row_is_worse_than_today(rows):
    seen = set()
    for r in rows:
        key = (r.case, r.quantity, r.method)
        assert r.predicted is not None, key
        if key in LIMITS:
            seen.add(key)
            assert abs(r.error) <= LIMITS[key] + 0.005 + SLACK, (key, r.error)
            assert r.covered, (key, r.low, r.logged, r.high)  # every band holds its logged figure today
    assert seen == set(LIMITS), set(LIMITS) - seen  # a row that disappeared is a regression too


def test_out_of_sample_bands_cover_ninety_percent(mf, rows):
    oos = [r for r in rows if r.out_of_sample and r.covered is not None]
    assert len(oos) >= 10
    assert sum(r.covered for r in oos) / len(oos) >= 0.9


def test_calibrated_on_itself_within_thirty_percent_with_its_figure_in_the_band(rows):
    own = [r for r in rows if r.method == "itself" and r.quantity not in ("kv_blocks", "graph_mem_gib")]
    assert own
    for r in own:
        assert abs(r.error) <= 0.30 and r.covered, (r.case, r.quantity, r.error, r.low, r.logged, r.high)


def test_leave_one_phase_out_within_25_percent_out_of_sample(rows):
    lopo = [r for r in rows if r.method == "other phase" and r.out_of_sample]
    assert lopo
    for r in lopo:
        assert abs(r.error) <= 0.25, (r.case, r.quantity, r.note, r.error)


PASTES = {name: (lambda case, mf, paste=paste: paste(case.log_lines())) for name, paste in LINE_PASTES.items()}
PASTES["the whole file"] = lambda case, mf: (mf.SAMPLES / case.file).read_text().splitlines()  # other runs too


@pytest.mark.parametrize("paste", sorted(PASTES))
def test_any_paste_of_a_timed_log_predicts_its_own_warmup(mf, paste):
    cases = [c for c in mf.load_cases() if "warmup" in c.observed]
    assert len(cases) >= 5
    for case in cases:
        got = mf.evidence(case, PASTES[paste](case, mf))
        central, low, high = mf.predict_quantity(case, "warmup", mf._calibration(case, [got.sample]))
        logged = case.observed["warmup"]["seconds"]
        assert central == pytest.approx(logged, rel=0.30), (case.id, paste, central)
        assert low <= logged <= high, (case.id, paste, low, high)
