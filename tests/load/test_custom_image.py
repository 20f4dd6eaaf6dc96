"""vLLM's custom_image dataset: your prompts with your images, sent as vLLM 0.32's client sends them (a local
path as a file:// URL the server reads under its --allowed-local-media-path, or inline as a PNG data URL
with --custom-ensure-client-side-data), to a vision-language model (the simulator here; it reads file://
images as vLLM does, only under that folder).

Checked once against vLLM's own CustomImageDataset (the tier's venv, pandas beside it): the same prompts, image
parts and order for seed 0 (6 of 11 entries) and seed 5 (16, oversampled), both forms."""

from __future__ import annotations

import json
import random
from argparse import Namespace

import pytest

from tests.load.test_bench_cli import running_sim
from tuner.cli import main
from tuner.load.datasets import build_workload


def _images(tmp_path):
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    for name, size in (("a.png", (64, 48)), ("b.jpg", (32, 32))):
        Image.new("RGB", size, (200, 30, 30)).save(folder / name)
    return folder


def _dataset(tmp_path, folder):
    path = tmp_path / "vl.jsonl"
    lines = [{"prompt": f"How many red blocks? ({i})", "image_files": [str(folder / "a.png")]} for i in range(3)]
    lines.append({"content": [{"type": "text", "text": "Compare "}, {"type": "image", "image": str(folder / "a.png")},
                              {"type": "text", "text": " and "},
                              {"type": "image_url", "image_url": {"url": f"file://{folder / 'b.jpg'}",
                                                                  "detail": "low"}}]})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def _args(path, **kw):
    base = dict(dataset_name="custom_image", dataset_path=path, num_prompts=4, seed=0, vocab_size=None,
                input_len=None, output_len=None, custom_output_len=8, disable_shuffle=False, no_oversample=False,
                backend="openai-chat", custom_ensure_client_side_data=False, random_input_len=1024,
                random_output_len=128, random_range_ratio="0.0", random_prefix_len=0)
    return Namespace(**{**base, **kw})


def test_entries_are_shuffled_as_vllm_and_images_sent_as_its_client_sends_them(tmp_path):
    folder = _images(tmp_path)
    path = _dataset(tmp_path, folder)
    w = build_workload(_args(path, seed=3))
    order = [json.loads(line) for line in path.read_text().splitlines()]
    random.seed(3)  # vLLM: random.seed(seed), then random.shuffle of the file's entries
    random.shuffle(order)
    ours = w.requests()
    for spec, item in zip(ours, order):
        if "prompt" in item:
            assert spec.prompt == item["prompt"]
            assert [im.content_part() for im in spec.images] == [
                {"type": "image_url", "image_url": {"url": f"file://{item['image_files'][0]}"}}]
            assert spec.images[0].size == [64, 48]
        else:  # interleaved parts in their order; the image_url's own keys kept
            parts = spec.recipe.parts
            assert [p["type"] for p in parts] == ["text", "image_url", "text", "image_url"]
            assert parts[3]["image_url"] == {"url": f"file://{folder / 'b.jpg'}", "detail": "low"}
    assert {s.output_len for s in ours} == {8}
    inline = build_workload(_args(path, custom_ensure_client_side_data=True)).requests()
    assert all(im.content_part()["image_url"]["url"].startswith("data:image/png;base64,")
               for s in inline for im in s.images)


@pytest.mark.parametrize(("bad", "said"), [
    ({"prompt": "no images"}, "needs 'prompt' and 'image_files', or 'content'"),
    ({"prompt": "x", "image_files": []}, "'image_files' must be a non-empty list"),
    ({"content": [{"type": "video", "video": "v.mp4"}]}, "must have type 'text', 'image' or 'image_url'"),
])
def test_a_bad_line_is_named(tmp_path, bad, said):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=said):
        build_workload(_args(path))
    with pytest.raises(ValueError, match="not supported on backend 'openai'"):
        build_workload(_args(_dataset(tmp_path, _images(tmp_path)), backend="openai"))


def test_bench_sends_them_to_a_vl_server_that_reads_local_files_under_its_folder(tmp_path):
    folder = _images(tmp_path)
    path = _dataset(tmp_path, folder)
    vl = ("--sim-model", "Qwen/Qwen3-VL-8B-Instruct", "--max-model-len", "4096")
    common = ["bench", "--model", "llama", "--backend", "openai-chat", "--dataset-name", "custom_image",
              "--dataset-path", str(path), "--num-prompts", "4", "--custom-output-len", "3", "--disable-tqdm"]
    gen = running_sim(tmp_path / "allowed", "llama", "0.2", *vl, "--allowed-local-media-path", str(folder))
    url = next(gen)
    try:
        out = tmp_path / "ok.json"
        assert main([*common, "--base-url", url, "--result-file", str(out)]) == 0
        d = json.loads(out.read_text())
        assert (d["completed"], d["failed"]) == (4, 0) and d["total_input_tokens"] > 4 * 10  # images counted
    finally:
        gen.close()
    gen = running_sim(tmp_path / "closed", "llama", "0.2", *vl)  # no --allowed-local-media-path
    url = next(gen)
    try:
        out = tmp_path / "refused.json"
        assert main([*common, "--base-url", url, "--result-file", str(out)]) == 0
        d = json.loads(out.read_text())
        assert d["completed"] == 0 and "--allowed-local-media-path" in " ".join(map(str, d["errors"]))
        out = tmp_path / "inline.json"  # inline images need no folder on the server
        assert main([*common, "--base-url", url, "--custom-ensure-client-side-data", "--result-file", str(out)]) == 0
        assert json.loads(out.read_text())["completed"] == 4
    finally:
        gen.close()
