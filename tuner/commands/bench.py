"""`bucket-tuner bench`: load any OpenAI-compatible server like `vllm bench serve` does.

Flags carry `vllm bench serve`'s names so habits carry over; the JSON has its field names.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from pathlib import Path

from . import UsageError, check_reachable, parse_key_values, prepare_output


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="load-test an OpenAI-compatible server (vllm bench serve flags and JSON)",
        description="Stream /v1/completions with token-id prompts of exact lengths (ignore_eos, max_tokens) "
        "and report vLLM's serving metrics. Works against any OpenAI-compatible server.",
    )
    add_workload_flags(p)
    add_load_flags(p)
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--percentile-metrics", default="ttft,tpot,itl,e2el",
                   help="comma-separated, of ttft,tpot,itl,e2el (all are computed; kept for compatibility)")
    p.add_argument("--result-file", type=Path, help="write the result JSON here (missing folders are created)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="the server runs time-compressed by this factor (a simulator started with "
                        "--sim-time-scale): report its own time")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench)


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload (vllm bench serve names)")
    g.add_argument("--dataset-name", choices=("random", "fixed", "trace"), default="random")
    g.add_argument("--dataset-path", type=Path, help="trace file (CSV or JSONL: input_len, output_len[, timestamp])")
    g.add_argument("--num-prompts", type=int, default=200)
    g.add_argument("--random-input-len", type=int, default=1024)
    g.add_argument("--random-output-len", type=int, default=128)
    g.add_argument("--random-range-ratio", type=float, default=0.0,
                   help="vLLM convention: lengths uniform in [len*(1-r), len*(1+r)], r in [0, 1)")
    g.add_argument("--random-prefix-len", type=int, default=0)
    g.add_argument("--vocab-size", type=int, default=32000, help="token ids stay below this (tiny models: lower it)")
    g.add_argument("--seed", type=int, default=0)


def add_load_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("load (vllm bench serve names)")
    g.add_argument("--max-concurrency", type=int, default=None)
    g.add_argument("--request-rate", type=float, default=math.inf, help="requests/s (inf: all at once)")
    g.add_argument("--burstiness", type=float, default=1.0, help="gamma shape; 1 = Poisson")
    g.add_argument("--num-warmups", type=int, default=0, help="unmeasured warm-pass requests")
    g.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs, e.g. ttft:500 tpot:50")
    g.add_argument("--metric-percentiles", default="50,90,99")


def check_load_flags(args) -> None:
    """Nonsense load numbers are refused before anything starts (not after a server booted)."""
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise UsageError(f"--max-concurrency must be at least 1, got {args.max_concurrency}")
    if not args.request_rate > 0:  # inf is fine (all at once); nan fails this too
        raise UsageError(f"--request-rate must be > 0 requests/s (or inf), got {args.request_rate}")
    if not args.burstiness > 0:
        raise UsageError(f"--burstiness must be > 0 (1 = Poisson), got {args.burstiness}")
    if args.num_warmups < 0:
        raise UsageError(f"--num-warmups must be 0 or more, got {args.num_warmups}")


def build_workload(args):
    from ..workload import FixedWorkload, RandomWorkload, TraceWorkload

    if args.num_prompts < 1:
        raise UsageError(f"--num-prompts must be at least 1, got {args.num_prompts}")
    if args.dataset_name == "trace":
        if args.dataset_path is None:
            raise UsageError("--dataset-name trace needs --dataset-path FILE")
        return TraceWorkload.from_file(args.dataset_path, vocab_size=args.vocab_size)
    if args.dataset_name == "fixed":
        return FixedWorkload(args.random_input_len, args.random_output_len, num_prompts=args.num_prompts,
                             seed=args.seed, vocab_size=args.vocab_size)
    return RandomWorkload(args.random_input_len, args.random_output_len, range_ratio=args.random_range_ratio,
                          num_prompts=args.num_prompts, seed=args.seed, prefix_len=args.random_prefix_len,
                          vocab_size=args.vocab_size)


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--metric-percentiles expects numbers like 50,90,99, got {text!r}") from None
    bad = [v for v in values if not 0 < v <= 100]
    if bad or not values:
        raise UsageError(f"--metric-percentiles must be in (0, 100], got {text!r}")
    return values


def cmd_bench(args) -> int:
    from ..loadgen import run_benchmark
    from ..metrics import rescale_time, validate_goodput_slos

    workload = build_workload(args)
    check_load_flags(args)
    goodput = parse_key_values(args.goodput, "--goodput", sep=":")
    validate_goodput_slos(goodput)  # before the connection check: a bad key is the user's to fix
    if not 0 < args.time_scale <= 1:
        raise UsageError(f"--time-scale must be in (0, 1], got {args.time_scale}")
    percentiles = parse_percentiles(args.metric_percentiles)
    check_reachable(args.base_url)  # one clear line instead of a table of failed requests
    result_file = prepare_output(args.result_file, "--result-file") if args.result_file else None
    result = asyncio.run(run_benchmark(
        args.base_url, args.model, workload, max_concurrency=args.max_concurrency,
        request_rate=args.request_rate, burstiness=args.burstiness, warmup_requests=args.num_warmups,
        goodput_slos=goodput or None, percentiles=percentiles,
        progress=not args.quiet, seed=args.seed,
    ))
    data = rescale_time(result.to_json(detailed=True), args.time_scale)
    print_summary(data)
    if result_file:
        result_file.write_text(json.dumps(data))
        print(f"result written to {args.result_file}")
    return 0 if data.get("completed") else 1


def print_summary(d: dict) -> None:
    """The stdout labels `vllm bench serve` prints (scripts such as auto_tune grep for them)."""
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    rows = [
        ("Successful requests:", d.get("completed")),
        ("Failed requests:", d.get("failed")),
        ("Benchmark duration (s):", d.get("duration")),
        ("Total input tokens:", d.get("total_input_tokens")),
        ("Total generated tokens:", d.get("total_output_tokens")),
        ("Request throughput (req/s):", d.get("request_throughput")),
        ("Request goodput (req/s):", d.get("request_goodput")),
        ("Output token throughput (tok/s):", d.get("output_throughput")),
        ("Peak output token throughput (tok/s):", d.get("max_output_tokens_per_s")),
        ("Peak concurrent requests:", d.get("max_concurrent_requests")),
        ("Total token throughput (tok/s):", d.get("total_token_throughput")),
    ]
    for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        for stat in ("mean", "median", "p99"):
            key = f"{stat}_{metric}_ms"
            if key in d:
                rows.append((f"{stat.capitalize() if stat != 'p99' else 'P99'} {label} (ms):", d[key]))
    for label, value in rows:
        if value is None:
            continue
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        print(f"{label:<40}{shown:<10}")
    print("=" * 50)
