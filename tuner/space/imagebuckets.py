"""Image-bucket dimensions of a search space: VLLM_MULTIMODAL_BUCKETS and VLLM_MULTIMODAL_RESOLUTIONS,
written as YAML lists or as the variable's own text, checked as the release reads them, and kept as
that text (what the trial's environment gets and what the trial records).

    VLLM_MULTIMODAL_BUCKETS:
      type: categorical
      choices: ["", [256, 1156], [256, 576, 1156, 3600]]      # "" is the release's own table
    VLLM_MULTIMODAL_RESOLUTIONS:
      type: categorical
      choices: [[1280x720, 256x256], [[1280, 720, "1-2"]], "864x480x1-4"]

A bucket list is patches per image (or images per batch for batch-based towers, pixel buckets on the
fork), each an integer >= 1, written sorted as the release sorts them; a resolution is `WxH`, `WxHxN`
or `WxHxN-M` (N, N-M: items per call), or [W, H], [W, H, N], [W, H, "N-M"]. Why here and not in the
release's variable table: the server reads these only when it loads a multimodal model, so a bad value
is harmless to a text model's start but wrong in any space written for image buckets.
"""

from __future__ import annotations

from typing import Any

from ..buckets.base import BucketConfigError
from ..buckets.vision import BUCKETS_VAR, RESOLUTIONS_VAR, parse_resolutions

IMAGE_VARIABLES = (BUCKETS_VAR, RESOLUTIONS_VAR)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _buckets_text(value: Any) -> str:
    if isinstance(value, list):
        bad = [v for v in value if _int(v) is None]
        if bad or not value:
            raise ValueError(f"{value!r}: a bucket list is a non-empty list of integers"
                             + (f" ({bad[0]!r} is not one)" if bad else ""))
        text = ",".join(str(v) for v in sorted(value))
    elif isinstance(value, str) or _int(value) is not None:
        text = str(value).strip()
    else:
        raise ValueError(f"{value!r}: give a list of integers or the variable's text, e.g. '256,1156'")
    if text == "":
        return text  # the release's own table for the model
    if text == "None":
        raise ValueError("'None': no bucket list at all; the release's multimodal warm-up then stops with "
                         "TypeError: object of type 'NoneType' has no len()")
    items = [x.strip() for x in text.split(",")]
    numbers = []
    for item in items:
        try:
            numbers.append(int(item))  # as the release reads each item
        except ValueError:
            raise ValueError(f"{text!r}: {item!r} is not an integer (the release stops with ValueError: "
                             f"invalid literal for int() with base 10: {item!r})") from None
    small = [n for n in numbers if n < 1]
    if small:
        raise ValueError(f"{text!r}: bucket {small[0]} is not a positive count")
    if len(set(numbers)) < len(numbers):
        twice = next(n for n in numbers if numbers.count(n) > 1)
        raise ValueError(f"{text!r}: bucket {twice} is listed twice")
    return ",".join(str(n) for n in sorted(numbers))


def _resolution_item(item: Any) -> str:
    if isinstance(item, str):
        return item.strip()
    if isinstance(item, list) and len(item) in (2, 3) and all(_int(v) is not None for v in item[:2]):
        if len(item) == 2:
            return f"{item[0]}x{item[1]}"
        count = item[2]
        if _int(count) is not None or isinstance(count, str):
            return f"{item[0]}x{item[1]}x{count}"
    raise ValueError(f"{item!r}: a resolution is 'WxH', 'WxHxN', 'WxHxN-M' or [W, H], [W, H, N], [W, H, 'N-M']")


def _resolutions_text(value: Any) -> str:
    if isinstance(value, list):
        if not value:
            raise ValueError("[]: give at least one resolution (or leave the variable unset)")
        text = ",".join(_resolution_item(v) for v in value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"{value!r}: give a list of resolutions or the variable's text, e.g. '1280x720,256x256'")
    try:
        parsed = parse_resolutions(text)  # the release's own reading (v0.26+)
    except BucketConfigError as exc:
        raise ValueError(f"{text!r}: the release stops with ValueError: "
                         f"{str(exc).removeprefix(RESOLUTIONS_VAR + ': ')}") from None
    for width, height, count in parsed:
        counts = count if isinstance(count, tuple) else (count,) if count is not None else ()
        if width < 1 or height < 1 or any(c < 1 for c in counts):
            raise ValueError(f"{text!r}: {width}x{height}"
                             + (f"x{count}" if count is not None else "") + " has a side or count below 1")
    return text


def image_value_text(name: str, value: Any) -> str:
    """The environment text of an image-bucket value (a YAML list or the variable's text), checked as
    the release reads it; ValueError naming the value otherwise."""
    return _buckets_text(value) if name == BUCKETS_VAR else _resolutions_text(value)
