"""The study live in optuna-dashboard: the dashboard started on the finished `rpt` simulator study (its own
storage and artifact folder, as the README says to start it), driven in headless Chromium. The study, its
Pareto plot, a trial's figures, note and artifacts are there, with no console error; the figures sort."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess
from tuner.study.dashboard import ARTIFACT_DIR

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed (pip install -e '.[test]')")

FIGURES = {"output_throughput", "p99_ttft_ms", "median_tpot_ms", "warmup_s", "predicted_warmup_s", "kv_blocks",
           "prompt_buckets", "decode_buckets", "recompiles"}
PARETO_DRAWN = """var g = document.getElementById('graph-pareto-front');
    return g !== null && g.classList.contains('js-plotly-plot') ? g.querySelectorAll('.point').length : 0;"""


def _command() -> list[str]:
    exe = Path(sys.executable).with_name("optuna-dashboard")
    exe = str(exe) if exe.exists() else shutil.which("optuna-dashboard")
    return [exe] if exe else [sys.executable, "-c", "from optuna_dashboard._cli import main; main()"]


@contextlib.contextmanager
def dashboard(study_dir: Path, log: Path):
    """optuna-dashboard on 127.0.0.1 and a free port, stopped with its whole process group."""
    port = find_free_port()
    argv = [*_command(), f"sqlite:///{study_dir / 'study.db'}", "--artifact-dir", str(study_dir / ARTIFACT_DIR),
            "--host", "127.0.0.1", "--port", str(port)]
    with ServerProcess() as srv:
        srv.start(argv, dict(os.environ), log, port=port)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert srv.check() is None, log.read_text()
            with contextlib.suppress(OSError):
                urllib.request.urlopen(base + "/api/meta", timeout=2).read()
                break
            assert time.monotonic() < deadline, f"optuna-dashboard did not answer: {log.read_text()[-2000:]}"
            time.sleep(0.2)
        yield base
        srv.stop(grace_int_s=3, grace_term_s=3, grace_kill_s=3)


def _text_shows(driver, *words: str, timeout: float = 60) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        lambda d: all(w in d.execute_script("return document.body.innerText") for w in words))
    return driver.execute_script("return document.body.innerText")


def test_the_study_is_live_in_optuna_dashboard(chromium, studies, tmp_path):
    study = studies.load()
    trial = next(t for t in study.trials if t.user_attrs.get("status") == "ok" and t.user_attrs.get("booted"))
    sid = study._study_id
    with dashboard(studies.results / "rpt", tmp_path / "dashboard.log") as base:
        detail = json.loads(urllib.request.urlopen(f"{base}/api/studies/{sid}", timeout=30).read())
        assert detail["objective_names"] == ["output_throughput", "p99_ttft_ms", "warmup_s"]
        sortable = {a["key"] for a in detail["union_user_attrs"] if a["sortable"]}
        assert FIGURES <= sortable, FIGURES - sortable  # plain numbers: sorted and plotted by the dashboard

        d = chromium.driver
        d.get(f"{base}/dashboard/studies/{sid}")
        _text_shows(d, "rpt", "Pareto Front", "output_throughput", "p99_ttft_ms")
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(d, 60).until(lambda d: d.execute_script(PARETO_DRAWN) > 0)
        d.save_screenshot(str(tmp_path / "study.png"))
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]

        d.get(f"{base}/dashboard/studies/{sid}/trials?numbers={trial.number}")
        text = _text_shows(d, f"Trial {trial.number} (trial_id=", "Artifacts", "server.log")
        d.save_screenshot(str(tmp_path / "trial.png"))
        errors += [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    # the trial's note: its one-line story, with its figures
    assert f"ok (measured) thr {trial.user_attrs['output_throughput']:.0f} tok/s" in text
    # its figures as plain numbers, its artifacts by name
    for key in ("output_throughput", "p99_ttft_ms", "warmup_s", "kv_blocks", "recompiles"):
        assert f"{key} {trial.user_attrs[key]}" in text, key
    artifacts = text[text.index("Artifacts"):]
    assert all(name in artifacts for name in ("trial.env", "trial.vllm.yaml", "server.log")), artifacts
