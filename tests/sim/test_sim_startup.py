"""Startup prediction and startup log of the simulated server, per release, without sleeping.

Line formats are checked with the regexes of docs/bucketing.md (sections C and D).
"""

from __future__ import annotations

import re

import pytest

from tuner.buckets import profiles
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.sim.faults import Faults
from tuner.sim.recipe_cache import RecipeCache
from tuner.sim.startup import run_startup_virtual

# docs/bucketing.md section D (and C for runtime warnings).
PREFIX = re.compile(r"^(INFO|WARNING|ERROR|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[?([\w.]+):(\d+)\]? (.*)$")
FREE = re.compile(r"Free device memory: ([\d.]+ \w+), ([\d.]+ \w+) usable \(gpu_memory_utilization=([\d.]+)\), "
                  r"([\d.]+ \w+) reserved for HPUGraphs \(VLLM_GRAPH_RESERVED_MEM=([\d.]+)\), ([\d.]+ \w+) reserved "
                  r"for KV cache")
HPU_BLOCKS = re.compile(r"# HPU blocks: (\d+), # CPU blocks: (\d+)")
USABLE_BLOCKS = re.compile(r"Usable num_blocks: (\d+), actual allocated num_blocks \(max across layers\): (\d+)")
GENERATED = re.compile(r"Generated (\d+) (prompt|decode) buckets(?: \[[^\]]*\])?: (\[.*\])$")
CONFIG = re.compile(r"(Prompt|Decode) bucket config \(min, step, max_warmup(?:, limit)?\) bs:(\[[^\]]*\]), "
                    r"(seq|block|blocks|query):(\[[^\]]*\])(?:, blocks:(\[[^\]]*\]))?")
WARMUP = re.compile(r"\[Warmup\]\[(Prompt|Decode|Graph/Prompt|Graph/Decode|Graph/prompt|Graph/decode)\]\[(\d+)/(\d+)\] "
                    r"batch_size:(\d+) (seq_len|num_blocks|query_len):(\d+)(?: num_blocks:(\d+))? "
                    r"free_mem:([\d.]+ \w+)$")
FINISHED = re.compile(r"Warmup finished in (\d+) secs, allocated ([\d.]+ \w+) of device memory")
NOT_WARMED = re.compile(r"Configuration: \('?(prompt|decode)'?, (\d+), (\d+)(?:, (\d+))?\) was not warmed-up!")
NOT_PREPARED = re.compile(r"^(Prompt|Decode) bucket for \((\d+), (\d+), (\d+)\) was not prepared\. "
                          r"Adding new bucket: \((\d+), (\d+), (\d+)\)$")
PREEMPTED = re.compile(r"Sequence group (\S+) is preempted by PreemptionMode\.(RECOMPUTE|SWAP) mode because there is "
                       r"not enough KV cache space")
DEVMEM = re.compile(r"RuntimeError: \[Rank:0\] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::\d+ "
                    r"\(\d+\)MB")

SMALL = ServerInputs(block_size=128, max_num_seqs=8, max_model_len=2048, max_num_batched_tokens=4096)


def messages(lines):
    # A record may span lines (vllm-gaudi's "Omitted N buckets:" list): the prefix is on the first.
    return [m.group(5) for m in (PREFIX.match(l.split("\n")[0]) for l in lines) if m]


def start(profile, sim=SimSettings(), inputs=SMALL, env=None, **kw):
    pred = predict_startup(profile, sim, inputs, env or {}, **kw)
    return pred, run_startup_virtual(pred)


