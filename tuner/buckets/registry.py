"""The table of release profiles, by name (and alias)."""

from __future__ import annotations

import difflib

from .base import BucketConfigError, ReleaseProfile


def _all_profiles() -> list[ReleaseProfile]:
    from . import extension_2d, extension_3d, legacy, vllm_gaudi

    return [*legacy.PROFILES, *extension_2d.PROFILES, *extension_3d.PROFILES, *vllm_gaudi.PROFILES]


_PROFILES: dict[str, ReleaseProfile] | None = None


def profiles() -> dict[str, ReleaseProfile]:
    """Canonical name -> profile, oldest release first."""
    global _PROFILES
    if _PROFILES is None:
        _PROFILES = {p.name: p for p in _all_profiles()}
    return _PROFILES


def get_profile(name: str) -> ReleaseProfile:
    table = profiles()
    if name in table:
        return table[name]
    for p in table.values():
        if name in p.aliases:
            return p
    names = list(table) + [a for p in table.values() for a in p.aliases]
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise BucketConfigError(f"unknown release profile {name!r}; {hint}known profiles: {', '.join(names)}", "profile")
