"""The release's own code as a check (tuner/buckets/owncode.py), against a fake release package built in
a temp dir (tests/buckets/fake_release.py) with a planted difference: 7 sequences lose the largest
decode bucket, 9 sequences make the release raise."""

from __future__ import annotations

import json
import sys

import pytest

from tuner.buckets import BucketConfigError, ServerConfig, get_profile
from tuner.buckets.owncode import OwnCodeCheck, UpstreamWorker, active, bucket_source, build_checked

from .fake_release import build_fake_release


def _cfg(seqs: int, **env) -> ServerConfig:
    return ServerConfig(block_size=128, max_num_seqs=seqs, max_model_len=2048, max_num_batched_tokens=4096,
                        num_hpu_blocks=600, env={"VLLM_BUCKETING_STRATEGY": "lin", **env}, prefix_caching=False)


class CountingWorker(UpstreamWorker):
    def __init__(self, python):
        super().__init__(python)
        self.asked = 0

    def ask(self, request):
        self.asked += 1
        return super().ask(request)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """This interpreter, with the fake release on its path (the worker subprocess inherits PYTHONPATH)."""
    site = tmp_path / "site"
    build_fake_release(site, "gaudi-0.26.0", plant_seqs=7, error_seqs=9)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


@pytest.fixture
def check(node, tmp_path):
    lines = []
    c = OwnCodeCheck("gaudi-0.26.0", sys.executable, out_file=tmp_path / "release_check.jsonl",
                     worker=CountingWorker(sys.executable), say=lines.append)
    c.lines = lines
    yield c
    c.close()


def test_an_agreeing_configuration_keeps_the_engines_lists(check):
    assert check.available() is None
    engine = get_profile("gaudi-0.26.0").build(_cfg(8))
    with active(check):
        plan = build_checked("gaudi-0.26.0", _cfg(8))
    assert (plan.prompt, plan.decode) == (engine.prompt, engine.decode)
    assert check.checked == 1 and check.differences == [] and check.lines == []


def test_a_planted_difference_is_reported_with_both_lists_and_the_study_uses_the_releases(check, tmp_path):
    engine = get_profile("gaudi-0.26.0").build(_cfg(7))
    with active(check):
        plan = build_checked("gaudi-0.26.0", _cfg(7))
        again = build_checked("gaudi-0.26.0", _cfg(7))
    assert plan.decode == engine.decode[:-1] and plan.prompt == engine.prompt
    assert again.decode == plan.decode
    assert check.worker.asked == 1, "run once per distinct configuration"
    [diff] = check.differences
    assert diff.what == f"decode: engine {len(engine.decode)} buckets, release {len(engine.decode) - 1}"
    said = "\n".join(check.lines)
    assert "the study uses the release's lists" in said
    assert f"decode engine  ({len(engine.decode)}): {[list(b) for b in engine.decode]}" in said
    assert f"decode release ({len(engine.decode) - 1}): {[list(b) for b in engine.decode[:-1]]}" in said
    stored = json.loads((tmp_path / "release_check.jsonl").read_text())
    assert stored["engine"]["decode"] == [list(b) for b in engine.decode]
    assert stored["release"]["decode"] == [list(b) for b in engine.decode[:-1]]
    assert check.summary()["n_differences"] == 1


def test_a_release_that_raises_refuses_the_configuration_with_its_text(check):
    with active(check), pytest.raises(BucketConfigError, match="planted: the release refuses 9 sequences"):
        build_checked("gaudi-0.26.0", _cfg(9))
    assert "the release raises ValueError: planted" in check.differences[0].what


def test_the_prediction_builds_with_the_releases_lists(check):
    from tuner.perfmodel import ServerInputs, SimSettings, predict_startup

    sim, inputs = SimSettings(model="llama-3.1-8b", device="gaudi2"), ServerInputs(
        block_size=128, max_num_seqs=7, max_model_len=2048, max_num_batched_tokens=4096, prefix_caching=False)
    env = {"VLLM_BUCKETING_STRATEGY": "lin"}
    plain = predict_startup("gaudi-0.26.0", sim, inputs, env)
    with active(check):
        checked = predict_startup("gaudi-0.26.0", sim, inputs, env)
        assert bucket_source().startswith("release:gaudi-0.26.0")
    assert bucket_source() == "engine"
    assert checked.plan.decode == plain.plan.decode[:-1]
    assert len(checked.graphed_decode) <= len(plain.graphed_decode)


def test_another_profile_is_not_checked(check):
    engine = get_profile("gaudi-main").build(_cfg(7))
    with active(check):
        assert build_checked("gaudi-main", _cfg(7)).decode == engine.decode
    assert check.checked == 0


def test_the_check_is_off_where_the_release_module_is_not_importable(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    c = OwnCodeCheck("fork-1.22", sys.executable)
    assert c.available() == f"vllm_hpu_extension is not importable by {sys.executable}"


@pytest.mark.parametrize("profile", ["fork-1.22", "fork-1.23"])
def test_the_forks_extension_is_driven_with_its_runner_steps(profile, tmp_path, monkeypatch):
    site = tmp_path / "site"
    build_fake_release(site, profile, plant_seqs=7)
    monkeypatch.setenv("PYTHONPATH", str(site))
    c = OwnCodeCheck(profile, sys.executable)
    try:
        cfg = ServerConfig(block_size=128, max_num_seqs=8, max_model_len=2048, max_num_batched_tokens=4096,
                           num_hpu_blocks=600, env={}, pooling=True)
        got = c.release_lists(cfg)
        # fork 1.22 never generates buckets for pooling models (the runner step); 1.23 does the prompt ones.
        assert (len(got.prompt) > 0) == (profile == "fork-1.23") and got.decode == []
        with active(c):
            plan = build_checked(profile, cfg)
        assert (plan.prompt, plan.decode) == (get_profile(profile).build(cfg).prompt, [])
        assert c.differences == []
    finally:
        c.close()


def test_a_check_that_breaks_stops_and_leaves_the_engines_lists(tmp_path, monkeypatch):
    """A release module that does not import is the harness failing, not the release refusing."""
    site = tmp_path / "site"
    root = build_fake_release(site, "gaudi-0.26.0", plant_seqs=7)
    (root / "bucketing" / "common.py").write_text("import a_module_the_node_lacks\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    said = []
    c = OwnCodeCheck("gaudi-0.26.0", sys.executable, say=said.append)
    try:
        with active(c):
            plan = build_checked("gaudi-0.26.0", _cfg(7))
            again = build_checked("gaudi-0.26.0", _cfg(8))
        engine = get_profile("gaudi-0.26.0")
        assert plan.decode == engine.build(_cfg(7)).decode and again.decode == engine.build(_cfg(8)).decode
        assert c.broken.startswith("ModuleNotFoundError") and c.differences == []
        assert said == [f"release code check: off from here on ({c.broken}); the engine's lists stand"]
    finally:
        c.close()


def test_the_tuners_own_bucket_variables_do_not_reach_the_release(check, monkeypatch):
    """Only the configuration's env steers the release: a VLLM_* variable exported in the tuner's shell
    would change its answer behind the engine's back (the worker inherits the tuner's environment)."""
    monkeypatch.setenv("VLLM_DECODE_BS_BUCKET_STEP", "-1")  # would leave no decode buckets at all
    engine = get_profile("gaudi-0.26.0").build(_cfg(8))
    assert check.release_lists(_cfg(8)).decode == engine.decode != []
