"""Real logs as users pasted them in public issues and PRs (tests/data/log-samples/real, provenance in
SOURCES.md): every fact a person reads off each one, through `explain` and the parser; then the ways
logs reach us (kubectl, journalctl, docker, colours, CRLF, tabs, huge lines) must not change a fact or
crash the reader."""

from __future__ import annotations

import codecs
import gzip
import json
import lzma
import random
import subprocess
import sys

import pytest

from tuner.explain import explain
from tuner.logparse import (
    ConfigValue,
    ErrorLine,
    GeneratedBuckets,
    LogWatcher,
    Milestone,
    Traceback,
    parse_line,
)
from tuner.logparse.watcher import _records

from ..conftest import LOG_SAMPLES

REAL = LOG_SAMPLES / "real"
GiB = 2**30
FORK_2D = ("fork-1.19", "fork-1.20", "fork-1.21.0", "fork-1.21.2")
PLUGIN = ("gaudi-0.10.1", "gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main")
GAUDI_V0 = "vllm-fork (v0) on Gaudi, release not named by the log"
INTERIM = "vllm-fork habana_main between 1.17 and 1.18 (v0, 2-D buckets, decode over seq, token budget)"


def _lines(name: str) -> list[str]:
    return [x for x in (REAL / name).read_text().splitlines() if not x.startswith("# SOURCE")]


def _facts(x) -> dict:
    """What a person reads off a log, as explain reports it (line numbers count from the first log line)."""
    s = x.reading.summary
    return {
        "release": x.release.family, "profiles": x.release.profiles, "engine": x.release.engine,
        "version": x.release.version,
        "buckets": {p.phase: p.count for p in x.phases if p.count},
        "bucket_config": {p.phase: p.config for p in x.phases if p.config},
        "variables": {k: v.value for k, v in s.bucket_variables.items()},
        "omitted": {k: (v.count, v.token_budget) for k, v in s.omitted.items()},
        "kv_blocks": x.memory.kv_blocks,
        "weights_gib": round(x.memory.weights / GiB, 2) if x.memory.weights else None,
        "warmup_s": x.timeline.warmup_total_s, "warmup_complete": x.timeline.complete,
        "warmup_steps": [(st.phase, st.index, st.total, st.shape) for st in x.timeline.steps],
        "graphs": {p.phase: p.captured for p in x.phases if p.captured is not None},
        "not_warmed": [(n.phase, n.shape) for n in s.not_warmed_up],
        "problems": [(p.kind, p.message, p.line_no) for p in x.problems],
        "unread": x.reading.unread, "tagged_processes": len(x.reading.processes),
    }


NOTHING = {
    "version": None, "buckets": {}, "bucket_config": {}, "variables": {}, "omitted": {}, "kv_blocks": None,
    "weights_gib": None, "warmup_s": None, "warmup_complete": False, "warmup_steps": [], "graphs": {},
    "not_warmed": [], "problems": [], "unread": 0, "tagged_processes": 0,
}
FORK_VARS_DEFAULT = {"VLLM_PROMPT_BS_BUCKET_MIN": 1, "VLLM_PROMPT_BS_BUCKET_STEP": 32,
                     "VLLM_DECODE_BS_BUCKET_MIN": 1, "VLLM_DECODE_BS_BUCKET_STEP": 32,
                     "VLLM_PROMPT_SEQ_BUCKET_MIN": 128, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128,
                     "VLLM_PROMPT_SEQ_BUCKET_MAX": 1024, "VLLM_DECODE_BLOCK_BUCKET_MIN": 128}

