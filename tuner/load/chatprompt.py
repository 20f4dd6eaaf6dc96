"""Chat prompts of a known length, sized the way `vllm bench serve` (0.32.0) sizes them.

vLLM's random dataset with ``--backend openai-chat`` sends text, not token ids: it takes
``input_len - tokenizer.num_special_tokens_to_add()`` ids, decodes them, re-encodes the text
without special tokens and, up to ten times, cuts what came out too long or appends random ids to
what came out too short (``gen_prompt_decode_to_target_len``). The chat template is *not* counted
on the client: the server renders it around the text and its tokens come on top (a Llama-style
template adds about a dozen), as they do for vLLM's own client, whose input tokens are the
server's ``usage.prompt_tokens`` (ours too). :class:`ChatText` does the same with the tokenizer
tuner.load.servertok chose: ``tokenizer.json`` read by the ``tokenizers`` library, or the server's
own when the two disagree (transformers rebuilds some tokenizer classes); appended ids are drawn
from the non-special ids (vLLM draws from the whole vocabulary, special ids included).

Without a tokenizer on disk the server's /tokenize and /detokenize size the text (servertok.server_only);
a server without them leaves synthetic words (tuner.load.client.synthetic_text) whose token count
depends on the server's tokenizer: :data:`UNCONTROLLED` says so, once per run.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from .servertok import LocalTokenizer
from .tokenizer import Vocab

MAX_RETRY = 10  # vLLM's gen_prompt_decode_to_target_len default

UNCONTROLLED = ("chat prompts: no tokenizer found offline for {name!r}, so their length is not controlled "
                "(synthetic words; the server's tokenizer and chat template decide the count, often "
                "several times --random-input-len); give --tokenizer PATH to size them as vLLM's client does")


class ChatText:
    """``text(ids)``: a text of ``len(ids) - num_special`` tokens by ``tok`` (default: the vocabulary's
    ``tokenizer.json``); ``tok`` has ``encode(text)`` and ``decode(ids)`` (tuner.load.servertok).
    ``ids``: with no vocabulary on disk (the server's tokenizer alone), the ids text is drawn from; a
    prompt's ids are mapped into them, so every id decodes."""

    def __init__(self, vocab: Vocab | None, tok=None, num_special: int | None = None,
                 ids: Sequence[int] = ()) -> None:
        if tok is None and (vocab is None or vocab.folder is None):
            raise ValueError("ChatText needs a tokenizer read from a folder, or the server's")
        self.tok = tok if tok is not None else LocalTokenizer(vocab)
        self.num_special = int(self.tok.num_special() if num_special is None else num_special)
        if ids:
            allowed = np.asarray(sorted(set(ids)), dtype=np.int64)
        else:
            allowed = np.arange(vocab.size, dtype=np.int64)
            if vocab.special_ids:
                allowed = np.setdiff1d(allowed, np.fromiter(vocab.special_ids, dtype=np.int64))
        self._allowed = allowed
        self._mapped = bool(ids)
        self.mismatch = 0  # tokens over (+) or under (-) the targets after the retries, as vLLM counts

    def target(self, n_ids: int) -> int:
        """Tokens of text for a prompt of ``n_ids``: vLLM leaves room for the tokenizer's own specials."""
        return max(0, int(n_ids) - self.num_special)

    def text(self, ids: Sequence[int]) -> str:
        target = self.target(len(ids))
        seq = [int(i) for i in ids[:target]]
        if self._mapped:
            seq = self._allowed[np.asarray(seq, dtype=np.int64) % len(self._allowed)].tolist()
        # vLLM uses its dataset's generator; ours is seeded by the ids, so a prompt is the same every run
        rng = np.random.default_rng(zlib.crc32(np.asarray(seq, dtype=np.int64).tobytes()))
        extra = lambda k: self._allowed[rng.integers(0, len(self._allowed), size=k)].tolist()  # noqa: E731
        text, seq = decode_to_target(self.tok, seq, target, extra)
        self.mismatch += len(seq) - target
        return text

    def count(self, text: str) -> int:
        """The text's own tokens (no specials): what the template's content adds to the server's count."""
        return len(self.tok.encode(text))


def decode_to_target(tok, seq: list[int], target: int, extra) -> tuple[str, list[int]]:
    """vLLM's ``gen_prompt_decode_to_target_len``: decode, re-encode without specials and, up to
    MAX_RETRY times, cut what is too long or append ``extra(k)`` ids to what is too short.
    ``tok`` has ``decode(ids)`` (specials kept) and ``encode(text)`` (no specials added).
    Returns the text and its ids (``len(ids) - target`` is the mismatch vLLM warns of)."""
    left = MAX_RETRY
    while True:
        text = tok.decode(seq)
        seq = tok.encode(text)
        if left <= 0 or len(seq) == target:
            return text, seq
        seq = seq + extra(target - len(seq)) if len(seq) < target else seq[:target]
        left -= 1


class VllmText:
    """Prompt text for vLLM's random-mm dataset, drawn as its client draws it: extra ids come from the
    dataset's own generator over the whole vocabulary, so the draws that follow (the images) stay in
    step with vLLM's for the same seed and tokenizer. ``tok`` sizes the text (default: the
    vocabulary's ``tokenizer.json``; the server's when the two disagree)."""

    def __init__(self, vocab: Vocab, tok=None, num_special: int | None = None) -> None:
        if vocab.folder is None:
            raise ValueError("VllmText needs a tokenizer read from a folder")
        local = LocalTokenizer(vocab)
        self.tok = tok if tok is not None else local
        self.vocab_size = vocab.size
        self.num_special = int(self.tok.num_special() if num_special is None else num_special)
        # random-mm keeps out the added tokens marked special (image placeholders among them), no others
        special = [i for i, t in local.tok.get_added_tokens_decoder().items() if t.special]
        allowed = np.arange(self.vocab_size, dtype=np.int64)
        self.allowed_ids = np.setdiff1d(allowed, np.asarray(special, dtype=np.int64)) if special else allowed
        self.source = getattr(self.tok, "source", vocab.source)

    def __call__(self, ids: list[int], target: int, rng: np.random.Generator) -> tuple[str, list[int]]:
        extra = lambda k: rng.integers(0, self.vocab_size, size=k).tolist()  # noqa: E731
        return decode_to_target(self.tok, list(ids), target, extra)


def choose_sizer(vocab: Vocab, base_url: str | None, model: str | None, headers=None, input_len: int = 64,
                 seed: int = 0, verify_tls: bool = True):
    """The tokenizer chat text is sized with (tuner.load.servertok.Choice): ``tokenizer.json`` when the
    server at ``base_url`` counts a few prompts sized by it (and the specials it adds) the same, else
    the server's own. Blocking (HTTP): run it in a thread from async code."""
    from .servertok import CHECKED_PROMPTS, ServerTokenizer, choose
    from .workload import RandomWorkload

    local = LocalTokenizer(vocab)
    server = ServerTokenizer(base_url, model or "", headers, verify_tls=verify_tls) if base_url else None
    probe = RandomWorkload(max(16, int(input_len)), 1, num_prompts=CHECKED_PROMPTS, seed=seed, vocab_size=vocab.size,
                           reserved_ids=0, excluded_ids=vocab.special_ids)
    sample = ChatText(vocab, local)
    texts = [sample.text(spec.prompt) for spec in probe.requests()]
    return choose(local, server, texts)
