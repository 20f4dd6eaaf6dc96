"""Every row of tests/data/vectors/vision/ against the image-bucket engine (tuner/buckets/vision.py).

The rows were produced by running each release's own vision-bucket code (SOURCES.md there); a mismatch
means our model of that release is wrong.
"""

from __future__ import annotations

import json

import pytest

from tuner.buckets import BucketConfigError
from tuner.buckets.vision import VisionInputs, build_vision

from ..conftest import VECTOR_DIR

VISION_DIR = VECTOR_DIR / "vision"
_CACHE: dict[str, dict] = {}


def _load(name: str) -> dict:
    if name not in _CACHE:
        _CACHE[name] = json.loads((VISION_DIR / name).read_text())
    return _CACHE[name]


def _rows():
    return [pytest.param(path.name, row, id=f"{path.stem}:{row}")
            for path in sorted(VISION_DIR.glob("vision_*.json"))
            for row in json.loads(path.read_text())["rows"]]


def row_inputs(inp: dict) -> VisionInputs:
    if "model_type" in inp:  # vllm-gaudi rows
        return VisionInputs(model_type=inp["model_type"], env=inp["env"], patch_size=inp["patch_size"],
                            mm_limits=inp["mm_limits"], limit_mm_per_prompt=inp["limit_mm_per_prompt"],
                            prefix_caching=inp["prefix_caching"])
    cfg = inp.get("model_config") or {}
    dynamic = (cfg["min_dynamic_patch"], cfg["max_dynamic_patch"]) if "min_dynamic_patch" in cfg else None
    return VisionInputs(model_class=inp["model_class"], uses_mrope=inp["uses_mrope"], env=inp["env"],
                        max_prompt_shape=inp["max_prompt_shape"], dynamic_patch=dynamic)


def _as_json(value):
    return json.loads(json.dumps(value))  # tuples -> lists, as the rows store them


@pytest.mark.parametrize("file_name,row_name", _rows())
def test_vision_row(file_name, row_name):
    data = _load(file_name)
    row = data["rows"][row_name]
    inp = row_inputs(row["inputs"])
    if "error" in row:
        with pytest.raises(BucketConfigError) as info:
            build_vision(data["profile"], inp)
        assert row["error"].split(": ", 1)[-1] in str(info.value)
        return
    plan = build_vision(data["profile"], inp)
    if row.get("vision_buckets") is False:  # the fork builds none for this model
        assert not plan.active and not plan.steps and not plan.log_records
        return
    assert plan.active
    manager = row["manager"]
    assert plan.buckets == manager["buckets"]
    assert plan.is_batch_based == manager["is_batch_based"]
    if "table_key" in manager:
        assert plan.table_key == manager["table_key"]
        assert _as_json(plan.resolutions) == (manager["resolutions"] or [])
        calls = [[s.modality, s.image_args, s.width, s.height, s.count] for s in plan.steps]
    else:
        calls = [[s.batch_size, s.seq_len, s.image_args] for s in plan.steps]
    assert calls == row["calls"]
    assert [list(r) for r in plan.log_records] == row["log_lines"]


def test_every_profile_with_a_vision_phase_has_rows():
    from tuner.buckets.vision import releases

    covered = {json.loads(p.read_text())["profile"] for p in VISION_DIR.glob("vision_*.json")}
    assert covered == set(releases())
