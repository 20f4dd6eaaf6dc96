"""The shipped VL search space tuned on the simulator: images sent as chat requests, each trial's image
buckets warmed in the release's multimodal phase, and the report's recompiles per image bucket."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pandas as pd

from tuner.cli import main

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "vl-qwen3-vl.yaml"


def test_a_vl_space_is_tuned_and_reports_recompiles_per_image_bucket(tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["tune", "--space", str(SPACE), "--model", "Qwen/Qwen3-VL-8B-Instruct", "--n-trials", "2",
                         "--dataset-name", "random-mm", "--random-mm-bucket-config", "{(720, 1280, 1): 1.0}",
                         "--random-mm-limit-mm-per-prompt", '{"image": 1}', "--num-prompts", "6",
                         "--num-warmups", "1", "--max-concurrency", "3", "--random-input-len", "64",
                         "--random-output-len", "4", "--time-scale", "0.2", "--startup-time-scale", "0.001",
                         "--allow-recompiles", "--seed", "3"])
    finally:
        os.chdir(cwd)
    assert code == 0, out.getvalue()
    folder = tmp_path / "results" / "vl-qwen3-vl"
    trials = pd.read_csv(folder / "trials.csv")
    assert (trials["status"] == "ok").all()
    report = (folder / "report.html").read_text()
    assert "Recompiles per image bucket" in report
    any_unwarmed = False
    for _, row in trials.iterrows():
        log = (folder / "trials" / f"{int(row['number']):04d}" / "server.log").read_text()
        assert "[Warmup][Graph/Multimodal(image)]" in log
        # every 720p image is 3520 patches: a bucket list without 3600 leaves it outside the warmed buckets
        unwarmed = "3600" not in str(row["param:VLLM_MULTIMODAL_BUCKETS"])
        assert ("Configuration: ('multimodal', 1, 3520) was not warmed-up!" in log) == unwarmed
        any_unwarmed |= unwarmed
    assert ("<td>3520 patches</td>" in report) == any_unwarmed
