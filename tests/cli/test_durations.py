"""Durations: one parser (tuner.commands.parse_duration) behind every flag that takes one."""

from __future__ import annotations

import pytest

from tuner.cli import build_parser
from tuner.commands import parse_duration


@pytest.mark.parametrize("text,seconds", [("240", 240.0), ("90s", 90.0), ("4m", 240.0), ("4min", 240.0),
                                          ("1h30m", 5400.0), ("1.5h", 5400.0), ("2h15m30s", 8130.0),
                                          ("500ms", 0.5), ("0", 0.0), (" 4M ", 240.0), ("-5", -5.0)])
def test_durations_parse(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "4x", "m", "1h30", "h1", "4m-", "nan", "1,5h", "90 s"])
def test_bad_durations_are_refused_naming_the_value(text):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


FLAGS = {  # command line -> (attribute, seconds)
    ("tune", "--space", "s.yaml", "--warmup-budget", "4m"): ("warmup_budget", 240.0),
    ("tune", "--space", "s.yaml", "--timeout", "8h"): ("timeout", 28800.0),
    ("tune", "--space", "s.yaml", "--boot-timeout", "10m"): ("boot_timeout", 600.0),
    ("tune", "--space", "s.yaml", "--warmup-timeout", "1h30m"): ("warmup_timeout", 5400.0),
    ("tune", "--space", "s.yaml", "--heartbeat-grace", "2m"): ("heartbeat_grace", 120.0),
    ("tune", "--space", "s.yaml", "--storage-outage", "5m"): ("storage_outage", 300.0),
    ("tune", "--space", "s.yaml", "--load-sweep-budget", "90s"): ("load_sweep_budget", 90.0),
    ("export", "x", "--max-warmup", "4m"): ("max_warmup", 240.0),
    ("bench", "--request-timeout", "30s"): ("request_timeout", 30.0),
    ("bench", "--ready-check-timeout-sec", "2m"): ("ready_check_timeout_sec", 120),
}


@pytest.mark.parametrize("argv", list(FLAGS), ids=lambda a: " ".join(a[-2:]))
def test_every_duration_flag_takes_units(argv):
    attr, seconds = FLAGS[argv]
    assert getattr(build_parser().parse_args(list(argv)), attr) == seconds


def test_no_duration_flag_is_left_as_a_plain_float():
    """Every option whose help or metavar says seconds goes through the parser."""
    from tuner.commands import duration

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    plain = []
    for name, p in sub.choices.items():
        if name == "sim-serve":  # the simulator's own flags, passed through
            continue
        for a in p._actions:
            says_seconds = a.metavar == "S" or "seconds" in (a.help or "")
            if says_seconds and a.type not in (duration,) and getattr(a.type, "__name__", "") != "<lambda>":
                plain.append(f"{name} {a.option_strings[0]}")
    assert not plain, plain
