"""The simulator's /tokenize and /detokenize, on its own token count (http.count_text_tokens).

vLLM serves /tokenize (a prompt, or chat messages rendered in the model's template) and /detokenize; clients
size chat text with them when they have no tokenizer on disk (tuner.load.servertok), and render a custom
dataset's prompts in the chat template. The simulator has no vocabulary, only a count: words and marks
(`\\w+`, one non-space mark), a word over 8 characters counting twice. So its ids are made to agree with
that count (http.count_text_tokens) both ways:

* the words `t` + letters (`tb`, `tbaa`, ...) are ids themselves (base 26), so any id decodes to a word
  that encodes back to it;
* any other word gets an id from its hash, remembered (id -> word) so that /detokenize gives it back;
  a long word is its id and a continuation id that decodes to nothing (so the id a long word was given
  decodes to two tokens: the one id that does not come back alone);
* decoded words are joined by single spaces: the count is kept, the original spacing is not.

A chat message renders as `[ role ] content .`: the 4 tokens per message the simulator counts for chat.
"""

from __future__ import annotations

import re
import string
import zlib

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\w+")
_SYNTHETIC = re.compile(r"t([a-z]{1,6})")
LONG = 8  # a word longer than this counts twice (count_text_tokens)


def _letters(i: int) -> str:
    out = ""
    while True:
        i, r = divmod(i, 26)
        out = string.ascii_lowercase[r] + out
        if i == 0:
            return out


def _number(letters: str) -> int:
    n = 0
    for c in letters:
        n = n * 26 + string.ascii_lowercase.index(c)
    return n


class SimTokenizer:
    def __init__(self, vocab: int) -> None:
        if vocab < 2:
            raise ValueError(f"a vocabulary of {vocab} ids is too small")
        self.vocab = vocab
        self.continuation = vocab - 1  # the second token of a long word: decodes to nothing
        self._learned: dict[int, str] = {}
        self._ids: dict[str, int] = {}

    def _id(self, word: str) -> int:
        m = _SYNTHETIC.fullmatch(word)
        if m and (n := _number(m.group(1))) < self.continuation and n not in self._learned:
            return n
        if word in self._ids:
            return self._ids[word]
        i = zlib.crc32(word.encode()) % self.continuation
        for _ in range(self.continuation):  # the next free id: a word keeps its id for the server's life
            if i not in self._learned:
                break
            i = (i + 1) % self.continuation
        self._learned[i], self._ids[word] = word, i
        return i

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in _TOKEN.findall(text):
            ids.append(self._id(word))
            if len(word) > LONG:
                ids.append(self.continuation)
        return ids

    def decode(self, ids: list[int]) -> str:
        words = []
        for i in ids:
            if not 0 <= i < self.vocab:
                raise ValueError(f"Token id {i} is out of vocabulary")
            if i != self.continuation:
                words.append(self._learned.get(i) or "t" + _letters(i))
        return " ".join(words)


def message_texts(messages) -> list[tuple[str, str]] | None:
    """(role, text) of each chat message, a list of content parts' texts joined by spaces (which keeps
    their token count); None when the messages are malformed."""
    if not isinstance(messages, list) or not messages:
        return None
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            return None
        out.append((str(m.get("role") or "user"), content))
    return out


def render_chat(messages) -> str | None:
    """Chat messages as the simulator's template renders them (None when they are malformed): 4 tokens of
    markup around each message's text, as http._chat_prompt_tokens counts it."""
    texts = message_texts(messages)
    if texts is None:
        return None
    return " ".join(f"[ {_role(role)} ] {text} ." for role, text in texts)


def _role(role: str) -> str:
    """One token: a word of at most LONG characters (a role of other marks renders as user)."""
    return role[:LONG] if _WORD.fullmatch(role) else "user"
