"""The API of a simulated pooling model (`vllm serve --runner pooling`, `--convert embed`, old `--task embed`):
/v1/embeddings (and /v2/embed), /pooling, /rerank (/v1/rerank, /v2/rerank) and /score (/v1/score), answered in
vLLM 0.32's shapes (vllm/entrypoints/pooling/*/protocol.py). A pooling model serves only these; a generating
model serves none of them (vLLM registers the routes of the tasks a model supports: the others are 404).

Each input is one prefill of its tokens and no decode: the engine runs it as a request for one token, so
prompt buckets, batching and the queue cost what they cost a prefill. A reranker's input is the query, a
separator and the document. Vectors and scores are deterministic per input (a hash), not meaningful.
"""

from __future__ import annotations

import json
import math
import time
import uuid
import zlib

from aiohttp import web

from . import encoding
from .http import _error, count_text_tokens

# vLLM's `--task` (before `--runner`/`--convert`) values of a pooling model
POOLING_TASKS = frozenset({"embed", "embedding", "classify", "score", "reward", "encode"})


def is_pooling(runner: str | None, convert: str | None, task: str | None) -> bool:
    """vLLM's flags naming a pooling model: --runner pooling, --convert embed/classify/reward, --task embed..."""
    return runner == "pooling" or convert in ("embed", "classify", "reward") or task in POOLING_TASKS


def _vector(key: str, width: int = 16) -> list[float]:
    seed = zlib.crc32(key.encode())
    return [((seed >> (i % 24)) % 1000) / 1000.0 - 0.5 for i in range(width)]


def _score(key: str) -> float:
    return _vector(key, 1)[0] + 0.5


