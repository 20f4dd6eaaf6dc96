"""`bucket-tuner fit --image-coverage`: image buckets (or resolutions) placed on a workload's images
(tuner/space/fit/images.py), printed with the share they serve, the predicted multimodal warm-up and
the lines to start the server with."""

from __future__ import annotations

import json
import sys

from . import UsageError, tokens_arg

VARIABLES = ("VLLM_MULTIMODAL_BUCKETS", "VLLM_MULTIMODAL_RESOLUTIONS")


def add_flags(p) -> None:
    from .bench import add_random_mm_flags

    add_random_mm_flags(p.add_argument_group("random-mm: images (vllm bench serve names and defaults)"))
    g = p.add_argument_group("image buckets (with --image-coverage, or --dataset-name random-mm)")
    g.add_argument("--image-coverage", type=float, default=None, metavar="SHARE",
                   help="fit the image buckets of --model instead of the text buckets: the least multimodal "
                        "warm-up that serves this share (0 < SHARE <= 1) without an encoder recompile "
                        "(default 0.95 with --dataset-name random-mm)")
    g.add_argument("--coverage-of", choices=("requests", "images"), default="requests",
                   help="what --image-coverage counts: requests whose every image is served, or images "
                        "(default requests)")
    g.add_argument("--image-variable", choices=VARIABLES, default=None,
                   help="the variable to fit (default: VLLM_MULTIMODAL_RESOLUTIONS where the release reads it and "
                        "the model's image-bucket table is empty, else VLLM_MULTIMODAL_BUCKETS)")
    g.add_argument("--max-image-padding", type=float, default=0.25, metavar="SHARE",
                   help="bucket lists may pad the encoder's work by at most this share (default 0.25; 1 allows "
                        "one bucket at the top, every image padded up to it)")
    g.add_argument("--model", help="the served vision-language model (catalogue id, folder or config.json)")
    g.add_argument("--limit-mm-per-prompt", metavar="JSON",
                   help='the server\'s --limit-mm-per-prompt, e.g. \'{"image": 2}\' (default: the workload\'s most '
                        "images per request); the release warms images only when it names 'image'")
    g.add_argument("--no-enable-prefix-caching", dest="prefix_caching", action="store_false",
                   help="the server runs without prefix caching (vLLM's flag)")
    g.add_argument("--max-model-len", type=tokens_arg, default=8192,
                   help="the server's max_model_len (the fork warms images at its longest prompt bucket)")
    g.add_argument("--env", action="append", metavar="NAME=VALUE",
                   help="the server's other variables (repeatable), e.g. a fixed VLLM_MULTIMODAL_BUCKETS when "
                        "fitting resolutions")


def image_mode(args) -> bool:
    return args.image_coverage is not None or args.dataset_name == "random-mm"


def _load(args):
    from ..load.multimodal import DEFAULT_BUCKET_CONFIG, DEFAULT_LIMIT_MM_PER_PROMPT, item_plan
    from ..space.fit.imageload import from_random_mm, from_requests

    if args.dataset_name == "random-mm":
        try:
            plan = item_plan(args.random_mm_base_items_per_request if args.random_mm_base_items_per_request
                             is not None else 1, args.random_mm_num_mm_items_range_ratio or 0.0,
                             args.random_mm_limit_mm_per_prompt or DEFAULT_LIMIT_MM_PER_PROMPT,
                             args.random_mm_bucket_config or DEFAULT_BUCKET_CONFIG)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return from_random_mm(plan.buckets, plan.min_items, plan.max_items, args.num_prompts)
    if not args.dataset_path:
        raise UsageError("--image-coverage needs images: --dataset-name random-mm (with its --random-mm-* flags) "
                         "or --dataset-path a trace with an 'images' column")
    from ..load.trace import TraceFormatError, TraceWorkload

    try:
        trace = TraceWorkload.from_file(args.dataset_path, seed=args.seed)
    except TraceFormatError as exc:
        raise UsageError(str(exc)) from None
    if not trace.images:
        raise UsageError(f"{args.dataset_path}: no request carries images (the trace's 'images' column: "
                         "[[width, height], ...] per request)")
    return from_requests(trace.images, source=str(args.dataset_path))


def _limit(args, load) -> int:
    if not args.limit_mm_per_prompt:
        return max(1, load.max_items)
    from ..perfmodel.vision import parse_limit_mm

    try:
        count = parse_limit_mm(args.limit_mm_per_prompt).get("image", {}).get("count")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(count, int) or count < 1:
        raise UsageError(f"--limit-mm-per-prompt {args.limit_mm_per_prompt}: give a positive 'image' count; the "
                         "release warms the image encoder only for a modality it names")
    if count < load.max_items:
        raise UsageError(f"--limit-mm-per-prompt {args.limit_mm_per_prompt}: the workload sends up to "
                         f"{load.max_items} images per request, which the server would refuse")
    return count


def _env(args) -> dict[str, str]:
    from . import check_env_names

    env = {}
    for pair in args.env or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {pair!r}: expected NAME=VALUE")
        env[name] = value
    check_env_names(env, args.release, "--env", args)
    return env


def _variable(args, pricer) -> str:
    from ..buckets.names import release_variables

    reads = "VLLM_MULTIMODAL_RESOLUTIONS" in release_variables(args.release)
    if args.image_variable == "VLLM_MULTIMODAL_RESOLUTIONS" and not reads:
        raise UsageError(f"--image-variable VLLM_MULTIMODAL_RESOLUTIONS: {args.release} does not read it "
                         "(vllm-gaudi v0.26+ do); fit VLLM_MULTIMODAL_BUCKETS")
    if args.image_variable:
        return args.image_variable
    phase = pricer.phase({})
    native = phase is not None and phase.plan.table_key is not None and not phase.plan.buckets
    if reads and native and "VLLM_MULTIMODAL_BUCKETS" not in pricer.env:
        return "VLLM_MULTIMODAL_RESOLUTIONS"  # the table is empty on purpose: only resolutions warm anything
    return "VLLM_MULTIMODAL_BUCKETS"


