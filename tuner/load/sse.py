"""The streamed response of one request, read as vLLM's benchmark client reads it: SSE lines from
arbitrary network chunks, and the per-request timing (TTFT, per-chunk ITL), texts, usage and error
events they carry. No I/O here: the load client feeds bytes and arrival times (tuner/load/client.py), the
metrics read the recorder (tuner/load/metrics.py)."""

from __future__ import annotations

import json
from typing import Any

import orjson

ERROR_EXCERPT = 300  # characters of a server's error text kept per request
_loads = orjson.loads  # orjson: ~3x faster per chunk than json (the client's hot path)


class SSELineSplitter:
    """Reassembles lines from arbitrary network chunks (a line may span many reads).

    Lines end with ``\\n`` (a preceding ``\\r`` is dropped). We split bytes, not text: the
    newline byte never occurs inside a UTF-8 multi-byte sequence, so a split read cannot break
    a character. There is no line-length cap (long prompts echoed back stay parseable).
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed_bytes(self, data: bytes) -> list[bytes]:
        """Complete lines as bytes (the hot path: no copy when a read ends on a line end)."""
        if self._buf:
            data = self._buf + data
            self._buf = b""
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n")
            if cut < 0:
                self._buf = data
                return []
            self._buf, data = data[cut + 1:], data[:cut]
        else:
            data = data[:-1]
        return data.split(b"\n")

    def feed(self, data: bytes) -> list[str]:
        return [ln.rstrip(b"\r").decode("utf-8", errors="replace") for ln in self.feed_bytes(data)]

    def finish(self) -> list[str]:
        """The unterminated last line, if the stream ended without a newline."""
        rest, self._buf = self._buf, b""
        return [rest.rstrip(b"\r").decode("utf-8", errors="replace")] if rest.strip() else []


def sse_data(line: str) -> str | None:
    """The payload of a ``data:`` line, else None (blank lines, ``:`` comments, other fields)."""
    if not line.startswith("data:"):
        return None
    payload = line[5:]
    return payload[1:] if payload.startswith(" ") else payload


def error_text(err: Any) -> str:
    """The human message of an OpenAI/vLLM error object (``{"message": ..., "type": ...}``)."""
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or err.get("msg")
        if msg:
            return str(msg)
        if isinstance(err.get("error"), (dict, str)):
            return error_text(err["error"])
        return json.dumps(err)[:ERROR_EXCERPT]
    return str(err)


class StreamRecorder:
    """Per-request timing state; fed (line, arrival time) pairs, so it is testable offline."""

    __slots__ = ("start", "ttft", "itl", "last_token_ts", "chunks", "text", "usage", "done",
                 "stream_errors", "chat", "keep_text")

    def __init__(self, start: float, chat: bool = False, keep_text: bool = True) -> None:
        self.start = start
        self.ttft: float | None = None
        self.itl: list[float] = []
        self.last_token_ts = start
        self.chunks = 0
        self.text: list[str] = []
        self.usage: dict | None = None
        self.done = False
        self.stream_errors: list[str] = []
        self.chat = chat  # chat chunks carry choices[0].delta.content, completions choices[0].text
        self.keep_text = keep_text  # False: token chunks are counted, not parsed (generated_text stays "")

    def on_lines(self, lines: list[bytes], ts: float) -> None:
        """Every line of one socket read, all stamped with that read's arrival time.

        The hot path of the client: a token chunk (``"choices":[{``, with no ``usage`` and no
        ``error`` key) is counted without being parsed; its text is parsed only when the caller
        keeps texts (``keep_text``). Anything else (usage, errors, an empty choices list) is parsed.
        A JSON string cannot hide these patterns: its quotes are escaped.
        """
        for line in lines:
            if line[:5] != b"data:":
                continue
            payload = line[5:].strip()
            if (not self.keep_text and (b'"choices":[{' in payload or b'"choices": [{' in payload)
                    and b'"usage":' not in payload and b'"error"' not in payload):
                self._token(ts)
            else:
                self._on_payload(payload, ts)

    def on_line(self, line: str | bytes, ts: float) -> None:
        if isinstance(line, str):
            line = line.encode()
        if line.startswith(b"data:"):
            self._on_payload(line[5:].strip(), ts)

    def _token(self, ts: float) -> None:
        """A chunk with a token at `ts`: the first sets TTFT, the others add an inter-token latency."""
        if self.ttft is None:
            self.ttft = ts - self.start
        else:
            self.itl.append(ts - self.last_token_ts)
        self.last_token_ts = ts
        self.chunks += 1

    def _on_payload(self, payload: bytes, ts: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        if not payload:
            return
        try:
            msg = _loads(payload)
        except ValueError as e:
            raise ValueError(f"invalid JSON in SSE data ({e}): {payload[:80]!r}") from None
        if type(msg) is not dict:
            return
        choices = msg.get("choices")
        if choices:
            self._token(ts)
            c = choices[0]
            text = (c.get("delta") or {}).get("content") if self.chat else c.get("text")
            if text:
                self.text.append(text)
        usage = msg.get("usage")
        if type(usage) is dict:
            self.usage = usage  # last one wins (continuous usage stats are cumulative)
        if "error" in msg:
            self.stream_errors.append(error_text(msg["error"])[:ERROR_EXCERPT])


# ---- The client
