"""Token counts as vLLM's command line takes them (vllm/utils/argparse_utils.py, vLLM 0.32):
`--max-model-len 32k`, `--max-num-batched-tokens 8K`, `--max-model-len auto`.

A lowercase suffix is decimal (k = 1,000, m = 10**6, g = 10**9, t = 10**12) and takes decimals ("25.6k" =
25,600); an uppercase one is binary (K = 1,024, M, G, T) and does not. `--max-model-len` also takes -1 or
`auto`: the longest context the KV cache holds (vLLM's auto-fit), given as -1.
"""

from __future__ import annotations

import re

AUTO = -1  # --max-model-len auto / -1
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def token_count(text: str) -> int:
    """'8192', '32k', '25.6k', '8K' -> the integer; ValueError naming the text otherwise."""
    value = str(text).strip()
    m = _SUFFIXED.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(f"{text!r}: decimals are not allowed with binary suffixes like {suffix}; did you mean "
                             f"{number}{suffix.lower()}?")
        return int(number) * _BINARY[suffix]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{text!r} is not a token count (a whole number, or with a suffix: 32k = 32,000, "
                         "32K = 32,768)") from None


def length_or_auto(text: str) -> int:
    """--max-model-len: a token count, or -1 / 'auto' (AUTO)."""
    value = str(text).strip()
    return AUTO if value == "-1" or value.lower() == "auto" else token_count(value)
