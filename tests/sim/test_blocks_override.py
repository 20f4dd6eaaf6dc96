"""--num-gpu-blocks-override: the engine profiles its memory, logs the count and then sets the blocks it was told
(the fork's llm_engine, vLLM v1's kv_cache_utils); the decode buckets follow the told count. The simulator plays it,
the prediction reads it from a space or --server-args, and a log of it is read with the told count."""

from __future__ import annotations

import pytest

from tuner.explain import explain
from tuner.perfmodel import predict_startup
from tuner.perfmodel.target import DeviceModel, ModelTarget, predict
from tuner.sim.serve import build_parser, settings_from_args
from tuner.sim.startup import startup_events
from tuner.space.schema import SearchSpace, TrialSettings


@pytest.mark.parametrize("release", ["gaudi-main", "fork-1.21.2"])
def test_the_told_blocks_are_the_servers_and_its_log_says_both(release):
    sim, inputs = settings_from_args(build_parser().parse_args(
        ["meta-llama/Llama-3.1-8B-Instruct", "--release", release, "--max-model-len", "4096", "--max-num-seqs", "16",
         "--num-gpu-blocks-override", "512"]))
    pred = predict_startup(release, sim, inputs, {})
    profiled, told = pred.blocks_override
    assert told == 512 < profiled and pred.memory.num_blocks == pred.config.num_hpu_blocks == 512
    assert max(b[-1] for b in pred.plan.decode) <= 512  # the decode buckets fit the told cache
    lines = [e[3] for e in startup_events(pred) if e[0] == "log"]
    assert f"Overriding num_gpu_blocks={profiled} with num_gpu_blocks_override=512" in lines
    assert explain(lines).memory.kv_blocks == 512  # read back with the told count, not the profiled one


def test_a_space_or_server_args_override_is_predicted():
    space = SearchSpace.from_dict({"name": "o", "server": {"max_model_len": 4096, "num_gpu_blocks_override": 300},
                                   "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}}})
    assert space.server["num_gpu_blocks_override"] == 300
    target = ModelTarget("gaudi-main", DeviceModel(model="meta-llama/Llama-3.1-8B-Instruct"))
    settings = TrialSettings(server={**space.server, "max_num_seqs": 8}, env={}, params={})
    assert predict(target, settings).memory.num_blocks == 300
    told = ModelTarget("gaudi-main", DeviceModel(model="meta-llama/Llama-3.1-8B-Instruct",
                                                 server_args=(("num_gpu_blocks_override", 200),)))
    assert predict(told, settings).memory.num_blocks == 200  # --server-args come last and win
