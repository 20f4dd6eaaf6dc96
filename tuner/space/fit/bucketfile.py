"""Bucket files for vllm-gaudi's file strategy (`VLLM_BUCKETING_FROM_FILE`): written by `fit`, checked
strictly before they are handed to a server.

One Python tuple literal per line, `(batch_size, query_len, context_blocks)`; any element may be a list
or `range(start, stop[, step])`, and the line stands for the Cartesian product of its elements. A query
length of 1 makes a decode bucket, anything else a prompt bucket; `#` starts a comment line. How each
release reads such a file (which lines it skips or dies on, the filters the buckets then pass) is the
bucket engine's: tuner/buckets/vllm_gaudi/bucket_file.py. Here every doubtful line is an error naming
its line, so that a file we write or check never depends on a release's leniency.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path

from ...buckets.vllm_gaudi.bucket_file import expand_ranges

MAX_BUCKETS = 100_000  # far beyond any warm-up; a line of huge ranges is refused before it is expanded


class BucketFileError(ValueError):
    """A line of a bucket file we cannot take; the message names the file and line."""


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


def _as_list(value, where: str) -> list[int]:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise BucketFileError(f"{where}: {item!r} is not a non-negative integer")
    return items


def parse_bucket_file(text: str, source: str = "<bucket file>") -> tuple[list[tuple], list[tuple]]:
    """(prompt buckets, decode buckets), each sorted as upstream returns them."""
    prompt, decode = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            value = ast.literal_eval(expand_ranges(line))
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            raise BucketFileError(f"{where}: not a Python tuple literal: {line[:80]!r}") from None
        if not isinstance(value, tuple) or len(value) != 3:
            raise BucketFileError(f"{where}: expected (batch_size, query_len, context_blocks), got {line[:80]!r}")
        dims = [_as_list(v, where) for v in value]
        count = len(dims[0]) * len(dims[1]) * len(dims[2])
        if len(prompt) + len(decode) + count > MAX_BUCKETS:
            raise BucketFileError(f"{where}: the file lists more than {MAX_BUCKETS:,} buckets "
                                  f"(this line alone {count:,}); no warm-up can compile that many")
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
