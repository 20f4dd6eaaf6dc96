"""Smoke test of benchmarks/tuning_efficiency.py: the quick path, shrunk to a few grid points and a
tiny trial budget, runs the real study loop for each kind of contender and writes its table.
Nothing about speed or about which contender wins is asserted (the benchmark measures that)."""

from __future__ import annotations

import importlib.util
import json
import sys

from ..conftest import ROOT


def load_benchmark(monkeypatch):
    spec = importlib.util.spec_from_file_location("tuning_efficiency", ROOT / "benchmarks" / "tuning_efficiency.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses and the worker pool look it up there
    spec.loader.exec_module(module)
    return module


def test_quick_path_on_a_tiny_budget(tmp_path, monkeypatch, capsys):
    te = load_benchmark(monkeypatch)
    full_problems = te.problems
    keep = {"max_num_seqs": [32, 64], "VLLM_GRAPH_RESERVED_MEM": [0.1], "VLLM_GRAPH_PROMPT_RATIO": [0.1, 0.3, 0.5],
            "VLLM_PROMPT_BS_BUCKET_STEP": [4], "VLLM_PROMPT_SEQ_BUCKET_STEP": [256],
            "VLLM_DECODE_BS_BUCKET_STEP": [32], "VLLM_DECODE_BLOCK_BUCKET_STEP": [512],
            "VLLM_EXPONENTIAL_BUCKETING": ["true", "false"]}

    def tiny():
        probs = full_problems()
        for p in probs.values():
            p.quick_choices = {k: v for k, v in keep.items() if k in p.space["parameters"]}
        return probs

    monkeypatch.setattr(te, "problems", tiny)
    out = tmp_path / "te"
    code = te.main(["--quick", "--seeds", "1", "--budgets", "2,4", "--jobs", "1", "--problems", "upgrade",
                    "--scenarios", "nominal,more_memory,typical_noise",
                    "--contenders", "random,grid,gp,full,full+seed-from",
                    "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    table = (tmp_path / "te.md").read_text()
    assert table.strip() in printed and "CPU time" in printed
    for row in ("| nominal | random |", "| nominal | grid |", "| nominal | gp |", "| nominal | full |",
                "| more_memory | full |", "| nominal | full+seed-from |"):
        assert row in table
    assert "| HV@2 | HV@4 | HV@equal h |" in table and "| accel-h@4 |" in table
    res = json.loads((tmp_path / "te.json").read_text())
    assert set(res["problems"]) == {"linear", "upgrade"} and res["cpu_s"] > 0
    linear = res["problems"]["linear"]["scenarios"]["nominal"]
    assert linear["true_front"]["points"] == 6 and linear["true_front"]["hv"] > 0
    for name in ("random", "full"):
        agg = linear["contenders"][name]
        assert 0.0 <= agg["hv@4"][0] <= 1.0 + 1e-9 and agg["h@4"] >= 0.0
        assert len(linear["runs"][name][0]["curve"]) == 4  # counted trials only
    # The summary the issue specifies: problem -> scenario -> contender -> figures.
    summary = res["summary"]
    assert set(summary) == {"linear", "upgrade"}
    assert set(summary["upgrade"]) == {"nominal", "more_memory", "typical_noise"}
    # The noise cell: every contender (and full with --confirm) judged on the true figures of what it recommends.
    noisy = summary["upgrade"]["typical_noise"]
    assert {"random", "full", "full+confirm"} <= set(noisy)
    for name in ("random", "full", "full+confirm"):
        t = noisy[name]["true"]
        assert 0.0 <= t["true_hv@4"][0] <= 1.0 + 1e-9
        assert t["regret_balanced"] is None or t["regret_balanced"] >= 0.0
        assert t["slo_break"] is None or 0.0 <= t["slo_break"] <= 1.0
    assert noisy["full+confirm"]["true"]["hours"] >= noisy["full"]["true"]["hours"] - 1e-9
    assert "| upgrade | typical_noise | full+confirm |" in table and "\n| typical_noise | random |" not in table
    full = summary["upgrade"]["more_memory"]["full"]
    assert {"hv_at_equal_hours", "hours_to_95", "false_reject_rate", "false_abort_rate"} <= set(full)
    assert 0.0 <= full["false_reject_rate"] <= 1.0 and 0.0 <= full["false_abort_rate"] <= 1.0
    assert "gp" not in summary["linear"]["nominal"]  # not installed here: reported as such in the table
    assert "replay" in res and res["replay"]["rows"]
    # The shared-recipe-cache mode (full method, nominal): its figures per problem, the upgrade excluded.
    cache = summary["linear"]["shared_cache"]
    assert "shared_cache" not in summary["upgrade"]
    assert cache["picks_measured_cold"] is True and cache["seeds"] == 1
    assert 0 <= cache["reboots"] <= cache["front"]
    assert cache["median_cold_error"] is None or 0.0 <= cache["median_cold_error"] < 1.0
    (run,) = res["shared_cache"]["runs"]
    assert run["boots"] > 0 and abs(cache["hours_saved"] - (run["cache_saved_h"] - run["reboot_h"])) < 1e-3
    assert "Shared recipe cache" in table


def test_boot_events_are_what_the_tracker_reads_from_the_real_log(monkeypatch):
    """The benchmark feeds the tracker already-parsed events (for speed); they must equal the parsed log."""
    te = load_benchmark(monkeypatch)
    from tests.perfmodel.helpers import boot
    from tuner.perfmodel.projection import BootTracker

    probs = te.problems()
    for key in ("linear", "gaudi", "upgrade"):
        p = probs[key]
        space = p.search_space(True)
        for params in te.grid_points(space)[:40:13]:
            prior, real = te.true_prediction(p, space.settings_for(params), 0.15, "slow_compile")
            from_log, fed = BootTracker(prior), BootTracker(prior)
            boot(real, from_log)
            for t, e in te.boot_events(real):
                fed.on_event(e, t)
            a, b = from_log.facts(), fed.facts()
            assert a.keys() == b.keys(), key
            for k in a:
                if k == "steps":
                    assert a[k].keys() == b[k].keys()
                    assert all(abs(a[k][s] - b[k][s]) < 1e-6 for s in a[k])
                else:
                    assert abs(a[k] - b[k]) < 0.01 * max(1.0, abs(a[k])), (key, k)
            assert fed.finished_s == from_log.finished_s


def test_the_zero_boot_tier_on_a_tiny_budget(tmp_path, monkeypatch, capsys):
    """Contender plan: the plan's picks booted first, and the plan's own figures before any boot."""
    te = load_benchmark(monkeypatch)
    full_problems = te.problems
    keep = {"max_num_seqs": [32, 64], "VLLM_GRAPH_RESERVED_MEM": [0.02, 0.1], "VLLM_GRAPH_PROMPT_RATIO": [0.3],
            "VLLM_PROMPT_BS_BUCKET_STEP": [4], "VLLM_PROMPT_SEQ_BUCKET_STEP": [256],
            "VLLM_DECODE_BS_BUCKET_STEP": [32], "VLLM_DECODE_BLOCK_BUCKET_STEP": [128, 512]}

    def tiny():
        probs = full_problems()
        for p in probs.values():
            p.quick_choices = {k: v for k, v in keep.items() if k in p.space["parameters"]}
        return probs

    monkeypatch.setattr(te, "problems", tiny)
    out = tmp_path / "te"
    assert te.main(["--quick", "--seeds", "1", "--budgets", "2,4", "--jobs", "1", "--problems", "linear",
                    "--scenarios", "nominal,slow_compile", "--contenders", "full,plan", "--no-shared-cache",
                    "--out", str(out)]) == 0
    res = json.loads((tmp_path / "te.json").read_text())
    for scenario in ("nominal", "slow_compile"):
        sc = res["problems"]["linear"]["scenarios"][scenario]
        z = sc["plan"]
        assert 0.0 < z["hv_share"] <= 1.0 + 1e-9 and 0 <= z["picks_on_front"] <= z["picks"] <= 5
        assert z["points"] == 8 and 1 <= z["predicted_front"] <= 8
        assert res["summary"]["linear"][scenario]["plan"]["zero_hour"] == z
        assert len(sc["runs"]["plan"][0]["curve"]) == 4  # the study ran its four counted trials
    table = (tmp_path / "te.md").read_text()
    assert "The zero-boot tier" in table and "| linear | nominal |" in table
