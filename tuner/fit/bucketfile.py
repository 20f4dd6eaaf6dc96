"""vllm-gaudi's bucket file (`VLLM_BUCKETING_FROM_FILE`, vllm_gaudi/extension/bucketing/file_strategy.py).

One Python tuple literal per line: `(batch_size, query_len, context_blocks)`; any element may be a list
(from v0.26.0 on also `range(start, stop[, step])`, expanded before parsing when it has at most 10,000
elements), and the line stands for the Cartesian product of its elements. A query length of 1 makes a
decode bucket, anything else a prompt bucket. `#` starts a comment line; blank lines are skipped.
The server (strict=False) skips, with a warning naming the line, a line that is not a literal or not a
3-tuple, and dies on an element `int()` cannot convert; our own tools (strict=True) reject both with the
line number. Supported from vllm-gaudi v0.11.2 (the file strategy's first release) on.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path
from typing import Iterable, Sequence


class BucketFileError(ValueError):
    """A line of a bucket file we cannot take; the message names the file and line."""


_RANGE = re.compile(r"range\(\s*(-?\d+)\s*,\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?\)")
MAX_RANGE_ELEMENTS = 10_000


def expand_ranges(line: str) -> str:
    """`range(a, b[, c])` -> the list it stands for; left as written when its step is 0 or it is too long
    (the literal parser then rejects the line, as upstream's does)."""

    def replace(m: re.Match) -> str:
        start, stop = int(m.group(1)), int(m.group(2))
        step = int(m.group(3)) if m.group(3) else 1
        if step == 0 or len(range(start, stop, step)) > MAX_RANGE_ELEMENTS:
            return m.group(0)
        return repr(list(range(start, stop, step)))

    return _RANGE.sub(replace, line)


def format_bucket_file(prompt_bs: Sequence[int], prompt_query: Sequence[int],
                       decode: Iterable[tuple[int, Sequence[int]]], header: Sequence[str] = ()) -> str:
    """Prompt buckets as one Cartesian line (bs list x query list x context 0), decode buckets as one
    line per batch size with its own context-block list."""
    lines = [f"# {h}" for h in header]
    lines.append("# Prompt: (batch_size, query_len, context_blocks); Decode: (batch_size, 1, context_blocks)")
    lines.append(f"({list(prompt_bs)}, {list(prompt_query)}, 0)")
    for bs, blocks in decode:
        lines.append(f"({bs}, 1, {list(blocks)})")
    return "\n".join(lines) + "\n"


def _as_list(value, where: str, strict: bool) -> list[int]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if strict and (isinstance(item, bool) or not isinstance(item, int) or item < 0):
            raise BucketFileError(f"{where}: {item!r} is not a non-negative integer")
        try:
            out.append(int(item))  # the server's own conversion: 2.7 -> 2, True -> 1
        except (TypeError, ValueError):
            raise BucketFileError(f"{where}: the server cannot convert {item!r} to an integer and stops") from None
    return out


def parse_bucket_file(text: str, source: str = "<bucket file>", *, strict: bool = True,
                      warnings: list[str] | None = None) -> tuple[list[tuple], list[tuple]]:
    """(prompt buckets, decode buckets), each sorted as upstream returns them. With strict=False, lines
    the server would skip are skipped and its warning is appended to `warnings`."""
    prompt, decode = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            value = ast.literal_eval(expand_ranges(line))
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            if strict:
                raise BucketFileError(f"{where}: not a Python tuple literal: {line[:80]!r}") from None
            if warnings is not None:
                warnings.append(f"Skipping invalid bucketing line {number} in {source}")
            continue
        if not isinstance(value, tuple) or len(value) != 3:
            if strict:
                raise BucketFileError(f"{where}: expected (batch_size, query_len, context_blocks), got {line[:80]!r}")
            if warnings is not None:
                warnings.append(f"Skipping line {number} due to incorrect format in {source}")
            continue
        dims = [_as_list(v, where, strict) for v in value]
        for bucket in itertools.product(*dims):
            (decode if bucket[1] == 1 else prompt).append(bucket)
    return sorted(prompt), sorted(decode)


def read_bucket_file(path: str | Path) -> tuple[list[tuple], list[tuple]]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BucketFileError(f"cannot read bucket file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BucketFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_bucket_file(text, str(path))
