"""Pooling requests as vllm bench serve 0.32 sends them (vllm/benchmarks/lib/endpoint_request_func.py):
embeddings, the pooling API and rerank. One JSON answer each, no token stream: the figures are end-to-end
latency, requests and inputs a second (metrics.compute_pooling_metrics).

What is sent, by backend (vLLM's payloads; ``truncate_prompt_tokens: -1`` as vLLM's client sends it, so a
prompt longer than a small embedding model's context is cut by the server, not refused):

* ``openai-embeddings`` (/v1/embeddings) and ``vllm-pooling`` (/pooling): ``input``, the prompt; a batch of
  ``--random-batch-size`` prompts is a list of them. Token-id lists of exact lengths, as our completions
  prompts: only prompt buckets serve a pooling model, and a re-tokenized text would land in another one.
* ``openai-embeddings-chat`` (/v1/embeddings): ``messages``, one user message with the text.
* ``infinity-embeddings`` (/v1/embeddings of an Infinity server): ``input``, the text (it takes no ids).
* ``vllm-rerank`` (/rerank): ``query`` and ``documents``, texts (vLLM's rerank API takes no ids), drawn as
  vLLM's random-rerank dataset draws them (:class:`RerankWorkload`).
* The image-embedding backends, for requests with images (our trace dataset's: vLLM's client allows random-mm
  only with openai-chat, and so does bench; without images each is its text backend):
  ``openai-embeddings-clip`` a user message of an empty text and the images (CLIP embeds an image alone);
  ``openai-embeddings-vlm2vec`` the images first, then "Represent the given image." (requests of even index) or
  "Represent the given image with the following question: <prompt>" (odd); ``infinity-embeddings-clip`` the
  first image's URL as ``input`` with ``modality: image`` (an Infinity server's API).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from .sse import ERROR_EXCERPT
from .workload import RandomWorkload, RequestSpec, Workload

# backend -> (request kind, default path, the ending vLLM's client requires of the URL)
POOLING_ROUTES = {"openai-embeddings": ("embeddings", "/v1/embeddings", "embeddings"),
                  "openai-embeddings-chat": ("embeddings-chat", "/v1/embeddings", "embeddings"),
                  "infinity-embeddings": ("infinity", "/v1/embeddings", "embeddings"),
                  "vllm-pooling": ("pooling", "/pooling", "pooling"),
                  "vllm-rerank": ("rerank", "/rerank", "rerank"),
                  "openai-embeddings-clip": ("embeddings-clip", "/v1/embeddings", "embeddings"),
                  "openai-embeddings-vlm2vec": ("embeddings-vlm2vec", "/v1/embeddings", "embeddings"),
                  "infinity-embeddings-clip": ("infinity-clip", "/v1/embeddings", "embeddings")}
ID_KINDS = ("embeddings", "pooling")  # the kinds whose prompts go as token ids
IMAGE_KINDS = ("embeddings-clip", "embeddings-vlm2vec", "infinity-clip")  # the kinds that send a request's images
# vLLM's _preprocess_vlm2vec: the text that goes with the images
VLM2VEC_IMAGE_ONLY = "Represent the given image."
VLM2VEC_WITH_QUESTION = "Represent the given image with the following question: "


@dataclass(frozen=True)
class BatchRecipe:
    """Several prompts sent in one request (a batch of inputs; for rerank the query first, then documents)."""

    parts: tuple

    def build(self) -> list:
        return [p.build() for p in self.parts]

    def build_array(self) -> list:
        return [p.build_array() for p in self.parts]


def spec_inputs(kind: str, spec: RequestSpec) -> int:
    """vLLM's num_input_sequences: the documents of a rerank request, the prompts of a batch, else 1."""
    if isinstance(spec.recipe, BatchRecipe):
        return max(1, len(spec.recipe.parts) - (kind == "rerank"))
    return 1


def _image_content(kind: str, text: str, images: list[dict], index: int) -> list[dict]:
    """The content parts, in order, an image-embedding backend sends with its images (vLLM's _preprocess_clip
    and _preprocess_vlm2vec, then _get_chat_content)."""
    if kind == "embeddings-vlm2vec":
        text = VLM2VEC_IMAGE_ONLY if index % 2 == 0 else VLM2VEC_WITH_QUESTION + text
        return [*images, {"type": "text", "text": text}]
    return [{"type": "text", "text": ""}, *images]


