"""Padding helpers (common.find_*_bucket / generate_fallback_bucket): the fallback rounding and an
index to find the smallest prepared bucket covering a batch."""

from __future__ import annotations

import bisect
import math

from ..base import Bucket, BucketPlan

FALLBACK_BS_STEP, FALLBACK_SEQ_STEP, FALLBACK_BLOCKS_STEP = 2, 32, 32


def _calc_fallback(n: int, base_step: int) -> int:
    """calc_fallback_value: round n up to a multiple of ceil(n^(1/3)) * base_step (n <= 1 unchanged),
    so gaps widen with n but more gently than exponential buckets."""
    if n <= 1:
        return n
    size = math.ceil(math.pow(n, 1 / 3)) * base_step
    return math.ceil(n / size) * size


class _Index:
    """bs -> query -> sorted ctx values of a sorted 3-D bucket list, to find the smallest bucket (in
    list order) that covers a target without scanning the whole list."""

    def __init__(self, buckets: list[Bucket]):
        self.size = len(buckets)
        self.tree: dict[int, dict[int, list[int]]] = {}
        for b, q, c in buckets:
            self.tree.setdefault(b, {}).setdefault(q, []).append(c)
        for by_query in self.tree.values():
            for ctxs in by_query.values():
                ctxs.sort()  # already sorted for our plans' lists; linear time then
        self.bs = sorted(self.tree)
        self.queries = {b: sorted(qs) for b, qs in self.tree.items()}

    def add(self, bucket: Bucket):
        b, q, c = bucket
        if b not in self.tree:
            bisect.insort(self.bs, b)
            self.tree[b], self.queries[b] = {}, []
        if q not in self.tree[b]:
            bisect.insort(self.queries[b], q)
            self.tree[b][q] = []
        bisect.insort(self.tree[b][q], c)
        self.size += 1

    def find(self, target: Bucket) -> Bucket | None:
        tb, tq, tc = target
        for b in self.bs[bisect.bisect_left(self.bs, tb):]:
            queries = self.queries[b]
            for q in queries[bisect.bisect_left(queries, tq):]:
                ctxs = self.tree[b][q]
                if ctxs[-1] >= tc:
                    return (b, q, ctxs[bisect.bisect_left(ctxs, tc)])
        return None


class _View:
    """A plan copy's index while its list is still the shared list it was copied from (a plan of many
    configurations pads them all against one list): finds through the shared list's index, and indexes
    its own list the first time a runtime bucket joins it."""

    def __init__(self, base: _Index):
        self.base, self.size, self._own = base, base.size, False

    def find(self, target: Bucket) -> Bucket | None:
        return self.base.find(target)

    def add(self, bucket: Bucket):
        if not self._own:
            own = _Index([])
            own.tree = {b: {q: list(c) for q, c in qs.items()} for b, qs in self.base.tree.items()}
            own.bs, own.queries, own.size = list(self.base.bs), {b: list(q) for b, q in self.base.queries.items()}, \
                self.base.size
            self.base, self._own = own, True
        self.base.add(bucket)
        self.size = self.base.size


def _index(plan: BucketPlan, phase: str) -> _Index | _View:
    buckets = plan.prompt if phase == "prompt" else plan.decode
    idx = plan.state.get(f"index_{phase}")
    if idx is None or idx.size != len(buckets):  # first use, or the list was changed behind our back
        # A copy of a list many plans share (state "shared_lists", perfmodel/fastserving.py; the shared list
        # keeps derived data in its `memo`, perfmodel/shapes.py) uses that list's index until it changes.
        shared = (plan.state.get("shared_lists") or {}).get(phase)
        if shared is not None and len(shared) == len(buckets) and idx is None:
            base = shared.memo.get("pad_index")
            if base is None or base.size != len(shared):
                base = shared.memo["pad_index"] = _Index(shared)
            idx = _View(base)
        else:
            idx = _Index(buckets)
        plan.state[f"index_{phase}"] = idx
    return idx


def _contains(sorted_buckets: list[Bucket], bucket: Bucket) -> bool:
    i = bisect.bisect_left(sorted_buckets, bucket)
    return i < len(sorted_buckets) and sorted_buckets[i] == bucket
