"""`--speculative-config` as vLLM's command line takes it (vllm/config/speculative.py, engine/arg_utils.py,
vLLM 0.32): a JSON object whose num_speculative_tokens is the draft tokens a step proposes, its keys in either
spelling (num-speculative-tokens), or the shortcut flags --spec-method, --spec-model and --spec-tokens merged into
it. The fork's releases took it as `--speculative-model` and `--num-speculative-tokens`."""

from __future__ import annotations

import json

# methods whose draft is the model's own MTP layers: without num_speculative_tokens vLLM takes their count
MTP_METHODS = ("mtp", "deepseek_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "glm4_moe_mtp", "mimo_mtp", "ernie_mtp",
               "longcat_flash_mtp", "pangu_ultra_moe_mtp", "kimi_k3_mtp")


def speculative_object(value) -> dict | None:
    """The config as a dict (None: no speculative decoding); ValueError naming a value that is not one."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"--speculative-config {value!r}: not JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise ValueError(f"--speculative-config {json.dumps(value)}: expected a JSON object, "
                         "e.g. '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'")
    # vLLM reads the keys with dashes as with underscores; an empty object asks for nothing (taken as none here)
    return {str(k).replace("-", "_"): v for k, v in value.items()} or None


def speculative_method(value) -> str | None:
    """The config's method, lower-cased (None: none given, or no speculative decoding)."""
    config = speculative_object(value)
    method = (config or {}).get("method")
    return str(method).lower() if method else None


def merged_config(config, method: str | None = None, model: str | None = None, tokens: int | None = None) -> str | None:
    """--speculative-config with vLLM 0.32's shortcut flags merged into it, as JSON text (None: none asked);
    ValueError when a shortcut repeats a key of the object, as vLLM says it."""
    merged = dict(speculative_object(config) or {})
    for flag, key, value in (("--spec-method", "method", method), ("--spec-model", "model", model),
                             ("--spec-tokens", "num_speculative_tokens", tokens)):
        if value is None:
            continue
        if key in merged:
            raise ValueError(f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        merged[key] = value
    return json.dumps(merged, separators=(",", ":")) if merged else None


def speculative_tokens(value, mtp_layers: int = 1) -> int:
    """Draft tokens a step proposes (0: no speculative decoding). Without num_speculative_tokens an MTP draft
    proposes one per MTP layer of the model (`mtp_layers`), as vLLM sets it; other methods need it."""
    config = speculative_object(value)
    if config is None:
        return 0
    n = config.get("num_speculative_tokens")
    if n is None:
        if str(config.get("method", "")).lower() in MTP_METHODS:
            return max(1, mtp_layers)
        raise ValueError(f"--speculative-config {json.dumps(config)}: `num_speculative_tokens` was not provided "
                         "(vLLM needs it for this method)")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"--speculative-config num_speculative_tokens {n!r}: expected a whole number above 0")
    return n
