"""Request length distributions and prompt token ids.

The definitions follow vLLM's ``vllm bench serve`` (docs/load-metrics.md §1) so our numbers
can be held against theirs. Two deliberate differences, both for bucket fidelity on Gaudi:

* Prompts are **token-id lists of exact length**, never text. A text prompt is re-tokenized by the
  server and comes out a few tokens longer or shorter (chat templates, BOS, merges), which moves it
  into a different prefill bucket: a 1024-token "bucket test" would really be measuring the 1152 or
  2048 bucket. Token ids go through the completions endpoint unchanged, so the server sees exactly
  ``prompt_len`` tokens and no tokenizer is needed on the client.
* Ids are drawn from ``[reserved_ids, vocab_size)``: low ids are where most vocabularies keep their
  special tokens (pad/bos/eos/unk, BERT's [unused*], ...), and an id at or above the model's vocab
  size is rejected by the server. The vocab size is configurable because the tiny CI model has a
  small vocabulary (e.g. 1000).

When each request is sent is arrivals.py; lengths replayed from a trace file are trace.py.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Recorded with every random workload: the range-ratio convention differs between tools
#: (old vLLM ``[in*r, in]``, SGLang ``[max(1,int(in*r)), in]``) and results are not comparable
#: across them.
RANGE_RATIO_CONVENTION = "vllm-range-ratio (PR #16126)"

DEFAULT_VOCAB_SIZE = 32000
DEFAULT_RESERVED_IDS = 100


# ---- Token ids



@dataclass(frozen=True)
class TokenIdSpace:
    """The ids a prompt may use: ``reserved_ids <= id < vocab_size``, minus ``excluded`` (special ids).

    A prompt body is a run of *consecutive* allowed ids (``allowed[(start + j*stride) % n]``), as in
    vLLM's random dataset; requests get distinct ``(start, stride)`` pairs, so no two bodies share
    even their first two tokens (no accidental prefix-cache hits), and 100k-token prompts stay cheap.
    """

    vocab_size: int = DEFAULT_VOCAB_SIZE
    reserved_ids: int = DEFAULT_RESERVED_IDS
    excluded: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.reserved_ids < 0:
            raise ValueError(f"reserved_ids must be >= 0, got {self.reserved_ids}")
        if self.num_allowed < 1:
            raise ValueError(
                f"vocab_size ({self.vocab_size}) must exceed reserved_ids ({self.reserved_ids}) and the "
                "special ids: no token id would be left to build prompts from"
            )

    @property
    def num_allowed(self) -> int:
        return len(_allowed_ids(self.vocab_size, self.reserved_ids, self.excluded))

    def ids(self, positions: np.ndarray) -> np.ndarray:
        """The allowed ids at ``positions`` (taken modulo the number of allowed ids)."""
        allowed = _allowed_ids(self.vocab_size, self.reserved_ids, self.excluded)
        return allowed[positions % len(allowed)]

    def run(self, offset: int, index: int = 0, length: int = 0, stride: int = 1) -> list[int]:
        """``length`` allowed ids from position ``offset + index`` in steps of ``stride`` (wrapping)."""
        return self.run_array(int(offset) + int(index), length, stride).tolist()

    def run_array(self, start: int, length: int, stride: int = 1) -> np.ndarray:
        return self.ids(int(start) + int(stride) * np.arange(length, dtype=np.int64))

    def random(self, rng: np.random.Generator, length: int) -> list[int]:
        """i.i.d. allowed ids (used for the shared prefix, as vLLM does)."""
        if length <= 0:
            return []
        return self.ids(rng.integers(0, self.num_allowed, size=length)).tolist()

    def distinct_starts(self, rng: np.random.Generator, n: int, avoid: Sequence[tuple[int, int]] = ()
                        ) -> list[tuple[int, int]]:
        """``n`` distinct (start, stride) pairs, none in ``avoid``: bodies that differ from the first
        two tokens on. Starts are a random permutation; past ``num_allowed`` the stride grows."""
        m = self.num_allowed
        taken = set(avoid)
        out: list[tuple[int, int]] = []
        stride = 1
        while len(out) < n:
            for start in rng.permutation(m).tolist():
                if (start, stride) not in taken:
                    out.append((start, stride))
                    if len(out) == n:
                        break
            stride += 1
        return out


@functools.lru_cache(maxsize=8)
def _allowed_ids(vocab_size: int, reserved_ids: int, excluded: frozenset[int]) -> np.ndarray:
    ids = np.arange(max(0, reserved_ids), max(0, vocab_size), dtype=np.int64)
    if excluded:
        ids = np.setdiff1d(ids, np.fromiter(excluded, dtype=np.int64), assume_unique=True)
    return ids


@functools.lru_cache(maxsize=65536)
def _hash_block(space: TokenIdSpace, seed: int, hash_id: int, size: int) -> tuple[int, ...]:
    """The token ids of one trace hash block: the same (hash id, size) always gives the same ids."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, hash_id & 0xFFFFFFFFFFFF, size, 0x48415348])  # "HASH"
    return tuple(space.ids(rng.integers(0, space.num_allowed, size=size)).tolist())


