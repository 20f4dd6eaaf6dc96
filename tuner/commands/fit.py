"""`bucket-tuner fit`: the bucket set with the least expected padding for a workload, per bucket count."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from ..buckets.release_flag import add_release
from . import UsageError, check_folder, fitimages, prepare_output

TRACE_FORMAT = """\
trace format (--dataset-path FILE): one request per row, in send order.
  CSV (.csv) with a header row, or JSON Lines (.jsonl, one object per line).
  columns: input_len, output_len (tokens, required); timestamp (seconds, optional:
  every row or none, non-decreasing). vLLM's timed_trace JSONL is read too
  (input_length, output_length, timestamp, hash_ids).

example trace.csv:
  input_len,output_len,timestamp
  812,128,0.0
  1930,256,0.4
  402,64,0.9

example trace.jsonl:
  {"input_len": 812, "output_len": 128}
  {"input_len": 1930, "output_len": 256}

  bucket-tuner fit --dataset-path trace.csv --max-concurrency 32 -o buckets.txt
"""


def register(sub) -> None:
    p = sub.add_parser(
        "fit",
        help="buckets fitted to a workload: least expected padding for each bucket count",
        description=textwrap.fill(
            "Computes, per phase, the bucket boundaries that minimise the expected padded tokens of the workload "
            "for each number of buckets (exact dynamic programme), prints the waste-vs-count curve, and writes a "
            "vllm-gaudi bucket file (VLLM_BUCKETING_FROM_FILE). For releases without file support it gives the "
            "linear MIN/STEP/MAX that come closest and the waste each costs.", 78),
        epilog=TRACE_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("workload (as for `bench`)")
    src.add_argument("--random-input-len", "--input-len", dest="input_len", type=int, default=1024)
    src.add_argument("--random-output-len", "--output-len", dest="output_len", type=int, default=128)
    src.add_argument("--random-range-ratio", "--range-ratio", dest="range_ratio", type=float, default=0.0)
    src.add_argument("--random-prefix-len", dest="prefix_len", type=int, default=0)
    src.add_argument("--num-prompts", type=int, default=1000)
    src.add_argument("--seed", type=int, default=0)
    src.add_argument("--dataset-path", help="a trace file instead: CSV or JSONL of input_len, output_len "
                     "[, timestamp][, images] (format and example below)")
    src.add_argument("--dataset-name", choices=("random", "random-mm", "trace"), default=None,
                     help="random (the --random-* lengths), random-mm (vLLM's images, for --image-coverage) or "
                          "trace (--dataset-path; the default when it is given)")
    p.add_argument("--max-concurrency", type=int, default=64, help="decode batch size under load (default 64)")
    p.add_argument("--decode-bs", help="decode batch sizes to fit (default: powers of two up to the concurrency)")
    p.add_argument("--prompt-bs", default="1", help="prompt batch sizes (default 1: vllm-gaudi's default)")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--prompt-buckets", type=int, default=8, help="prompt query buckets to write (default 8)")
    p.add_argument("--decode-buckets", type=int, default=8, help="context-block buckets per decode batch size")
    p.add_argument("--max-buckets", type=int, default=16, help="length of the printed curves (default 16)")
    add_release(p, "release profile (default gaudi-main)", default="gaudi-main")
    p.add_argument("-o", "--output", help="write the bucket file here (refuses to overwrite without --force; "
                   "missing folders are created; only for a release that reads bucket files)")
    p.add_argument("--force", action="store_true", help="overwrite --output")
    p.add_argument("--json", action="store_true")
    fitimages.add_flags(p)
    p.set_defaults(func=cmd_fit)


def workload_of(args):
    from ..load.trace import TraceFormatError, TraceWorkload
    from ..load.workload import RandomWorkload

    try:
        if args.dataset_path:
            return TraceWorkload.from_file(args.dataset_path, seed=args.seed)
        return RandomWorkload(input_len=args.input_len, output_len=args.output_len, range_ratio=args.range_ratio,
                              num_prompts=args.num_prompts, seed=args.seed, prefix_len=args.prefix_len)
    except (TraceFormatError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read trace {args.dataset_path}: {exc.strerror or exc}") from None


def cmd_fit(args) -> int:
    from ..buckets import get_profile
    from ..space.fit import FitError, fit_workload
    from ..space.fit.bucketfile import format_bucket_file
    from ..space.fit.shapes import parse_int_list

    get_profile(args.release)  # an unknown name fails here, listing the known ones
    if args.dataset_name is None:
        args.dataset_name = "trace" if args.dataset_path else "random"
    if args.dataset_name == "trace" and not args.dataset_path:
        raise UsageError("--dataset-name trace needs --dataset-path FILE")
    if fitimages.image_mode(args):
        return fitimages.cmd_fit_images(args)
    if args.output and not _reads_bucket_files(args.release):
        from ..buckets.names import readers, span

        raise UsageError(f"--output: {args.release} cannot read a bucket file (VLLM_BUCKETING_FROM_FILE: "
                         f"{span(readers('VLLM_BUCKETING_FROM_FILE'))} can); drop -o for the closest linear "
                         "settings it can use, or fit for one of those releases")
    for flag in ("prompt_buckets", "decode_buckets", "max_buckets", "block_size", "max_concurrency"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    out = Path(args.output) if args.output else None
    if out is not None:
        if out.exists() and not args.force:
            raise UsageError(f"{out} exists; pass --force to overwrite it")
        check_folder(out.parent, "--output")  # missing folders are created when writing (as everywhere)
    workload = workload_of(args)
    try:
        decode_bs = parse_int_list(args.decode_bs, "--decode-bs") if args.decode_bs else None
        prompt_bs = parse_int_list(args.prompt_bs, "--prompt-bs")
        fit = fit_workload(workload, block_size=args.block_size, max_concurrency=args.max_concurrency,
                           decode_bs=decode_bs, max_buckets=max(args.max_buckets, args.prompt_buckets,
                                                                args.decode_buckets), seed=args.seed)
    except FitError as exc:
        raise UsageError(str(exc)) from None
    prompt = fit.prompt(args.prompt_buckets)
    decode = {bs: fit.decode(bs, args.decode_buckets) for bs in fit.decode_curves}
    n_prompt = len(prompt_bs) * prompt.count
    n_decode = sum(f.count for f in decode.values())
    header = [f"bucket-tuner fit: {workload.kind} workload {json.dumps(workload.params(), default=str)}",
              f"{n_prompt} prompt buckets (expected padding {prompt.waste:.1f} tokens per prompt), "
              f"{n_decode} decode buckets, block size {args.block_size}"]
    text = format_bucket_file(prompt_bs, prompt.boundaries, [(bs, f.boundaries) for bs, f in decode.items()], header)
    if out is not None:
        prepare_output(out, "--output").write_text(text)
    doc = _document(args, fit, prompt, decode, n_prompt, n_decode, out)
    doc["warnings"] = decode_shortfalls(workload, decode, args.block_size)
    from ..space.fit.shapes import decode_worst_blocks

    doc["decode"]["worst_case_blocks"] = {str(bs): decode_worst_blocks(workload, bs, args.block_size)
                                          for bs in decode}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print(doc, args)
    return 0


def decode_shortfalls(workload, decode: dict, block_size: int) -> list[str]:
    """Batch sizes whose decode buckets stop short of the worst case (every sequence of the batch at the
    workload's longest request): a batch past the top bucket runs in a shape that was not warmed up. The
    fit covers it (fit_workload's `cover`), so this is the check that it did."""
    from ..space.fit.shapes import decode_worst_blocks

    out = []
    for bs, f in sorted(decode.items()):
        worst = decode_worst_blocks(workload, bs, block_size)
        if f.boundaries and f.boundaries[-1] < worst:
            out.append(f"decode buckets at batch {bs} reach {f.boundaries[-1]:,} blocks; the worst case is "
                       f"{worst:,} ({bs} sequences of the longest request): a batch past "
                       f"{f.boundaries[-1]:,} blocks runs in a shape that was not warmed up")
    return out


def _reads_bucket_files(profile: str) -> bool:
    from ..buckets.runtime import reads_variable

    return reads_variable(profile, "VLLM_BUCKETING_FROM_FILE")


def linear_stem(profile: str, stem: str) -> str | None:
    """The name `profile` gives the linear range `stem` (through the one name resolver,
    tuner/buckets/names.py), or None when it has no range in the same unit."""
    from ..buckets import names

    other = names.counterpart(f"{stem}_MIN", profile)
    if other is not None and not other.startswith("VLLM_DECODE_SEQ_"):  # fork 1.17's decode is tokens per sequence
        return other.removesuffix("_MIN")
    return stem if f"{stem}_MIN" in names.release_variables(profile) else None


def _curve_rows(curve, linear, stem: str | None, unit: str) -> list[dict]:
    """One row per bucket count: the fitted set, and the linear MIN/STEP/MAX with at most that many."""
    from ..space.fit import closest_linear

    rows = []
    for f in curve:
        lin = closest_linear(linear, f.count) if stem else None
        rows.append({"buckets": f.count, f"waste_{unit}": f.waste, "waste_share": f.waste_share,
                     "boundaries": list(f.boundaries),
                     "closest_linear": None if lin is None else {
                         f"{stem}_MIN": lin.minimum, f"{stem}_STEP": lin.step, f"{stem}_MAX": lin.maximum,
                         "buckets": lin.count, f"waste_{unit}": lin.waste}})
    return rows


def _document(args, fit, prompt, decode, n_prompt, n_decode, out) -> dict:
    reads_files = _reads_bucket_files(args.release)

    largest = max(fit.decode_curves)
    pstem = linear_stem(args.release, "VLLM_PROMPT_SEQ_BUCKET")
    dstem = linear_stem(args.release, "VLLM_DECODE_BLOCK_BUCKET")
    curve = _curve_rows(fit.prompt_curve[: args.max_buckets], fit.prompt_linear, pstem, "tokens")
    dcurve = _curve_rows(fit.decode_curves[largest][: args.max_buckets], fit.decode_linear, dstem, "blocks")
    return {
        "profile": args.release,
        "linear_variables": {"prompt": pstem, "decode": dstem},
        "reads_bucket_file": reads_files,
        "bucket_file": str(out) if out else None,
        "env": {"VLLM_BUCKETING_FROM_FILE": str(out) if out else "<path>"} if reads_files else {},
        "counts": {"prompt": n_prompt, "decode": n_decode},
        "prompt": {"boundaries": list(prompt.boundaries), "waste_tokens": prompt.waste,
                   "mean_prompt_tokens": fit.prompt_mean, "curve": curve},
        "decode": {"per_batch_size": {str(bs): {"boundaries": list(f.boundaries), "waste_blocks": f.waste}
                                      for bs, f in decode.items()},
                   "curve_at_batch_size": largest, "curve": dcurve},
    }


def _triple(lin: dict, stem: str) -> str:
    return "/".join(str(lin[f"{stem}_{p}"]) for p in ("MIN", "STEP", "MAX"))


def _print(doc: dict, args) -> None:
    w = sys.stdout.write
    w(f"Prompt buckets fitted to the workload (block size {args.block_size}; mean prompt "
      f"{doc['prompt']['mean_prompt_tokens']:.0f} tokens)\n")
    w(f"  {'buckets':>7} {'padding/prompt':>15} {'share':>6}   closest linear MIN/STEP/MAX (padding)\n")
    stems = doc["linear_variables"]
    for row in doc["prompt"]["curve"]:
        lin, stem = row["closest_linear"], stems["prompt"]
        lin_text = "-" if lin is None else (
            f"{_triple(lin, stem)} ({lin['buckets']}: {lin['waste_tokens']:.0f})")
        w(f"  {row['buckets']:>7} {row['waste_tokens']:>15.1f} {row['waste_share']:>6.1%}   {lin_text}\n")
    d = doc["decode"]
    w(f"\nDecode context-block buckets at batch size {d['curve_at_batch_size']}\n")
    w(f"  {'buckets':>7} {'padding/step':>15} {'share':>6}   closest linear MIN/STEP/MAX (padding)\n")
    for row in d["curve"]:
        lin, stem = row["closest_linear"], stems["decode"]
        lin_text = "-" if lin is None else (
            f"{_triple(lin, stem)} ({lin['buckets']}: {lin['waste_blocks']:.1f})")
        w(f"  {row['buckets']:>7} {row['waste_blocks']:>15.1f} {row['waste_share']:>6.1%}   {lin_text}\n")
    for phase, stem in stems.items():
        if stem is None:
            w(f"({doc['profile']} has no linear {phase} range in these units: no closest linear settings)\n")
    w("\n" + textwrap.fill(f"Chosen: {doc['counts']['prompt']} prompt and {doc['counts']['decode']} decode "
                          f"buckets; prompt boundaries {doc['prompt']['boundaries']}", 80,
                          subsequent_indent="  ") + "\n")
    shortfalls = doc.get("warnings") or []
    if not shortfalls:
        worst = doc["decode"]["worst_case_blocks"][str(d["curve_at_batch_size"])]
        w(textwrap.fill(f"Decode buckets reach the worst case at every batch size (batch "
                        f"{d['curve_at_batch_size']}: {worst:,} blocks, every sequence at the longest request)",
                        80, subsequent_indent="  ") + "\n")
    for line in shortfalls[-1:]:  # the largest batch; the others (fewer blocks) are in --json
        more = f" (and at {len(shortfalls) - 1} smaller batch sizes)" if len(shortfalls) > 1 else ""
        w(f"warning: {line}{more}\n")
    if not doc["reads_bucket_file"]:
        w(f"({doc['profile']} reads no bucket file: the closest linear settings above are what it can use)\n")
    if doc["bucket_file"]:
        w(f"Wrote {doc['bucket_file']}")
        w(f"; use it with VLLM_BUCKETING_FROM_FILE={doc['bucket_file']}\n" if doc["reads_bucket_file"] else
          f" (note: {doc['profile']} does not read bucket files; use the linear settings above)\n")
