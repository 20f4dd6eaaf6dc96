"""A pooling model on the genuine vLLM: the tier's tiny Llama served as an embedding model (`--runner pooling
--convert embed`), loaded by `bucket-tuner bench` through vllm bench serve's pooling backends. One boot.

vLLM's own client against the same server (by hand, 2026-11-28; tests/load/data/SOURCES.md) reported 8 requests
and 1536 input tokens for 24 prompts of 64 tokens in batches of 3: ours must count the same, since its prompts are
token ids of exact lengths."""

from __future__ import annotations

import json
import subprocess

import pytest

from .test_realvllm import SERVED, VOCAB, RealServer, bucket_tuner

pytestmark = [pytest.mark.realvllm, pytest.mark.xdist_group("realvllm")]


@pytest.fixture(scope="module")
def embedding_server(vllm_env, tmp_path_factory):
    server = RealServer(vllm_env, tmp_path_factory.mktemp("realvllm-pooling"),
                        extra_args=("--runner", "pooling", "--convert", "embed"))
    try:
        yield server.start()
    finally:
        server.close()


def _bench(server, tmp_path, name: str, *argv: str) -> dict:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([*bucket_tuner(), "bench", "--base-url", server.base_url, "--model", SERVED,
                           "--vocab-size", str(VOCAB), "--disable-tqdm", "--result-file", str(out), *argv],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_embeddings_rerank_and_pooling_on_a_genuine_embedding_model(embedding_server, tmp_path):
    s = embedding_server
    emb = _bench(s, tmp_path, "emb", "--backend", "openai-embeddings", "--num-prompts", "24",
                 "--random-input-len", "64", "--random-batch-size", "3", "--max-concurrency", "2")
    figures = ("completed", "failed", "total_input_tokens", "total_input_sequences")
    assert tuple(emb[k] for k in figures) == (8, 0, 1536, 24)
    assert emb["input_lens"] == [192] * 8 and emb["p99_e2el_ms"] > 0
    pool = _bench(s, tmp_path, "pool", "--backend", "vllm-pooling", "--num-prompts", "4", "--random-input-len", "32")
    assert (pool["completed"], pool["total_input_tokens"]) == (4, 128)
    rerank = _bench(s, tmp_path, "rerank", "--backend", "vllm-rerank", "--dataset-name", "random-rerank",
                    "--num-prompts", "8", "--random-input-len", "64", "--random-batch-size", "4")
    assert (rerank["completed"], rerank["failed"], rerank["total_input_sequences"]) == (2, 0, 8)
    chat = _bench(s, tmp_path, "chat", "--backend", "openai-embeddings-chat", "--num-prompts", "3",
                  "--random-input-len", "32")
    assert chat["completed"] == 3 and chat["total_input_tokens"] > 3 * 20  # its chat template's tokens added
    # a generating API on a pooling model: vLLM has no such route, and the failure says which backends to use
    gen = _bench(s, tmp_path, "gen", "--num-prompts", "2", "--random-input-len", "16", "--random-output-len", "2")
    assert gen["failed"] == 2 and all("--backend openai-embeddings" in e for e in gen["errors"])


def test_vector_encodings_answer_as_the_simulator_answers_them(embedding_server, tmp_path):
    """The genuine server's base64, bytes and bytes_only answers have the shapes the simulator gives
    (tests/load/test_pooling.py checks the simulator's), and bench reads each as vLLM's client does."""
    import base64
    import urllib.request

    from .test_realvllm import _NO_PROXY

    def post(body: dict):
        req = urllib.request.Request(embedding_server.base_url + "/v1/embeddings",
                                     json.dumps({"model": SERVED, "input": [[5, 6, 7], [8, 9]], **body}).encode(),
                                     {"Content-Type": "application/json"})
        with _NO_PROXY.open(req, timeout=60) as resp:
            return resp.status, resp.headers, resp.read()

    hidden = 128  # the tier's tiny Llama: vLLM's embedding_size is its hidden size
    _, _, raw = post({"encoding_format": "base64", "embed_dtype": "bfloat16"})
    assert [len(base64.b64decode(d["embedding"])) for d in json.loads(raw)["data"]] == [hidden * 2] * 2
    status, headers, raw = post({"encoding_format": "bytes"})
    meta = json.loads(headers["metadata"])
    assert status == 200 and len(raw) == 2 * hidden * 4 and set(meta) == {"id", "created", "model", "data", "usage"}
    assert [(m["start"], m["end"], list(m["shape"])) for m in meta["data"]] == [(0, hidden * 4, [hidden]),
                                                                               (hidden * 4, hidden * 8, [hidden])]
    assert set(meta["data"][0]) == {"index", "embed_dtype", "endianness", "start", "end", "shape"}
    assert meta["usage"]["prompt_tokens"] == 5
    status, headers, raw = post({"encoding_format": "bytes_only"})
    assert status == 200 and "metadata" not in headers and len(raw) == 2 * hidden * 4
    for encoding in ("bytes", "bytes_only"):
        d = _bench(embedding_server, tmp_path, encoding, "--backend", "openai-embeddings", "--num-prompts", "4",
                   "--random-input-len", "32", "--extra-body", json.dumps({"encoding_format": encoding}))
        assert (d["completed"], d["failed"], d["total_input_tokens"]) == (4, 0, 128), encoding
