"""`tune --backend vllm` on a node whose vllm-gaudi is newer than every profile: the release is read off
the node (--release auto, the default), said with its reason and the nearest-profile line, recorded for
the report; the release's own bucketing code (a fake package with a planted difference) is run on the
study's configuration and its lists are used. The fake `vllm` runs the simulator as gaudi-main."""

from __future__ import annotations

import json
import sys

import optuna
import pytest
import yaml

from tuner.cli import main

from ..buckets.fake_release import build_fake_release, fake_dist, fake_vllm_script, make_node_venv

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

LOAD = ["--num-prompts", "12", "--num-warmups", "1", "--max-concurrency", "4", "--random-input-len", "100",
        "--random-output-len", "12"]
SIM = """import os, sys
args = sys.argv[1:]
assert args[0] == "serve", args
os.execv(sys.executable, [sys.executable, "-m", "tuner.sim", *args[1:], "--sim-release", "gaudi-main",
                          "--sim-time-scale", "0.2", "--sim-startup-time-scale", "0.002"])
"""


@pytest.fixture
def node(tmp_path):
    python, site = make_node_venv(tmp_path / "node")
    fake_dist(site, "vllm_gaudi", "0.28.0")
    fake_dist(site, "vllm", "0.27.0.dev0")  # what the simulator's log says for gaudi-main
    build_fake_release(site, "gaudi-main", plant_seqs=8)
    return fake_vllm_script(tmp_path / "vllm", python, body=SIM)


def test_tune_reads_the_release_off_the_node_and_checks_it_with_the_releases_code(node, tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "auto", "release": "gaudi-0.26.0",
        "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
        "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8]}}}))
    results = tmp_path / "results"
    code = main(["tune", "--space", str(space), "--results", str(results), "--backend", "vllm",
                 "--vllm-command", str(node), "--n-trials", "1", "--no-seed-defaults", *LOAD])
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert code == 0, err
    assert ("release: gaudi-main (--release auto: vllm-gaudi 0.28.0 is newer than every vllm-gaudi profile; "
            "vllm 0.27.0.dev0, vllm-gaudi 0.28.0)") in err
    assert "vllm-gaudi 0.28.0 is newer than every profile; using gaudi-main (0.27.0rc1.dev51), the nearest" in err
    assert "the space was written for gaudi-0.26.0; the node runs gaudi-main" in err
    assert "release code check: on (vllm_gaudi in" in err
    assert "release code check (gaudi-main): decode: engine" in err and "decode release (" in err

    study = optuna.load_study(study_name="auto", storage=f"sqlite:///{results / 'auto' / 'study.db'}")
    assert study.user_attrs["space"]["release"] == "gaudi-main"
    det = study.user_attrs["release_detection"]
    assert det["packages"] == {"vllm": "0.27.0.dev0", "vllm_gaudi": "0.28.0"} and "newer" in det["nearest"]
    assert det["logged_version"] == "0.27.0.dev0" and det["log_witness"] is None
    check = study.user_attrs["release_check"]
    assert check["checked"] >= 1 and check["n_differences"] >= 1
    [trial] = study.trials
    assert trial.user_attrs["status"] == "ok"
    # The prediction the trial was screened with counted the release's decode buckets, one fewer than the
    # engine's (which the simulated server, running the engine, logged).
    predicted = trial.user_attrs["predicted"]
    diffs = [json.loads(line) for line in (results / "auto" / "release_check.jsonl").read_text().splitlines()]
    [diff] = [d for d in diffs if d["inputs"]["num_hpu_blocks"] == predicted["kv_blocks"]]
    assert predicted["decode_buckets"] == len(diff["release"]["decode"]) == len(diff["engine"]["decode"]) - 1
    html = (results / "auto" / "report.html").read_text()
    assert "newer than every profile; using gaudi-main" in html and "Release code check:" in html


class _Args:
    def __init__(self, release=None, backend="vllm"):
        self.release, self.backend = release, backend


class _Space:
    def __init__(self, release):
        self.release = release


def test_the_release_choice_on_every_path(tmp_path):
    from tuner.commands import UsageError
    from tuner.commands.tunerelease import choose_release

    # A name given is used as is, read off nothing.
    assert choose_release(_Args("fork-1.22"), _Space("gaudi-main"), ["/bin/true"]) == ("fork-1.22", None, [])
    # The simulator: the space's release; auto makes no sense there.
    assert choose_release(_Args(backend="sim"), _Space("gaudi-main"), ["vllm"])[0] == "gaudi-main"
    with pytest.raises(UsageError, match="the simulator needs a profile name"):
        choose_release(_Args("auto", backend="sim"), _Space(None), ["vllm"])
    # The default on --backend vllm: a command whose interpreter is unknown falls back, saying so; given
    # explicitly, auto fails instead.
    release, detected, lines = choose_release(_Args(), _Space("fork-1.21.2"), ["/bin/true"])
    assert (release, detected) == ("fork-1.21.2", None) and "using the space's release: fork-1.21.2" in lines[0]
    with pytest.raises(UsageError, match="cannot tell which Python runs"):
        choose_release(_Args("auto"), _Space("fork-1.21.2"), ["/bin/true"])
    # A plain vLLM (no Gaudi package metadata) keeps a space's release, and is generic without one.
    python, site = make_node_venv(tmp_path / "cpu")
    fake_dist(site, "vllm", "0.11.0+cpu")
    script = fake_vllm_script(tmp_path / "vllm", python)
    release, detected, lines = choose_release(_Args(), _Space("gaudi-main"), [str(script)])
    assert release == "gaudi-main" and detected["profile"] is None and "using the space's release" in lines[0]
    release, detected, lines = choose_release(_Args(), _Space(None), [str(script)])
    assert release is None and lines[0].startswith("release: no profile (generic vLLM)")
