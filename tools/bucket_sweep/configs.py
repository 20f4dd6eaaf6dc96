"""Random sweep configurations for one release profile: every input the release reads is varied.

A row is a dict: block_size, max_num_seqs, max_model_len, max_num_batched_tokens, num_hpu_blocks,
prefix_caching (the engine flag: v0 for the fork, v1 for vllm-gaudi), max_num_prefill_seqs (fork
runner flag, None = unset), lora (fork 1.18), env (every VLLM_* / PT_HPU_* variable set).
"""

from __future__ import annotations

import random

from .profiles import PROFILES, supports_pooling

# Strategy selection per profile: strategy -> list of env choices that select it.
_EXP_SWITCH = {"exponential": [{"VLLM_EXPONENTIAL_BUCKETING": "true"}, {"VLLM_EXPONENTIAL_BUCKETING": "True"}],
               "linear": [{}, {"VLLM_EXPONENTIAL_BUCKETING": "false"}]}
_EXP_DEFAULT = {"exponential": [{}, {"VLLM_EXPONENTIAL_BUCKETING": "true"}, {"VLLM_EXPONENTIAL_BUCKETING": "1"}],
                "linear": [{"VLLM_EXPONENTIAL_BUCKETING": "false"}, {"VLLM_EXPONENTIAL_BUCKETING": "0"}]}
_STRATEGY_VAR = {
    "exponential": [{}, {"VLLM_BUCKETING_STRATEGY": "exp"},
                    {"VLLM_BUCKETING_STRATEGY": "pad", "VLLM_EXPONENTIAL_BUCKETING": "true"}],
    "linear": [{"VLLM_BUCKETING_STRATEGY": "lin"},
               {"VLLM_BUCKETING_STRATEGY": "exp", "VLLM_EXPONENTIAL_BUCKETING": "false"}],
    "padding_aware": [{"VLLM_BUCKETING_STRATEGY": "pad"}],
}
_SINGLE_LINEAR = {"linear": [{}]}  # releases without a strategy switch
STRATEGY_ENVS = {
    "fork-1.17": _SINGLE_LINEAR, "fork-1.18": _SINGLE_LINEAR, "fork-1.19": _SINGLE_LINEAR,
    "fork-1.20": _SINGLE_LINEAR, "fork-1.21.0": _EXP_SWITCH, "fork-1.21.2": _EXP_SWITCH,
    "fork-1.22": _EXP_DEFAULT, "fork-main": _EXP_DEFAULT, "fork-1.23": _EXP_DEFAULT, "gaudi-0.10.1": _EXP_DEFAULT,
    "gaudi-0.15.1": _EXP_DEFAULT, "gaudi-0.26.0": _STRATEGY_VAR, "gaudi-0.27.0": _STRATEGY_VAR,
    "gaudi-main": _STRATEGY_VAR,
}

_DIMS = {
    "fork117": (("PROMPT", "BS"), ("PROMPT", "SEQ"), ("DECODE", "BS"), ("DECODE", "SEQ")),
    "fork118": (("PROMPT", "BS"), ("PROMPT", "SEQ"), ("DECODE", "BS"), ("DECODE", "BLOCK")),
    "ext2d": (("PROMPT", "BS"), ("PROMPT", "SEQ"), ("DECODE", "BS"), ("DECODE", "BLOCK")),
    "gaudi3d": (("PROMPT", "BS"), ("PROMPT", "QUERY"), ("PROMPT", "SEQ"), ("PROMPT", "CTX"), ("DECODE", "BS"),
                ("DECODE", "BLOCK")),
}


