"""random-mm: vLLM's flags parsed as vLLM parses them, its request mix for a seed (counts, sizes, the
generator's order: vectors made by vLLM 0.32.0's own RandomMultiModalDataset, tests/load/data), the chat
body vLLM's client sends (a text part, then image_url parts holding base64 JPEG data URLs), and a
server that receives them through `bucket-tuner bench`."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from tests.fake_openai_server import FakeServerConfig
from tests.load.test_bench_chat_auth import ServerThread, write_bos_tokenizer
from tuner.cli import main
from tuner.load.client import LoadGenerator
from tuner.load.multimodal import (
    DEFAULT_BUCKET_CONFIG,
    RandomMultiModalWorkload,
    item_plan,
    parse_bucket_config,
    parse_limit_mm_per_prompt,
)

pytest.importorskip("PIL", reason="Pillow (a dependency since random-mm) is not installed: pip install -e .")

VECTORS = json.loads((Path(__file__).parent / "data" / "vllm_random_mm.json").read_text())


def jpeg_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a JPEG's start-of-frame marker, read without Pillow."""
    assert data[:2] == b"\xff\xd8", "not a JPEG"
    i = 2
    while i < len(data):
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        i += 2 + length
    raise AssertionError("no start-of-frame marker")


def image_parts(body: dict) -> list[dict]:
    return [p for m in body["messages"] for p in m["content"] if p.get("type") == "image_url"]


def decoded_sizes(body: dict) -> list[list[int]]:
    out = []
    for p in image_parts(body):
        head, data = p["image_url"]["url"].split(",", 1)
        assert head == "data:image/jpeg;base64"
        out.append(list(jpeg_size(base64.b64decode(data))))
    return out


# ------------------------------------------------------------------ the flags


def test_bucket_config_is_parsed_as_vllm_parses_it():
    assert parse_bucket_config("{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}") == {(256, 256, 1): 0.5,
                                                                               (720, 1280, 1): 0.5}
    # string keys evaluate to tuples (a JSON object cannot hold tuple keys); values become floats
    assert parse_bucket_config('{"(64, 32, 1)": 1}') == {(64, 32, 1): 1.0}
    assert parse_bucket_config({(8, 8, 1): 2}) == {(8, 8, 1): 2.0}


@pytest.mark.parametrize("text, named", [
    ("{(256, 256): 1}", "(256, 256)"),              # two numbers, not (H, W, T)
    ("{(256, 256, 1.5): 1}", "(256, 256, 1.5)"),    # not ints
    ("[(256, 256, 1)]", "list"),                     # not a dict
    ("{(256, 256, 1): 0.5", "{(256, 256, 1): 0.5"),  # not a literal
    ("{(2, 2, 1): 'x'}", "'x'"),                     # not a probability
])
def test_a_bad_bucket_config_is_named(text, named):
    with pytest.raises(ValueError) as e:
        parse_bucket_config(text)
    assert named in str(e.value) and "--random-mm-bucket-config" in str(e.value)


def test_limit_per_prompt_is_json_as_in_vllm():
    assert parse_limit_mm_per_prompt('{"image": 3, "video": 0}') == {"image": 3, "video": 0}
    for bad, named in (("{'image': 3}", "{'image': 3}"), ('{"image": "3"}', "'3'"), ("[3]", "[3]")):
        with pytest.raises(ValueError) as e:
            parse_limit_mm_per_prompt(bad)
        assert named in str(e.value)


@pytest.mark.parametrize("kwargs, words", [
    ({"range_ratio": 1.5}, "must be in [0, 1], got 1.5"),
    ({"limits": {"video": 1}}, "modality image"),
    ({"buckets": {(8, 8, 1): 0.0}}, "every probability is 0"),
    ({"buckets": {(8, 8, 1): -1.0}}, "must be >= 0"),
    ({"buckets": {(8, 8, 1): 1.0, (8, 8, 4): 0.5}, "limits": {"image": 1, "video": 1}}, "video buckets"),
    ({"base": 4, "limits": {"image": 2}}, "modality video"),  # the default's zero-probability video bucket too
    ({"base": 4, "limits": {"image": 2, "video": 1}}, "minimum number of items 4 exceeds the maximum 2"),
])
def test_item_plan_refuses_what_vllm_refuses(kwargs, words):
    args = {"base": 1, "range_ratio": 0.0, "limits": {"image": 255, "video": 1}, "buckets": DEFAULT_BUCKET_CONFIG}
    args.update(kwargs)
    with pytest.raises(ValueError) as e:
        item_plan(args["base"], args["range_ratio"], args["limits"], args["buckets"])
    assert words in str(e.value)


