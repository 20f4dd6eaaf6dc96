"""Release cost rules: what changes the *cost* of a start between releases (beside tuner/buckets/runtime.py).

Code defaults of VLLM_GRAPH_RESERVED_MEM / VLLM_GRAPH_PROMPT_RATIO / PT_HPU_LAZY_MODE come from the
project's table (tuner/buckets/runtime.py); this table adds how each release warms up and captures graphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..buckets import get_profile
from ..buckets.runtime import runtime_defaults


@dataclass(frozen=True)
class ReleaseRules:
    profile: str
    engine: str  # "v0" (vllm-fork) or "v1" (vllm-gaudi)
    # "budget": capture inside VLLM_GRAPH_RESERVED_MEM split by VLLM_GRAPH_PROMPT_RATIO (fork <= 1.21.x);
    # "all": every bucket is captured right after it compiles (fork 1.22 / main, vllm-gaudi).
    capture: str
    # HPU-graph memory: prompt MiB per graph, prompt MiB per padded token, decode MiB per graph.
    # None: the model's current-era constant (Intel autocalc, 10 MiB for 8B).
    graph_mem: tuple[float, float, float] | None
    buckets_at_init: bool = False  # fork 1.17/1.18 set their buckets up (and log it) before loading weights
    sampler_warmup: bool = False  # vllm-gaudi warms the sampler up after the buckets (1-3 s)
    style: str = "fork-hpu"  # log family, see logfmt.STYLES


_FORK = dict(engine="v0", capture="budget")
RULES: dict[str, ReleaseRules] = {
    # 1.17: 14.03 GiB for 15 prompt graphs of 9,984 padded tokens, 161.9 MiB for 48 decode graphs.
    "fork-1.17": ReleaseRules("fork-1.17", **_FORK, graph_mem=(3.4, 1.43, 3.4), buckets_at_init=True,
                              style="fork-habana"),
    # 1.18 era: 24 prompt graphs in 67.72 MiB (~2.8 MiB each); decode as measured on 1.17.
    "fork-1.18": ReleaseRules("fork-1.18", **_FORK, graph_mem=(2.8, 0.0, 3.4), buckets_at_init=True,
                              style="fork-habana"),
    "fork-1.19": ReleaseRules("fork-1.19", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu-old"),
    "fork-1.20": ReleaseRules("fork-1.20", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu-old"),
    "fork-1.21.0": ReleaseRules("fork-1.21.0", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu"),
    "fork-1.21.2": ReleaseRules("fork-1.21.2", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu"),
    "fork-1.22": ReleaseRules("fork-1.22", "v0", "all", None, style="fork-3d"),
    "fork-main": ReleaseRules("fork-main", "v0", "all", None, style="fork-3d"),
    "fork-1.23": ReleaseRules("fork-1.23", "v0", "all", None, style="fork-3d"),
    **{name: ReleaseRules(name, "v1", "all", None, sampler_warmup=True, style="gaudi")
       for name in ("gaudi-0.10.1", "gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main")},
}


def rules_for(profile_name: str) -> ReleaseRules:
    name = get_profile(profile_name).name  # resolve aliases (fork-1.21.3 -> fork-1.21.2)
    return RULES[name]




def env_value(env: Mapping[str, str], profile: str, name: str, fallback: str | None = None) -> str | None:
    """A variable as the release sees it: the user's value, else the release's code default."""
    if name in env:
        return env[name]
    return runtime_defaults(profile).get(name, fallback)


def env_true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "t", "yes", "y", "on")
