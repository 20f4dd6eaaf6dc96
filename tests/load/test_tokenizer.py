"""Vocabulary discovery: a tokenizer read offline (a folder or the Hugging Face cache), special ids kept
out of prompts, and the server's own out-of-vocabulary answers when there is no tokenizer."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.fake_openai_server import FakeOpenAIServer, FakeServerConfig
from tests.load.test_vllm_parity import _args
from tuner.load.client import LoadGenerator
from tuner.load.datasets import build_workload
from tuner.load.tokenizer import VocabNotFound, discover_vocab, find_tokenizer_dir, oov_id, probe_vocab_size


def write_tokenizer(folder, vocab=300):
    """A small BPE tokenizer with four special tokens at ids 0-3 (as the real-vLLM tier's model)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>", "<unk>", "<pad>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 50], trainer)
    tok.add_special_tokens(["<extra_special>"])  # an added special token past the base vocabulary
    tok.save(str(folder / "tokenizer.json"))
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return tok


def test_local_folder_gives_base_vocab_and_special_ids(tmp_path):
    tok = write_tokenizer(tmp_path / "model")
    vocab = discover_vocab(None, str(tmp_path / "model"))
    assert vocab.size == tok.get_vocab_size(with_added_tokens=False)
    assert {0, 1, 2, 3} <= vocab.special_ids and tok.token_to_id("<extra_special>") in vocab.special_ids
    w = build_workload(_args(num_prompts=50, random_input_len=40), vocab)
    ids = {t for s in w.requests() for t in s.prompt}
    assert not ids & vocab.special_ids and max(ids) < vocab.size and min(ids) >= 4


def test_hf_cache_snapshot_is_found_offline(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    write_tokenizer(snap)
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert find_tokenizer_dir("org/tiny") == snap
    assert discover_vocab("org/other", "org/tiny").folder == str(snap)  # --tokenizer first, then --model
    assert discover_vocab("org/missing") is None


def test_oov_message_parsing():
    assert oov_id("Token id 7000 is out of vocabulary") == 7000
    assert oov_id("server error: Token id -1 is out of vocabulary") == -1
    assert oov_id("HTTP 500: Internal Server Error") is None


@pytest.mark.parametrize("stream_error", [True, False])
def test_vocabulary_learned_from_the_server(stream_error):
    async def go():
        cfg = FakeServerConfig(vocab_size=2048, oov_as_stream_error=stream_error)
        async with FakeOpenAIServer(cfg) as srv:
            gen = LoadGenerator(srv.base_url, srv.model, progress=False)
            async with gen.session() as session:
                return await probe_vocab_size(lambda ids: gen.probe(session, ids)), len(srv.log)
    vocab, probes = asyncio.run(go())
    assert vocab.size == 2048 and probes <= 26


def test_probe_stops_with_a_clear_message_when_the_server_says_nothing_useful():
    async def accept_all(ids):
        return None

    async def other_error(ids):
        return "HTTP 401: unauthorized"

    with pytest.raises(VocabNotFound, match="accepts every id"):
        asyncio.run(probe_vocab_size(accept_all))
    with pytest.raises(VocabNotFound, match="401"):
        asyncio.run(probe_vocab_size(other_error))


# ------------------------------------------------------------------ text datasets (vLLM's sharegpt, custom)


def _sharegpt(path, n=6):
    rows = [{"conversations": [{"from": "human", "value": "the quick brown fox " * (i + 1)},
                               {"from": "gpt", "value": "jumps over the lazy dog " * (i + 1)}]} for i in range(n)]
    rows.append({"conversations": [{"from": "human", "value": "hi"}]})  # one turn: dropped, as in vLLM
    path.write_text(json.dumps(rows))
    return path


def test_sharegpt_needs_a_tokenizer_or_an_output_length(tmp_path):
    p = _sharegpt(tmp_path / "sg.json")
    with pytest.raises(ValueError, match="--sharegpt-output-len"):
        build_workload(_args(dataset_name="sharegpt", dataset_path=p, num_prompts=3))
    w = build_workload(_args(dataset_name="sharegpt", dataset_path=p, num_prompts=3, sharegpt_output_len=9))
    assert w.lengths()[1] == [9, 9, 9] and all(isinstance(s.prompt, str) for s in w.requests())


def test_sharegpt_lengths_come_from_the_tokenizer_with_vllms_filters(tmp_path):
    tok = write_tokenizer(tmp_path / "model")
    vocab = discover_vocab(str(tmp_path / "model"))
    p = _sharegpt(tmp_path / "sg.json")
    w = build_workload(_args(dataset_name="sharegpt", dataset_path=p, num_prompts=4, seed=5), vocab)
    for spec in w.requests():
        assert spec.prompt_len == len(tok.encode(spec.prompt).ids) >= 4
    again = build_workload(_args(dataset_name="sharegpt", dataset_path=p, num_prompts=4, seed=5), vocab)
    assert [s.prompt for s in again.requests()] == [s.prompt for s in w.requests()]
    big = build_workload(_args(dataset_name="sharegpt", dataset_path=p, num_prompts=10, seed=5), vocab)
    assert big.num_prompts == 10  # oversampled from the 6 usable conversations, as vLLM does


def test_custom_jsonl_output_tokens_and_override(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"question {i} about things", "output_tokens": 3 + i}) + "\n"
                         for i in range(4)))
    w = build_workload(_args(dataset_name="custom", dataset_path=p, num_prompts=4, custom_output_len=-1))
    assert sorted(w.lengths()[1]) == [3, 4, 5, 6]
    w = build_workload(_args(dataset_name="custom", dataset_path=p, num_prompts=4))
    assert w.lengths()[1] == [256] * 4


def test_mistrals_tekken_json_alone_gives_the_vocabulary_and_its_special_ids(tmp_path, monkeypatch):
    """A Mistral repository that ships tekken.json and no tokenizer.json: vLLM's MistralTokenizer has
    config.default_vocab_size ids, the first config.default_num_special_tokens of them special."""
    import json

    from tuner.load.tokenizer import discover_vocab
    from tuner.vocabulary.errors import UserError

    folder = tmp_path / "Magistral"
    folder.mkdir()
    (folder / "tekken.json").write_text(json.dumps({"config": {
        "pattern": ".", "num_vocab_tokens": 150000, "default_vocab_size": 131072,
        "default_num_special_tokens": 1000, "version": "v7"}, "vocab": [], "special_tokens": []}))
    vocab = discover_vocab(None, str(folder))
    assert vocab.size == 131072 and vocab.special_ids == frozenset(range(1000))
    assert vocab.folder is None and "tekken" in vocab.source  # its text is sized by the server, not here
    cache = tmp_path / "hub" / "models--mistralai--Magistral" / "snapshots" / "abc"
    cache.mkdir(parents=True)
    (cache / "tekken.json").write_text((folder / "tekken.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert discover_vocab("mistralai/Magistral").size == 131072
    (folder / "tekken.json").write_text("{}")
    with pytest.raises(UserError, match="not a readable tekken.json"):
        discover_vocab(str(folder))
