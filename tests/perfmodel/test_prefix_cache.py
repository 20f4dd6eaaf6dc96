"""vLLM v1's automatic prefix caching in the simulated server (tuner/perfmodel/prefixcache.py): a request's
leading cached blocks are not computed again (at most all its tokens but the last), its own blocks are cached
once its prefill is done, least recently used out past the capacity; the server's /metrics counts queries and
hits in tokens, as vLLM's. A genuine vLLM answered the same prefix_repetition load with the same counts
(tests/realvllm/test_realvllm.py: 4 prefixes of 256 tokens, 8 prompts, 1024 of 2304 tokens hit)."""

from __future__ import annotations

import json
import re
import urllib.request

from tests.load.test_bench_cli import running_sim, sim_server  # noqa: F401
from tuner.cli import main
from tuner.perfmodel.prefixcache import PrefixCache, block_hashes


def test_hits_are_the_leading_cached_blocks_short_of_the_last_token():
    cache = PrefixCache(block_size=4, capacity_blocks=3)
    a = list(range(10))                                   # blocks [0-3] [4-7], then 2 tokens
    assert len(block_hashes(a, 4)) == 2 and block_hashes(a[:8], 4) == block_hashes(a, 4)
    assert cache.hit_tokens(block_hashes(a, 4), 10) == 0
    cache.insert(block_hashes(a, 4))
    assert cache.hit_tokens(block_hashes(a, 4), 10) == 8
    assert cache.hit_tokens(block_hashes(a[:8], 4), 8) == 4    # a whole-prompt hit keeps its last block to compute
    b = [0, 1, 2, 3, 9, 9, 9, 9]                          # the same first block, another second one
    assert cache.hit_tokens(block_hashes(b, 4), 8) == 4
    assert block_hashes([9, 9, 9, 9, 0, 1, 2, 3], 4)[1] != block_hashes(a, 4)[0]   # chained: position counts
    cache.insert(block_hashes([7] * 8, 4))                # 4 blocks in all: the least recently used leaves
    assert (cache.queries, cache.hits) == (10 + 10 + 8 + 8, 8 + 4 + 4)
    assert cache.hit_tokens(block_hashes(a, 4), 10) == 4      # a's second block was the least recently used


def test_the_simulated_server_skips_cached_prefixes(sim_server, tmp_path):  # noqa: F811
    def counters() -> tuple[float, ...]:
        text = urllib.request.urlopen(sim_server + "/metrics", timeout=30).read().decode()
        return tuple(float(re.search(rf"^vllm:prefix_cache_{k}_total{{[^}}]*}} (\S+)$", text, re.M).group(1))
                     for k in ("queries", "hits"))

    before = counters()
    run = ["bench", "--base-url", sim_server, "--model", "llama", "--vocab-size", "5000", "--disable-tqdm",
           "--max-concurrency", "1", "--time-scale", "0.2", "--random-output-len", "4"]
    shared, alone = tmp_path / "shared.json", tmp_path / "alone.json"
    assert main([*run, "--random-input-len", "32", "--random-prefix-len", "512", "--num-prompts", "8",
                 "--result-file", str(shared)]) == 0
    after = counters()
    assert (after[0] - before[0], after[1] - before[1]) == (8 * 544, 7 * 512)  # the first request computes it
    assert main([*run, "--random-input-len", "544", "--num-prompts", "8", "--result-file", str(alone)]) == 0
    assert counters()[1] == after[1]                                           # nothing shared, nothing hit
    ttft = {k: json.loads(p.read_text())["median_ttft_ms"] for k, p in (("shared", shared), ("alone", alone))}
    assert ttft["shared"] < ttft["alone"] / 2      # 32 tokens prefilled against 544 (with 4 cached blocks)
