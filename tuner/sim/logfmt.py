"""Log lines shaped like the chosen release's (docs/bucketing.md section D, tests/data/log-samples/).

Fork <= 1.20 prints `INFO 08-02 17:38:43 habana_model_runner.py:1206] msg`; newer vLLM prints
`INFO 07-07 19:15:38 [hpu_model_runner.py:2679] msg`. vllm-gaudi writes its [Warmup] progress through
tqdm, with no logger prefix: `[Warmup]` lines (tqdm.write, with VLLM_DEVELOPER_MODE) or, its default,
only the `Prompt warmup processing: ..` bars redrawn with a carriage return (`tqdm_meter`, `SimLog.bar`).
Timestamps are simulated wall-clock time: the start instant plus the simulated seconds elapsed, whatever
the time scale, so a compressed run's log reads like a real one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


def format_bytes(size: float) -> str:
    """The Habana utility's rendering: powers of 1024, up to 4 significant digits ("7.923 GiB")."""
    power, n = 1024, 0
    labels = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti"}
    while abs(size) > power and n < 4:
        size /= power
        n += 1
    return f"{size:.4g} {labels[n]}B"


@dataclass(frozen=True)
class Style:
    bracket: bool  # `[file:line]` (newer vLLM) or `file:line]` (fork <= 1.20)
    runner: str
    worker: str
    executor: str
    graph_phase: tuple[str, str]  # how capture lines name the phases
    tqdm_warmup: bool = False  # [Warmup] lines without a logger prefix (vllm-gaudi)


# Line numbers are the ones in the samples where a sample exists; elsewhere plausible values.
_HABANA = {"load": 430, "wrap": 438, "loaded": 442, "profile": 134, "free": 158, "blocks": 85, "cache": 190,
           "buckets": 493, "generated": 499, "warmup": 1066, "budget": 1159, "summary": 1128, "finished": 1206,
           "init_cache": 91, "not_warmed": 1340, "skip": 1059, "preempt": 1211, "metrics": 406, "api": 242, "args": 326,
           "sampler": 3347, "kv_size": 716, "init_engine": 402, "bucket_fallback": 203}
_HPU = {**_HABANA, "load": 649, "wrap": 657, "loaded": 661, "profile": 182, "free": 208, "blocks": 87,
        "cache": 240, "buckets": 36, "generated": 85, "warmup": 2679, "budget": 2813, "summary": 2777,
        "finished": 2893, "init_cache": 93, "not_warmed": 1958, "skip": 2665}

STYLES: dict[str, Style] = {
    "fork-habana": Style(False, "habana_model_runner.py", "habana_worker.py", "habana_executor.py",
                         ("Graph/Prompt", "Graph/Decode")),
    "fork-hpu-old": Style(False, "hpu_model_runner.py", "hpu_worker.py", "hpu_executor.py",
                          ("Graph/Prompt", "Graph/Decode")),
    "fork-hpu": Style(True, "hpu_model_runner.py", "hpu_worker.py", "hpu_executor.py",
                      ("Graph/Prompt", "Graph/Decode")),
    "fork-3d": Style(True, "hpu_model_runner.py", "hpu_worker.py", "hpu_executor.py",
                     ("Graph/prompt", "Graph/decode")),
    "gaudi": Style(True, "hpu_model_runner.py", "hpu_worker.py", "hpu_worker.py",
                   ("Graph/Prompt", "Graph/Decode"), tqdm_warmup=True),
}

# Which module logs a given event, when it is not the runner.
_FILE_OF = {"profile": "worker", "free": "worker", "cache": "worker", "blocks": "executor",
            "init_cache": "executor"}
_OTHER_FILES = {"preempt": "scheduler.py", "metrics": "metrics.py", "api": "api_server.py", "args": "utils.py",
                "bucket_fallback": "common.py"}


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def tqdm_meter(desc: str, n: int, total: int, elapsed: float, postfix: str | None = None, unit: str = "item") -> str:
    """One tqdm redraw as tqdm 4.x draws it: `desc: pct%|bar| n/total [elapsed<remaining, rate(, postfix)]`,
    the rate in `s/item` below one item a second, `?item/s` before the first item (tqdm's std.format_meter)."""
    bar = "█" * int(10 * n / max(total, 1))
    rate = n / elapsed if n and elapsed > 0 else None
    if rate is None:
        speed, left = f"?{unit}/s", "?"
    else:
        speed = f"{1 / rate:5.2f}s/{unit}" if rate < 1 else f"{rate:5.2f}{unit}/s"
        left = _clock((total - n) / rate)
    head = desc if desc.endswith(": ") else desc + ": "
    return (f"{head}{100 * n / max(total, 1):3.0f}%|{bar:<10}| {n}/{total} [{_clock(elapsed)}<{left}, {speed}"
            + (f", {postfix}" if postfix else "") + "]")


class SimLog:
    """Writes release-shaped lines; `clock()` gives the simulated seconds since `start_wall`."""

    def __init__(self, style: str, clock: Callable[[], float], start_wall: float | None = None,
                 out: TextIO | None = None, err: TextIO | None = None, sink: list | None = None):
        self.style = STYLES[style]
        self.style_name = style
        self.clock = clock
        self.start_wall = time.time() if start_wall is None else start_wall
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.sink = sink  # tests: every line, in order, without writing anywhere

    def stamp(self) -> str:
        return time.strftime("%m-%d %H:%M:%S", time.localtime(self.start_wall + self.clock()))

    def where(self, key: str, file: str | None = None) -> str:
        lines = _HABANA if self.style_name == "fork-habana" else _HPU
        if file is None:
            file = _OTHER_FILES.get(key) or getattr(self.style, _FILE_OF.get(key, "runner"))
        loc = f"{file}:{lines.get(key, 100)}"
        return f"[{loc}]" if self.style.bracket else f"{loc}]"

    def log(self, level: str, key: str, msg: str, file: str | None = None) -> str:
        line = f"{level} {self.stamp()} {self.where(key, file)} {msg}"
        self._write(self.out, line)
        return line

    def info(self, key: str, msg: str, file: str | None = None) -> str:
        return self.log("INFO", key, msg, file)

    def warning(self, key: str, msg: str, file: str | None = None) -> str:
        return self.log("WARNING", key, msg, file)

    def error(self, key: str, msg: str, file: str | None = None) -> str:
        return self.log("ERROR", key, msg, file)

    def raw(self, msg: str, stderr: bool = False) -> str:
        """A line printed without the logger (tqdm, uvicorn, tracebacks)."""
        self._write(self.err if stderr else self.out, msg)
        return msg

    def bar(self, text: str, final: bool = False) -> None:
        """A tqdm redraw on stderr: `\r` + the bar, no newline until the bar closes (tests' sink: the whole
        physical line once it is closed)."""
        if self.sink is not None:
            self._bar_line = getattr(self, "_bar_line", "") + "\r" + text
            if final:
                self.sink.append(self._bar_line)
                self._bar_line = ""
            return
        try:
            self.err.write("\r" + text + ("\n" if final else ""))
            self.err.flush()
        except (BrokenPipeError, ValueError):
            pass

    def _write(self, stream: TextIO, line: str) -> None:
        if self.sink is not None:
            self.sink.append(line)
            return
        try:
            stream.write(line + "\n")
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass  # the reader went away; the server keeps its own behaviour
