"""`bucket-tuner explain`: read a server log (file or stdin) and say what its settings cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..buckets.release_flag import add_release
from ..vocabulary.textfile import decode, read_text
from . import MODEL_HELP, UsageError, tokens_arg


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
    add_release(p, "read the log as this release profile (bucket-tuner profiles), whatever its own signs say; "
                "default: the release the log's signs point to")
    p.add_argument("--block-size", type=int, default=128, help="the server's block size (default 128)")
    p.add_argument("--max-model-len", type=tokens_arg, help="the server's max_model_len (default: from the buckets)")
    p.add_argument("--max-num-seqs", type=int, help="the server's max_num_seqs (default: from the buckets)")
    p.add_argument("--max-num-batched-tokens", type=tokens_arg,
                   help="the server's token budget (default: from the log)")
    p.add_argument("--input-len", type=int, help="typical prompt length of your traffic (for the calculator)")
    p.add_argument("--output-len", type=int, help="typical output length of your traffic (for the calculator)")
    m = p.add_argument_group("performance model (optional: predictions calibrated with this log, as "
                             "`tune --calibrate-from` would make them)")
    m.add_argument("--model-shape", help=f"{MODEL_HELP} (default: the log's model line, when known here)")
    m.add_argument("--device", choices=("gaudi2", "gaudi3"),
                   help="default: the device the log's memory lines show, else gaudi2")
    m.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"))
    m.add_argument("--tensor-parallel-size", type=int,
                   help="default: the tensor_parallel_size of the log's engine settings, else 1")
    p.set_defaults(func=cmd_explain)


def _positive(name: str, value):
    if value is not None and value <= 0:
        raise UsageError(f"{name} must be a positive integer, got {value}")
    return value


def _model_name(x, args) -> str | None:
    """The model to predict with: --model-shape, else the log's own model line when its config is known
    here (a folder, the HF cache or the catalogue); a log's model nothing knows is said, not guessed."""
    from ..models import UnknownModelError, resolve

    if args.model_shape is not None:
        name = args.model_shape.strip()
        if not name:
            raise UsageError("--model-shape is empty: give a catalogue name (llama-3.1-8b), a model folder "
                             "or a config.json")
        resolve(name)  # an unknown name is the user's error, said now
        return name
    logged = x.server.model
    if not logged:
        return None
    try:
        resolve(logged, x.server.hf_overrides)
    except UnknownModelError as e:
        x.advice.notes.append(f"no model prediction: the log's model {logged!r} is not known here ({e}); "
                              "pass --model-shape")
        return None
    read = f", read with its --hf-overrides {x.server.hf_overrides}" if x.server.hf_overrides else ""
    x.advice.assumptions.append(f"model {logged} (the log's model line{read}; pass --model-shape to change it)")
    return logged


def _model_advice(x, lines: list[str], args, name: str) -> None:
    """Predict the alternatives with the performance model calibrated with this log: the device and the
    tensor-parallel size the log shows unless given, the model from its config."""
    from ..models import UnknownModelError
    from ..perfmodel.hardware import DEVICES
    from ..study.logcalibration import LogCalibrationError, model_advice

    facts = x.server
    device = args.device or (facts.device if facts.device in DEVICES else None)
    if device is None:
        device = "gaudi2"
        x.advice.assumptions.append("device gaudi2 (the log does not show one; pass --device)")
    tp = _positive("--tensor-parallel-size", args.tensor_parallel_size)
    if tp is None:
        tp = facts.tp if facts.tp_exact else 1
        if not facts.tp_exact:
            seen = f"; the paste shows {facts.tp_evidence}" if facts.tp else ""
            x.advice.assumptions.append(f"tensor-parallel size 1 (not in the log's settings{seen}; pass "
                                        "--tensor-parallel-size)")
    assumed_len = (x.advice.server or {}).get("max_model_len")   # what explain read or assumed (shown)
    server = {"block_size": args.block_size, "max_model_len": args.max_model_len or facts.max_model_len or assumed_len,
              "max_num_batched_tokens": args.max_num_batched_tokens, "tensor_parallel_size": tp}
    try:
        model_advice(x, lines, device, name, args.dtype, {k: v for k, v in server.items() if v is not None},
                     hf_overrides=facts.hf_overrides)
    except (LogCalibrationError, UnknownModelError) as exc:  # the latter: the log's overrides break the config
        x.advice.notes.append(f"no model prediction: {exc}")
        return
    if x.advice.predicted_by.startswith("the performance model"):
        x.advice.predicted_by = (f"the performance model ({device}, {name}, {args.dtype}, TP {tp}) "
                                 "calibrated with this log")


def known_release(name: str | None) -> str | None:
    """--release as given, refused (with the close names) when no profile has that name."""
    from ..buckets import BucketConfigError, get_profile

    if name is None:
        return None
    try:
        get_profile(name)
    except BucketConfigError as exc:
        raise UsageError(f"--release: {exc}") from None
    return name


def cmd_explain(args) -> int:
    from ..explain import explain
    from ..explain.render import render_text, to_json

    opts = {"block_size": _positive("--block-size", args.block_size),
            "max_model_len": _positive("--max-model-len", args.max_model_len),
            "max_num_seqs": _positive("--max-num-seqs", args.max_num_seqs),
            "max_num_batched_tokens": _positive("--max-num-batched-tokens", args.max_num_batched_tokens),
            "input_len": _positive("--input-len", args.input_len),
            "output_len": _positive("--output-len", args.output_len)}
    # bytes read by their content: compressed, UTF-16 from PowerShell, binary junk, a cut character
    if args.log == "-":
        got = decode(sys.stdin.buffer.read(), "standard input")
    else:
        path = Path(args.log)
        if not path.is_file():
            raise UsageError(f"log file not found: {path}" if not path.exists() else f"not a file: {path}")
        got = read_text(path)
    if got.cut:
        print(f"note: the {got.compression} stream of {args.log} is cut; read up to the cut", file=sys.stderr)
    lines = got.lines()
    x = explain(lines, source=args.log, advise_opts=opts, release=known_release(args.release))
    name = _model_name(x, args)
    if name is not None:
        _model_advice(x, lines, args, name)
    if args.json:
        print(json.dumps(to_json(x), indent=2))
    else:
        sys.stdout.write(render_text(x))
    return 0
