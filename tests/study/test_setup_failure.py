"""A trial whose every request the server refuses for its setup (a pooling model with no generating API, a model
it does not serve, a missing API key) says nothing of the settings: every other configuration would fail alike.
The study stops after it with the reason and the remedy, keeping the trial, instead of booting the rest."""

from __future__ import annotations

import optuna

from tests.study.test_running_elsewhere import TWO_CONFIGS
from tests.study.test_study_e2e import FAST, write_space
from tuner.cli import main
from tuner.load.client import _ROUTE_HINT
from tuner.trial.run import setup_failure


def test_the_refusals_that_are_the_setups_and_those_that_are_not():
    pooling = [{"message": f"HTTP 404: 404: Not Found ({_ROUTE_HINT[False]})"}]   # the client's words for it
    assert "bucket-tuner bench --backend openai-embeddings" in setup_failure(pooling, 10, 10)
    assert setup_failure(pooling, 9, 10) is None                     # one request got through: the settings
    assert "--served-model-name" in setup_failure([{"message": "HTTP 404: The model `x` does not exist."}], 4, 4)
    assert "OPENAI_API_KEY" in setup_failure([{"message": "HTTP 401 Unauthorized: the server requires an API key"}],
                                             4, 4)
    too_long = [{"message": "HTTP 400: This model's maximum context length is 1024 tokens"}]
    assert setup_failure(too_long, 4, 4) is None                     # max_model_len is a setting
    assert setup_failure(pooling + too_long, 4, 4) is None


def test_a_study_of_a_pooling_model_stops_after_its_first_trial(tmp_path, capsys):
    results = tmp_path / "results"
    space = write_space(tmp_path, TWO_CONFIGS)
    code = main(["tune", "--space", str(space), "--results", str(results), "--n-trials", "4", "--no-seed-defaults",
                 "--no-report", "--server-args", "--runner pooling", *FAST])
    err = capsys.readouterr().err
    assert code == 1
    assert "every request failed the same way, whatever the settings" in err and "bucket-tuner bench" in err
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{results / 'e2e' / 'study.db'}")
    booted = [t for t in study.trials if t.user_attrs.get("booted")]
    assert len(booted) == 1 and booted[0].user_attrs["status"] == "load_errors"   # kept, and nothing else booted


