"""Whether a vllm-fork release serves a model at all: the architectures its model registry holds
(fork_architectures.json, written by tools/fork_architectures.py from each release's registry). The plugin
releases take their upstream vLLM's registry, which is not known here: no answer for them."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).resolve().parent / "fork_architectures.json"


@lru_cache(maxsize=1)
def _table() -> dict[str, frozenset[str]]:
    data = json.loads(TABLE.read_text())
    return {release: frozenset(archs) for release, archs in data["architectures"].items()}


def release_lacks(release: str, architecture: str) -> bool:
    """True when `release`'s model registry is known and has no `architecture` (the server refuses the model)."""
    known = _table().get(release)
    return known is not None and bool(architecture) and architecture != "unknown" and architecture not in known


def releases_serving(architecture: str) -> list[str]:
    """The fork releases whose registry has `architecture`, oldest first."""
    return [release for release, archs in _table().items() if architecture in archs]


def unsupported_message(release: str, architecture: str) -> str:
    """vLLM's refusal of an architecture its registry lacks (model_executor/models/registry.py)."""
    return (f"ValueError: Model architectures ['{architecture}'] are not supported for now. Supported "
            f"architectures: {sorted(_table().get(release, ()))}")
