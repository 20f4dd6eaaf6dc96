"""`fit --image-coverage`: image buckets (or resolutions) placed on a workload's images, on distributions
whose answer is worked out by hand (Qwen3-VL: 32 px per merged patch side, so an N x N image is
(N/16)^2 patches: 256x256 -> 256, 512x512 -> 1024, 1024x1024 -> 4096). The warm-up printed is the
prediction's own, and the simulator serves the choice without a recompile exactly where the fit says."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tuner.cli import main
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.engine import Engine, SimRequest

VL, NATIVE, BATCH = "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3.5-27B", "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MIX = "{(256, 256, 1): 0.6, (512, 512, 1): 0.3, (1024, 1024, 1): 0.1}"


def _fit(*extra: str, model: str = VL, release: str = "gaudi-0.26.0") -> tuple[int, dict, str]:
    argv = ["fit", "--model", model, "--release", release, "--dataset-name", "random-mm",
            "--random-mm-bucket-config", MIX, *extra]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        main(argv)
    return code, json.loads(out.getvalue()), text.getvalue()


@pytest.mark.parametrize(("coverage", "padding", "value", "served"), [
    ("0.5", "0.25", "256", 0.6),  # 256x256 alone is 60%
    ("0.85", "0.25", "256,1024", 0.9),  # [1024] alone pads 60% of the images 4x: 34.6% of the work
    ("0.85", "1", "1024", 0.9),  # no padding bound: one bucket at the top is the least warm-up
    ("0.95", "0.25", "256,1024,4096", 1.0),
])
def test_buckets_on_a_known_mix(coverage, padding, value, served):
    code, doc, text = _fit("--image-coverage", coverage, "--max-image-padding", padding)
    assert code == 0 and doc["chosen"]["value"] == value
    assert doc["chosen"]["requests_served"] == pytest.approx(served)
    assert doc["env"] == {"VLLM_MULTIMODAL_BUCKETS": value} and not doc["chosen"]["warnings"]
    assert f"export VLLM_MULTIMODAL_BUCKETS={value}\n" in text
    assert "vllm serve Qwen/Qwen3-VL-8B-Instruct --limit-mm-per-prompt '{\"image\": 1}'" in text
    # the least warm-up that qualifies: every cheaper candidate misses the target or the padding bound
    for row in doc["candidates"]:
        if row["multimodal_warmup_s"] < doc["chosen"]["multimodal_warmup_s"]:
            assert row["requests_served"] < float(coverage) or row["padding"] > float(padding)


def test_the_warmup_is_the_predictions_and_the_simulator_recompiles_only_what_is_not_covered():
    _, doc, _ = _fit("--image-coverage", "0.85")
    pred = predict_startup("gaudi-0.26.0", SimSettings(model=VL),
                           ServerInputs(max_model_len=8192, limit_mm_per_prompt='{"image": 1}'),
                           {"VLLM_MULTIMODAL_BUCKETS": "256,1024"})
    mm = sum(s.seconds for s in pred.steps if s.phase == "multimodal")
    assert doc["chosen"]["multimodal_warmup_s"] == pytest.approx(mm)
    engine = Engine(pred)
    for i, side in enumerate((256, 512, 1024)):
        engine.add_request(SimRequest(f"r{i}", 64, 1, 0.0, images=((side, side),)))
    now = 0.0
    while engine.has_work():
        now += engine.step(now).duration
    assert engine.stats.image_compiles == {("patches", 4096): 1}  # the 10% the fit leaves out


def test_requests_count_every_image_of_a_request():
    """Two images a request: a request is served whole with probability q^2 (0.9^2 = 81% below 4096)."""
    _, by_images, _ = _fit("--image-coverage", "0.85", "--coverage-of", "images",
                           "--random-mm-base-items-per-request", "2")
    _, by_requests, _ = _fit("--image-coverage", "0.85", "--random-mm-base-items-per-request", "2")
    assert by_images["chosen"]["value"] == "256,1024"
    assert by_images["chosen"]["requests_served"] == pytest.approx(0.81)
    assert by_requests["chosen"]["value"] == "256,1024,4096"
    assert by_requests["server"] == {"--limit-mm-per-prompt": '{"image": 2}'}


def test_resolutions_for_a_native_resolution_tower():
    """Qwen3.5's table is empty on purpose: resolutions are the only warm-up, one graph per shape (a range
    of item counts under prefix caching, the release's own advice)."""
    code, doc, _ = _fit("--image-coverage", "0.85", model=NATIVE)
    assert code == 0 and doc["variable"] == "VLLM_MULTIMODAL_RESOLUTIONS"
    assert doc["chosen"]["value"] == "256x256,512x512" and doc["chosen"]["graphs"] == 2
    assert doc["base"]["requests_served"] == 0.0
    _, two, _ = _fit("--image-coverage", "0.5", "--limit-mm-per-prompt", '{"image": 2}', model=NATIVE)
    assert two["chosen"]["value"] == "256x256x1-2"
    _, plain, _ = _fit("--image-coverage", "0.5", "--limit-mm-per-prompt", '{"image": 2}',
                       "--no-enable-prefix-caching", model=NATIVE)
    assert plain["chosen"]["value"] == "256x256"


