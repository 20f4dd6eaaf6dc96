"""A log a terminal hard-wrapped at its width reads as the log itself (explain/unwrap.py), and the
journalctl stamps of `-o short-iso` are peeled as the short form's are."""

from __future__ import annotations

import re

import pytest

from tuner.explain import explain
from tuner.explain.render import to_json
from tuner.explain.unwrap import unwrap, wrap_width

from ..conftest import LOG_SAMPLES

DOCKER_STAMPED = LOG_SAMPLES / "real" / "fork-1.19_issue462_docker_timestamps.log"   # v0, 2-D buckets
PLUGIN_TP2 = LOG_SAMPLES / "composed" / "vllm-gaudi-main_qwen3-30b-a3b_tp2.log"      # v1 engine config line
# a traceback from a worker, colour codes in caret notation: a cut record's second piece starts "py:671] "
CARET_TRACEBACK = LOG_SAMPLES / "real" / "plugin_pr192_caret_ansi_warmup_traceback.log"


def _lines(path):
    return [x for x in path.read_text().splitlines() if not x.startswith("# SOURCE")]


def _facts(lines: list[str]) -> dict:
    d = to_json(explain(lines))
    b, m, s = d["buckets"], d["memory_bytes"], d["server"]
    return {"profile": d["release"]["profile"], "prompt": (b.get("prompt") or {}).get("count"),
            "decode": (b.get("decode") or {}).get("count"), "warmup_s": d["warmup"]["total_s"],
            "complete": d["warmup"]["complete"], "kv_blocks": m["kv_blocks"], "model": s["model"],
            "max_model_len": s["max_model_len"], "tp": s["tp"], "errors": len(d["errors"]),
            "not_warmed_up": len(d["runtime"]["not_warmed_up"]), "unread": d["reading"]["unread"]}


def _cut(lines: list[str], width: int, before: str = "") -> list[str]:
    """What a terminal `width` columns wide shows: every line in pieces of `width`; `before` put on every
    physical line afterwards (a quote)."""
    return [before + line[i:i + width] for line in lines for i in range(0, max(len(line), 1), width)]


@pytest.mark.parametrize("path", [DOCKER_STAMPED, PLUGIN_TP2, CARET_TRACEBACK],
                         ids=["fork-1.19-docker", "plugin-main-tp2", "plugin-caret-traceback"])
@pytest.mark.parametrize("width", [80, 120, 160])
def test_a_log_cut_at_a_terminals_width_reads_as_the_log(path, width):
    lines = _lines(path)
    assert max(map(len, lines)) > width   # the log has records the terminal cuts
    assert _facts(_cut(lines, width)) == _facts(lines)


@pytest.mark.parametrize("before", ["> ", ">> ", "    "], ids=["quote", "mail-quote", "indented"])
def test_a_cut_log_quoted_afterwards_reads_as_the_log(before):
    lines = _lines(DOCKER_STAMPED)
    assert _facts(_cut(lines, 100, before)) == _facts([before + x for x in lines])


def test_colour_codes_take_no_column():
    lines = _lines(PLUGIN_TP2)
    coloured = [re.sub(r"^(INFO|WARNING)", "\x1b[32m\\1\x1b[0m", x) for x in lines]
    cut = []
    for line in coloured:   # the terminal counts what it shows: the codes ride along with the first piece
        head, rest = (line[:line.index("\x1b[0m") + 4], line[line.index("\x1b[0m") + 4:]) \
            if "\x1b[0m" in line else ("", line)
        shown = len(re.sub(r"\x1b\[[0-9;]*m", "", head))
        cut.append(head + rest[:120 - shown])
        cut.extend(rest[i:i + 120] for i in range(120 - shown, len(rest), 120))
    assert wrap_width(cut) == 120
    assert _facts(cut) == _facts(coloured)


def test_lines_of_one_width_that_start_records_are_not_joined():
    a = "INFO 08-02 17:38:43 habana_model_runner.py:590] " + "x" * 60
    b = "INFO 08-02 17:38:44 habana_model_runner.py:590] " + "y" * 60
    tb = ["Traceback (most recent call last):", '  File "/x.py", line 1, in <module>', "    f()"]
    lines = [a, b, a, *tb, b, "    row of a table, indented"]
    assert len(a) == len(b)
    assert wrap_width(lines) is None
    assert list(unwrap(lines, len(a))) == lines


