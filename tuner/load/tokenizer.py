"""Which token ids a prompt may use: the vocabulary read offline, or learned from the server.

vLLM's ``bench serve`` loads the tokenizer of ``--tokenizer`` (default: ``--model``) and draws prompt
ids from ``range(tokenizer.vocab_size)`` minus ``all_special_ids``. We do the same without
``transformers``: the ``tokenizers`` library reads ``tokenizer.json`` from a local folder or from the
Hugging Face cache, and nothing is ever downloaded (HF_HUB_OFFLINE semantics). ``vocab_size`` is the
base vocabulary (added tokens excluded), as in Hugging Face's fast tokenizers; special ids are the
added tokens marked special plus those named in ``special_tokens_map.json``.

When no tokenizer can be found, :func:`probe_vocab_size` asks the server itself: a vLLM rejects an
id at or above its vocabulary with "Token id N is out of vocabulary", so a bisection over
one-token, one-output requests finds the first rejected id.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..vocabulary.errors import UserError

TOKENIZER_FILE = "tokenizer.json"
TEKKEN_FILE = "tekken.json"  # Mistral's own format (mistral_common), which some Mistral repositories ship alone
PROBE_MAX_ID = 1 << 22  # larger than any vocabulary in use (~4 M ids)
_OOV = re.compile(r"token id[^\d-]{0,20}(-?\d+)\D{0,40}out of (?:the )?vocab", re.IGNORECASE)


class VocabNotFound(Exception):
    """Neither a tokenizer nor the server told us the vocabulary; the message names the flags."""


@dataclass(frozen=True)
class Vocab:
    size: int                         # ids below this exist
    special_ids: frozenset[int] = field(default_factory=frozenset)  # kept out of prompts
    source: str = ""                  # where the figures came from, for the result file
    folder: str | None = None         # the tokenizer's folder, when read from one

    def describe(self) -> dict:
        return {"vocab_size": self.size, "special_ids": len(self.special_ids), "vocab_source": self.source}


def hf_cache_dirs() -> list[Path]:
    """The Hugging Face hub caches to look in, in huggingface_hub's order of precedence."""
    dirs = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]).expanduser())
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    dirs.append(Path(hf_home).expanduser() / "hub")
    return dirs


def _has_tokenizer(folder: Path) -> bool:
    return (folder / TOKENIZER_FILE).is_file() or (folder / TEKKEN_FILE).is_file()


def find_tokenizer_dir(name: str) -> Path | None:
    """A folder holding ``tokenizer.json`` (or Mistral's ``tekken.json``) for ``name``: the path itself, or its
    newest cached snapshot."""
    path = Path(name).expanduser()
    if path.is_file() and path.name in (TOKENIZER_FILE, TEKKEN_FILE):
        return path.parent
    if _has_tokenizer(path):
        return path
    if name.count("/") != 1 or path.exists():
        return None
    repo_dir = "models--" + name.replace("/", "--")
    for cache in hf_cache_dirs():
        snaps = cache / repo_dir / "snapshots"
        ref = cache / repo_dir / "refs" / "main"
        if ref.is_file():
            cand = snaps / ref.read_text().strip()
            if _has_tokenizer(cand):
                return cand
        found = sorted((p for p in snaps.glob("*") if _has_tokenizer(p)),
                       key=lambda p: p.stat().st_mtime, reverse=True) if snaps.is_dir() else []
        if found:
            return found[0]
    return None


def load_tekken(file: Path) -> Vocab:
    """Mistral's tekken.json as vLLM's MistralTokenizer reads it (mistral_common's Tekkenizer): the vocabulary
    is ``config.default_vocab_size`` ids, of which the first ``config.default_num_special_tokens`` are special.
    No folder: its text is not read here (chat text is then sized by the server)."""
    try:
        config = json.loads(file.read_text(encoding="utf-8"))["config"]
        size, special = int(config["default_vocab_size"]), int(config["default_num_special_tokens"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{file}: not a readable tekken.json ({type(e).__name__}: {e})") from None
    if not 0 <= special < size:
        raise UserError(f"{file}: {special} special tokens in a vocabulary of {size}")
    return Vocab(size=size, special_ids=frozenset(range(special)), source=f"tekken {file}")


def load_vocab(folder: Path) -> Vocab:
    """The base vocabulary size and special ids of the tokenizer in ``folder`` (read offline)."""
    if not (folder / TOKENIZER_FILE).is_file() and (folder / TEKKEN_FILE).is_file():
        return load_tekken(folder / TEKKEN_FILE)
    from tokenizers import Tokenizer  # light (a Rust wheel, no torch); imported only when needed

    tok = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    size = tok.get_vocab_size(with_added_tokens=False)
    special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    names_file = folder / "special_tokens_map.json"
    if names_file.is_file():
        try:
            names = json.loads(names_file.read_text())
        except ValueError:
            names = {}
        for value in names.values():
            for v in value if isinstance(value, list) else [value]:
                text = v.get("content") if isinstance(v, dict) else v
                tid = tok.token_to_id(text) if isinstance(text, str) else None
                if tid is not None:
                    special.add(tid)
    return Vocab(size=size, special_ids=frozenset(special), source=f"tokenizer {folder}", folder=str(folder))


def text_tools(vocab: Vocab | None):
    """(decode ids -> text, count tokens of a text) from the vocabulary's tokenizer, or (None, None)."""
    if vocab is None or vocab.folder is None:
        return None, None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(vocab.folder) / TOKENIZER_FILE))
    return (lambda ids: tok.decode([int(i) for i in ids])), (lambda text: len(tok.encode(text).ids))


def discover_vocab(*names: str | None) -> Vocab | None:
    """The vocabulary of the first of ``names`` (``--tokenizer``, then ``--model``) found offline."""
    for name in names:
        if not name:
            continue
        folder = find_tokenizer_dir(name)
        if folder is not None:
            return load_vocab(folder)
    return None


def oov_id(message: str) -> int | None:
    """The id a server's "Token id N is out of vocabulary" message names, else None."""
    m = _OOV.search(message or "")
    return int(m.group(1)) if m else None


class ServerRefused(VocabNotFound):
    """The first probe, token id 0, was refused: the request is wrong (route, model, API), not its ids."""


async def probe_vocab_size(try_ids: Callable[[list[int]], Awaitable[str | None]]) -> Vocab:
    """Bisect the first id the server rejects as out of vocabulary.

    ``try_ids(prompt)`` sends one request and returns the server's error text, or None when the
    request was accepted. Raises VocabNotFound when the server errors otherwise or accepts every id.
    """
    err = await try_ids([0])
    if err is not None:  # not the vocabulary: the request itself (its route, model or form) is refused
        raise ServerRefused(f"the server refused a one-token request: {err[:200]}")
    err = await try_ids([PROBE_MAX_ID])
    if err is None or oov_id(err) is None:
        why = "accepts every id" if err is None else f"answers {err[:200]!r}"
        raise VocabNotFound(f"cannot learn the vocabulary from the server (it {why})")
    lo, hi = 0, PROBE_MAX_ID  # lo accepted, hi rejected
    while hi - lo > 1:
        mid = (lo + hi) // 2
        err = await try_ids([mid])
        if err is None:
            lo = mid
        elif oov_id(err) is not None:
            hi = mid
        else:
            raise VocabNotFound(f"the server answered a probe with another error: {err[:200]}")
    return Vocab(size=hi, source="server probe (first id rejected as out of vocabulary)")


NO_VOCAB_HINT = ("give --tokenizer PATH_OR_HF_ID (a folder with tokenizer.json, or a model in the local "
                 "Hugging Face cache) or --vocab-size N")
