"""A plan shares bucket work between configurations whose lists coincide (vllm-gaudi's combined lists and
the 2-D extension's prompt lists memoised by what they read, buckets/memo.py; one SharedBuckets per
distinct list with its arrays and padding index, perfmodel/shapes.py): the shared path gives exactly what
the unshared one gives, plan for plan, and nothing a configuration does at runtime reaches the list the
others share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.buckets import get_profile, memo
from tuner.load.workload import RandomWorkload
from tuner.perfmodel import Corrections, bulk
from tuner.perfmodel.bulk import BulkModel
from tuner.perfmodel.fastserving import FastServing, _pad_copy
from tuner.perfmodel.shapes import SharedBuckets
from tuner.perfmodel.target import DeviceModel, LoadShape, ModelTarget
from tuner.plan.build import make_plan
from tuner.plan.evaluate import Evaluator, Limits
from tuner.plan.points import space_points
from tuner.space.schema import SearchSpace

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
GAUDI_SPACES = ("demo", "fork-1.21-linear", "fork-1.22-exponential", "vllm-gaudi", "vllm-gaudi-fitted")


@pytest.fixture
def unshared(monkeypatch):
    """The path without any sharing: every combination computed afresh, every build its own lists."""
    def switch():
        monkeypatch.setattr(memo, "ENABLED", False)
        monkeypatch.setattr(bulk, "SHARE_LISTS", False)
        memo.clear()
    return switch


def _plan(name: str, points: int, load: LoadShape):
    space = SearchSpace.load(SPACES / f"{name}.yaml")
    space.check_release(space.release)
    tgt = ModelTarget(space.release, DeviceModel(), workload=RandomWorkload(512, 128, 0.5, num_prompts=40), load=load)
    return make_plan(space, Evaluator(tgt, Limits(warmup_budget_s=600.0)), points)


def _as_compared(plan) -> list:
    return [(p.values, p.verdict, p.reason, p.detail, p.vector, p.best, p.worst, p.figures) for p in plan.points]


@pytest.mark.parametrize("name", GAUDI_SPACES)
def test_a_plan_with_shared_builds_is_the_plan_without(name, unshared):
    # tune's default load (a closed loop), and an open loop (whose clock runs are slow: two small spaces)
    loads = [LoadShape(max_concurrency=16)]
    if name in ("demo", "fork-1.22-exponential"):
        loads.append(LoadShape(request_rate=6.5))
    n = 80 if name == "vllm-gaudi" else 30
    shared = [_plan(name, n, load) for load in loads]
    unshared()
    alone = [_plan(name, n, load) for load in loads]
    for a, b in zip(shared, alone):
        assert _as_compared(a) == _as_compared(b)  # every figure bit for bit, not approximately
        assert (a.front, a.could_be, a.picks) == (b.front, b.could_be, b.picks)
    if name == "vllm-gaudi":  # the padding-aware lists are the ones shared
        assert any(isinstance(p.prompt, SharedBuckets) for p in shared[0].evaluator.bulk._plans.values())
        assert not any(isinstance(p.prompt, SharedBuckets) for p in alone[0].evaluator.bulk._plans.values())


def test_shared_lists_keep_every_start_figure_and_log_line(unshared):
    space = SearchSpace.load(SPACES / "vllm-gaudi.yaml")
    tgt = ModelTarget(space.release, DeviceModel())
    settings = [space.settings_for(v) for v in space_points(space, max_points=60, seed=5).values]
    corrections = (Corrections(), Corrections(graph_mem=40.0, free_mem_offset_gib=-30.0, prompt_warmup=1.7))

    def starts():
        model = BulkModel(tgt)
        return [model.startup(s, c) for s in settings for c in corrections]

    first = starts()
    unshared()
    for a, b in zip(first, starts()):
        assert (a.failure is None) == (b.failure is None)
        if a.plan is not None:
            assert (a.plan.prompt, a.plan.decode, a.plan.log_lines, a.plan.warnings, a.plan.omitted_prompt) == (
                b.plan.prompt, b.plan.decode, b.plan.log_lines, b.plan.warnings, b.plan.omitted_prompt)
            assert [vars(s) for s in a.plan.settings] == [vars(s) for s in b.plan.settings]
        assert (a.num_blocks, a.warmup_seconds, a.step_sums, a.graphed_prompt, a.graphed_decode,
                a.prompt_graph_mem, a.decode_graph_mem) == (b.num_blocks, b.warmup_seconds, b.step_sums,
                                                           b.graphed_prompt, b.graphed_decode,
                                                           b.prompt_graph_mem, b.decode_graph_mem)


def test_a_memoised_combination_is_the_callers_own_list():
    space = SearchSpace.load(SPACES / "vllm-gaudi.yaml")
    settings = space.settings_for(space_points(space, max_points=1, seed=2).values[0])
    tgt = ModelTarget(space.release, DeviceModel())
    first = BulkModel(tgt, share_lists=False).startup(settings).plan
    expected = list(first.prompt)
    first.prompt.append((999, 999, 999))  # a caller that changes its plan (the engine adds runtime buckets)
    again = BulkModel(tgt, share_lists=False).startup(settings).plan
    assert again.prompt == expected and again.prompt is not first.prompt


def test_a_runtime_bucket_joins_the_copy_never_the_shared_list():
    """Padding a batch the warm-up did not prepare adds a fallback bucket to the padding copy of the plan
    (as the engine does); the shared list, and its index the next configuration pads through, stay as built."""
    profile = get_profile("gaudi-main")
    space = SearchSpace.load(SPACES / "vllm-gaudi.yaml")
    tgt = ModelTarget(space.release, DeviceModel())
    pred = BulkModel(tgt).startup(space.settings_for({"VLLM_BUCKETING_STRATEGY": "pad", "max_num_seqs": 64,
                                                      "gpu_memory_utilization": 0.9, "VLLM_GRAPH_RESERVED_MEM": 0.1,
                                                      "VLLM_DECODE_BS_BUCKET_PAD_PERCENT": 25,
                                                      "VLLM_PROMPT_QUERY_BUCKET_PAD_PERCENT": 25}))
    shared = pred.plan.prompt
    assert isinstance(shared, SharedBuckets)
    built = list(shared)
    plain = _pad_copy(pred.plan)
    plain.state.pop("shared_lists")  # the unshared path: the copy indexes its own list
    past = (max(b[0] for b in built) + 1, 128, 0)  # more prompts in one batch than any prepared bucket holds
    results = []
    for plan in (_pad_copy(pred.plan), plain, _pad_copy(pred.plan)):
        inside = profile.pad_prompt(plan, 1, 100, 0)  # prepared: found in the list
        beyond = profile.pad_prompt(plan, *past)  # a fallback bucket joins the copy
        again = profile.pad_prompt(plan, *past)  # now found among the copy's runtime buckets
        results.append((inside, beyond, again, list(plan.prompt)))
        assert beyond.warning and not again.warning and again.bucket == beyond.bucket
    assert results[0] == results[1] == results[2]
    assert list(shared) == built and shared.memo["pad_index"].size == len(built)
    assert shared.memo["pad_index"].find(results[0][1].bucket) != results[0][1].bucket


def test_fast_serving_on_shared_lists_is_fast_serving_on_plain_ones(unshared):
    space = SearchSpace.load(SPACES / "vllm-gaudi.yaml")
    tgt = ModelTarget(space.release, DeviceModel(), workload=RandomWorkload(512, 128, 0.5, num_prompts=40),
                      load=LoadShape(max_concurrency=16))
    settings = [space.settings_for(v) for v in space_points(space, max_points=40, seed=7).values]

    def figures():
        model, serving = BulkModel(tgt), FastServing(tgt)
        preds = [model.startup(s) for s in settings]
        return [serving.predict(p) for p in preds if p.failure is None]

    first = figures()
    unshared()
    assert figures() == first and first
