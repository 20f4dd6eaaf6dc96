"""A hybrid model's start and serving as predicted and simulated: the plugin's pool of attention and state pages
(tuner/perfmodel/hybridcache.py) from the model's own config (tuner/models/recurrent.py), on the releases that
serve it; the simulator's log of it read back as a user's log is."""

from dataclasses import replace

import pytest

from tuner.explain.reading import read_log
from tuner.logparse.events import KvCacheSize, ServerNotice, UsableBlocks
from tuner.perfmodel import predict_startup
from tuner.perfmodel.costs import ServerInputs, SimSettings
from tuner.perfmodel.serving import run_virtual
from tuner.sim.startup import startup_events

QWEN35_MOE = SimSettings(model="Qwen/Qwen3.5-35B-A3B", device="gaudi3")
INPUTS = ServerInputs(max_model_len=32768, max_num_seqs=64)


def predict(release="gaudi-main", sim=QWEN35_MOE, inputs=INPUTS, env=None):
    pred = predict_startup(release, sim, inputs, env or {})
    assert pred.failure is None, pred.failure
    return pred


SEPARATE_STATES = {"VLLM_COMPACT_GDN": "0"}  # the states as large as the pool, beside it


def test_the_pool_is_counted_in_the_plugins_pages_with_the_states_memory_set_aside():
    pred = predict(env=SEPARATE_STATES)
    h, mem = pred.hybrid, pred.memory
    assert (h.attn_block_tokens, h.group_size, h.attention_groups, h.state_groups) == (1152, 10, 1, 3)
    assert mem.block_bytes == 10 * 1152 * 2048
    assert pred.num_blocks == int(mem.kv * h.hpu_factor) // mem.block_bytes
    # the attention-only account held twice the tokens: every state page costs about an attention page
    plain = predict("gaudi-0.15.1")
    assert plain.hybrid is None and plain.memory.block_bytes == 128 * 10 * 2048
    assert plain.num_blocks * 128 / (pred.num_blocks * 1152) == pytest.approx(1 / h.hpu_factor, rel=0.01)


def test_compact_gdn_states_leave_the_pool_whole_and_are_the_default():
    cut, compact = predict(env=SEPARATE_STATES), predict(env={"VLLM_COMPACT_GDN": "1"})
    assert compact.hybrid.hpu_factor == 1.0
    assert compact.num_blocks == int(compact.memory.kv) // compact.memory.block_bytes > 1.9 * cut.num_blocks
    # the runner sets it to 1 for a Gated DeltaNet model when the user left it unset or empty
    assert predict().num_blocks == predict(env={"VLLM_COMPACT_GDN": ""}).num_blocks == compact.num_blocks
    # the worker then reads "1" or "true" only
    assert predict(env={"VLLM_COMPACT_GDN": "yes"}).num_blocks == cut.num_blocks
    # compact or not, the scheduler's blocks hold each request's states: the capacity is the attention's less them
    h, n = compact.hybrid, compact.num_blocks
    assert h.kv_tokens(n, 32768) == int(n / (29 + 3) * 32768)


def test_a_model_without_recurrent_layers_is_counted_as_before():
    sim = SimSettings(model="meta-llama/Llama-3.1-8B-Instruct", device="gaudi3")
    pred = predict(sim=sim)
    assert pred.hybrid is None and pred.kv_block_tokens == 128 and pred.state_blocks == 0


def test_the_simulators_log_says_the_layout_and_is_read_back():
    pred = predict(env=SEPARATE_STATES)
    lines = [ev[3] for ev in startup_events(pred) if ev[0] == "log"]
    said = "\n".join(lines)
    assert "Setting attention block size to 1152 tokens to ensure that attention page size is >= mamba page size." \
        in said
    assert "Padding mamba page size by 9.92% to ensure" in said
    assert "HPU hybrid cache: reducing available KV cache memory by 47.6% (factor=0.524)" in said
    # the runner's line, with the modes it set where the user set none (here VLLM_COMPACT_GDN was set to 0)
    assert ("GDN layers detected (30): VLLM_USE_HYBRID_CACHE=1, VLLM_USE_NAIVE_MAMBA_CACHE_SHARING=0, "
            "VLLM_COMPACT_GDN=0") in said
    events = [t.event for t in read_log(lines).events]
    kinds = {e.kind: dict(e.values) for e in events if isinstance(e, ServerNotice)}
    assert kinds["hybrid_kv_reduced"]["factor"] == "0.524" and kinds["hybrid_block_size"] == {"tokens": "1152"}
    assert kinds["mamba_page_padded"] == {"pct": "9.92"} and kinds["gdn_layers"]["n"] == "30"
    blocks = next(e for e in events if isinstance(e, UsableBlocks))
    # the attention tensors hold the 1,152-token blocks as 9 kernel blocks each, and the pad block
    assert (blocks.usable, blocks.allocated) == (pred.num_blocks, pred.num_blocks * 9 + 1)
    size = next(e for e in events if isinstance(e, KvCacheSize) and e.tokens)
    # vLLM's group-aware capacity: ceil(32768 / 1152) = 29 attention blocks and 3 state blocks a request
    assert size.tokens == int(pred.num_blocks / 32 * 32768)


