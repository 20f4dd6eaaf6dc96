"""`bucket-tuner export`: the complete env file of a chosen Pareto trial (or `--trial N`), its serve
config and start script beside it, and with --with-cache its recipe cache prepared and verified."""

from __future__ import annotations

from pathlib import Path

import optuna

from ..vocabulary.errors.disk import write_text
from . import DURATION_HELP, UsageError, duration, parse_key_values, prepare_output
from .costargs import add_cost_flags, cost_rate
from .studyargs import load_study, named_study, numbered_trial, study_args


def register(sub) -> None:
    from ..results.export import PICKS

    p = sub.add_parser("export", help="the complete env file of a chosen Pareto trial")
    study_args(p)
    p.add_argument("--pick", choices=PICKS, default="balanced",
                   help="which Pareto trial (default balanced); cost: the least per output token, i.e. the most "
                        "output tokens per card-second (the same at any price)")
    p.add_argument("--max-warmup", type=duration, metavar="S", help=f"warm-up limit ({DURATION_HELP})")
    p.add_argument("--max-latency", type=float, metavar="MS", help="on the study's latency objective")
    p.add_argument("--max-ttft", type=float, metavar="MS", help="p99 TTFT limit")
    p.add_argument("--max-tpot", type=float, metavar="MS", help="p99 TPOT limit")
    p.add_argument("--min-throughput", type=float, metavar="TOK_S")
    p.add_argument("--where", nargs="+", metavar="METRIC=MAX", help="more limits, e.g. median_itl_ms=30")
    p.add_argument("-o", "--output", type=Path, help="write here (default: print); missing folders are created")
    p.add_argument("--trial", type=int, metavar="N", help="export this completed trial instead of a pick")
    p.add_argument("--with-cache", type=Path, metavar="DIR",
                   help="prepare the recipe cache (PT_HPU_RECIPE_CACHE_CONFIG) of the pick in DIR: boot it with "
                        "delete=True, verify with delete=False; the env file then points at DIR")
    p.add_argument("--reuse-cache", action="store_true",
                   help="with --with-cache: keep what DIR holds and only verify how much of it the pick hits")
    p.add_argument("--cache-max-mb", type=int, default=8192, metavar="MB", help="recipe cache size limit")
    _deploy_flags(p)
    add_cost_flags(p)
    p.set_defaults(func=cmd_export)


def _deploy_flags(p) -> None:
    from ..results.orchestrators import SERVE_WINDOW_S
    from ..results.startlimits import MARGIN, PERIOD_S

    g = p.add_argument_group("start-up limits (the env file's comments, <stem>.k8s.yaml and <stem>.sbatch)")
    g.add_argument("--probe-margin", type=float, default=MARGIN, metavar="FRACTION",
                   help=f"over the upper end of the pick's start-up band (default {MARGIN:g}: 25%%)")
    g.add_argument("--probe-period", type=duration, default=PERIOD_S, metavar="S",
                   help=f"the startupProbe's periodSeconds, whole seconds ({DURATION_HELP}; default {PERIOD_S})")
    g.add_argument("--serve-window", type=duration, default=SERVE_WINDOW_S, metavar="S",
                   help=f"the Slurm job's serving time beyond its start-up ({DURATION_HELP}; default 24h)")


def _deploy_options(args, study):
    from ..results.orchestrators import DeployOptions

    if not (args.probe_margin >= 0 and args.probe_margin < 10):
        raise UsageError(f"--probe-margin {args.probe_margin:g}: give a fraction >= 0, e.g. 0.25 for 25%")
    if not (args.probe_period >= 1 and args.probe_period == int(args.probe_period)):
        raise UsageError(f"--probe-period {args.probe_period:g}: whole seconds, at least 1 (Kubernetes' periodSeconds)")
    if not args.serve_window > 0:
        raise UsageError(f"--serve-window {args.serve_window:g}: a positive duration, e.g. 8h")
    return DeployOptions(args.probe_margin, int(args.probe_period), args.serve_window, cost_rate(args, study))


def _release(study: optuna.Study) -> str | None:
    return (study.user_attrs.get("space") or {}).get("release")


