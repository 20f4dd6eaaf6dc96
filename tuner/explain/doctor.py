"""`bucket-tuner doctor`: what limits a running server now, read off its /metrics over a window (and its
start-up log), with the figures, and the `tune` or `plan` command that would test the remedy.

vLLM's scheduler admits a waiting request while three things allow it: fewer than max_num_seqs running,
free KV blocks for it, and room in the step's token budget (max_num_batched_tokens). So requests that
keep waiting name the limit by elimination:

    KV cache       the cache is (nearly) full, or sequences are being preempted for blocks
    max_num_seqs   as many running as max_num_seqs allows, with KV room left
    token budget   fewer running than max_num_seqs and KV room left: the budget admits no more per step
    load           requests hardly ever wait: the server takes what it is sent (or it was sent nothing)

and, from the log, shapes the warm-up did not cover ("was not warmed-up!"), each compiled while serving.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .serverload import Window

QUEUED_SHARE = 0.5  # requests wait in at least half the samples: the server is at a limit
KV_FULL = 0.9  # KV usage from which a waiting request may find no blocks (vLLM keeps a watermark)
AT_CAP_SHARE = 0.5  # running == max_num_seqs in at least half the queued samples
LIMITS = ("kv_cache", "max_num_seqs", "token_budget", "load", "recompiles")


@dataclass
class ServerSettings:
    """The server's limits where known: the doctor's flags, else its start-up log, else /metrics."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_blocks: int | None = None
    source: dict[str, str] = field(default_factory=dict)  # setting -> where it was read


@dataclass
class LogFacts:
    """What the start-up log adds: the shapes the warm-up missed (distinct, first seen) and the release."""

    path: str
    not_warmed_up: list[str] = field(default_factory=list)
    release: str | None = None


@dataclass
class Finding:
    limit: str  # one of LIMITS
    says: str  # the limit, in words, with its figures
    remedy: str  # the command that tests the remedy
    why: str  # what that command tests


@dataclass
class Diagnosis:
    url: str
    samples: int
    seconds: float
    figures: dict[str, float | None]
    settings: ServerSettings
    findings: list[Finding]
    log: LogFacts | None = None

    @property
    def limit(self) -> str:
        return self.findings[0].limit

    def to_json(self) -> dict:
        return asdict(self) | {"limit": self.limit}


def read_log(path: Path, settings: ServerSettings) -> LogFacts:
    """The start-up log read as `explain` reads it: limits the flags left open, shapes missed by warm-up."""
    from ..vocabulary.textfile import read_text
    from . import explain

    x = explain(read_text(path, "--log").lines(), source=str(path))
    for name, value in (("max_num_seqs", x.server.max_num_seqs),
                        ("max_num_batched_tokens", x.server.max_num_batched_tokens),
                        ("kv_blocks", x.memory.kv_blocks)):
        if getattr(settings, name) is None and value is not None:
            setattr(settings, name, int(value))
            settings.source[name] = "the log"
    missed = [f"({e.phase}, {', '.join(map(str, e.shape))})" for e in x.reading.summary.not_warmed_up]
    return LogFacts(str(path), missed, x.release.family)


