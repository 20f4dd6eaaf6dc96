"""The release from every sign a log gives (explain/releasesigns.py), --release to correct it, the rebuild
of a start with its logged token budget, and advice far beyond the logged run shown apart."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tuner.buckets import ServerConfig, get_profile
from tuner.explain import explain
from tuner.explain.advice import Alternative, server_from_log, unusable_reason
from tuner.explain.render import render_text, to_json
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.plan.baseline import BaselineError, read_deployment
from tuner.sim.startup import run_startup_virtual

from ..conftest import LOG_SAMPLES

PR208 = LOG_SAMPLES / "real" / "fork-1.18pre_pr208_token_budget_decode_over_seq.log"
PR235 = LOG_SAMPLES / "real" / "fork-1.18pre_pr235_large_bucket_minimums.log"


def _lines(path):
    return [x for x in path.read_text().splitlines() if not x.startswith("# SOURCE")]


def _pr208_at(tokens: int) -> list[str]:
    """PR #208's start with only --max-num-batched-tokens changed: its own lines, the bucket lists and
    Omitted lines as fork-1.17 with the budget filter prints them for that budget."""
    plan = get_profile("fork-1.17").build(ServerConfig(
        block_size=128, max_num_seqs=256, max_model_len=1024, max_num_batched_tokens=tokens, num_hpu_blocks=4096,
        token_budget_phases=("prompt", "decode")))
    head = [x for x in _lines(PR208) if "Generated" not in x and "Omitted" not in x and "bucket config" not in x]
    return head + [f"INFO 08-27 20:57:27 habana_model_runner.py:576] {x}" for x in plan.log_lines]


def _counts(x, name="as logged"):
    a = next(a for a in x.advice.alternatives if a.name == name)
    return a.prompt_buckets, a.decode_buckets


def test_a_habana_main_build_after_117_is_rebuilt_with_its_token_budget():
    x = explain(_lines(PR208))
    assert x.release.profiles == ("fork-1.17",) and "habana_main between 1.17 and 1.18" in x.release.family
    assert dict(x.release.inputs) == {"token_budget_phases": ("prompt", "decode")}   # 31 < 9 x 16: decode too
    assert any(s.startswith("'Omitted 33 prompt buckets") for s in x.release.decided_by)
    assert _counts(x) == (23, 31) and x.advice.rebuild_mismatch is None
    assert x.advice.server["max_num_batched_tokens"] == 2048


@pytest.mark.parametrize("tokens,counts", [(2048, (23, 31)), (32768, (52, 95))])
def test_two_starts_differing_only_in_the_budget_rebuild_apart(tokens, counts):
    x = explain(_pr208_at(tokens))
    assert x.bucket_counts == dict(zip(("prompt", "decode"), counts))
    assert _counts(x) == counts and x.advice.rebuild_mismatch is None
    assert x.advice.server["max_num_batched_tokens"] == tokens


def test_pr235_omits_nothing_on_both_phases_and_still_rebuilds():
    x = explain(_lines(PR235))
    assert dict(x.release.inputs) == {"token_budget_phases": ("prompt", "decode")}
    assert _counts(x) == (12, 8) and x.advice.rebuild_mismatch is None


def test_the_budget_printed_in_the_engine_args_is_the_one_rebuilt_with():
    lines = [x for x in _lines(PR208) if "Omitted" not in x]
    lines.insert(0, "INFO 08-27 20:57:20 api_server.py:219] args: Namespace(host=None, max_num_batched_tokens=2048, "
                    "max_num_seqs=256)")
    x = explain(lines)
    assert x.server.max_num_batched_tokens == 2048 and x.advice.server["max_num_batched_tokens"] == 2048


def test_the_budget_is_inferred_from_an_omission_count_without_it():
    p = explain(_lines(PR208)).phases
    cfg, assumed = server_from_log({q.phase: q for q in p}, 4096, block_size=128, max_model_len=None,
                                   max_num_seqs=None, max_num_batched_tokens=None, token_budget=None, omitted=33)
    assert cfg.max_num_batched_tokens == 2048 and any("inferred" in a for a in assumed)


def test_signs_decide_and_are_shown_in_text_and_json():
    x = explain(_lines(PR208), source="pr208.log")
    text = render_text(x)
    assert "decided by: 'Omitted 33 prompt buckets" in " ".join(text.split())
    doc = json.loads(json.dumps(to_json(x)))
    assert doc["release"]["profile"] == "fork-1.17" and doc["release"]["given"] is None
    assert doc["release"]["inputs"] == {"token_budget_phases": ["prompt", "decode"]}
    assert any("token budget" in s for s in doc["release"]["decided_by"])


def _sim(profile):
    run = run_startup_virtual(predict_startup(profile, SimSettings(), ServerInputs(
        block_size=128, max_num_seqs=16, max_model_len=2048, max_num_batched_tokens=4096), {}))
    return [part for line in run.lines for part in line.split("\n")]


@pytest.mark.parametrize("profile,sign", [("fork-1.21.2", "Gaudi 1.21 driver"), ("fork-1.19", "the base of fork-1.19")])
def test_version_strings_pick_among_releases_with_the_same_bucket_lines(profile, sign):
    x = explain(_sim(profile))
    assert x.release.profile == x.advice.profile == profile
    assert any(sign in s for s in x.release.decided_by), x.release.decided_by


def test_a_log_without_bucket_lines_takes_the_releases_of_its_version():
    x = explain(_lines(LOG_SAMPLES / "real" / "fork-1.21_erag84_v0_engine_wrapped.log"))
    assert x.release.profiles == ("fork-1.21.0", "fork-1.21.2")
    assert x.release.decided_by[-1].startswith("vLLM 0.7.2: the base of")


def test_release_flag_overrides_the_reading_and_says_what_the_log_read():
    x = explain(_lines(PR208), release="fork-1.18")
    assert x.release.profiles == ("fork-1.18",) and x.advice.profile == "fork-1.18" and x.release.given == "fork-1.18"
    assert "the log's own signs read fork-1.17" in x.release.decided_by[0]
    assert x.release.inputs == ()       # fork-1.18 has no such runner input: its own budget rule applies


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tuner.cli", "explain", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_release_flag_and_an_unknown_name_refused_with_the_close_ones():
    ok = _cli("--release", "fork-1.18", "--json", str(PR208))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["release"]["given"] == "fork-1.18"
    bad = _cli("--release", "fork-1.188", str(PR208))
    assert bad.returncode == 2 and "unknown release profile 'fork-1.188'; did you mean fork-1.18" in bad.stderr


def test_a_baseline_log_is_read_as_the_release_given_on_the_command_line():
    with pytest.raises(BaselineError, match="decided by: .*give --release fork-1.18"):
        read_deployment(PR208, "fork-1.18", {})
    dep = read_deployment(PR208, "fork-1.18", {}, release_given=True)
    assert any("read as fork-1.18 (--release); the log's own signs read fork-1.17" in n for n in dep.notes)


# --- advice far beyond the logged run --------------------------------------------------------------

def test_an_alternative_far_beyond_the_logged_run_is_shown_apart_with_its_reason():
    readme = LOG_SAMPLES / "fork-v0.5.3-gaudi-1.17_readme_startup.log"
    x = explain(_lines(readme), source="readme.log", advise_opts={"max_model_len": 262144})
    calc = next(a for a in x.advice.alternatives if a.name == "calculator")
    assert calc.prompt_buckets + calc.decode_buckets > 10 * 72
    assert calc.unusable and "the logged run's 72" in calc.unusable
    text = render_text(x)
    assert "not usable (far beyond the logged run):" in text
    assert not any(line.startswith("  calculator  ") for line in text.splitlines())
    assert "Advice: calculator" not in text and "calculator settings:" not in text
    doc = to_json(x)
    assert next(a for a in doc["advice"]["alternatives"] if a["name"] == "calculator")["unusable"] == calc.unusable
    usable = explain(_lines(readme), source="readme.log")
    assert all(a.unusable is None for a in usable.advice.alternatives)


@pytest.mark.parametrize("prompt,decode,warmup,why", [
    (129547, 0, 100.0, "buckets"), (50, 50, 264779.0, "predicted warm-up"), (50, 50, 900.0, None)])
def test_unusable_reason(prompt, decode, warmup, why):
    alt = Alternative("calculator", "", {}, "linear", prompt, decode, warmup)
    got = unusable_reason(alt, logged_buckets=100, logged_warmup_s=100.0)
    assert (got is None) if why is None else (why in got)
