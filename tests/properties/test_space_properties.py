"""Search-space files: whatever a user writes, loading and checking it fails only with SpaceError."""

from __future__ import annotations

import copy
import string

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from tuner.space.schema import SearchSpace, SpaceError

from ..conftest import ROOT

# Real spaces (the shipped ones and one with every feature) to mutate: most mutations keep a space
# loadable, so the release check, conditions and derived expressions are exercised too.
BASES = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "search_spaces").glob("*.yaml"))] + [{
    "name": "full", "release": "fork-1.21.2",
    "server": {"max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 4096},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {
        "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16},
        "VLLM_GRAPH_RESERVED_MEM": {"type": "float", "low": 0.02, "high": 0.4, "log": True},
        "prompt_step": {"env": "VLLM_PROMPT_SEQ_BUCKET_STEP", "type": "categorical", "choices": [128, 256],
                        "when": {"max_num_seqs": [16, 32]}},
        "enforce_eager": {"type": "bool"},
    },
    "derived": {"VLLM_DECODE_BLOCK_BUCKET_MAX": "max_num_seqs * ceil(max_model_len / block_size)",
                "VLLM_PROMPT_BS_BUCKET_MAX": "min(max_num_seqs, max_num_batched_tokens // block_size)"},
}]

NAMES = st.sampled_from([
    "max_num_seqs", "max_model_len", "block_size", "enforce_eager", "gpu_memory_utilization", "dtype",
    "VLLM_PROMPT_SEQ_BUCKET_STEP", "VLLM_PROMPT_SEQ_BUCKET_STEPS", "VLLM_DECODE_BLOCK_BUCKET_STEP",
    "VLLM_EXPONENTIAL_BUCKETING", "VLLM_BUCKETING_STRATEGY", "VLLM_GRAPH_RESERVED_MEM", "PT_HPU_LAZY_MODE",
    "VLLM_SOMETHING_ELSE", "fault", "x", "",
]) | st.text(string.ascii_letters + "_", max_size=12)
SCALARS = (st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True)
           | st.text(max_size=12) | NAMES)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NAMES, inner, max_size=4),
                      max_leaves=12)
EXPRESSIONS = st.sampled_from([
    "max_num_seqs * ceil(max_model_len / block_size)", "max_num_seqs // 0", "ceil(x)", "10 ** 10 ** 10",
    "round_up(max_num_seqs, 0)", "min()", "int(dtype)", "max_num_seqs +", "__import__('os')",
    "max_num_seqs.real", "[1][0]", "-max_num_seqs", "2 ** -2000", "ceil(1e308 * 10)",
]) | st.text(max_size=20)
PARAM = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["int", "float", "categorical", "bool", "str"]) | SCALARS,
    "low": SCALARS, "high": SCALARS, "step": SCALARS, "log": SCALARS,
    "choices": st.lists(SCALARS, max_size=4) | SCALARS,
    "env": NAMES, "server": NAMES,
    "when": st.dictionaries(NAMES, SCALARS | st.lists(SCALARS, max_size=3), max_size=2) | SCALARS,
})
SPACES = st.fixed_dictionaries({}, optional={
    "name": SCALARS, "description": SCALARS,
    "release": st.sampled_from(["fork-1.17", "fork-1.21.2", "fork-1.22", "gaudi-main", "fork-9"]) | SCALARS,
    "server": st.dictionaries(NAMES, SCALARS, max_size=3) | VALUES,
    "env": st.dictionaries(NAMES, SCALARS, max_size=3) | VALUES,
    "parameters": st.dictionaries(NAMES, PARAM | VALUES, min_size=1, max_size=4) | VALUES,
    "derived": st.dictionaries(NAMES, EXPRESSIONS, max_size=2) | VALUES,
    "bogus": SCALARS,
})


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


@st.composite
def mutated_spaces(draw):
    space = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from([p for p in _paths(space) if p]))
        parent = space
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(NAMES)] = draw(VALUES)
        else:
            parent[path[-1]] = draw(VALUES | EXPRESSIONS)
    return space


@given(st.text(max_size=300))
def test_any_text_loads_or_fails_with_space_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_text(text)
    try:
        SearchSpace.load(path)
    except SpaceError as exc:
        assert str(path) in str(exc)


@given(st.binary(max_size=200))
def test_any_bytes_load_or_fail_with_space_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_bytes(data)
    try:
        SearchSpace.load(path)
    except SpaceError:
        pass


PICKS = st.lists(st.integers(0, 7), max_size=8)  # which grid value each parameter takes


def _load_check_sample(data, picks):
    try:
        space = SearchSpace.from_dict(yaml.safe_load(yaml.safe_dump(data)), source="s.yaml")
        if space.release:
            space.check_release(space.release)
        values = {}
        for i, p in enumerate(space.parameters):
            grid = p.grid_values(3)
            values[p.name] = grid[(picks[i] if i < len(picks) else 0) % len(grid)] if grid else None
        space.settings_for(values)
    except SpaceError as exc:
        assert "s.yaml" in str(exc)


@given(SPACES, PICKS)
def test_any_mapping_loads_checks_and_samples_or_fails_with_space_error(data, picks):
    _load_check_sample(data, picks)


@given(mutated_spaces(), PICKS)
@example(dict(BASES[-1], derived={"VLLM_DECODE_BLOCK_BUCKET_MAX": "10 ** 10 ** 10"}), [])
@example(dict(BASES[-1], derived={"VLLM_DECODE_BLOCK_BUCKET_MAX": "ceil(max_num_seqs * 1e308 * 10)"}), [])
@example(dict(BASES[-1], derived={"VLLM_DECODE_BLOCK_BUCKET_MAX": "ceil(max_model_len * 0 / 0.0)"}), [])
def test_a_mutated_real_space_loads_checks_and_samples_or_fails_with_space_error(data, picks):
    _load_check_sample(data, picks)
