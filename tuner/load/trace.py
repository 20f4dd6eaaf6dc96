"""Request lengths (and send times) replayed from a trace file: our CSV / JSONL, or vLLM's timed_trace."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..vocabulary.errors import UserError
from ..vocabulary.textfile import format_suffix, read_text
from .multimodal import image_stats, seeded_image
from .workload import (
    DEFAULT_RESERVED_IDS,
    DEFAULT_VOCAB_SIZE,
    RequestSpec,
    TokenIdSpace,
    Workload,
)


class TraceFormatError(ValueError):
    """A trace file row is malformed; the message names the file, line and field."""


# vLLM timed_trace's fields and their default names (--timed-trace-label-* names others)
TRACE_LABELS = {"timestamp": "timestamp", "input_length": "input_length", "output_length": "output_length",
                "hash_ids": "hash_ids"}


@dataclass
class TraceWorkload(Workload):
    """Lengths (and optional send timestamps, seconds) replayed from a CSV or JSONL file.

    Our format: ``input_len``, ``output_len`` and an optional ``timestamp``. vLLM's ``timed_trace``
    JSONL is accepted too: ``input_length``, ``output_length``, ``timestamp`` and ``hash_ids``; each
    hash id stands for ``block_len`` prompt tokens (vLLM's ``--timed-trace-chunk-hash-size``), equal
    ids give equal tokens, so shared prefixes are replayed. Unlike vLLM, a prompt whose hash ids
    cover less than its ``input_length`` is completed with tokens of its own (exact lengths).
    Timestamps are rebased so the earliest request is sent at t=0 (a trace cut from a log may
    carry epoch seconds); they must be non-decreasing in file order. An optional ``images`` field,
    ``[[width, height], ...]``, gives a request images of those sizes (random pixels, seeded by the
    trace's seed and the request), sent as vLLM's client sends images (``--backend openai-chat``).
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
    images: list[list[tuple[int, int]]] | None = None  # per request, (width, height) of each image
    token_space: TokenIdSpace = field(init=False, repr=False, compare=False)

    kind = "trace"

    def __post_init__(self) -> None:
        if len(self.input_lens) != len(self.output_lens):
            raise ValueError("input_lens and output_lens differ in length")
        if self.timestamps_ is not None and len(self.timestamps_) != len(self.input_lens):
            raise ValueError("timestamps must have one entry per request")
        if self.hash_ids is not None and len(self.hash_ids) != len(self.input_lens):
            raise ValueError("hash_ids must have one entry per request")
        if self.images is not None and len(self.images) != len(self.input_lens):
            raise ValueError("images must have one entry per request")
        if self.block_len < 1:
            raise ValueError(f"block_len must be >= 1, got {self.block_len}")
        self.token_space = TokenIdSpace(self.vocab_size, self.reserved_ids, frozenset(self.excluded_ids))

    @classmethod
    def from_file(cls, path: str | Path, *, seed: int = 0, vocab_size: int = DEFAULT_VOCAB_SIZE,
                  reserved_ids: int = DEFAULT_RESERVED_IDS, excluded_ids: frozenset[int] = frozenset(),
                  num_prompts: int | None = None, block_len: int = 16,
                  time_multiplier: float = 1.0, labels: Mapping[str, str] | None = None,
                  timed: bool = True) -> TraceWorkload:
        """Read the file; ``num_prompts`` keeps the first N requests (an error if it has fewer). ``labels``:
        the file's own names of vLLM's fields (TRACE_LABELS); ``timed`` False leaves the timestamps out
        (vLLM's --no-self-timed: the request rate paces the trace)."""
        path = Path(path)
        try:
            rows = list(_read_trace_rows(path, _renaming(labels)))
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
        if all(has_ts) and timed:
            ts = [r[3] * time_multiplier for r in rows]
            for (line, *_), prev, cur in zip(rows[1:], ts, ts[1:]):
                if cur < prev:
                    raise TraceFormatError(
                        f"{path}:{line}: field 'timestamp' decreases ({cur} after {prev}); "
                        "rows must be in send order"
                    )
            timestamps = [t - ts[0] for t in ts]
        hashes = [r[4] for r in rows]
        images = [r[5] for r in rows]
        return cls(input_lens=[r[1] for r in rows], output_lens=[r[2] for r in rows],
                   timestamps_=timestamps, source=str(path), seed=seed,
                   vocab_size=vocab_size, reserved_ids=reserved_ids, excluded_ids=excluded_ids,
                   hash_ids=hashes if any(hashes) else None, block_len=block_len,
                   images=images if any(images) else None)

    def lengths(self) -> tuple[list[int], list[int]]:
        return list(self.input_lens), list(self.output_lens)

    def timestamps(self) -> list[float] | None:
        return None if self.timestamps_ is None else list(self.timestamps_)

    def _blocks(self, i: int) -> tuple[tuple[int, ...], int]:
        if not self.hash_ids or not self.hash_ids[i]:
            return (), 0
        blocks = tuple(int(h) for h in self.hash_ids[i])
        return blocks, min(self.input_lens[i], self.block_len * len(blocks))

    def _image_items(self, i: int) -> tuple:
        if not self.images:
            return ()
        return tuple(seeded_image(self.seed, i, j, w, h) for j, (w, h) in enumerate(self.images[i]))

    def requests(self) -> list[RequestSpec]:
        specs = super().requests()
        for s in specs:
            s.images = self._image_items(s.index)
        return specs

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        specs = super().warmup_requests(n)
        for s in specs:  # the sizes of the request it copies; other pixels, as its ids differ too
            sizes = self.images[s.index % len(self.input_lens)] if self.images else []
            s.images = tuple(seeded_image(self.seed + 1, s.index, j, w, h) for j, (w, h) in enumerate(sizes))
        return specs

    def image_count(self) -> int:
        return sum(len(x) for x in self.images or [])

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.images:
            d["images"] = image_stats([self._image_items(i) for i in range(len(self.input_lens))])
        return d

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


def _timestamp_field(where: str, raw: Any, name: str = "timestamp") -> float | None:
    if _is_blank(raw):
        return None
    val = _number(raw)
    if not (math.isfinite(val) and val >= 0):
        raise TraceFormatError(f"{where}: field '{name}' must be a finite number of seconds >= 0, "
                               f"got {raw!r}")
    return val


def _images_field(where: str, raw: Any) -> list[tuple[int, int]]:
    """``images``: [[width, height], ...] (a JSON text in a CSV cell), each side a positive integer."""
    if _is_blank(raw):
        return []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise TraceFormatError(f"{where}: field 'images' is not JSON: {raw!r}") from None
    ok = isinstance(raw, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1
                                                    for x in p) for p in raw)
    if not ok:
        raise TraceFormatError(f"{where}: field 'images' must be a list of [width, height] positive integers, "
                               f"got {raw!r}")
    return [(p[0], p[1]) for p in raw]


def _row(path: Path, line: int, row: Mapping[str, Any], said: Mapping[str, str] | None = None) -> tuple:
    """One request; our field names, or vLLM timed_trace's (input_length, output_length, hash_ids); `said`:
    vLLM's field -> the file's own name of it (--timed-trace-label-*), for the messages."""
    where, said = f"{path}:{line}", said or {}

    def key(ours: str, vllms: str) -> str:
        return ours if ours in row else vllms if vllms in row or vllms in said else ours

    in_key, out_key = key("input_len", "input_length"), key("output_len", "output_length")
    hashes = row.get("hash_ids") or []
    if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
        raise TraceFormatError(f"{where}: field '{said.get('hash_ids', 'hash_ids')}' must be a list of integers, "
                               f"got {hashes!r}")
    return (line, _int_field(where, said.get(in_key, in_key), row.get(in_key)),
            _int_field(where, said.get(out_key, out_key), row.get(out_key)),
            _timestamp_field(where, row.get("timestamp"), said.get("timestamp", "timestamp")), hashes,
            _images_field(where, row.get("images")))


def _renaming(labels: Mapping[str, str] | None) -> dict[str, str]:
    """The file's own field name -> vLLM's field, for the labels that differ from vLLM's defaults."""
    out = {}
    for known, name in (labels or {}).items():
        if known not in TRACE_LABELS:
            raise ValueError(f"unknown trace field {known!r} (fields: {', '.join(TRACE_LABELS)})")
        if name and name != TRACE_LABELS[known]:
            out[name] = known
    return out


def _relabel(obj: dict, renaming: Mapping[str, str]) -> dict:
    if not renaming:
        return obj
    kept = {k: v for k, v in obj.items() if k not in renaming.values() and k not in renaming}
    return {**kept, **{known: obj[name] for name, known in renaming.items() if name in obj}}


def _read_trace_rows(path: Path, renaming: Mapping[str, str] | None = None):
    """Yield (line_number, input_len, output_len, timestamp|None, hash_ids, images) from a .csv or .jsonl file
    (also packed: trace.jsonl.gz, .bz2, .xz; or saved as UTF-16); `renaming`: the file's names -> vLLM's."""
    renaming = renaming or {}
    said = {known: name for name, known in renaming.items()}
    if not path.is_file():
        raise TraceFormatError(f"{path}: trace file not found")
    suffix = format_suffix(path)
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise TraceFormatError(f"{path}: unknown trace format '{suffix}' (use .csv or .jsonl)")
    try:
        content = read_text(path, errors="strict").text
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path}: not text ({e})") from None
    except UserError as e:  # zstd, unreadable: named as the rest of a trace's faults are
        raise TraceFormatError(str(e)) from None
    if suffix == ".csv":
        with io.StringIO(content, newline="") as f:
            reader = csv.DictReader(f)
            fields = [h.strip() for h in (reader.fieldnames or [])]
            names = {renaming.get(h, h) for h in fields}
            for need, vllms in (("input_len", "input_length"), ("output_len", "output_length")):
                if need not in names and vllms not in names:
                    raise TraceFormatError(f"{path}:1: header lacks field '{said.get(vllms, need)}' (has {fields})")
            for row in reader:
                row = {(k or "").strip(): v for k, v in row.items() if k != "hash_ids"}
                if all(_is_blank(v) for v in row.values()):
                    continue
                yield _row(path, reader.line_num, _relabel(row, renaming), said)
    else:
        with io.StringIO(content, newline=None) as f:  # \r\n and \r end lines too, as open() read them
            for line, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    raise TraceFormatError(f"{path}:{line}: not valid JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise TraceFormatError(f"{path}:{line}: expected a JSON object per line")
                yield _row(path, line, _relabel(obj, renaming), said)