@pytest.mark.parametrize("lazy", ["1", None], ids=["lazy", "release-default"])
@pytest.mark.parametrize("profile", list(profiles()))
def test_startup_log_has_the_release_lines(profile, lazy):
    pred, run = start(profile, env={"PT_HPU_LAZY_MODE": lazy} if lazy else {})
    assert pred.failure is None and run.exit_code is None
    msgs = messages(run.lines)
    logger_lines = [l for l in run.lines if not l.startswith(("[Warmup]", "('condition"))]
    unprefixed = [l for l in logger_lines if not PREFIX.match(l.split("\n")[0])]
    assert not unprefixed, unprefixed[:3]
    old_prefix = profile in ("fork-1.17", "fork-1.18", "fork-1.19", "fork-1.20")
    assert all(("[" not in l.split("]")[0]) == old_prefix for l in logger_lines[:5])
    assert any(FREE.search(m) for m in msgs)
    blocks = [HPU_BLOCKS.search(m) or USABLE_BLOCKS.search(m) for m in msgs]
    assert int(next(b for b in blocks if b).group(1)) == pred.num_blocks
    generated = {m.group(2): int(m.group(1)) for m in map(GENERATED.search, msgs) if m}
    assert generated == {"prompt": len(pred.plan.prompt), "decode": len(pred.plan.decode)}
    assert any(CONFIG.search(m) for m in msgs)
    warmup = [m for m in map(WARMUP.search, run.lines) if m]
    compiled = [w for w in warmup if not w.group(1).startswith("Graph")]
    graphed = [w for w in warmup if w.group(1).startswith("Graph")]
    buckets = len(pred.plan.prompt) + len(pred.plan.decode)
    if not pred.graphs:  # PT_HPU_LAZY_MODE=0 (the default of fork main and vllm-gaudi): compile only
        assert len(compiled) == buckets and not graphed
    elif pred.rules.capture == "budget":  # compile every bucket, then capture what fits
        assert len(compiled) == buckets
        assert len(graphed) == len(pred.graphed_prompt) + len(pred.graphed_decode)
    else:  # one compile+capture line per bucket
        assert len(graphed) == buckets and not compiled
    if profile.startswith("gaudi"):
        assert all(l.startswith("[Warmup]") for l in run.lines if "[Warmup]" in l)  # tqdm, no logger prefix
    finished = [FINISHED.search(m) for m in msgs if FINISHED.search(m)]
    assert len(finished) == 1 and abs(int(finished[0].group(1)) - pred.warmup_seconds) <= 0.5
    print(f"\n{profile}: {len(run.lines)} lines, {pred.num_blocks} blocks, "
          f"{len(pred.plan.prompt)}+{len(pred.plan.decode)} buckets, warmup {finished[0].group(1)} s")


def test_timestamps_are_spaced_by_simulated_compile_time():
    pred, run = start("fork-1.17", env={"VLLM_GRAPH_RESERVED_MEM": "0.4"},
                      sim=SimSettings(gpu_memory_utilization=0.5),
                      inputs=ServerInputs(128, 4, 2048, 4096))
    stamps = [PREFIX.match(l).group(2) for l in run.lines if WARMUP.search(l)]
    to_s = lambda s: int(s[-8:-6]) * 3600 + int(s[-5:-3]) * 60 + int(s[-2:])
    span = to_s(stamps[-1]) - to_s(stamps[0])
    print(f"\nfirst to last [Warmup] line: {span} s of simulated time")
    assert 44 <= span <= 50  # the 49 s warmup minus the last capture


def test_enforce_eager_and_lazy_off_capture_no_graphs():
    for sim, env in ((SimSettings(enforce_eager=True), {}), (SimSettings(), {"PT_HPU_LAZY_MODE": "0"})):
        pred, run = start("fork-1.21.2", sim=sim, env=env)
        assert not any("Graph/" in l for l in run.lines)
        assert pred.graphed_prompt == [] and pred.graphed_decode == []
    eager, _ = start("fork-1.21.2", sim=SimSettings(enforce_eager=True))
    lazy, _ = start("fork-1.21.2")
    # enforce_eager also gives the graph reserve back to the KV cache.
    assert eager.memory.graph_reserved == 0 and eager.num_blocks > lazy.num_blocks