def read_answer(kind: str, encoding_format: str | None, raw: bytes, metadata: str | None) -> tuple[int | None,
                                                                                                 str | None]:
    """(the prompt tokens its usage states, or None; why it is no answer, or None) of a pooling request's 200
    answer, as vLLM's client reads it: JSON with its embeddings, data or ranking; or, for encoding_format bytes
    and bytes_only (not a rerank's), the vectors' bytes, with what is where and the usage in a `metadata`
    header ("bytes") or nothing else ("bytes_only": the tokens are the ones sent)."""
    binary = kind != "rerank" and encoding_format in ("bytes", "bytes_only")
    try:
        answer = (orjson.loads(metadata) if metadata else {"data": [raw] if raw else []}) if binary else \
            orjson.loads(raw)
    except ValueError:
        what = "its metadata header" if binary else "the answer"
        return None, f"HTTP 200 but {what} is not JSON: {(metadata or raw)[:ERROR_EXCERPT]!r}"
    what = "results" if kind == "rerank" else "data"
    if not isinstance(answer, dict) or not answer.get(what) or binary and not raw:
        return None, f"HTTP 200 but the answer carries no {what!r}: {raw[:ERROR_EXCERPT]!r}"
    usage = answer.get("usage") or {}
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return (int(tokens) if tokens is not None else None), None


def pooling_payload(kind: str, model: str, prompt: Any, batch: bool, text_of: Callable[[Any], str],
                    extra: dict[str, Any], images: list[dict] | tuple = (), index: int = 0) -> dict[str, Any]:
    """The request body of one pooling request. ``prompt``: token ids or a text, or with ``batch`` (a
    BatchRecipe's) a list of them; ``text_of`` makes a text of token ids for the kinds that send text;
    ``images``: the request's image content parts (image kinds only), ``index`` its number (vlm2vec's text)."""

    def text(p: Any) -> str:
        return p if isinstance(p, str) else text_of(p)

    body: dict[str, Any] = {"model": model}
    if images and kind == "infinity-clip":
        body["input"] = images[0]["image_url"]["url"]
        body["modality"] = "image"
    elif images and kind in IMAGE_KINDS:
        parts = _image_content(kind, text(prompt[0] if batch else prompt), list(images), index)
        body["messages"] = [{"role": "user", "content": parts}]
    elif kind == "rerank":
        parts = prompt if batch else [prompt, prompt]  # a single prompt (a probe): ranked against itself
        body["query"] = text(parts[0])
        body["documents"] = [text(p) for p in parts[1:]]
    elif kind in ("embeddings-chat", "embeddings-clip", "embeddings-vlm2vec"):  # image kinds without images
        first = prompt[0] if batch else prompt
        body["messages"] = [{"role": "user", "content": [{"type": "text", "text": text(first)}]}]
    elif kind in ("infinity", "infinity-clip"):
        body["input"] = [text(p) for p in prompt] if batch else text(prompt)
    else:  # embeddings, pooling: token ids as they are (a text prompt, a probe's "Hi", as text)
        body["input"] = prompt
    if kind not in ("infinity", "infinity-clip"):
        body["truncate_prompt_tokens"] = -1
    body.update(extra)
    return body


class BatchedWorkload(Workload):
    """vLLM's --random-batch-size: consecutive prompts of a workload grouped into requests of ``size``
    inputs (the last one may hold fewer), each one request of the embeddings or pooling API."""

    kind = "batched"

    def __init__(self, inner: Workload, size: int) -> None:
        if size < 1:
            raise ValueError(f"--random-batch-size must be at least 1, got {size}")
        self.inner, self.size = inner, size
        self.token_space, self.seed = inner.token_space, inner.seed

    def _group(self, specs: list[RequestSpec]) -> list[RequestSpec]:
        out = []
        for n, first in enumerate(range(0, len(specs), self.size)):
            part = specs[first:first + self.size]
            out.append(RequestSpec(index=n, prompt_len=sum(s.prompt_len for s in part), output_len=0,
                                   recipe=BatchRecipe(tuple(s.recipe for s in part))))
        return out

    def lengths(self) -> tuple[list[int], list[int]]:
        specs = self.requests()
        return [s.prompt_len for s in specs], [0] * len(specs)

    def requests(self) -> list[RequestSpec]:
        return self._group(self.inner.requests())

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        return self._group(self.inner.warmup_requests(n * self.size))

    def params(self) -> dict[str, Any]:
        return {**self.inner.params(), "batch_size": self.size, "inputs": self.inner.num_prompts}

    def describe(self) -> dict[str, Any]:
        d = {k: v for k, v in self.inner.describe().items() if not k.startswith("output_len")}  # nothing generated
        d.update({"batch_size": self.size, "inputs": self.inner.num_prompts, "num_prompts": len(self.requests()),
                  "input_len_stats_per_input": d.pop("prompt_len_stats", None)})
        return d


