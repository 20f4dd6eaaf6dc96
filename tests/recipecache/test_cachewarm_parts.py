"""The pieces of `export --with-cache` that need no boot: the study's backend rebuilt with the trial's
extra arguments, the dtype, the hit rate arithmetic and the report wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.recipecache.prepare import Boot, CacheReport, CacheWarmError, backend_from_study, dtype_of, shapes_compiled
from tuner.serve.backends import Backend

SERVER = {"max_num_seqs": 16, "max_model_len": 1024}


def recorded(backend: Backend) -> list[str]:
    return backend.argv(SERVER, "127.0.0.1", 41234)


@pytest.mark.parametrize("startup", [None, 0.002])
def test_backend_rebuilt_from_the_study_keeps_the_trials_extra_arguments(startup):
    original = Backend(kind="sim", model="meta-llama/Llama-3.1-8B-Instruct", sim_release="fork-1.21.2",
                       time_scale=0.2, startup_time_scale=startup, extra_args=["--quantization", "fp8"])
    rebuilt = backend_from_study(original.describe(), recorded(original))
    assert rebuilt.extra_args == ["--quantization", "fp8"]
    assert rebuilt.argv(SERVER, "127.0.0.1", 5) == original.argv(SERVER, "127.0.0.1", 5)
    assert dtype_of(SERVER, recorded(original)) == "fp8"


def test_vllm_backend_and_plain_bf16():
    original = Backend(kind="vllm", model="m", vllm_command=["/opt/venv/bin/vllm"], served_model_name="srv")
    rebuilt = backend_from_study(original.describe(), recorded(original))
    assert rebuilt.argv(SERVER, "h", 1) == original.argv(SERVER, "h", 1)
    assert dtype_of(SERVER, recorded(original)) == "bf16"
    assert dtype_of({"kv_cache_dtype": "fp8_inc"}, []) == "bf16+fp8kv"  # the KV tensor's type is in the graphs
    with pytest.raises(CacheWarmError, match="does not record its backend"):
        backend_from_study({}, [])


def testshapes_compiled_ignores_the_capture_passes():
    steps = {"Prompt": (23, 23), "Decode": (165, 165), "Graph/Prompt": (23, 23), "Graph/Decode": (165, 165)}
    assert shapes_compiled(steps) == 188
    assert shapes_compiled({"prompt": (4, 4), "decode": (6, 6)}) == 10


def boot(delete: bool, added: int, shapes: int) -> Boot:
    return Boot(delete=delete, warmup_s=10.0, kv_blocks=100, software_version="v", shapes_compiled=shapes,
                recipes_before=0 if delete else 50, recipes_added=added, log_path=Path("x.log"))


def test_hit_rate_and_the_words_of_a_miss():
    assert boot(False, 0, 50).hit_rate == 1.0
    assert boot(False, 50, 50).hit_rate == 0.0
    assert boot(False, 5, 50).hit_rate == pytest.approx(0.9)
    miss = CacheReport(folder=Path("/c"), value="/c,False,8", boots=[boot(False, 5, 50)])
    assert not miss.verified
    text = "\n".join(miss.lines())
    assert "MISS: the delete=False boot compiled 5 of 50 shapes again (hit rate 90%)" in text
    assert "verified" not in text
    hit = CacheReport(folder=Path("/c"), value="/c,False,8", boots=[boot(True, 50, 50), boot(False, 0, 50)])
    assert hit.verified and "verified: every shape was a cache hit" in "\n".join(hit.lines())
