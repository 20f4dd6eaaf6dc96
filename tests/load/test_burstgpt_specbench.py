"""vLLM's burstgpt and spec_bench datasets, read from local files as `vllm bench serve` 0.32 reads them.

Checked once against vLLM's own BurstGPTDataset and SpecBench (the genuine tier's venv, with pandas, which
that venv lacks, on its path): the same request and response lengths for seeds 0 and 7 (24 of a 40-row
CSV, and 60 with replacement), and the same first turns in the same order with --seed 7 (vLLM builds
SpecBench without the seed: it shuffles with 0).
"""

from __future__ import annotations

import json
import random
from argparse import Namespace

import pytest

from tests.load.test_bench_cli import running_sim, sim_server  # noqa: F401
from tuner.load.burstgpt import burstgpt_lengths
from tuner.load.datasets import build_workload

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _csv(tmp_path, rows: int = 40, longest: int = 3000):
    rng = random.Random(3)
    lines = [HEADER]
    for i in range(rows):
        model = "GPT-4" if i % 3 else "ChatGPT"
        response = 0 if i % 7 == 0 else rng.randint(1, 900)
        request = rng.randint(1, longest)
        lines.append(f"{i * 1.5},{model},{request},{response},{request + response},Conversation log\n")
    path = tmp_path / "BurstGPT_1.csv"
    path.write_text("".join(lines))
    return path


def _args(**kw) -> Namespace:
    base = dict(dataset_name="burstgpt", dataset_path=None, num_prompts=None, seed=0, vocab_size=None,
                input_len=None, output_len=None, random_input_len=1024, random_output_len=128,
                random_range_ratio="0.0", random_prefix_len=0, custom_output_len=256, spec_bench_output_len=256,
                spec_bench_category=None, disable_shuffle=False, no_oversample=False)
    return Namespace(**{**base, **kw})


def test_burstgpt_replays_the_gpt4_rows_with_a_response_as_token_id_prompts_of_their_lengths(tmp_path):
    import pandas as pd

    path = _csv(tmp_path)
    kept = pd.read_csv(path)
    kept = kept[(kept["Model"] == "GPT-4") & (kept["Response tokens"] > 0)]
    w = build_workload(_args(dataset_path=path, num_prompts=12, seed=5, vocab_size=32000))
    ins, outs = w.lengths()
    assert len(ins) == 12
    rows = set(zip(kept["Request tokens"], kept["Response tokens"]))
    assert set(zip(ins, outs)) <= rows  # only GPT-4 rows that answered
    assert len(set(zip(ins, outs))) == 12  # drawn without replacement while the file has enough
    for spec in w.requests():
        assert len(spec.prompt_array) == spec.prompt_len  # the server sees exactly the trace's request tokens
    # the seed picks the rows; more prompts than rows draw with replacement, as pandas' sample does for vLLM
    assert burstgpt_lengths(path, 12, 5) == (ins, outs) != burstgpt_lengths(path, 12, 6)
    many, _ = burstgpt_lengths(path, 60, 0)
    assert len(many) == 60 and len(set(many)) <= len(kept)


@pytest.mark.parametrize(("content", "said"), [
    ("a,b\n1,2\n", "no column 'Model'"),
    (HEADER + "0,ChatGPT,10,5,15,x\n", "no GPT-4 row"),
    (HEADER + "0,GPT-4,10,five,15,x\n", "not numbers"),
])
def test_a_file_that_is_not_burstgpt_is_refused_naming_why(tmp_path, content, said):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=said):
        build_workload(_args(dataset_path=path, num_prompts=4))
    with pytest.raises(ValueError, match="needs --dataset-path"):
        build_workload(_args(num_prompts=4))


def _questions(tmp_path):
    path = tmp_path / "question.jsonl"
    cats = ["translation", "summarization", "qa", "math_reasoning"]
    path.write_text("".join(json.dumps({"question_id": i, "category": cats[i % 4],
                                        "turns": [f"question {i}: " + "word " * (i % 9 + 1), "a second turn"]}) + "\n"
                            for i in range(20)))
    return path


def test_spec_bench_sends_each_questions_first_turn_shuffled_as_vllm_with_its_seed_0(tmp_path):
    path = _questions(tmp_path)
    w = build_workload(_args(dataset_name="spec_bench", dataset_path=path, num_prompts=8, seed=7))
    order = [json.loads(line)["turns"][0] for line in path.read_text().splitlines()]
    random.seed(0)  # vLLM constructs SpecBench without --seed
    random.shuffle(order)
    assert w.prompts == order[:8]
    assert set(w.output_lens) == {256}  # --spec-bench-output-len's default
    again = build_workload(_args(dataset_name="spec_bench", dataset_path=path, num_prompts=8, seed=1))
    assert again.prompts == w.prompts
    kept = build_workload(_args(dataset_name="spec_bench", dataset_path=path, num_prompts=30, disable_shuffle=True,
                                spec_bench_category="qa", no_oversample=True, spec_bench_output_len=64))
    assert [p.split(":")[0] for p in kept.prompts] == [f"question {i}" for i in range(2, 20, 4)]
    assert set(kept.output_lens) == {64}


def test_spec_bench_refuses_a_file_without_turns_and_an_unknown_category_naming_them(tmp_path):
    path = _questions(tmp_path)
    with pytest.raises(ValueError, match=r"no question of it .*categories: math_reasoning, qa, summarization"):
        build_workload(_args(dataset_name="spec_bench", dataset_path=path, spec_bench_category="coding"))
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "a custom line, not Spec-Bench"}\n')
    with pytest.raises(ValueError, match=r"prompts.jsonl:1: each line needs a 'turns' list"):
        build_workload(_args(dataset_name="spec_bench", dataset_path=bad))


def test_bench_sends_both_to_a_server(sim_server, tmp_path):  # noqa: F811
    from tuner.cli import main

    path, out = _csv(tmp_path, longest=600), tmp_path / "b.json"  # the simulator serves 1,024 tokens
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--vocab-size", "5000", "--disable-tqdm",
                 "--dataset-name", "burstgpt", "--dataset-path", str(path), "--num-prompts", "5",
                 "--output-len", "2", "--result-file", str(out)]) == 0
    d = json.loads(out.read_text())
    ins, _ = burstgpt_lengths(path, 5, 0)
    assert (d["completed"], d["failed"], d["total_input_tokens"]) == (5, 0, sum(ins))  # as the server counted
    out = tmp_path / "s.json"
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--disable-tqdm", "--dataset-name",
                 "spec_bench", "--dataset-path", str(_questions(tmp_path)), "--num-prompts", "4",
                 "--spec-bench-output-len", "3", "--result-file", str(out)]) == 0
    d = json.loads(out.read_text())
    assert (d["completed"], d["failed"], d["output_lens"]) == (4, 0, [3, 3, 3, 3])