class PoolingFront:
    """The pooling routes of a SimHTTP (its model names, token counter, faults and engine driver).

    ``width``: the model's embedding size (vLLM: the config's embedding_size, else its hidden size);
    ``matryoshka``: whether a request may ask for fewer ``dimensions`` (the config's is_matryoshka, or its
    matryoshka_dimensions: then only those)."""

    def __init__(self, http, width: int = 16, matryoshka: bool | list[int] = False, task: str = "embed",
                 labels: tuple[str, ...] = ("LABEL_0", "LABEL_1")) -> None:
        self.http = http
        self.width = width
        self.matryoshka = matryoshka
        self.task = task  # "embed", "classify" or "reward": the routes vLLM 0.32 registers for it
        self.labels = labels

    def add_routes(self, router) -> None:
        """vLLM 0.32's (entrypoints/pooling/factories.py): /pooling for every pooling model; the embeddings API
        for an embedding model, /classify for a classifier; scoring and rerank for an embedding model or a
        classifier of one label (a cross-encoder)."""
        router.add_post("/pooling", self.pooling)
        if self.task == "embed":
            for path in ("/v1/embeddings", "/v2/embed"):
                router.add_post(path, self.embeddings)
        if self.task == "classify":
            router.add_post("/classify", self.classify)
        if self.task == "embed" or self.task == "classify" and len(self.labels) == 1:
            for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
                router.add_post(path, self.rerank)
            for path in ("/score", "/v1/score"):
                router.add_post(path, self.score)

    # -- what a request asks ------------------------------------------------------------------------
    def _lengths(self, body: dict) -> tuple[list[int], list[tuple]] | web.Response:
        """Tokens of each input of an embeddings or pooling request (input, or chat messages: a multimodal
        model's images counted in), and the image sizes of each (for the engine's vision encoder)."""
        if "messages" in body:
            messages = body["messages"]
            convs = messages if isinstance(messages, list) and messages and isinstance(messages[0], list) \
                else [messages]
            counts, images = [], []
            for conv in convs:
                read = self.http.chat_input(conv, body.get("model") or self.http.names[0])
                if isinstance(read, web.Response):
                    return read
                counts.append(read[0])
                images.append(tuple(read[1]))
            return counts, images
        value = body.get("input")
        if isinstance(value, str) and value:
            return [count_text_tokens(value)], [()]
        if isinstance(value, list) and value:
            if all(_is_id(t) for t in value):
                return self._no_images(self._ids([value]))
            if all(isinstance(t, str) and t for t in value):
                return [count_text_tokens(t) for t in value], [()] * len(value)
            if all(isinstance(p, list) and p and all(_is_id(t) for t in p) for p in value):
                return self._no_images(self._ids(value))
        return _error(400, "input must be a non-empty string, a list of strings, a list of token ids or a list "
                      "of such lists", "BadRequestError")

    @staticmethod
    def _no_images(lengths: list[int] | web.Response) -> tuple[list[int], list[tuple]] | web.Response:
        return lengths if isinstance(lengths, web.Response) else (lengths, [()] * len(lengths))

    def _ids(self, prompts: list[list[int]]) -> list[int] | web.Response:
        bad = [t for p in prompts for t in p if not 0 <= t < self.http.vocab]
        if bad:
            return _error(400, f"Token id {max(bad) if max(bad) >= self.http.vocab else min(bad)} is out of "
                          "vocabulary", "BadRequestError")
        return [len(p) for p in prompts]

    def _fit(self, lengths: list[int], body: dict) -> list[int] | web.Response:
        """vLLM's truncate_prompt_tokens: -1 cuts each input to the model's length, k to k tokens; without it an
        input longer than the model takes is refused."""
        cut = body.get("truncate_prompt_tokens")
        limit = self.http.max_model_len
        if cut is not None:
            if not _is_id(cut) or cut < -1:
                return _error(400, f"truncate_prompt_tokens must be -1 or more, got {cut!r}", "BadRequestError")
            if cut > limit:
                return _error(400, f"truncate_prompt_tokens value ({cut}) is greater than max_model_len ({limit}). "
                              "Please, select a smaller truncation size.", "BadRequestError")
            return [min(n, limit if cut == -1 else cut) for n in lengths]
        longest = max(lengths)
        if longest > limit:
            return _error(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                          f"{longest} tokens in the input for embedding generation. Please reduce the length of "
                          "the input.", "BadRequestError")
        return lengths

    # -- running it ---------------------------------------------------------------------------------
    async def _run_inputs(self, request: web.Request, body: dict) -> tuple[list[int], str] | web.Response:
        """The inputs of an embeddings, pooling or classify request (_lengths) through the engine (_run); one
        refused as malformed still counts as a request, as _run counts every one."""
        read = self._lengths(body)
        if isinstance(read, web.Response):
            return await self._run(request, read, body)
        return await self._run(request, read[0], body, read[1])

    async def _run(self, request: web.Request, lengths: list[int] | web.Response,
                   body: dict, images: list[tuple] | None = None) -> tuple[list[int], str] | web.Response:
        """Each input through the engine as one prefill; (tokens per input, model) or the refusal."""
        http = self.http
        http.requests_seen += 1
        fault = http.faults.request_fault(http.requests_seen)
        if isinstance(lengths, web.Response):
            return lengths
        lengths = self._fit(lengths, body)
        if isinstance(lengths, web.Response):
            return lengths
        if fault == "http-500":
            return _error(500, "Internal Server Error", "InternalServerError")
        if http.stopped.is_set():
            return _error(503, "The server is shutting down", "ServiceUnavailableError")
        rid = uuid.uuid4().hex
        images = images or [()] * len(lengths)
        lives = [http.driver.submit(f"{rid}-{i}", max(1, n), 1, im) for i, (n, im) in enumerate(zip(lengths, images))]
        done = 0
        try:
            for live in lives:
                failed = await http.finish(live)
                if isinstance(failed, web.Response):
                    return failed
                done += 1
        finally:
            for live in lives[done:]:  # a client gone or a failure: free what is still queued
                http.driver.cancel(live.rid)
        return lengths, body.get("model") or http.names[0]

    @staticmethod
    def _usage(tokens: int) -> dict:
        return {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0, "prompt_tokens_details": None,
                "completion_tokens_details": None}  # vLLM 0.32's UsageInfo, as its genuine /classify answered

    async def embeddings(self, request: web.Request) -> web.Response:
        return await self._vectors(request, "embd", "embedding", "embedding")

    async def pooling(self, request: web.Request) -> web.Response:
        return await self._vectors(request, "pool", "pooling", "data")

    def _width(self, body: dict, model: str) -> int | web.Response:
        """The vector's width: the model's, or the `dimensions` asked of a Matryoshka model (vLLM's checks)."""
        dims = body.get("dimensions")
        if dims is None:
            return self.width
        if not self.matryoshka:
            return _error(400, f"Model {model!r} does not support Matryoshka embeddings; dimensions must be unset "
                          f"(received dimensions={dims}).", "BadRequestError")
        if not _is_id(dims) or not 1 <= dims <= self.width:
            return _error(400, f"Model {model!r} only supports dimensions in range [1, {self.width}], got {dims}.",
                          "BadRequestError")
        if isinstance(self.matryoshka, list) and dims not in self.matryoshka:
            return _error(400, f"Model {model!r} only supports Matryoshka dimensions {self.matryoshka}, got {dims}.",
                          "BadRequestError")
        return dims

    async def _vectors(self, request: web.Request, id_prefix: str, kind: str, field: str) -> web.Response:
        """A vector per input: vLLM's embeddings answer (object "embedding", the vector in "embedding") or its
        pooling answer ("pooling", in "data"), in the encoding asked (tuner/sim/encoding.py)."""
        body = await self.http.request_body(request)
        if isinstance(body, web.Response):
            return body
        refused = encoding.check(body)
        if refused:
            return _error(400, refused, "BadRequestError")
        width = self._width(body, body.get("model") or self.http.names[0])
        if isinstance(width, web.Response):
            return width
        ran = await self._run_inputs(request, body)
        if isinstance(ran, web.Response):
            return ran
        lengths, model = ran
        vectors = [_vector(f"{model}{i}{n}", width) for i, n in enumerate(lengths)]
        rid, created = f"{id_prefix}-{uuid.uuid4().hex}", int(time.time())
        fmt, dtype, order = (body.get("encoding_format", "float"), body.get("embed_dtype", "float32"),
                             body.get("endianness", "native"))
        if fmt in ("bytes", "bytes_only"):
            return self._bytes(rid, created, model, vectors, lengths, fmt, dtype, order)
        data = [{"index": i, "object": kind, field: v if fmt == "float" else encoding.vector_base64(v, dtype, order)}
                for i, v in enumerate(vectors)]
        return web.json_response({"id": rid, "object": "list", "created": created, "model": model, "data": data,
                                  "usage": self._usage(sum(lengths))})

    def _bytes(self, rid: str, created: int, model: str, vectors: list[list[float]], lengths: list[int], fmt: str,
               dtype: str, order: str) -> web.Response:
        """vLLM's binary answer: the vectors' bytes back to back; with "bytes", where each is and the usage in a
        `metadata` header (a JSON object), with "bytes_only" nothing else."""
        chunks = [encoding.vector_bytes(v, dtype, order) for v in vectors]
        headers = {}
        if fmt == "bytes":
            items, offset = [], 0
            for i, (chunk, v) in enumerate(zip(chunks, vectors)):
                items.append({"index": i, "embed_dtype": dtype, "endianness": order, "start": offset,
                              "end": offset + len(chunk), "shape": [len(v)]})
                offset += len(chunk)
            usage = {"prompt_tokens": sum(lengths), "total_tokens": sum(lengths)}
            headers["metadata"] = json.dumps({"id": rid, "created": created, "model": model, "data": items,
                                              "usage": usage})
        return web.Response(body=b"".join(chunks), headers=headers, content_type="application/octet-stream")

    async def classify(self, request: web.Request) -> web.Response:
        """vLLM's /classify: per input its class probabilities, the most likely class's label, their count."""
        body = await self.http.request_body(request)
        if isinstance(body, web.Response):
            return body
        ran = await self._run_inputs(request, body)
        if isinstance(ran, web.Response):
            return ran
        lengths, model = ran
        data = []
        for i, n in enumerate(lengths):
            logits = [4 * v for v in _vector(f"{model}{i}{n}", len(self.labels))]
            top = max(logits)
            weights = [math.exp(v - top) for v in logits]
            probs = [w / sum(weights) for w in weights]
            data.append({"index": i, "label": self.labels[probs.index(max(probs))], "probs": probs,
                         "num_classes": len(probs)})
        return web.json_response({"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                                  "model": model, "data": data, "usage": self._usage(sum(lengths))})

    def _pairs(self, first, second) -> tuple[list[str], list[int]] | web.Response:
        """The documents and each pair's tokens (query, separator, document) of a rerank or score request."""
        docs = second if isinstance(second, list) else [second]
        if not isinstance(first, str) or not first or not docs or not all(isinstance(d, str) for d in docs):
            return _error(400, "give a text query and one or more text documents", "BadRequestError")
        q = count_text_tokens(first)
        return docs, [q + 1 + count_text_tokens(d) for d in docs]

    async def rerank(self, request: web.Request) -> web.Response:
        body = await self.http.request_body(request)
        if isinstance(body, web.Response):
            return body
        pairs = self._pairs(body.get("query"), body.get("documents"))
        if isinstance(pairs, web.Response):
            return pairs
        docs, lengths = pairs
        ran = await self._run(request, lengths, body)
        if isinstance(ran, web.Response):
            return ran
        lengths, model = ran
        results = sorted(({"index": i, "document": {"text": d, "multi_modal": None},
                           "relevance_score": _score(f"{body['query']}{d}")}
                          for i, d in enumerate(docs)), key=lambda r: -r["relevance_score"])
        top_n = body.get("top_n") or 0
        return web.json_response({"id": f"rerank-{uuid.uuid4().hex}", "model": model,
                                  "usage": {"prompt_tokens": sum(lengths), "total_tokens": sum(lengths)},
                                  "results": results[:top_n] if top_n else results})

    async def score(self, request: web.Request) -> web.Response:
        body = await self.http.request_body(request)
        if isinstance(body, web.Response):
            return body
        first = body.get("text_1", body.get("queries"))
        pairs = self._pairs(first, body.get("text_2", body.get("items", body.get("documents"))))
        if isinstance(pairs, web.Response):
            return pairs
        docs, lengths = pairs
        ran = await self._run(request, lengths, body)
        if isinstance(ran, web.Response):
            return ran
        lengths, model = ran
        data = [{"index": i, "object": "score", "score": _score(f"{first}{d}")} for i, d in enumerate(docs)]
        return web.json_response({"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                                  "model": model, "data": data, "usage": self._usage(sum(lengths))})


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
