"""The server's own tokenizer, through vLLM's ``/tokenize`` and ``/detokenize``, and the choice between it
and the local ``tokenizer.json`` for sizing chat prompts.

vLLM's client sizes chat text with ``transformers``, which does not always read ``tokenizer.json`` as
written: a class named in ``tokenizer_config.json`` may rebuild the pipeline (transformers 5's
``Qwen2Tokenizer`` brings its own normalizer and split pattern, ``LlamaTokenizer`` its own
pre-tokenizer), and explicit ``add_bos_token``/``add_eos_token`` flags replace the file's
post-processor (how many specials ``num_special_tokens_to_add`` reports). The server loads the
tokenizer the same way, so its ``/tokenize`` answers what vLLM's client counts. vLLM 0.32's client
asks the server too, for the random dataset: when the first prompt's count differs it re-aligns
(``_align_prompts_to_server_tokenizer``). We check the same way, before the run, and when the server
and the file disagree we size with the server's tokenizer itself (not only cutting what is too long),
so the counts are the server's for every tokenizer class and chat template.

Calls are synchronous (http.client, one keep-alive connection per thread): sizing runs before the
clock starts, or in the worker threads that encode big runs' bodies.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .tokenizer import TOKENIZER_FILE, Vocab

TIMEOUT_S = 30.0
CHECKED_PROMPTS = 3  # vLLM checks the first prompt; a few more catch a difference one text hides


class NoServerTokenizer(Exception):
    """The server has no usable /tokenize (not vLLM, or an error): the local tokenizer is kept."""


class LocalTokenizer:
    """``tokenizer.json`` through the ``tokenizers`` library, with transformers' count of added specials."""

    def __init__(self, vocab: Vocab) -> None:
        from tokenizers import Tokenizer  # a Rust wheel, no torch; imported only when chat needs it

        if vocab.folder is None:
            raise ValueError("a local tokenizer needs a folder")
        self.folder = Path(vocab.folder)
        self.tok = Tokenizer.from_file(str(self.folder / TOKENIZER_FILE))
        self.source = vocab.source

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def num_special(self) -> int:
        """transformers 5 keeps the file's post-processor unless ``tokenizer_config.json`` sets
        ``add_bos_token``/``add_eos_token`` (or the file has none): then BOS/EOS are added as those say."""
        try:
            config = json.loads((self.folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        explicit = "add_bos_token" in config or "add_eos_token" in config
        if not explicit and self.tok.post_processor is not None:
            return int(self.tok.num_special_tokens_to_add(False))
        return sum(1 for flag, name in (("add_bos_token", "bos_token"), ("add_eos_token", "eos_token"))
                   if config.get(flag) and _token_name(config.get(name)))


def _token_name(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class ServerTokenizer:
    """vLLM's /tokenize (``add_special_tokens`` false) and /detokenize for ``model``."""

    def __init__(self, base_url: str, model: str, headers: Mapping[str, str] | None = None,
                 timeout_s: float = TIMEOUT_S, verify_tls: bool = True) -> None:
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port], got {base_url!r}")
        self._url, self._prefix = url, url.path.rstrip("/")
        self.model = model
        self.headers = {**(headers or {}), "Content-Type": "application/json"}
        self.timeout_s = timeout_s
        self._local = threading.local()
        self.verify_tls = verify_tls  # False: bench --insecure (a self-signed certificate)
        self.source = f"server {base_url}/tokenize"

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._url.scheme == "https":
                context = None
                if not self.verify_tls:  # asked for: the certificate is not checked, as aiohttp's ssl=False
                    context = ssl.create_default_context()
                    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                conn = http.client.HTTPSConnection(self._url.hostname, self._url.port, timeout=self.timeout_s,
                                                   context=context)
            else:
                conn = http.client.HTTPConnection(self._url.hostname, self._url.port, timeout=self.timeout_s)
            self._local.conn = conn
        return conn

    def _post(self, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        for attempt in (0, 1):  # a keep-alive connection the server closed is opened again once
            conn = self._conn()
            try:
                conn.request("POST", self._prefix + path, body=data, headers=self.headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._local.conn = None
                if attempt:
                    raise NoServerTokenizer(f"{path}: {type(e).__name__}: {e}") from None
                continue
            if resp.status != 200:
                raise NoServerTokenizer(f"{path} answered HTTP {resp.status}: {raw[:200].decode('utf-8', 'replace')}")
            try:
                return json.loads(raw)
            except ValueError:
                raise NoServerTokenizer(f"{path} answered something other than JSON") from None
        raise AssertionError("unreachable")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        out = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens})
        tokens = out.get("tokens")
        if not isinstance(tokens, list):
            raise NoServerTokenizer("/tokenize answered without 'tokens'")
        return [int(t) for t in tokens]

    def decode(self, ids: Sequence[int]) -> str:
        out = self._post("/detokenize", {"model": self.model, "tokens": [int(i) for i in ids]})
        if not isinstance(out.get("prompt"), str):
            raise NoServerTokenizer("/detokenize answered without 'prompt'")
        return out["prompt"]

    def encode_chat(self, text: str, template_kwargs: Mapping | None = None) -> list[int]:
        """The ids of ``text`` as one user message in the server's chat template, with the generation prompt."""
        body = {"model": self.model, "messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        if template_kwargs:
            body["chat_template_kwargs"] = dict(template_kwargs)
        tokens = self._post("/tokenize", body).get("tokens")
        if not isinstance(tokens, list):
            raise NoServerTokenizer("/tokenize answered without 'tokens'")
        return [int(t) for t in tokens]

    def num_special(self) -> int:
        """What the server's tokenizer adds to a text (its num_special_tokens_to_add)."""
        return len(self.encode("a", True)) - len(self.encode("a", False))

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


@dataclass
class Choice:
    """The tokenizer chat prompts are sized with, and why (for the result file and one stderr line)."""

    tokenizer: object           # LocalTokenizer or ServerTokenizer
    num_special: int
    checked: str                # how the local tokenizer was checked against the server
    note: str | None = None     # said once on stderr when the server's tokenizer is used
    ids: tuple[int, ...] = ()   # no tokenizer offline: ids the server's tokenizer is known to have


SAMPLE_TEXT = " ".join(f"{w}{i}" for i in range(64) for w in (
    "the", "model", "serves", "tokens", "batch", "bucket", "warm", "graph", "cache", "prompt"))


def server_only(base_url: str, model: str, name: str, headers: Mapping[str, str] | None = None,
                verify_tls: bool = True) -> Choice | None:
    """No tokenizer on disk: the server's /tokenize and /detokenize size chat text (vLLM's client would have
    downloaded the tokenizer, which we never do); the ids a sample text encodes to are the ids text is drawn
    from. None when the server has no usable /tokenize."""
    server = ServerTokenizer(base_url, model, headers, verify_tls=verify_tls)
    try:
        n = server.num_special()
        ids = tuple(sorted(set(server.encode(SAMPLE_TEXT))))
        server.decode(list(ids[:8]))
    except NoServerTokenizer:
        return None
    if len(ids) < 2:
        return None
    note = (f"chat prompts: no tokenizer found offline for {name!r}; sizing them with the server's /tokenize "
            "and /detokenize (give --tokenizer PATH to size them offline)")
    return Choice(server, n, "no tokenizer offline: sized by the server's /tokenize", note, ids)


def choose(local: LocalTokenizer, server: ServerTokenizer | None, texts: Sequence[str] = ()) -> Choice:
    """The local tokenizer when the server counts ``texts`` (and the added specials) as it does, else
    the server's. Without a usable /tokenize the local one is kept, as vLLM's client keeps its own."""
    mine = local.num_special()
    if server is None:
        return Choice(local, mine, "not checked (no server)")
    try:
        theirs = server.num_special()
        differ = [(len(local.encode(t)), len(server.encode(t))) for t in texts[:CHECKED_PROMPTS]]
    except NoServerTokenizer as e:
        return Choice(local, mine, f"not checked: the server's tokenizer is not reachable ({e})")
    differ = [(a, b) for a, b in differ if a != b]
    if theirs == mine and not differ:
        return Choice(local, mine, f"agrees with the server's /tokenize ({min(len(texts), CHECKED_PROMPTS)} prompts)")
    why = []
    if theirs != mine:
        why.append(f"it adds {theirs} special tokens to a text where {TOKENIZER_FILE} adds {mine}")
    if differ:
        why.append(f"it counts a prompt as {differ[0][1]} tokens where {TOKENIZER_FILE} counts {differ[0][0]}")
    note = (f"chat prompts: the server's tokenizer differs from {local.folder / TOKENIZER_FILE} "
            f"({'; '.join(why)}; transformers rebuilds some tokenizer classes): sizing them with the "
            "server's /tokenize and /detokenize, as vLLM's client counts them")
    return Choice(server, theirs, "differs from the server's /tokenize: sized by the server", note)


class ChatTemplate:
    """vLLM's custom dataset renders each prompt in the model's chat template on the client
    (``apply_chat_template([user message], add_generation_prompt=True, tokenize=False, **kwargs)``, unless
    ``--skip-chat-template``) and sends that text, to the chat API too, whose server templates it again.
    We have no template engine, so the server renders it: /tokenize with the message, /detokenize the ids.
    ``render(text, counted=True)`` also counts the rendered text's tokens with the tokenizer's specials
    added, as vLLM's ``prompt_len`` (for a client with no tokenizer of its own)."""

    def __init__(self, server: ServerTokenizer, template_kwargs: Mapping | None = None, workers: int = 8) -> None:
        self.server = server
        self.template_kwargs = dict(template_kwargs or {})
        self.workers = workers

    def render(self, text: str, counted: bool = False) -> tuple[str, int | None]:
        """The rendered text, and (``counted``) its tokens with the specials added."""
        out = self.server.decode(self.server.encode_chat(text, self.template_kwargs))
        return out, len(self.server.encode(out, True)) if counted else None

    def render_all(self, texts: Sequence[str], counted: bool = False) -> list[tuple[str, int | None]]:
        """Every text rendered, a few requests at a time (one keep-alive connection per worker thread)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(texts)))) as pool:
            return list(pool.map(lambda t: self.render(t, counted), texts))


def chat_template(base_url: str, model: str, headers: Mapping[str, str] | None = None, verify_tls: bool = True,
                  template_kwargs: Mapping | None = None) -> tuple[ChatTemplate | None, str]:
    """The server's chat template for custom prompts, or None and why (no /tokenize that renders messages)."""
    template = ChatTemplate(ServerTokenizer(base_url, model, headers, verify_tls=verify_tls), template_kwargs)
    try:
        rendered, _ = template.render("Hi")
    except NoServerTokenizer as e:
        return None, str(e)
    if "Hi" not in rendered:
        return None, f"its chat template rendered a test message without the message's text ({rendered[:80]!r})"
    return template, ""
