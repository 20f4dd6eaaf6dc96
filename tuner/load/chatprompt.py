"""Chat prompts of a known length, sized the way `vllm bench serve` (0.32.0) sizes them.

vLLM's random dataset with ``--backend openai-chat`` sends text, not token ids: it takes
``input_len - tokenizer.num_special_tokens_to_add()`` ids, decodes them, re-encodes the text
without special tokens and, up to ten times, cuts what came out too long or appends random ids to
what came out too short (``gen_prompt_decode_to_target_len``). The chat template is *not* counted
on the client: the server renders it around the text and its tokens come on top (a Llama-style
template adds about a dozen), as they do for vLLM's own client. :class:`ChatText` does the same
with the ``tokenizers`` library, so our chat prompts carry vLLM's token counts; appended ids are
drawn from the non-special ids (vLLM draws from the whole vocabulary, special ids included).

Without a tokenizer a chat prompt is synthetic words (tuner.load.client.synthetic_text) whose token
count depends on the server's tokenizer: :data:`UNCONTROLLED` says so, once per run.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .tokenizer import TOKENIZER_FILE, Vocab

MAX_RETRY = 10  # vLLM's gen_prompt_decode_to_target_len default

UNCONTROLLED = ("chat prompts: no tokenizer found offline for {name!r}, so their length is not controlled "
                "(synthetic words; the server's tokenizer and chat template decide the count, often "
                "several times --random-input-len); give --tokenizer PATH to size them as vLLM's client does")


class ChatText:
    """``text(ids)``: a text of ``len(ids) - num_special`` tokens by the tokenizer in ``vocab.folder``."""

    def __init__(self, vocab: Vocab) -> None:
        from tokenizers import Tokenizer  # a Rust wheel, no torch; imported only when chat needs it

        if vocab.folder is None:
            raise ValueError("ChatText needs a tokenizer read from a folder")
        self.tok = Tokenizer.from_file(str(Path(vocab.folder) / TOKENIZER_FILE))
        self.num_special = int(self.tok.num_special_tokens_to_add(False))
        allowed = np.arange(vocab.size, dtype=np.int64)
        if vocab.special_ids:
            allowed = np.setdiff1d(allowed, np.fromiter(vocab.special_ids, dtype=np.int64))
        self._allowed = allowed
        self.mismatch = 0  # tokens over (+) or under (-) the targets after the retries, as vLLM counts

    def target(self, n_ids: int) -> int:
        """Tokens of text for a prompt of ``n_ids``: vLLM leaves room for the tokenizer's own specials."""
        return max(0, int(n_ids) - self.num_special)

    def text(self, ids: Sequence[int]) -> str:
        target = self.target(len(ids))
        seq = [int(i) for i in ids[:target]]
        # vLLM uses its dataset's generator; ours is seeded by the ids, so a prompt is the same every run
        rng = np.random.default_rng(zlib.crc32(np.asarray(seq, dtype=np.int64).tobytes()))
        left = MAX_RETRY
        while True:
            text = self.tok.decode(seq, skip_special_tokens=False)
            seq = self.tok.encode(text, add_special_tokens=False).ids
            if left <= 0 or len(seq) == target:
                self.mismatch += len(seq) - target
                return text
            if len(seq) < target:
                seq = seq + self._allowed[rng.integers(0, len(self._allowed), size=target - len(seq))].tolist()
            else:
                seq = seq[:target]
            left -= 1

    def count(self, text: str) -> int:
        """The text's own tokens (no specials): what the template's content adds to the server's count."""
        return len(self.tok.encode(text, add_special_tokens=False).ids)