def test_a_batch_based_tower_is_fitted_on_images_per_request():
    """Llama-4 is not in vllm-gaudi's table: batch buckets. 1..3 images a request, uniformly: [3] pads
    (2 + 1) / 9 = 33%, [1, 3] pads 1 / 7 = 14.3%."""
    _, doc, _ = _fit("--image-coverage", "0.8", "--random-mm-base-items-per-request", "2",
                     "--random-mm-num-mm-items-range-ratio", "0.5", model=BATCH)
    assert doc["unit"] == "images per batch"
    assert [(r["value"], round(r["padding"], 3)) for r in doc["candidates"]][:2] == [("3", 0.333), ("1,3", 0.143)]
    assert doc["chosen"]["value"] == "1,3"


def test_a_trace_with_image_sizes(tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [[[256, 256]], [[256, 256]], [[256, 256], [1024, 1024]], [[512, 512]]]
    trace.write_text("".join(json.dumps({"input_len": 64, "output_len": 8, "images": r}) + "\n" for r in rows))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["fit", "--model", VL, "--release", "gaudi-0.26.0", "--dataset-path", str(trace),
                     "--image-coverage", "0.75", "--json"])
    doc = json.loads(out.getvalue())
    assert code == 0 and doc["chosen"]["value"] == "256,1024"  # 3 of 4 requests carry no 1024x1024 image
    assert doc["chosen"]["requests_served"] == 0.75 and doc["chosen"]["images_served"] == 0.8
    assert doc["server"] == {"--limit-mm-per-prompt": '{"image": 2}'}


@pytest.mark.parametrize(("extra", "said"), [
    (["--model", "meta-llama/Llama-3.1-8B"], "a text model"),
    (["--model", VL, "--limit-mm-per-prompt", '{"image": 0}'], "give a positive 'image' count"),
    (["--model", VL, "--random-mm-base-items-per-request", "3", "--limit-mm-per-prompt", '{"image": 2}'],
     "up to 3 images per request"),
    (["--model", VL, "--release", "gaudi-0.15.1", "--image-variable", "VLLM_MULTIMODAL_RESOLUTIONS"],
     "gaudi-0.15.1 does not read it"),
    (["--model", VL, "--image-coverage", "1.5"], "must be in (0, 1]"),
])
def test_bad_requests_are_refused_naming_the_value(extra, said, capsys):
    argv = ["fit", "--dataset-name", "random-mm", "--random-mm-bucket-config", MIX, "--release", "gaudi-0.26.0"]
    assert main(argv + extra) == 2
    assert said in capsys.readouterr().err