def _value(rng: random.Random, dim: str, param: str, row: dict) -> int:
    B, L, S, T, N = (row[k] for k in ("block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                                      "num_hpu_blocks"))
    if param == "LIMIT":
        return rng.randint(1, 24)
    if param == "PAD_MAX":
        return rng.choice([0, 1, 16, 64, 512, 4096, B * 8])
    if param == "PAD_PERCENT":
        return rng.choice([0, 5, 10, 25, 50, 100])
    if dim == "BS":
        return {"MIN": lambda: rng.choice([1, 1, 2, 3, 4, 8, 16]),
                "STEP": lambda: rng.choice([1, 2, 4, 8, 16, 32, 64, 128]),
                "MAX": lambda: rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, S, S + 3, max(1, S // 2)])}[param]()
    if dim in ("SEQ", "QUERY"):
        return {"MIN": lambda: rng.choice([B, B, 2 * B, max(1, B // 2), 100, 1, 256]),
                "STEP": lambda: rng.choice([B, B, 2 * B, 256, 100, 512]),
                "MAX": lambda: rng.choice([L, L, max(B, L // 2), 1024, 2048, T, L + 50, 3000])}[param]()
    if dim == "CTX":
        return {"MIN": lambda: rng.choice([0, 0, 1, 2, 4]),
                "STEP": lambda: rng.choice([1, 1, 2, 4, 8, 16]),
                "MAX": lambda: rng.choice([L // B, max(1, L // B // 2), 8, 16, 64])}[param]()
    return {"MIN": lambda: rng.choice([1, B, 128, 256, max(1, N // 2), N + 10]),  # BLOCK
            "STEP": lambda: rng.choice([B, 64, 128, 256, 512, max(1, N // 8)]),
            "MAX": lambda: rng.choice([N, max(1, N // 2), 2 * N, 4096, S * L // B, N + 100])}[param]()


def _bucket_env(rng: random.Random, groups: tuple[str, ...], row: dict, strategy: str) -> dict[str, str]:
    kind = next(g for g in groups if g in _DIMS)
    params = ["MIN", "STEP", "MAX"]
    if "pad" in groups and strategy == "padding_aware":
        params += ["PAD_MAX", "PAD_PERCENT"]
    if kind == "ext2d" and strategy == "exponential":
        params += ["LIMIT"]
    names = [(f"VLLM_{ph}_{dim}_BUCKET_{p}", dim, p) for ph, dim in _DIMS[kind] for p in params]
    mode = rng.random()
    if mode < 0.2:
        chosen = []
    elif mode < 0.5:
        chosen = [rng.choice(names)]  # one override alone
    else:
        chosen = rng.sample(names, rng.randint(2, min(8, len(names))))
    return {name: str(_value(rng, dim, p, row)) for name, dim, p in chosen}


# Lengths stay within this many blocks: the 3-D releases enumerate query x context-block products, and
# upstream needs minutes and gigabytes beyond that (the engine refuses such products outright).
MAX_BLOCKS_PER_SEQ = 256
# The v0 3-D linear strategy lists every context length per query under prefix caching, and its
# omitted-bucket bookkeeping is quadratic in that count: keep those configurations smaller still.
SLOW_LINEAR = ("fork-1.22", "fork-main", "fork-1.23", "gaudi-0.10.1")


def _base(rng: random.Random, profile: str, strategy: str) -> dict:
    L = rng.choice([512, 1024, 2048, 4096, 4096, 8192, 16384, 32768])
    T = rng.choice([L, L // 2, L // 4 + 3, 2 * L, 8192, 2048, 4096 + 7, 16384])
    ratio = 64 if profile in SLOW_LINEAR and strategy == "linear" else MAX_BLOCKS_PER_SEQ
    B = rng.choice([b for b in (16, 32, 64, 128, 128, 128, 256) if max(L, T) // b <= ratio] or [256])
    if rng.random() < 0.35:  # max_model_len off the block grid
        L += rng.choice([1, 7, B // 2, 100, 1000]) if L < 32768 else -rng.choice([1, 100, 1000])
    S = rng.choice([1, 2, 3, 5, 8, 16, 24, 32, 50, 64, 100, 128, 256])
    N = rng.choice([1, 3, 8, 16, 100, 500, 1000, 3000, 5000, 20000, 100000, 250000])
    return {"block_size": B, "max_num_seqs": S, "max_model_len": L, "max_num_batched_tokens": T,
            "num_hpu_blocks": N, "prefix_caching": rng.random() < 0.5, "max_num_prefill_seqs": None,
            "lora": False, "env": {}}


def _bool_text(rng: random.Random) -> str:
    return rng.choice(["true", "false", "True", "False", "1", "0"])


def _bucket_file(rng: random.Random, row: dict) -> str:
    """A VLLM_BUCKETING_FROM_FILE file: single buckets, lists, ranges, comments and bad lines."""
    B, L, S, N = row["block_size"], row["max_model_len"], row["max_num_seqs"], row["num_hpu_blocks"]
    lines = ["# sweep bucket file", ""]
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        if kind < 0.3:
            bs, q, ctx = rng.choice([1, 2, 4, S]), rng.choice([B, 2 * B, 1024, L, L + B]), rng.choice([0, 1, 4, L // B])
            lines.append(f"({bs}, {q}, {ctx})")
        elif kind < 0.55:
            lines.append(f"([1, {rng.choice([2, 4, S])}], [{B}, {4 * B}], [0, {rng.choice([2, 8, L // B])}])")
        elif kind < 0.7:
            lines.append(f"(1, range({B}, {L + 1}, {rng.choice([B, 4 * B, 1024])}), 0)")
        elif kind < 0.9:
            lines.append(f"({rng.choice([1, 2, S, 2 * S])}, 1, {rng.choice([1, 8, 128, N, 2 * N, S * L // B])})")
        else:
            lines.append(rng.choice(["(1, 2)", "not a bucket", "(1, 128, 0"]))
    return "\n".join(lines) + "\n"


def random_row(rng: random.Random, profile: str, strategy: str) -> dict:
    groups = PROFILES[profile][4]
    row = _base(rng, profile, strategy)
    env = dict(rng.choice(STRATEGY_ENVS[profile][strategy]))
    env.update(_bucket_env(rng, groups, row, strategy))
    if "prefill_seqs" in groups and rng.random() < 0.3:
        row["max_num_prefill_seqs"] = rng.choice([1, 2, 4, 8, 16, 3])
    if "lora" in groups and rng.random() < 0.3:
        row["lora"] = True
    if "contiguous" in groups and rng.random() < 0.4:
        env["VLLM_CONTIGUOUS_PA"] = _bool_text(rng)
    if "merged" in groups and rng.random() < 0.15:
        env["VLLM_MERGED_PREFILL"] = rng.choice(["true", "true", "false", "1"])
    if "prefix_env" in groups and rng.random() < 0.1:
        env["VLLM_PREFIX_CACHING"] = _bool_text(rng)
    if "sliding" in groups and rng.random() < 0.15:
        env["PT_HPU_SDPA_QKV_SLICE_MODE_FWD"] = rng.choice(["true", "true", "false"])
        if rng.random() < 0.6:
            env["PT_HPU_SDPA_BC_FACTOR"] = str(rng.choice([128, 256, 512, 1024, 2048]))
        if rng.random() < 0.6:
            env["VLLM_FUSEDSDPA_SLIDE_THLD"] = str(rng.choice([512, 1024, 2048, 4096, 8192]))
    if "enable" in groups and rng.random() < 0.04:
        env["VLLM_ENABLE_BUCKETING"] = rng.choice(["false", "0", "true"])
    if "unified" in groups and rng.random() < 0.05:
        env["VLLM_UNIFIED_ATTN"] = rng.choice(["true", "1"])
    if ("spec" in groups or "model" in groups) and rng.random() < 0.12:
        row["num_speculative_tokens"] = rng.choice([1, 2, 3, 4])
    if "pooling" in groups and rng.random() < 0.05:
        row["pooling"] = True
    if "model" in groups:  # settings that come from the model (hybrid, pooling)
        if rng.random() < 0.1:
            row["mamba_chunk_size"] = rng.choice([64, 128, 256, 100])
            row["mamba_chunk_size_explicit"] = rng.random() < 0.6
        if rng.random() < 0.05:
            row["pooling"] = True
        if rng.random() < 0.08:
            row["decode_block_size"] = rng.choice([64, 128, 256])
        if rng.random() < 0.1:
            row["skip_decode_block_clamp"] = True
    if "file" in groups and rng.random() < 0.08:
        row["bucket_file"] = _bucket_file(rng, row)
        env["VLLM_BUCKETING_FROM_FILE"] = "bucket_file.txt"  # the replay writes the file and uses its path
    # Error cases: a malformed integer, or a minimum above its maximum.
    r = rng.random()
    if r < 0.03 and env:
        name = rng.choice(sorted(k for k in env if "_BUCKET_" in k) or [None])
        if name:
            env[name] = rng.choice(["abc", "1.5", ""])
    elif r < 0.06:
        kind = next(g for g in groups if g in _DIMS)
        ph, dim = rng.choice(_DIMS[kind])
        env[f"VLLM_{ph}_{dim}_BUCKET_MIN"] = "4096"
        env[f"VLLM_{ph}_{dim}_BUCKET_MAX"] = "2"
    row["env"] = env
    return row


def _edge_step(rng: random.Random, dim: str, row: dict) -> int:
    """A STEP upstream never documents: negative, zero, or odd (off every power of two and block)."""
    B = row["block_size"]
    kind = rng.random()
    if kind < 0.4:
        return rng.choice([-1, -2, -B, -128, -3])
    if kind < 0.6:
        return 0
    odd = [1, 3, 5, 7, 33] if dim in ("BS", "CTX") else [1, 3, 7, 33, 127, B - 1, B + 1, 2 * B + 1]
    return rng.choice(odd)


def _edge_other(rng: random.Random, profile: str, strategy: str, row: dict) -> tuple[str, int]:
    """One more unusual value: an odd MIN, a MAX of 0, -1 or odd, a CTX MIN of 0, or a LIMIT / PAD_*
    at or below zero (or a percentage above 100). No MIN <= 0 elsewhere: upstream hangs on it."""
    groups = PROFILES[profile][4]
    kind = next(g for g in groups if g in _DIMS)
    B, L = row["block_size"], row["max_model_len"]
    ph, dim = rng.choice(_DIMS[kind])
    extra = []
    if kind == "ext2d" and strategy == "exponential":
        extra.append(("LIMIT", [0, -1, 1, 2, 3]))
    if "pad" in groups and strategy == "padding_aware":
        extra += [("PAD_MAX", [-1, 0, 1, 3]), ("PAD_PERCENT", [-1, 0, 101, 150])]
    # A MIN of 0 hangs the fork and v0.10.1; from v0.15.1 it means "from STEP, plus a 0 bucket".
    zero_ok = dim == "CTX" or kind == "gaudi3d"
    param, values = rng.choice([("MIN", [0, 3, 7, 33, B + 1] if zero_ok else [3, 5, 7, 33, B + 1]),
                                ("MAX", [0, -1, 7, 33, B + 1, L - 1]), *extra])
    return f"VLLM_{ph}_{dim}_BUCKET_{param}", rng.choice(values)


_ODD_BOOLS = ["yes", "on", "t", "y", "TRUE", "True", "no", "off", "ture", ""]
_ODD_STRATEGIES = ["EXP", "Lin", "linear", "exponential", "exponential_bucketing", "linear_bucketing", ""]


def _edge_switch(rng: random.Random, profile: str) -> dict[str, str]:
    """A switch spelled as users spell them: boolean words the parsers differ on, strategy names that
    only some releases accept."""
    groups = PROFILES[profile][4]
    names = [n for n, g in (("VLLM_CONTIGUOUS_PA", "contiguous"), ("VLLM_MERGED_PREFILL", "merged"),
                            ("VLLM_PREFIX_CACHING", "prefix_env"), ("VLLM_ENABLE_BUCKETING", "enable"))
             if g in groups]
    if STRATEGY_ENVS[profile] is not _SINGLE_LINEAR:
        names.append("VLLM_EXPONENTIAL_BUCKETING")
        names.append("VLLM_BUCKETING_STRATEGY")
    if not names:
        return {}
    name = rng.choice(names)
    return {name: rng.choice(_ODD_STRATEGIES if name == "VLLM_BUCKETING_STRATEGY" else _ODD_BOOLS)}


def edge_row(rng: random.Random, profile: str, strategy: str) -> dict:
    """A random row whose bucket env sets one to three STEP variables to negative, zero or odd values
    and sometimes one other unusual value (_edge_other) or switch spelling (_edge_switch; the rest as in
    random_row), and, on releases that run pooling models, a pooling model a fifth of the time. Drawn
    from its own random stream, so the random rows stay as they were."""
    row = random_row(rng, profile, strategy)
    kind = next(g for g in PROFILES[profile][4] if g in _DIMS)
    dims = _DIMS[kind]
    for ph, dim in rng.sample(dims, rng.randint(1, min(3, len(dims)))):
        row["env"][f"VLLM_{ph}_{dim}_BUCKET_STEP"] = str(_edge_step(rng, dim, row))
    if rng.random() < 0.4:
        name, value = _edge_other(rng, profile, strategy, row)
        row["env"][name] = str(value)
    if rng.random() < 0.3:
        row["env"].update(_edge_switch(rng, profile))
    row["pooling"] = supports_pooling(profile) and rng.random() < 0.2
    if not row["pooling"]:
        del row["pooling"]
    return row


def named_rows(profile: str) -> list[tuple[str, str, dict]]:
    """The cases the issues name, on every profile: (name, strategy, inputs). A linear strategy's decode
    steps negative (bs -1; blocks -128 with contiguous PA, then with prefix caching), zero, odd; and,
    where the release runs pooling models, a pooling model under each strategy."""
    groups = PROFILES[profile][4]
    kind = next(g for g in groups if g in _DIMS)
    decode_dim = "SEQ" if kind == "fork117" else "BLOCK"
    linear = dict(STRATEGY_ENVS[profile]["linear"][0])

    def row(env: dict, prefix: bool = False, **extra) -> dict:
        base = {"block_size": 128, "max_num_seqs": 32, "max_model_len": 2048, "max_num_batched_tokens": 4096,
                "num_hpu_blocks": 1000, "prefix_caching": prefix, "max_num_prefill_seqs": None, "lora": False,
                "env": env}
        return {**base, **extra}

    cpa = {"VLLM_CONTIGUOUS_PA": "true"} if "contiguous" in groups else {}
    out = [
        ("decode-bs-step-negative", "linear", row({**linear, "VLLM_DECODE_BS_BUCKET_STEP": "-1"})),
        ("decode-block-step-negative", "linear",
         row({**linear, **cpa, f"VLLM_DECODE_{decode_dim}_BUCKET_STEP": "-128"})),
        ("decode-block-step-negative-prefix-caching", "linear",
         row({**linear, f"VLLM_DECODE_{decode_dim}_BUCKET_STEP": "-128",
              **({"VLLM_CONTIGUOUS_PA": "false"} if cpa else {})}, prefix=True)),
        ("decode-bs-step-zero", "linear", row({**linear, "VLLM_DECODE_BS_BUCKET_STEP": "0"})),
        ("prompt-bs-step-negative", "linear", row({**linear, "VLLM_PROMPT_BS_BUCKET_STEP": "-1"})),
        ("odd-steps", "linear", row({**linear, "VLLM_DECODE_BS_BUCKET_STEP": "3",
                                     f"VLLM_DECODE_{decode_dim}_BUCKET_STEP": "127",
                                     "VLLM_PROMPT_BS_BUCKET_STEP": "5"})),
    ]
    if supports_pooling(profile):
        out += [(f"pooling-{strategy}", strategy, row(dict(envs[0]), pooling=True))
                for strategy, envs in STRATEGY_ENVS[profile].items()]
    return out
