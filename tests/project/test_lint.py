"""The code stays clean under the project's own ruff configuration ([tool.ruff] in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    proc = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
