"""`bucket-tuner buckets` and `bucket-tuner profiles`: what a release builds for a configuration."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

from ..buckets import DEFAULT, USER, ServerConfig, Setting, get_profile, profiles
from ..buckets.base import STRATEGIES
from ..buckets.coverage import coverage_warnings
from ..buckets.release_flag import add_release
from . import UsageError, add_allow_unknown, check_env_names, parse_env_pairs, tokens_arg
from .offline import add_model_flags, check_model_flags, model_line, predict, warmup_text


def register(sub) -> None:
    _add_buckets(sub)
    sub.add_parser("profiles", help="list the release profiles").set_defaults(func=cmd_profiles)


def _add_buckets(sub):
    p = sub.add_parser(
        "buckets",
        help="list the buckets a vLLM-on-Gaudi release builds for a configuration",
        description="Compute exactly the prompt and decode buckets a release builds (and warms up) "
        "for a server configuration, with the settings it resolves and the warnings it prints; the KV blocks "
        "and the warm-up the performance model predicts for --model-shape on --device (with a band); and "
        "whether the buckets cover max_model_len and the worst-case decode context. Nothing is booted.",
    )
    add_release(p, "the release profile (required), e.g. fork-1.21.2, fork-1.22, gaudi-main (bucket-tuner profiles)")
    p.add_argument("--strategy", choices=STRATEGIES,
                   help="force a strategy (default: what the release picks from --env)")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--max-num-seqs", type=int, metavar="N",
                   help="default: vLLM's for the release (256; vllm-gaudi cuts it to the token budget), said when "
                        "defaulted")
    p.add_argument("--max-model-len", type=tokens_arg, required=True)
    p.add_argument("--max-num-batched-tokens", type=tokens_arg, metavar="N",
                   help="the token budget (default: vLLM's for the release, said when defaulted: max(max_model_len, "
                        "2048) on the v0 fork, no chunked prefill (5120 at least for a multimodal --model-shape from "
                        "1.19); 2048 on vllm-gaudi (the HPU reports no device memory); from fork 1.22 and "
                        "vllm-gaudi 0.15.1 at most max_num_seqs x max_model_len)")
    p.add_argument("--num-hpu-blocks", type=int, metavar="N",
                   help="override the KV block count (default: what the performance model predicts; a server "
                        "log says it, e.g. `explain` shows it)")
    p.add_argument("--max-num-prefill-seqs", type=int, help="fork only: --max-num-prefill-seqs")
    pc = p.add_mutually_exclusive_group()
    pc.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None)
    pc.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    m = p.add_argument_group("runner and model settings (docs/bucketing-inputs.md)")
    m.add_argument("--lora", action="store_true", help="LoRA enabled (fork 1.18 caps and filters buckets)")
    m.add_argument("--num-speculative-tokens", type=int, default=0, help="speculative decoding: tokens per step")
    m.add_argument("--mamba-chunk-size", type=int, default=0, help="chunk size the runner passes for mamba layers")
    m.add_argument("--mamba-chunk-size-implicit", dest="mamba_chunk_size_explicit", action="store_false",
                   help="the model sets no chunk size (the runner's 128 default is used)")
    m.add_argument("--pooling", action="store_true", help="a pooling model (no decode buckets)")
    m.add_argument("--decode-block-size", type=int, help="hybrid models: the attention kernel's block size")
    m.add_argument("--skip-decode-block-clamp", action="store_true",
                   help="vllm-gaudi main: hybrid/GDN/mamba/interleaved-SWA models keep the full decode block range")
    m.add_argument("--limit-mm-per-prompt", metavar="JSON",
                   help="multimodal models: vLLM's --limit-mm-per-prompt, e.g. '{\"image\": 4}' or "
                        "'{\"image\": {\"count\": 4, \"width\": 1024, \"height\": 768}}' (the image warm-up needs it)")
    m.add_argument("--mm-model-type", metavar="TYPE",
                   help="multimodal models: the config's top-level model_type, when it differs from the language "
                        "part's without '_text' (e.g. kimi_k25); vllm-gaudi's image bucket table is keyed by it")
    m.add_argument("--enforce-eager", action="store_true",
                   help="vLLM's --enforce-eager (where the vision warm-up runs)")
    m.add_argument("--token-budget-filter", choices=("prompt", "both"),
                   help="fork-1.17: a habana_main build after the 1.17 release that omits buckets above "
                        "--max-num-batched-tokens (vllm-fork #208, 2024-08: both phases; #241, 2024-09: prompt only)")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="a VLLM_* variable as the server sees it")
    p.add_argument("--bucket-file", metavar="F",
                   help="the buckets listed in file F (the same as --env VLLM_BUCKETING_FROM_FILE=F; "
                        "vllm-gaudi v0.15.1 and later read it)")
    add_allow_unknown(p)
    add_model_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--log-lines", action="store_true", help="print the bucket lines the release logs")
    p.set_defaults(func=cmd_buckets)


def _shape_ranges(buckets) -> str:
    if not buckets:
        return "-"
    dims = len(buckets[0])
    return " x ".join(f"{min(b[i] for b in buckets)}..{max(b[i] for b in buckets)}" for i in range(dims))


def _env_with_bucket_file(profile, env: dict[str, str], bucket_file: str | None) -> dict[str, str]:
    """--bucket-file F as the env variable, refused where the release never reads bucket files."""
    from ..buckets.runtime import reads_variable
    from ..space.schema import BUCKET_FILE_VARIABLE

    if bucket_file is None:
        return env
    if BUCKET_FILE_VARIABLE in env and env[BUCKET_FILE_VARIABLE] != bucket_file:
        raise UsageError(f"--bucket-file {bucket_file} and --env {BUCKET_FILE_VARIABLE}={env[BUCKET_FILE_VARIABLE]} "
                         "name two files; give one")
    readers = [p.name for p in profiles().values() if reads_variable(p, BUCKET_FILE_VARIABLE)]
    if profile.name not in readers:
        raise UsageError(f"--bucket-file {bucket_file}: {profile.name} cannot read bucket files "
                         f"({BUCKET_FILE_VARIABLE} is not read there); profiles that do: {', '.join(readers)}")
    if not Path(bucket_file).is_file():
        raise UsageError(f"--bucket-file {bucket_file}: " + ("not a file" if Path(bucket_file).exists()
                                                             else "file not found"))
    return {**env, BUCKET_FILE_VARIABLE: bucket_file}


def _say(text: str, indent: str = "") -> None:
    """A line of prose within 80 columns; its continuation indented under it (issue 34). Warnings and errors
    stay one line each, whole, as a user searches for or pastes them."""
    print(textwrap.fill(text, 80, initial_indent=indent, subsequent_indent=indent + "  ",
                        break_long_words=False, break_on_hyphens=False))


def _print_head(plan, profile, cfg: ServerConfig, defaulted: dict[str, str]) -> None:
    _say(f"{plan.profile}  strategy: {plan.strategy}  ({profile.upstream})")
    for name, note in defaulted.items():
        _say(f"{name}: {getattr(cfg, name):,} ({note})")


def server_limits(profile: str, args):
    """--max-num-seqs and --max-num-batched-tokens, else the release's defaults (notes say which)."""
    from ..buckets.serverdefaults import resolve
    from ..perfmodel.hardware import model_for

    return resolve(profile, args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens,
                   multimodal=model_for(args.model_shape).multimodal)


