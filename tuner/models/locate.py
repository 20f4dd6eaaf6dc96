"""A model as the user names it -> its ModelShape, offline.

Accepted, in this order:
  1. a model folder (with config.json) or a config.json path on this machine;
  2. a Hugging Face id (`org/name`) found in the local hub cache (HF_HUB_CACHE, HF_HOME/hub,
     ~/.cache/huggingface/hub: models--org--name/snapshots/<rev>/config.json);
  3. a catalogue name: the shipped configs of models the fork and the plugin validate (catalogue/,
     with SOURCES.md), by id, by name, or a served path ending in one ("/data/Meta-Llama-3.1-70B-Instruct");
     a name with an FP8 suffix ("Qwen3-VL-32B-Instruct-FP8") is its base model stored in FP8.
Anything else is refused with the closest catalogue names and how to pass a config. Nothing needs the network.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from pathlib import Path

from ..vocabulary.errors import UserError
from .hfconfig import ModelConfigError, TextConfig, config_file, encoder_config, raw_config, read_config
from .overrides import apply_hf_overrides, canonical
from .params import count_params
from .shape import ModelShape, shape_from_config

CATALOGUE = Path(__file__).with_name("catalogue")
# Short names the project used before models were read from configs (studies store them), and fine-tunes
# that keep their base model's architecture, with where that is stated.
ALIASES = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    # "fine-tuned on the Intel Gaudi 2 processor from the mistralai/Mistral-7B-v0.1" (the model card, as
    # quoted in cloudflare/cloudflare-docs content/workers-ai/models/neural-chat-7b-v3-1-awq.md)
    "intel/neural-chat-7b-v3-3": "mistralai/Mistral-7B-v0.1",
    "intel/neural-chat-7b-v3-1": "mistralai/Mistral-7B-v0.1",
}
_FP8_SUFFIX = re.compile(r"[-_.](fp8|fp8[-_]dynamic|fp8[-_]static|fp8[-_]block|w8a8[-_]fp8|fp8[-_]kv)$", re.I)
_DROP = re.compile(r"^(meta-)|[-_](instruct|it|chat|hf|v0\.\d+)$", re.I)


class UnknownModelError(UserError):
    """A model named by the user that is neither a config here nor in the cache or the catalogue."""


def _key(name: str) -> str:
    base = name.strip().rstrip("/").lower()
    base = base.rsplit("/", 1)[-1]
    for _ in range(2):
        base = _DROP.sub("", base)
    return re.sub(r"[^a-z0-9]", "", base)


@functools.lru_cache(maxsize=1)
def catalogue() -> dict[str, Path]:
    """Catalogue ids ("org/name") -> their config files."""
    return {p.stem.replace("__", "/", 1): p for p in sorted(CATALOGUE.glob("*.json"))
            if "__" in p.stem}


@functools.lru_cache(maxsize=1)
def _catalogue_weights() -> dict[str, int]:
    table = CATALOGUE / "weights.json"
    if not table.exists():
        return {}
    return {k: int(v["total_size"]) for k, v in json.loads(table.read_text()).items()}


@functools.lru_cache(maxsize=1)
def _catalogue_keys() -> dict[str, str]:
    keys: dict[str, str] = {}
    for model_id in catalogue():
        keys.setdefault(model_id.lower(), model_id)
    for model_id in catalogue():  # exact names win over the loose keys
        keys.setdefault(model_id.rsplit("/", 1)[-1].lower(), model_id)
    # Loose keys: a served instruct model is the usual meaning of a short name.
    for model_id in sorted(catalogue(), key=lambda m: ("instruct" not in m.lower() and "-it" not in m.lower(), m)):
        keys.setdefault(_key(model_id), model_id)
    return keys


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def _in_hub_cache(model_id: str) -> Path | None:
    if model_id.count("/") != 1 or model_id.startswith(("/", ".")):
        return None
    folder = hub_cache() / ("models--" + model_id.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / "main"
    if ref.is_file():
        snap = snapshots / ref.read_text().strip()
        if _has_config(snap):
            return snap
    found = sorted((p for p in snapshots.iterdir() if _has_config(p)),
                   key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _has_config(folder: Path) -> bool:
    return config_file(folder).is_file()


def _index_bytes(folder: Path) -> int | None:
    index = folder / "model.safetensors.index.json"
    try:
        return int(json.loads(index.read_text())["metadata"]["total_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _load(data: dict, file: Path, overrides: str | None) -> tuple[TextConfig, bool]:
    """(a parsed config read as the server reads it: its --hf-overrides (overrides.py) over the file's keys;
    whether the overrides leave the parameters as the file has them, so that the checkpoint's stored bytes still
    hold). The file alone is read only to compare: overrides may supply what it lacks."""
    config = read_config(apply_hf_overrides(data, overrides), str(file), encoder_config(file.parent))
    if not overrides:
        return config, True
    try:
        own = read_config(data, str(file), encoder_config(file.parent))
    except ModelConfigError:
        return config, False
    return config, count_params(own).total == count_params(config).total


def _overridden(source: str, overrides: str | None) -> str:
    return f"{source}, with --hf-overrides {overrides}" if overrides else source


def _from_folder(name: str, path: Path, source: str, quantization: str | None = None,
                 overrides: str | None = None) -> ModelShape:
    folder = path if path.is_dir() else path.parent
    try:
        config, same = _load(*raw_config(path), overrides)
        stored = _index_bytes(folder) if same else None
        return shape_from_config(config, name, _overridden(source, overrides), stored, quantization)
    except ModelConfigError as e:
        raise UnknownModelError(f"model {name!r}: {e}") from None
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as e:  # a field of a shape nothing here expects
        raise UnknownModelError(f"model {name!r}: {config_file(path) if path.is_dir() else path}: a field has an "
                                f"unexpected type or value ({type(e).__name__}: {e})") from None


def _from_catalogue(name: str, model_id: str, quantization: str | None = None,
                    overrides: str | None = None) -> ModelShape:
    path = catalogue()[model_id]
    data = None
    try:
        data, file = raw_config(path)
        config, same = _load(data, file, overrides)
    except ModelConfigError as e:
        if data is None or not overrides:  # a shipped file is broken: the project's bug, said as such
            raise RuntimeError(f"catalogue config {path.name}: {e}") from None
        raise UnknownModelError(f"model {name!r} with --hf-overrides {overrides}: {e}") from None
    stored = None if quantization or not same else _catalogue_weights().get(model_id)
    return shape_from_config(config, name, _overridden(f"catalogue: {model_id}", overrides), stored, quantization)


def _catalogue_id(name: str) -> str | None:
    keys = _catalogue_keys()
    low = name.strip().rstrip("/").lower()
    alias = ALIASES.get(low)
    if alias and alias in catalogue():
        return alias
    for candidate in (low, low.rsplit("/", 1)[-1]):
        if candidate in keys:
            return keys[candidate]
    return keys.get(_key(name))


def resolve(name: str, hf_overrides: dict | str | None = None) -> ModelShape:
    """The shape of the model `name` names (see the module's docstring for what is accepted), read with the
    server's --hf-overrides (a JSON object or its dict) over its config as vLLM reads it; a malformed value
    is a ValueError naming it."""
    return _resolve(name, canonical(hf_overrides))


resolve.cache_clear = lambda: _resolve.cache_clear()  # type: ignore[attr-defined]  # the readings are cached by name


@functools.lru_cache(maxsize=256)
def _resolve(name: str, overrides: str | None) -> ModelShape:
    text = str(name).strip()
    if not text:
        raise UnknownModelError("no model named (an empty name)")
    path = Path(text).expanduser()
    if path.is_dir() and _has_config(path) or path.is_file() and path.suffix == ".json":
        return _from_folder(text, path, str(path.resolve()), overrides=overrides)
    if path.is_dir():
        raise UnknownModelError(f"model folder {text!r} has no config.json (nor a Mistral params.json); pass "
                                "the folder the weights and config.json are in, or the config.json itself")
    for base, quant in ((text, None), (_FP8_SUFFIX.sub("", text), "fp8")):
        if quant and base == text:
            continue
        cached = _in_hub_cache(base)
        if cached is not None and not quant:
            return _from_folder(text, cached, f"HF cache: {cached}", overrides=overrides)
        model_id = _catalogue_id(base)
        if model_id:
            return _from_catalogue(text, model_id, quant if not model_id.lower().endswith("fp8") else None,
                                   overrides)
    raise UnknownModelError(_unknown_message(text))


def _unknown_message(name: str) -> str:
    names = list(catalogue())
    short = {m.rsplit("/", 1)[-1].lower(): m for m in names}
    close = difflib.get_close_matches(name.rsplit("/", 1)[-1].lower(), list(short), n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(short[c] for c in close)}" if close else ""
    looks_like_path = "/" in name and (name.startswith(("/", ".", "~")) or name.count("/") > 1)
    where = ("no such folder or config.json here" if looks_like_path else
             f"not in the Hugging Face cache ({hub_cache()}) nor in the catalogue of {len(names)} models")
    return (f"unknown model {name!r}: {where}{hint}. Pass the model's folder or its config.json "
            "(e.g. --model-shape /models/MyModel or --model-shape ./config.json); "
            "`bucket-tuner models` lists the catalogue")


def known_names() -> list[str]:
    """Catalogue ids and the short aliases, for listings and completion."""
    return sorted(set(catalogue()) | set(ALIASES))
