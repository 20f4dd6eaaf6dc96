"""vLLM's burstgpt dataset (vllm/benchmarks/datasets: BurstGPTDataset): BurstGPT's request and response
lengths, replayed as prompts of those lengths.

The CSV of the BurstGPT trace (https://github.com/HPMLL/BurstGPT: Timestamp, Model, Request tokens,
Response tokens, Total tokens, Log Type) is read as vLLM 0.32 reads it: the GPT-4 rows whose response is
longer than 0 tokens, ``--num-prompts`` of them drawn by pandas' ``DataFrame.sample(n, random_state=seed)``
(with replacement when the file has fewer), in the drawn order, so a seed picks vLLM's rows. vLLM then
decodes ids (i + j) mod vocab to text, which the server tokenizes again (its lengths drift); here each prompt
is a run of ids of exactly ``Request tokens`` and the server sees that many. The trace's timestamps are not
used (vLLM's client sends at --request-rate too; ``--dataset-name trace`` replays times).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .workload import DEFAULT_RESERVED_IDS, DEFAULT_VOCAB_SIZE, TokenIdSpace, Workload, _length_stats

MODEL = "GPT-4"  # vLLM keeps these rows only
COLUMNS = ("Model", "Request tokens", "Response tokens")


def burstgpt_lengths(path: Path, num: int, seed: int) -> tuple[list[int], list[int]]:
    """(request tokens, response tokens) of the rows vLLM's client samples from the CSV."""
    import pandas as pd

    try:
        df = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"--dataset-path {path}: cannot read the BurstGPT CSV ({e})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"--dataset-path {path}: not a BurstGPT CSV: no column {', '.join(map(repr, missing))} "
                         f"(it has {', '.join(map(str, df.columns))})")
    rows = df[df["Model"] == MODEL]
    try:
        rows = rows[rows["Response tokens"] > 0]
    except TypeError:
        raise ValueError(f"--dataset-path {path}: 'Response tokens' holds values that are not numbers") from None
    if rows.empty:
        raise ValueError(f"--dataset-path {path}: no {MODEL} row with a response of 1 token or more "
                         "(vLLM's burstgpt uses those only)")
    picked = rows.sample(n=num, random_state=seed, replace=num > len(rows))
    try:
        return [int(v) for v in picked["Request tokens"]], [int(v) for v in picked["Response tokens"]]
    except (TypeError, ValueError):
        raise ValueError(f"--dataset-path {path}: 'Request tokens' holds values that are not numbers") from None


@dataclass
class BurstGPTWorkload(Workload):
    path: Path
    num_prompts: int = 1000
    seed: int = 0
    output_len: int | None = None  # --output-len: every request asks this many (vLLM's general flag)
    vocab_size: int = DEFAULT_VOCAB_SIZE
    reserved_ids: int = DEFAULT_RESERVED_IDS
    excluded_ids: frozenset = frozenset()
    token_space: TokenIdSpace = field(init=False, repr=False, compare=False)

    kind = "burstgpt"

    def __post_init__(self) -> None:
        if self.num_prompts < 1:
            raise ValueError(f"--num-prompts must be at least 1, got {self.num_prompts}")
        self.token_space = TokenIdSpace(self.vocab_size, self.reserved_ids, frozenset(self.excluded_ids))
        self._in, self._out = burstgpt_lengths(self.path, self.num_prompts, self.seed)
        if self.output_len is not None:
            self._out = [self.output_len] * len(self._in)

    def lengths(self) -> tuple[list[int], list[int]]:
        return list(self._in), list(self._out)

    def params(self) -> dict[str, Any]:
        return {"source": str(self.path), "model_rows": MODEL, "seed": self.seed}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.params(), "num_prompts": len(self._in), "prompt_format": "token-ids",
                "vocab_size": self.token_space.vocab_size, "prompt_len_stats": _length_stats(self._in),
                "output_len_stats": _length_stats(self._out)}

    to_dict = describe
