"""vLLM v1's automatic prefix caching in the simulated server (tuner/perfmodel/prefixcache.py): a request's
leading cached blocks are not computed again (at most all its tokens but the last), its own blocks are cached
once its prefill is done, least recently used out past the capacity; the server's /metrics counts queries and
hits in tokens, as vLLM's. A genuine vLLM answered the same prefix_repetition load with the same counts
(tests/realvllm/test_realvllm.py: 4 prefixes of 256 tokens, 8 prompts, 1024 of 2304 tokens hit)."""

from __future__ import annotations

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


def test_a_cached_prefix_is_context_not_prefill():
    """On the engine's own clock (no wall time): the same 640-token prompt again prefills one block with 4
    cached blocks as context, a (1, 128, 4) bucket, instead of a (1, 768, 0) one; an unshared prompt pays in full."""
    from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
    from tuner.perfmodel.engine import Engine, SimRequest

    pred = predict_startup("gaudi-main", SimSettings(), ServerInputs(128, 8, 4096, 2048), {})
    assert pred.failure is None and pred.plan.prefix_caching
    engine = Engine(pred)
    engine.prefix_cache = PrefixCache(pred.config.block_size, pred.num_blocks)

    def run(rid: str, ids: list[int]) -> tuple[float, list]:
        engine.add_request(SimRequest(rid, len(ids), 1, 0.0, block_hashes=block_hashes(ids, 128)))
        seconds, buckets = 0.0, []
        while engine.has_work():
            step = engine.step(0.0)
            seconds += step.duration
            buckets += [s.bucket for s in step.shapes]
        return seconds, buckets

    first, again, other = run("a", list(range(640))), run("b", list(range(640))), run("c", list(range(1000, 1640)))
    assert first[1] == other[1] == [(1, 768, 0)] and again[1] == [(1, 128, 4)]
    assert again[0] < first[0] / 2 and first[0] == other[0]
    assert (engine.stats.prompt_tokens, engine.stats.prompt_tokens_cached) == (3 * 640, 512)  # vLLM v1's counters


def test_the_simulated_server_counts_them_as_vllm_does(sim_server, tmp_path):  # noqa: F811
    def counters() -> dict[str, float]:
        text = urllib.request.urlopen(sim_server + "/metrics", timeout=30).read().decode()
        return {k: float(re.search(rf"^vllm:{k}_total{{[^}}]*}} (\S+)$", text, re.M).group(1))
                for k in ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "prompt_tokens_cached")}

    before = counters()
    run = ["bench", "--base-url", sim_server, "--model", "llama", "--vocab-size", "5000", "--disable-tqdm",
           "--max-concurrency", "1", "--time-scale", "0.2", "--random-output-len", "4"]
    assert main([*run, "--random-input-len", "32", "--random-prefix-len", "512", "--num-prompts", "8",
                 "--result-file", str(tmp_path / "shared.json")]) == 0
    after = counters()
    delta = {k: after[k] - before[k] for k in after}
    assert delta == {"prefix_cache_queries": 8 * 544, "prefix_cache_hits": 7 * 512,   # the first computes it
                     "prompt_tokens": 8 * 544, "prompt_tokens_cached": 7 * 512}
    assert main([*run, "--random-input-len", "544", "--num-prompts", "8", "--result-file",
                 str(tmp_path / "alone.json")]) == 0
    assert counters()["prefix_cache_hits"] == after["prefix_cache_hits"]       # nothing shared, nothing hit


def test_the_v1_stats_line_says_the_hit_rate():
    """vLLM v1's periodic line ends `Prefix cache hit rate: X%` (was always 0.0% in the simulator); explain reads it."""
    from types import SimpleNamespace

    from tuner.sim.serve import _StatsLogger

    said = []
    log = SimpleNamespace(info=lambda key, msg, source=None: said.append(msg))
    cache = PrefixCache(128, 100)
    cache.queries, cache.hits = 4000, 3000
    engine = SimpleNamespace(stats=SimpleNamespace(prompt_tokens=4000, generation_tokens=10), kv_usage=0.1,
                             running=[], waiting=[], prefix_cache=cache)
    stats = _StatsLogger(SimpleNamespace(rules=SimpleNamespace(engine="v1")), log, engine)
    stats.step(None, 0.0)
    stats.step(None, 10.0)
    assert said and said[0].endswith("Prefix cache hit rate: 75.0%")
