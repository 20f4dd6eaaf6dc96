"""The `bucket-tuner` command line: thin; every command calls into a module."""

from __future__ import annotations

import argparse
import json
import sys

from .buckets import BucketConfigError, ServerConfig, get_profile, profiles
from .buckets.base import STRATEGIES


class UsageError(Exception):
    """A bad command-line value; printed as `error: ...` with exit status 2."""


def _parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


# ---------------------------------------------------------------------------------------------- buckets

def _add_buckets(sub):
    p = sub.add_parser(
        "buckets",
        help="list the buckets a vLLM-on-Gaudi release builds for a configuration",
        description="Compute exactly the prompt and decode buckets a release builds (and warms up) "
        "for a server configuration, with the settings it resolves and the warnings it prints.",
    )
    p.add_argument("--profile", required=True, help="release profile, e.g. fork-1.21.2, fork-1.22, gaudi-main")
    p.add_argument("--strategy", choices=STRATEGIES, help="force a strategy (default: what the release picks from --env)")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--max-num-seqs", type=int, required=True)
    p.add_argument("--max-model-len", type=int, required=True)
    p.add_argument("--max-num-batched-tokens", type=int, required=True)
    p.add_argument("--num-hpu-blocks", type=int, required=True, help="KV blocks the server allocates (from its log)")
    p.add_argument("--max-num-prefill-seqs", type=int, help="fork only: --max-num-prefill-seqs")
    pc = p.add_mutually_exclusive_group()
    pc.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None)
    pc.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="a VLLM_* variable as the server sees it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--log-lines", action="store_true", help="print the bucket lines the release logs")
    p.set_defaults(func=cmd_buckets)


def _shape_ranges(buckets) -> str:
    if not buckets:
        return "-"
    dims = len(buckets[0])
    return " x ".join(f"{min(b[i] for b in buckets)}..{max(b[i] for b in buckets)}" for i in range(dims))


def cmd_buckets(args) -> int:
    profile = get_profile(args.profile)
    cfg = ServerConfig(
        block_size=args.block_size,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_hpu_blocks=args.num_hpu_blocks,
        env=_parse_env_pairs(args.env),
        prefix_caching=args.prefix_caching,
        max_num_prefill_seqs=args.max_num_prefill_seqs,
    )
    plan = profile.build(cfg, args.strategy)
    if args.json:
        out = {
            "profile": plan.profile,
            "strategy": plan.strategy,
            "dims": plan.dims,
            "prompt": [list(b) for b in plan.prompt],
            "decode": [list(b) for b in plan.decode],
            "counts": {"prompt": len(plan.prompt), "decode": len(plan.decode), "omitted_prompt": len(plan.omitted_prompt)},
            "settings": [{"name": s.name, "value": s.value, "source": s.source, "note": s.note} for s in plan.settings],
            "warnings": plan.warnings,
        }
        if args.log_lines:
            out["log_lines"] = plan.log_lines
        print(json.dumps(out))
        return 0

    shape = "(bs, query, ctx_blocks)" if plan.dims == 3 else "(bs, seq)"
    dshape = "(bs, 1, blocks)" if plan.dims == 3 else ("(bs, ctx_tokens)" if profile.name == "fork-1.17" else "(bs, blocks)")
    print(f"{plan.profile}  strategy: {plan.strategy}  ({profile.upstream})")
    print(f"prompt buckets: {len(plan.prompt):>6}  {shape} ranges {_shape_ranges(plan.prompt)}")
    if plan.prompt:
        largest = max(plan.prompt, key=lambda b: b[0] * (b[1] + (b[2] * cfg.block_size if plan.dims == 3 else 0)))
        print(f"  largest padded prompt: {tuple(largest)}")
    if plan.omitted_prompt:
        print(f"  omitted by the token budget ({cfg.max_num_batched_tokens}): {len(plan.omitted_prompt)}")
    print(f"decode buckets: {len(plan.decode):>6}  {dshape} ranges {_shape_ranges(plan.decode)}")
    if plan.decode:
        print(f"  largest padded decode: {tuple(max(plan.decode, key=lambda b: (b[0], b[-1])))}")
    print("settings:")
    for s in plan.settings:
        note = f"  # {s.note}" if s.note else ""
        print(f"  {s.name}={s.value} ({s.source}){note}")
    for w in plan.warnings:
        print(f"warning: {w}")
    if args.log_lines:
        print("log lines:")
        for line in plan.log_lines:
            print(f"  {line}")
    return 0


# ------------------------------------------------------------------------------------------------- calc

def _add_calc(sub):
    p = sub.add_parser(
        "calc",
        help="static calculator: a first guess of the 12 linear bucket variables",
        description="The hpu-vllm-bucket-calc formulas: bucket variables from expected input/output lengths "
        "and batch sizes. With --profile, also what that release does with them.",
    )
    p.add_argument("--input-len", type=int, default=1024, help="base input length in tokens (default 1024)")
    p.add_argument("--output-len", type=int, default=1024, help="base output length in tokens (default 1024)")
    p.add_argument("--range-ratio", type=float, default=0.0, help="length variability R in [0, 1) (default 0)")
    p.add_argument("--bs-list", default="16", help="comma-separated batch sizes / concurrency levels (default 16)")
    p.add_argument("--bucket-size", type=int, default=128, help="block size / bucket step (default 128)")
    p.add_argument("--format", choices=("json", "env"), default="json")
    p.add_argument("--profile", help="review the numbers against this release profile")
    p.add_argument("--num-hpu-blocks", type=int, help="with --profile: the KV blocks your server allocates")
    p.set_defaults(func=cmd_calc)


def cmd_calc(args) -> int:
    from . import calc

    inputs = calc.CalcInputs(
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        bs_list=calc.parse_bs_list(args.bs_list),
        bucket_size=args.bucket_size,
    )
    result = calc.calculate(inputs)
    review = calc.release_review(result, args.profile, args.num_hpu_blocks) if args.profile else None
    if args.format == "env":
        print("\n".join(calc.env_lines(result)))
        if review:
            # Comments keep the file sourceable by `set -a; . file`.
            for note in review["notes"]:
                print(f"# {note}")
            for name in review["ignored"]:
                print(f"# {review['profile']} ignores {name}")
        return 0
    if review:
        result = {**result, "release_review": review}
    print(json.dumps(result, indent=4))
    return 0


# -------------------------------------------------------------------------------------------- sim-serve

def _add_sim_serve(sub):
    p = sub.add_parser(
        "sim-serve",
        help="the simulated vLLM-on-Gaudi server (a drop-in for `vllm serve`)",
        add_help=False,
        prefix_chars="\0",  # every argument goes to the simulator's own parser
    )
    p.add_argument("sim_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_sim_serve)


def cmd_sim_serve(args) -> int:
    from .sim.serve import main as sim_main

    return sim_main(args.sim_args)


# ------------------------------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bucket-tuner",
        description="Measured tuning of vLLM-on-Gaudi bucket, graph-memory and batching settings.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_buckets(sub)
    _add_calc(sub)
    _add_sim_serve(sub)
    sub.add_parser("profiles", help="list the release profiles").set_defaults(func=cmd_profiles)
    return parser


def cmd_profiles(args) -> int:
    for p in profiles().values():
        alias = f" (alias {', '.join(p.aliases)})" if p.aliases else ""
        print(f"{p.name:<14} strategies: {', '.join(p.strategies):<36} default: {p.default_strategy:<12} {p.upstream}{alias}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, BucketConfigError, ValueError) as exc:
        print(f"bucket-tuner {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
