"""The log parser on mangled real log lines (tests/data/log-samples): a truncated, spliced, re-numbered
or garbled line is read as some event or none, never an exception. The live watcher (which, unlike
`parse_line`, has no catch-all) keeps a usable summary through any sequence of such lines."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from tuner.logparse import Event, LogWatcher, parse_line
from tuner.logparse.message import _parse_single

from ..conftest import LOG_SAMPLES

LINES = [ln for p in sorted(LOG_SAMPLES.glob("*.log")) for ln in p.read_text().splitlines()
         if ln.strip() and not ln.startswith("# SOURCE")]
NOISE = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6) | st.sampled_from(
    ["0", "-1", "999999999999999999999", "nan", "inf", "1e400", "(", ")", "[", "]", ",", ":", "%", "GiB", "\r",
     "\x1b[32m", "\t", "  ", "\u00a0", "None", "(1, 128, 0)", "[(1, 128)", "it/s]"])


@st.composite
def mangled_lines(draw) -> str:
    line = draw(st.sampled_from(LINES))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(line)))
        j = draw(st.integers(i, min(len(line), i + 12)))
        action = draw(st.sampled_from(["replace", "insert", "delete", "truncate", "splice", "digits"]))
        if action == "replace":
            line = line[:i] + draw(NOISE) + line[j:]
        elif action == "insert":
            line = line[:i] + draw(NOISE) + line[i:]
        elif action == "delete":
            line = line[:i] + line[j:]
        elif action == "truncate":
            line = line[:i]
        elif action == "splice":  # the head of one line onto the tail of another
            other = draw(st.sampled_from(LINES))
            line = line[:i] + other[draw(st.integers(0, len(other))):]
        else:  # every digit run rewritten: huge, zero or negative numbers
            line = "".join(draw(st.sampled_from(["0", "9" * 30, "-1"])) if c.isdigit() else c for c in line)
    return line


def test_the_samples_are_read():
    assert len(LINES) > 100
    assert sum(parse_line(ln) is not None for ln in LINES) > 20  # the unmangled lines do parse


@given(mangled_lines())
def test_a_mangled_line_is_an_event_or_none(line):
    assert _parse_single(line) is None or isinstance(_parse_single(line), Event)  # no catch-all here
    assert parse_line(line) is None or isinstance(parse_line(line), Event)


@given(st.lists(mangled_lines() | st.sampled_from(LINES), min_size=1, max_size=25))
def test_the_watcher_survives_any_sequence(lines):
    watcher = LogWatcher(clock=lambda: 0.0)
    for n, line in enumerate(lines):
        assert all(isinstance(e, Event) for e in watcher.feed(line, t=float(n)))
    watcher.flush()
    watcher.summary()


_CFG = ("INFO 08-02 17:37:44 habana_model_runner.py:493] Prompt bucket config (min, step, max_warmup) "
        "bs:[1, 32, 4], seq:[128, 128, 1024]")


@given(st.lists(mangled_lines() | st.sampled_from(LINES), min_size=0, max_size=30))
@example([_CFG, "INFO 08-02 17:37:44 habana_model_runner.py:499] Generated 3 prompt buckets: "
                "[(1, 128), ( 768), (2, 128)]"])  # a cut tuple in a bucket list
@example([_CFG, "INFO 08-02 17:37:54 habana_model_runner.py:1066] [Warmup][Prompt][1/24] batch_size:4 "
                "seq_len:1024 free_mem:55.43 GiB",
          "INFO 08-02 17:38:22 habana_model_runner.py:1066] [Warmup][Decode][48/48] batch_size:1 seq_len:128 "
          "free_mem:55.43 GiB",
          "INFO 08-02 17:37:54 habana_worker.py:134] Model profiling run took 504 MiB of device memory "
          "(15.46 GiB/94.62 GiB used) and 180.9 MiB of host memory (475.4 GiB/1007 GiB used)"])  # time runs back
def test_explain_reads_any_mangled_log(lines):
    from tuner.explain import explain
    from tuner.explain.render import render_text, to_json

    x = explain(lines, source="server.log", advise_opts={"block_size": 128})
    render_text(x)
    to_json(x)
