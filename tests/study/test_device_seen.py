"""A node other than the study was told: the servers' memory lines report 126.5 GiB per card (a Gaudi 3) while
--device says gaudi2. Each trial records what the server showed; the live output says it once, the report too.
Before, nothing said it: the predictions quietly started from the wrong device's figures."""

from __future__ import annotations

import optuna

from tests.study.test_running_elsewhere import TWO_CONFIGS
from tests.study.test_study_e2e import FAST, write_space
from tuner.cli import main
from tuner.logparse.device import card_memory, device_of_memory


def test_the_card_memory_names_the_gaudi():
    line = ("INFO 11-28 20:15:59 [hpu_model_runner.py:661] Loading model weights took in total 14.97 GiB of device "
            "memory (14.97 GiB/126.5 GiB used) and 2.95 GiB of host memory (475.2 GiB/1007 GiB used)")
    assert card_memory(line) == 126.5 and device_of_memory(126.5) == "gaudi3"
    assert device_of_memory(94.62) == "gaudi2" and device_of_memory(60.0) is None
    assert card_memory("INFO ... Warmup finished in 49 secs") is None


def test_a_study_told_gaudi2_on_a_gaudi3_says_so(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["tune", "--space", str(write_space(tmp_path, TWO_CONFIGS)), "--results", str(results),
                 "--n-trials", "2", "--no-seed-defaults", "--device", "gaudi2", "--server-args",
                 "--sim-device gaudi3", *FAST]) == 0
    said = capsys.readouterr()
    out = " ".join((said.out + said.err).split())
    assert out.count("the server reports 126.5 GiB per card, a gaudi3, but the study was told --device gaudi2") == 1
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{results / 'e2e' / 'study.db'}")
    seen = {t.user_attrs["observed"].get("device_seen") for t in study.trials if t.user_attrs.get("booted")}
    assert seen == {"gaudi3"}
    report = (results / "e2e" / "report.html").read_text()
    assert "report a gaudi3, but the study was told <code>--device gaudi2</code>" in report
