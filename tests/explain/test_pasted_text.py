"""What a chat client, a word processor or a log viewer does to the text of a pasted log: curly quotes for
vLLM's straight ones, a dash for a flag's two hyphens, a line cut with an ellipsis."""

from __future__ import annotations

from tuner.explain import explain
from tuner.explain.command import command_settings
from tuner.explain.render import to_json

from ..conftest import LOG_SAMPLES

PLUGIN_TP2 = LOG_SAMPLES / "composed" / "vllm-gaudi-main_qwen3-30b-a3b_tp2.log"


def _lines(path):
    return [x for x in path.read_text().splitlines() if not x.startswith("# SOURCE")]


def test_curly_quotes_read_as_straight_ones():
    lines = _lines(PLUGIN_TP2)
    curly = [x.replace("='", "=\u2018").replace("',", "\u2019,").replace("'", "\u2019") for x in lines]
    got, want = to_json(explain(curly)), to_json(explain(lines))
    assert got["server"]["model"] == want["server"]["model"] == "Qwen/Qwen3-30B-A3B"
    assert len(got["runtime"]["not_warmed_up"]) == len(want["runtime"]["not_warmed_up"]) == 1
    assert got["reading"]["unread"] == want["reading"]["unread"]


def test_a_commands_dashes_made_typographic_are_its_flags():
    s = command_settings("vllm serve Qwen/Qwen3-8B \u2014tensor-parallel-size 2 \u2013max-num-seqs 64")
    assert s == "pasted command: model='Qwen/Qwen3-8B' tensor_parallel_size=2 max_num_seqs=64"


def test_a_value_a_viewer_cut_with_an_ellipsis_is_not_taken():
    name = "Qwen/Qwen3-30B-A3B"
    lines = [x[:x.index(name) + 16] + "\u2026" if name in x else x for x in _lines(PLUGIN_TP2)]
    assert sum("\u2026" in x for x in lines) >= 2
    assert to_json(explain(lines))["server"]["model"] is None   # not "Qwen/Qwen3-30B-A…"
