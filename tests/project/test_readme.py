"""README.md opens with the two commands, and CI runs exactly the README's test command."""

import re

from ..conftest import ROOT


def _code_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_readme_opens_with_demo_and_test_commands():
    blocks = _code_blocks((ROOT / "README.md").read_text())
    demo, tests = blocks[0], blocks[1]
    assert "bucket-tuner" in demo and "pip install" in demo
    assert "pytest" in tests and "pip install" in tests


def test_ci_runs_the_readme_test_command():
    tests = _code_blocks((ROOT / "README.md").read_text())[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines()
