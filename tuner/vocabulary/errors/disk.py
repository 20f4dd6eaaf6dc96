"""Writing files on disks that fill up: whole-or-nothing writes, and one line when the disk says no.

A full file system (ENOSPC), a used-up quota (EDQUOT), a read-only mount (EROFS) or a folder the user
may not write (EACCES, EPERM) is the surroundings' failure, not a bug: `DiskError` names the path, what
the disk said (with the space left, when that is the problem) and the remedy, and `tuner.cli` prints
it as one line (exit 1). `write_text` replaces a file only once its new content is complete, so a
full disk never leaves a truncated result or report behind. `require_space` is the check before a
boot: a server whose log cannot be written would fail for a reason that is not its settings'.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from . import RuntimeFailure

# What the disk said, in words; the remedy follows.
_SAID = {
    errno.ENOSPC: "no space left on its file system",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "its file system is mounted read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}
_REMEDY = {
    errno.ENOSPC: "free some space there",
    errno.EDQUOT: "free some of the quota (or ask for more)",
    errno.EROFS: "use a writable folder",
    errno.EACCES: "make the folder writable for this user",
    errno.EPERM: "make the folder writable for this user",
}
DISK_ERRNOS = frozenset(_SAID)
MIN_FREE_BYTES = 16 << 20  # before a boot: room for a real server's log and the load test's records


class DiskError(RuntimeFailure):
    """A file or folder could not be written for want of space, quota or permission (exit 1)."""

    def __init__(self, message: str, path: Path | str | None = None, code: int | None = None):
        super().__init__(message)
        self.path, self.errno = path, code
        self.written: dict[str, Path] = {}  # what could be written before (write_report)


def is_disk_failure(exc: BaseException) -> bool:
    return isinstance(exc, DiskError) or (isinstance(exc, OSError) and exc.errno in DISK_ERRNOS)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def space_left(path: Path | str) -> str:
    """'0 B free of 4.0 MiB' for the file system holding path (its nearest existing folder)."""
    here = Path(path)
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        usage = shutil.disk_usage(here)
    except OSError:
        return "free space unknown"
    return f"{human_bytes(usage.free)} free of {human_bytes(usage.total)}"


def explain(code: int | None, path: Path | str | None, elsewhere: str | None = None) -> str:
    """'cannot write PATH: no space left on its file system (0 B free of 4.0 MiB); free some space there,
    or write elsewhere (--results DIR)'. Without a path (the system did not say), --debug shows the file."""
    said = _SAID.get(code, os.strerror(code) if code else "it failed")
    if code in (errno.ENOSPC, errno.EDQUOT) and path is not None:
        said += f" ({space_left(path)})"
    remedy = _REMEDY.get(code, "check the disk")
    if elsewhere:
        remedy += f", or write elsewhere ({elsewhere})"
    if path is None:
        return f"cannot write a file: {said.replace('its ', 'a ')}; {remedy} (--debug shows which file)"
    return f"cannot write {path}: {said}; {remedy}"


def disk_error(exc: OSError, path: Path | str | None = None, elsewhere: str | None = None) -> DiskError:
    where = exc.filename if exc.filename is not None else path
    return DiskError(explain(exc.errno, where, elsewhere), where, exc.errno)


@contextmanager
def writing(path: Path | str, elsewhere: str | None = None) -> Iterator[None]:
    """Turn a disk failure while writing `path` (or inside it) into a DiskError naming it."""
    try:
        yield
    except DiskError:
        raise
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        raise disk_error(exc, path, elsewhere) from None


def write_text(path: Path | str, text: str, elsewhere: str | None = None) -> Path:
    """Write the file whole or not at all: a temporary file beside it, renamed over it once complete
    (a full disk leaves the previous version, never half a file). Raises DiskError on a disk failure."""
    path = Path(path)
    with writing(path, elsewhere):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def require_space(folder: Path | str, need: int = MIN_FREE_BYTES, elsewhere: str | None = None) -> None:
    """Raise DiskError when the file system of `folder` has less than `need` bytes free (before a boot)."""
    here = Path(folder)
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        free = shutil.disk_usage(here).free
    except OSError:
        return  # cannot tell: let the writes speak for themselves
    if free < need:
        remedy = "free some space there" + (f", or write elsewhere ({elsewhere})" if elsewhere else "")
        raise DiskError(f"cannot write {folder}: no space left on its file system ({space_left(here)}; a trial "
                        f"needs {human_bytes(need)} for its server log and results); {remedy}", folder, errno.ENOSPC)
