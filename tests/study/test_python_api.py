"""The Python API (tuner.tune, TuneConfig, write_report, export): README's "From Python" example runs as
written, on the simulator; storage is injectable; a wrong option is refused by name."""

from __future__ import annotations

import os
import re

import optuna
import pytest

import tuner
from tuner.commands import UsageError

from ..conftest import ROOT


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch, capsys):
    (tmp_path / "search_spaces").symlink_to(ROOT / "search_spaces")
    monkeypatch.chdir(tmp_path)
    exec(compile(_readme_example(), "README.md (From Python)", "exec"), {})
    out = capsys.readouterr().out
    folder = tmp_path / "results" / "notebook"
    study = optuna.load_study(study_name="notebook", storage=f"sqlite:///{folder / 'study.db'}")
    assert len([t for t in study.trials if t.state.is_finished()]) == 4
    assert (folder / "report.html").is_file() and (folder / "trials.csv").is_file()
    env = (folder / "balanced.env").read_text()
    assert "VLLM_DECODE_BS_BUCKET_STEP=" in env and env in out  # printed as the example says
    front = {t.number for t in study.best_trials}
    assert any(line.split(" ", 1)[0].isdigit() and int(line.split(" ", 1)[0]) in front for line in out.splitlines())


def test_storage_is_injectable_and_nothing_touches_the_disk_study(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    run = tuner.tune(space=ROOT / "search_spaces" / "demo.yaml", study="mem", n_trials=2, results=tmp_path,
                     num_prompts=16, no_report=True)
    assert (tmp_path / "mem" / "study.db").exists()  # the default: the study's sqlite file
    run = tuner.tune(space=ROOT / "search_spaces" / "demo.yaml", study="mem2", n_trials=2, results=tmp_path,
                     num_prompts=16, no_report=True, storage=storage)
    assert not (tmp_path / "mem2" / "study.db").exists()
    assert run.study._storage is storage
    assert len([t for t in run.study.trials if t.state.is_finished()]) == 2
    assert os.path.isdir(run.study_dir)


@pytest.mark.parametrize("options,message", [
    ({"n_trails": 3}, "did you mean 'n_trials'"),
    ({"options": {"warmup_budgt": 60}}, "did you mean 'warmup_budget'"),
])
def test_a_misspelled_option_is_refused_by_name(tmp_path, options, message):
    with pytest.raises(UsageError, match=message):
        tuner.tune(space=ROOT / "search_spaces" / "demo.yaml", results=tmp_path, **options)
    assert not list(tmp_path.iterdir())  # refused before anything was written