# file -> the facts read by hand off the log (everything not named is absent from the log)
EXPECTED = {
    "fork-0.7.2_vllm13053_llama32_vision_egg_traceback_cut.log": dict(   # known by its egg path alone
        release="vllm-fork (v0), fork-1.21.0, fork-1.21.2 by its version", profiles=("fork-1.21.0", "fork-1.21.2"),
        engine="v0", version="0.7.2+gaudi000",
        problems=[("traceback", "traceback cut before its exception line; last frame __init__ "
                   "(executor_base.py:51)", 15)]),
    "fork-1.17_pr206_two_starts_token_budget.log": dict(   # the figures are the second start's, never added
        release="vllm-fork 1.17 (v0, 2-D buckets)", profiles=("fork-1.17",), engine="v0", version="0.5.3.post1",
        buckets={"prompt": 52, "decode": 95},
        bucket_config={"prompt": {"bs": (1, 32, 64), "seq": (128, 128, 1024)},
                       "decode": {"bs": (1, 128, 256), "seq": (128, 128, 2048)}},
        weights_gib=0.23),
    "fork-1.17_pr147_startup_cut.log": dict(
        release="vllm-fork 1.17 (v0, 2-D buckets)", profiles=("fork-1.17",), engine="v0",
        buckets={"prompt": 24, "decode": 48},
        bucket_config={"prompt": {"bs": (1, 32, 4), "seq": (128, 128, 1024)},
                       "decode": {"bs": (1, 128, 4), "seq": (128, 128, 2048)}},
        weights_gib=14.97),           # "Pre-loading model weights on hpu:0 took 14.97 GiB" (line cut after)
    "fork-1.18_pr345_bucket_cfg_markdown_bold.log": dict(
        release="vllm-fork 1.18 (v0, 2-D buckets)", profiles=("fork-1.18",), engine="v0",
        # read through the ** the author wrapped each line in; the 11th variable is cut mid-name
        variables={**FORK_VARS_DEFAULT, "VLLM_PROMPT_BS_BUCKET_MAX": 64, "VLLM_DECODE_BS_BUCKET_MAX": 64},
        unread=1),                    # the last variable's line, cut inside its name
    "fork-1.18_pr345_buckets_cut.log": dict(
        release="vllm-fork 1.18 (v0, 2-D buckets)", profiles=("fork-1.18",), engine="v0",
        buckets={"prompt": 31, "decode": 112}, omitted={"prompt": (25, 4096)}, kv_blocks=3184),
    "fork-1.18pre_pr208_token_budget_decode_over_seq.log": dict(
        release=INTERIM, profiles=("fork-1.17",), engine="v0",
        buckets={"prompt": 23, "decode": 31}, omitted={"prompt": (33, 2048)},
        bucket_config={"prompt": {"bs": (1, 32, 64), "seq": (128, 128, 1024)},
                       "decode": {"bs": (1, 128, 256), "seq": (128, 128, 2048)}}),
    "fork-1.18pre_pr235_large_bucket_minimums.log": dict(
        release=INTERIM, profiles=("fork-1.17",), engine="v0",
        buckets={"prompt": 12, "decode": 8}, omitted={"prompt": (0, 131072), "decode": (0, 131072)},
        bucket_config={"prompt": {"bs": (64, 32, 64), "seq": (768, 128, 768)},
                       "decode": {"bs": (64, 128, 64), "seq": (768, 128, 1024)}}),
    "fork-1.18_issue484_graph_compile_failed.log": dict(   # no bucket line: the release from its version
        release="vllm-fork (v0), fork-1.17, fork-1.18 by its version", profiles=("fork-1.17", "fork-1.18"),
        engine="v0", version="0.5.3.post1",
        # one compile failure (the PT_BRIDGE verdict), not one problem per Habana [error] line
        problems=[("compile", "Graph compile failed. synStatus=synStatus 26 [Generic failure]. compile", 9)]),
    "fork-1.19_issue462_docker_timestamps.log": dict(
        release="vllm-fork 1.19-1.21 (v0, 2-D buckets)", profiles=FORK_2D, engine="v0",
        variables={**FORK_VARS_DEFAULT, "VLLM_PROMPT_BS_BUCKET_MAX": 256, "VLLM_DECODE_BS_BUCKET_MAX": 256},
        buckets={"decode": 416}, unread=1),   # a variable's line, cut inside its name
    "fork-1.19_opea1119_spawnprocess_traceback_cut.log": dict(
        release="unknown (no vLLM lines recognised)", profiles=(), engine=None,
        problems=[("traceback", "traceback cut before its exception line; last frame _initialize_kv_caches "
                   "(llm_engine.py:486)", 17)]),
    "fork-1.20_issue776_gaudi1_bare_prints_pt_lazy_error.log": dict(
        release="vllm-fork 1.19-1.21 (v0, 2-D buckets)", profiles=("fork-1.19", "fork-1.20"), engine="v0",
        version="0.6.3.dev2203+g85eb1472",   # a habana_main build on 0.6.3: the 1.19/1.20 era
        # printed without any logger prefix; the server died before generating bucket lists
        variables={**FORK_VARS_DEFAULT, "VLLM_PROMPT_BS_BUCKET_MAX": 16, "VLLM_DECODE_BS_BUCKET_MAX": 16,
                   "VLLM_DECODE_BLOCK_BUCKET_STEP": 128, "VLLM_DECODE_BLOCK_BUCKET_MAX": 256},
        bucket_config={"prompt": {"bs": (1, 32, 16), "seq": (128, 128, 1024)},
                       "decode": {"bs": (1, 32, 16), "block": (128, 128, 256)}},
        weights_gib=15.05,            # the "in total" line, not the 15.06 GiB "Pre-loading" one
        problems=[("error", "[Rank:0] FATAL ERROR :: MODULE:PT_LAZY Error, ValidateSyncInputTensors tensor_data is "
                   "empty. Tensorid:3375 QueueStatus:ThreadPool m_tasks size: 0 irValue:id_8791_hpu__input "
                   "Uniqueid: 3375", 36)]),  # its traceback (cut) follows that record: the same failure, once
    "fork-1.20_issue809_deepseek_tp8_worker_prints.log": dict(
        release="vllm-fork 1.19-1.21 (v0, 2-D buckets)", profiles=FORK_2D, engine="v0",
        variables={"VLLM_DECODE_BS_BUCKET_STEP": 32, "VLLM_DECODE_BS_BUCKET_MAX": 256,
                   "VLLM_PROMPT_SEQ_BUCKET_MIN": 128, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128,
                   "VLLM_PROMPT_SEQ_BUCKET_MAX": 1024, "VLLM_DECODE_BLOCK_BUCKET_MIN": 128,
                   "VLLM_DECODE_BLOCK_BUCKET_STEP": 128, "VLLM_DECODE_BLOCK_BUCKET_MAX": 4096},
        bucket_config={"prompt": {"bs": (1, 32, 256), "seq": (128, 128, 1024)},
                       "decode": {"bs": (1, 32, 256), "block": (128, 128, 4096)}},
        weights_gib=79.41, tagged_processes=7,   # pids 876..882 (the driver's lines are not in the excerpt)
        unread=1),                    # a backend line cut inside its name ("Using HPUA")
    "fork-1.20_pr880_spec_decode_rank0_assertion.log": dict(
        release=GAUDI_V0, profiles=(), engine="v0", weights_gib=round(238.9 / 1024, 2),
        problems=[("traceback", "AssertionError: HabanaWorker.determine_num_available_blocks needs to be called "
                   "before warming up the model.", 4)],
        unread=1),                    # the speculative-decoding line, cut at the paste's end
    "fork-1.21_erag84_v0_engine_wrapped.log": dict(
        release="vllm-fork (v0), fork-1.21.0, fork-1.21.2 by its version", profiles=("fork-1.21.0", "fork-1.21.2"),
        engine="v0", version="0.7.2"),   # device_config=hpu; vLLM 0.7.2 is the base of both 1.21 releases
    "fork-1.21_issue1194_tp8_decode_warmup_interleaved.log": dict(
        release="vllm-fork 1.19-1.21 (v0, 2-D buckets)", profiles=FORK_2D, engine="v0",
        # eight ranks print each step: the untagged driver's copy is the one counted; cut mid-warm-up
        warmup_steps=[("decode", 203, 416, (96, 896)), ("decode", 204, 416, (224, 384))], tagged_processes=7),
    "fork-1.22_pr2223_minimax_mix_warmup_traceback.log": dict(
        release="vllm-fork 1.22+ (v0, 3-D buckets)", profiles=("fork-1.22", "fork-main", "fork-1.23"), engine="v0",
        warmup_steps=[("prompt", 351, 352, (1, 128, 1)), ("prompt", 352, 352, (1, 128, 0)),
                      ("prompt", 1, 352, (1, 8192, 960)), ("decode", 1, 112, (16, 1, 8599))],
        # logger.exception's record states the error; its traceback (cut in both excerpts) is the same failure
        problems=[("error", "not enough values to unpack (expected 3, got 2)", 5)],
        unread=1),                    # the first excerpt's last line, cut inside its own prefix
    "fork-1.22_pr1557_pooler_warmup_rank0_traceback.log": dict(
        release=GAUDI_V0, profiles=(), engine="v0", problems=[("traceback", "NotImplementedError", 8)]),
    "plugin_issue1331_qwen35_tp8_sampler_warmup_hang.log": dict(
        release="vllm-gaudi plugin (v1)", profiles=PLUGIN, engine="v1", tagged_processes=2),
    "plugin_issue86_qwen3coder_tp8_plugin_loader.log": dict(   # known by its plugin loader's lines alone
        release="vllm-gaudi plugin (v1)", profiles=PLUGIN, engine="v1"),
    "plugin_issue891_gptoss_command_wrapped.log": dict(
        release="vllm-gaudi plugin (v1)", profiles=PLUGIN, engine="v1",
        unread=1),                    # a record cut right after its date ("INFO 01-")
    "plugin_issue891_gptoss_runtime_dump.log": dict(
        release="vllm-gaudi plugin (v1)", profiles=PLUGIN, engine="v1",
        unread=1),                    # the dump's last row, cut before its value
    "plugin_pr192_caret_ansi_warmup_traceback.log": dict(
        release="vllm-gaudi plugin (v1)", profiles=PLUGIN, engine="v1", tagged_processes=1,
        problems=[("traceback", "traceback cut before its exception line; last frame warmup_graphs "
                   "(hpu_model_runner.py:3327)", 10)]),
    "plugin_pr823_engine_core_fatal_error.log": dict(   # one failure: the dump and fatal-error records are its
        release="generic vLLM (no Gaudi bucketing lines)", profiles=(), engine=None, tagged_processes=1,
        problems=[("traceback", "RuntimeError: Worker failed with error 'Encoder cache miss for "
                   "9def2746268d93d5b729bcf246ccb1ddfa4af2391dff4854a97c2c5c99e7967b.', please check the stack trace "
                   "above for the root cause", 27)]),
    "plugin_pr818_qwen25vl_wrapped_lines_traceback.log": dict(
        release="vllm-gaudi plugin (v1, 3-D buckets)", profiles=PLUGIN, engine="v1",
        version="0.14.0rc1.dev165+gb3a2bdf1a.d20260113", buckets={"prompt": 96}, tagged_processes=1,
        problems=[("traceback", "traceback cut before its exception line; last frame compile_or_warm_up_model "
                   "(hpu_worker.py:298)", 29)],
        unread=1),                    # the last line, cut inside its own prefix
}


