"""The rows of a warmup table, labelled by what the server and its log actually gave: a row nobody's
log or record holds is left out (a CPU or CUDA vLLM has no buckets, HPU graphs or "Warmup finished"
line), and the total says whether it is the server's own count or the tuner's launch-to-ready time."""

from __future__ import annotations

from collections.abc import Callable

from optuna.trial import FrozenTrial

from ..vocabulary import display
from ..vocabulary.record import as_record
from .startup import PHASES, LogFacts

COUNTS = ("prompt_buckets", "decode_buckets", "prompt_graphs", "decode_graphs", "kv_blocks")
SERVER_COUNT, LAUNCH_TO_READY = "log: Warmup finished", "launch to ready"  # observed["warmup_source"]


def total_label(sources: set[str | None]) -> str:
    sources = {s for s in sources if s}
    if sources == {SERVER_COUNT}:
        return "warmup total (the server's own count)"
    if sources == {LAUNCH_TO_READY}:
        return "launch to ready (timed by the tuner; the log states no warmup total)"
    if sources:
        return "warmup (the server's own count; launch to ready where its log states none)"
    return "warmup total"


def warmup_rows(columns: list[tuple[FrozenTrial, LogFacts | None]], stats: Callable[[FrozenTrial], dict]) -> list:
    """Table rows (label, (text, sort value) per column) for `columns` of (trial, its log facts)."""
    rows = []
    for key in COUNTS:
        vals = [stats(t).get(key) for t, _ in columns]
        if any(v is not None for v in vals):
            rows.append([key.replace("_", " "), *[(display.num(v), v) for v in vals]])
    weights = [f.weights_s if f else None for _, f in columns]
    if any(v is not None for v in weights):
        rows.append(["weights load, as the log says (s)", *[(display.seconds(v), v) for v in weights]])
    for phase in PHASES:
        vals = [f.phase_s.get(phase) if f else None for _, f in columns]
        if any(v is not None for v in vals):
            rows.append([f"{phase} (s)", *[(display.seconds(v), v) for v in vals]])
    observed = [as_record(t).observed for t, _ in columns]
    vals = [o.get("warmup_s") for o in observed]
    rows.append([total_label({o.get("warmup_source") for o in observed}), *[(display.seconds(v), v) for v in vals]])
    return rows
