"""The streamed response of one request, read as vLLM's benchmark client reads it: SSE lines from
arbitrary network chunks, and the per-request timing (TTFT, per-chunk ITL), texts, usage and error
events they carry. No I/O here: the load client feeds bytes and arrival times (tuner/load/client.py), the
metrics read the recorder (tuner/load/metrics.py).

Three stream shapes (vllm/benchmarks/lib/endpoint_request_func.py of vLLM 0.32):

* completions: every ``data:`` message with a non-empty ``choices`` is a token chunk (``choices[0].text``);
* chat completions: the same, the text in ``choices[0].delta.content``;
* responses (/v1/responses): typed events, each ``event: <type>`` then ``data: {..., "type": <type>}``.
  Token chunks are ``response.output_text.delta`` and ``response.reasoning_text.delta`` (the server is
  decoding while it reasons); the request ends with ``response.completed`` or ``response.incomplete``
  (``max_output_tokens`` reached), whose ``response.usage`` says ``input_tokens`` and ``output_tokens``;
  ``error`` and ``response.failed`` are failures. No ``[DONE]``: a stream without its terminal event was cut.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

ERROR_EXCERPT = 300  # characters of a server's error text kept per request
KINDS = ("completions", "chat", "responses")
RESPONSES_TOKEN_EVENTS = frozenset({"response.output_text.delta", "response.reasoning_text.delta"})
RESPONSES_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})
RESPONSES_ERROR_EVENTS = frozenset({"error", "response.failed"})
# A token event's bytes as vLLM writes them ("type" is a key of the event object; inside a JSON string
# its quotes would be escaped, so the pattern cannot come from generated text)
_RESPONSES_TOKEN_MARKS = tuple(f'"type":"{t}"'.encode() for t in RESPONSES_TOKEN_EVENTS) + tuple(
    f'"type": "{t}"'.encode() for t in RESPONSES_TOKEN_EVENTS)
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
                 "stream_errors", "kind", "keep_text")

    def __init__(self, start: float, kind: str = "completions", keep_text: bool = True) -> None:
        if kind not in KINDS:
            raise ValueError(f"stream kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.start = start
        self.ttft: float | None = None
        self.itl: list[float] = []
        self.last_token_ts = start
        self.chunks = 0
        self.text: list[str] = []
        self.usage: dict | None = None
        self.done = False  # [DONE], or a responses stream's terminal event
        self.stream_errors: list[str] = []
        self.kind = kind
        self.keep_text = keep_text  # False: token chunks are counted, not parsed (generated_text stays "")

    def on_lines(self, lines: list[bytes], ts: float) -> None:
        """Every line of one socket read, all stamped with that read's arrival time.

        The hot path of the client: a token chunk (``"choices":[{``, with no ``usage`` and no
        ``error`` key) is counted without being parsed; its text is parsed only when the caller
        keeps texts (``keep_text``). Anything else (usage, errors, an empty choices list) is parsed.
        A JSON string cannot hide these patterns: its quotes are escaped.
        """
        responses = self.kind == "responses"
        for line in lines:
            if line[:5] != b"data:":
                continue
            payload = line[5:].strip()
            if self.keep_text:
                self._on_payload(payload, ts)
            elif responses:
                if any(m in payload for m in _RESPONSES_TOKEN_MARKS) and b'"error"' not in payload:
                    self._token(ts)
                else:
                    self._on_payload(payload, ts)
            elif ((b'"choices":[{' in payload or b'"choices": [{' in payload)
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
        if self.kind == "responses":
            self._on_event(msg, ts)
            return
        choices = msg.get("choices")
        if choices:
            self._token(ts)
            c = choices[0]
            text = (c.get("delta") or {}).get("content") if self.kind == "chat" else c.get("text")
            if text:
                self.text.append(text)
        usage = msg.get("usage")
        if type(usage) is dict:
            self.usage = usage  # last one wins (continuous usage stats are cumulative)
        if "error" in msg:
            self.stream_errors.append(error_text(msg["error"])[:ERROR_EXCERPT])

    def _on_event(self, msg: dict, ts: float) -> None:
        """One event of a /v1/responses stream (only token events advance the request's end)."""
        kind = msg.get("type")
        if kind in RESPONSES_TOKEN_EVENTS:
            self._token(ts)
            if kind == "response.output_text.delta" and msg.get("delta"):
                self.text.append(msg["delta"])  # reasoning is timed, not kept (vLLM's client does the same)
        elif kind in RESPONSES_TERMINAL_EVENTS:
            self.done = True
            usage = (msg.get("response") or {}).get("usage")
            if type(usage) is dict:  # in the completions' names, which the outcome reads
                self.usage = {"prompt_tokens": usage.get("input_tokens"),
                              "completion_tokens": usage.get("output_tokens")}
        elif kind in RESPONSES_ERROR_EVENTS or msg.get("error"):
            err = msg.get("error") or (msg.get("response") or {}).get("error") or msg
            self.stream_errors.append(error_text(err)[:ERROR_EXCERPT])


# ---- The client
