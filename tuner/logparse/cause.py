"""Which line of a server log is the cause of a failure: an ERROR/CRITICAL record or a traceback's
exception, never a WARNING that merely mentions an error (vLLM's start-up ulimit warning quotes
"OSError: [Errno 24] Too many open files" on every CPU start)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .prefix import split_prefix
from .watcher import LogWatcher

_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure)\b(?::|$)")
_TRACEBACK_START = "Traceback (most recent call last):"


def last_error(lines: Iterable[str]) -> str | None:
    """The last error the log states (an ERROR line, or a traceback as "Type: message"); for a log cut
    inside a traceback, its last ERROR record or a note that it was cut; else None."""
    watcher = LogWatcher()
    last_record = None
    for line in lines:
        watcher.feed(line, 0.0)
        prefix, msg = split_prefix(line)
        if prefix.level in ("ERROR", "CRITICAL") and msg.strip():
            last_record = msg.strip()
    watcher.flush()
    said = watcher.summary().errors
    errors = [e for e in said if e and e != "incomplete traceback"]
    if errors:
        return errors[-1]
    if last_record is not None:
        return last_record
    return "a traceback the log ends inside (no exception line)" if said else None


def starts_an_error(line: str) -> bool:
    """True for an ERROR/CRITICAL record, a traceback's first line or an exception line."""
    prefix, msg = split_prefix(line)
    if prefix.level in ("ERROR", "CRITICAL"):
        return True
    if prefix.level in ("DEBUG", "INFO", "WARNING"):
        return False
    text = msg.strip()
    return text == _TRACEBACK_START or bool(_EXCEPTION.match(text))
