"""Bucket lists as numpy arrays, worked out once per list that many predictions share.

A plan predicts tens of thousands of configurations whose bucket lists mostly coincide (a padding-aware
prompt list of ~1,500 buckets is the same for every max_num_seqs, KV block count and graph memory).
bulk.BulkModel hands every configuration that builds the same list one SharedBuckets object; the
arrays derived from a list alone (the shape of each bucket, the KV blocks a decode bucket reads) are
then kept on it and reused. A plain list gets the same arrays, computed afresh: the values never depend
on whether the list was shared (tests/perfmodel/test_bulk.py holds both paths equal).
"""

from __future__ import annotations

import copy

import numpy as np

from .costs import decode_blocks, prompt_shape


class SharedBuckets(list):
    """A bucket list shared by the predictions that build it; never changed (a copy is a plain list)."""

    __slots__ = ("memo",)

    def __init__(self, items=()):
        super().__init__(items)
        self.memo: dict = {}

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo) -> list:  # the engine deep-copies a plan to add runtime buckets to it
        return [copy.deepcopy(b, memo) for b in self]


def _memoised(buckets, key, make) -> np.ndarray:
    memo = getattr(buckets, "memo", None)
    if memo is None:
        return make()
    found = memo.get(key)
    if found is None or len(found) != len(buckets):  # first use, or the list was changed behind our back
        found = memo[key] = make()
    return found


def prompt_shapes(buckets) -> np.ndarray:
    """(bs, seq, ctx_blocks) of each prompt bucket, as floats (costs.prompt_shape, row by row)."""
    return _memoised(buckets, "prompt", lambda: np.array([prompt_shape(b) for b in buckets], dtype=float
                                                         ).reshape(len(buckets), 3))


def prompt_tokens(buckets, block_size: int) -> np.ndarray:
    """Tokens each prompt bucket holds: bs x (seq + ctx_blocks x block_size)."""
    def make():
        s = prompt_shapes(buckets)
        return s[:, 0] * (s[:, 1] + s[:, 2] * block_size)
    return _memoised(buckets, ("tokens", block_size), make)


def decode_block_counts(profile: str, buckets, block_size: int) -> np.ndarray:
    """KV blocks each decode bucket reads (costs.decode_blocks), as floats."""
    return _memoised(buckets, ("decode", profile, block_size), lambda: np.array(
        [decode_blocks(profile, b, block_size) for b in buckets], dtype=float))
