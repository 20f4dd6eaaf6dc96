"""Search spaces by name or by path: `--space demo` finds search_spaces/demo.yaml; an argument that looks
like a path (a folder separator, a .yaml/.yml suffix, a leading ~) is only ever that path, never a name,
so `search_spaces/demo.yml` is refused (naming demo.yaml) instead of quietly running the demo space.
A name or path that matches nothing is refused with what it most likely meant."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from .schema import SpaceError

SHIPPED = Path(__file__).resolve().parents[2] / "search_spaces"  # the checkout's spaces (not in a wheel)
YAML_SUFFIXES = (".yaml", ".yml")


def _folders() -> list[Path]:
    return [f for f in dict.fromkeys([Path("search_spaces"), SHIPPED]) if f.is_dir()]


def known_spaces() -> dict[str, Path]:
    """Name -> file of every space in ./search_spaces and the shipped ones (local first)."""
    out: dict[str, Path] = {}
    for folder in _folders():
        for path in sorted(folder.glob("*.yaml")):
            out.setdefault(path.stem, path)
    return out


def looks_like_path(given: str) -> bool:
    """A folder separator, a YAML suffix or a leading ~: the user wrote a file, not a space's name."""
    seps = {"/", os.sep, os.altsep} - {None}
    return any(s in given for s in seps) or given.lower().endswith(YAML_SUFFIXES) or given.startswith("~")


def find_space(given: str | Path) -> Path:
    """The file `given` names: a path (looks_like_path) as it is, else a space name in ./search_spaces
    or the shipped folder (or a file of exactly that name here). Raises SpaceError naming the culprit and
    what it most likely meant when nothing matches."""
    text = str(given)
    if looks_like_path(text):
        return _as_path(text)
    here = Path(text)
    if here.is_file() and _exact_name(here):
        return here
    for folder in _folders():
        for suffix in YAML_SUFFIXES:
            candidate = folder / f"{text}{suffix}"
            if candidate.is_file() and _exact_name(candidate):
                return candidate
    if here.exists():  # a folder (or a name in another case) here, and no space of that name
        return _as_path(text)
    known = known_spaces()
    close = difflib.get_close_matches(text, list(known), n=1)
    hint = f"; did you mean {known[close[0]]}?" if close else ""
    raise SpaceError(f"{text}: search-space file not found{hint}{_listed(known)}")


def _as_path(text: str) -> Path:
    path = Path(text)
    if path.is_file() and _exact_name(path):
        return path
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.suffix in YAML_SUFFIXES) if _readable(path) else []
        shown = f" (its spaces: {', '.join(inside[:6])}{', ...' if len(inside) > 6 else ''})" if inside else ""
        raise SpaceError(f"{text}: is a folder, not a search-space file{shown}")
    if text.startswith("~"):
        expanded = Path(text).expanduser()
        where = f" ({expanded} {'exists' if expanded.exists() else 'does not exist either'})" if expanded != path \
            else ""
        raise SpaceError(f"{text}: the ~ was not expanded (a shell leaves it as is inside quotes and after "
                         f"--space=); write the path without it{where}")
    raise SpaceError(f"{text}: search-space file not found{_path_hint(path)}")


def _path_hint(path: Path) -> str:
    """What a missing path most likely meant: the same name in another case, the other YAML suffix, the
    space of that name in the space folders, else the closest known space."""
    folder = path.parent
    entries = sorted(os.listdir(folder)) if _readable(folder) else []
    same_case = [e for e in entries if e.lower() == path.name.lower() and e != path.name]
    if same_case:
        return f"; {folder / same_case[0]} differs only in case (file names are case-sensitive)"
    stem = path.name[: -len(path.suffix)] if path.suffix.lower() in YAML_SUFFIXES else path.name
    others = [e for e in entries if e.lower() in {stem.lower() + s for s in YAML_SUFFIXES}]
    if others:
        return f"; did you mean {folder / others[0]}?"
    known = known_spaces()
    if stem in known:
        return f"; did you mean {known[stem]} (or --space {stem})?"
    close = difflib.get_close_matches(stem, list(known), n=1)
    return (f"; did you mean {known[close[0]]}?" if close else "") + _listed(known)


def _exact_name(path: Path) -> bool:
    """The file's name as written, case included (a case-insensitive disk finds Demo.yaml for demo.yaml;
    the same command must fail on Linux, so it fails here too)."""
    folder = path.parent
    return not _readable(folder) or path.name in os.listdir(folder)


def _readable(folder: Path) -> bool:
    try:
        return folder.is_dir() and os.access(folder, os.R_OK | os.X_OK)
    except OSError:
        return False


def _listed(known: dict[str, Path]) -> str:
    return f" (spaces: {', '.join(known)})" if known else ""
