"""The simulator's /tokenize and /detokenize (tuner/sim/tokens.py): ids that agree with its token count both
ways, chat messages rendered as the 4 tokens a message costs it, and chat prompts sized through them by a
client with no tokenizer on disk, as on a vLLM server."""

from __future__ import annotations

import json
import random

import pytest

from tests.load.test_bench_cli import sim_server  # noqa: F401
from tuner.cli import main
from tuner.sim.http import _chat_prompt_tokens, count_text_tokens
from tuner.sim.tokens import SimTokenizer, render_chat

TEXTS = ["Hello, world! internationalization is long.", "the model serves tokens", "tea; taa tb 42 ünïcödé",
         "a\nnew   line\tand tabs"]


@pytest.mark.parametrize("text", TEXTS)
def test_ids_count_as_the_simulator_counts_and_decode_back_to_the_same_ids(text):
    t = SimTokenizer(128256)
    ids = t.encode(text)
    assert len(ids) == count_text_tokens(text)
    back = t.decode(ids)
    assert t.encode(back) == ids and count_text_tokens(back) == len(ids)


def test_any_ids_decode_to_words_that_encode_back():
    """(but the id a long word was given: it decodes to that word, two tokens)"""
    t = SimTokenizer(1000)
    t.encode("some learned words first, short ones")
    rng = random.Random(0)
    ids = [rng.randrange(999) for _ in range(400)]
    assert t.encode(t.decode(ids)) == ids
    with pytest.raises(ValueError, match="Token id 1000 is out of vocabulary"):
        t.decode([1000])


def test_a_chat_message_costs_its_text_and_four_tokens():
    for messages in ([{"role": "user", "content": "What is the capital of India?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "assistant", "content": "Sure."},
                      {"role": "user", "content": [{"type": "text", "text": "Why?"}]}]):
        assert count_text_tokens(render_chat(messages)) == _chat_prompt_tokens(messages)
    assert render_chat([{"role": "user"}]) is None and render_chat([]) is None


def test_chat_prompts_on_the_simulator_are_sized_by_its_tokenize(sim_server, tmp_path, capsys):  # noqa: F811
    """No tokenizer on disk ('llama' is only a served name): before, the text was synthetic words of no set
    length; now the server's /tokenize sizes it, and each prompt is its asked length plus the template's 4."""
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--backend", "openai-chat",
                 "--num-prompts", "6", "--random-input-len", "48", "--random-output-len", "4", "--disable-tqdm",
                 "--result-file", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "sizing them with the server's /tokenize" in err and "not controlled" not in err
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["completed"] == 6 and d["input_lens"] == [48 + 4] * 6
    assert d["tuner_chat_prompts"]["mismatch_tokens"] == 0
