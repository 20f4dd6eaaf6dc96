"""One message -> one event: the rule table first, then OOM texts, then any other ERROR line."""

from __future__ import annotations

import re
from dataclasses import replace

from .events import ErrorLine, Event, OutOfMemory
from .prefix import LogPrefix, split_prefix
from .rules import _RULES

# OOM texts, checked after every rule above and only on lines that are not INFO/DEBUG (an INFO line
# that mentions OOM is advice, not an OOM). Sources: Habana bridge "RuntimeError: [Rank:0] FATAL ERROR ::
# MODULE:PT_DEVMEM Allocation failed for size::939524096 (896)MB" and "MODULE:PT_DEVMEM OOM: No enough
# memory for defragment." (vllm-gaudi docs/configuration/calibration), torch "torch.OutOfMemoryError:
# ... out of memory", vllm-gaudi "HPU out of memory occurred when warming up pooler", vLLM KV sizing
# ValueErrors (fork 1.22 hpu_worker.py / v1 kv_cache_utils.py).
_OOM = [
    (re.compile(r"No available memory for the cache blocks|KV cache is needed, which is larger than the available "
                r"KV cache memory|larger than the maximum number of tokens that can be stored in KV cache|"
                r"Not enough memory for kv cache", re.I), "kv_cache"),
    (re.compile(r"DefaultCPUAllocator: can't allocate memory|Cannot allocate memory"), "host"),
    (re.compile(r"\bout of memory\b|OutOfMemoryError|MODULE:PT_DEVMEM|Device does not have enough memory",
                re.I), "device"),
]


def _oom_kind(message: str) -> str | None:
    for pattern, kind in _OOM:
        if pattern.search(message):
            return kind
    return None


# The Habana runtime logger prints a compile failure as a burst of [error] lines (GC, PASS_MANAGER,
# SYN_RECIPE, SYN_API, PT_BRIDGE, then a C++ backtrace); the PT_BRIDGE one carries the verdict
# ("Graph compile failed. synStatus=synStatus 26 [Generic failure]"), so it alone is reported.
_HABANA_VERDICT = re.compile(r"Graph compile failed|FATAL ERROR|Allocation failed|out of memory", re.I)


def _parse_message(prefix: LogPrefix, msg: str) -> Event | None:
    if not msg.strip():
        return None
    if prefix.source and prefix.source.startswith("habana:"):
        verdict = _HABANA_VERDICT.search(msg)
        if prefix.level not in ("ERROR", "CRITICAL") or not verdict:
            return None
        text = msg[verdict.start():].strip()   # "/npu-stack/../graph.cpp: 599Graph compile failed." -> the verdict
        kind = _oom_kind(text)
        if kind:
            return OutOfMemory(kind=kind, message=text, prefix=prefix)
        return ErrorLine(message=text, prefix=prefix)
    for pattern, build in _RULES:
        m = pattern.search(msg)
        if not m:
            continue
        try:
            event = build(m)
        except (ValueError, KeyError, IndexError):  # a rule that cannot build does not match
            event = None
        if event is not None:
            return replace(event, prefix=prefix)
    if prefix.level not in ("INFO", "DEBUG"):
        kind = _oom_kind(msg)
        if kind:
            return OutOfMemory(kind=kind, message=msg.strip(), prefix=prefix)
    if prefix.level in ("ERROR", "CRITICAL"):
        return ErrorLine(message=msg, prefix=prefix)
    return None


def _parse_single(line: str) -> Event | None:
    prefix, msg = split_prefix(line)
    return _parse_message(prefix, msg)

