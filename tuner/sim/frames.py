"""How the simulated server writes one answer, per API, as vLLM writes it: the chunks of a stream (the first,
each token's, the closing ones) and the whole body of an answer that is not streamed. The HTTP front
(http.py) times the tokens; a frame object only says what each looks like.
"""

from __future__ import annotations

import json
import time
import uuid


def _sse(data: dict, event: str | None = None) -> str:
    text = json.dumps(data, separators=(",", ":"))
    return f"event: {event}\ndata: {text}" if event else f"data: {text}"


class ChoiceFrames:
    """A completions or chat completions answer as vLLM writes it: chunks with `choices`, the usage chunk
    when stream_options.include_usage asks, then [DONE]."""

    def __init__(self, model: str, prompt_len: int, max_tokens: int, chat: bool, stream: bool, include_usage: bool,
                 fingerprint: str | None):
        self.chat, self.max_tokens = chat, max_tokens
        self.rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.kind = "chat.completion" if chat else "text_completion"
        self.head = {"id": self.rid, "object": self.kind + (".chunk" if chat and stream else ""),
                     "created": int(time.time()), "model": model}
        self.usage = {"prompt_tokens": prompt_len, "total_tokens": prompt_len + max_tokens,
                      "completion_tokens": max_tokens}
        self.include_usage, self.fingerprint = include_usage, fingerprint

    def token(self, value: int, text: str) -> list[str]:
        last = value == self.max_tokens
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None,
                      "finish_reason": "length" if last else None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length" if last else None,
                      "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
        out = [_sse({**self.head, "choices": [choice]})]
        if self.chat and value == 1:  # vLLM's first chat chunk announces the role, with empty content
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            out.insert(0, _sse({**self.head, "choices": [role]}))
        return out

    def closing(self, text: str) -> list[str]:
        out = []
        if self.include_usage:
            extra = {"system_fingerprint": self.fingerprint} if self.fingerprint else {}
            out.append(_sse({**self.head, "choices": [], "usage": self.usage, **extra}))
        return out + ["data: [DONE]"]

    def whole(self, text: str) -> dict:
        choice = {"index": 0, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice.update(text=text, prompt_logprobs=None)
        return {**self.head, "object": self.kind, "choices": [choice], "usage": self.usage}


class ResponsesFrames:
    """A /v1/responses answer as vLLM 0.32 streams it: typed events, each `event:` then `data:` with a
    sequence number; the output text in deltas; response.completed (status incomplete: the simulator always
    stops at max_output_tokens) with the usage; no [DONE]."""

    def __init__(self, model: str, prompt_len: int, max_tokens: int):
        self.rid = f"resp_{uuid.uuid4().hex[:16]}"
        self.item = f"msg_{uuid.uuid4().hex[:16]}"
        self.prompt_len, self.max_tokens, self.model = prompt_len, max_tokens, model
        self.created = int(time.time())
        self.seq = 0

    def _event(self, kind: str, **fields) -> str:
        data = {**fields, "sequence_number": self.seq, "type": kind}
        self.seq += 1
        return _sse(data, kind)

    def _response(self, status: str, text: str | None = None) -> dict:
        done = status != "in_progress"
        return {"id": self.rid, "created_at": self.created, "object": "response", "model": self.model,
                "incomplete_details": {"reason": "max_output_tokens"} if done else None,
                "max_output_tokens": self.max_tokens, "status": "incomplete" if done else status,
                "output": [self._item(text)] if done else [],
                "usage": {"input_tokens": self.prompt_len, "output_tokens": self.max_tokens,
                          "total_tokens": self.prompt_len + self.max_tokens} if done else None}

    def _item(self, text: str | None) -> dict:
        content = [] if text is None else [{"annotations": [], "text": text, "type": "output_text", "logprobs": None}]
        return {"id": self.item, "content": content, "role": "assistant",
                "status": "in_progress" if text is None else "completed", "type": "message"}

    def token(self, value: int, text: str) -> list[str]:
        out = []
        if value == 1:
            out += [self._event("response.created", response=self._response("in_progress")),
                    self._event("response.in_progress", response=self._response("in_progress")),
                    self._event("response.output_item.added", item=self._item(None), output_index=0),
                    self._event("response.content_part.added", content_index=0, item_id=self.item, output_index=0,
                                part={"annotations": [], "text": "", "type": "output_text", "logprobs": []})]
        out.append(self._event("response.output_text.delta", content_index=0, delta=text, item_id=self.item,
                               logprobs=[], output_index=0))
        return out

    def closing(self, text: str) -> list[str]:
        part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
        return [self._event("response.output_text.done", content_index=0, item_id=self.item, logprobs=[],
                            output_index=0, text=text),
                self._event("response.content_part.done", content_index=0, item_id=self.item, output_index=0,
                            part=part),
                self._event("response.output_item.done", item=self._item(text), output_index=0),
                self._event("response.completed", response=self._response("completed", text))]

    def whole(self, text: str) -> dict:
        return self._response("completed", text)
