"""Chat prompts counted by the tokenizer the server counts with. transformers 5 does not always read
tokenizer.json as written (a tokenizer class may rebuild the pipeline; explicit add_bos/add_eos flags
replace its post-processor), and vLLM's client and server both go through transformers: when the
server's /tokenize disagrees with the file, the text is sized by the server's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fake_openai_server import FakeServerConfig
from tests.load.test_bench_chat_auth import ServerThread, _bench, _texts, no_key, write_bos_tokenizer  # noqa: F401
from tuner.load.servertok import LocalTokenizer, NoServerTokenizer, choose
from tuner.load.tokenizer import load_vocab

# transformers 5's Qwen2Tokenizer pattern: a punctuation mark joins the word after it, digits stand alone
QWEN_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
              r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def _rebuilt_copy(src, dst):
    """The same vocabulary and merges split as transformers' Qwen2Tokenizer splits (what the server loads)."""
    dst.mkdir()
    data = json.loads((src / "tokenizer.json").read_text())
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    (dst / "tokenizer.json").write_text(json.dumps(data))
    (dst / "special_tokens_map.json").write_text((src / "special_tokens_map.json").read_text())


def test_a_tokenizer_the_server_reads_otherwise_is_replaced_by_the_servers(tmp_path, capsys):
    from tokenizers import Tokenizer

    client_dir, server_dir = tmp_path / "file", tmp_path / "server"
    write_bos_tokenizer(client_dir)
    _rebuilt_copy(client_dir, server_dir)
    server_tok = Tokenizer.from_file(str(server_dir / "tokenizer.json"))
    file_tok = Tokenizer.from_file(str(client_dir / "tokenizer.json"))
    with ServerThread(FakeServerConfig(model="m", tokenizer_dir=str(server_dir))) as srv:
        code = _bench(srv, tmp_path, "--backend", "openai-chat", "--model", "m", "--tokenizer", str(client_dir),
                      "--num-prompts", "12", "--random-input-len", "80", "--random-output-len", "2")
        texts = _texts(srv)
    assert code == 0 and len(texts) == 12
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["tuner_chat_prompts"]["tokenizer_check"] == "differs from the server's /tokenize: sized by the server"
    assert d["tuner_chat_prompts"]["sized_by"].startswith("server ")
    err = capsys.readouterr().err
    assert err.count("the server's tokenizer differs from") == 1 and "/tokenize" in err
    by_server = [len(server_tok.encode(t, add_special_tokens=False).ids) for t in texts]
    by_file = [len(file_tok.encode(t, add_special_tokens=False).ids) for t in texts]
    # the two really disagree on these texts, and the server's count is the one that hits the target
    assert sum(abs(a - b) for a, b in zip(by_server, by_file)) > 0.02 * sum(by_server)
    assert sum(by_server) - 12 * 79 == d["tuner_chat_prompts"]["mismatch_tokens"]
    assert abs(sum(by_server) - 12 * 79) <= 0.02 * 12 * 79


def test_specials_follow_transformers_flags_over_the_files_post_processor(tmp_path):
    """transformers 5 keeps tokenizer.json's post-processor unless tokenizer_config.json sets add_bos_token or
    add_eos_token (or the file has none): then it adds BOS/EOS as those say."""
    folder = tmp_path / "tok"
    write_bos_tokenizer(folder)  # its post-processor adds <s>
    local = lambda: LocalTokenizer(load_vocab(folder))  # noqa: E731
    assert local().num_special() == 1
    cfg = folder / "tokenizer_config.json"
    cfg.write_text(json.dumps({"add_bos_token": False, "bos_token": "<s>"}))
    assert local().num_special() == 0
    cfg.write_text(json.dumps({"add_bos_token": True, "add_eos_token": True, "bos_token": "<s>",
                               "eos_token": {"content": "</s>"}}))
    assert local().num_special() == 2
    cfg.write_text(json.dumps({"add_eos_token": True}))  # no eos_token named: nothing to add
    assert local().num_special() == 0


class _Server:
    def __init__(self, specials=1, scale=1.0, down=False):
        self.specials, self.scale, self.down, self.source = specials, scale, down, "server x/tokenize"

    def num_special(self):
        if self.down:
            raise NoServerTokenizer("/tokenize answered HTTP 404")
        return self.specials

    def encode(self, text):
        return [0] * round(len(text.split()) * self.scale)


class _Local(_Server):
    folder = Path("tok")


def test_choice_of_the_sizing_tokenizer():
    texts = ["a b c d", "e f g h i"]
    assert choose(_Local(), _Server(), texts).tokenizer.__class__ is _Local
    c = choose(_Local(1), _Server(2), texts)
    assert isinstance(c.tokenizer, _Server) and c.num_special == 2 and "adds 2 special tokens" in c.note
    c = choose(_Local(), _Server(scale=2.0), texts)
    assert isinstance(c.tokenizer, _Server) and "counts a prompt as 8 tokens where tokenizer.json counts 4" in c.note
    c = choose(_Local(), _Server(down=True), texts)  # not vLLM (no /tokenize): the file is kept, as vLLM keeps its own
    assert isinstance(c.tokenizer, _Local) and c.note is None and "not checked" in c.checked
    assert choose(_Local(), None, texts).checked == "not checked (no server)"
