"""`bucket-tuner report`: a study's trials.csv, pareto.csv and report.html, and its terminal tables."""

from __future__ import annotations

from pathlib import Path

from ..vocabulary.errors.disk import DiskError
from . import DURATION_HELP, UsageError, check_folder, duration
from .costargs import add_cost_flags, cost_rate
from .studyargs import load_study, named_study, study_args


def register(sub) -> None:
    p = sub.add_parser("report", help="trials.csv, pareto.csv, report.html and a terminal table of a study")
    study_args(p)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write the report files here (default: the study's folder); missing folders are created")
    add_cost_flags(p)
    g = p.add_argument_group("a startup probe to check against the pick's start")
    g.add_argument("--startup-probe-seconds", type=duration, metavar="S",
                   help="what your startup probe allows (initialDelaySeconds + failureThreshold x periodSeconds); "
                        f"a warning when it would kill the pick during warm-up ({DURATION_HELP})")
    g.add_argument("--manifest", type=Path, metavar="FILE",
                   help="a Kubernetes manifest (Deployment, Pod, ...): the startupProbe of its vLLM container is "
                        "checked the same way (without one, its livenessProbe)")
    p.set_defaults(func=cmd_report)


def _check(args, study):
    """The price and the stated probe of the report's deploy section (report.DeployCheck)."""
    from ..report import DeployCheck
    from ..results.startlimits import ManifestError, manifest_probe

    rate = cost_rate(args)
    if args.startup_probe_seconds is not None and args.manifest is not None:
        raise UsageError("give --startup-probe-seconds or --manifest, not both")
    if args.startup_probe_seconds is not None:
        if not args.startup_probe_seconds > 0:
            raise UsageError(f"--startup-probe-seconds {args.startup_probe_seconds:g}: a positive duration")
        return DeployCheck(rate, args.startup_probe_seconds, "--startup-probe-seconds")
    if args.manifest is not None:
        try:
            seconds, said = manifest_probe(args.manifest)
        except ManifestError as exc:
            raise UsageError(str(exc)) from None
        if seconds is None:
            print(f"--manifest {args.manifest}: {said}: no probe kills the server while it warms up")
        return DeployCheck(rate, seconds, f"{args.manifest}: {said}")
    return DeployCheck(rate)


def cmd_report(args) -> int:
    from .. import report

    study, folder = load_study(named_study(args), args.results, args.storage)
    check = _check(args, study)  # bad flags are refused before anything is printed
    report.print_pareto(study)  # first: the tables need no disk
    report.print_costs(study, check=check)
    out = args.out or folder
    check_folder(out, "--out")
    try:
        paths = report.write_report(study, out, elsewhere="--out DIR", check=check)
    except DiskError as exc:  # a full or read-only disk: say what was written, then the one line
        for label, path in exc.written.items():
            print(f"{label}: {path}")
        raise DiskError(f"{exc}; the tables above are complete and the study is unchanged", exc.path,
                        exc.errno) from None
    for label, path in paths.items():
        print(f"{label}: {path}")
    return 0