def test_every_running_request_holds_a_block_in_each_state_group():
    pred = predict(inputs=replace(INPUTS, num_gpu_blocks_override=40))
    assert pred.num_blocks == 40 and pred.state_blocks == 3 and pred.kv_block_tokens == 1152
    # 20 requests of 1,100 tokens: one attention block and three state blocks each, so 10 run in 40 blocks
    run = run_virtual(pred, [(0.0, 1000, 100)] * 20)
    assert run.stats.peak_running == 10 and run.stats.preemptions == 0
    # counted in 128-token blocks without states, a prompt takes 8 of them: 5 run
    plain = predict("gaudi-0.15.1", inputs=replace(INPUTS, num_gpu_blocks_override=40))
    assert run_virtual(plain, [(0.0, 1000, 100)] * 20).stats.peak_running == 5


def test_compact_states_are_allocated_beside_the_budget_and_too_many_sequences_run_out_of_memory():
    sim = SimSettings(model="Qwen/Qwen3.5-27B", device="gaudi3")
    fits = predict(sim=sim, inputs=replace(INPUTS, max_num_seqs=32))
    h = fits.hybrid
    # 16 layer slots, each a tensor of 32 x 3 + 2 slots of 3,207,168 bytes (48 Gated DeltaNet layers, 154 MiB a
    # sequence), out of what the KV budget left: the HPU-graph reserve and the margin
    assert h.compact_bytes(32) == 16 * (32 * 3 + 2) * 3_207_168 < fits.memory.free_after_kv
    failed = predict_startup("gaudi-main", sim, replace(INPUTS, max_num_seqs=256), {})
    assert failed.failure.phase == "states"
    assert f"Allocation failed for size::{(256 * 3 + 2) * 3_207_168}" in failed.failure.message
    # the states in the pool instead: no tensor beside it, the same 256 sequences start (with fewer blocks)
    pooled = predict(sim=sim, inputs=replace(INPUTS, max_num_seqs=256), env=SEPARATE_STATES)
    assert pooled.hybrid.compact_bytes(256) == 0 and pooled.num_blocks < fits.num_blocks


@pytest.mark.parametrize("model, chunk, explicit, skip", [
    ("Qwen/Qwen3.5-35B-A3B", 128, False, True),  # Gated DeltaNet, no chunk size in its config: the runner's 128
    ("openai/gpt-oss-20b", 0, True, True),  # sliding-window layers beside full ones
    ("google/gemma-4-26B-A4B", 0, True, True),
    ("Qwen/Qwen3-8B", 0, True, False),
])
def test_the_runner_hands_its_bucketing_what_the_model_is(model, chunk, explicit, skip):
    cfg = predict(sim=SimSettings(model=model, device="gaudi3")).config
    assert (cfg.mamba_chunk_size, cfg.mamba_chunk_size_explicit, cfg.skip_decode_block_clamp) == (chunk, explicit,
                                                                                                   skip)
    assert not predict("gaudi-0.15.1", sim=SimSettings(model=model, device="gaudi3")).config.skip_decode_block_clamp


def test_main_keeps_the_whole_decode_block_range_for_a_sliding_window_model():
    inputs = replace(INPUTS, num_gpu_blocks_override=500)
    env = {"VLLM_CONTIGUOUS_PA": "false"}
    window = predict(sim=SimSettings(model="openai/gpt-oss-20b", device="gaudi3"), inputs=inputs, env=env)
    dense = predict(sim=SimSettings(model="Qwen/Qwen3-8B", device="gaudi3"), inputs=inputs, env=env)
    # 64 sequences of 32,768 tokens may reference 16,384 blocks; a dense model's range stops at 3 x 500
    assert max(b[2] for b in window.plan.decode) == 16384
    assert max(b[2] for b in dense.plan.decode) == 1500


def test_explain_reads_an_unclamped_decode_range_as_the_runner_skipping_the_clamp():
    from tuner.explain import explain

    inputs = replace(INPUTS, num_gpu_blocks_override=500)
    pred = predict(sim=SimSettings(model="openai/gpt-oss-20b", device="gaudi3"), inputs=inputs,
                   env={"VLLM_CONTIGUOUS_PA": "false"})
    lines = [ev[3] for ev in startup_events(pred) if ev[0] == "log"]
    opts = {"max_model_len": 32768, "max_num_seqs": 64, "max_num_batched_tokens": pred.config.max_num_batched_tokens}
    x = explain(lines, advise_opts=opts)
    # the logged decode blocks reach 16,384 > 3 x 500: rebuilt with the whole range, the lists match the log
    assert x.advice.server["skip_decode_block_clamp"] is True and x.advice.rebuild_mismatch is None


