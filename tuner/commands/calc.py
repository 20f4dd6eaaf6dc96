"""`bucket-tuner calc`: the static calculator, and with a release, what that release builds from it, the KV
blocks and the warm-up the performance model predicts."""

from __future__ import annotations

import json
import sys
import textwrap

from ..buckets.release_flag import add_release
from . import UsageError
from .offline import add_model_flags, check_model_flags, predict, warmup_text


def register(sub) -> None:
    _add_calc(sub)


def _add_calc(sub):
    p = sub.add_parser(
        "calc",
        help="static calculator: a first guess of the 12 linear bucket variables",
        description="The hpu-vllm-bucket-calc formulas: bucket variables from expected input/output lengths "
        "and batch sizes (MAX_MODEL_LEN is vLLM's --max-model-len flag, not a variable). With --release, also "
        "what that release does with them (under the names it reads), the KV blocks and the warm-up the "
        "performance model predicts (with a band), and what the buckets do not cover.",
    )
    p.add_argument("--input-len", type=int, default=1024, help="base input length in tokens (default 1024)")
    p.add_argument("--output-len", type=int, default=1024, help="base output length in tokens (default 1024)")
    p.add_argument("--range-ratio", type=float, default=0.0, help="length variability R in [0, 1) (default 0)")
    p.add_argument("--bs-list", default="16", help="comma-separated batch sizes / concurrency levels (default 16)")
    p.add_argument("--bucket-size", type=int, default=128, help="block size / bucket step (default 128)")
    p.add_argument("--format", choices=("json", "env"), default="json",
                   help="json: the script's layout; env: `export` lines with a `# vllm serve flags:` header "
                        "(sourceable, and read back by compare --env-file)")
    add_release(p, "review the numbers against this release profile, and predict")
    p.add_argument("--num-hpu-blocks", type=int, metavar="N",
                   help="with --release: override the KV block count (default: the model's prediction)")
    add_model_flags(p, title="with --release: prediction (the performance model; nothing is booted)")
    p.set_defaults(func=cmd_calc)


def cmd_calc(args) -> int:
    from ..buckets import calc
    from ..results.export import FLAGS_HEADER

    inputs = calc.CalcInputs(
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        bs_list=calc.parse_bs_list(args.bs_list),
        bucket_size=args.bucket_size,
    )
    result = calc.calculate(inputs)
    review = _review(args, result) if args.release else None
    if args.format == "env":
        flags = review["server_flags"] if review else calc.server_flags(result)
        print(f"{FLAGS_HEADER} {' '.join(flags)}")
        print("\n".join(calc.env_lines(result, review["env"] if review else None)))
        if review:
            # Comments keep the file sourceable by `set -a; . file`; wrapped at 80 columns.
            for text in review["notes"] + [f"warning: {w}" for w in review.get("warnings", [])]:
                print(textwrap.fill(text, 78, initial_indent="# ", subsequent_indent="#   "))
            for name in review["ignored"]:
                print(f"# {review['profile']} ignores {name}")
            print(f"# KV blocks: {review['num_hpu_blocks']} ({review['kv_source']})")
            if "warmup" in review:
                print(textwrap.fill(f"warm-up: {review['warmup']}", 78, initial_indent="# ",
                                    subsequent_indent="#   "))
        return 0
    if review:
        result = {**result, "release_review": review}
    else:
        print("calc: add --release RELEASE for what that release builds, its KV blocks and warm-up", file=sys.stderr)
    print(json.dumps(result, indent=4))
    return 0


def _review(args, result: dict) -> dict:
    """The release review with the model's KV blocks (unless --num-hpu-blocks) and warm-up."""
    from ..buckets import calc, get_profile

    profile = get_profile(args.release)  # an unknown name fails here, listing the known ones
    check_model_flags(args)
    if args.num_hpu_blocks is not None and args.num_hpu_blocks < 1:
        raise UsageError(f"--num-hpu-blocks must be a positive integer, got {args.num_hpu_blocks}")
    env, _ = calc.release_env(result, profile.name)
    pred = predict(profile.name, calc.server_config(result, 1, env), args)
    if args.num_hpu_blocks is not None:
        review = calc.release_review(result, profile.name, args.num_hpu_blocks, "given: --num-hpu-blocks")
    elif pred.kv_blocks:
        review = calc.release_review(result, profile.name, pred.kv_blocks, "predicted")
    else:
        review = calc.release_review(result, profile.name)
    # the warm-up of what the review settled on (its rounded max_model_len, budget, capped prompt batch)
    flags = dict(zip(review["server_flags"][::2], review["server_flags"][1::2]))
    cfg = calc.server_config(result, 1, review["env"])
    from dataclasses import replace
    cfg = replace(cfg, max_model_len=int(flags["--max-model-len"]),
                  max_num_batched_tokens=int(flags["--max-num-batched-tokens"]),
                  max_num_prefill_seqs=int(flags["--max-num-prefill-seqs"]) if "--max-num-prefill-seqs" in flags
                  else None)
    pred = predict(profile.name, cfg, args)
    review["prediction"] = pred.to_json()
    review["warmup"] = warmup_text(pred)
    return review