def test_every_real_log_has_expected_facts():
    assert sorted(EXPECTED) == sorted(p.name for p in REAL.glob("*.log"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_log_facts(name):
    assert _facts(explain(_lines(name), source=name)) == {**NOTHING, **EXPECTED[name]}


def _events(name):
    return [t.event for t in explain(_lines(name)).reading.events]


def test_runtime_dump_and_skip_warmup_read_from_the_plugin_log():
    values = {e.name: e.value for e in _events("plugin_issue891_gptoss_runtime_dump.log")
              if isinstance(e, ConfigValue)}
    assert values["hw"] == "gaudi3" and values["build"] == "1.23.0.695" and values["engine_version"] == "v1"
    assert values["skip_warmup"] == "True" and values["prompt_attn_impl"] == "fsdpa_impl"
    assert "merged_pre" not in values                 # the cut last line is no value


def test_runtime_dump_of_a_tagged_engine_core():
    values = {e.name: e.value for e in _events("plugin_pr818_qwen25vl_wrapped_lines_traceback.log")
              if isinstance(e, ConfigValue)}
    assert values == {"unified_attn": "False", "unified_attn_softmax_fa2": "False", "scale_adjustment": "True",
                      "flatten_input": "False", "unified_attn_shared_cache_ratio": "0.8",
                      "high_level_profiler_enabled": "False", "track_graph_compilation": "False",
                      "use_output_tensor_in_matmulqk": "False", "per_token_kv_scaling_support": "False",
                      "moe_chunk": "", "moe_token_boundary": "", "use_dispatch_fn": "False",
                      "use_hpu_aligned_scale": "False"}


def test_warmup_hang_log_stops_at_sampler_warmup():
    x = explain(_lines("plugin_issue1331_qwen35_tp8_sampler_warmup_hang.log"))
    assert [e.event.name for e in x.reading.events if isinstance(e.event, Milestone)] == ["sampler_warmup"]
    assert not x.timeline.complete


def test_interleaved_ranks_count_one_rank():
    x = explain(_lines("fork-1.21_issue1194_tp8_decode_warmup_interleaved.log"))
    assert x.reading.leader == "driver (untagged)" and x.reading.duplicate_rank_lines == 7
    assert x.reading.summary.warmup_steps == {"decode": (203, 416)}
    assert x.timeline.steps[0].seconds == 45          # 12:09:01 -> 12:09:46


def test_habana_runtime_error_burst_is_one_problem_and_not_unread():
    events = _events("fork-1.18_issue484_graph_compile_failed.log")
    errors = [e for e in events if isinstance(e, ErrorLine)]
    assert len(errors) == 1 and errors[0].prefix.source == "habana:PT_BRIDGE" and errors[0].prefix.level == "ERROR"


def test_unindented_rank_traceback_keeps_its_frames():
    (tb,) = [e for e in _events("fork-1.22_pr1557_pooler_warmup_rank0_traceback.log") if isinstance(e, Traceback)]
    assert tb.exc_type == "NotImplementedError" and tb.prefix.process == "rank0"
    assert tb.text.count('File "') == 4 and tb.text.splitlines()[-1] == "NotImplementedError"


def test_caret_notation_colours_and_carriage_returns_are_stripped():
    (tb,) = [e for e in _events("plugin_pr192_caret_ansi_warmup_traceback.log") if isinstance(e, Traceback)]
    assert "^[" not in tb.text and "^M" not in tb.text and tb.prefix.process == "Worker_TP6"
    assert tb.text.splitlines()[0] == "    self.compile_or_warm_up_model()"


# --- the ways a log reaches us ---------------------------------------------------------------------

BASE = [  # real lines (fork-1.19 issue 462, fork-1.21 issue 1194, the fork README's runtime warning)
    "INFO 11-06 03:03:36 hpu_model_runner.py:119] VLLM_PROMPT_BS_BUCKET_MAX=256 (default:256)",
    "INFO 11-06 03:07:50 hpu_model_runner.py:1547] Generated 3 decode buckets [bs, total_blocks]: "
    "[(1, 128), (1, 256), (1, 384)]",
    "INFO 05-02 12:09:01 hpu_model_runner.py:1730] [Warmup][Decode][203/416] batch_size:96 num_blocks:896 "
    "free_mem:14.93 GiB",
    "WARNING 05-02 12:10:01 hpu_model_runner.py:1730] Configuration: (prompt, 1, 36864) was not warmed-up!",
    "VLLM_DECODE_BS_BUCKET_MAX=16 (default:16)",
    "Traceback (most recent call last):",
    '  File "/x/vllm/worker/hpu_model_runner.py", line 2012, in warmup_model',
    "RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::939524096 (896)MB",
]

WRAPPERS = {
    "kubectl --timestamps": lambda i, s: f"2024-11-06T03:03:{i:02d}.723618110Z {s}",
    "kubectl --prefix": lambda i, s: f"[pod/vllm-gaudi-svc-deployment-5874b4cb79-6vj4x/vllm-gaudi] {s}",
    "kubectl --prefix --timestamps": lambda i, s: f"[pod/vllm-0/vllm] 2025-08-18T07:17:{i:02d}.1+00:00 {s}",
    "journalctl": lambda i, s: f"Nov 24 01:02:{i:02d} gaudi-node-3 vllm[4312]: {s}",
    "docker compose": lambda i, s: f"vllm-gaudi-server  | {s}",
    "CRLF": lambda i, s: s + "\r\n",
    "ANSI colours": lambda i, s: f"\x1b[32m{s[:4]}\x1b[0m{s[4:]}",
    "caret notation": lambda i, s: f"^[[1;36m{s}^M",
    "markdown bold": lambda i, s: f"**{s}**",
    "colours without ESC": lambda i, s: f"[1;36m(VllmWorkerProcess pid=614)[0;0m {s}",
    "Ray worker, deduplicated":
        lambda i, s: f"(RayWorkerWrapper pid=3046, ip=10.0.0.2) {s} [repeated 7x across cluster]",
    "CRI log file": lambda i, s: f"2024-11-06T03:03:{i:02d}.723618110Z stdout F {s}",
    "grep -n": lambda i, s: f"{1000 + i}:{s}" if s[:1] in "IWE" else s,
    "grep -rn": lambda i, s: f"logs/server.log:{1000 + i}:{s}" if s[:1] in "IWE" else s,
    "docker json-file": lambda i, s: json.dumps({"log": s + "\n", "stream": "stdout",
                                                 "time": f"2024-11-06T03:03:{i:02d}.723618110Z"}),
    # k9s log pane, as pasted in kubernetes-sigs/gateway-api-inference-extension PR #550
    "k9s pane border": lambda i, s: f"│ {s:<230} │",
    # a paste's own prefix that no layer names, learned from the records (prefix.PasteLayer)
    "markdown quote": lambda i, s: f"> {s}",
    "markdown quote in a quote": lambda i, s: f"> > {s}",
    "indented code block": lambda i, s: f"    {s}",
    "cat -n": lambda i, s: f"{i + 1:6d}\t{s}",
    "srun -l": lambda i, s: f"{i % 2}: {s}",
    "kubectl logs -c, container only": lambda i, s: f"[vllm-gaudi] {s}",
    "syslog RFC 5424": lambda i, s: f"<14>1 2024-11-06T03:03:{i:02d}Z gaudi-node-3 vllm 4312 - - {s}",
    "log viewer stamp and tab": lambda i, s: f"2024-11-06 03:03:{i:02d}.723\t{s}",
    "no-break spaces of a web page": lambda i, s: s.replace(" ", "\u00a0"),
    "JSON lines, message": lambda i, s: json.dumps({"timestamp": f"2024-11-06T03:03:{i:02d}Z", "message": s}),
    "journalctl -o json": lambda i, s: json.dumps({"MESSAGE": s, "_PID": "4312", "SYSLOG_IDENTIFIER": "vllm"}),
}


def _summary_facts(lines):
    w = LogWatcher(clock=lambda: 0.0)
    w.feed_lines(lines)
    w.flush()
    s = w.summary()
    variables = s.bucket_variables
    return (variables["VLLM_PROMPT_BS_BUCKET_MAX"].value, variables["VLLM_DECODE_BS_BUCKET_MAX"].value,
            s.generated["decode"].buckets, s.warmup_steps, [(n.phase, n.shape) for n in s.not_warmed_up],
            [(t.exc_type, t.message) for t in s.tracebacks], s.oom.kind)


@pytest.mark.parametrize("how", sorted(WRAPPERS))
def test_pasted_through_tools_reads_the_same_facts(how):
    wrap = WRAPPERS[how]
    plain = _summary_facts(BASE)
    assert plain[0] == 256 and plain[4] == [("prompt", (1, 36864))] and plain[6] == "device"
    assert _summary_facts([wrap(i, s) for i, s in enumerate(BASE)]) == plain


QUOTES = ("markdown quote", "cat -n", "indented code block", "srun -l")


@pytest.mark.parametrize("how", QUOTES)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_whole_real_log_quoted_reads_the_same_facts(name, how):
    """Bare prints and tracebacks carry the quote too; it is learned from the records, or from a traceback's
    first line, a rank tag or a Habana runtime stamp where the log has no record before them."""
    wrap = WRAPPERS[how]
    quoted = [wrap(i, s) for i, s in enumerate(_lines(name))]
    assert _facts(explain(quoted, source=name)) == {**NOTHING, **EXPECTED[name]}


def test_a_paste_prefix_is_learned_only_when_records_agree_on_it():
    one = "> INFO 11-06 03:03:36 hpu_model_runner.py:119] VLLM_PROMPT_BS_BUCKET_MAX=256 (default:256)"
    bare = "> VLLM_DECODE_BS_BUCKET_MAX=16 (default:16)"
    w = LogWatcher(clock=lambda: 0.0)
    w.feed_lines([one, bare])                  # one record: not yet a prefix of the paste
    assert "VLLM_DECODE_BS_BUCKET_MAX" not in w.summary().bucket_variables
    # explain reads each line twice (its timeline, the watcher): still one record, not two
    assert "VLLM_DECODE_BS_BUCKET_MAX" not in explain([one, bare]).reading.summary.bucket_variables
    assert explain([one, one, bare]).reading.summary.bucket_variables["VLLM_DECODE_BS_BUCKET_MAX"].value == 16
    w.feed_lines([one.replace("> ", "> > "), bare])  # another shape: still not
    assert "VLLM_DECODE_BS_BUCKET_MAX" not in w.summary().bucket_variables
    w.feed_lines([one.replace("> ", "> > "), bare.replace("> ", "> > ")])
    assert w.summary().bucket_variables["VLLM_DECODE_BS_BUCKET_MAX"].value == 16


def test_records_joined_on_one_line_are_split():
    joined = " ".join(s for s in BASE[:4])     # a paste that lost its newlines
    assert _summary_facts([joined] + BASE[4:]) == _summary_facts(BASE)
    glued = ("Loading safetensors checkpoint shards:   0% 0/163 [00:00<?, ?it/s](VllmWorkerProcess pid=878) "
             "INFO 02-07 14:49:28 weight_utils.py:251] Using model weights format ['*.safetensors']")
    assert _records(glued) == [glued]            # a tqdm bar glued to a record is one record


def test_timestamps_of_kubectl_and_docker_drive_the_timeline():
    successor = BASE[2].replace("[203/416] batch_size:96 num_blocks:896", "[204/416] batch_size:224 num_blocks:384")
    lines = [WRAPPERS["kubectl --prefix --timestamps"](i * 7, s) for i, s in enumerate(BASE[:3] + [successor])]
    x = explain(lines)
    assert x.reading.first_time == "2025-08-18T07:17:00.1+00:00" and x.reading.last_time_s == 21.0
    assert x.timeline.steps[0].seconds == 7.0     # step 203 lasts until step 204's line


def test_tabs_do_not_hide_facts():
    w = LogWatcher()
    w.feed_lines(["Traceback (most recent call last):", '\tFile "/x/hpu_model_runner.py", line 1, in f',
                  "\tself.f()", "RuntimeError: boom"])
    (tb,) = w.summary().tracebacks
    assert tb.exc_type == "RuntimeError" and tb.text.count("\n") == 3
    e = parse_line("INFO 11-06 03:07:50 hpu_model_runner.py:1547] Generated 2 prompt buckets [bs, seq]:\t"
                   "[(1, 128), (2, 128)]")
    assert isinstance(e, GeneratedBuckets) and e.buckets == ((1, 128), (2, 128))


def test_huge_lines_are_read_or_skipped_never_fatal():
    n = 12_000   # a bucket list of 12,000 entries is ~150k characters
    buckets = [(b, 128 * k) for b in range(1, 13) for k in range(1, 1001)]
    listed = "[" + ", ".join(f"({b}, {k})" for b, k in buckets) + "]"
    big = f"INFO 11-06 03:07:50 hpu_model_runner.py:1547] Generated {n} decode buckets [bs, total_blocks]: {listed}"
    assert len(big) > 100_000
    e = parse_line(big)
    assert isinstance(e, GeneratedBuckets) and e.count == n and e.complete and e.buckets[-1] == (12, 128000)
    rng = random.Random(7)
    noise = "".join(rng.choice("([{:, 0123456789abc)]}") for _ in range(120_000))
    junk = ["INFO 11-06 03:07:50 x.py:1] " + noise,
            "**" + "*" * 110_000, "^[[" * 40_000, "[rank0]: " + " " * 110_000 + "x",
            "[pod/" + "a" * 110_000, "Nov 24 01:02:03 " + "h" * 110_000, "  File \"" + "/" * 110_000,
            "[19:08:34.1][" + "M" * 110_000, "[19:08:34.1][" + " " * 110_000, "│" + " " * 110_000 + "x",
            "vllm  | " + " |" * 55_000, big[: len(big) // 2]]
    x = explain(BASE + junk + ["\x00\xff\r\n", "\t", "\r"])
    assert x.reading.lines == len(BASE) + len(junk) + 3
    cut = x.reading.log_summary.generated["decode"]   # the half list still says how many; its list is incomplete
    assert (cut.count, cut.complete, len(cut.buckets) < n) == (n, False, True)


def test_cut_real_lines_never_crash():
    lines = [x for p in REAL.glob("*.log") for x in p.read_text().splitlines()]
    cut = [line[:i] for line in lines for i in range(0, min(len(line), 400), 7)]
    w = LogWatcher()
    for line in cut:
        parse_line(line)
        w.feed(line)
    w.flush()
    x = explain(cut)
    assert x.reading.lines == len(cut) and w.summary().stage in ("startup", "warmup", "ready", "serving")


def test_cli_reads_a_pasted_log_with_binary_junk_from_stdin():
    name = "fork-1.18_pr345_buckets_cut.log"
    data = ("\r\n".join(_lines(name)) + "\r\n").encode() + b"\xff\xfe\x00 cut mid-char \xe2\x82\r\n"
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "explain", "--json", "-"], input=data,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["buckets"]["prompt"]["count"] == 31 and doc["buckets"]["decode"]["count"] == 112
    assert doc["memory_bytes"]["kv_blocks"] == 3184


SAVED = {  # how a log file reaches us besides its lines: rotated and packed, or saved by PowerShell 5's `>`
    "gzip, logrotate": lambda b: gzip.compress(b),
    "xz": lambda b: lzma.compress(b),
    "PowerShell 5 redirect, UTF-16 with a BOM": lambda b: codecs.BOM_UTF16_LE + b.decode().encode("utf-16-le"),
}


@pytest.mark.parametrize("how", sorted(SAVED))
@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_cli_reads_a_log_packed_or_saved_as_utf16(tmp_path, how, stdin):
    name = "fork-1.18_pr345_buckets_cut.log"
    data = SAVED[how](("\n".join(_lines(name)) + "\n").encode())
    path = tmp_path / "server.log.1"
    path.write_bytes(data)
    argv = [sys.executable, "-m", "tuner.cli", "explain", "--json", "-" if stdin else str(path)]
    proc = subprocess.run(argv, input=data if stdin else None, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["buckets"]["prompt"]["count"] == 31 and doc["buckets"]["decode"]["count"] == 112


def test_cli_says_a_gzip_log_is_cut_and_reads_it_up_to_there(tmp_path):
    lines = _lines("fork-1.18_pr345_buckets_cut.log")
    whole = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "server.log.gz"
    path.write_bytes(whole[:-12])  # the last block's end and the trailer lost, as in a copy of a file being written
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "explain", "--json", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"note: the gzip stream of {path} is cut; read up to the cut" in proc.stderr
    assert json.loads(proc.stdout)["buckets"]["prompt"]["count"] == 31


def test_a_traceback_cut_at_both_ends_does_not_swallow_what_follows():
    w = LogWatcher()
    events = w.feed_lines([
        '  File "/x/vllm/worker/hpu_model_runner.py", line 2012, in warmup_model',
        "    self.warmup_graphs(",
        "VLLM_DECODE_BS_BUCKET_MAX=16 (default:16)",            # not an exception line: the traceback was cut
        "(EngineCore_DP0 pid=7) ERROR 01-21 06:56:31 [core.py:935]     self.compile_or_warm_up_model()",
        "(EngineCore_DP0 pid=7) ERROR 01-21 06:56:31 [core.py:935] EngineCore failed to start.",
    ])
    w.flush()
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["Traceback", "BucketVariable", "Traceback", "ErrorLine"], kinds
    assert events[0].exc_type is None and events[0].text.count("\n") == 1
    assert events[1].value == 16 and events[3].message == "EngineCore failed to start."
