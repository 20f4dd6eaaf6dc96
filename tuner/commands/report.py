"""`bucket-tuner report`: a study's trials.csv, pareto.csv and report.html, and its terminal tables."""

from __future__ import annotations

from pathlib import Path

from ..vocabulary.errors.disk import DiskError
from . import check_folder
from .studyargs import load_study, named_study, study_args


def register(sub) -> None:
    p = sub.add_parser("report", help="trials.csv, pareto.csv, report.html and a terminal table of a study")
    study_args(p)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write the report files here (default: the study's folder); missing folders are created")
    p.set_defaults(func=cmd_report)


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
