"""`bucket-tuner profiles`: every profile, and an alias that names another release says why."""

from __future__ import annotations

from tuner.buckets import get_profile, profiles
from tuner.cli import main


def test_profiles_lists_fork_123_and_explains_the_gaudi_027_alias(capsys):
    assert main(["profiles"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert set(profiles()) <= {line.split()[0] for line in lines}
    [alias] = [line for line in lines if line.startswith("gaudi-0.27.0 ")]
    assert ("alias of gaudi-0.26.0: vllm-project/vllm-gaudi@v0.27.0rc0 (d01a3caecd8d818c29c06af56591e40eb4e3dcca)"
            in alias)
    assert get_profile("gaudi-0.27.0") is get_profile("gaudi-0.26.0")
    [fork] = [line for line in lines if line.startswith("fork-1.23 ")]
    assert "vllm-fork v1.23.0 (6ecf39ca9354a4fb83789cc31aa7bb5ec35541df)" in fork and "alias fork-1.23.0" in fork
