"""deploy/'s serving examples are what `export` writes (tools/deploy_examples.py regenerates them), and
their probe and time limit cover the example's predicted start-up band."""

from __future__ import annotations

import math

import yaml

from tools.deploy_examples import K8S, SLURM, main, predicted
from tuner.results.startlimits import manifest_probe


def test_the_examples_in_deploy_are_what_export_writes():
    assert main(["--check"]) == 0, "run: python -m tools.deploy_examples"


def test_the_examples_probe_covers_the_predicted_band_with_its_margin():
    p = predicted()
    start = p["load_s"] + p["profile_s"] + p["warmup_cold_high_s"]
    allowed, said = manifest_probe(K8S)
    assert said == "container 'vllm' startupProbe"
    assert start * 1.25 <= allowed < start * 1.25 + 10  # one period over the limit at most
    deployment = yaml.safe_load(K8S.read_text())
    assert deployment["spec"]["progressDeadlineSeconds"] == allowed + 120
    assert f"deadline=$((SECONDS + {math.ceil(start * 1.25)}))" in SLURM.read_text()
