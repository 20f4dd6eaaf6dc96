"""PT_HPU_RECIPE_CACHE_CONFIG: a real folder of compiled-graph recipes, one small file per shape.

Format `<path>,<delete:True/False>,<max_MB>` (managing_warm-up.md): delete=True wipes and rewrites the
cache, False reuses it. A recipe is keyed by its shapes *and* the KV-cache size (tuner.perfmodel.costs.recipe_key),
so a start with the same shapes hits (compile x0.35 BF16, x0.067 FP8) and a changed configuration
misses: vllm-fork issue #1054 saw recompiles when only the block count changed. The files hold a few
bytes; the size budget counts the ~2 MiB a real recipe takes (GUESS).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..recipecache.manifest import RecipeCacheError, parse_value

RECIPE_MB = 2.0
SUFFIX = ".recipe"


@dataclass
class RecipeCache:
    path: Path
    delete: bool
    max_mb: float
    present: set = field(default_factory=set)  # keys on disk when opened, plus what this run stored

    @classmethod
    def from_env(cls, value: str | None) -> RecipeCache | None:
        """The cache a value configures; None when unset or malformed (then treated as no cache)."""
        if not value:
            return None
        try:
            cfg = parse_value(value)
        except RecipeCacheError:
            return None
        return cls(Path(cfg.path), cfg.delete, float(cfg.max_mb))

    def open(self) -> frozenset[str]:
        """Prepare the folder as the bridge does at start; return the recipe keys present."""
        if self.delete and self.path.exists():
            for f in self.path.glob(f"*{SUFFIX}"):
                f.unlink()
        self.path.mkdir(parents=True, exist_ok=True)
        self.present = set(self.keys())
        return frozenset(self.present)

    def keys(self) -> frozenset[str]:
        if not self.path.is_dir():
            return frozenset()
        return frozenset(f.name[: -len(SUFFIX)] for f in self.path.glob(f"*{SUFFIX}"))

    def store(self, key: str, description: str) -> bool:
        """Write one recipe unless present or over the size budget; True when written."""
        if key in self.present or (len(self.present) + 1) * RECIPE_MB > self.max_mb:
            return False
        try:
            (self.path / f"{key}{SUFFIX}").write_text(description + "\n")
        except OSError:
            return False
        self.present.add(key)
        return True

    def clear(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
