"""The workload against a configuration's buckets: where the request lengths fall between the bucket
boundaries, and the padding that implies.

An estimate from the client side (the lengths in bench.json and the bucket lists in the server log),
stated as such: prompts are padded along the sequence dimension one sequence at a time; decode is
looked at per sequence at the decode batch size the load reaches (its bucket), mid-way through
generation. Batch-size padding is not included in either figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from optuna.trial import FrozenTrial

from ..buckets.serverdefaults import MAX_NUM_SEQS
from ..logparse import GeneratedBuckets
from ..vocabulary.record import TrialRecord, as_record


@dataclass
class Padding:
    input_lens: list[int] = field(default_factory=list)
    context_lens: list[int] = field(default_factory=list)   # prompt + output tokens at the end
    prompt_edges: list[int] = field(default_factory=list)    # tokens
    decode_edges: list[int] = field(default_factory=list)    # tokens per sequence at `decode_bs`
    decode_bs: int | None = None
    prompt_waste: float | None = None                        # share of computed prompt tokens that pad
    decode_waste: float | None = None
    beyond_prompt: int = 0                                   # prompts longer than every bucket
    beyond_decode: int = 0


def bench_lengths(t: FrozenTrial | TrialRecord) -> tuple[list[int], list[int]]:
    path = as_record(t).artifacts.get("bench_json")
    if not path or not Path(path).is_file():
        return [], []
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return [], []
    ins, outs = data.get("input_lens") or [], data.get("output_lens") or []
    ok = [e == "" for e in data.get("errors") or [""] * len(ins)]
    pairs = [(i, o) for i, o, good in zip(ins, outs, ok) if good and i is not None and o is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _dim(gen: GeneratedBuckets, words: tuple[str, ...], default: int) -> tuple[int, str]:
    names = list(gen.dims or ())
    for i, n in enumerate(names):
        if any(w in n for w in words):
            return i, n
    return default, names[default] if default < len(names) else ""


def _up(x: float, edges: list[int]) -> int | None:
    for e in edges:
        if e >= x:
            return e
    return None


def padding(t: FrozenTrial | TrialRecord, generated: dict[str, GeneratedBuckets],
            max_concurrency: int | None) -> Padding:
    rec = as_record(t)
    ins, outs = bench_lengths(rec)
    out = Padding(input_lens=ins, context_lens=[i + o for i, o in zip(ins, outs)])
    block = int(rec.server.get("block_size", 128))
    prompt = generated.get("prompt")
    if prompt and prompt.buckets:
        i, _ = _dim(prompt, ("seq", "query"), 1)
        out.prompt_edges = sorted({b[i] for b in prompt.buckets if len(b) > i})
        padded = [_up(x, out.prompt_edges) for x in ins]
        out.beyond_prompt = sum(p is None for p in padded)
        fit = [(x, p) for x, p in zip(ins, padded) if p]
        if fit:
            out.prompt_waste = 1.0 - sum(x for x, _ in fit) / sum(p for _, p in fit)
    decode = generated.get("decode")
    if decode and decode.buckets:
        _decode_edges(out, decode, ins, outs, block, rec, max_concurrency)
    return out


def _decode_edges(out: Padding, decode: GeneratedBuckets, ins, outs, block: int, rec: TrialRecord,
                  max_concurrency) -> None:
    i, name = _dim(decode, ("block", "ctx"), 1)
    seqs = int(rec.server.get("max_num_seqs", MAX_NUM_SEQS))
    running = min(seqs, max_concurrency or seqs)
    bs_values = sorted({b[0] for b in decode.buckets})
    bs = _up(running, bs_values) or bs_values[-1]
    out.decode_bs = bs
    edges = sorted({b[i] for b in decode.buckets if b[0] == bs and len(b) > i})
    if decode.dims is None:  # fork 1.17: the second dimension is the padded length in tokens
        out.decode_edges = edges
        unit = 1
    else:
        share = bs if "total" in name else 1  # total blocks of the batch, or blocks of one sequence
        out.decode_edges = sorted({int(e * block / share) for e in edges})
        unit = block
    real = padded = 0.0
    for x, o in zip(ins, outs):
        mid = x + o / 2.0  # a sequence's context half-way through its generation
        need = math.ceil(mid / unit) * unit
        p = _up(need, out.decode_edges)
        if p is None:
            out.beyond_decode += 1
            continue
        real, padded = real + mid, padded + p
    if padded:
        out.decode_waste = 1.0 - real / padded
