"""The HPU graph recipe cache (PT_HPU_RECIPE_CACHE_CONFIG): its variable, its manifest, and when a
cache prepared for one deployment still fits another. Pure: no I/O beyond reading/writing the manifest.

The variable is read by the Intel Gaudi PyTorch bridge, not by vLLM, so every Gaudi release honours
it (the 1.10 stack used PT_RECIPE_CACHE_PATH + PT_CACHE_FOLDER_DELETE instead); a CPU/CUDA vLLM
ignores it. Value: `<path>,<delete True|False>,<max MB>`; delete=True empties the folder at start,
False reuses it; past max MB the bridge drops the oldest recipes. A recipe is the graph compiler's
output for one graph, so it is reused only for the same graph: same shapes (the KV-cache tensor,
i.e. the KV block count, is one of them), data type, tensor parallelism, device generation and
software stack. A hit skips the graph-compiler stage only: HPU graph capture, weight loading and the
memory profiling run still happen. See docs/recipe-cache.md for the sources.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

VARIABLE = "PT_HPU_RECIPE_CACHE_CONFIG"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
DEFAULT_MAX_MB = 8192  # the guide's example value
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
# Guide figures (Llama 3.1 8B, vllm-gaudi managing_warm-up.md): cached / cold warmup.
GUIDE_RATIO = {"bf16": 23 / 66, "fp8": 34 / 504}


class RecipeCacheError(ValueError):
    """A bad PT_HPU_RECIPE_CACHE_CONFIG value or manifest; the message names the bad part."""


@dataclass(frozen=True)
class CacheConfig:
    path: str
    delete: bool
    max_mb: int

    def value(self) -> str:
        return format_value(self.path, self.delete, self.max_mb)


def recipe_files(folder: Path) -> dict[str, int]:
    """Recipe files in the folder (name -> bytes); our manifest is not a recipe."""
    if not folder.is_dir():
        return {}
    return {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}


def parse_value(value: str) -> CacheConfig:
    """`<path>,<delete>,<max MB>` -> CacheConfig; a one-line error names the part that is wrong.

    Quotes around a part are dropped as a shell would (the guide writes `'/tmp/cache/',True,8192`)."""
    if value is None or not str(value).strip():
        raise RecipeCacheError(f"{VARIABLE} is empty; expected <path>,<True|False>,<max MB>")
    parts = [p.strip().strip("'\"") for p in str(value).split(",")]
    if len(parts) != 3:
        raise RecipeCacheError(f"{VARIABLE}={value!r}: expected 3 comma-separated parts "
                               f"<path>,<True|False>,<max MB>, got {len(parts)}")
    path, delete, size = parts
    if not path:
        raise RecipeCacheError(f"{VARIABLE}={value!r}: the path (part 1) is empty")
    if delete.lower() not in _TRUE + _FALSE:
        raise RecipeCacheError(f"{VARIABLE}={value!r}: delete flag (part 2) {delete!r} is not True or False")
    try:
        max_mb = int(size)
    except ValueError:
        raise RecipeCacheError(f"{VARIABLE}={value!r}: max size (part 3) {size!r} is not a whole number "
                               "of MB") from None
    if max_mb <= 0:
        raise RecipeCacheError(f"{VARIABLE}={value!r}: max size (part 3) must be > 0 MB, got {max_mb}")
    return CacheConfig(path, delete.lower() in _TRUE, max_mb)


def format_value(path: str | Path, delete: bool, max_mb: int = DEFAULT_MAX_MB) -> str:
    """The variable's value; refuses a path the format cannot carry (a comma) or an env file cannot
    (whitespace, quotes)."""
    text = str(path)
    bad = next((c for c in text if c in ",'\"" or c.isspace()), None)
    if not text or bad is not None:
        raise RecipeCacheError(f"recipe cache path {text!r} cannot be written into {VARIABLE}"
                               + (f" (contains {bad!r})" if bad else ""))
    if int(max_mb) <= 0:
        raise RecipeCacheError(f"recipe cache max size must be > 0 MB, got {max_mb}")
    return f"{text},{'True' if delete else 'False'},{int(max_mb)}"


# --- manifest ------------------------------------------------------------------------------------

# The fields a recipe depends on, in the order a mismatch is reported.
KEY_FIELDS = ("software_version", "device", "release", "model", "dtype", "tp", "kv_blocks")


@dataclass
class Manifest:
    """What DIR/manifest.json says about the recipes in DIR (written by `export --with-cache`)."""

    release: str                   # bucket-tuner release profile, e.g. fork-1.21.2
    device: str                    # gaudi2 | gaudi3 | ... (the platform: recipes are per generation)
    model: str
    dtype: str                     # bf16 | fp8
    tp: int
    kv_blocks: int                 # the KV cache tensor's size is part of every attention graph
    software_version: str          # as the server log prints it ("vLLM API server version ...")
    recipes: int = 0
    size_bytes: int = 0
    cold_warmup_s: float | None = None       # the shipped configuration's own cold warmup
    cold_warmup_source: str | None = None    # where that figure comes from (a boot here, or its study)
    cached_warmup_s: float | None = None
    hit_rate: float | None = None  # of the verification boot, 0..1
    format: int = MANIFEST_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> Manifest:
        if not isinstance(data, dict):
            raise RecipeCacheError("recipe cache manifest is not a JSON object")
        names = {f.name for f in fields(cls)}
        missing = [k for k in KEY_FIELDS if data.get(k) in (None, "")]
        if missing:
            raise RecipeCacheError(f"recipe cache manifest lacks {', '.join(missing)}")
        try:
            kw = {k: v for k, v in data.items() if k in names}
            kw["tp"], kw["kv_blocks"] = int(kw["tp"]), int(kw["kv_blocks"])
        except (TypeError, ValueError):
            raise RecipeCacheError(f"recipe cache manifest: tp {data.get('tp')!r} and kv_blocks "
                                   f"{data.get('kv_blocks')!r} must be whole numbers") from None
        if kw.get("format", MANIFEST_FORMAT) > MANIFEST_FORMAT:
            raise RecipeCacheError(f"recipe cache manifest format {kw['format']} is newer than this "
                                   f"bucket-tuner reads ({MANIFEST_FORMAT})")
        return cls(**kw)


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest in `folder`, None if there is none; RecipeCacheError if it is unreadable."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RecipeCacheError(f"{path}: not a readable manifest ({exc})") from None
    return Manifest.from_dict(data)


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    path = Path(folder) / MANIFEST
    path.write_text(manifest.to_json())
    return path


@dataclass(frozen=True)
class Compatibility:
    ok: bool
    reasons: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok

    def describe(self) -> str:
        return "compatible" if self.ok else "; ".join(self.reasons)


def normalize_dtype(dtype: str | None) -> str:
    d = (dtype or "bf16").lower()
    return {"bfloat16": "bf16", "auto": "bf16", "fp8_inc": "fp8", "fp8_e4m3": "fp8"}.get(d, d)


def is_compatible(manifest: Manifest, release: str, device: str, model: str, dtype: str, tp: int,
                  kv_blocks: int | None, software_version: str | None) -> Compatibility:
    """Whether the recipes `manifest` describes can be hits for this deployment, and why not.

    Unknown values (None) on the deployment side are not held against the cache, except the KV
    block count, which the server only learns after profiling memory: then the caveat is named."""
    want = {"release": release, "device": device, "model": model, "dtype": normalize_dtype(dtype),
            "tp": int(tp), "kv_blocks": kv_blocks, "software_version": software_version}
    have = asdict(manifest)
    have["dtype"] = normalize_dtype(have["dtype"])
    words = {"software_version": "software version", "device": "device", "release": "release",
             "model": "model", "dtype": "data type", "tp": "tensor parallelism", "kv_blocks": "KV blocks"}
    reasons = []
    for key in KEY_FIELDS:
        if want[key] is None:
            continue
        if str(want[key]) != str(have[key]):
            reasons.append(f"{words[key]}: cache {have[key]}, deployment {want[key]}")
    if kv_blocks is None:
        return Compatibility(not reasons, tuple(reasons) + (
            f"KV blocks unknown: the cache fits only if the server allocates {manifest.kv_blocks} blocks",))
    return Compatibility(not reasons, tuple(reasons))


def release_change_note(releases: list[str]) -> str | None:
    """What `compare` says when the studies ran different releases: their recipe caches differ."""
    distinct = sorted({r for r in releases if r})
    if len(distinct) < 2:
        return None
    return (f"releases differ ({', '.join(distinct)}): a recipe cache ({VARIABLE}) prepared on one "
            "is invalid on the others; prepare it again (export --with-cache) after a release change")
