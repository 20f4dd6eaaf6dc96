"""One command-line vocabulary: `--release` names the release profile everywhere (tune, buckets, calc, fit,
compare, sim-serve). The older spellings (--profile, --sim-release, --releases) still work and say once
on stderr which flag replaces them. A leaf module: the commands and the simulator's server both use it.
"""

from __future__ import annotations

import argparse
import sys

RELEASE = "--release"


class DeprecatedAlias(argparse.Action):
    """Stores like the flag it stands for, and prints one deprecation line naming that flag."""

    def __init__(self, option_strings, dest, new: str = RELEASE, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_release(p, help: str, *, aliases: tuple[str, ...] = ("--profile",), nargs=None, metavar=None,
                default=None, dest: str = "release") -> None:
    """`--release` (to `dest`) and its deprecated aliases, hidden from --help."""
    p.add_argument(RELEASE, dest=dest, nargs=nargs, metavar=metavar or ("RELEASE" if nargs is None else None),
                   default=default, help=help)
    for old in aliases:
        p.add_argument(old, dest=dest, nargs=nargs, metavar=metavar, action=DeprecatedAlias, help=argparse.SUPPRESS)
