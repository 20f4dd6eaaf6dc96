"""The errors a user can cause or meet, and how the command line reports them.

    disk    whole-or-nothing writes; a full, read-only or over-quota disk as one line with the remedy
    hangup  the terminal closed under a running command (SIGHUP): outputs that can no longer be written

Two kinds, told apart by the exit status `tuner.cli` gives them:

* `UserError` (exit 2): the command line or a file the user gave is wrong (a bad value, a missing
  or malformed file, a storage path that is not a database, an unknown variable). Fixing the
  command fixes it.
* `RuntimeFailure` (exit 1): the command was right but its surroundings failed (a server or
  database that cannot be reached, a driver that is not installed, a folder that cannot be written).

The message is one line that names the culprit (path, key, value, URL without its password, port)
and, where it helps, the fix. The older ValueError subclasses of each module (SpaceError,
TraceFormatError, BucketConfigError, ...) are user errors too; `tuner.cli` maps them.
"""

from __future__ import annotations


class TunerError(Exception):
    """An expected failure: printed as one line, no traceback (unless --debug)."""

    exit_code = 1


class UserError(TunerError, ValueError):
    """A bad argument, value or input file (exit 2). A ValueError so older `except ValueError` still holds."""

    exit_code = 2


class RuntimeFailure(TunerError):
    """The environment failed: unreachable server or storage, missing driver, unwritable path (exit 1)."""

    exit_code = 1


class StudyError(UserError):
    """A study-level problem (storage, sampler, seed study) named clearly."""


class StorageUnavailable(StudyError, RuntimeFailure):
    """The storage is named correctly but cannot be reached or opened (server down, no driver)."""

    exit_code = 1


class Stopped(SystemExit):
    """A signal ended the command (SIGTERM, SIGHUP, a repeated Ctrl-C): raised in the main thread, it
    unwinds like Ctrl-C, so that `with` blocks and the exit hook stop every server. Exit status
    128 + the signal's number, the shell's convention."""

    def __init__(self, signum: int):
        super().__init__(128 + int(signum))
        self.signum = int(signum)

    @property
    def signal_name(self) -> str:
        import signal

        return signal.Signals(self.signum).name
