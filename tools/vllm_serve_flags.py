"""tuner/vocabulary/vllm_serve_flags.json: every flag `vllm serve` takes, with how many values it takes.

A user's `--server-args` are the flags of their production command line (a tool-call parser, a chat template,
chunked prefill, a swap space ...). The genuine server takes them all; the simulator models a few and must
take the others too, as accepted and not modelled, or every trial it boots would end in "unrecognized
arguments". A flag `vllm serve` does not know stays refused, as vLLM refuses it.

Maintainer tool, run under the genuine-vLLM tier's Python (vLLM's own parser, vllm/entrypoints/launchers/
cli_args.py make_arg_parser). With --fork-repo, the flags the HabanaAI/vllm-fork releases' parsers take and
0.32's no longer does are added (`older`: --swap-space, --num-scheduler-steps, --weights-load-device, ...), read
from the add_argument calls of their arg_utils.py and cli_args.py at each release tag:

    <vllm-venv>/bin/python tools/vllm_serve_flags.py [--fork-repo GIT_DIR] [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tuner" / "vocabulary" / "vllm_serve_flags.json"
FORK_TAGS = ("v0.6.6.post1+Gaudi-1.20.0", "v0.7.2+Gaudi-1.21.2", "v0.9.0.1+Gaudi-1.22.0")
FORK_FILES = ("vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py")


def flags() -> dict:
    import vllm
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    out: dict[str, dict] = {}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its actions
        if not action.option_strings or action.dest == "help":
            continue
        for option in action.option_strings:
            if action.nargs == 0:  # a switch: its value when given (BooleanOptionalAction: --no-x is False)
                entry = {"dest": action.dest, "switch": not option.startswith("--no-")
                         if isinstance(action, argparse.BooleanOptionalAction) else bool(action.const)}
            else:
                entry = {"dest": action.dest, "nargs": action.nargs}
            out[option] = entry
    return {"source": f"vllm {vllm.__version__} (vllm serve's parser, tools/vllm_serve_flags.py)",
            "flags": dict(sorted(out.items()))}


def fork_flags(repo: str, known: dict) -> dict:
    """{option: entry with the first tag that has it} of the fork's parsers, for options `known` lacks."""
    out: dict[str, dict] = {}
    for tag in FORK_TAGS:
        for path in FORK_FILES:
            shown = subprocess.run(["git", "-C", repo, "show", f"{tag}:{path}"], capture_output=True, text=True)
            if shown.returncode:
                continue
            for node in ast.walk(ast.parse(shown.stdout)):
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
                    continue
                options = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
                kw = {k.arg: k.value for k in node.keywords}
                action = ast.unparse(kw["action"]) if "action" in kw else ""
                dest = ast.unparse(kw["dest"]).strip("'\"") if "dest" in kw else None
                for option in options:
                    if option in known or option in out:
                        continue
                    entry = {"dest": dest or options[-1].lstrip("-").replace("-", "_"), "since": tag}
                    if "store_true" in action or "store_false" in action or "BooleanOptional" in action:
                        entry["switch"] = "store_false" not in action and not option.startswith("--no-")
                    else:
                        entry["nargs"] = ast.literal_eval(kw["nargs"]) if "nargs" in kw else None
                    out[option] = entry
    return dict(sorted(out.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    ap.add_argument("--fork-repo", help="a clone of HabanaAI/vllm-fork (its release tags) for the older flags")
    args = ap.parse_args()
    table = flags()
    if args.fork_repo:
        table["older"] = fork_flags(args.fork_repo, table["flags"])
        table["older_source"] = (f"HabanaAI/vllm-fork {', '.join(FORK_TAGS)}: add_argument calls of "
                                 f"{', '.join(FORK_FILES)}")
    if args.check:  # vLLM's own flags (and the fork's when its clone is given) against the shipped table
        shipped = json.loads(OUT.read_text())
        keys = ("flags", "older") if args.fork_repo else ("flags",)
        same = all(shipped.get(k) == table.get(k) for k in keys)
        print("same as shipped" if same else f"{OUT} differs from this vLLM's parser")
        return 0 if same else 1
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{OUT}: {len(table['flags'])} option strings, {len(table.get('older', {}))} older ones")
    return 0


if __name__ == "__main__":
    sys.exit(main())
