"""Trace files (`--dataset-name trace`): any bytes, any rows: a workload, or a TraceFormatError that
names the file."""

from __future__ import annotations

import csv
import io
import json

from hypothesis import given
from hypothesis import strategies as st

from tuner.load.trace import TraceFormatError, TraceWorkload

SUFFIXES = st.sampled_from([".csv", ".jsonl", ".ndjson", ".txt", ""])
FIELD = (st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=True) | st.text(max_size=8)
         | st.sampled_from(["12", " 7 ", "1e3", "NaN", "-0", "0x10", "1_000"]))
ROW = st.dictionaries(st.sampled_from(["input_len", "output_len", "timestamp", "other", ""]), FIELD, max_size=4)


def _load(tmp_path_factory, name: str, data: bytes) -> None:
    path = tmp_path_factory.mktemp("trace") / name
    path.write_bytes(data)
    try:
        workload = TraceWorkload.from_file(path, vocab_size=1000)
    except TraceFormatError as exc:
        assert str(path) in str(exc)
        return
    inputs, outputs = workload.lengths()
    assert inputs and len(inputs) == len(outputs)
    assert all(isinstance(n, int) and n >= 1 for n in inputs + outputs)
    ts = workload.timestamps()
    assert ts is None or (ts[0] == 0 and ts == sorted(ts))


@given(st.binary(max_size=300), SUFFIXES)
def test_any_bytes(tmp_path_factory, data, suffix):
    _load(tmp_path_factory, f"t{suffix}", data)


@given(st.lists(ROW | st.lists(FIELD, max_size=3) | FIELD, max_size=6))
def test_any_jsonl_rows(tmp_path_factory, rows):
    text = "\n".join(json.dumps(r, allow_nan=True) for r in rows)
    _load(tmp_path_factory, "t.jsonl", text.encode())


@given(st.lists(ROW, max_size=6), st.booleans())
def test_any_csv_rows(tmp_path_factory, rows, header):
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["input_len", "output_len", "timestamp", "other", ""],
                            extrasaction="ignore")
    if header:
        writer.writeheader()
    for row in rows:
        writer.writerow(row)
    _load(tmp_path_factory, "t.csv", out.getvalue().encode())
