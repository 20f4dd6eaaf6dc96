"""Bucket work memoised by exactly what it reads: a plan of a whole space builds the same prompt list for
thousands of configurations that differ elsewhere (KV blocks, graph memory, max_num_seqs). Each caller
keys its entries by every input of the computation it saves; entries are immutable (callers copy lists
out). Bounded, least recently used out; ENABLED False: nothing kept (the tests compare both paths)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ENABLED = True
MAX_ENTRIES = 256
_ENTRIES: dict[tuple, Any] = {}


def remembered(key: tuple, make: Callable[[], Any]) -> Any:
    """make(), or what it returned for the same key before."""
    if not ENABLED:
        return make()
    found = _ENTRIES.pop(key, None)
    if found is None:
        found = make()
        while len(_ENTRIES) >= MAX_ENTRIES:
            _ENTRIES.pop(next(iter(_ENTRIES)))
    _ENTRIES[key] = found  # the most recent last
    return found


def clear() -> None:
    _ENTRIES.clear()
