"""The server a log came from, as far as the log says: tensor-parallel size, model, dtype, device.

Read from the engine's config line (`Initializing an LLM engine (..) with config: model='..',
dtype=torch.bfloat16, max_seq_len=.., tensor_parallel_size=8, ..`), the API server's arguments
(`non-default args: {..}`, `args: Namespace(..)`), the worker tags of the ranks (`Worker_TP7`,
`(VllmWorkerProcess pid=..)`: a lower bound when the paste is cut), the launch command pasted above the
log (command.py), the device memory the Gaudi lines report (`(14.97 GiB/94.62 GiB used)`) and the
extension's runtime dump (`hw: gaudi3`).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from ..logparse import ConfigValue
from ..logparse.device import card_memory, device_of_memory
from .reading import LogReading


@dataclass(frozen=True)
class ServerFacts:
    tp: int | None = None
    tp_exact: bool = False            # False: a lower bound from the ranks seen in the paste
    tp_evidence: str | None = None
    model: str | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None   # the token budget the engine's settings print
    block_size: int | None = None
    enforce_eager: bool | None = None
    device: str | None = None         # gaudi1 | gaudi2 | gaudi3
    device_evidence: str | None = None
    hf_overrides: str | None = None   # the server's --hf-overrides (JSON), its model read with them
    speculative_config: str | None = None  # its --speculative-config (JSON): draft tokens, an MTP draft's weights
    kv_cache_dtype: str | None = None  # as the engine prints it (auto, fp8, fp8_inc)
    mamba_cache_dtype: str | None = None  # a hybrid's state dtypes, as the engine prints them (None: not shown)
    mamba_ssm_cache_dtype: str | None = None
    quantization: str | None = None    # the weights' method as the engine prints it (None: the checkpoint's dtype)


def _setting(texts: list[str], name: str, value: str = r"(\d+)") -> str | None:
    """`name=value` (config line, Namespace) or `'name': value` (non-default args)."""
    pattern = re.compile(rf"\b{name}=(?:torch\.)?'?{value}'?|'{name}': '?{value}'?")
    for text in texts:
        m = pattern.search(text)
        if m:
            value = next(g for g in m.groups() if g is not None)
            if "\u2026" not in value:  # a viewer cut the line there ("meta-llama/Meta-Ll…"): not the value
                return value
    return None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


# --max-model-len auto (-1): the engine's lines give the model's length, the KV cache's fit comes later (vLLM's
# kv_cache_utils; "... to fit in available GPU memory (3.01 GiB available for KV cache)" in older builds)
_AUTO_FIT = re.compile(r"Auto-fit max_model_len: (?:reduced from \d+ to (\d+)|full model context length (\d+) fits)")


def _dict_arg(texts: list[str], name: str) -> str | None:
    """A JSON-valued option a `non-default args: {...}` line prints as a Python dict (--hf-overrides,
    --speculative-config), as JSON; None when the line has none or was cut inside it."""
    key = re.compile(rf"'{name}': \{{")
    for text in texts:
        m = key.search(text)
        if not m:
            continue
        depth, start = 0, m.end() - 1
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                try:
                    value = ast.literal_eval(text[start:i + 1])
                    return json.dumps(value, sort_keys=True, separators=(",", ":")) if isinstance(value, dict) \
                        and value else None
                except (ValueError, TypeError, SyntaxError, RecursionError):  # not a plain dict of JSON values
                    return None
    return None


def _named(value: str | None) -> str | None:
    return None if value in (None, "None", "none") else value


def _auto_fit(texts: list[str]) -> int | None:
    for text in texts:
        m = _AUTO_FIT.search(text)
        if m:
            return int(m.group(1) or m.group(2))
    return None




# vllm-hpu-extension's capabilities: "Detected flags: [-compile_one_hot -cpu ... -gaudi -gaudi2 +gaudi3]"
_FLAGS = re.compile(r"Detected flags: \[[^\]]*?\+(gaudi[23]?)\b")


def _device(reading: LogReading) -> tuple[str | None, str | None]:
    for t in reading.events:
        e = t.event
        if isinstance(e, ConfigValue) and e.name == "hw" and e.value.strip().startswith("gaudi"):
            return e.value.strip(), f"runtime dump hw: {e.value.strip()}"
    for text in reading.settings_text:
        m = _FLAGS.search(text)
        if m:
            return ("gaudi1" if m.group(1) == "gaudi" else m.group(1)), f"the extension's flags: +{m.group(1)}"
    for text in [t.text for t in reading.events] + reading.settings_text:
        gib = card_memory(text)
        if gib is not None and (name := device_of_memory(gib)) is not None:
            return name, f"{gib:g} GiB of device memory per card"
    return None, None


def _tp_from_ranks(reading: LogReading) -> tuple[int | None, str | None]:
    tp_index = [int(m.group(1)) for p in reading.processes for m in [re.match(r"Worker_TP(\d+)\b", p)] if m]
    if tp_index:
        return max(tp_index) + 1, f"ranks up to Worker_TP{max(tp_index)} in the paste"
    workers = [p for p in reading.processes if p.startswith(("VllmWorkerProcess", "RayWorkerWrapper"))]
    if workers:
        return len(workers) + 1, f"{len(workers)} worker processes and the driver in the paste"
    return None, None


def server_facts(reading: LogReading) -> ServerFacts:
    # the engine's own lines first; a command pasted above the log where they do not say
    texts = reading.settings_text + ([reading.command_settings] if reading.command_settings else [])
    tp = _int(_setting(reading.settings_text, "tensor_parallel_size"))
    why = "tensor_parallel_size in the engine's settings" if tp is not None else None
    if tp is None and reading.command_settings:
        tp = _int(_setting([reading.command_settings], "tensor_parallel_size"))
        why = "--tensor-parallel-size in the pasted command" if tp is not None else None
    exact = tp is not None
    if tp is None:
        tp, why = _tp_from_ranks(reading)
    eager = _setting(texts, "enforce_eager", r"(True|False)")
    device, device_why = _device(reading)
    return ServerFacts(
        tp=tp, tp_exact=exact, tp_evidence=why,
        model=_setting(texts, "model", r"([^',)\s]+)"),
        dtype=_setting(texts, "dtype", r"(\w+)"),
        max_model_len=_auto_fit(reading.settings_text) or _int(_setting(texts, "max_model_len"))
        or _int(_setting(texts, "max_seq_len")),
        max_num_seqs=_int(_setting(texts, "max_num_seqs")),
        max_num_batched_tokens=_int(_setting(texts, "max_num_batched_tokens")),
        block_size=_int(_setting(texts, "block_size")),
        enforce_eager=None if eager is None else eager == "True",
        device=device, device_evidence=device_why, hf_overrides=_dict_arg(reading.settings_text, "hf_overrides"),
        speculative_config=_dict_arg(reading.settings_text, "speculative_config"),
        kv_cache_dtype=_setting(texts, "kv_cache_dtype", r"([\w.]+)"),
        mamba_cache_dtype=_setting(texts, "mamba_cache_dtype", r"(\w+)"),
        mamba_ssm_cache_dtype=_setting(texts, "mamba_ssm_cache_dtype", r"(\w+)"),
        quantization=_named(_setting(texts, "quantization", r"([\w.]+)")))
