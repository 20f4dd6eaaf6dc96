"""How `report`, `export` and `compare` name and open a recorded study: the shared flags, the
read-only opening (with a suggestion when the name is wrong) and a trial chosen by number."""

from __future__ import annotations

from pathlib import Path

import optuna

from . import UsageError


def study_args(p) -> None:
    p.add_argument("study", nargs="?", help="study name (results/<study>/study.db), or a path to a study folder or "
                                            "its study.db")
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

    path = Path(name).expanduser()
    given_db = storage is None and path.suffix in _DB_SUFFIXES and not path.is_dir()
    folder = path.parent if given_db else path if path.is_dir() else results / name
    if storage is None:
        db = path if given_db else folder / "study.db"
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
        if len(names) == 1 and (given_db or path.is_dir()):  # a study file copied or a folder renamed: its one study
            return optuna.load_study(study_name=names[0], storage=opened), folder
        raise UsageError(f"no study named {study_name!r} in that storage; it has: "
                         f"{', '.join(names) or 'none'}") from None


_DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def _known_studies(name: str, results: Path) -> str:
    """'; did you mean demo? (studies in results: demo, ok)' from the study folders under `results`."""
    import difflib

    found = sorted(p.parent.name for p in results.glob("*/study.db")) if results.is_dir() else []
    if not found:
        return f" ({results} holds no study)"
    close = difflib.get_close_matches(Path(name).name, found, n=1)
    return (f"; did you mean {close[0]}?" if close else "") + f" (studies in {results}: {', '.join(found)})"


def numbered_trial(study, number: int):
    """`--trial N` of export and compare --release: a completed trial of the study, else a usage error."""
    match = [t for t in study.trials if t.number == number]
    if not match:
        raise UsageError(f"--trial {number}: study {study.study_name!r} has trials 0..{len(study.trials) - 1}")
    if match[0].state != optuna.trial.TrialState.COMPLETE or not match[0].values:
        raise UsageError(f"--trial {number}: trial {number} did not complete ({match[0].state.name.lower()})")
    return match[0]
