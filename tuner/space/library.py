"""Search spaces by name: `--space demo` finds search_spaces/demo.yaml; a name that matches nothing is
refused with the closest shipped or local space."""

from __future__ import annotations

import difflib
from pathlib import Path

from .schema import SpaceError

SHIPPED = Path(__file__).resolve().parents[2] / "search_spaces"  # the checkout's spaces (not in a wheel)


def _folders() -> list[Path]:
    return [f for f in dict.fromkeys([Path("search_spaces"), SHIPPED]) if f.is_dir()]


def known_spaces() -> dict[str, Path]:
    """Name -> file of every space in ./search_spaces and the shipped ones (local first)."""
    out: dict[str, Path] = {}
    for folder in _folders():
        for path in sorted(folder.glob("*.yaml")):
            out.setdefault(path.stem, path)
    return out


def find_space(given: str | Path) -> Path:
    """The file `given` names: a path as is, else a space name (with or without .yaml) in ./search_spaces
    or the shipped folder. Raises SpaceError naming the closest known space when nothing matches."""
    path = Path(given)
    if path.exists():
        return path
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    if len(path.parts) == 1 or path.parent.name == "search_spaces":
        for folder in _folders():
            for candidate in (folder / f"{name}.yaml", folder / f"{name}.yml"):
                if candidate.is_file():
                    return candidate
    known = known_spaces()
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"; did you mean {known[close[0]]}?" if close else ""
    listed = f" (spaces: {', '.join(known)})" if known else ""
    raise SpaceError(f"{given}: search-space file not found{hint}{listed}")
