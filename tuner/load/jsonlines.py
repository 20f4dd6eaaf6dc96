"""A dataset's JSONL file (vLLM's custom, spec_bench and custom_image datasets): one JSON object a line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..vocabulary.textfile import read_text


def jsonl_objects(path: Path, what: str, check: Callable[[dict], bool]) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line, each checked (``what`` says what a line needs); the
    errors name the file and the line."""
    try:
        lines = read_text(path, "--dataset-path", errors="strict").lines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--dataset-path {path}: {e}") from None
    items = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise ValueError(f"{path}:{n}: not valid JSON") from None
        if not isinstance(item, dict) or not check(item):
            raise ValueError(f"{path}:{n}: each line needs {what}")
        items.append((n, item))
    return items
