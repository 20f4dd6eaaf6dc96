"""Every command block of README.md runs, in order, in a scratch folder: the offline answers as written,
the studies cheaply (`tune` gets `--n-trials 1` appended: the last value wins, the rest of its command
line is as written), and with limits no machine's load reaches (tune_overrides). What needs hardware, an
installer or CI itself is skipped, saying why. The README stays short enough to finish: under 200 lines."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from tuner.cli import main

from ..conftest import ROOT

README = (ROOT / "README.md").read_text()


def _commands() -> list[tuple[int, str]]:
    """(block number, one command line), continuation lines joined, `&&` chains split."""
    out = []
    for number, block in enumerate(re.findall(r"```bash\n(.*?)```", README, flags=re.S)):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                out += [(number, part.strip()) for part in line.split("&&")]
    return out


COMMANDS = _commands()


def _skip_reason(argv: list[str]) -> str | None:
    if argv[:3] == ["python3", "-m", "venv"] or "pip" in argv[0]:
        return "installs the package: these tests run in the installed one"
    if "pytest" in argv:
        return "the test command itself: .ci/run runs it"
    if not argv[0].endswith("bucket-tuner"):
        return f"{argv[0]} is not bucket-tuner"
    if "--backend" in argv and argv[argv.index("--backend") + 1] == "vllm":
        return "needs a Gaudi node with vLLM"
    return None


def _split(command: str) -> tuple[list[str], str]:
    command, _, redirect = command.partition(" > ")
    return shlex.split(command), redirect.strip()


RUN = [c for _, c in COMMANDS if _skip_reason(_split(c)[0]) is None]

# On the time-scaled simulator a p99 is measured on the wall clock (a client stalled by a busy machine
# stretches it by 1 / time scale) and so is the live warm-up watch's pace: the README's own study once
# ended over its 3,000 ms SLO, or stopped over its 10 min budget, on a busy machine, and `export` after it
# had nothing to export. Its limits stay on the command line (parsed, recorded); these override them (the
# last value wins) with ones no load reaches. export's --max-warmup reads the log's simulated warm-up.
GENEROUS_SLO_MS, GENEROUS_BUDGET = 600_000, "10h"


def tune_overrides(argv: list[str]) -> list[str]:
    out = ["--n-trials", "1"]
    if "--slo" in argv:
        given = []
        for token in argv[argv.index("--slo") + 1:]:
            if token.startswith("-"):
                break
            given.append(token.split("=")[0])
        out += ["--slo", *(f"{metric}={GENEROUS_SLO_MS}" for metric in given)]
    if "--warmup-budget" in argv:
        out += ["--warmup-budget", GENEROUS_BUDGET]
    return out
SKIP = [c for _, c in COMMANDS if _skip_reason(_split(c)[0]) is not None]


def test_the_readme_is_short_and_has_commands_to_run():
    assert len(README.splitlines()) < 200
    assert len(RUN) >= 10, RUN
    assert {_split(c)[0][1] for c in RUN} >= {"tune", "explain", "buckets", "calc", "fit", "compare", "report",
                                              "export"}


def test_the_overrides_replace_every_limit_a_readme_study_is_given():
    from tuner.cli import build_parser

    studies = [_split(c)[0] for c in RUN if _split(c)[0][1] == "tune"]
    assert any("--slo" in argv for argv in studies)
    for argv in studies:
        args = build_parser().parse_args(argv[1:] + tune_overrides(argv))
        assert args.n_trials == 1
        if "--slo" in argv:
            written = {s.split("=")[0] for s in build_parser().parse_args(argv[1:]).slo}
            assert {s.split("=")[0] for s in args.slo} == written
            assert all(float(s.split("=")[1]) == GENEROUS_SLO_MS for s in args.slo)
        if "--warmup-budget" in argv:
            assert args.warmup_budget == 36_000


def test_readme_commands_run_in_order(tmp_path, monkeypatch):
    """One test, in order: `report` and `export` read the study `tune` made, `compare` the file `calc` wrote."""
    for name in ("search_spaces", "tests"):  # the README's relative paths
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    for command in RUN:
        argv, redirect = _split(command)
        args = argv[1:] + (tune_overrides(argv) if argv[1] == "tune" else [])
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
        assert code == 0, f"{command}\n{out.getvalue()[-2000:]}\n{err.getvalue()[-2000:]}"
        assert "error:" not in err.getvalue(), command
        if redirect:
            (tmp_path / redirect).write_text(out.getvalue())


@pytest.mark.parametrize("command", SKIP, ids=[c[:50] for c in SKIP])
def test_readme_commands_not_run_here_say_why(command):
    pytest.skip(_skip_reason(_split(command)[0]))