def test_default_plan_drops_the_zero_probability_video_bucket():
    plan = item_plan(1, 0.0, {"image": 255, "video": 1}, DEFAULT_BUCKET_CONFIG)
    assert plan.buckets == {(256, 256, 1): 0.5, (720, 1280, 1): 0.5}
    assert plan.limits == {"image": 255} and (plan.min_items, plan.max_items) == (1, 1)


def test_bench_names_a_bad_flag_value_before_anything_starts(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--base-url", "http://127.0.0.1:9", "--backend", "openai-chat", "--dataset-name",
              "random-mm", "--random-mm-bucket-config", "{(256, 256): 1}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--random-mm-bucket-config" in err and "(256, 256)" in err


def test_random_mm_needs_the_chat_backend_as_in_vllm(capsys):
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--dataset-name", "random-mm", "--model", "m"])
    err = capsys.readouterr().err
    assert code == 2 and "'openai'" in err and "openai-chat" in err


# ------------------------------------------------------------------ the request mix for a seed


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: f"seed{c['seed']}")
def test_request_mix_is_vllms_for_the_seed(case):
    """vLLM's own sampling (a tokenizer whose text draws nothing extra): the same output lengths, number of
    images and image sizes per request, in the same order."""
    from argparse import Namespace

    from tuner.load.datasets import build_workload

    flags = dict(zip(case["flags"][::2], case["flags"][1::2]))
    args = Namespace(dataset_name="random-mm", backend="openai-chat", num_prompts=case["num"], seed=case["seed"],
                     random_input_len=case["input_len"], random_output_len=case["output_len"],
                     random_range_ratio=str(case["range_ratio"]), random_prefix_len=0, dataset_path=None,
                     vocab_size=case["vocab_size"], input_len=None, output_len=None,
                     random_mm_base_items_per_request=int(flags.get("--random-mm-base-items-per-request", 1)),
                     random_mm_num_mm_items_range_ratio=float(flags.get("--random-mm-num-mm-items-range-ratio", 0)),
                     random_mm_limit_mm_per_prompt=flags.get("--random-mm-limit-mm-per-prompt"),
                     random_mm_bucket_config=flags.get("--random-mm-bucket-config"))
    w = build_workload(args)
    got = [{"prompt_len": r.prompt_len, "output_len": r.output_len, "images": [im.size for im in r.images]}
           for r in w.requests()]
    assert got == [{k: r[k] for k in ("prompt_len", "output_len", "images")} for r in case["requests"]]


def test_bucket_probabilities_and_item_counts_over_many_requests():
    w = RandomMultiModalWorkload(8, 2, num_prompts=3000, seed=1, base_items=2, items_range_ratio=0.5,
                                 limits={"image": 3}, buckets={(4, 6, 1): 1.0, (2, 2, 1): 3.0}, vocab_size=100)
    counts = [len(r.images) for r in w.requests()]
    assert set(counts) == {1, 2, 3}  # U{floor(2*0.5) .. ceil(2*1.5)}
    assert abs(np.mean(counts) - 2.0) < 0.05
    sizes = [tuple(im.size) for r in w.requests() for im in r.images]
    assert abs(sizes.count((2, 2)) / len(sizes) - 0.75) < 0.02 and set(sizes) == {(2, 2), (6, 4)}
    d = w.describe()
    assert d["images"]["total"] == len(sizes) and d["images"]["by_size"] == {"2x2": sizes.count((2, 2)),
                                                                           "6x4": sizes.count((6, 4))}
    assert d["images"]["sizes_per_request"][0] == [im.size for im in w.requests()[0].images]


def test_the_limit_caps_the_item_count():
    w = RandomMultiModalWorkload(8, 2, num_prompts=200, seed=2, base_items=3, items_range_ratio=0.5,
                                 limits={"image": 2}, buckets={(2, 2, 1): 1.0}, vocab_size=100)
    assert {len(r.images) for r in w.requests()} == {1, 2}  # [floor(1.5), min(2, ceil(4.5))]


def test_same_seed_same_pixels_other_seed_other_pixels():
    mk = lambda seed: RandomMultiModalWorkload(8, 2, num_prompts=2, seed=seed,  # noqa: E731
                                               buckets={(4, 4, 1): 1.0}, vocab_size=100).requests()
    a, b, c = mk(5), mk(5), mk(6)
    assert np.array_equal(a[1].images[0].pixels(), b[1].images[0].pixels())
    assert not np.array_equal(a[1].images[0].pixels(), c[1].images[0].pixels())


# ------------------------------------------------------------------ the chat request


