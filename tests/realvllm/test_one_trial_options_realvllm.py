"""One trial on a genuine vLLM (CPU, the tiny model of env.py) with the options that only change what
happens around a boot, checked together so that they cost one server start (~1 min):

* `--load-sweep concurrency=1,8`: one boot, two load points, both recorded with their own vLLM result,
  the trial reporting the last one;
* `--warmup cached --shared-recipe-cache DIR`: the variable is ignored there (no Gaudi bridge, no
  recipes); the tool says so once, falls back to cold and scores the cold warmup it measured.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys

import optuna
import pytest

from .conftest import _say
from .test_realvllm import (  # the fixtures (vllm_env, one server at a time) come from conftest.py
    BOOT_LIMIT_S,
    KV_BYTES,
    SERVED,
    SPACE,
    VOCAB,
    bucket_tuner,
    server_env,
)

pytestmark = [
    pytest.mark.realvllm,
    pytest.mark.xdist_group("realvllm"),  # one worker runs the tier, in file order (the scheduler in tests/conftest.py)
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc"),
]

PROMPTS = 16


def test_load_sweep_and_cached_warmup_fallback_in_one_boot(vllm_env, tmp_path, request):
    results, recipes = tmp_path / "results", tmp_path / "recipes"
    cmd = [*bucket_tuner(), "tune", "--space", str(SPACE), "--backend", "vllm",
           "--vllm-command", str(vllm_env.vllm), "--model", str(vllm_env.model), "--served-model-name", SERVED,
           "--server-args", f"--load-format dummy --kv-cache-memory-bytes {KV_BYTES}",
           "--n-trials", "1", "--results", str(results), "--vocab-size", str(VOCAB),
           "--dataset-name", "fixed", "--random-input-len", "64", "--random-output-len", "16",
           "--num-prompts", str(PROMPTS), "--num-warmups", "2", "--load-sweep", "concurrency=1,8",
           "--warmup", "cached", "--shared-recipe-cache", str(recipes),
           "--boot-timeout", str(BOOT_LIMIT_S), "--warmup-timeout", str(BOOT_LIMIT_S),
           "--sampler-seed", "2", "--no-seed-defaults"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env(tmp_path), cwd=tmp_path, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # the tuner stops its server on the way out
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"tune did not finish in 600 s\n{out}\n{err}")
    assert proc.returncode == 0, f"rc={proc.returncode}\n{out}\n{err}"
    study_dir = results / "vllm-cpu"
    result = json.loads((study_dir / "trials" / "0000" / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]

    # the load sweep: both points measured on the one server, the last one reported
    points = result["observed"]["load_sweep"]
    assert [p["point"] for p in points] == ["concurrency=1", "concurrency=8"]
    assert [p["selected"] for p in points] == [False, True]
    for p, limit in zip(points, (1, 8)):
        assert p["status"] == "ok" and p["metrics"]["completed"] == PROMPTS and p["metrics"]["failed"] == 0
        assert p["metrics"]["total_output_tokens"] == PROMPTS * 16
        bench = json.loads(open(p["bench_json"]).read())
        assert bench["max_concurrency"] == limit and bench["completed"] == PROMPTS
        assert bench["max_concurrent_requests"] <= limit  # the exact peak the client held in flight
    assert result["metrics"] == points[1]["metrics"]
    rows = list(csv.DictReader((study_dir / "load_sweep.csv").open()))
    assert [(r["point"], r["selected"]) for r in rows] == [("concurrency=1", "False"), ("concurrency=8", "True")]

    # the cached warmup: said once to be impossible here, the cold one measured and scored instead
    said = " ".join(err.split())
    assert "--warmup cached:" in said and "falling back to the cold warmup" in said, err
    assert said.count("ignores PT_HPU_RECIPE_CACHE_CONFIG") == 1, err
    study = optuna.load_study(study_name="vllm-cpu", storage=f"sqlite:///{study_dir / 'study.db'}")
    (t,) = study.trials
    obs = t.user_attrs["observed"]
    assert obs["warmup_source"] == "launch to ready" and obs["warmup_cold_s"] == obs["warmup_s"]
    assert obs.get("warmup_cached_s") is None and "recipe_cache_hit_rate" not in obs
    assert t.values[2] == obs["warmup_s"]
    assert study.user_attrs["warmup_mode"] == "cold"
    assert not any(p.is_file() for p in recipes.rglob("*")), "the CPU server wrote recipes?"
    assert "PT_HPU_RECIPE_CACHE_CONFIG" not in result["env"]
    _say(request)("load sweep on vLLM CPU: " + "; ".join(
        f"{p['point']} {p['metrics']['output_throughput']:.0f} tok/s, p99 TTFT {p['metrics']['p99_ttft_ms']:.0f} ms"
        for p in points))
