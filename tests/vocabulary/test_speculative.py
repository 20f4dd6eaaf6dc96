"""--speculative-config read as vLLM reads it: the draft tokens a step proposes, from its JSON object."""

import pytest

from tuner.vocabulary.speculative import speculative_object, speculative_tokens


@pytest.mark.parametrize("value, mtp_layers, expected", [
    (None, 1, 0),
    ("", 1, 0),
    ('{"method": "mtp", "num_speculative_tokens": 3}', 1, 3),
    ({"method": "eagle3", "model": "x", "num_speculative_tokens": 4}, 1, 4),
    ('{"method": "mtp"}', 1, 1),  # an MTP draft without a count proposes one token per MTP layer of the model
    ('{"method": "qwen3_next_mtp"}', 2, 2),
    ('{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}', 1, 5),
])
def test_draft_tokens(value, mtp_layers, expected):
    assert speculative_tokens(value, mtp_layers) == expected


@pytest.mark.parametrize("value, words", [
    ("{method: mtp}", "--speculative-config '{method: mtp}': not JSON"),
    ('["mtp", 1]', "expected a JSON object"),
    ('{"method": "eagle", "model": "x"}', "`num_speculative_tokens` was not provided"),
    ('{"method": "mtp", "num_speculative_tokens": 0}', "num_speculative_tokens 0: expected a whole number above 0"),
    ('{"method": "mtp", "num_speculative_tokens": "2"}', "num_speculative_tokens '2'"),
])
def test_a_config_vllm_refuses_is_named(value, words):
    with pytest.raises(ValueError) as e:
        speculative_tokens(value)
    assert words in str(e.value)


def test_an_empty_object_is_no_speculative_decoding():
    assert speculative_object("{}") is None and speculative_tokens("{}") == 0
