"""compare --release: the bucket sets two releases build from the same settings, diffed offline.

The known pair: fork-1.21.0 and fork-1.21.2 (vllm-hpu-extension 2b4ba56 and 29bc7a4) on the same linear
settings. With VLLM_DECODE_BLOCK_BUCKET_MAX unset, 1.21.0 defaults it to
max(128, max_num_seqs * max_model_len / block_size) = max(128, 4 * 1024 / 128) = 128, while 1.21.2 takes
the KV block count (300) and appends it to the range: blocks 128 vs 128, 256, 300, for every decode batch
size 1, 2, 4 (VLLM_DECODE_BS_BUCKET_MAX = max_num_seqs = 4, ramp-up 1, 2, 4). Prompt buckets do not
change.
"""

from __future__ import annotations

import json
import re

import optuna
import pytest

from tuner.buckets import BucketConfigError
from tuner.cli import main
from tuner.results.releasediff import build_release, diff_releases, phase_diffs

SERVER = {"max_num_seqs": 4, "max_model_len": 1024, "max_num_batched_tokens": 4096, "block_size": 128}
ENV = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_DECODE_BLOCK_BUCKET_STEP": "128"}
ADDED_DECODE = [(1, 256), (1, 300), (2, 256), (2, 300), (4, 256), (4, 300)]
COMMON_DECODE = 3  # (1, 128), (2, 128), (4, 128)


def test_known_pair_exact_decode_difference():
    diff = diff_releases("fork-1.21.0", "fork-1.21.2", SERVER, ENV, num_hpu_blocks=300)
    a, b = diff.builds
    assert (a.kv_blocks, a.kv_source, b.kv_blocks) == (300, "given", 300)
    prompt, decode = diff.phases
    assert prompt.phase == "prompt" and prompt.counts[0] == prompt.counts[1] == prompt.common
    assert not prompt.removed and not prompt.added
    assert (decode.counts, decode.common, decode.removed, decode.added) == ((3, 9), COMMON_DECODE, [], ADDED_DECODE)
    rows = {s.name: s for s in diff.settings}
    assert rows["VLLM_DECODE_BLOCK_BUCKET_MAX"].values == ("128 (default)", "300 (default)")
    assert rows["VLLM_DECODE_BLOCK_BUCKET_MAX"].why == "another default"
    assert "VLLM_DECODE_BLOCK_BUCKET_STEP" not in rows  # both read the 128 given the same way


def test_a_value_one_release_ignores_is_named_first():
    env = {"VLLM_PROMPT_SEQ_BUCKET_MAX": "1024"}  # fork-1.22 picks its exponential strategy by default
    diff = diff_releases("fork-1.21.2", "fork-1.22", SERVER, env, num_hpu_blocks=300)
    first = diff.settings[0]
    assert first.name == "VLLM_PROMPT_SEQ_BUCKET_MAX" and first.values == ("1024 (user)", "1024 (ignored)")
    assert first.why == "fork-1.22 ignores it: its exponential bucketing overwrites it"
    assert [b.plan.strategy for b in diff.builds] == ["linear", "exponential"]


def test_2d_against_3d_buckets_are_compared_in_3d():
    server = dict(SERVER, max_model_len=16384, max_num_batched_tokens=16384)
    env = dict(ENV, VLLM_DECODE_BLOCK_BUCKET_MIN="128")
    diff = diff_releases("fork-1.21.2", "gaudi-main", server, env, num_hpu_blocks=300)
    fork, gaudi = (b.plan for b in diff.builds)
    assert fork.dims == 2 and gaudi.dims == 3
    decode = next(p for p in diff.phases if p.phase == "decode")
    # fork (bs, blocks) as (bs, 1, blocks): the ones gaudi-main also builds are common, not removed + added
    assert decode.common == len({(bs, 1, blocks) for bs, blocks in fork.decode} & set(gaudi.decode)) == 5
    assert decode.removed == [(1, 1, 256), (1, 1, 300), (2, 1, 300), (4, 1, 300)]
    assert decode.added == [(4, 1, 384), (4, 1, 512)]
    assert "(bs, 1, blocks)" in decode.note
    # fork-1.17 counts decode context in tokens: counts only, no bucket-by-bucket diff
    (old,) = [p for p in phase_diffs(build_release("fork-1.17", SERVER, ENV, 300).plan, fork) if p.phase == "decode"]
    assert old.common is None and "counts only" in old.note


def test_predicted_kv_blocks_and_warmup_each_way_without_a_block_count():
    diff = diff_releases("fork-1.21.2", "gaudi-main", SERVER, ENV)
    for b in diff.builds:
        assert b.kv_source == "predicted" and b.kv_blocks == b.predicted["kv_blocks"] > 0
        assert b.predicted["warmup_s"] > 0 and b.plan is not None
        # the documented constants alone: the prior's 2-sd band, said as such
        assert b.predicted["warmup_low_s"] < b.predicted["warmup_s"] < b.predicted["warmup_high_s"]
        assert b.predicted["warmup_from"] == "prior"


