"""Request length distributions, prompt token ids and arrival processes.

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

Arrival processes: closed loop (``request_rate = inf``: every request is ready at t=0, and the load
generator's ``max_concurrency`` semaphore paces them), open loop with gamma-distributed gaps
(vLLM's ``get_request``, including its rescaling of the cumulative times), or trace timestamps.
"""

from __future__ import annotations

import csv
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
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
    token_space: TokenIdSpace = field(init=False, repr=False, compare=False)
    _cache: Any = field(default=None, init=False, repr=False, compare=False)

    kind = "random"

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.range_ratio) < 1.0):
            raise ValueError(
                f"range_ratio must be in [0, 1) under the {RANGE_RATIO_CONVENTION} convention, "
                f"got {self.range_ratio}; SGLang/old-vLLM ratios (e.g. 1.0) mean something else"
            )
        _check_non_negative_ints(self, "input_len", "output_len", "num_prompts", "prefix_len", "seed")
        if self.prefix_len + math.floor(self.input_len * (1.0 - self.range_ratio)) < 1:
            raise ValueError(
                f"input_len={self.input_len} with range_ratio={self.range_ratio} and "
                f"prefix_len={self.prefix_len} allows an empty prompt; raise input_len or prefix_len"
            )
        self.range_ratio = float(self.range_ratio)
        self.token_space = TokenIdSpace(self.vocab_size, self.reserved_ids, frozenset(self.excluded_ids))

    def bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Inclusive ((in_low, in_high), (out_low, out_high)) of the sampled lengths."""
        r = self.range_ratio
        in_low = math.floor(self.input_len * (1 - r))
        in_high = math.ceil(self.input_len * (1 + r))
        out_low = max(1, math.floor(self.output_len * (1 - r)))
        out_high = max(1, math.ceil(self.output_len * (1 + r)))
        return (in_low, in_high), (out_low, out_high)

    def _sample(self) -> tuple[list[int], list[int], list[int], list[int]]:
        if self._cache is None:
            (il, ih), (ol, oh) = self.bounds()
            rng = np.random.default_rng(self.seed)
            n = self.num_prompts
            in_lens = rng.integers(il, ih + 1, size=n).tolist()
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


class TraceFormatError(ValueError):
    """A trace file row is malformed; the message names the file, line and field."""


@dataclass
class TraceWorkload(Workload):
    """Lengths (and optional send timestamps, seconds) replayed from a CSV or JSONL file.

    Our format: ``input_len``, ``output_len`` and an optional ``timestamp``. vLLM's ``timed_trace``
    JSONL is accepted too: ``input_length``, ``output_length``, ``timestamp`` and ``hash_ids``; each
    hash id stands for ``block_len`` prompt tokens (vLLM's ``--timed-trace-chunk-hash-size``), equal
    ids give equal tokens, so shared prefixes are replayed. Unlike vLLM, a prompt whose hash ids
    cover less than its ``input_length`` is completed with tokens of its own (exact lengths).
    Timestamps are rebased so the earliest request is sent at t=0 (a trace cut from a log may
    carry epoch seconds); they must be non-decreasing in file order.
    """

    input_lens: list[int]
    output_lens: list[int]
    timestamps_: list[float] | None = None
    source: str = ""
    seed: int = 0
    vocab_size: int = DEFAULT_VOCAB_SIZE
    reserved_ids: int = DEFAULT_RESERVED_IDS
    excluded_ids: frozenset[int] = frozenset()
    hash_ids: list[list[int]] | None = None
    block_len: int = 16
    token_space: TokenIdSpace = field(init=False, repr=False, compare=False)

    kind = "trace"

    def __post_init__(self) -> None:
        if len(self.input_lens) != len(self.output_lens):
            raise ValueError("input_lens and output_lens differ in length")
        if self.timestamps_ is not None and len(self.timestamps_) != len(self.input_lens):
            raise ValueError("timestamps must have one entry per request")
        if self.hash_ids is not None and len(self.hash_ids) != len(self.input_lens):
            raise ValueError("hash_ids must have one entry per request")
        if self.block_len < 1:
            raise ValueError(f"block_len must be >= 1, got {self.block_len}")
        self.token_space = TokenIdSpace(self.vocab_size, self.reserved_ids, frozenset(self.excluded_ids))

    @classmethod
    def from_file(cls, path: str | Path, *, seed: int = 0, vocab_size: int = DEFAULT_VOCAB_SIZE,
                  reserved_ids: int = DEFAULT_RESERVED_IDS, excluded_ids: frozenset[int] = frozenset(),
                  num_prompts: int | None = None, block_len: int = 16,
                  time_multiplier: float = 1.0) -> TraceWorkload:
        """Read the file; ``num_prompts`` keeps the first N requests (an error if it has fewer)."""
        path = Path(path)
        try:
            rows = list(_read_trace_rows(path))
        except UnicodeDecodeError as e:
            raise TraceFormatError(f"{path}: not UTF-8 text (byte {e.start}); a trace is CSV or JSONL") from None
        except csv.Error as e:
            raise TraceFormatError(f"{path}: not readable as CSV ({e})") from None
        except RecursionError:
            raise TraceFormatError(f"{path}: JSON nested too deeply") from None
        if not rows:
            raise TraceFormatError(f"{path}: no requests in trace file")
        if num_prompts is not None:
            if num_prompts > len(rows):
                raise TraceFormatError(f"{path}: --num-prompts {num_prompts} but the trace holds only "
                                       f"{len(rows)} requests")
            rows = rows[:num_prompts]
        has_ts = [r[3] is not None for r in rows]
        if any(has_ts) and not all(has_ts):
            line = rows[has_ts.index(False)][0]
            raise TraceFormatError(
                f"{path}:{line}: field 'timestamp' missing while other rows have one "
                "(give every row a timestamp or none)"
            )
        timestamps = None
        if all(has_ts):
            ts = [r[3] * time_multiplier for r in rows]
            for (line, *_), prev, cur in zip(rows[1:], ts, ts[1:]):
                if cur < prev:
                    raise TraceFormatError(
                        f"{path}:{line}: field 'timestamp' decreases ({cur} after {prev}); "
                        "rows must be in send order"
                    )
            timestamps = [t - ts[0] for t in ts]
        hashes = [r[4] for r in rows]
        return cls(input_lens=[r[1] for r in rows], output_lens=[r[2] for r in rows],
                   timestamps_=timestamps, source=str(path), seed=seed,
                   vocab_size=vocab_size, reserved_ids=reserved_ids, excluded_ids=excluded_ids,
                   hash_ids=hashes if any(hashes) else None, block_len=block_len)

    def lengths(self) -> tuple[list[int], list[int]]:
        return list(self.input_lens), list(self.output_lens)

    def timestamps(self) -> list[float] | None:
        return None if self.timestamps_ is None else list(self.timestamps_)

    def _blocks(self, i: int) -> tuple[tuple[int, ...], int]:
        if not self.hash_ids or not self.hash_ids[i]:
            return (), 0
        blocks = tuple(int(h) for h in self.hash_ids[i])
        return blocks, min(self.input_lens[i], self.block_len * len(blocks))

    def params(self) -> dict[str, Any]:
        return {"source": self.source, "has_timestamps": self.timestamps_ is not None,
                "timestamps_rebased_to_first": True, "seed": self.seed,
                "hash_block_len": self.block_len if self.hash_ids else None}


def _number(raw: Any) -> float:
    """float(raw), or nan for anything that is not a number (booleans included)."""
    try:
        return math.nan if isinstance(raw, bool) else float(raw)
    except (TypeError, ValueError):
        return math.nan


def _is_blank(raw: Any) -> bool:
    return raw is None or (isinstance(raw, str) and not raw.strip())


def _int_field(where: str, name: str, raw: Any) -> int:
    if _is_blank(raw):
        raise TraceFormatError(f"{where}: field '{name}' is missing")
    val = _number(raw)
    if not (math.isfinite(val) and val.is_integer()):
        raise TraceFormatError(f"{where}: field '{name}' must be an integer, got {raw!r}")
    if val < 1:
        raise TraceFormatError(f"{where}: field '{name}' must be >= 1, got {int(val)}")
    return int(val)


def _timestamp_field(where: str, raw: Any) -> float | None:
    if _is_blank(raw):
        return None
    val = _number(raw)
    if not (math.isfinite(val) and val >= 0):
        raise TraceFormatError(f"{where}: field 'timestamp' must be a finite number of seconds >= 0, "
                               f"got {raw!r}")
    return val


def _row(path: Path, line: int, row: Mapping[str, Any]) -> tuple[int, int, int, float | None, list[int]]:
    """One request; our field names, or vLLM timed_trace's (input_length, output_length, hash_ids)."""
    where = f"{path}:{line}"
    in_key = "input_len" if "input_len" in row else "input_length" if "input_length" in row else "input_len"
    out_key = "output_len" if "output_len" in row else "output_length" if "output_length" in row else "output_len"
    hashes = row.get("hash_ids") or []
    if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
        raise TraceFormatError(f"{where}: field 'hash_ids' must be a list of integers, got {hashes!r}")
    return (line, _int_field(where, in_key, row.get(in_key)),
            _int_field(where, out_key, row.get(out_key)),
            _timestamp_field(where, row.get("timestamp")), hashes)


def _read_trace_rows(path: Path):
    """Yield (line_number, input_len, output_len, timestamp|None, hash_ids) from a .csv or .jsonl file."""
    if not path.is_file():
        raise TraceFormatError(f"{path}: trace file not found")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = [h.strip() for h in (reader.fieldnames or [])]
            for need in ("input_len", "output_len"):
                if need not in fields:
                    raise TraceFormatError(f"{path}:1: header lacks field '{need}' (has {fields})")
            for row in reader:
                row = {(k or "").strip(): v for k, v in row.items() if k != "hash_ids"}
                if all(_is_blank(v) for v in row.values()):
                    continue
                yield _row(path, reader.line_num, row)
    elif suffix in (".jsonl", ".ndjson"):
        with path.open(encoding="utf-8") as f:
            for line, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    raise TraceFormatError(f"{path}:{line}: not valid JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise TraceFormatError(f"{path}:{line}: expected a JSON object per line")
                yield _row(path, line, obj)
    else:
        raise TraceFormatError(f"{path}: unknown trace format '{suffix}' (use .csv or .jsonl)")


# ---- Arrival processes



def gamma_send_offsets(num_prompts: int, request_rate: float, burstiness: float = 1.0,
                       rng: np.random.Generator | None = None) -> list[float]:
    """Cumulative send times as vLLM's ``get_request`` computes them (no ramp-up).

    Gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)); burstiness 1 is Poisson, inf is
    constant spacing. The first request also waits one gap. The cumulative times are then
    rescaled so the last request goes out at exactly ``num_prompts / rate`` (vLLM does this to
    remove the 1-2 % seed-to-seed spread of the sum; we additionally pin the last value so the
    floating-point product cannot miss it by an ulp). ``rate = inf`` sends everything at 0.
    """
    if num_prompts <= 0:
        return []
    if not request_rate > 0:
        raise ValueError(f"request_rate must be > 0 (or inf), got {request_rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if math.isinf(request_rate):
        return [0.0] * num_prompts
    if math.isinf(burstiness):
        gaps = np.full(num_prompts, 1.0 / request_rate)
    else:
        rng = rng if rng is not None else np.random.default_rng(0)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=num_prompts)
    cum = np.cumsum(gaps)
    target = num_prompts / request_rate
    if cum[-1] != 0:
        cum = cum * (target / cum[-1])
        cum[-1] = target
    return cum.tolist()


@dataclass(frozen=True)
class ArrivalPlan:
    """How send times were produced; serialised into the result file."""

    mode: str  # "closed-loop" | "gamma" | "trace"
    request_rate: float
    burstiness: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        d["burstiness"] = "inf" if math.isinf(self.burstiness) else self.burstiness
        return d


def ramp_up_send_offsets(num_prompts: int, strategy: str, start_rps: float, end_rps: float,
                         burstiness: float, rng: np.random.Generator) -> list[float]:
    """vLLM's ramp-up: request i's gap is drawn at the rate interpolated at i/(n-1) (linear, or
    geometric for "exponential"), and the cumulative times are *not* rescaled."""
    if strategy not in ("linear", "exponential"):
        raise ValueError(f"ramp-up strategy must be linear or exponential, got {strategy!r}")
    if start_rps < 0 or end_rps < start_rps or (strategy == "exponential" and start_rps == 0):
        raise ValueError(f"ramp-up needs 0 <= start <= end RPS (exponential: start > 0), got {start_rps}, {end_rps}")
    t, out = 0.0, []
    for i in range(num_prompts):
        progress = i / max(num_prompts - 1, 1)
        rate = (start_rps + (end_rps - start_rps) * progress if strategy == "linear"
                else start_rps * (end_rps / start_rps) ** progress)
        if not rate > 0:
            raise ValueError(f"ramp-up gives request {i} a non-positive rate {rate}")
        t += 1.0 / rate if math.isinf(burstiness) else float(rng.gamma(burstiness, 1.0 / (rate * burstiness)))
        out.append(t)
    return out


def plan_requests(workload: Workload, request_rate: float = math.inf, burstiness: float = 1.0,
                  seed: int | None = None, ramp_up: tuple[str, float, float] | None = None
                  ) -> tuple[list[RequestSpec], ArrivalPlan]:
    """The workload's requests with ``send_offset_s`` filled in, plus the arrival description.

    * the workload has timestamps (a trace): they are the send offsets; ``request_rate`` must be
      inf (a rate would contradict the trace);
    * ``request_rate`` finite: gamma gaps, seeded with ``seed`` (default: the workload's seed);
    * otherwise closed loop: all at t=0, the load generator's concurrency cap does the pacing.
    """
    reqs = workload.requests()
    seed = workload.seed if seed is None else int(seed)
    ts = workload.timestamps()
    if ts is not None:
        if not math.isinf(request_rate):
            raise ValueError("the workload carries its own timestamps; leave request_rate at inf "
                             "(or load the trace without timestamps)")
        offsets, plan = ts, ArrivalPlan("trace", math.inf, burstiness, seed)
    elif ramp_up is not None:
        if not math.isinf(request_rate):
            raise ValueError("a ramp-up sets the request rate; leave --request-rate at inf")
        rng = np.random.default_rng([seed, 0x41525256])
        offsets = ramp_up_send_offsets(len(reqs), *ramp_up, burstiness, rng)
        plan = ArrivalPlan(f"ramp-up-{ramp_up[0]}", math.inf, burstiness, seed)
    elif math.isinf(request_rate):
        if not request_rate > 0:
            raise ValueError(f"request_rate must be > 0, got {request_rate}")
        offsets, plan = [0.0] * len(reqs), ArrivalPlan("closed-loop", math.inf, burstiness, seed)
    else:
        # Own stream for arrivals so changing the rate does not change the lengths.
        rng = np.random.default_rng([seed, 0x41525256])  # "ARRV"
        offsets = gamma_send_offsets(len(reqs), request_rate, burstiness, rng)
        plan = ArrivalPlan("gamma", float(request_rate), float(burstiness), seed)
    for r, off in zip(reqs, offsets):
        r.send_offset_s = float(off)
    return reqs, plan
