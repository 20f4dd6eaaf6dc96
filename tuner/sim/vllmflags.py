"""The flags of `vllm serve` the simulator takes and does not model (vocabulary/vllm_serve_flags.json, written from
vLLM's own parser and the fork releases' by tools/vllm_serve_flags.py).

A study's `--server-args` are a production command line: a tool-call parser, a chat template, chunked
prefill, a swap space. The genuine server takes them; so does the simulator, which says once in its log which
of them it does not model. A flag no vLLM knows stays refused ("unrecognized arguments"), as vLLM refuses it.
"""

from __future__ import annotations

import argparse

from ..vocabulary.serveargs import table

UNMODELLED_PREFIX = "vllm_"  # their dests: never one of the simulator's own settings
# flags whose meaning the simulator's own parser gives otherwise: the model is its positional argument
_LEFT_OUT = frozenset({"--model", "--config", "--help", "-h"})


def accept_unmodelled(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Add vLLM's flags the parser lacks, hidden from its help; {dest: the first flag spelling} of those added."""
    group = parser.add_argument_group("vLLM's flags the simulator takes and does not model")
    added: dict[str, str] = {}
    for option, entry in table().items():
        if option in _LEFT_OUT:
            continue
        dest = UNMODELLED_PREFIX + entry["dest"]
        try:
            if "switch" in entry:
                group.add_argument(option, dest=dest, action="store_const", const=entry["switch"], default=None,
                                   help=argparse.SUPPRESS)
            else:
                group.add_argument(option, dest=dest, nargs=entry["nargs"], default=None, help=argparse.SUPPRESS)
        except argparse.ArgumentError:  # the simulator's own flag: it models it
            continue
        added.setdefault(dest, option)
    return added


def given(args: argparse.Namespace, added: dict[str, str]) -> dict[str, object]:
    """{vLLM's name: value} of the unmodelled flags the command line gave."""
    return {dest.removeprefix(UNMODELLED_PREFIX): getattr(args, dest) for dest in added
            if getattr(args, dest, None) is not None}