def test_skip_warmup():
    pred, run = start("fork-1.21.2", env={"VLLM_SKIP_WARMUP": "true"})
    assert any(m == "Skipping warmup..." for m in messages(run.lines))
    assert not any(WARMUP.search(l) or FINISHED.search(l) for l in run.lines)
    assert pred.warmup_seconds == 0 and not pred.warmed_prompt


def test_prompt_ratio_and_reserved_mem_move_the_capture():
    base, _ = start("fork-1.17", sim=SimSettings(gpu_memory_utilization=0.5), inputs=ServerInputs(128, 4, 2048, 4096),
                    env={"VLLM_GRAPH_RESERVED_MEM": "0.4"})
    small, _ = start("fork-1.17", sim=SimSettings(gpu_memory_utilization=0.5), inputs=ServerInputs(128, 4, 2048, 4096),
                     env={"VLLM_GRAPH_RESERVED_MEM": "0.1"})
    print(f"\nreserved 0.4: {base.num_blocks} blocks, {len(base.graphed_prompt)} prompt graphs; "
          f"reserved 0.1: {small.num_blocks} blocks, {len(small.graphed_prompt)} prompt graphs")
    assert small.num_blocks > base.num_blocks and len(small.graphed_prompt) < len(base.graphed_prompt)
    bad, run = start("fork-1.17", env={"VLLM_GRAPH_PROMPT_STRATEGY": "biggest"})
    assert bad.failure.phase == "warmup" and "Unsupported graph allocation strategy: biggest" in run.lines[-1]
    assert run.exit_code == 1


@pytest.mark.parametrize("case", ["weights", "kv_v0", "kv_v1", "capture", "token_budget"])
def test_impossible_memory_fails_in_its_phase(case):
    if case == "weights":
        pred, run = start("fork-1.21.2", sim=SimSettings(model="llama-3.1-70b"))  # 131 GiB on 94.6 GiB
        phase, pattern = "load", DEVMEM
    elif case == "kv_v0":
        pred, run = start("fork-1.21.2", sim=SimSettings(gpu_memory_utilization=0.2),
                          inputs=ServerInputs(128, 8, 131072, 131072))
        phase = "kv"
        pattern = re.compile(r"ValueError: The model's max seq len \(131072\) is larger than the maximum number of "
                             r"tokens that can be stored in KV cache \(\d+\)")
    elif case == "kv_v1":
        pred, run = start("gaudi-main", sim=SimSettings(gpu_memory_utilization=0.2),
                          inputs=ServerInputs(128, 8, 131072, 8192))
        phase = "kv"
        pattern = re.compile(r"ValueError: To serve at least one request with the models's max seq len \(131072\), "
                             r"\([\d.]+ GiB KV cache is needed, which is larger than the available KV cache memory")
    elif case == "capture":  # capture-everything release with no memory left for graphs
        pred, run = start("fork-1.22", sim=SimSettings(gpu_memory_utilization=1.0),
                          env={"VLLM_GRAPH_RESERVED_MEM": "0", "PT_HPU_LAZY_MODE": "1"})
        phase, pattern = "warmup", DEVMEM
    else:
        pred, run = start("fork-1.21.2", inputs=ServerInputs(128, 8, 4096, 2048))
        phase = "config"
        pattern = re.compile(r"ValueError: max_num_batched_tokens \(2048\) is smaller than max_model_len \(4096\)")
    print(f"\n{case}: phase {pred.failure.phase}: {run.lines[-1]}")
    assert pred.failure.phase == phase and run.exit_code == 1
    assert pattern.search(run.lines[-1]) and run.lines[-4] == "Traceback (most recent call last):"
    assert not any(FINISHED.search(l) for l in run.lines)
    if phase == "warmup":
        assert any(WARMUP.search(l) for l in run.lines)