# ---- Requests



@dataclass(frozen=True)
class PromptRecipe:
    """How to rebuild one prompt: ``prefix`` + trace hash blocks + ``body_len`` ids from ``start``.

    Prompts are built when sent, not stored: 1000 prompts of 32k tokens held as Python int lists
    would take over a gigabyte in the client.
    """

    space: TokenIdSpace
    prefix: tuple[int, ...]
    start: int
    body_len: int
    stride: int = 1
    blocks: tuple[int, ...] = ()   # trace hash ids, each ``block_len`` ids shared by equal hashes
    block_len: int = 16
    block_total: int = 0           # ids taken from the blocks (the last block may be cut)
    seed: int = 0

    def build_array(self) -> np.ndarray:
        parts = [np.asarray(self.prefix, dtype=np.int64)] if self.prefix else []
        left = self.block_total
        for h in self.blocks:
            size = min(self.block_len, left)
            if size <= 0:
                break
            parts.append(np.asarray(_hash_block(self.space, self.seed, int(h), size), dtype=np.int64))
            left -= size
        parts.append(self.space.run_array(self.start, self.body_len, self.stride))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def build(self) -> list[int]:
        return self.build_array().tolist()


@dataclass(frozen=True)
class TextPrompt:
    """A literal text prompt (the recipe interface of tuner.load.workload.PromptRecipe)."""

    text: str

    def build(self) -> str:
        return self.text

    def build_array(self) -> str:  # sent as is: a text prompt
        return self.text


@dataclass
class RequestSpec:
    """One request to send: its exact prompt length, the output length and when to send it.

    ``prompt`` (token ids) is rebuilt from ``recipe`` on each access. ``send_offset_s`` is the
    scheduled dispatch time relative to the start of the measured run (0 for closed-loop runs);
    it is filled in by :func:`plan_requests`.
    """

    index: int
    prompt_len: int
    output_len: int
    recipe: PromptRecipe = field(repr=False, compare=False)
    send_offset_s: float = 0.0
    images: tuple = field(default=(), repr=False, compare=False)  # tuner.load.multimodal.ImageItem, sent after the text

    @property
    def prompt(self) -> list[int]:
        return self.recipe.build()

    @property
    def prompt_array(self) -> np.ndarray:
        return self.recipe.build_array()

    def to_dict(self, include_prompt: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "prompt_len": self.prompt_len,
            "output_len": self.output_len,
            "send_offset_s": self.send_offset_s,
        }
        if self.images:
            d["images"] = [im.size for im in self.images]
        if include_prompt:
            d["prompt"] = list(self.prompt)
        return d


def _length_stats(values: Sequence[int]) -> dict[str, Any]:
    if not len(values):
        return {"min": None, "max": None, "mean": None}
    arr = np.asarray(values)
    return {"min": int(arr.min()), "max": int(arr.max()), "mean": float(arr.mean())}


