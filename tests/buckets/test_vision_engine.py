"""The vision warm-up's place in each release's warm-up, and what a release without one reports.

The bucket lists, steps and log lines are checked by the upstream rows (test_vision_vectors.py); the
placement is read from each release's HPUModelRunner.warmup_model (cited per test), which the rows do not run.
"""

from __future__ import annotations

import pytest

from tuner.buckets import BucketConfigError, profiles
from tuner.buckets.vision import VisionInputs, build_vision, releases, table_entry

QWEN3_VL = dict(model_type="qwen3_vl", patch_size=16, mm_limits={"image": 1},
                limit_mm_per_prompt={"image": {"count": 1}})


def test_only_the_releases_with_vision_code_have_a_vision_phase():
    assert set(releases()) == {"gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main", "fork-1.22", "fork-1.23", "fork-main"}
    assert set(releases()) <= set(profiles())
    for name in ("gaudi-0.10.1", "fork-1.21.2", "fork-1.17"):  # no VisionBuckets / HPUVisionBucketManager there
        plan = build_vision(name, VisionInputs(**QWEN3_VL))
        assert not plan.active and plan.buckets is None and not plan.steps


@pytest.mark.parametrize("lazy,eager,outside,where", [
    (False, False, None, "inside PT_COMPILE_ONLY_MODE"),
    (True, False, None, "outside PT_COMPILE_ONLY_MODE (lazy or eager mode)"),
    (False, True, None, "outside PT_COMPILE_ONLY_MODE (lazy or eager mode)"),
    (False, False, "true", "outside PT_COMPILE_ONLY_MODE (VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY)"),
    (False, False, " 1 ", "outside PT_COMPILE_ONLY_MODE (VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY)"),
    (False, False, "yes", "inside PT_COMPILE_ONLY_MODE"),
])
def test_gaudi_main_places_the_phase_by_mode_and_the_outside_variable(lazy, eager, outside, where):
    # vllm_gaudi/v1/worker/hpu_model_runner.py@091bbadd warmup_model: outside compile-only when
    # `not use_torch_compile or mm_warmup_outside` (envs.py: .strip().lower() in ("1", "true")).
    env = {} if outside is None else {"VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY": outside}
    plan = build_vision("gaudi-main", VisionInputs(**QWEN3_VL, env=env, lazy=lazy, enforce_eager=eager))
    assert plan.placement.startswith("first phase of the warm-up")
    assert where in plan.placement


def test_gaudi_0_26_does_not_read_the_outside_variable():
    # v0.26.0 warmup_model: inside compile-only whenever torch.compile is used (no VLLM_MM_WARMUP_OUTSIDE_...)
    plan = build_vision("gaudi-0.26.0", VisionInputs(**QWEN3_VL, env={"VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY": "1"}))
    assert "inside PT_COMPILE_ONLY_MODE" in plan.placement


def test_gaudi_0_15_always_warms_outside_compile_only():
    # v0.15.1 warmup_model: "Most model's multimodal embedding has to be run without COMPILE ONLY mode."
    assert "outside PT_COMPILE_ONLY_MODE" in build_vision("gaudi-0.15.1", VisionInputs(**QWEN3_VL)).placement


def test_skip_warmup_keeps_the_bucket_line_but_warms_nothing():
    plan = build_vision("gaudi-main", VisionInputs(**QWEN3_VL, skip_warmup=True))
    assert plan.buckets == [196, 256, 441, 480, 576, 900, 1156] and not plan.steps
    assert plan.log_lines == ["Multimodal bucket : [196, 256, 441, 480, 576, 900, 1156]"]
    assert plan.placement.startswith("skipped")


def test_fork_warms_after_the_prompt_graphs_and_not_when_eager():
    # vllm-fork hpu_model_runner.py warmup_graphs(prompt) -> _warmup_multimodal_graph, under `not enforce_eager`
    inp = dict(model_class="Qwen2_5_VLForConditionalGeneration", uses_mrope=True, max_prompt_shape=4096)
    plan = build_vision("fork-main", VisionInputs(**inp))
    assert plan.placement.startswith("after the prompt graphs") and len(plan.steps) == 7
    eager = build_vision("fork-main", VisionInputs(**inp, enforce_eager=True))
    assert eager.buckets == plan.buckets and not eager.steps and "enforce_eager" in eager.placement


def test_newest_towers_warm_nothing_without_resolutions_and_say_so():
    for model_type in ("qwen3_5", "qwen3_5_moe", "kimi_k25", "gemma4"):
        key, batch, buckets = table_entry("gaudi-main", model_type)
        assert (batch, buckets) == (False, ())
        plan = build_vision("gaudi-main", VisionInputs(model_type=model_type, mm_limits={"image": 4},
                                                       limit_mm_per_prompt={"image": {"count": 4}}))
        assert plan.buckets == [] and not plan.steps
        assert any("will recompile on the first request at each resolution" in w for w in plan.warnings)
        warmed = build_vision("gaudi-main", VisionInputs(model_type=model_type, mm_limits={"image": 4},
                                                         limit_mm_per_prompt={"image": {"count": 4}},
                                                         env={"VLLM_MULTIMODAL_RESOLUTIONS": "1024x768x1-4"}))
        assert [(s.width, s.height, s.count) for s in warmed.steps] == [(1024, 768, n) for n in (1, 2, 3, 4)]


def test_an_image_limit_is_what_turns_the_image_warm_up_on():
    plan = build_vision("gaudi-main", VisionInputs(model_type="qwen3_vl", mm_limits={"image": 999, "video": 999}))
    assert not plan.steps
    assert any("only when --limit-mm-per-prompt names 'image'" in w for w in plan.warnings)


def test_a_bad_resolution_names_the_variable_and_the_entry():
    with pytest.raises(BucketConfigError) as info:
        build_vision("gaudi-main", VisionInputs(model_type="qwen3_vl",
                                                env={"VLLM_MULTIMODAL_RESOLUTIONS": "1024x768x2x3"}))
    assert info.value.variable == "VLLM_MULTIMODAL_RESOLUTIONS" and "'1024x768x2x3'" in str(info.value)
