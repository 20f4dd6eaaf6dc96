"""`export --with-cache DIR` end to end on the simulator: a tiny study, the pick booted twice through
the trial launcher (delete=True then delete=False), the manifest, the env file pointing at DIR; a
configuration with another KV block count misses that cache and the verification says so."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import optuna
import pytest

from tuner.recipecache.manifest import Manifest, parse_value, read_manifest

from .studies import cli, tune_enqueued

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

SPACE = {
    "name": "warm",
    "release": "fork-1.21.2",
    "server": {"max_model_len": 512, "block_size": 128, "max_num_batched_tokens": 2048, "max_num_seqs": 4},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    # graph memory decides the KV block count: two trials whose recipes cannot be shared
    "parameters": {"VLLM_GRAPH_RESERVED_MEM": {"type": "categorical", "choices": [0.1, 0.3]}},
}
FAST = ["--num-prompts", "8", "--num-warmups", "1", "--max-concurrency", "4", "--random-input-len", "100",
        "--random-output-len", "8", "--time-scale", "0.2", "--startup-time-scale", "0.002",
        "--slo", "p99_ttft_ms=600000", "--warmup-budget", "50000", "--allow-recompiles"]


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("warm")
    run = tune_enqueued(root, SPACE, [{"VLLM_GRAPH_RESERVED_MEM": mem} for mem in (0.1, 0.3)], *FAST)
    assert run.returncode == 0, run.stderr
    return root


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under `folder` (and its siblings' names): content digest and modification time."""
    files = {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
             for p in sorted(folder.rglob("*")) if p.is_file()}
    files["<siblings>"] = (",".join(sorted(p.name for p in folder.parent.iterdir())), 0)
    return files


def trials(root: Path) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="warm", storage=f"sqlite:///{root / 'results/warm/study.db'}")
    return sorted(study.trials, key=lambda t: t.params["VLLM_GRAPH_RESERVED_MEM"])


def test_prepare_verify_and_the_env_file(study_dir):
    low, high = trials(study_dir)
    cache, env_file = study_dir / "cache", study_dir / "warm.env"
    run = cli("export", "warm", "--results", str(study_dir / "results"), "--trial", str(low.number),
              "--with-cache", str(cache), "-o", str(env_file))
    assert run.returncode == 0, run.stderr
    out = run.stdout
    print(out)
    assert "prepare (delete=True)" in out and "verify (delete=False)" in out and "verified:" in out
    m = read_manifest(cache)
    assert isinstance(m, Manifest)
    assert (m.release, m.device, m.dtype, m.tp) == ("fork-1.21.2", "gaudi2", "bf16", 1)
    assert m.kv_blocks == low.user_attrs["observed"]["kv_blocks"]  # what the trial's own log said
    assert m.software_version == "0.7.2+gaudi1212" and m.hit_rate == 1.0
    recipes = [p for p in cache.iterdir() if p.name != "manifest.json"]
    assert m.recipes == len(recipes) > 0 and m.size_bytes == sum(p.stat().st_size for p in recipes)
    assert 0 < m.cached_warmup_s < m.cold_warmup_s
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if line and line[0] != "#")
    cfg = parse_value(values["PT_HPU_RECIPE_CACHE_CONFIG"])
    assert Path(cfg.path) == cache.resolve() and cfg.delete is False
    assert f"{m.kv_blocks} KV blocks" in env_file.read_text()
    # both boots' logs are kept beside the study
    assert len(list((study_dir / "results/warm/cache-logs").glob("cache-*.log"))) == 2


def test_other_memory_settings_miss_that_cache(study_dir):
    low, high = trials(study_dir)
    cache = study_dir / "cache"
    if read_manifest(cache) is None:  # run alone: prepare it first
        assert cli("export", "warm", "--results", str(study_dir / "results"), "--trial", str(low.number),
                   "--with-cache", str(cache), "-o", str(study_dir / "warm.env")).returncode == 0
    before = json.loads((cache / "manifest.json").read_text())
    files_before = snapshot(cache)
    assert high.user_attrs["observed"]["kv_blocks"] != before["kv_blocks"]
    run = cli("export", "warm", "--results", str(study_dir / "results"), "--trial", str(high.number),
              "--with-cache", str(cache), "--reuse-cache", "-o", str(study_dir / "other.env"))
    out = run.stdout + run.stderr
    print(out)
    assert run.returncode == 2
    assert "MISS" in out and "verified:" not in out
    assert f"KV blocks: cache {before['kv_blocks']}, deployment {high.user_attrs['observed']['kv_blocks']}" in out
    assert "hit rate 0%" in out
    assert "does not fit trial" in run.stderr and not (study_dir / "other.env").exists()
    assert json.loads((cache / "manifest.json").read_text()) == before  # never rewritten to claim a fit
    # the verification booted on a copy: the refused folder is byte-identical, nothing left beside it
    assert snapshot(cache) == files_before


def test_a_reused_cache_is_measured_against_the_trials_own_cold_warmup(study_dir):
    """A cache another trial prepared (its cold warmup in the manifest): the ratio and the manifest that
    a fitting trial ships carry that trial's own cold warmup from the study."""
    low, _ = trials(study_dir)
    cache = study_dir / "cache-reuse"
    assert cli("export", "warm", "--results", str(study_dir / "results"), "--trial", str(low.number),
               "--with-cache", str(cache), "-o", str(study_dir / "a.env")).returncode == 0
    m = json.loads((cache / "manifest.json").read_text())
    m["cold_warmup_s"], m["cold_warmup_source"] = 999.0, "another trial's delete=True boot"  # as if
    (cache / "manifest.json").write_text(json.dumps(m))
    recipes_before = {p.name for p in cache.iterdir()}
    run = cli("export", "warm", "--results", str(study_dir / "results"), "--trial", str(low.number),
              "--with-cache", str(cache), "--reuse-cache", "-o", str(study_dir / "b.env"))
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    own = low.user_attrs["observed"]["warmup_cold_s"]
    assert f"the cold {own:.0f} s (trial {low.number}'s own cold warmup in the study, measured" in out, out
    assert "999" not in out
    shipped = read_manifest(cache)
    assert shipped.cold_warmup_s == own and "own cold warmup in the study" in shipped.cold_warmup_source
    assert {p.name for p in cache.iterdir()} == recipes_before  # the verified recipes, no more
    assert f"s cold (trial {low.number}'s own" in (study_dir / "b.env").read_text()


def test_reuse_of_an_empty_folder_is_refused_before_anything_boots(study_dir, tmp_path):
    low, _ = trials(study_dir)
    run = cli("export", "warm", "--results", str(study_dir / "results"), "--trial", str(low.number),
              "--with-cache", str(tmp_path / "none"), "--reuse-cache")
    assert run.returncode == 2 and "holds no recipe to reuse" in run.stderr
    assert not (tmp_path / "none").exists()