def test_fp8_compiles_longer_and_fp8_kv_holds_more_blocks():
    bf16, _ = start("fork-1.21.2")
    fp8, _ = start("fork-1.21.2", sim=SimSettings(dtype="fp8", kv_dtype="fp8"))
    print(f"\nbf16: warmup {bf16.warmup_seconds:.0f} s, {bf16.num_blocks} blocks; "
          f"fp8: warmup {fp8.warmup_seconds:.0f} s, {fp8.num_blocks} blocks")
    assert fp8.warmup_seconds > 5 * bf16.warmup_seconds
    assert fp8.num_blocks > 1.9 * bf16.num_blocks


def _boot_with_cache(env, sim, inputs):
    cache = RecipeCache.from_env(env["PT_HPU_RECIPE_CACHE_CONFIG"])
    pred = predict_startup("fork-1.21.2", sim, inputs, env, cache.open())
    run = run_startup_virtual(pred, cache=cache)
    return pred, int(next(FINISHED.search(l) for l in run.lines if FINISHED.search(l)).group(1))


def test_recipe_cache_second_start_hits_and_changed_config_misses(tmp_path):
    env = {"PT_HPU_RECIPE_CACHE_CONFIG": f"{tmp_path}/cache,False,8192"}
    cold_pred, cold = _boot_with_cache(env, SimSettings(gpu_memory_utilization=0.9), SMALL)
    files = len(list((tmp_path / "cache").iterdir()))
    warm_pred, warm = _boot_with_cache(env, SimSettings(gpu_memory_utilization=0.9), SMALL)
    changed_pred, changed = _boot_with_cache(env, SimSettings(gpu_memory_utilization=0.8), SMALL)
    capture_cold = sum(s.seconds for s in cold_pred.steps if s.kind == "capture")
    capture_warm = sum(s.seconds for s in warm_pred.steps if s.kind == "capture")
    print(f"\nrecipe cache: cold {cold} s ({files} recipes written), second start {warm} s, changed config "
          f"{changed} s")
    assert files == len(cold_pred.plan.prompt) + len(cold_pred.plan.decode)
    assert all(s.cache_hit for s in warm_pred.steps if s.kind == "compile")
    assert not any(s.cache_hit for s in changed_pred.steps)
    assert capture_warm == capture_cold > 0  # a hit skips the graph compiler, never the HPU-graph capture
    assert warm < cold and warm < changed


# The README demo's balanced pick (fork-1.21.2, Llama-3.1-8B, Gaudi 2): the guide's figures are for
# the whole warmup (managing_warm-up.md: 66 s -> 23 s BF16, 504 s -> 34 s FP8), so that is what the
# simulator must reproduce, within 10%.
DEMO_PICK = ServerInputs(block_size=128, max_num_seqs=64, max_model_len=2048, max_num_batched_tokens=4096)
DEMO_ENV = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_GRAPH_RESERVED_MEM": "0.3",
            "VLLM_DECODE_BS_BUCKET_STEP": "32", "VLLM_PROMPT_SEQ_BUCKET_STEP": "512"}


@pytest.mark.parametrize("dtype,guide", [("bf16", 23 / 66), ("fp8", 34 / 504)])
def test_whole_cached_warmup_over_cold_is_the_guides_ratio(tmp_path, dtype, guide):
    env = {**DEMO_ENV, "PT_HPU_RECIPE_CACHE_CONFIG": f"{tmp_path}/cache,False,65536"}
    sim = SimSettings(dtype=dtype, kv_dtype=dtype)
    cold_pred, cold = _boot_with_cache(env, sim, DEMO_PICK)
    warm_pred, warm = _boot_with_cache(env, sim, DEMO_PICK)
    ratio = warm_pred.warmup_seconds / cold_pred.warmup_seconds
    print(f"\n{dtype}: Warmup finished in {cold} secs cold, {warm} secs cached: x{ratio:.3f} (guide x{guide:.3f})")
    assert all(s.cache_hit for s in warm_pred.steps if s.kind == "compile")
    assert abs(ratio - guide) <= 0.1 * guide
    assert abs(warm / cold - guide) <= 0.1 * guide  # the logged figures, rounded to seconds


