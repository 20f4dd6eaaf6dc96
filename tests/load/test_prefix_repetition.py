"""vLLM's prefix_repetition dataset as token ids (tuner/load/prefixrep.py): a few prefixes, each shared by
num_prompts // num_prefixes prompts with suffixes of their own, shuffled in vLLM's order for the seed."""

from __future__ import annotations

import json
import random

import pytest

from tests.load.test_bench_cli import running_sim, sim_server  # noqa: F401
from tuner.cli import main
from tuner.load.prefixrep import PrefixRepetitionWorkload


def _w(**kw) -> PrefixRepetitionWorkload:
    return PrefixRepetitionWorkload(**{"prefix_len": 8, "suffix_len": 4, "num_prefixes": 3, "output_len": 5,
                                       "num_prompts": 10, "seed": 7, "vocab_size": 1000, **kw})


def test_prefixes_are_shared_as_vllm_groups_them():
    w = _w()
    specs = w.requests()
    assert len(specs) == 9 and {s.prompt_len for s in specs} == {12} and {s.output_len for s in specs} == {5}
    heads = [tuple(s.prompt[:8]) for s in specs]
    assert len(set(heads)) == 3 and all(heads.count(h) == 3 for h in heads)    # 3 prompts a prefix
    assert len({tuple(s.prompt[8:]) for s in specs}) == 9                      # every suffix its own
    in_order = [tuple(s.prompt[:8]) for s in _w(shuffle=False).requests()]     # --disable-shuffle: as built
    assert in_order == [in_order[0]] * 3 + [in_order[3]] * 3 + [in_order[6]] * 3
    prefix_number = {in_order[3 * k]: k for k in range(3)}
    # vLLM's order: the requests built prefix by prefix, then random.seed(seed); random.shuffle(requests)
    built = [k for k in range(3) for _ in range(3)]
    random.seed(7)
    random.shuffle(built)
    assert [prefix_number[h] for h in heads] == built
    warm = w.warmup_requests(4)
    assert all(tuple(s.prompt[:8]) == heads[0] for s in warm)                   # the first request's prefix
    assert not {tuple(s.prompt[8:]) for s in warm} & {tuple(s.prompt[8:]) for s in specs}
    assert _w(seed=7).requests()[4].prompt == specs[4].prompt                    # deterministic


@pytest.mark.parametrize("kw, said", [({"num_prompts": 2}, "greater than or equal to"),
                                      ({"num_prefixes": 0}, "at least 1"),
                                      ({"suffix_len": -1}, "suffix-len must be 0 or more")])
def test_bad_values_are_named(kw, said):
    with pytest.raises(ValueError, match=said):
        _w(**kw)


def test_bench_runs_it_with_vllms_flags(sim_server, tmp_path):  # noqa: F811
    path = tmp_path / "r.json"
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--vocab-size", "5000", "--disable-tqdm",
                 "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "64",
                 "--prefix-repetition-suffix-len", "16", "--prefix-repetition-num-prefixes", "3",
                 "--prefix-repetition-output-len", "3", "--num-prompts", "10", "--result-file", str(path)]) == 0
    d = json.loads(path.read_text())
    assert (d["completed"], d["failed"], d["total_input_tokens"]) == (9, 0, 9 * 80)
    assert d["output_lens"] == [3] * 9
