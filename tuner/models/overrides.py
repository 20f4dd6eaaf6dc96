"""`vllm serve --hf-overrides JSON`: config keys the server sets over the model's config.json before it reads it.

Users serve with them every day: a Qwen3 context extended with YaRN (`{"rope_scaling": {...},
"max_position_embeddings": 131072}`), a reranker served as a classifier (`{"architectures":
["Qwen3ForSequenceClassification"], ...}`), a model cut to a few layers for a smoke test
(`{"num_hidden_layers": 4}`). The model is read as the server reads it, so the overrides are applied first,
as vLLM 0.32 applies them (config/model.py ModelConfig.__post_init__, _apply_dict_overrides,
_update_nested; transformers_utils/config.py get_config):

- a key whose value is not an object is set on the top-level config (PretrainedConfig.update);
- an object for a sub-config (`text_config`, `vision_config`, ...) updates it key by key, recursively,
  where the sub-config already holds an object under that key;
- any other object replaces the key's value whole (`rope_scaling`, `quantization_config`).

transformers 5 keeps the RoPE parameters under one name (`rope_scaling` is `rope_parameters`), so an
override of either is an override of both.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .hfconfig import sub_config_type

_ROPE = ("rope_scaling", "rope_parameters")
# dict-valued settings that are not sub-configs even though their names end in _config
_NOT_SUB_CONFIGS = frozenset({"quantization_config", "compression_config"})


def parse_hf_overrides(value: str | dict | None) -> dict[str, Any]:
    """--hf-overrides as given (a JSON object, or one already parsed) -> a dict; ValueError naming the value."""
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise ValueError(f"--hf-overrides {value!r}: expected a JSON object of config keys, e.g. "
                         "'{\"max_position_embeddings\": 65536}'")
    return out


def canonical(overrides: dict | str | None) -> str | None:
    """One spelling of a set of overrides (sorted keys, no spaces), for cache keys and records; None for none."""
    parsed = parse_hf_overrides(overrides)
    return json.dumps(parsed, sort_keys=True, separators=(",", ":")) if parsed else None


def legacy_rope_spelling(overrides: dict | str | None) -> str | None:
    """A warning when an override's RoPE object names its kind with the older key "type": vLLM renames it to
    "rope_type" in a config file, but sets an --hf-overrides object after that, and vLLM 0.32 then stops at its
    length check (KeyError: 'rope_type'); None when the spelling is the current one."""
    parsed = parse_hf_overrides(overrides)  # a sub-config's object is merged into its own RoPE dict instead
    found = [key for key in _ROPE if isinstance(parsed.get(key), dict) and "type" in parsed[key]
             and "rope_type" not in parsed[key]]
    if not found:
        return None
    return (f"--hf-overrides: {found[0]} names its kind with the older key \"type\"; vLLM 0.32 stops on it when it "
            "comes through --hf-overrides (KeyError: 'rope_type'): write \"rope_type\"")


def apply_hf_overrides(config: dict, overrides: dict | str | None) -> dict:
    """A copy of the parsed config.json with the server's overrides applied as vLLM applies them."""
    parsed = parse_hf_overrides(overrides)
    if not parsed:
        return config
    out = copy.deepcopy(config)
    parent = str(out.get("model_type") or "")
    for key, value in parsed.items():
        if not isinstance(value, dict):
            _set(out, key, value)
            if key == "num_labels":  # transformers' setter: labels LABEL_i anew when the count changes
                _relabel(out, value)
        elif _is_sub_config(out, parent, key):
            _update_nested(out[key], value)
        else:
            _set(out, key, copy.deepcopy(value))
    return out


def _set(config: dict, key: str, value: Any) -> None:
    if key in _ROPE:
        for name in _ROPE:
            config[name] = value
    else:
        config[key] = value


def _relabel(config: dict, count: Any) -> None:
    labels = config.get("id2label")
    if isinstance(count, int) and count > 0 and not (isinstance(labels, dict) and len(labels) == count):
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(count)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(count)}


def _is_sub_config(config: dict, parent: str, key: str) -> bool:
    """Whether transformers holds `key` as a nested config object (updated in place) rather than a dict value."""
    if not isinstance(config.get(key), dict) or key in _NOT_SUB_CONFIGS:
        return False
    return bool(sub_config_type(parent, key)) or key.endswith("_config")


def _update_nested(target: dict, updates: dict) -> None:
    for key, value in updates.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _update_nested(target[key], value)
        else:
            _set(target, key, copy.deepcopy(value))