def cmd_buckets(args) -> int:
    if args.release is None:
        raise UsageError("--release is required, e.g. --release fork-1.21.2 (bucket-tuner profiles lists them)")
    profile = get_profile(args.release)
    env = _env_with_bucket_file(profile, parse_env_pairs(args.env), args.bucket_file)
    name_warnings = check_env_names(env, profile.name, "--env", args)
    check_model_flags(args)
    if args.num_hpu_blocks is not None and args.num_hpu_blocks < 1:
        raise UsageError(f"--num-hpu-blocks must be a positive integer, got {args.num_hpu_blocks}")
    limits = server_limits(profile.name, args)
    cfg = ServerConfig(
        block_size=args.block_size,
        max_num_seqs=limits.max_num_seqs,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        num_hpu_blocks=args.num_hpu_blocks or 1,  # replaced below by the given or predicted count
        env=env,
        prefix_caching=args.prefix_caching,
        max_num_prefill_seqs=args.max_num_prefill_seqs,
        lora=args.lora,
        num_speculative_tokens=args.num_speculative_tokens,
        mamba_chunk_size=args.mamba_chunk_size,
        mamba_chunk_size_explicit=args.mamba_chunk_size_explicit,
        pooling=args.pooling,
        decode_block_size=args.decode_block_size,
        skip_decode_block_clamp=args.skip_decode_block_clamp,
        token_budget_phases={None: (), "prompt": ("prompt",), "both": ("prompt", "decode")}[args.token_budget_filter],
    )
    pred = predict(profile.name, cfg, args)
    blocks, kv_source = kv_blocks(args, pred, cfg)
    cfg = replace(cfg, num_hpu_blocks=blocks)
    plan = profile.build(cfg, args.strategy)
    plan.warnings[:0] = name_warnings
    plan.warnings += coverage_warnings(plan, cfg, profile.engine)
    plan.settings = _label_given(plan.settings, args, kv_source)
    image = image_plan(profile.name, args, cfg, plan)
    if args.json:
        out = {
            "profile": plan.profile,
            "strategy": plan.strategy,
            "dims": plan.dims,
            "prompt": [list(b) for b in plan.prompt],
            "decode": [list(b) for b in plan.decode],
            "counts": {"prompt": len(plan.prompt), "decode": len(plan.decode),
                       "omitted_prompt": len(plan.omitted_prompt)},
            "unified": [list(b) for b in plan.unified],
            "kv_blocks": {"value": blocks, "source": kv_source},
            "model": pred.figures,
            "prediction": pred.to_json(),
            "settings": [{"name": s.name, "value": s.value, "source": s.source, "note": s.note} for s in plan.settings],
            "warnings": plan.warnings,
            "image": image,
            "defaulted": limits.notes,
        }
        if args.log_lines:
            out["log_lines"] = plan.log_lines
        print(json.dumps(out))
        return 0

    shape = "(bs, query, ctx_blocks)" if plan.dims == 3 else "(bs, seq)"
    dshape = ("(bs, 1, blocks)" if plan.dims == 3
              else "(bs, ctx_tokens)" if profile.name == "fork-1.17" else "(bs, blocks)")
    _print_head(plan, profile, cfg, limits.notes)
    print(f"prompt buckets: {len(plan.prompt):>6}  {shape} ranges {_shape_ranges(plan.prompt)}")
    if plan.prompt:
        largest = max(plan.prompt, key=lambda b: b[0] * (b[1] + (b[2] * cfg.block_size if plan.dims == 3 else 0)))
        print(f"  largest padded prompt: {tuple(largest)}")
    if plan.omitted_prompt:
        print(f"  omitted by the token budget ({cfg.max_num_batched_tokens}): {len(plan.omitted_prompt)}")
    print(f"decode buckets: {len(plan.decode):>6}  {dshape} ranges {_shape_ranges(plan.decode)}")
    if plan.decode:
        print(f"  largest padded decode: {tuple(max(plan.decode, key=lambda b: (b[0], b[-1])))}")
    if image is not None:
        print_image(image)
    if pred.figures:
        _say(model_line(pred.figures))
    print(f"KV blocks: {blocks:,} ({kv_source})")
    _say(f"warm-up: {warmup_text(pred)}")
    if kv_source != "predicted" and pred.kv_blocks and _differs(profile, cfg, pred.kv_blocks, plan, args.strategy):
        _say(f"(predicted for the model's own {pred.kv_blocks:,} KV blocks; the buckets above use {blocks:,})", "  ")
    print("settings:")
    for s in plan.settings:
        note = f"  # {s.note}" if s.note else ""
        _say(f"{s.name}={s.value} ({s.source}){note}", "  ")
    for w in plan.warnings:
        print(f"warning: {w}")
    if args.log_lines:
        print("log lines:")
        for line in plan.log_lines + ((image or {}).get("log_lines") or []):
            print(f"  {line}")
    return 0


