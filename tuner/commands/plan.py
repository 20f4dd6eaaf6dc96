"""`bucket-tuner plan`: the whole space answered by the performance model before the first boot
(tuner/plan/): what is infeasible and why, the predicted front with its bands, and the few
configurations worth booting, written to a file that `tune --from-plan` boots first."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..vocabulary.textfile import read_text
from . import (
    UsageError,
    parse_slos,
    prepare_output,
    refuse_a_length_past_the_model,
    refuse_a_model_the_release_lacks,
    refuse_images_without_vision,
)
from .bench import add_load_flags, add_workload_flags, check_load_flags, parse_percentiles
from .tune import _check_latency_stat, _workload, add_model_flags, add_objective_flags, model_shape_of, read_baseline

PROGRESS_FROM = 2000  # points: a progress bar on stderr for plans at least this long


def register(sub) -> None:
    from ..plan.build import DEFAULT_PICKS
    from ..plan.points import MAX_POINTS

    p = sub.add_parser(
        "plan",
        help="predict every point of a space before booting anything; pick the few worth booting",
        description="Runs every configuration of a search space (a dense quasi-random sample of a continuous "
        "one) through the performance model: the buckets, KV blocks and HPU-graph memory it would build, its "
        "warm-up cold and with a recipe cache, its throughput and latency at the workload, with bands from the "
        "model's uncertainty. Says how many configurations are confidently infeasible and why, shows the "
        "predicted Pareto front, and picks the few worth booting (largest expected hypervolume gain); "
        "`tune --from-plan FILE` boots those first. Nothing is booted.",
    )
    p.add_argument("--space", type=Path, required=True, help="search-space YAML (see search_spaces/)")
    p.add_argument("--release", help="release profile (default: the space's)")
    p.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct",
                   help="the served model (its tokenizer, when on disk, reads text datasets)")
    g = p.add_argument_group("what is predicted")
    add_model_flags(g)
    g.add_argument("--hf-overrides", metavar="JSON",
                   help="the --hf-overrides the server will be started with: the model is read with them, as vLLM "
                        "reads it (e.g. a context extended with YaRN)")
    add_workload_flags(p)
    add_load_flags(p)
    add_objective_flags(p)
    g = p.add_argument_group("the plan")
    g.add_argument("--calibrate-from", nargs="+", type=Path, metavar="LOG",
                   help="server logs of past boots on this node: their figures calibrate the model (as tune's)")
    g.add_argument("--baseline", type=Path, metavar="FILE",
                   help="what you run today: an env file, a `vllm serve` script or a server log; the plan shows "
                        "the predicted gain against it")
    g.add_argument("--points", type=int, default=MAX_POINTS,
                   help=f"most configurations predicted (default {MAX_POINTS:,}): a larger discrete space, or one "
                        "with a continuous parameter, is sampled quasi-randomly")
    g.add_argument("--picks", type=int, default=DEFAULT_PICKS, help=f"configurations to boot first (default "
                                                                      f"{DEFAULT_PICKS})")
    g.add_argument("--plan-seed", type=int, default=0, help="seed of the sample and of the picks' draws")
    g.add_argument("--results", type=Path, default=Path("results"), help="output root (default results/)")
    g.add_argument("--out", type=Path, metavar="FILE",
                   help="the plan file (default results/<space name>/plan.json)")
    g.add_argument("--json", action="store_true", help="print the plan file's JSON instead of text")
    p.set_defaults(func=cmd_plan, num_prompts=100, random_input_len=512, random_output_len=128,
                   max_concurrency=16, num_warmups=None, metric_percentiles="50,90,99")


def cmd_plan(args) -> int:
    from rich.console import Console

    from ..perfmodel.calibration import Calibration
    from ..plan.build import make_plan
    from ..plan.document import to_document, write
    from ..plan.evaluate import Evaluator
    from ..plan.render import render
    from ..space.schema import SearchSpace

    console = Console(stderr=True) if args.json else Console()
    err = Console(stderr=True)
    space = SearchSpace.load(args.space)
    target = build_target(args, space)
    for note in space.check_release(target.release):
        err.print(f"[yellow]space:[/] {note}")
    if args.points < 1:
        raise UsageError(f"--points must be at least 1, got {args.points}")
    if args.picks < 0:
        raise UsageError(f"--picks must be 0 or more, got {args.picks}")
    limits = limits_from_args(args, target)
    samples = _log_samples(args, target, space, err)
    calibration = Calibration.for_device(samples, target.device_model)
    baseline = (read_baseline(args.baseline, space, target.release, release_given=args.release is not None)
                if args.baseline else None)
    out = prepare_output(args.out or args.results / space.name / "plan.json", "--out")
    evaluator = Evaluator(target, limits, calibration)
    with _progress(err, enabled=not args.json) as progress:
        plan = make_plan(space, evaluator, args.points, args.picks, baseline, args.plan_seed, progress)
    doc = to_document(plan, space_path=str(args.space), calibrated_from=[str(p) for p in args.calibrate_from or []])
    write(doc, out)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    hint = f"bucket-tuner tune --space {args.space} --from-plan {out}" + (
        f" --baseline {args.baseline}" if args.baseline else "")
    render(plan, console, str(out), hint)
    return 0


def build_target(args, space):
    """The plan's target: release, device and model, the workload and its arrivals."""
    from ..models.overrides import canonical
    from ..perfmodel.hardware import DEVICES, model_for
    from ..perfmodel.target import DeviceModel, LoadShape, ModelTarget

    release = args.release or space.release
    if release is None:
        raise UsageError(f"{args.space}: the space names no release, and a plan needs the performance model of "
                         "one: give --release (e.g. fork-1.21.2, gaudi-main)")
    from ..buckets import BucketConfigError, get_profile

    try:
        get_profile(release)
    except BucketConfigError as exc:
        raise UsageError(f"--release: {exc}") from None
    shape = model_shape_of(args)
    flag = '--model-shape' if args.model_shape else '--model'
    try:
        overrides = canonical(args.hf_overrides)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        model_for(shape, overrides)  # an unknown model now, with its message
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    refuse_images_without_vision(space, shape, flag, overrides)
    refuse_a_length_past_the_model(space, shape, flag, overrides)
    refuse_a_model_the_release_lacks(release, shape, flag, overrides)
    if args.device not in DEVICES:
        from ..perfmodel.hardware import device_for

        device_for(args.device)  # a generic stand-in, as tune's prediction uses
    check_load_flags(args)
    parse_percentiles(args.metric_percentiles)
    return ModelTarget(release, DeviceModel(device=args.device, model=shape, dtype=args.dtype, hf_overrides=overrides),
                       workload=_workload(args),
                       load=LoadShape(request_rate=args.request_rate, burstiness=args.burstiness,
                                      max_concurrency=args.max_concurrency))


