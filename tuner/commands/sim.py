"""`bucket-tuner sim-serve`: the simulated vLLM-on-Gaudi server (its own flag parser)."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    _add_sim_serve(sub)


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
    from ..sim.serve import main as sim_main

    return sim_main(args.sim_args)
