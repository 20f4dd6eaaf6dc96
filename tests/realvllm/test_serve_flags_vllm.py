"""The table of `vllm serve` flags (tuner/vocabulary/vllm_serve_flags.json) is the genuine vLLM's parser: every
option string of this tier's vLLM, with the values it takes (tools/vllm_serve_flags.py --check)."""

from __future__ import annotations

import subprocess

import pytest

from ..conftest import ROOT

pytestmark = [pytest.mark.realvllm, pytest.mark.xdist_group("realvllm")]


def test_the_shipped_flag_table_is_vllms_own_parser(vllm_env):
    run = subprocess.run([str(vllm_env.python), str(ROOT / "tools" / "vllm_serve_flags.py"), "--check"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "same as shipped" in run.stdout, run.stdout + run.stderr[-2000:]
