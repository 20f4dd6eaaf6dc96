"""`bucket-tuner doctor --url URL`: sample a running vLLM's /metrics and say what limits it now."""

from __future__ import annotations

import json
import math
from pathlib import Path

from . import UsageError, check_reachable, duration, server_root, tokens_arg


def register(sub) -> None:
    p = sub.add_parser(
        "doctor", help="what limits a running vLLM server now (its /metrics over a window, its start-up log)",
        description="Samples the server's Prometheus /metrics (running and waiting requests, KV-cache usage, "
        "preemptions, prompt and generation tokens) over a window, reads its start-up log if given, and says "
        "what limits it now: the KV cache, max_num_seqs, the token budget, too little load, or shapes the "
        "warm-up did not cover; with the figures, and the `tune` or `plan` command that would test the remedy. "
        "Run it while the server carries its usual traffic.")
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--window", type=duration, default=30.0, metavar="S",
                   help="how long to sample (default 30 s; durations take 90s, 2m)")
    p.add_argument("--interval", type=duration, default=1.0, metavar="S",
                   help="seconds between two samples (default 1)")
    p.add_argument("--log", type=Path, metavar="FILE",
                   help="the server's start-up log: its settings, KV blocks and shapes the warm-up missed")
    p.add_argument("--max-num-seqs", type=int, help="the server's max_num_seqs (default: from the log)")
    p.add_argument("--max-num-batched-tokens", type=tokens_arg,
                   help="the server's token budget, max_num_batched_tokens (default: from the log)")
    p.add_argument("--space", default="SPACE.yaml",
                   help="the search space the named tune/plan command uses (default: the placeholder SPACE.yaml)")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.set_defaults(func=cmd_doctor)


def _check(args) -> None:
    for flag, value in (("--window", args.window), ("--interval", args.interval)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} must be a positive duration, got {value:g}")
    if args.interval > args.window:
        raise UsageError(f"--interval {args.interval:g} s is longer than --window {args.window:g} s")
    for flag, value in (("--max-num-seqs", args.max_num_seqs),
                        ("--max-num-batched-tokens", args.max_num_batched_tokens)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be a positive integer, got {value}")
    if args.log is not None and not args.log.is_file():
        raise UsageError(f"--log {args.log}: " + ("file not found" if not args.log.exists() else "not a file"))


def cmd_doctor(args) -> int:
    from ..explain.doctor import ServerSettings, diagnose, read_log, render
    from ..explain.serverload import MetricsError, Window, sample_server
    from ..vocabulary.errors import RuntimeFailure

    _check(args)
    args.url = server_root(args.url, "--url")
    check_reachable(args.url, "--url")
    settings = ServerSettings(args.max_num_seqs, args.max_num_batched_tokens,
                              source={k: f"--{k.replace('_', '-')}" for k, v in
                                      (("max_num_seqs", args.max_num_seqs),
                                       ("max_num_batched_tokens", args.max_num_batched_tokens)) if v is not None})
    log = read_log(args.log, settings) if args.log is not None else None
    try:
        samples = sample_server(args.url, args.window, args.interval)
    except MetricsError as exc:
        raise RuntimeFailure(f"--url {args.url}: {exc}") from None
    d = diagnose(args.url, Window(samples), settings, log, args.space)
    print(json.dumps(d.to_json(), indent=2) if args.json else render(d))
    return 0