class Workload:
    """Base class: a fixed list of (prompt length, output length) pairs plus the token-id space.

    Subclasses are dataclasses with ``token_space`` and ``seed`` that implement :meth:`lengths`,
    :meth:`params` and optionally :meth:`timestamps`. :meth:`requests` is deterministic.
    """

    kind = "abstract"
    token_space: TokenIdSpace
    seed: int

    # -- to be provided by subclasses
    def lengths(self) -> tuple[list[int], list[int]]:
        raise NotImplementedError

    def timestamps(self) -> list[float] | None:
        """Per-request send times (s, relative to the first request) if the workload has them."""
        return None

    def image_count(self) -> int:
        """Images the requests carry (they need a chat backend)."""
        return 0

    def params(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- shared
    @property
    def num_prompts(self) -> int:  # dataclass fields of the same name shadow this
        return len(self.lengths()[0])

    def _spec(self, i: int, prefix: tuple[int, ...], start: tuple[int, int], body_len: int, out_len: int,
              blocks: tuple[int, ...] = (), block_total: int = 0) -> RequestSpec:
        recipe = PromptRecipe(self.token_space, prefix, int(start[0]), int(body_len), int(start[1]),
                              blocks=blocks, block_len=getattr(self, "block_len", 16), block_total=block_total,
                              seed=self.seed)
        return RequestSpec(index=i, prompt_len=len(prefix) + block_total + int(body_len),
                           output_len=int(out_len), recipe=recipe)

    def _prefix(self) -> list[int]:
        """The prefix every prompt shares (empty unless the workload has one)."""
        return []

    def _blocks(self, i: int) -> tuple[tuple[int, ...], int]:
        """Request ``i``'s trace hash blocks and how many of its ids come from them."""
        return (), 0

    def _starts(self, n_warm: int = 0) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Distinct body starts for the measured requests, then for ``n_warm`` warm-pass requests
        (a separate seeded stream, so lengths and shared prefixes keep vLLM's draw order)."""
        rng = np.random.default_rng([self.seed, 0x5045524D])  # "PERM"
        measured = self.token_space.distinct_starts(rng, self.num_prompts)
        warm = self.token_space.distinct_starts(rng, n_warm, avoid=measured) if n_warm else []
        return measured, warm

    def requests(self) -> list[RequestSpec]:
        in_lens, out_lens = self.lengths()
        prefix = tuple(self._prefix())
        starts, _ = self._starts()
        out = []
        for i, (n_in, n_out) in enumerate(zip(in_lens, out_lens)):
            blocks, from_blocks = self._blocks(i)
            out.append(self._spec(i, prefix, starts[i], n_in - from_blocks, n_out, blocks, from_blocks))
        return out

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        """``n`` requests with the workload's lengths (cycled) but *different* token ids.

        Same lengths so the warm pass touches the buckets the measured run will use; different ids
        so the measured prompts do not hit the prefix cache because the warm pass already sent
        them (that would flatter TTFT). A shared prefix, if any, is kept: it is shared by design.
        """
        if n <= 0:
            return []
        base = self.requests()
        if not base:
            return []
        _, starts = self._starts(n)
        out = []
        for i in range(n):
            src = base[i % len(base)].recipe
            out.append(self._spec(i, src.prefix, starts[i], src.body_len, base[i % len(base)].output_len,
                                  src.blocks, src.block_total))
        return out

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for the result file (parameters + realised length stats)."""
        in_lens, out_lens = self.lengths()
        prefix_len = getattr(self, "prefix_len", 0)
        return {
            "kind": self.kind,
            **self.params(),
            "num_prompts": len(in_lens),
            "prompt_format": "token-ids",
            "vocab_size": self.token_space.vocab_size,
            "reserved_ids": self.token_space.reserved_ids,
            # total prompt lengths (prefix included): what the server's buckets see
            "prompt_len_stats": _length_stats([prefix_len + n for n in in_lens]),
            "output_len_stats": _length_stats(out_lens),
        }

    to_dict = describe


@dataclass
class RandomWorkload(Workload):
    """vLLM's random dataset lengths, convention of vLLM PR #16126 (spec §1 "Random dataset lengths").

    input  ~ U{floor(in*(1-r)) .. ceil(in*(1+r))}
    output ~ U{max(1, floor(out*(1-r))) .. max(1, ceil(out*(1+r)))}
    drawn with ``numpy.random.default_rng(seed)`` in vLLM's order (input lengths, output lengths,
    id offsets, then the shared prefix), so the same seed gives the same lengths as vLLM with a
    tokenizer that adds no special tokens (a token-id prompt gets none added).
    The prompt is ``prefix_len`` shared ids + the sampled input length.

    The bounds are computed in floating point exactly as vLLM does, so they can differ by one from
    exact arithmetic: 200 * (1 + 0.1) is 220.00000000000003 and its ceil is 221. We keep vLLM's
    result (same seed -> same lengths as vLLM); :meth:`bounds` reports the range actually used.

    ``special_tokens`` (chat text: what the tokenizer adds, e.g. a BOS) is taken off ``input_len``
    before the range, as vLLM's get_sampling_params does, and added back to each length: the text
    of a request then has exactly the length vLLM samples.
    """

    input_len: int
    output_len: int
    range_ratio: float = 0.0
    num_prompts: int = 1000
    seed: int = 0
    prefix_len: int = 0
    vocab_size: int = DEFAULT_VOCAB_SIZE
    reserved_ids: int = DEFAULT_RESERVED_IDS
    excluded_ids: frozenset[int] = frozenset()  # the tokenizer's special ids
    special_tokens: int = 0  # chat text: sampled without the tokenizer's specials (vLLM's order)
    token_space: TokenIdSpace = field(init=False, repr=False, compare=False)
    _cache: Any = field(default=None, init=False, repr=False, compare=False)

    kind = "random"

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.range_ratio) < 1.0):
            raise ValueError(
                f"range_ratio must be in [0, 1) under the {RANGE_RATIO_CONVENTION} convention, "
                f"got {self.range_ratio}; SGLang/old-vLLM ratios (e.g. 1.0) mean something else"
            )
        _check_non_negative_ints(self, "input_len", "output_len", "num_prompts", "prefix_len", "seed",
                                 "special_tokens")
        if self.prefix_len + math.floor(self._real_input_len() * (1.0 - self.range_ratio)) < 1:
            raise ValueError(
                f"input_len={self.input_len} with range_ratio={self.range_ratio} and "
                f"prefix_len={self.prefix_len} allows an empty prompt; raise input_len or prefix_len"
            )
        self.range_ratio = float(self.range_ratio)
        self.token_space = TokenIdSpace(self.vocab_size, self.reserved_ids, frozenset(self.excluded_ids))

    def _real_input_len(self) -> int:
        return max(0, self.input_len - self.special_tokens)

    def bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Inclusive ((in_low, in_high), (out_low, out_high)) of the sampled lengths (specials not included)."""
        r = self.range_ratio
        in_low = math.floor(self._real_input_len() * (1 - r))
        in_high = math.ceil(self._real_input_len() * (1 + r))
        out_low = max(1, math.floor(self.output_len * (1 - r)))
        out_high = max(1, math.ceil(self.output_len * (1 + r)))
        return (in_low, in_high), (out_low, out_high)

    def _sample(self) -> tuple[list[int], list[int], list[int], list[int]]:
        if self._cache is None:
            (il, ih), (ol, oh) = self.bounds()
            rng = np.random.default_rng(self.seed)
            n = self.num_prompts
            in_lens = (rng.integers(il, ih + 1, size=n) + self.special_tokens).tolist()
            out_lens = rng.integers(ol, oh + 1, size=n).tolist()
            offsets = rng.integers(0, self.vocab_size, size=n).tolist()
            prefix = self.token_space.random(rng, self.prefix_len)
            self._cache = (in_lens, out_lens, offsets, prefix)
        return self._cache

    def lengths(self) -> tuple[list[int], list[int]]:
        in_lens, out_lens, _, _ = self._sample()
        return list(in_lens), list(out_lens)

    def _prefix(self) -> list[int]:
        return list(self._sample()[3])

    def params(self) -> dict[str, Any]:
        (il, ih), (ol, oh) = self.bounds()
        return {
            "range_ratio_convention": RANGE_RATIO_CONVENTION,
            "input_len": self.input_len, "output_len": self.output_len,
            "range_ratio": self.range_ratio, "prefix_len": self.prefix_len, "seed": self.seed,
            "input_len_bounds": [il, ih], "output_len_bounds": [ol, oh],
            **({"special_tokens": self.special_tokens} if self.special_tokens else {}),
        }


@dataclass
class FixedWorkload(Workload):
    """Every request has exactly ``input_len`` prompt tokens and ``output_len`` output tokens."""

    input_len: int
    output_len: int
    num_prompts: int = 1000
    seed: int = 0
    vocab_size: int = DEFAULT_VOCAB_SIZE
    reserved_ids: int = DEFAULT_RESERVED_IDS
    excluded_ids: frozenset[int] = frozenset()  # the tokenizer's special ids
    token_space: TokenIdSpace = field(init=False, repr=False, compare=False)

    kind = "fixed"

    def __post_init__(self) -> None:
        _check_non_negative_ints(self, "input_len", "output_len", "num_prompts", "seed")
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError("input_len and output_len must be >= 1")
        self.token_space = TokenIdSpace(self.vocab_size, self.reserved_ids, frozenset(self.excluded_ids))

    def lengths(self) -> tuple[list[int], list[int]]:
        return [self.input_len] * self.num_prompts, [self.output_len] * self.num_prompts

    def params(self) -> dict[str, Any]:
        return {"input_len": self.input_len, "output_len": self.output_len, "seed": self.seed}


def _check_non_negative_ints(obj: Any, *names: str) -> None:
    for name in names:
        val = getattr(obj, name)
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {val!r}")
        setattr(obj, name, int(val))
