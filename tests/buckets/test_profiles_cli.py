"""`bucket-tuner profiles`: every profile, and an alias that names another release says why."""

from __future__ import annotations

from tuner.buckets import get_profile, profiles
from tuner.cli import main


def _blocks(text: str) -> dict[str, str]:
    """name -> its block joined into one line (a block: the name's line and its indented lines)."""
    blocks: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith(" "):
            blocks[name] += " " + line.strip()
        else:
            name = line.split()[0]
            blocks[name] = line
    return blocks


def test_profiles_lists_fork_123_and_explains_the_gaudi_027_alias(capsys):
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines())   # it printed ~280-character lines before
    blocks = _blocks(out)
    assert set(profiles()) <= set(blocks)
    alias = blocks["gaudi-0.27.0"]
    assert "alias of gaudi-0.26.0" in alias
    assert "vllm-project/vllm-gaudi@v0.27.0rc0 (d01a3caecd8d818c29c06af56591e40eb4e3dcca)" in alias
    assert get_profile("gaudi-0.27.0") is get_profile("gaudi-0.26.0")
    fork = blocks["fork-1.23"]
    assert "vllm-fork v1.23.0 (6ecf39ca9354a4fb83789cc31aa7bb5ec35541df)" in fork and "alias fork-1.23.0" in fork
    assert blocks["gaudi-main"].split()[1:3] == ["exponential", "(default),"]
