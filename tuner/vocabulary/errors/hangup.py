"""The terminal closed under a running command (an ssh session that ended: SIGHUP).

Every later write to that terminal fails with EIO, so the clean stop that SIGHUP asks for would end
in an error of its own, half done. `detach_dead_outputs()` points stdout and stderr, when they can no
longer be written, at /dev/null: the stop finishes, and what it did is in the study's records.
"""

from __future__ import annotations

import os


def detach_dead_outputs() -> list[int]:
    """Redirect fds 1 and 2 to /dev/null where a write fails (a hung-up terminal, a reader gone);
    returns the fds redirected. Safe to call from a Python signal handler."""
    moved = []
    for fd in (1, 2):
        try:
            os.write(fd, b"")  # a hung-up terminal refuses even an empty write (EIO)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)
                moved.append(fd)
            except OSError:
                pass
    return moved