def test_compare_releases_prints_the_warmup_with_its_band(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # no folded cells
    assert main(["compare", "--releases", "fork-1.21.2", "gaudi-main", "--max-num-seqs", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "predicted warmup (2-sd range)" in out
    assert len(re.findall(r"\(\d+(?:\.\d)?-\d+(?:\.\d)? (?:s|min|h), prior\)", out)) == 2, out


def test_unknown_release_is_a_clear_error(capsys):
    with pytest.raises(BucketConfigError, match="unknown release profile 'fork-9'"):
        build_release("fork-9", SERVER, ENV)
    code = main(["compare", "--release", "fork-1.21.2", "fork-9", "--max-num-seqs", "4"])
    err = capsys.readouterr().err
    assert code == 2 and "--release: unknown release profile 'fork-9'" in err and len(err.strip().splitlines()) == 1


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_releases_from_an_env_file_with_its_flags_header(tmp_path, capsys):
    env_file = tmp_path / "best.env"
    env_file.write_text("# bucket-tuner export: study s, trial 3, pick balanced\n"
                        "# vllm serve flags: --max-num-seqs 4 --max-model-len 1024 --block-size 128 "
                        "--max-num-batched-tokens 4096\n"
                        + "".join(f"{k}={v}\n" for k, v in ENV.items()))
    out = _json(capsys, ["compare", "--release", "fork-1.21.0", "fork-1.21.2", "--env-file", str(env_file),
                         "--num-hpu-blocks", "300", "--json"])
    assert out["settings_from"] == str(env_file) and out["releases"] == ["fork-1.21.0", "fork-1.21.2"]
    decode = next(p for p in out["phases"] if p["phase"] == "decode")
    assert decode["added"] == [list(x) for x in ADDED_DECODE] and decode["removed"] == []
    assert [b["counts"]["decode"] for b in out["builds"]] == [3, 9]
    # the terminal form names the counts and the first buckets only in the other release
    assert main(["compare", "--release", "fork-1.21.0", "fork-1.21.2", "--env-file", str(env_file),
                 "--num-hpu-blocks", "300"]) == 0
    raw = capsys.readouterr().out
    assert all(len(line) <= 80 for line in raw.splitlines() if line[:1] not in "┏┃┡│└")
    text = " ".join(raw.split())   # wrapped at 80 columns
    assert "decode: 3 -> 9 buckets; 3 in both" in text
    assert "only in fork-1.21.2 (6): (1, 256), (1, 300), (2, 256), (2, 300), (4, 256) and 1 more" in text


def test_compare_releases_from_a_studys_pick(tmp_path, capsys):
    folder = tmp_path / "results" / "s"
    folder.mkdir(parents=True)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{folder / 'study.db'}",
                                directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("backend", {"kind": "sim", "device": "gaudi2", "sim_model": "llama-3.1-8b"})
    study.add_trial(optuna.trial.create_trial(values=[100.0, 50.0, 60.0],
                                              user_attrs={"env": ENV, "server": SERVER, "status": "ok"}))
    out = _json(capsys, ["compare", "s", "--results", str(tmp_path / "results"), "--release", "fork-1.21.0",
                         "fork-1.21.2", "--num-hpu-blocks", "300", "--json"])
    assert out["settings_from"] == "study s, trial 0"
    assert next(p for p in out["phases"] if p["phase"] == "decode")["added"] == [list(x) for x in ADDED_DECODE]


@pytest.mark.parametrize("argv, named", [
    (["--env-file", "nope.env"], "--env-file nope.env: file not found"),
    (["--trial", "2"], "--trial 2 needs the STUDY"),
    (["a", "b"], "give at most one STUDY"),
    (["--model-shape", "gpt-9"], "--model-shape: unknown model 'gpt-9'"),
])
def test_bad_release_diff_inputs_are_one_line_errors(tmp_path, capsys, argv, named):
    code = main(["compare", "--release", "fork-1.21.0", "fork-1.21.2", "--results", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1


def test_release_flags_without_releases_are_refused(capsys):
    code = main(["compare", "a", "b", "--env-file", "x.env"])
    assert code == 2 and "--env-file is for the release diff: add --release" in capsys.readouterr().err


def test_compare_states_an_overwriting_strategys_warnings_once_with_the_fix(capsys):
    # twelve linear variables into a release that buckets exponentially: its twelve banners were printed
    # in the settings and again as warnings, and nothing said how to keep the values
    dims = (("PROMPT", ("BS", "SEQ")), ("DECODE", ("BS", "BLOCK")))
    linear = {f"VLLM_{phase}_{dim}_BUCKET_{p}": v for phase, names in dims for dim in names
              for p, v in (("MIN", "1" if dim == "BS" else "128"), ("STEP", "128"), ("MAX", "1024"))}
    env = [f"--env={k}={v}" for k, v in linear.items()]
    assert main(["compare", "--release", "fork-1.21.2", "gaudi-main", "--max-num-seqs", "4", *env]) == 0
    raw = capsys.readouterr().out
    assert all(len(line) <= 80 for line in raw.splitlines() if line[:1] not in "┏┃┡│└")
    assert "will be overwritten" not in raw
    text = " ".join(raw.split())
    [said] = [w for w in text.split("gaudi-main warns: ")[1:]]
    assert said.startswith("its exponential bucketing overwrites 12 of the linear bucket variables given")
    assert "to use them, add --env VLLM_BUCKETING_STRATEGY=lin" in said
