"""`tune --help` reads top-down for a newcomer: examples first, the common flags, the rare ones under a heading
at the end, every line within 80 columns (issue 34: it was 236 lines, ~76 flags, no example)."""

from __future__ import annotations

import pytest

from tuner.cli import main


def test_tune_help_opens_with_examples_then_the_common_flags(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "usage: bucket-tuner tune --space SPACE [--study NAME] [--n-trials N] [options]"
    headings = [line for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert headings[0] == "examples:" and headings[1] == "the flags most runs need:"
    assert headings[-1] == "rarely needed:"
    assert all(len(line) <= 80 for line in lines)
    examples = out.split("examples:")[1].split("the flags most runs need:")[0]
    assert "bucket-tuner tune --space demo --n-trials 20" in examples and "--backend vllm" in examples
    common = out.split("the flags most runs need:\n")[1].split("\n\n")[0]
    for flag in ("--space", "--n-trials", "--backend", "--slo", "--warmup-budget", "--fork-from"):
        assert f"  {flag}" in common or f", {flag}" in common
    rare = out.split("rarely needed:\n")[1]
    for flag in ("--sim-noise", "--heartbeat-grace", "--no-screening", "--startup-time-scale"):
        assert f"  {flag}" in rare


def test_arranging_the_help_leaves_parsing_alone(tmp_path):
    import argparse

    from tuner.commands import tune

    parser = argparse.ArgumentParser()
    tune.register(parser.add_subparsers())
    args = parser.parse_args(["tune", "--space", "demo", "--sim-noise", "0.1", "--n-trials", "3", "--fork-from", "x"])
    assert (args.space, args.sim_noise, args.n_trials, args.seed_from) == ("demo", 0.1, 3, "x")
