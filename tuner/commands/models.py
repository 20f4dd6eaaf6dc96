"""`bucket-tuner models`: the models the tuner knows offline (the catalogue), or what one model is."""

from __future__ import annotations

import json

from . import MODEL_HELP, UsageError
from .offline import model_figures, model_line


def register(sub) -> None:
    p = sub.add_parser(
        "models",
        help="the catalogue of known models, or what one model is (read from its config.json)",
        description="Without a name: the catalogue of real config.json files shipped with the tuner (models the "
        "fork and the plugin validate), one line each. With a name: what the tuner reads from that model's "
        "config (parameters, attention layers, KV bytes per token per rank, weights per card), as buckets, "
        "plan and tune use it. Any model not listed works from its folder or config.json.",
    )
    p.add_argument("model", nargs="?", help=MODEL_HELP)
    p.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"), help="weights format served (default bf16)")
    p.add_argument("--hf-overrides", metavar="JSON",
                   help="the server's --hf-overrides: config keys set over the model's config.json before it is "
                        "read, as vLLM sets them, e.g. '{\"max_position_embeddings\": 131072}'")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_models)


def cmd_models(args) -> int:
    from ..models import catalogue

    if args.tensor_parallel_size < 1:
        raise UsageError(f"--tensor-parallel-size must be at least 1, got {args.tensor_parallel_size}")
    if args.model:
        try:
            figures = model_figures(args.model, args.dtype, args.tensor_parallel_size, args.hf_overrides)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        print(json.dumps(figures, indent=2) if args.json else model_line(figures))
        return 0
    if args.hf_overrides:
        raise UsageError("--hf-overrides: name the model they apply to (bucket-tuner models MODEL --hf-overrides ...)")
    rows = [model_figures(m, args.dtype, args.tensor_parallel_size) for m in catalogue()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'model':<48} {'params':>8} {'active':>7} {'KV B/token':>11}")
    for f in rows:
        print(f"{f['name'][:48]:<48} {f['total_params'] / 1e9:>7.1f}B {f['active_params'] / 1e9:>6.1f}B "
              f"{f['kv_bytes_per_token']['bf16']:>11,}")
    print(f"{len(rows)} models (KV bytes per token in bf16 at TP {args.tensor_parallel_size}); any other model: "
          "pass its folder or config.json")
    return 0