def test_warmup_faults_stop_the_log_where_they_happen():
    pred = predict_startup("fork-1.21.2", SimSettings(), SMALL, {})
    for fault, last in (("crash-warmup", "Graph compile failed"), ("oom-warmup", "PT_DEVMEM")):
        run = run_startup_virtual(pred, Faults.parse([f"{fault}:at=0.5"]))
        assert run.exit_code == 1 and last in run.lines[-1]
        assert not any(FINISHED.search(l) for l in run.lines)
    hung = run_startup_virtual(pred, Faults.parse(["hang-warmup"]))
    assert hung.hung and hung.exit_code is None and not any(FINISHED.search(l) for l in hung.lines)


def test_prediction_is_pure_and_repeatable():
    a = predict_startup("gaudi-main", SimSettings(device="gaudi3"), SMALL, {})
    b = predict_startup("gaudi-main", SimSettings(device="gaudi3"), SMALL, {})
    assert (a.num_blocks, a.warmup_seconds, a.plan.prompt, a.steps) == (b.num_blocks, b.warmup_seconds, b.plan.prompt,
                                                                        b.steps)


def test_a_max_model_len_past_the_models_is_refused_as_vllm_refuses_it():
    # Llama-3.1-8B serves 131,072 tokens: 262,144 stops the server at its config check, with vLLM's words, unless
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 forces it
    from tuner.explain import explain
    from tuner.explain.render import plain_words

    long = ServerInputs(block_size=128, max_num_seqs=8, max_model_len=262144, max_num_batched_tokens=262144)
    pred, run = start("gaudi-main", inputs=long)
    assert pred.failure.phase == "config" and run.exit_code == 1
    assert "User-specified max_model_len (262144) is greater than the derived max_model_len " \
           "(max_position_embeddings=131072.0" in run.lines[-1]
    assert "is longer than the model's 131,072 tokens" in " ".join(plain_words(explain(run.lines)))
    forced, _ = start("gaudi-main", inputs=long, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert forced.failure is None or forced.failure.phase != "config"


def test_the_simulator_reads_its_model_with_the_hf_overrides_it_is_given():
    # Qwen3-8B's 40,960 positions, extended as Qwen's docs extend them: the length is derived from the config as
    # overridden (vLLM 0.32 does not scale YaRN again), so 131,072 is served and 131,073 refused as vLLM refuses it
    from dataclasses import replace

    from tuner.sim.serve import build_parser, settings_from_args

    yarn = '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, ' \
           '"max_position_embeddings": 131072}'
    args = build_parser().parse_args(["Qwen/Qwen3-8B", "--hf-overrides", yarn, "--max-num-seqs", "8",
                                      "--max-model-len", "131072", "--max-num-batched-tokens", "131072"])
    sim, inputs = settings_from_args(args)
    assert sim.shape.max_position == 131072 and "with --hf-overrides" in sim.shape.source
    pred, _ = start("gaudi-main", sim=sim, inputs=inputs)
    assert pred.failure is None or pred.failure.phase != "config"
    longer, _ = start("gaudi-main", sim=sim, inputs=replace(inputs, max_model_len=131073))
    assert longer.failure.phase == "config" and "(max_position_embeddings=131072" in longer.failure.message
    plain, _ = start("gaudi-main", sim=replace(sim, hf_overrides=None), inputs=inputs)
    assert plain.failure.phase == "config" and "(max_position_embeddings=40960" in plain.failure.message
    default = settings_from_args(build_parser().parse_args(["Qwen/Qwen3-8B", "--hf-overrides", yarn]))
    assert start("gaudi-main", sim=default[0], inputs=default[1])[0].config.max_model_len == 131072
    with pytest.raises(ValueError, match="--hf-overrides '{\"rope_scaling\"': expected a JSON object"):
        settings_from_args(build_parser().parse_args(["Qwen/Qwen3-8B", "--hf-overrides",
                                                      '{"rope_scaling"']))
