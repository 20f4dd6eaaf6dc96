"""`--release auto`: the profile read off the node's installed packages (tuner/buckets/detect.py).

The installed distributions are fakes: a .dist-info folder (METADATA, and for a git install pip's
direct_url.json) in a temp dir put on sys.path, or in the site-packages of a throwaway venv whose
interpreter a fake `vllm` script names on its #! line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuner.buckets import get_profile, profiles
from tuner.buckets.detect import (
    FORK_RELEASES,
    GAUDI_RELEASES,
    DetectError,
    Installed,
    detect,
    installed_packages,
    log_witness,
    pick_profile,
    serve_python,
)

from .fake_release import fake_dist, fake_vllm_script, make_node_venv


def _gaudi(version: str, vllm: str = "0.11.0") -> Installed:
    return Installed(python="py", versions={"vllm": vllm, "vllm_gaudi": version})


# ------------------------------------------------------------------------------------ the plugin

@pytest.mark.parametrize("version,profile", [
    ("0.10.1", "gaudi-0.10.1"), ("0.15.1", "gaudi-0.15.1"), ("0.26.0", "gaudi-0.26.0"),
    ("0.27.0rc0", "gaudi-0.27.0"), ("0.27.0rc1.dev51+g091bbadd", "gaudi-main"),
])
def test_a_released_plugin_version_names_its_profile_exactly(version, profile):
    d = pick_profile(_gaudi(version))
    assert (d.profile, d.nearest) == (profile, None)
    assert version.split("+")[0] in d.why


def test_a_plugin_newer_than_every_profile_picks_the_newest_and_says_so_in_one_line():
    d = pick_profile(_gaudi("0.28.0"))
    assert d.profile == "gaudi-main"
    assert d.nearest == "vllm-gaudi 0.28.0 is newer than every profile; using gaudi-main (0.27.0rc1.dev51), the nearest"
    assert "\n" not in d.nearest


def test_a_plugin_between_two_profiles_takes_the_older_and_says_so():
    d = pick_profile(_gaudi("0.26.1"))
    assert d.profile == "gaudi-0.26.0" and "nearest older" in d.nearest
    d = pick_profile(_gaudi("0.9.0"))
    assert d.profile == "gaudi-0.10.1" and "older than every profile" in d.nearest


def test_a_git_install_is_matched_by_its_commit():
    inst = Installed(python="py", versions={"vllm_gaudi": "0.0.0"},
                     commits={"vllm_gaudi": "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"})
    d = pick_profile(inst)
    assert (d.profile, d.nearest) == ("gaudi-0.26.0", None) and "b059f9c95" in d.why


# ------------------------------------------------------------------------------------ the fork

@pytest.mark.parametrize("vllm,commit,profile", [
    ("0.9.0.1+gaudi.1.22.0", None, "fork-1.22"),
    ("0.9.0.1+gaudi.1.23.0.gaudi123", None, "fork-1.23"),
    ("0.7.2+gaudi.1.21.2", None, "fork-1.21.2"),
    ("0.7.2+gaudi000", "2b4ba562c43c538c2a502d19461f32cb43affbaa", "fork-1.21.0"),
    ("0.9.0.1+gaudi000", "8211e0ba420e976cca07be323328e41fa8a1a9da", "fork-1.22"),
    ("0.9.0.1+gaudi000", "f1d9275aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "fork-1.23"),
    ("0.11.1.dev5+g95af700", "f1d9275aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "fork-main"),
    ("0.6.6.post1+gaudi000", None, "fork-1.20"),
])
def test_the_fork_is_read_from_vllms_version_label_or_the_extensions_pin(vllm, commit, profile):
    inst = Installed(python="py", versions={"vllm": vllm, "vllm_hpu_extension": "0.0.0"},
                     commits={"vllm_hpu_extension": commit} if commit else {})
    d = pick_profile(inst)
    assert (d.profile, d.nearest) == (profile, None), d.why


def test_a_fork_newer_than_every_profile_and_an_ambiguous_base_are_said():
    newer = pick_profile(Installed(python="py", versions={"vllm": "0.9.0.1+gaudi.1.24.0",
                                                         "vllm_hpu_extension": "0.0.0"}))
    assert newer.profile == "fork-1.23" and "newer than every fork profile" in newer.nearest
    both = pick_profile(Installed(python="py", versions={"vllm": "0.5.3.post1", "vllm_hpu_extension": "0.0.0"}))
    assert both.profile == "fork-1.18" and "fork-1.17 and fork-1.18" in both.nearest


def test_a_plain_vllm_is_generic_and_nothing_installed_is_an_error():
    d = pick_profile(Installed(python="py", versions={"vllm": "0.11.0+cpu"}))
    assert d.profile is None and "generic vLLM" in d.why
    with pytest.raises(DetectError, match="none of vllm, vllm-gaudi, vllm-hpu-extension"):
        pick_profile(Installed(python="/opt/py", versions={}))


def test_the_tables_name_real_profiles_and_cover_every_release():
    names = {p for p, *_ in GAUDI_RELEASES} | {p for p, *_ in FORK_RELEASES}
    for name in names:
        get_profile(name)  # raises for an unknown name
    canonical = {get_profile(n).name for n in names}
    assert canonical == set(profiles())
    for profile, _, commit in GAUDI_RELEASES:
        p = get_profile(profile)
        assert commit in p.upstream or commit in p.alias_notes.get(profile, ""), profile


# ------------------------------------------------------------------------------------ the node

def test_metadata_is_read_from_a_dist_info_on_sys_path(tmp_path, monkeypatch):
    fake_dist(tmp_path, "vllm_gaudi", "0.28.0")
    fake_dist(tmp_path, "vllm", "0.12.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    inst = installed_packages()
    assert inst.versions == {"vllm": "0.12.0", "vllm_gaudi": "0.28.0"}
    assert pick_profile(inst).profile == "gaudi-main"


def test_a_git_installs_commit_comes_from_direct_url(tmp_path, monkeypatch):
    fake_dist(tmp_path, "vllm_hpu_extension", "0.0.0", commit="8211e0ba420e976cca07be323328e41fa8a1a9da")
    monkeypatch.syspath_prepend(str(tmp_path))
    inst = installed_packages()
    assert inst.commits == {"vllm_hpu_extension": "8211e0ba420e976cca07be323328e41fa8a1a9da"}
    assert pick_profile(inst).profile == "fork-1.22"


def test_another_interpreter_is_asked_through_the_vllm_scripts_shebang(tmp_path):
    python, site = make_node_venv(tmp_path / "node")
    fake_dist(site, "vllm_gaudi", "0.28.0")
    script = fake_vllm_script(tmp_path / "vllm", python)
    assert serve_python([str(script)]) == str(python)
    d = detect([str(script)])
    assert Path(d.installed.python).parent == python.parent
    assert d.profile == "gaudi-main" and "newer than every profile" in d.nearest
    # Our own interpreter has no vllm-gaudi: the answer really came from the node's.
    assert "vllm_gaudi" not in installed_packages().versions


def test_an_env_shebang_is_resolved_on_path(tmp_path, monkeypatch):
    python, _ = make_node_venv(tmp_path / "node")
    monkeypatch.setenv("PATH", f"{python.parent}{os.pathsep}{os.environ['PATH']}")
    script = fake_vllm_script(tmp_path / "vllm", python, env_shebang=True)
    assert serve_python([str(script)]) == str(python)
    assert serve_python([str(python), "-m", "vllm.entrypoints.cli.main"]) == str(python)


def test_a_command_that_is_no_python_script_is_a_clear_error(tmp_path):
    binary = tmp_path / "vllm"
    binary.write_bytes(b"\x7fELF\x02\x01\x01")
    binary.chmod(0o755)
    with pytest.raises(DetectError, match="give --release NAME"):
        detect([str(binary)])
    script = fake_vllm_script(tmp_path / "vllm2", tmp_path / "nowhere" / "python")
    with pytest.raises(DetectError, match="does not exist"):
        detect([str(script)])


def test_the_server_log_is_a_second_witness():
    d = pick_profile(Installed(python="/venv/bin/python", versions={"vllm": "0.9.0.1+gaudi.1.22.0",
                                                                   "vllm_hpu_extension": "0.0.0"}))
    assert log_witness(d, "0.9.0.1+gaudi.1.22.0") is None
    assert log_witness(d, None) is None
    other = log_witness(d, "0.11.0")
    assert "reports vLLM 0.11.0" in other and "0.9.0.1+gaudi.1.22.0" in other
    relabelled = log_witness(d, "0.9.0.1+gaudi.1.23.0")
    assert "fork-1.23" in relabelled and "fork-1.22 was picked" in relabelled
