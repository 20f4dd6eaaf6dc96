"""PT_HPU_RECIPE_CACHE_CONFIG values, the cache manifest and when a cache fits a deployment."""

from __future__ import annotations

import json

import pytest

from tuner.recipecache.manifest import (
    Manifest,
    RecipeCacheError,
    format_value,
    is_compatible,
    parse_value,
    read_manifest,
    release_change_note,
    write_manifest,
)
from tuner.sim.recipe_cache import RecipeCache


def test_value_round_trip_and_the_guides_quoted_form():
    cfg = parse_value("/cache/llama,False,4096")
    assert (cfg.path, cfg.delete, cfg.max_mb) == ("/cache/llama", False, 4096)
    assert cfg.value() == "/cache/llama,False,4096"
    # the guide writes '/tmp/llama3_8b_recipe_cache/',True,8192 (the shell drops the quotes)
    assert parse_value("'/tmp/llama3_8b_recipe_cache/',True,8192").path == "/tmp/llama3_8b_recipe_cache/"
    assert parse_value("/c,true,1").delete is True
    assert format_value("/c", True, 16) == "/c,True,16"


@pytest.mark.parametrize("value, names", [
    ("", "empty"),
    ("/c,False", "3 comma-separated parts"),
    ("/c,False,8,9", "got 4"),
    (",False,8", "path (part 1)"),
    ("/c,maybe,8", "delete flag (part 2) 'maybe'"),
    ("/c,False,lots", "max size (part 3) 'lots'"),
    ("/c,False,0", "must be > 0"),
])
def test_bad_values_name_the_bad_part(value, names):
    with pytest.raises(RecipeCacheError, match=r"^[^\n]+$") as err:
        parse_value(value)
    assert names in str(err.value)


@pytest.mark.parametrize("path", ["/a,b", "/with space", "/q'uote"])
def test_paths_the_variable_or_an_env_file_cannot_carry_are_refused(path):
    with pytest.raises(RecipeCacheError, match="cannot be written"):
        format_value(path, False, 8)


def test_the_simulator_reads_the_same_format(tmp_path):
    cache = RecipeCache.from_env(f"{tmp_path}/r,True,64")
    assert (cache.path, cache.delete, cache.max_mb) == (tmp_path / "r", True, 64.0)
    assert RecipeCache.from_env(f"{tmp_path}/r,perhaps,64") is None  # malformed: no cache
    assert RecipeCache.from_env(None) is None


MANIFEST = Manifest(release="fork-1.21.2", device="gaudi2", model="meta-llama/Llama-3.1-8B-Instruct", dtype="bf16",
                    tp=1, kv_blocks=4111, software_version="0.7.2+gaudi1212", recipes=188, size_bytes=376 * 2**20)
DEPLOY = dict(release="fork-1.21.2", device="gaudi2", model="meta-llama/Llama-3.1-8B-Instruct", dtype="bf16", tp=1,
              kv_blocks=4111, software_version="0.7.2+gaudi1212")


def test_the_same_deployment_is_compatible():
    assert is_compatible(MANIFEST, **DEPLOY)
    assert is_compatible(MANIFEST, **dict(DEPLOY, dtype="bfloat16"))  # same type, vLLM's spelling


@pytest.mark.parametrize("change, reason", [
    ({"kv_blocks": 3900}, "KV blocks: cache 4111, deployment 3900"),
    ({"dtype": "fp8"}, "data type: cache bf16, deployment fp8"),
    ({"tp": 2}, "tensor parallelism: cache 1, deployment 2"),
    ({"device": "gaudi3"}, "device: cache gaudi2, deployment gaudi3"),
    ({"software_version": "0.9.0.1+gaudi122", "release": "fork-1.22"}, "software version: cache 0.7.2+gaudi1212"),
])
def test_each_part_of_the_recipe_key_invalidates_the_cache(change, reason):
    result = is_compatible(MANIFEST, **dict(DEPLOY, **change))
    assert not result and reason in result.describe()


def test_unknown_kv_blocks_are_named_as_the_caveat():
    result = is_compatible(MANIFEST, **dict(DEPLOY, kv_blocks=None))
    assert result.ok and "4111 blocks" in result.reasons[-1]


def test_manifest_file_round_trip_and_errors(tmp_path):
    assert read_manifest(tmp_path) is None
    write_manifest(tmp_path, MANIFEST)
    assert read_manifest(tmp_path) == MANIFEST
    (tmp_path / "manifest.json").write_text(json.dumps({"release": "fork-1.22"}))
    with pytest.raises(RecipeCacheError, match="lacks device, model, dtype, tp, kv_blocks|lacks software_version"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RecipeCacheError, match="not a readable manifest"):
        read_manifest(tmp_path)


def test_release_change_note():
    assert release_change_note(["fork-1.21.2", "fork-1.21.2"]) is None
    note = release_change_note(["fork-1.21.2", "fork-1.22"])
    assert "fork-1.21.2, fork-1.22" in note and "invalid" in note
