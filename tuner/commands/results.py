"""`bucket-tuner report | export | compare`: what a study found, as files and tables."""

from __future__ import annotations

from pathlib import Path

import optuna

from ..errors.disk import DiskError, write_text
from . import DURATION_HELP, UsageError, check_folder, duration, parse_key_values, prepare_output
from .compare import add_release_flags, check_release_args, cmd_release_diff, refuse_release_flags


def register(sub) -> None:
    p = sub.add_parser("report", help="trials.csv, pareto.csv, report.html and a terminal table of a study")
    _study_args(p)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write the report files here (default: the study's folder); missing folders are created")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="the complete env file of a chosen Pareto trial")
    _study_args(p)
    p.add_argument("--pick", choices=("throughput", "latency", "balanced", "warmup"), default="balanced")
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
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("compare", help="two or more studies (or releases) side by side; the first is the baseline")
    p.add_argument("studies", nargs="*", metavar="STUDY", help="study names or folders, baseline first")
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--storage", help="one Optuna storage URL holding all the studies")
    p.add_argument("--html", type=Path, help="also write the comparison page (a self-contained HTML file) here; "
                   "missing folders are created")
    add_release_flags(p)  # compare --release BASE OTHER: the bucket sets two releases build, offline
    p.set_defaults(func=cmd_compare)


def _study_args(p) -> None:
    p.add_argument("study", nargs="?", help="study name (results/<study>/study.db) or a path to a study folder")
    # `tune` names the study with --study; the same spelling works here, not only the positional
    p.add_argument("--study", dest="study_option", metavar="STUDY", help="same as the positional STUDY")
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--storage", help="Optuna storage URL (default: the study's sqlite file)")


def named_study(args) -> str:
    """The study named by the positional or by --study (both given: they must agree)."""
    given = [n for n in (args.study, getattr(args, "study_option", None)) if n]
    if not given:
        raise UsageError("which study? give its name (as used with `tune --study`) or its folder")
    if len(set(given)) > 1:
        raise UsageError(f"two different studies given: {given[0]!r} and --study {given[1]!r}")
    return given[0]


def load_study(name: str, results: Path, storage: str | None) -> tuple[optuna.Study, Path]:
    """The study, opened read-only: a reader never creates or changes anything in what it reads."""
    from ..study.storage import open_storage_readonly

    folder = Path(name) if Path(name).is_dir() else results / name
    if storage is None:
        db = folder / "study.db"
        if not db.exists():
            raise UsageError(f"no study at {db}; give the study name used with `tune`, or --storage URL"
                             + _known_studies(name, results))
        storage = f"sqlite:///{db.as_posix()}"
    study_name = folder.name
    opened = open_storage_readonly(storage)
    try:
        return optuna.load_study(study_name=study_name, storage=opened), folder
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(opened)]
        raise UsageError(f"no study named {study_name!r} in that storage; it has: "
                         f"{', '.join(names) or 'none'}") from None


def _known_studies(name: str, results: Path) -> str:
    """'; did you mean demo? (studies in results: demo, ok)' from the study folders under `results`."""
    import difflib

    found = sorted(p.parent.name for p in results.glob("*/study.db")) if results.is_dir() else []
    if not found:
        return f" ({results} holds no study)"
    close = difflib.get_close_matches(Path(name).name, found, n=1)
    return (f"; did you mean {close[0]}?" if close else "") + f" (studies in {results}: {', '.join(found)})"


def _release(study: optuna.Study) -> str | None:
    return (study.user_attrs.get("space") or {}).get("release")


def cmd_report(args) -> int:
    from .. import report

    study, folder = load_study(named_study(args), args.results, args.storage)
    report.print_pareto(study)  # first: the tables need no disk
    out = args.out or folder
    check_folder(out, "--out")
    try:
        paths = report.write_report(study, out, elsewhere="--out DIR")
    except DiskError as exc:  # a full or read-only disk: say what was written, then the one line
        for label, path in exc.written.items():
            print(f"{label}: {path}")
        raise DiskError(f"{exc}; the tables above are complete and the study is unchanged", exc.path,
                        exc.errno) from None
    for label, path in paths.items():
        print(f"{label}: {path}")
    return 0


def cmd_export(args) -> int:
    from ..results.export import Filters, env_file_text, export_bucket_file, write_deploy_files

    study, folder = load_study(named_study(args), args.results, args.storage)
    args.cache_logs = folder / "cache-logs"
    limits = parse_key_values(args.where, "--where")
    if args.max_ttft is not None:
        limits["p99_ttft_ms"] = args.max_ttft
    if args.max_tpot is not None:
        limits["p99_tpot_ms"] = args.max_tpot
    filters = Filters(max_warmup_s=args.max_warmup, max_latency_ms=args.max_latency,
                      min_throughput=args.min_throughput, metric_limits=limits)
    trial = _numbered_trial(study, args.trial) if args.trial is not None else _pick(study, args.pick, filters)
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
    text = env_file_text(study, trial, pick, _release(study), extra={**bucket_env, **extra},
                         comments=comments + bucket_notes)
    if args.output:
        write_text(prepare_output(args.output, "--output"), text, elsewhere="-o elsewhere, or no -o to print it")
        print(f"trial {trial.number} ({pick}) written to {args.output}")
        deploy, why_not = write_deploy_files(study, trial, pick, _release(study), args.output,
                                             {**bucket_env, **extra})
        if deploy:
            print("beside it: " + ", ".join(str(p) for p in deploy) + " (vllm serve --config, and a start script)")
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


def _numbered_trial(study, number: int):
    import optuna

    match = [t for t in study.trials if t.number == number]
    if not match:
        raise UsageError(f"--trial {number}: study {study.study_name!r} has trials 0..{len(study.trials) - 1}")
    if match[0].state != optuna.trial.TrialState.COMPLETE or not match[0].values:
        raise UsageError(f"--trial {number}: trial {number} did not complete ({match[0].state.name.lower()})")
    return match[0]


def _prepare_cache(study, trial, args) -> tuple[dict[str, str], list[str], bool]:
    """Boot the pick twice on the study's backend (see tuner/recipecache/prepare.py); print what was measured."""
    import sys

    from ..recipecache.manifest import VARIABLE, RecipeCacheError
    from ..recipecache.prepare import CacheWarmError, backend_from_study, dtype_of, prepare
    from ..results.export import export_env

    release = _release(study)
    described = study.user_attrs.get("backend") or {}
    argv = trial.user_attrs.get("argv") or []
    server = trial.user_attrs.get("server", {})
    try:
        backend = backend_from_study(described, argv)
        env, _ = export_env(trial, release)
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


def cmd_compare(args) -> int:
    from ..report.compare_page import write_compare_html
    from ..results.compare import compare_studies, print_comparison

    if args.releases:
        check_release_args(args)
        study = trial = None
        if args.studies:  # the settings of this study's pick (or --trial N)
            from ..results.export import ExportError, Filters, pick_trial

            study = load_study(args.studies[0], args.results, args.storage)[0]
            try:
                trial = (_numbered_trial(study, args.trial) if args.trial is not None
                         else pick_trial(study, "balanced", Filters()))
            except ExportError as exc:
                raise UsageError(str(exc)) from None
        return cmd_release_diff(args, study, trial)
    refuse_release_flags(args)
    if len(args.studies) < 2:
        raise UsageError(f"compare needs at least two studies (or --release BASE OTHER), got "
                         f"{len(args.studies)}{': ' + args.studies[0] if args.studies else ''}")
    studies = [load_study(name, args.results, args.storage)[0] for name in args.studies]
    try:
        cmp = compare_studies(*studies)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print_comparison(cmp)
    if args.html:
        write_compare_html(cmp, studies, prepare_output(args.html, "--html"))
        print(f"comparison page: {args.html}")
    return 0
