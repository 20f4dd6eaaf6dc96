"""`bucket-tuner calc`: the static calculator."""

from __future__ import annotations

import json


def register(sub) -> None:
    _add_calc(sub)


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
    from ..buckets import calc

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
