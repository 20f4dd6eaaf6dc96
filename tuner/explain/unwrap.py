"""Lines a terminal hard-wrapped at its width, joined again before the log is read.

Some terminals (GNU screen, Windows' console, web shells, a `fold`) cut every line longer than the
window into physical lines of exactly the window's width, and the copy keeps the cuts. A vLLM log's
records are long (the engine's config line is ~2,000 characters, a bucket list as long), so a paste
from an 80- or 120-column window splits them mid-word: the engine line loses the model and
max_model_len, a bucket list its tail, and the pieces read as unknown lines.

The sign of such a paste: no line is longer than one width W (colour codes take no column), at least
two lines are exactly W long, and the line after such a line starts no record of its own (no logger
prefix, stamp or process tag; not a traceback's line). Those lines are joined to the line before.
A line that happens to be W long in a log nobody wrapped is only joined to a next line that starts
no record either, which a log's own lines seldom do (tqdm bars, tracebacks and indented rows are
kept apart). Line numbers are kept: a joined line stands at its first physical line, its
continuations are left empty (None).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from ..logparse.prefix import PasteLayer, split_prefix

MIN_WIDTH = 60  # no terminal a log is read in is narrower; shorter lines are no sign of a wrap
_COLOURS = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# a next line that stands on its own even without a logger prefix: a traceback's, an indented row
# (a tqdm bar: on a terminal every redraw is as wide as the window, so a paste of bars is lines of one width)
_OWN_LINE = re.compile(r"Traceback \(most recent call last\)|\s*File \"|\s{4}|\S+Error\b|\S+Exception\b|"
                       r".{0,200}?\d+%\|")
# what a paste put before every physical line: a markdown or mail quote, an indented code block
_QUOTE = re.compile(r"(?:>[ \t]?)+|[ \t]+")


def _width(line: str) -> int:
    return len(_COLOURS.sub("", line).rstrip("\r\n"))


def _starts_a_record(line: str) -> bool:
    if not line.strip() or _OWN_LINE.match(line):
        return True
    prefix, _ = split_prefix(line, None, learn=False)
    return any((prefix.level, prefix.timestamp, prefix.docker_time, prefix.process, prefix.source))


def _continuation(held: str, line: str, paste: PasteLayer | None) -> str:
    """A cut line's text without what the paste put before every physical line (the held line has it too)."""
    if paste is not None and (peeled := paste.peel(line)) != line:
        return peeled
    quote = _QUOTE.match(held)
    return line[quote.end():] if quote and line.startswith(quote.group()) else line


def wrap_width(lines: Sequence[str]) -> int | None:
    """The width a terminal cut these lines at, or None when nothing says they were cut."""
    lines = [line if isinstance(line, str) else "" for line in lines]
    widths = [_width(line) for line in lines]
    width = max(widths, default=0)
    if width < MIN_WIDTH:
        return None
    cut = sum(1 for i, w in enumerate(widths[:-1])
              if w == width and not _starts_a_record(_continuation(lines[i], lines[i + 1], None)))
    return width if cut >= 2 else None


def unwrap(lines: Iterable[str], width: int, paste: PasteLayer | None = None) -> Iterator[str | None]:
    """`lines` with every run of cut lines joined into its first; None in place of each line joined (not a
    blank line: a blank ends a pasted command, which a terminal's cut does not).
    `paste`: a paste's own prefix on every physical line (a markdown quote's `> `), peeled off the
    continuations before they are joined."""
    held: str | None = None
    blanks = 0
    for line in lines:
        if not isinstance(line, str):  # not text: ends a cut record, keeps its place
            if held is not None:
                yield held
                yield from [None] * blanks
                held, blanks = None, 0
            yield None
            continue
        text = line.rstrip("\r\n")
        if held is not None:
            rest = _continuation(held, text, paste)
            if not _starts_a_record(rest):
                held += rest
                blanks += 1
                if _width(text) == width:
                    continue
                yield held
                yield from [None] * blanks
                held, blanks = None, 0
                continue
            yield held
            yield from [None] * blanks
            held, blanks = None, 0
        if _width(text) == width:
            held = text
        else:
            yield text
    if held is not None:
        yield held
        yield from [None] * blanks