def _limit_mm(text: str | None) -> dict[str, dict[str, int]]:
    """--limit-mm-per-prompt as vLLM reads it (perfmodel.vision.parse_limit_mm), a usage error if bad."""
    from ..perfmodel.vision import parse_limit_mm

    try:
        return parse_limit_mm(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def vision_inputs(shape, args, cfg: ServerConfig, text_plan, profile_name: str):
    """What the vision phase sees, from the model's config and the command line."""
    from ..perfmodel.vision import vision_inputs as inputs_for

    prompt_queries = [b[1] for b in text_plan.prompt]
    return inputs_for(shape, profile_name, cfg.env, _limit_mm(args.limit_mm_per_prompt),
                      prefix_caching=cfg.prefix_caching, enforce_eager=args.enforce_eager,
                      max_prompt_shape=max(prompt_queries) if prompt_queries else cfg.max_model_len,
                      mm_model_type=args.mm_model_type)


def image_plan(profile_name: str, args, cfg: ServerConfig, text_plan) -> dict | None:
    """The image buckets and vision warm-up for --model-shape (None: a text model)."""
    from ..buckets import BucketConfigError
    from ..buckets.vision import build_vision
    from ..perfmodel.hardware import model_for

    shape = model_for(args.model_shape)
    if not shape.multimodal:
        if args.limit_mm_per_prompt or args.mm_model_type:
            raise UsageError(f"--limit-mm-per-prompt / --mm-model-type: {shape.name} is a text model")
        return None
    inp, modalities = vision_inputs(shape, args, cfg, text_plan, profile_name)
    out = {"model_type": inp.model_type,
           "model_type_source": "--mm-model-type" if args.mm_model_type else "the config's model_type",
           "patch_size": inp.patch_size, "modalities": list(modalities)}
    try:
        vplan = build_vision(profile_name, inp)
    except BucketConfigError as exc:  # the release would stop, or (dynamic_patch) an input we cannot read
        return {**out, "active": True, "error": str(exc), "error_variable": exc.variable, "buckets": None,
                "count": 0}
    return {**out, **vplan.to_json(), **({"log_lines": vplan.log_lines} if args.log_lines else {})}


def print_image(image: dict) -> None:
    if "error" in image:
        what = "cannot tell" if image["error_variable"] == "dynamic_patch" else "the release stops"
        print(f"image buckets: {what}: {image['error']}")
        return
    if not image["active"]:
        _say(f"image buckets: none ({image['decided_by']})")
        return
    buckets = image["buckets"]
    listed = "None (no list)" if buckets is None else buckets
    print(f"image buckets: {image['count']:>6}  {image['unit']} {listed}")
    _say(f"decided by: {image['decided_by']}; model_type {image['model_type']}, patch size {image['patch_size']}, "
         f"modalities {', '.join(image['modalities'])}", "  ")
    if image["resolutions"]:
        print(f"  {', '.join('x'.join(str(v) for v in r if v is not None) for r in image['resolutions'])} "
              "(VLLM_MULTIMODAL_RESOLUTIONS)")
    sizes = sorted({(s["width"], s["height"]) for s in image["steps"] if s["width"]})
    at = f" at {len(sizes)} resolutions" if sizes else ""
    graphs = image["graphs"]
    _say(f"vision warm-up: {graphs} graph{'' if graphs == 1 else 's'}{at}; {image['placement']}", "  ")
    for w in image["warnings"]:
        print(f"warning: {w}")


def kv_blocks(args, pred, cfg: ServerConfig) -> tuple[int, str]:
    """The KV block count the buckets are built for, and where it comes from."""
    import math

    if args.num_hpu_blocks is not None:
        return args.num_hpu_blocks, "given: --num-hpu-blocks"
    if pred.kv_blocks:
        return pred.kv_blocks, "predicted"
    enough = cfg.max_num_seqs * math.ceil(cfg.max_model_len / cfg.block_size)
    return enough, ("assumed: enough for every sequence at max_model_len; the model predicts no KV cache "
                    f"({pred.failure}); give --num-hpu-blocks")


def _differs(profile, cfg: ServerConfig, blocks: int, plan, strategy) -> bool:
    """Whether the buckets at `blocks` KV blocks differ from `plan` (the warm-up was predicted for those)."""
    try:
        other = profile.build(replace(cfg, num_hpu_blocks=blocks), strategy)
    except ValueError:
        return True
    return (other.prompt, other.decode, other.unified) != (plan.prompt, plan.decode, plan.unified)


def _label_given(settings: list[Setting], args, kv_source: str) -> list[Setting]:
    """A value the user passed on the command line is never shown as "(default)"."""
    given = {"num_hpu_blocks": args.num_hpu_blocks, "prefix_caching": args.prefix_caching,
             "max_num_prefill_seqs": args.max_num_prefill_seqs, "max_num_seqs": args.max_num_seqs,
             "max_model_len": args.max_model_len, "max_num_batched_tokens": args.max_num_batched_tokens,
             "block_size": args.block_size}
    out = []
    for s in settings:
        if s.name == "num_hpu_blocks" and s.source == DEFAULT:
            s = replace(s, source=kv_source.split(":")[0])
        elif s.source == DEFAULT and given.get(s.name) is not None and given[s.name] == s.value:
            s = replace(s, source=USER)
        out.append(s)
    return out


def cmd_profiles(args) -> int:
    """One block per release, 80 columns: its name and strategies, then where its code comes from."""
    import textwrap

    def block(head: str, body: str) -> None:
        print(head)
        print(textwrap.fill(body, 80, initial_indent="    ", subsequent_indent="    "))

    for p in profiles().values():
        plain = [a for a in p.aliases if a not in p.alias_notes]
        alias = f"; alias {', '.join(plain)}" if plain else ""
        others = [s for s in p.strategies if s != p.default_strategy]
        strategies = p.default_strategy + " (default)" + (f", {', '.join(others)}" if others else "")
        block(f"{p.name:<14}{strategies}", f"{p.upstream}{alias}")
        for name, why in p.alias_notes.items():
            block(f"{name:<14}alias of {p.name}", why)
    return 0