def cmd_fit_images(args) -> int:
    from ..buckets import BucketConfigError, get_profile
    from ..space.fit import FitError
    from ..space.fit.images import Pricer, fit_buckets, fit_resolutions

    args.release = get_profile(args.release).name
    coverage = 0.95 if args.image_coverage is None else args.image_coverage
    if not 0 < coverage <= 1:
        raise UsageError(f"--image-coverage must be in (0, 1], got {args.image_coverage}")
    if not 0 <= args.max_image_padding <= 1:
        raise UsageError(f"--max-image-padding must be in [0, 1], got {args.max_image_padding}")
    if not args.model:
        raise UsageError("--image-coverage: name the served model with --model (its vision tower sizes the images)")
    load = _load(args)
    if not load.sizes:
        raise UsageError("the workload sends no images")
    limit = _limit(args, load)
    try:
        pricer = Pricer(args.model, args.release, _env(args), limit, prefix_caching=args.prefix_caching,
                        max_model_len=args.max_model_len)
        if pricer.shape.vision_tower is None:
            raise UsageError(f"--model {args.model}: a text model (no vision_config): it has no image buckets")
        variable = _variable(args, pricer)
        if variable == "VLLM_MULTIMODAL_RESOLUTIONS":
            fit = fit_resolutions(pricer, load, target=coverage, unit=args.coverage_of)
        else:
            fit = fit_buckets(pricer, load, target=coverage, unit=args.coverage_of,
                              max_padding=args.max_image_padding)
    except (FitError, BucketConfigError) as exc:
        raise UsageError(str(exc)) from None
    doc = document(args, load, pricer, fit)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print(doc)
    return 0 if fit.chosen is not None else 1


def _row(r) -> dict:
    return {"value": r.value, "images_served": r.image_share, "requests_served": r.request_share,
            "padding": r.padding, "graphs": r.graphs, "multimodal_warmup_s": r.seconds, "warnings": list(r.warnings)}


def document(args, load, pricer, fit) -> dict:
    tower = pricer.shape.vision_tower
    chosen = fit.chosen
    server = {"--limit-mm-per-prompt": json.dumps({"image": fit.limit})}
    return {
        "model": pricer.shape.name, "profile": args.release, "variable": fit.variable, "unit": fit.bucket_unit,
        "target": {"share": fit.target, "of": fit.unit}, "method": fit.method,
        "workload": {"source": load.source, "requests": load.requests, "images_per_request": load.mean_items,
                     "sizes": [{"width": w, "height": h, "share": p, "patches": tower.patches(w, h)}
                               for (w, h), p in sorted(load.sizes.items(), key=lambda kv: -kv[1])]},
        "base": _row(fit.base) if fit.base else None,
        "candidates": [_row(r) for r in fit.rows],
        "chosen": _row(chosen) if chosen else None,
        "env": {fit.variable: chosen.value} if chosen and chosen.value else {},
        "server": server,
        "why_none": fit.why_none or None,
    }


def _print(doc: dict) -> None:
    w = sys.stdout.write
    wl = doc["workload"]
    w(f"Image buckets fitted to the workload: {doc['model']} on {doc['profile']}, {doc['variable']} "
      f"({doc['unit']})\n")
    sizes = ", ".join(f"{s['width']}x{s['height']} {s['share']:.1%} ({s['patches']} patches)" for s in wl["sizes"][:8])
    more = f" and {len(wl['sizes']) - 8} more" if len(wl["sizes"]) > 8 else ""
    w(f"  images: {wl['images_per_request']:.2f} per request; sizes {sizes}{more}\n")
    if doc["base"]:
        b = doc["base"]
        w(f"  without it the release serves {b['requests_served']:.1%} of requests ({b['images_served']:.1%} of "
          f"images) in {b['graphs']} graphs, {b['multimodal_warmup_s']:.1f} s\n")
    w(f"  {'value':<40} {'requests':>8} {'images':>7} {'padding':>7} {'graphs':>6} {'warm-up':>8}\n")
    for r in doc["candidates"]:
        flag = "  (release warns)" if r["warnings"] else ""
        w(f"  {r['value'] or '(none)':<40} {r['requests_served']:>8.1%} {r['images_served']:>7.1%} "
          f"{r['padding']:>7.1%} {r['graphs']:>6} {r['multimodal_warmup_s']:>7.1f}s{flag}\n")
    c, target = doc["chosen"], doc["target"]
    if c is None:
        w(f"No choice: {doc['why_none']}\n")
        return
    served = c["requests_served"] if target["of"] == "requests" else c["images_served"]
    w(f"\nChosen: {doc['variable']}={c['value'] or '(unset: the release already serves the target)'}\n"
      f"  serves {served:.1%} of the {target['of']} without recompiling (target {target['share']:.1%}; "
      f"{c['requests_served']:.1%} of requests, {c['images_served']:.1%} of images); padding {c['padding']:.1%} "
      f"of the encoder's work\n"
      f"  predicted multimodal warm-up {c['multimodal_warmup_s']:.1f} s ({c['graphs']} graphs)\n")
    for name, value in doc["env"].items():
        w(f"export {name}={value}\n")
    w(f"vllm serve {doc['model']} --limit-mm-per-prompt '{doc['server']['--limit-mm-per-prompt']}'\n")