def limits_from_args(args, target):
    from ..plan.evaluate import Limits

    if args.warmup_budget is not None and not args.warmup_budget > 0:
        raise UsageError(f"--warmup-budget must be a positive number of seconds, got {args.warmup_budget}")
    _check_latency_stat(args.latency_stat, parse_percentiles(args.metric_percentiles))
    return Limits(latency_key=f"{args.latency_stat}_{args.latency_metric}_ms", warmup_mode=args.warmup,
                  warmup_budget_s=args.warmup_budget,
                  slos_ms=parse_slos(args, parse_percentiles(args.metric_percentiles)),
                  allow_recompiles=args.allow_recompiles, allow_failed_requests=args.allow_failed_requests,
                  percentiles=parse_percentiles(args.metric_percentiles))


def _log_samples(args, target, space, console) -> list[dict]:
    from ..study.logcalibration import LogCalibrationError, log_sample

    samples = []
    for path in args.calibrate_from or []:
        lines = read_text(path, "--calibrate-from").lines()
        try:
            got = log_sample(lines, target, space.server, source=str(path))
        except LogCalibrationError as exc:
            raise UsageError(str(exc)) from None
        for note in got.notes:
            console.print(f"[yellow]calibrate-from {path}:[/] {note}")
        samples.append(got.sample)
    return samples


class _progress:
    """A rich progress bar on stderr for long plans (none for short ones, --json or a pipe)."""

    def __init__(self, console, enabled: bool):
        self.console, self.enabled, self.bar, self.task = console, enabled, None, None

    def __enter__(self):
        return self.update

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total < PROGRESS_FROM:
            return
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("predicting"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=self.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("plan", total=total)
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()


__all__ = ["build_target", "cmd_plan", "limits_from_args", "read_baseline", "register"]
