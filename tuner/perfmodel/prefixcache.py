"""Automatic prefix caching as a vLLM v1 engine does it (v1/core/kv_cache_manager.py, kv_cache_utils.py), for the
simulated server: the KV of a full block is kept under a hash of its tokens chained to the block before it; a new
request's leading blocks found there are not computed again (at most all of its tokens but the last, which must be
computed to sample from), and its own full blocks are cached once its prefill is done. Blocks no request uses
stay cached until the least recently used make room (here: past the KV cache's block count).

What it changes: a request with a cached prefix prefills only the rest, with the cached blocks as context (a
prompt bucket with context blocks on a 3-D release), so shared prefixes (vLLM's --random-prefix-len,
prefix_repetition, a chat's system prompt) cost what they cost on a real server. The counters are vLLM's
/metrics prefix_cache_queries and prefix_cache_hits, in tokens. Memory is counted per request (the engine gives
every request its own blocks): a real server shares the cached ones, so the simulator preempts a little sooner.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """The chained hashes of the full blocks of a prompt's token ids (a partial last block has none)."""
    out, parent = [], 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start:start + block_size])))
        out.append(parent)
    return tuple(out)


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int):
        self.block_size = block_size
        self.capacity = max(1, capacity_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.queries = 0  # prompt tokens looked up (vllm:prefix_cache_queries)
        self.hits = 0     # of them, found cached (vllm:prefix_cache_hits)

    def hit_tokens(self, hashes: Sequence[int], prompt_len: int) -> int:
        """Tokens of a new request already cached: its leading cached blocks, at most all but its last token."""
        found = 0
        for h in hashes:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            found += 1
        tokens = min(found * self.block_size, (max(0, prompt_len - 1) // self.block_size) * self.block_size)
        self.queries += prompt_len
        self.hits += tokens
        return tokens

    def insert(self, hashes: Sequence[int]) -> None:
        """A request's full blocks, computed: cached (the least recently used leave past the capacity)."""
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
