"""One vocabulary: --release everywhere (the old spellings work and say what replaces them), tune takes the
vllm bench serve flags it documents (or says why not), study and space names are resolved with suggestions,
and fit documents its trace format and says what a fitted set does not cover."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tuner.cli import build_parser, main
from tuner.space.library import find_space
from tuner.space.schema import SpaceError

BUCKETS = ["buckets", "--max-num-seqs", "16", "--max-model-len", "1024", "--max-num-batched-tokens", "2048"]


def run(args, capsys) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_command_that_takes_a_release_spells_it_release():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    spelled = {}
    for name, p in sub.choices.items():
        for a in p._actions:
            if a.dest in ("release", "releases", "sim_release") and a.help != "==SUPPRESS==":
                spelled[name] = a.option_strings
    assert set(spelled) >= {"tune", "buckets", "calc", "fit", "compare"}  # sim-serve: its own parser, below
    assert all(opts == ["--release"] for opts in spelled.values()), spelled


@pytest.mark.parametrize("old,args", [
    ("--profile", ["buckets", "--profile", "fork-1.21.2", *BUCKETS[1:]]),
    ("--profile", ["calc", "--profile", "fork-1.21.2"]),
    ("--profile", ["fit", "--profile", "gaudi-main", "--num-prompts", "20", "--max-buckets", "2"]),
    ("--releases", ["compare", "--releases", "fork-1.21.2", "gaudi-main", "--max-model-len", "1024"]),
])
def test_old_spellings_still_work_and_say_what_replaces_them(old, args, capsys):
    code, out, err = run(args, capsys)
    assert code == 0, err
    assert f"{old} is deprecated; use --release" in err
    code, _, err = run([a if a != old else "--release" for a in args], capsys)
    assert code == 0 and "deprecated" not in err


def test_the_simulator_takes_release_too(capsys):
    from tuner.sim.serve import build_parser as sim_parser

    assert sim_parser().parse_args(["m", "--release", "fork-1.17"]).sim_release == "fork-1.17"
    assert sim_parser().parse_args(["m", "--sim-release", "fork-1.17"]).sim_release == "fork-1.17"
    assert "--sim-release is deprecated; use --release" in capsys.readouterr().err


def test_buckets_needs_a_release(capsys):
    code, _, err = run(BUCKETS, capsys)
    assert code == 2 and "--release is required" in err


def test_tune_records_only_the_percentile_metrics_asked_for(tmp_path, capsys, monkeypatch):
    space = {"name": "pm", "release": "fork-1.21.2", "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
             "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
             "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8]}}}
    (tmp_path / "pm.yaml").write_text(yaml.safe_dump(space))
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["tune", "--space", "pm.yaml", "--n-trials", "1", "--percentile-metrics", "ttft,tpot",
                        "--num-prompts", "8", "--num-warmups", "1", "--random-input-len", "100",
                        "--random-output-len", "8", "--time-scale", "0.2", "--startup-time-scale", "0.002",
                        "--no-seed-defaults", "--allow-recompiles"], capsys)
    assert code == 0, err
    trials = pd.read_csv(tmp_path / "results" / "pm" / "trials.csv")
    assert trials["status"].tolist() == ["ok"] and trials["p99_tpot_ms"].notna().all()
    assert "p99_itl_ms" not in trials or trials["p99_itl_ms"].isna().all()


def test_a_space_is_found_by_name_and_a_typo_gets_the_closest(tmp_path, monkeypatch):
    (tmp_path / "search_spaces").mkdir()
    (tmp_path / "search_spaces" / "mine.yaml").write_text("parameters: {}\n")
    monkeypatch.chdir(tmp_path)
    assert find_space("mine") == find_space("search_spaces/mine.yaml") == Path("search_spaces/mine.yaml")
    assert find_space("demo").name == "demo.yaml"  # the shipped ones too
    with pytest.raises(SpaceError, match=r"did you mean search_spaces/mine\.yaml\?"):
        find_space("mien")


@pytest.mark.parametrize("given, message", [
    ("mine.yaml", r"mine\.yaml: search-space file not found; did you mean search_spaces/mine\.yaml "
                  r"\(or --space mine\)"),
    ("search_spaces/mine.yml", r"did you mean search_spaces/mine\.yaml\?"),
    ("search_spaces/demo.yaml", r"search_spaces/demo\.yaml: search-space file not found; did you mean .*/demo\.yaml "
                                r"\(or --space demo\)"),
    ("elsewhere/demo.yaml", r"elsewhere/demo\.yaml: search-space file not found"),
    ("search_spaces/MINE.yaml", r"search_spaces/mine\.yaml differs only in case"),
    ("search_spaces", r"search_spaces: is a folder, not a search-space file \(its spaces: mine\.yaml\)"),
    ("~/mine.yaml", r"~/mine\.yaml: the ~ was not expanded .*write the path without it \(/"),
])
def test_a_path_is_never_taken_for_a_space_name(tmp_path, monkeypatch, given, message):
    """Before: each of these ran the space named by its stem (search_spaces/mine.yaml or the shipped demo)."""
    (tmp_path / "search_spaces").mkdir()
    (tmp_path / "search_spaces" / "mine.yaml").write_text("parameters: {}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpaceError, match=message):
        find_space(given)


def test_a_file_named_like_a_space_in_another_case_is_refused_on_every_disk(tmp_path, monkeypatch):
    """A case-insensitive disk (macOS, Windows) would open Mine.yaml for mine.yaml; Linux would not."""
    import os

    (tmp_path / "Mine.yaml").write_text("parameters: {}\n")
    monkeypatch.chdir(tmp_path)
    real_is_file = Path.is_file
    monkeypatch.setattr(Path, "is_file", lambda p: real_is_file(p) or str(p) == "mine.yaml")  # as such a disk
    assert os.listdir(".") == ["Mine.yaml"]
    with pytest.raises(SpaceError, match=r"Mine\.yaml differs only in case"):
        find_space("mine.yaml")


def test_fit_help_documents_the_trace_format_with_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = capsys.readouterr().out
    assert "columns: input_len, output_len" in text and "example trace.csv:" in text
    assert "  812,128,0.0" in text and '{"input_len": 812, "output_len": 128}' in text


def test_the_documented_trace_example_is_read(tmp_path, capsys):
    from tuner.commands.fit import TRACE_FORMAT

    lines = TRACE_FORMAT.split("example trace.csv:\n")[1].split("\n\n")[0].splitlines()
    (tmp_path / "trace.csv").write_text("\n".join(x.strip() for x in lines) + "\n")
    code, out, err = run(["fit", "--dataset-path", str(tmp_path / "trace.csv"), "--max-concurrency", "4",
                          "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["prompt"]["boundaries"][-1] >= 1930


def test_fit_reaches_the_worst_case_and_its_check_still_names_a_shortfall(capsys):
    # fit's own top decode bucket reaches the worst case (it used to warn against its own choice) ...
    code, out, _ = run(["fit", "--num-prompts", "200", "--max-concurrency", "32", "--random-range-ratio", "0.5",
                        "--max-buckets", "4", "--json"], capsys)
    doc = json.loads(out)
    at32 = doc["decode"]["per_batch_size"]["32"]["boundaries"][-1]
    assert doc["warnings"] == [] and at32 >= doc["decode"]["worst_case_blocks"]["32"]
    # ... and the check it passes still says what a shorter set leaves out
    from tuner.commands.fit import decode_shortfalls
    from tuner.load.workload import RandomWorkload
    from tuner.space.fit.quantize import Fit

    wl = RandomWorkload(input_len=1024, output_len=128, range_ratio=0.5, num_prompts=200)
    [said] = decode_shortfalls(wl, {32: Fit((100, at32 - 1), 0.0, 1.0)}, 128)
    assert said.startswith(f"decode buckets at batch 32 reach {at32 - 1:,} blocks; the worst case is ")


def test_fit_without_bucket_files_says_what_to_use(capsys):
    code, out, _ = run(["fit", "--release", "fork-1.21.2", "--num-prompts", "50", "--max-buckets", "2"], capsys)
    assert code == 0 and "fork-1.21.2 reads no bucket file" in out
