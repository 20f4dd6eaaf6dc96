"""A log pasted the ways users paste it, built from its lines: the guards of the model on real logs read
every timed log in each of these ways."""

from __future__ import annotations

import re

_STAMP = re.compile(r"\b(\d\d)-(\d\d) (\d\d:\d\d:\d\d)\b")
_STEP = re.compile(r"\[Warmup\]\[[^\]]+\]\[(\d+)/(\d+)\]")


def docker_stamps(lines: list[str]) -> list[str]:
    """`docker logs -t`: an ISO stamp with nanoseconds before each line (the line's own second)."""
    out, last = [], "2024-01-01T00:00:00"
    for x in lines:
        m = _STAMP.search(x)
        if m:
            last = f"2024-{m[1]}-{m[2]}T{m[3]}"
        out.append(f"{last}.250000000Z {x}" if x.strip() else x)
    return out


def elided(lines: list[str]) -> list[str]:
    """Every warm-up line but the first two and last two of each phase replaced by `...`."""
    out: list[str] = []
    for x in lines:
        m = _STEP.search(x)
        if m and 2 < int(m[1]) < int(m[2]) - 1:
            if not out or out[-1] != "...":
                out.append("...")
            continue
        out.append(x)
    return out


# name -> the log's lines as that paste shows them
PASTES = {
    "as is": list,
    "docker logs -t": docker_stamps,
    "kubectl --prefix": lambda lines: [f"[pod/vllm-0/vllm] {x}" if x.strip() else x for x in lines],
    "ANSI colours": lambda lines: [f"\x1b[32m{x[:4]}\x1b[0m{x[4:]}" if x.strip() else x for x in lines],
    "CRLF": lambda lines: [x + "\r" for x in lines],
    "elided": elided,
}
