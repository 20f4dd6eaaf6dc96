"""Figures users measured on Gaudi and wrote down (not logs), against the prediction from the model's own config:
tests/data/model-configs-reported/SOURCES.md says where each comes from."""

import json
from pathlib import Path

import pytest

from tuner.perfmodel import predict_startup
from tuner.perfmodel.costs import ServerInputs, SimSettings

REPORTED = Path(__file__).resolve().parents[1] / "data" / "model-configs-reported"


@pytest.fixture(scope="module")
def gemma4_31b(tmp_path_factory) -> str:
    """google/gemma-4-31B in BF16: the NVFP4 checkpoint's config without its quantization block."""
    config = json.loads((REPORTED / "nvidia__Gemma-4-31B-IT-NVFP4.json").read_text())
    config.pop("quantization_config")
    folder = tmp_path_factory.mktemp("gemma-4-31B")
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.mark.parametrize("tp, max_model_len, max_num_seqs, reported", [
    (1, 8192, 128, 65_000),  # "TP=1 ... leaves only ~65K KV-cache tokens"
    (2, 131072, 32, 185_000),  # "TP=2 shards weights and gives 185K KV tokens"
])
def test_gemma4_31b_kv_tokens_on_gaudi3_as_vllm_gaudi_pr_1596_reports(gemma4_31b, tp, max_model_len, max_num_seqs,
                                                                      reported):
    sim = SimSettings(model=gemma4_31b, device="gaudi3", tp=tp, gpu_memory_utilization=0.9)
    pred = predict_startup("gaudi-main", sim, ServerInputs(max_model_len=max_model_len, max_num_seqs=max_num_seqs),
                           {})
    assert pred.failure is None
    tokens = pred.num_blocks * pred.config.block_size
    # 50 sliding layers of 16 KV heads x 256 and 10 global ones of 4 x 512, K and V each: 901,120 bytes a token at TP 1;
    # the report rounds ("~65K", "185K"), so within 3%
    assert tokens == pytest.approx(reported, rel=0.03)
