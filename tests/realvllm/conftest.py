"""Fixtures of the genuine-vLLM tier, defined once here so that every module shares them: the
environment is ensured once per session, and one server runs at a time on the machine."""

from __future__ import annotations

import contextlib
import json
import sys
import time

import pytest

from . import env as realenv

_FIGURES: list[str] = []  # printed at the end of each module (timings and the study's results)


def _say(request):
    """Print to the terminal now, past pytest's output capture (like capsys.disabled())."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")

    def say(msg: str) -> None:
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            if reporter is not None:
                reporter.write_line(f"[realvllm] {msg}")
            else:
                print(f"[realvllm] {msg}", file=sys.stderr)
    return say


@pytest.fixture(scope="session")
def vllm_env(request):
    say = _say(request)
    t0 = time.monotonic()
    try:
        env = realenv.ensure(say=say)
    except realenv.EnvBuildError as e:
        say(f"SKIPPING the real-vLLM tier: the environment cannot be built: {e}")
        pytest.skip(f"real-vLLM environment cannot be built: {e}")
    _FIGURES.append(f"environment: {'built' if env.built else 'cached'} in {time.monotonic() - t0:.1f} s "
                    f"({env.version}; {json.dumps(env.timings)}) at {env.venv}")
    return env


@pytest.fixture(scope="module", autouse=True)
def _one_server_at_a_time(request):
    """Holds the machine-wide server lock for the module; prints the figures collected at the end.
    (Test modules must not import these fixtures: an imported fixture is defined again there.)"""
    env = request.getfixturevalue("vllm_env")
    say = _say(request)
    with realenv.server_lock(env.venv, say):
        yield
    for line in _FIGURES:
        say(line)
    _FIGURES.clear()  # each module prints its own
