"""`parse_line`: the stateless entry point (one line, or one multi-line record, -> one event)."""

from __future__ import annotations

from .events import Event
from .message import _parse_single
from .watcher import LogWatcher


def parse_line(line: str) -> Event | None:
    """One log line -> one typed event, or None for an uninteresting line. Never raises.

    `\\r`-separated redraws (tqdm) are read last-first and the first recognised one is returned.
    A string holding several lines is read as one record (a traceback, vllm-gaudi's multi-line
    "Omitted N buckets:" list) through a LogWatcher; the first event it yields is returned.
    """
    if not isinstance(line, str):
        return None
    try:
        text = line.rstrip("\r\n")
        if "\n" in text:
            watcher = LogWatcher()
            watcher.prime(text.split("\n"))
            events = watcher.feed(text, t=0.0) + watcher.flush()
            return events[0] if events else None
        for segment in reversed(text.split("\r")):
            if segment.strip():
                event = _parse_single(segment)
                if event is not None:
                    return event
        return None
    except Exception:  # robustness contract: junk never raises
        return None
