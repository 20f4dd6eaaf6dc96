"""The `bucket-tuner` command line: thin; every command lives in tuner/commands/ and calls into a module.

It is also the one place where errors meet the user (see tuner/vocabulary/errors/): an expected failure is
one line, `bucket-tuner COMMAND: error: ...`, exit 2 for a bad argument or input file and 1 for a
failure of the surroundings; a traceback only with --debug or BUCKET_TUNER_DEBUG=1. Anything
unexpected also gets one line, saying where its full trace was written.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import os
import signal
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from .commands import bench, buckets, calc, compare, doctor, explain, export, fit, models, plan, report, sim, tune
from .serve.redact import redact_argv, redact_env
from .study.storage import url_password
from .vocabulary.errors import Stopped, TunerError
from .vocabulary.errors.disk import DISK_ERRNOS, disk_error

DEBUG_ENV = "BUCKET_TUNER_DEBUG"
_PACKAGE_DIR = Path(__file__).resolve().parent
_NO_DEBUG_FLAG = {"sim-serve"}  # passes every argument to the simulator's own parser
_OWN_SIGNALS = {"sim-serve"}  # the simulator handles its signals itself


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bucket-tuner",
        description="Measured tuning of vLLM-on-Gaudi bucket, graph-memory and batching settings.",
        epilog=f"Errors are one line (exit 2: bad argument or input file; 1: server, storage or disk "
               f"failed). --debug (or {DEBUG_ENV}=1) shows the traceback. Output files go where you "
               "point them; missing parent folders are created and named on stderr.",
    )
    parser.add_argument("--debug", action="store_true", help=f"show tracebacks (or set {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (tune, plan, report, export, compare, bench, buckets, calc, fit, explain, doctor, models, sim):
        module.register(sub)
    for name, subparser in sub.choices.items():
        if name not in _NO_DEBUG_FLAG:  # accepted after the command too; SUPPRESS keeps the top-level value
            subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                   help=f"show tracebacks (or set {DEBUG_ENV}=1)")
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args, but an unknown flag is refused by its subcommand's own usage with the flags it resembles
    (argparse would print the top-level usage and no suggestion)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
        command = sub.choices[args.command]
        flags = [f for action in command._actions for f in action.option_strings]  # noqa: SLF001
        hints = []
        for word in extra:
            if word.startswith("-"):
                close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=2, cutoff=0.6)
                hints += [f"{word}: did you mean {' or '.join(close)}?"] if close else []
        # the short usage: the subcommand's full one runs to fifty lines for `tune`
        command.exit(2, f"usage: {command.prog} [options] ({command.prog} --help lists them)\n"
                        f"{command.prog}: error: unrecognized arguments: {' '.join(extra)}"
                        + ("; " + "; ".join(hints) if hints else "") + "\n")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(build_parser(), argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")
    previous = _stop_on_signals(args.command)
    try:
        return args.func(args)
    except Stopped as exc:  # SIGTERM / SIGHUP outside a study's own handling (tuner/study/interrupt.py)
        print(f"bucket-tuner {args.command}: stopped by {exc.signal_name}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bucket-tuner export ... | head`: the reader left; nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # the boundary: every failure leaves here as one line
        return report_failure(exc, args.command, argv, debug)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_on_signals(command: str) -> dict:
    """SIGTERM, SIGHUP and a scheduler's job-ending warnings (study/interrupt.py WARNINGS) unwind the
    command like Ctrl-C (servers stopped on the way out) instead of killing it on the spot, and are heard
    at all when the tuner is a container's PID 1. Returns the handlers to restore (main() also runs
    inside tests)."""
    if command in _OWN_SIGNALS or threading.current_thread() is not threading.main_thread():
        return {}
    from .serve.process import install_signal_handlers
    from .study.interrupt import WARNINGS

    signals = (signal.SIGTERM, signal.SIGHUP, *WARNINGS)
    previous = {sig: signal.getsignal(sig) for sig in (*signals, signal.SIGINT)}
    install_signal_handlers(signals)
    if previous[signal.SIGINT] == signal.SIG_IGN:
        # Started as a shell's background job (`bucket-tuner tune ... &` in a script): SIGINT is ignored,
        # and an ignored signal stays ignored across exec, so every server started here would shrug off
        # the SIGINT a stop sends first. A handler that does nothing keeps the tuner deaf to it, as it
        # was started, and is reset to the default in each child.
        signal.signal(signal.SIGINT, _deaf)
    return previous


def _deaf(signum, frame) -> None:
    """SIGINT while the tuner was started with it ignored: still ignored (see _stop_on_signals)."""


def report_failure(exc: BaseException, command: str, argv: list[str], debug: bool) -> int:
    """Print the one-line error (and the traceback with --debug); return the exit status."""
    scrub = _scrubber(argv)
    trace = scrub("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    known = classify(exc)
    if debug:
        print(trace, file=sys.stderr, end="")
    if known is not None:
        code, message = known
        print(f"bucket-tuner {command}: error: {scrub(message)}", file=sys.stderr)
        return code
    where = _write_trace(trace, scrub(" ".join(redact_argv(argv))))
    said = f"the full trace is in {where}" if where else "no trace file could be written; re-run with --debug"
    print(f"bucket-tuner {command}: internal error: {type(exc).__name__}: {scrub(_one_line(exc))} "
          f"({said}; please include it in a bug report)", file=sys.stderr)
    return 1


def classify(exc: BaseException) -> tuple[int, str] | None:
    """(exit status, message) for an expected failure; None for a bug."""
    if isinstance(exc, TunerError):
        return exc.exit_code, _one_line(exc)
    if isinstance(exc, ValueError) and (_is_ours(type(exc)) or _raised_by_us(exc)):
        # Our modules' own error types (SpaceError, TraceFormatError, BucketConfigError, ...) and
        # the validation of our own code: a bad value the user gave.
        return 2, _one_line(exc)
    if _storage_failure(exc):  # a database that went away mid-run (server down, disk full, lock)
        cause = exc.__cause__ or exc
        text = _one_line(getattr(cause, "orig", None) or cause).split(" [SQL:")[0]
        return 1, f"the study storage failed: {text} (what was recorded so far is kept; re-run to resume)"
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:  # full, over quota, read-only, not allowed
        return 1, disk_error(exc).args[0]
    if isinstance(exc, OSError) and exc.filename is not None:
        user_side = isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError))
        target = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
        return (2 if user_side else 1), f"{target}: {exc.strerror or exc}"
    return None


def _is_ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "tuner"


def _storage_failure(exc: BaseException) -> bool:
    kinds = {(c.__module__.split(".")[0], c.__name__) for c in type(exc).__mro__}
    return bool(kinds & {("sqlalchemy", "OperationalError"), ("optuna", "StorageInternalError")})


def _raised_by_us(exc: BaseException) -> bool:
    """True when the innermost frame is in our package: our own validation, not a library's bug."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    try:
        return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE_DIR)
    except (OSError, ValueError):
        return False


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _scrubber(argv: list[str]):
    """Hide URL passwords (those on the command line, and any user:password@ form) in shown text."""
    secrets = {p for arg in argv if (p := url_password(arg.partition("=")[2] if arg.startswith("--") else arg))}

    def scrub(text: str) -> str:
        for secret in secrets:
            text = text.replace(secret, "***")
        return redact_env({"text": text})["text"]

    return scrub


def _write_trace(trace: str, command_line: str) -> Path | None:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        fd, name = tempfile.mkstemp(prefix=f"bucket-tuner-crash-{stamp}-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(f"bucket-tuner {command_line}\n\n{trace}")
        return Path(name)
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
