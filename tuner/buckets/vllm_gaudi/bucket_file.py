"""VLLM_BUCKETING_FROM_FILE (vllm-gaudi v0.15.1+): buckets listed in a text file instead of a strategy.

One bucket per line, `(bs, query, ctx)`; any element may be a list or `range(start, stop[, step])`,
giving the Cartesian product. Lines that are empty, start with '#', do not parse or are not 3-tuples
are skipped (v0.15.1; v0.26.0 and main crash instead, see `_skip_crash`). A bucket whose query is 1
is a decode bucket, anything else a prompt bucket. The file's buckets then pass the same filters as
generated ones (but get no long-context edge buckets and no decode neighbours).

v0.15.1 evaluates each line as a Python expression with only `range` available; v0.26.0 and later
parse literals after expanding ranges of at most 10,000 elements (longer ones make the line invalid).
We accept literals and ranges in both, which covers every line the v0.26 parser accepts.

Modelled from vllm-project/vllm-gaudi `vllm_gaudi/extension/bucketing/file_strategy.py`.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import re

from ..base import Bucket, BucketConfigError

_RANGE = re.compile(r"range\(\s*(-?\d+)\s*,\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?\)")
_BUCKET_CAP = 1_000_000
_RANGE_CAP = 10_000  # v0.26+: longer ranges are left unexpanded (the line then fails to parse)


def expand_ranges(line: str, capped: bool = True) -> str:
    """`range(a, b[, c])` -> the list it stands for; left as written when its step is 0 or (capped) when it
    is longer than 10,000 elements, so that the literal parser then rejects the line as upstream's does."""
    def repl(m: re.Match) -> str:
        start, stop, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
        if step == 0:
            return m.group(0)
        values = range(start, stop, step)
        if capped and len(values) > _RANGE_CAP:
            return m.group(0)
        return repr(list(values))

    return _RANGE.sub(repl, line)


def _skip_crash(line: str) -> BucketConfigError:
    # v0.26.0 / main log a skipped line with `logger.warning(...)`, but `logger` is the cached factory
    # function there, not a logger: skipping any line crashes.
    return BucketConfigError("AttributeError: 'functools._lru_cache_wrapper' object has no attribute 'warning' "
                             f"(the release fails on the bucket-file line it would skip: {line!r})",
                             "VLLM_BUCKETING_FROM_FILE")


def read_bucket_file(path: str, capped: bool) -> tuple[list[Bucket], list[Bucket]]:
    """(prompt buckets, decode buckets), each sorted, duplicates kept, as the release reads them. A file
    is parsed once while it stays the same (a plan builds one set for thousands of configurations)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise BucketConfigError(f"VLLM_BUCKETING_FROM_FILE={path!r}: {type(exc).__name__}: {exc}",
                                "VLLM_BUCKETING_FROM_FILE") from None
    prompt, decode = _parsed(path, capped, st.st_mtime_ns, st.st_size)
    return list(prompt), list(decode)


@functools.lru_cache(maxsize=256)
def _parsed(path: str, capped: bool, mtime_ns: int, size: int) -> tuple[tuple[Bucket, ...], tuple[Bucket, ...]]:
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise BucketConfigError(f"VLLM_BUCKETING_FROM_FILE={path!r}: {type(exc).__name__}: {exc}",
                                "VLLM_BUCKETING_FROM_FILE") from None
    prompt, decode = [], []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            bucket = ast.literal_eval(expand_ranges(line, capped))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            bucket = None
        if not isinstance(bucket, tuple) or len(bucket) != 3:
            if capped:
                raise _skip_crash(line)
            continue  # v0.15.1 prints the line and skips it
        dims = [v if isinstance(v, list) else [v] for v in bucket]
        count = len(dims[0]) * len(dims[1]) * len(dims[2])
        if len(prompt) + len(decode) + count > _BUCKET_CAP:  # the server would spend hours listing them
            raise BucketConfigError(f"VLLM_BUCKETING_FROM_FILE: line {line[:80]!r} adds {count:,} buckets; "
                                    f"more than {_BUCKET_CAP:,} in all is not modelled (no warm-up ends)",
                                    "VLLM_BUCKETING_FROM_FILE")
        for combo in itertools.product(*dims):
            try:
                bs, query, ctx = (int(v) for v in combo)
            except (TypeError, ValueError) as exc:
                raise BucketConfigError(f"VLLM_BUCKETING_FROM_FILE: line {line!r}: {type(exc).__name__}: {exc}",
                                        "VLLM_BUCKETING_FROM_FILE") from None
            (decode if query == 1 else prompt).append((bs, query, ctx))
    return tuple(sorted(prompt)), tuple(sorted(decode))
