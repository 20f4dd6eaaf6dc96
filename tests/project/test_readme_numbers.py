"""Every number in README.md that the code can confirm, checked against the code: a count the README
states in words ("thirteen release profiles") goes stale silently when a profile or a model is added."""

from __future__ import annotations

import re

from tuner.buckets.calc import VARIABLE_ORDER
from tuner.buckets.registry import profiles
from tuner.models.locate import catalogue

from ..conftest import ROOT

WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                    "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}


def _readme() -> str:
    return " ".join((ROOT / "README.md").read_text().split())   # sentences wrap across lines


def _stated(pattern: str) -> int:
    """The number (digits or a word) the README states at the group (NUM) of `pattern`."""
    found = re.findall(pattern.replace("NUM", r"\w+"), _readme())
    assert found, f"README no longer says {pattern!r}: update this test with the sentence"
    values = {int(n) if n.isdigit() else WORDS[n.lower()] for n in found}
    assert len(values) == 1, f"README states {pattern!r} with different numbers: {found}"
    return values.pop()


def test_release_profiles_counted_as_the_registry_holds_them():
    distinct = {id(p) for p in profiles().values()}   # aliases (gaudi-0.27.0) are not profiles of their own
    assert _stated(r"\b(NUM) release profiles") == len(distinct)


def test_model_catalogue_counted_as_shipped():
    assert _stated(r"catalogue of (NUM) real configs") == len(list(catalogue()))


def test_linear_bucket_variables_counted_as_the_calculator_prints_them():
    linear = [n for n in VARIABLE_ORDER if n.startswith("VLLM_")]   # MAX_MODEL_LEN is a flag
    assert _stated(r"the (NUM) linear bucket variables") == len(linear)


def test_the_demo_prose_and_its_command_ask_for_the_same_trials():
    text = _readme()
    assert _stated(r"a (NUM)-trial study") == int(re.search(r"bucket-tuner tune --space search_spaces/demo\.yaml "
                                                            r"--n-trials (\d+)", text).group(1))


def test_the_python_the_readme_names_is_one_the_package_accepts():
    stated = re.search(r"Python (3\.\d+)", _readme()).group(1)
    required = re.search(r'requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tuple(map(int, stated.split("."))) >= tuple(map(int, required.split(".")))
