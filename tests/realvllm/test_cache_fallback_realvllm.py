"""`tune --warmup cached --shared-recipe-cache DIR` on a genuine vLLM (CPU): the variable is ignored
there (no Gaudi bridge, no recipes). The tool says so once, falls back to cold, and the study runs
end to end with every warmup measured cold. One server start (~40 s)."""

from __future__ import annotations

import json
import subprocess
import sys

import optuna
import pytest

from ..conftest import ROOT
from .test_realvllm import (  # noqa: F401  (fixtures: the env, one server at a time)
    BOOT_LIMIT_S,
    KV_BYTES,
    SERVED,
    VOCAB,
    _one_server_at_a_time,
    bucket_tuner,
    server_env,
    vllm_env,
)

pytestmark = [
    pytest.mark.realvllm,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc"),
]


def test_tune_warmup_cached_falls_back_to_cold(vllm_env, tmp_path):  # noqa: F811 (a fixture)
    results, recipes = tmp_path / "results", tmp_path / "recipes"
    cmd = [*bucket_tuner(), "tune", "--space", str(ROOT / "search_spaces" / "vllm-cpu.yaml"), "--backend", "vllm",
           "--vllm-command", str(vllm_env.vllm), "--model", str(vllm_env.model), "--served-model-name", SERVED,
           "--server-args", f"--load-format dummy --kv-cache-memory-bytes {KV_BYTES}",
           "--n-trials", "1", "--results", str(results), "--vocab-size", str(VOCAB),
           "--dataset-name", "fixed", "--random-input-len", "32", "--random-output-len", "8",
           "--num-prompts", "8", "--max-concurrency", "4", "--num-warmups", "1",
           "--boot-timeout", str(BOOT_LIMIT_S), "--warmup-timeout", str(BOOT_LIMIT_S), "--no-seed-defaults",
           "--warmup", "cached", "--shared-recipe-cache", str(recipes)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=server_env(tmp_path), cwd=tmp_path,
                          timeout=900)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    err = " ".join(proc.stderr.split())
    assert "--warmup cached:" in err and "falling back to the cold warmup" in err, proc.stderr
    assert err.count("ignores PT_HPU_RECIPE_CACHE_CONFIG") == 1, proc.stderr  # said once
    study = optuna.load_study(study_name="vllm-cpu", storage=f"sqlite:///{results / 'vllm-cpu' / 'study.db'}")
    (t,) = study.trials
    obs = t.user_attrs["observed"]
    assert t.user_attrs["status"] == "ok", t.user_attrs.get("reason")
    assert obs["warmup_source"] == "launch to ready" and obs["warmup_cold_s"] == obs["warmup_s"]
    assert obs.get("warmup_cached_s") is None and "recipe_cache_hit_rate" not in obs
    assert t.values[2] == obs["warmup_s"]  # scored by the cold warmup it measured
    assert study.user_attrs["warmup_mode"] == "cold"
    assert not any(p.is_file() for p in recipes.rglob("*")), "the CPU server wrote recipes?"
    result = json.loads((results / "vllm-cpu" / "trials" / "0000" / "result.json").read_text())
    assert "PT_HPU_RECIPE_CACHE_CONFIG" not in result["env"]
