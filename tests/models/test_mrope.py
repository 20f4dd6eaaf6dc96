"""M-RoPE read from a config as each server reads it: vLLM 0.32 (and vllm-gaudi on it) finds an
`mrope_section` in the top-level config, its text config or an Omni thinker's; the fork looks at the
top-level `rope_scaling` only. Which servers then build the fork's vision buckets follows from it.

Checked against the genuine vLLM 0.32 once (its venv, `uses_mrope(AutoConfig.from_pretrained(...))`):
the catalogue's abridged Qwen3-VL-8B config reads False there too, and True with the text config's
`rope_scaling` {mrope_interleaved, mrope_section [24, 20, 20], rope_type default} of the published file.
"""

from __future__ import annotations

import copy
import json

import pytest

from tuner.buckets.vision import build_vision
from tuner.models import catalogue, read_config, shape_from_config
from tuner.perfmodel.vision import vision_inputs

QWEN3_VL = json.loads(catalogue()["Qwen/Qwen3-VL-8B-Instruct"].read_text())
SECTION = {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}


def _published_qwen3_vl() -> dict:
    """The catalogue's abridged copy with the text config's rope_scaling the published file has."""
    cfg = copy.deepcopy(QWEN3_VL)
    cfg["text_config"]["rope_scaling"] = dict(SECTION)
    return cfg


def _qwen25_vl_flat() -> dict:
    """Qwen2.5-VL as published: one flat config, rope_scaling at the top."""
    text = copy.deepcopy(QWEN3_VL["text_config"])
    text.pop("model_type")
    return {**text, "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "vision_config": {"depth": 32, "hidden_size": 1280, "patch_size": 14, "spatial_merge_size": 2,
                              "temporal_patch_size": 2, "out_hidden_size": 4096}}


def _shape(cfg: dict):
    return shape_from_config(read_config(cfg), "probe", "test")


@pytest.mark.parametrize(("config", "vllm", "fork"), [
    (QWEN3_VL, False, False),  # the abridged copy: no section anywhere (vLLM 0.32 reads it so as well)
    (_published_qwen3_vl(), True, False),  # nested in text_config: vLLM finds it, the fork does not
    (_qwen25_vl_flat(), True, True),
])
def test_mrope_is_read_where_each_server_looks(config, vllm, fork):
    shape = _shape(config)
    assert (shape.mrope, shape.fork_mrope) == (vllm, fork)


def test_sections_under_rope_parameters_per_layer_type_and_the_older_name_count_for_vllm():
    cfg = _published_qwen3_vl()
    del cfg["text_config"]["rope_scaling"]
    cfg["text_config"]["rope_parameters"] = {"full_attention": {"rope_type": "default", "mrope_section": [24, 20, 20]},
                                             "sliding_attention": {"rope_type": "default"}}
    assert _shape(cfg).mrope
    cfg["text_config"]["rope_parameters"] = {"rope_type": "default", "xdrope_section": [16, 16, 16, 16]}
    assert _shape(cfg).mrope
    cfg["text_config"]["rope_parameters"] = {"rope_type": "default", "mrope_section": None}  # not a list: no
    assert not _shape(cfg).mrope


def test_the_fork_builds_vision_buckets_for_a_top_level_section_only():
    """A Qwen3-VL config read right is still no M-RoPE model to the fork (its section is nested; no fork
    release registers Qwen3-VL either), while Qwen2.5-VL's flat config gets the fork's pixel buckets;
    vllm-gaudi keys its table by model_type and warms both."""
    for cfg, fork_active in ((_published_qwen3_vl(), False), (_qwen25_vl_flat(), True)):
        shape = _shape(cfg)
        for release, active in (("fork-1.22", fork_active), ("gaudi-0.26.0", True)):
            inp, _ = vision_inputs(shape, release, {}, {"image": {"count": 1}})
            assert build_vision(release, inp).active is active, (cfg["model_type"], release)
