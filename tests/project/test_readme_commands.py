"""Every command block of README.md runs, in order, in a scratch folder: the offline answers as written,
the studies cheaply (`tune` gets `--n-trials 1` appended: the last value wins, the rest of its command
line is as written). What needs hardware, an installer or CI itself is skipped, saying why.
The README stays short enough to finish: under 200 lines."""

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


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    for name in ("search_spaces", "tests"):  # the README's relative paths
        (folder / name).symlink_to(ROOT / name)
    return folder


def test_the_readme_is_short_and_has_commands_to_run():
    assert len(README.splitlines()) < 200
    runnable = [c for _, c in COMMANDS if _skip_reason(shlex.split(c.split(">")[0])) is None]
    assert len(runnable) >= 10, runnable
    assert {shlex.split(c)[1] for c in runnable} >= {"tune", "explain", "buckets", "calc", "fit", "compare",
                                                     "report", "export"}


@pytest.mark.parametrize("block,command", COMMANDS, ids=[f"{b}:{c[:50]}" for b, c in COMMANDS])
def test_readme_command_runs(block, command, scratch, monkeypatch):
    command, _, redirect = command.partition(" > ")
    argv = shlex.split(command)
    reason = _skip_reason(argv)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(scratch)
    args = argv[1:] + (["--n-trials", "1"] if argv[1] == "tune" else [])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    assert code == 0, f"{command}\n{out.getvalue()[-2000:]}\n{err.getvalue()[-2000:]}"
    assert "error:" not in err.getvalue()
    if redirect:
        (scratch / redirect.strip()).write_text(out.getvalue())
