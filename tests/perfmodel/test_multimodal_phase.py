"""The multimodal warm-up phase priced from the vision tower, in the release's order and lines; the
simulator's encoder serving an image outside the warmed image buckets (a recompile, logged and counted
per bucket); a log's multimodal steps calibrating their own correction; explain naming the phase."""

from __future__ import annotations

import base64
import math
import struct

import pytest

from tuner.explain import explain
from tuner.logparse import NotWarmedUp, parse_line
from tuner.models import resolve
from tuner.perfmodel import Corrections, ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.engine import Engine, SimRequest
from tuner.perfmodel.target import DeviceModel, ModelTarget
from tuner.sim.images import ImageError, message_images
from tuner.sim.startup import run_startup_virtual
from tuner.study.logcalibration import log_sample

VL = "Qwen/Qwen3-VL-8B-Instruct"
LIMIT = '{"image": 2}'


def _pred(release="gaudi-0.26.0", limit=LIMIT, env=None, corrections=Corrections(), model=VL):
    return predict_startup(release, SimSettings(model=model), ServerInputs(max_model_len=4096, max_num_seqs=16,
                                                                           limit_mm_per_prompt=limit),
                           env or {}, corrections=corrections)


def test_the_tower_is_read_from_the_config_and_counts_its_own_parameters():
    shape = resolve(VL)
    tower = shape.vision_tower
    assert (tower.depth, tower.hidden, tower.patch_size, tower.merge) == (27, 1152, 16, 2)
    assert tower.params == shape.vision_params
    assert tower.patches(1280, 720) == 80 * 44  # each side to a multiple of patch x merge (32 px)
    assert tower.tokens(1280, 720) == 80 * 44 // 4
    assert tower.flops(4 * 1156) > 4 * tower.flops(1156)  # attention over the image grows faster
    assert resolve("meta-llama/Llama-3.1-8B").vision_tower is None


def test_the_phase_comes_first_on_vllm_gaudi_and_scales_with_its_own_correction():
    pred = _pred()
    mm = [s for s in pred.steps if s.phase == "multimodal"]
    assert mm and pred.steps[:len(mm)] == mm  # the first phase, before the prompt graphs
    assert len(mm) == len(pred.vision.plan.steps)
    assert {s.bucket for s in mm} == pred.warmed_images
    slow = _pred(corrections=Corrections(multimodal_warmup=3.0))
    assert sum(s.seconds for s in slow.steps if s.phase == "multimodal") == pytest.approx(
        3 * sum(s.seconds for s in mm))
    assert slow.warmup_seconds - pred.warmup_seconds == pytest.approx(2 * sum(s.seconds for s in mm))


def test_graphs_that_run_cost_more_than_graphs_only_compiled():
    """v0.15.1 runs its vision graphs (outside PT_COMPILE_ONLY_MODE), v0.26 in torch.compile mode compiles
    them only: the same tower's steps cost the host syncs and the forward pass on the first only."""
    ran = [s.seconds for s in _pred("gaudi-0.15.1").steps if s.phase == "multimodal"]
    compiled = [s.seconds for s in _pred("gaudi-0.26.0", env={"PT_HPU_LAZY_MODE": "0"}).steps
                if s.phase == "multimodal"]
    assert min(ran) > 5 * max(compiled)


def test_no_image_limit_no_image_warmup_and_a_text_model_has_none():
    assert not [s for s in _pred(limit=None).steps if s.phase == "multimodal"]  # the release warms none
    assert _pred(model="meta-llama/Llama-3.1-8B", limit=None).vision is None


def test_the_simulated_start_prints_the_phase_as_the_release_does():
    pred = _pred()
    lines = run_startup_virtual(pred).lines
    steps = [i for i, line in enumerate(lines) if "[Warmup][Graph/Multimodal(image)]" in line]
    assert len(steps) == len(pred.vision.plan.steps)
    bucket_line = next(i for i, line in enumerate(lines) if "Multimodal bucket : [196, 256" in line)
    first_prompt = next(i for i, line in enumerate(lines) if "[Warmup][Prompt]" in line)
    assert bucket_line < steps[0] and steps[-1] < first_prompt
    assert "resolution:224X224" in lines[steps[0]]


def _png(width: int, height: int) -> dict:
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + b"\x08\x02"
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(head).decode()}}


def test_image_parts_are_sized_from_their_header_and_a_remote_url_is_refused():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}, _png(1280, 720), _png(64, 48)]}]
    assert message_images(msgs) == [(1280, 720), (64, 48)]
    with pytest.raises(ImageError, match="data URLs and local files only"):
        message_images([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}])


def test_an_image_outside_the_warmed_buckets_recompiles_once_and_says_so():
    pred = _pred()
    engine = Engine(pred)
    for i, images in enumerate([((256, 256),), ((1280, 720),), ((1280, 720), (256, 256))]):
        engine.add_request(SimRequest(f"r{i}", 300, 2, 0.0, images=images))
    logs, now = [], 0.0
    while engine.has_work():
        res = engine.step(now)
        now += res.duration
        logs += [msg for _, key, msg in res.logs if key == "not_warmed"]
    assert ("patches", 256) in pred.warmed_images and ("patches", 3520) not in pred.warmed_images
    assert engine.stats.image_compiles == {("patches", 3520): 1}
    assert engine.stats.images == 4
    assert logs == ["Configuration: ('multimodal', 1, 3520) was not warmed-up!"]
    event = parse_line(logs[0])
    assert isinstance(event, NotWarmedUp) and (event.phase, event.shape) == ("multimodal", (1, 3520))


def test_a_logs_multimodal_steps_calibrate_their_own_correction():
    """A simulated start whose vision steps take twice the prior: the log alone reads multimodal_warmup
    near x2 (the release prints a multimodal line when its step ends, so a log's steps are shifted by one:
    the margin), while the text phases stay near x1; explain names the phase."""
    truth = _pred(corrections=Corrections(multimodal_warmup=2.0))
    lines = run_startup_virtual(truth).lines
    ctx = ModelTarget("gaudi-0.26.0", DeviceModel(device="gaudi2", model=VL))
    got = log_sample(lines, ctx, {"block_size": 128, "max_model_len": 4096})
    assert math.exp(got.factor("multimodal_warmup")) == pytest.approx(2.0, rel=0.25)
    names = {p.name for p in explain(lines).timeline.phases}
    assert "multimodal warmup" in names