def test_chat_body_has_vllms_shape():
    w = RandomMultiModalWorkload(8, 3, num_prompts=1, seed=0, base_items=2, buckets={(20, 30, 1): 1.0},
                                 vocab_size=100)
    (spec,) = w.requests()
    gen = LoadGenerator("http://127.0.0.1:1", "m", api="openai-chat", progress=False)
    body = json.loads(gen.body(spec))
    assert list(body) == ["model", "messages", "max_completion_tokens", "stream", "stream_options", "ignore_eos"]
    (message,) = body["messages"]
    assert message["role"] == "user"
    text, *images = message["content"]
    assert text == {"type": "text", "text": spec.recipe.text}
    assert [set(p) for p in images] == [{"type", "image_url"}] * 2 and set(images[0]["image_url"]) == {"url"}
    assert decoded_sizes(body) == [[30, 20], [30, 20]]  # (H, W) buckets: width 30, height 20
    assert body["max_completion_tokens"] == 3


def test_completions_refuse_a_request_with_images():
    (spec,) = RandomMultiModalWorkload(8, 3, num_prompts=1, seed=0, buckets={(2, 2, 1): 1.0},
                                       vocab_size=100).requests()
    with pytest.raises(ValueError, match="openai-chat"):
        LoadGenerator("http://127.0.0.1:1", "m", progress=False).body(spec)


# ------------------------------------------------------------------ through bench, to a server


def test_bench_random_mm_sends_the_images_to_the_server(tmp_path):
    tok = tmp_path / "tok"
    write_bos_tokenizer(tok)
    line = ["--backend", "openai-chat", "--dataset-name", "random-mm", "--num-prompts", "6",
            "--random-input-len", "24", "--random-output-len", "2", "--seed", "4",
            "--random-mm-base-items-per-request", "2", "--random-mm-num-mm-items-range-ratio", "0.5",
            "--random-mm-limit-mm-per-prompt", '{"image": 3, "video": 0}',
            "--random-mm-bucket-config", "{(16, 24, 1): 0.5, (40, 8, 1): 0.5}", "--tokenizer", str(tok)]
    with ServerThread(FakeServerConfig(model="m", tokenizer_dir=str(tok), vocab_size=400)) as srv:
        code = main(["bench", "--base-url", srv.base_url, "--model", "m", "--disable-tqdm",
                     "--result-file", str(tmp_path / "r.json"), *line])
        recs = sorted((r for r in srv.log), key=lambda r: int(r.request_id.rsplit("-", 1)[1]))
        sent = [decoded_sizes(r.body) for r in recs]
    assert code == 0
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["completed"] == 6
    assert sent == d["tuner_workload"]["images"]["sizes_per_request"]
    assert sum(map(len, sent)) == d["tuner_workload"]["images"]["total"] >= 6
    assert {tuple(s) for req in sent for s in req} <= {(24, 16), (8, 40)}
    assert d["tuner_chat_prompts"]["sized_by"] == f"tokenizer {tok}"


# ------------------------------------------------------------------ a trace whose requests carry images


def _trace(tmp_path) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in (
        {"input_len": 20, "output_len": 2, "images": [[32, 16], [8, 8]]},
        {"input_len": 25, "output_len": 2},
        {"input_len": 30, "output_len": 2, "images": [[64, 48]]})) + "\n")
    return p


def test_trace_images_are_sent_with_their_sizes(tmp_path):
    tok = tmp_path / "tok"
    write_bos_tokenizer(tok)
    with ServerThread(FakeServerConfig(model="m", tokenizer_dir=str(tok), vocab_size=400)) as srv:
        code = main(["bench", "--base-url", srv.base_url, "--model", "m", "--disable-tqdm", "--backend", "openai-chat",
                     "--dataset-name", "trace", "--dataset-path", str(_trace(tmp_path)), "--tokenizer", str(tok),
                     "--result-file", str(tmp_path / "r.json")])
        recs = sorted((r for r in srv.log), key=lambda r: int(r.request_id.rsplit("-", 1)[1]))
        sent = [decoded_sizes(r.body) for r in recs]
    assert code == 0
    assert sent == [[[32, 16], [8, 8]], [], [[64, 48]]]
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["tuner_workload"]["images"]["sizes_per_request"] == sent


def test_trace_images_need_the_chat_backend(tmp_path, capsys):
    with ServerThread(FakeServerConfig(model="m")) as srv:
        code = main(["bench", "--base-url", srv.base_url, "--model", "m", "--disable-tqdm", "--vocab-size", "500",
                     "--dataset-name", "trace", "--dataset-path", str(_trace(tmp_path))])
    assert code == 2 and "openai-chat" in capsys.readouterr().err


@pytest.mark.parametrize("images, named", [("[[32]]", "[[32]]"), ('[[0, 4]]', "[[0, 4]]"), ('"big"', "'big'")])
def test_a_bad_images_field_is_named(tmp_path, images, named):
    from tuner.load.trace import TraceFormatError, TraceWorkload

    p = tmp_path / "t.jsonl"
    p.write_text('{"input_len": 4, "output_len": 2, "images": ' + images + "}\n")
    with pytest.raises(TraceFormatError) as e:
        TraceWorkload.from_file(p)
    assert f"{p}:1" in str(e.value) and named in str(e.value)
