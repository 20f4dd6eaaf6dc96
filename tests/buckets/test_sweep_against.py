"""`python -m tools.bucket_sweep.against CHECKOUT --profile P`: the stored rows of P run through a local
checkout, what changed printed. The checkout here is the fake release package (fake_release.py), which
builds the engine's lists except for its planted difference, so exactly the planted rows change."""

from __future__ import annotations

import json
import sys

from tools.bucket_sweep.against import main as against

from .fake_release import build_fake_release
from .test_sweep import SWEEP_DIR

_PLAIN_ENV = ("VLLM_BUCKETING_STRATEGY", "VLLM_EXPONENTIAL_BUCKETING", "VLLM_CONTIGUOUS_PA")


def _plain(row: dict) -> bool:
    """Rows whose every input the fake passes on to the engine."""
    inp = row["inputs"]
    return ("error" not in row and not row.get("edge") and "name" not in row
            and all("_BUCKET_" in k or k in _PLAIN_ENV for k in inp["env"])
            and not any(k in inp for k in ("mamba_chunk_size", "pooling", "decode_block_size", "bucket_file",
                                           "skip_decode_block_clamp", "num_speculative_tokens"))
            and row["prompt"]["count"] + row["decode"]["count"] < 3000)


def test_against_a_checkout_prints_exactly_the_rows_that_changed(tmp_path, capsys):
    rows = [r for r in json.loads((SWEEP_DIR / "gaudi-0.26.0.json").read_text())["rows"] if _plain(r)]
    seqs = sorted({r["inputs"]["max_num_seqs"] for r in rows})
    planted = seqs[len(seqs) // 2]
    sample = [r for r in rows if r["inputs"]["max_num_seqs"] == planted][:2] + \
             [r for r in rows if r["inputs"]["max_num_seqs"] != planted][:4]
    data = tmp_path / "data"
    data.mkdir()
    stored = json.loads((SWEEP_DIR / "gaudi-0.26.0.json").read_text())
    (data / "gaudi-0.26.0.json").write_text(json.dumps({**stored, "rows": sample}))
    checkout = tmp_path / "checkout"
    build_fake_release(checkout, "gaudi-0.26.0", plant_seqs=planted)

    code = against([str(checkout), "--profile", "gaudi-0.26.0", "--python", sys.executable, "--data", str(data),
                    "--write", str(tmp_path / "gaudi-next.json")])
    out = capsys.readouterr().out
    changed = [r for r in sample if r["inputs"]["max_num_seqs"] == planted and r["decode"]["count"] > 0]
    assert changed and code == 1, out
    assert f"unchanged: {len(sample) - len(changed)}" in out
    assert f"changed:   {len(changed)} (the engine's gaudi-0.26.0 already gives the new outcome on 0)" in out
    for r in changed:
        assert f"decode {r['decode']['count']} -> {r['decode']['count'] - 1} buckets (engine differs)" in out
    written = json.loads((tmp_path / "gaudi-next.json").read_text())
    assert written["profile"] == "gaudi-next" and len(written["rows"]) == len(sample)