def cmd_export(args) -> int:
    from ..results.export import Filters, env_file_text, export_bucket_file, write_deploy_files
    from ..results.orchestrators import deploy_comments

    study, folder = load_study(named_study(args), args.results, args.storage)
    args.cache_logs = folder / "cache-logs"
    limits = parse_key_values(args.where, "--where")
    if args.max_ttft is not None:
        limits["p99_ttft_ms"] = args.max_ttft
    if args.max_tpot is not None:
        limits["p99_tpot_ms"] = args.max_tpot
    filters = Filters(max_warmup_s=args.max_warmup, max_latency_ms=args.max_latency,
                      min_throughput=args.min_throughput, metric_limits=limits)
    trial = numbered_trial(study, args.trial) if args.trial is not None else _pick(study, args.pick, filters)
    extra, comments = {}, []
    if args.with_cache is not None:
        extra, comments, verified = _prepare_cache(study, trial, args)
        if not verified:
            raise UsageError(f"the recipe cache in {args.with_cache} does not fit trial {trial.number}: "
                             "see the lines above; no env file written")
    elif args.reuse_cache:
        raise UsageError("--reuse-cache needs --with-cache DIR")
    pick = args.pick if args.trial is None else "--trial"
    bucket_env, bucket_notes = export_bucket_file(study, trial, args.output)  # a fitted set's file, beside it
    opts = _deploy_options(args, study)
    text = env_file_text(study, trial, pick, _release(study), extra={**bucket_env, **extra},
                         comments=comments + bucket_notes + deploy_comments(study, trial, opts))
    if args.output:
        write_text(prepare_output(args.output, "--output"), text, elsewhere="-o elsewhere, or no -o to print it")
        print(f"trial {trial.number} ({pick}) written to {args.output}")
        deploy, why_not = write_deploy_files(study, trial, pick, _release(study), args.output,
                                             {**bucket_env, **extra}, opts)
        if deploy:
            print("beside it: " + ", ".join(str(p) for p in deploy) + " (vllm serve --config, a start script, "
                  "a Kubernetes Deployment and a Slurm job with start-up limits)")
        else:
            print(f"no serve config or script beside it: {why_not}")
    else:
        print(text, end="")
    return 0


def _pick(study, pick: str, filters):
    """pick_trial; with nothing feasible at all, the error also names the closest trial and what admits it."""
    from ..report.facts import closest_admission
    from ..results.export import ExportError, pick_trial
    from ..study.pareto import measured_front

    try:
        return pick_trial(study, pick, filters)
    except ExportError as exc:
        admit = None if measured_front(study) else closest_admission(study)
        if admit is None:
            raise
        raise ExportError(f"{exc}; {admit.sentence()} (in `tune`)") from None


def _prepare_cache(study, trial, args) -> tuple[dict[str, str], list[str], bool]:
    """Boot the pick twice on the study's backend (see tuner/recipecache/prepare.py); print what was measured."""
    import sys

    from ..recipecache.manifest import VARIABLE, RecipeCacheError
    from ..recipecache.prepare import CacheWarmError, backend_from_study, dtype_of, prepare
    from ..results.export import export_env
    from ..vocabulary.record import TrialRecord

    release = _release(study)
    described = study.user_attrs.get("backend") or {}
    rec = TrialRecord.from_frozen(trial)
    argv, server = rec.argv, rec.server
    try:
        backend = backend_from_study(described, argv)
        env, _ = export_env(trial, release, study)
        report = prepare(backend, server, env, args.with_cache, release=release or "unknown",
                         dtype=dtype_of(server, argv), device=described.get("device") or "unknown",
                         logs=args.cache_logs, reuse=args.reuse_cache, max_mb=args.cache_max_mb,
                         own_cold=_own_cold(study, trial))
    except (CacheWarmError, RecipeCacheError) as exc:
        raise UsageError(str(exc)) from None
    for line in report.lines():
        print(f"recipe cache: {line}", file=sys.stderr if not args.output else sys.stdout)
    m = report.manifest
    comments = []
    if m is not None:
        comments.append(f"recipe cache: {report.folder} ({m.recipes} recipes; manifest.json: {m.release}, "
                        f"{m.device}, {m.dtype}, TP {m.tp}, {m.kv_blocks} KV blocks, {m.software_version})")
        if m.cold_warmup_s and m.cached_warmup_s is not None:
            comments.append(f"recipe cache: warmup {m.cached_warmup_s:.0f} s cached vs {m.cold_warmup_s:.0f} s cold "
                            f"({m.cold_warmup_source}); copy the folder to local disk before start (no NFS)")
    return {VARIABLE: report.value}, comments, report.verified


def _own_cold(study, trial):
    """The trial's own cold warmup in its study (measured, its cold re-boot, else predicted)."""
    from ..recipecache.prepare import ColdFigure
    from ..recipecache.warmupmode import study_figures

    cold = (study_figures(study).get(trial.number) or {}).get("cold")
    if cold is None or cold.seconds is None:
        return None
    how = "measured" if cold.measured else "predicted by the model"
    return ColdFigure(cold.seconds, f"trial {trial.number}'s own cold warmup in the study, {how}")
