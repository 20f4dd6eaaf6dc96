"""The `bucket-tuner` command line: thin; every command lives in tuner/commands/ and calls into a module."""

from __future__ import annotations

import argparse
import sys

from .buckets import BucketConfigError
from .commands import UsageError
from .commands import bench, buckets, calc, explain, fit, results, sim, tune


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bucket-tuner",
        description="Measured tuning of vLLM-on-Gaudi bucket, graph-memory and batching settings.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (tune, results, bench, buckets, calc, fit, explain, sim):
        module.register(sub)
    return parser


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
