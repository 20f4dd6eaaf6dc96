"""`bucket-tuner explain`: read a server log (file or stdin) and say what its settings cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import UsageError


def register(sub) -> None:
    p = sub.add_parser(
        "explain",
        help="read a vLLM-on-Gaudi server log: buckets, memory, warm-up timeline, errors and advice",
        description="Reads a server log as pasted (docker/kubectl timestamps, ANSI colours, Ray or "
        "multiprocessing prefixes, several tensor-parallel ranks, cut logs): the release that wrote it, the "
        "settings in force, buckets per phase, the memory split, where the warm-up time went, runtime "
        "recompiles and errors, then what other settings would build and cost (predicted from the log's own "
        "per-bucket pace) and the `tune` command to verify them. Nothing is booted.",
    )
    p.add_argument("log", nargs="?", default="-", help="server log file, or - for stdin (default)")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of text")
    p.add_argument("--block-size", type=int, default=128, help="the server's block size (default 128)")
    p.add_argument("--max-model-len", type=int, help="the server's max_model_len (default: from the buckets)")
    p.add_argument("--max-num-seqs", type=int, help="the server's max_num_seqs (default: from the buckets)")
    p.add_argument("--max-num-batched-tokens", type=int, help="the server's token budget (default: from the log)")
    p.add_argument("--input-len", type=int, help="typical prompt length of your traffic (for the calculator)")
    p.add_argument("--output-len", type=int, help="typical output length of your traffic (for the calculator)")
    m = p.add_argument_group("performance model (optional: predictions calibrated with this log, as "
                             "`tune --calibrate-from` would make them)")
    m.add_argument("--model-shape", help="the served model's shape, e.g. llama-3.1-8b (see tune --model-shape)")
    m.add_argument("--device", default="gaudi2", choices=("gaudi2", "gaudi3"))
    m.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"))
    p.set_defaults(func=cmd_explain)


def _positive(name: str, value):
    if value is not None and value <= 0:
        raise UsageError(f"{name} must be a positive integer, got {value}")
    return value


def cmd_explain(args) -> int:
    from ..explain import explain
    from ..explain.render import render_text, to_json

    opts = {"block_size": _positive("--block-size", args.block_size),
            "max_model_len": _positive("--max-model-len", args.max_model_len),
            "max_num_seqs": _positive("--max-num-seqs", args.max_num_seqs),
            "max_num_batched_tokens": _positive("--max-num-batched-tokens", args.max_num_batched_tokens),
            "input_len": _positive("--input-len", args.input_len),
            "output_len": _positive("--output-len", args.output_len)}
    if args.log == "-":
        # bytes, decoded leniently: a pasted log with binary junk or a cut character must still be read
        lines = sys.stdin.buffer.read().decode("utf-8", errors="replace").splitlines()
    else:
        path = Path(args.log)
        if not path.is_file():
            raise UsageError(f"log file not found: {path}" if not path.exists() else f"not a file: {path}")
        # errors="replace": a log cut mid-character or holding binary junk is still read
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    x = explain(lines, source=args.log, advise_opts=opts)
    if args.model_shape:
        from ..perfmodel.hardware import MODELS
        from ..study.logcalibration import LogCalibrationError, model_advice

        if args.model_shape not in MODELS:
            raise UsageError(f"--model-shape {args.model_shape!r} is unknown; known: {', '.join(sorted(MODELS))}")
        server = {"block_size": args.block_size, "max_model_len": args.max_model_len,
                  "max_num_batched_tokens": args.max_num_batched_tokens}
        try:
            model_advice(x, lines, args.device, args.model_shape, args.dtype,
                         {k: v for k, v in server.items() if v is not None})
        except LogCalibrationError as exc:
            x.advice.notes.append(f"no model prediction: {exc}")
    if args.json:
        print(json.dumps(to_json(x), indent=2))
    else:
        sys.stdout.write(render_text(x))
    return 0