def test_joined_lines_keep_their_line_numbers():
    lines = ["INFO 08-02 17:38:43 habana_model_runner.py:590] " + "a" * 52, "b" * 30,
             "INFO 08-02 17:38:44 habana_model_runner.py:590] " + "c" * 52, "d" * 100 + "e" * 2, "f",
             "INFO 08-02 17:38:45 habana_model_runner.py:590] end"]
    lines[3:5] = [lines[3][:100], lines[3][100:] + "f"]
    assert wrap_width(lines) == 100
    out = list(unwrap(lines, 100))
    assert len(out) == len(lines)
    assert out[0] == lines[0] + lines[1] and out[1] is None
    assert out[2] == lines[2] + lines[3] + lines[4] and out[3] is None and out[4] is None
    assert out[5] == lines[5]


@pytest.mark.parametrize("stamp", ["2026-11-27T10:{m:02d}:{s:02d}+0000", "2026-11-27T10:{m:02d}:{s:02d}.123456+00:00"],
                         ids=["short-iso", "short-iso-precise"])
def test_journalctl_iso_stamps_are_peeled(stamp):
    lines = _lines(PLUGIN_TP2)
    journal = [f"{stamp.format(m=i // 60, s=i % 60)} gaudi-node-3 vllm[48213]: {x}" if x else x
               for i, x in enumerate(lines)]
    got, want = to_json(explain(journal)), to_json(explain(lines))
    assert len(got["notices"]) == len(want["notices"]) > 0
    assert got["reading"]["unread"] == want["reading"]["unread"]
    assert got["warmup"]["complete"] == want["warmup"]["complete"]


ISSUE891 = LOG_SAMPLES / "real" / "plugin_issue891_gptoss_command_wrapped.log"   # the launch command above the log


@pytest.mark.parametrize("width", [80, 120])
def test_a_pasted_command_cut_again_by_a_narrower_terminal_still_gives_its_settings(width):
    lines = _lines(ISSUE891)
    want = _facts(lines)
    assert want["max_model_len"] == 32768 and want["tp"] == 2   # said only by the command
    assert _facts(_cut(lines, width)) == want


@pytest.mark.parametrize("layer", ["2026-01-27T11:07:{s:02d}.123456789Z ", "[pod/vllm-0/vllm] ",
                                   "Jan 27 11:07:{s:02d} node-3 vllm[4821]: ", "vllm-1  | "],
                         ids=["kubectl-timestamps", "kubectl-prefix", "journalctl", "compose"])
def test_a_pasted_command_under_a_collectors_prefix_gives_its_settings(layer):
    lines = _lines(ISSUE891)
    layered = [layer.format(s=i % 60) + x if x else x for i, x in enumerate(lines)]
    assert _facts(layered)["max_model_len"] == _facts(lines)["max_model_len"] == 32768


def test_markdown_bold_inside_a_collectors_prefix_is_read():
    # pr345's author put ** around each line; a paste through kubectl or docker stamps puts its prefix first
    lines = _lines(LOG_SAMPLES / "real" / "fork-1.18_pr345_bucket_cfg_markdown_bold.log")
    want = _facts(lines)
    assert want["profile"] == "fork-1.18"
    for layer in ("[pod/vllm-0/vllm] ", "2024-09-23T10:00:00.123456789Z "):
        assert _facts([layer + x if x else x for x in lines]) == want


def test_progress_bars_as_wide_as_the_terminal_stay_apart():
    # tqdm draws every bar the window's width: a paste of bars is lines of one width that follow one another
    bars = [f"Warming up graphs: {p:3d}%|{'#' * (p // 5):<20}| {p}/100 [00:{p % 60:02d}<00:10, 4.20it/s]"
            for p in range(10, 100, 10)]
    assert len(set(map(len, bars))) == 1 and len(bars[0]) >= 60
    assert wrap_width(bars) is None and list(unwrap(bars, len(bars[0]))) == bars
