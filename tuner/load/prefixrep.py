"""vLLM's prefix_repetition dataset (vllm/benchmarks/datasets: PrefixRepetitionRandomDataset), as token ids.

``num_prefixes`` random prefixes of ``prefix_len`` tokens; each has ``num_prompts // num_prefixes`` prompts, the
prefix followed by a random suffix of ``suffix_len`` tokens, all asking ``output_len`` tokens; the requests are
then shuffled. With prefix caching on, each prefix is computed once and then hit: on Gaudi that moves the prompt
into buckets with context blocks, which this dataset exercises and the one shared prefix of --random-prefix-len
does not.

As vLLM: the request count is ``num_prefixes * (num_prompts // num_prefixes)`` (fewer prompts than prefixes is
refused), the prefixes and suffixes are drawn in its order (each prefix, then its prompts' suffixes) from numpy's
generator seeded with --seed, and the order is Python's ``random.shuffle`` after ``random.seed(seed)``, so the
same seed gives vLLM's order of prefixes. Unlike vLLM's client, which decodes the ids to text and lets the
server tokenize it again (its lengths then drift by a few tokens), the ids are sent as they are: the server sees
exactly ``prefix_len + suffix_len`` tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .workload import (
    DEFAULT_RESERVED_IDS,
    DEFAULT_VOCAB_SIZE,
    PromptRecipe,
    RequestSpec,
    TokenIdSpace,
    Workload,
    _length_stats,
)

DEFAULT_PREFIX_LEN = 256  # vLLM's defaults
DEFAULT_SUFFIX_LEN = 256
DEFAULT_NUM_PREFIXES = 10
DEFAULT_OUTPUT_LEN = 128


@dataclass
class PrefixRepetitionWorkload(Workload):
    prefix_len: int = DEFAULT_PREFIX_LEN
    suffix_len: int = DEFAULT_SUFFIX_LEN
    num_prefixes: int = DEFAULT_NUM_PREFIXES
    output_len: int = DEFAULT_OUTPUT_LEN
    num_prompts: int = 1000
    seed: int = 0
    shuffle: bool = True  # vLLM's --disable-shuffle: False
    vocab_size: int = DEFAULT_VOCAB_SIZE
    reserved_ids: int = DEFAULT_RESERVED_IDS
    excluded_ids: frozenset = frozenset()  # the tokenizer's special ids
    token_space: TokenIdSpace = field(init=False, repr=False, compare=False)

    kind = "prefix_repetition"

    def __post_init__(self) -> None:
        for name in ("prefix_len", "suffix_len", "output_len"):
            if getattr(self, name) < 0:
                raise ValueError(f"--prefix-repetition-{name.replace('_', '-')} must be 0 or more, "
                                 f"got {getattr(self, name)}")
        if self.num_prefixes < 1:
            raise ValueError(f"--prefix-repetition-num-prefixes must be at least 1, got {self.num_prefixes}")
        if self.prefix_len + self.suffix_len < 1:
            raise ValueError("--prefix-repetition-prefix-len and --prefix-repetition-suffix-len leave an empty prompt")
        if self.num_prompts < self.num_prefixes:
            raise ValueError(f"--num-prompts ({self.num_prompts}) must be greater than or equal to "
                             f"--prefix-repetition-num-prefixes ({self.num_prefixes}), as vLLM requires")
        self.token_space = TokenIdSpace(self.vocab_size, self.reserved_ids, frozenset(self.excluded_ids))
        self._specs = self._draw()

    @property
    def per_prefix(self) -> int:
        return self.num_prompts // self.num_prefixes

    def _draw(self) -> list[RequestSpec]:
        # The prefixes, each drawn once and shared by reference (a long prefix is not copied per request)
        rng = np.random.RandomState(self.seed)  # vLLM: np.random.seed(seed), then randint, prefix by prefix
        space = self.token_space
        prefixes = [tuple(space.ids(rng.randint(0, space.num_allowed, size=self.prefix_len)).tolist())
                    for _ in range(self.num_prefixes)]
        order = [k for k in range(self.num_prefixes) for _ in range(self.per_prefix)]
        if self.shuffle:
            random.Random(self.seed).shuffle(order)  # vLLM: random.seed(seed), then random.shuffle(requests)
        # each suffix a run of its own (distinct from its first two ids on), as the random dataset's bodies
        starts, _ = self._starts()
        return [self._with_prefix(i, prefixes[k], starts[i]) for i, k in enumerate(order)]

    def _with_prefix(self, i: int, prefix: tuple[int, ...], start: tuple[int, int]) -> RequestSpec:
        recipe = PromptRecipe(self.token_space, prefix, int(start[0]), self.suffix_len, int(start[1]),
                              seed=self.seed)
        return RequestSpec(index=i, prompt_len=len(prefix) + self.suffix_len, output_len=self.output_len,
                           recipe=recipe)

    @property
    def num_prompts_sent(self) -> int:
        return self.num_prefixes * self.per_prefix

    def _starts(self, n_warm: int = 0) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        rng = np.random.default_rng([self.seed, 0x5045524D])  # "PERM"
        measured = self.token_space.distinct_starts(rng, self.num_prompts_sent)
        warm = self.token_space.distinct_starts(rng, n_warm, avoid=measured) if n_warm else []
        return measured, warm

    def lengths(self) -> tuple[list[int], list[int]]:
        return [s.prompt_len for s in self._specs], [s.output_len for s in self._specs]

    def requests(self) -> list[RequestSpec]:
        return list(self._specs)

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        """The first request's prefix with suffixes no measured request has: the warm pass touches the buckets
        of a cached prefix and caches that one prefix, as vLLM's warm-ups with its first request do."""
        if n <= 0:
            return []
        _, starts = self._starts(n)
        first = self._specs[0].recipe.prefix
        return [self._with_prefix(i, first, starts[i]) for i in range(n)]

    def params(self) -> dict[str, Any]:
        return {"prefix_len": self.prefix_len, "suffix_len": self.suffix_len, "num_prefixes": self.num_prefixes,
                "output_len": self.output_len, "seed": self.seed, "prompts_per_prefix": self.per_prefix}

    def describe(self) -> dict[str, Any]:
        in_lens, out_lens = self.lengths()
        return {"kind": self.kind, **self.params(), "num_prompts": len(in_lens), "prompt_format": "token-ids",
                "vocab_size": self.token_space.vocab_size, "reserved_ids": self.token_space.reserved_ids,
                "prompt_len_stats": _length_stats(in_lens), "output_len_stats": _length_stats(out_lens)}

    to_dict = describe