def _figures(w: Window) -> dict[str, float | None]:
    finished, requests = w.increase("finished"), w.increase("requests")

    def per_request(kind: str) -> float | None:
        """Tokens per request: vLLM's per-request histograms, else the totals over the requests finished."""
        if finished:
            return w.increase(f"request_{kind}") / finished
        return w.increase(kind) / requests if requests and w.increase(kind) is not None else None

    steps = w.increase("steps")
    return {
        "running": w.mean(lambda s: s.running), "running_max": max(s.running for s in w.samples),
        "waiting": w.mean(lambda s: s.waiting), "queued_share": w.share(lambda s: s.waiting >= 1),
        "kv_usage": w.mean(lambda s: s.kv_usage), "kv_full_share": w.share(lambda s: (s.kv_usage or 0) >= KV_FULL),
        "preemptions": w.increase("preemptions"), "requests_per_s": w.rate("requests"),
        "prompt_tokens_per_s": w.rate("prompt_tokens"), "generation_tokens_per_s": w.rate("generation_tokens"),
        "input_len": per_request("prompt_tokens"), "output_len": per_request("generation_tokens"),
        "tokens_per_step": w.increase("step_tokens") / steps if steps else None,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _workload(f: dict) -> str:
    if f["input_len"] is None or f["output_len"] is None:
        return ""
    return f" --random-input-len {round(f['input_len'])} --random-output-len {max(1, round(f['output_len']))}"


def _capacity(f: dict, s: ServerSettings, space: str, in_flight: int) -> Finding:
    """Requests wait: which of the scheduler's three limits holds them."""
    load = f"--max-concurrency {in_flight}{_workload(f)}"
    waiting = f"{f['waiting']:.1f} requests waiting on average ({_pct(f['queued_share'])} of samples)"
    if f["kv_full_share"] >= 0.5 or (f["preemptions"] or 0) > 0:
        blocks = f" of {s.kv_blocks} blocks" if s.kv_blocks else ""
        return Finding("kv_cache", f"KV cache: {_pct(f['kv_usage'])} used{blocks} (>= {_pct(KV_FULL)} in "
                       f"{_pct(f['kv_full_share'])} of samples), {f['preemptions'] or 0:.0f} preemptions in the "
                       f"window, {waiting}, {f['running']:.1f} running",
                       f"bucket-tuner plan --space {space} {load}",
                       "the KV blocks each configuration leaves at this load (gpu_memory_utilization, "
                       "VLLM_GRAPH_RESERVED_MEM, block size); `tune --from-plan` boots the picks")
    cap = s.max_num_seqs
    at_cap = cap is not None and f["running_at_cap"] >= AT_CAP_SHARE
    if at_cap:
        return Finding("max_num_seqs", f"max_num_seqs: {f['running']:.1f} running of max_num_seqs={cap} "
                       f"(at it in {_pct(f['running_at_cap'])} of samples), {waiting}, KV cache only "
                       f"{_pct(f['kv_usage'])} used", f"bucket-tuner tune --space {space} {load}",
                       f"configurations with max_num_seqs above {cap} (in the space), at this load")
    budget = s.max_num_batched_tokens
    step = f", {f['tokens_per_step']:.0f} tokens per step" if f["tokens_per_step"] is not None else ""
    if cap is None:
        said = (f"running stays near {f['running_max']:.0f} with {waiting} and the KV cache {_pct(f['kv_usage'])} "
                "used: max_num_seqs if it is that, else the token budget (give --max-num-seqs, or --log, to tell)")
    else:
        said = (f"token budget: {f['running']:.1f} running, below max_num_seqs={cap}, {waiting}, KV cache "
                f"{_pct(f['kv_usage'])} used: each step's budget"
                f"{f' (max_num_batched_tokens={budget})' if budget else ''} admits no more{step}; prompts "
                f"{f['prompt_tokens_per_s'] or 0:,.0f} tokens/s")
    return Finding("token_budget", said, f"bucket-tuner tune --space {space} {load}",
                   f"configurations with a larger max_num_batched_tokens"
                   f"{f' than {budget}' if budget else ''} (in the space), at this load")


def diagnose(url: str, window: Window, settings: ServerSettings, log: LogFacts | None = None,
             space: str = "SPACE.yaml") -> Diagnosis:
    if settings.kv_blocks is None and window.kv_blocks is not None:
        settings.kv_blocks, settings.source["kv_blocks"] = window.kv_blocks, "/metrics"
    f = _figures(window)
    cap = settings.max_num_seqs
    queued = [s for s in window.samples if s.waiting >= 1]
    f["running_at_cap"] = (sum(1 for s in queued if s.running >= cap) / len(queued)) if cap and queued else 0.0
    in_flight = max(1, math.ceil((f["running"] or 0) + (f["waiting"] or 0)))
    findings = []
    if f["queued_share"] >= QUEUED_SHARE:
        findings.append(_capacity(f, settings, space, in_flight))
    if log is not None and log.not_warmed_up:
        n = len(log.not_warmed_up)
        findings.append(Finding(
            "recompiles", f"recompiles: {n} shape{'s' if n != 1 else ''} the warm-up did not cover, each compiled "
            f"while serving (first: {log.not_warmed_up[0]}; `bucket-tuner explain {log.path}` lists them)",
            f"bucket-tuner tune --space {space} --max-concurrency {in_flight}{_workload(f)}",
            "configurations whose warm-up covers the shapes this traffic meets (the study refuses runtime "
            "recompiles unless --allow-recompiles)"))
    if f["queued_share"] < QUEUED_SHARE:
        idle = f["running_max"] == 0 and not (f["generation_tokens_per_s"] or 0)
        said = ("load: no request during the window; nothing limits it now" if idle else
                f"load: under-loaded: {f['running']:.1f} running on average"
                f"{f' of max_num_seqs={cap}' if cap else ''}, requests waiting in only {_pct(f['queued_share'])} "
                f"of samples, KV cache {_pct(f['kv_usage'])} used: it serves all it is sent")
        points = ",".join(str(in_flight * k) for k in (1, 2, 4)) if not idle else "8,16,32"
        findings.append(Finding("load", said, f"bucket-tuner tune --space {space}{_workload(f)} --load-sweep "
                                f"concurrency={points} --objective-from-sweep best-within-slo --slo p99_ttft_ms=MS",
                                "how much more load the server takes within your SLO"))
    return Diagnosis(url, len(window.samples), round(window.seconds, 3), f, settings, findings, log)


def render(d: Diagnosis) -> str:
    f, s = d.figures, d.settings
    rate = (lambda key: "-" if f[key] is None else f"{f[key]:,.0f}")
    known = ", ".join(f"{k}={getattr(s, k)} ({s.source.get(k, 'given')})"
                      for k in ("max_num_seqs", "max_num_batched_tokens", "kv_blocks") if getattr(s, k) is not None)
    lines = [f"doctor: {d.url}, {d.samples} samples over {d.seconds:.1f} s" + (f"; log {d.log.path}" if d.log else ""),
             f"server: {known or 'its limits unknown (give --log, or --max-num-seqs / --max-num-batched-tokens)'}",
             f"now: {f['running']:.1f} running (max {f['running_max']:.0f}), {f['waiting']:.1f} waiting, KV cache "
             f"{_pct(f['kv_usage'])} used, {f['preemptions'] or 0:.0f} preemptions; "
             f"{rate('prompt_tokens_per_s')} prompt and {rate('generation_tokens_per_s')} generation tokens/s, "
             f"{'-' if f['requests_per_s'] is None else format(f['requests_per_s'], '.2f')} requests/s"]
    for i, finding in enumerate(d.findings):
        lines += [f"{'limit' if i == 0 else 'also'}: {finding.says}",
                  f"  test the remedy: {finding.remedy}", f"  ({finding.why})"]
    return "\n".join(lines)
