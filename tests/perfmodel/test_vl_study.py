"""The shipped VL search space tuned on the simulator: images sent as chat requests, each trial's image
buckets warmed in the release's multimodal phase, and the report's recompiles per image bucket.

One trial with a tiny load proves the study end to end; every choice of the space is then checked on
the virtual clock (its start's warm-up lines, and whether a 720p image recompiles), which a study would
need a trial per choice for."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pandas as pd

from tuner.cli import main
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.engine import Engine, SimRequest
from tuner.sim.startup import run_startup_virtual
from tuner.space.schema import SearchSpace

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "vl-qwen3-vl.yaml"
MODEL = "Qwen/Qwen3-VL-8B-Instruct"
UNWARMED_720P = "Configuration: ('multimodal', 1, 3520) was not warmed-up!"  # every 720p image: 3520 patches


def test_a_vl_space_is_tuned_and_reports_recompiles_per_image_bucket(tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["tune", "--space", str(SPACE), "--model", MODEL, "--n-trials", "1",
                         "--dataset-name", "random-mm", "--random-mm-bucket-config", "{(720, 1280, 1): 1.0}",
                         "--random-mm-limit-mm-per-prompt", '{"image": 1}', "--num-prompts", "2",
                         "--max-concurrency", "2", "--random-input-len", "64", "--random-output-len", "2",
                         "--time-scale", "0.05", "--startup-time-scale", "0.001", "--allow-recompiles",
                         "--seed", "3"])
    finally:
        os.chdir(cwd)
    assert code == 0, out.getvalue()
    folder = tmp_path / "results" / "vl-qwen3-vl"
    row = pd.read_csv(folder / "trials.csv").iloc[0]
    assert row["status"] == "ok"
    report = (folder / "report.html").read_text()
    assert "Recompiles per image bucket" in report
    log = (folder / "trials" / "0000" / "server.log").read_text()
    assert "[Warmup][Graph/Multimodal(image)]" in log
    unwarmed = "3600" not in str(row["param:VLLM_MULTIMODAL_BUCKETS"])  # a list short of 720p images
    assert (UNWARMED_720P in log) == unwarmed
    assert ("<td>3520 patches</td>" in report) == unwarmed


def test_every_choice_of_the_space_warms_its_images_and_recompiles_720p_only_when_short_of_it():
    space = SearchSpace.load(SPACE)
    space.check_release(space.release)
    choices = next(p for p in space.parameters if p.key == "VLLM_MULTIMODAL_BUCKETS").choices
    seen = set()
    for value in choices:
        settings = space.settings_for({"max_num_seqs": 16, "VLLM_MULTIMODAL_BUCKETS": value})
        server = settings.server
        pred = predict_startup(space.release, SimSettings(model=MODEL), ServerInputs(
            max_model_len=server["max_model_len"], block_size=server["block_size"], max_num_seqs=16,
            max_num_batched_tokens=server["max_num_batched_tokens"],
            limit_mm_per_prompt=json.dumps(server["limit_mm_per_prompt"])), settings.env)
        assert pred.failure is None, value
        assert any("[Warmup][Graph/Multimodal(image)]" in line for line in run_startup_virtual(pred).lines)
        engine = Engine(pred)
        engine.add_request(SimRequest("r", 64, 1, 0.0, images=((1280, 720),)))
        logs, now = [], 0.0
        while engine.has_work():
            res = engine.step(now)
            now += res.duration
            logs += [msg for _, key, msg in res.logs if key == "not_warmed"]
        short = "3600" not in value.split(",")
        assert (logs == [UNWARMED_720P]) == short, value
        seen.add(short)
    assert seen == {True, False}  # the space holds both kinds of list