def test_explain_names_the_compact_states_when_their_allocation_fails():
    from tuner.explain import explain
    from tuner.explain.render import render_text

    failed = predict_startup("gaudi-main", SimSettings(model="Qwen/Qwen3.5-27B", device="gaudi3"),
                             replace(INPUTS, max_num_seqs=256), {})
    lines = [f"INFO 11-29 02:50:00 [x.py:1] {ev[3]}" if ev[0] == "log" else ev[1]
             for ev in startup_events(failed) if ev[0] in ("log", "raw")]
    text = " ".join(render_text(explain(lines)).split())
    assert "with VLLM_COMPACT_GDN=1 (line 4) the plugin allocates the 48 Gated DeltaNet layers' states beside " \
           "the KV budget" in text and "Lower --max-num-seqs" in text
    # a start that did not fail says nothing of it
    fits = predict(sim=SimSettings(model="Qwen/Qwen3.5-27B", device="gaudi3"))
    lines = [ev[3] for ev in startup_events(fits) if ev[0] == "log"]
    assert "VLLM_COMPACT_GDN=1 (line" not in render_text(explain(lines))


def test_a_qwen35_hybrids_block_size_is_the_kernels_whatever_it_was_told():
    told = predict(inputs=replace(INPUTS, block_size=256))
    assert told.config.block_size == 128 and told.hybrid.attn_block_tokens == 1152
    assert told.num_blocks == predict().num_blocks
    lines = [ev[3] for ev in startup_events(told) if ev[0] == "log"]
    assert "Resetting Qwen3.5 hybrid block_size from 256 to 128 before Gaudi hybrid page-size realignment." in lines


def test_a_mamba2_hybrid_buckets_and_runs_its_kernel_by_the_grown_block(tmp_path):
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "model-configs-hybrid"
    (tmp_path / "config.json").write_text((data / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json").read_text())
    pred = predict(sim=SimSettings(model=str(tmp_path), device="gaudi3"))
    h = pred.hybrid
    # 6 attention layers of 2 KV heads x 128 (1,024 bytes a token), 23 Mamba2 layers: 128 x ceil(state / 128 KiB)
    assert h.attn_token_bytes == 1024 and h.attn_block_tokens == 128 * -(-h.state_bytes // (128 * 1024)) == 2176
    assert pred.config.block_size == h.kernel_block == 2176  # the runner takes the KV block for its buckets
    assert (h.group_size, h.attention_groups, h.state_groups) == (6, 1, 4)
    # the states are as large as the pool, beside it (the naive sharing a Mamba2 model keeps): the memory is cut
    assert not h.compact and h.hpu_factor == pytest.approx(h.page_bytes / (h.page_bytes + h.state_bytes))
    lines = [ev[3] for ev in startup_events(pred) if ev[0] == "log"]
    said = "Hybrid model (standard Mamba2 + ATN): adjusted usable KV cache from "
    assert any(line.startswith(said) for line in lines)
    blocks = next(line for line in lines if line.startswith("Usable num_blocks"))
    assert f"actual allocated num_blocks (max across layers): {pred.num_blocks + 1} " in blocks


def test_the_state_dtypes_are_the_servers_flags():
    from tuner.sim.serve import build_parser, settings_from_args

    # Qwen3.5's config keeps its recurrent state in float32; --mamba-ssm-cache-dtype bfloat16 halves that tensor
    half = predict(inputs=replace(INPUTS, mamba_ssm_cache_dtype="bfloat16"))
    assert half.hybrid.state_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 2 and half.hybrid.attn_block_tokens == 640
    assert predict(inputs=replace(INPUTS, mamba_ssm_cache_dtype="float32")).hybrid.state_bytes == 2_146_304
    _, inputs = settings_from_args(build_parser().parse_args(
        ["Qwen/Qwen3.5-35B-A3B", "--mamba-cache-dtype", "float32", "--mamba-ssm-cache-dtype", "bfloat16"]))
    assert (inputs.mamba_cache_dtype, inputs.mamba_ssm_cache_dtype) == ("float32", "bfloat16")
    with pytest.raises(SystemExit):  # vLLM's choices
        build_parser().parse_args(["Qwen/Qwen3.5-35B-A3B", "--mamba-ssm-cache-dtype", "fp8"])


def test_a_logs_state_dtypes_are_read_back():
    from tuner.explain import explain
    from tuner.study.logcalibration import settings_from_log

    line = ("INFO 11-29 02:40:01 [api_server.py:1896] non-default args: {'model_tag': 'Qwen/Qwen3.5-35B-A3B', "
            "'mamba_ssm_cache_dtype': 'bfloat16', 'max_model_len': 8192}")
    x = explain([line])
    assert (x.server.mamba_cache_dtype, x.server.mamba_ssm_cache_dtype) == (None, "bfloat16")
    settings, _ = settings_from_log(x, {}, "gaudi-main")
    assert settings.server["mamba_ssm_cache_dtype"] == "bfloat16" and "mamba_cache_dtype" not in settings.server