@dataclass
class RerankWorkload(Workload):
    """vLLM's random-rerank dataset: one query shared by every request, and ``num_prompts`` documents in
    requests of ``batch_size``. A reranker (``reranker``) sees query + separator + document, so the query
    is about half of --random-input-len and each document the rest; an embedding model scoring pairs
    (vLLM's --no-reranker) gets documents of the whole input length, the query taking one of them.
    Lengths are drawn in vLLM's way (its range ratio); the texts are the client's (their server-side
    counts come back in each answer's usage)."""

    input_len: int
    num_prompts: int = 1000
    batch_size: int = 1
    range_ratio: float = 0.0
    reranker: bool = True
    seed: int = 0
    ids: dict = field(default_factory=dict)
    token_space: Any = field(default=None, init=False, repr=False, compare=False)

    kind = "random-rerank"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"--random-batch-size must be at least 1, got {self.batch_size}")
        if not self.reranker and (self.num_prompts < 2 or self.batch_size < 2):
            raise ValueError("--no-reranker needs --num-prompts and --random-batch-size of 2 or more (the "
                             "query takes one of each)")
        sep = int(self.reranker)
        query_len = self.input_len // 2 - sep if self.reranker else self.input_len
        if query_len < 1:
            raise ValueError(f"--random-input-len {self.input_len} leaves no query (a reranker's query is half "
                             "of it, less a separator)")
        self._query = RandomWorkload(query_len, 1, range_ratio=self.range_ratio, num_prompts=1,
                                     seed=self.seed + 1, **self.ids)
        q = self._query.lengths()[0][0]
        docs = self.num_prompts - (0 if self.reranker else 1)
        doc_len = self.input_len - q - sep if self.reranker else self.input_len
        if doc_len < 1:
            raise ValueError(f"--random-input-len {self.input_len} leaves no document after a {q}-token query")
        self._docs = RandomWorkload(doc_len, 1, range_ratio=self.range_ratio, num_prompts=docs, seed=self.seed,
                                    **self.ids)
        self.token_space = self._docs.token_space

    @property
    def _per_request(self) -> int:
        return self.batch_size - (0 if self.reranker else 1)

    def _specs(self, docs: list[RequestSpec]) -> list[RequestSpec]:
        query = self._query.requests()[0]
        size, sep = self._per_request, int(self.reranker)
        out = []
        for n, first in enumerate(range(0, len(docs), size)):
            part = docs[first:first + size]
            q_tokens = (query.prompt_len + sep) * len(part) if self.reranker else query.prompt_len
            out.append(RequestSpec(index=n, prompt_len=q_tokens + sum(d.prompt_len for d in part), output_len=0,
                                   recipe=BatchRecipe((query.recipe, *(d.recipe for d in part)))))
        return out

    def lengths(self) -> tuple[list[int], list[int]]:
        specs = self.requests()
        return [s.prompt_len for s in specs], [0] * len(specs)

    def requests(self) -> list[RequestSpec]:
        return self._specs(self._docs.requests())

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        return self._specs(self._docs.warmup_requests(n * self._per_request))

    def params(self) -> dict[str, Any]:
        return {"input_len": self.input_len, "batch_size": self.batch_size, "range_ratio": self.range_ratio,
                "reranker": self.reranker, "seed": self.seed, "query_len": self._query.lengths()[0][0],
                "documents": self._docs.num_prompts}

    def describe(self) -> dict[str, Any]:
        lens = self.lengths()[0]
        return {"kind": self.kind, **self.params(), "num_prompts": len(lens), "prompt_format": "text",
                "prompt_len_stats_client": {"min": min(lens), "max": max(lens), "mean": float(np.mean(lens))}
                if lens else {}}
