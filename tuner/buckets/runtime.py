"""What each release reads besides its bucket variables: warmup, graph memory and runtime switches.

The bucket variables (and the strategy switches) come from the release profile itself
(`ReleaseProfile.bucket_variables`); this table adds the other VLLM_* / PT_HPU_* variables that decide
warmup and memory, with the release's code defaults (docs/bucketing.md sections D, E).
Together they make an env file complete: every variable the release reads, not a diff against
defaults, because defaults move between releases.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ReleaseProfile, get_profile

FORK_2024 = ("fork-1.17", "fork-1.18")
FORK_RATIO_ERA = ("fork-1.17", "fork-1.18", "fork-1.19", "fork-1.20", "fork-1.21.0", "fork-1.21.2")
FORK_ALL = FORK_RATIO_ERA + ("fork-1.22", "fork-main", "fork-1.23")
GAUDI_ALL = ("gaudi-0.10.1", "gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main")


@dataclass(frozen=True)
class RuntimeVariable:
    name: str
    default: str | None  # the release's code default, as text; None: unset by default
    meaning: str


def runtime_variables(profile: ReleaseProfile | str) -> list[RuntimeVariable]:
    """The non-bucket variables `profile` reads that matter for warmup, memory and graphs."""
    name = profile if isinstance(profile, str) else profile.name
    name = get_profile(name).name  # resolve aliases, reject unknown names
    out = [
        RuntimeVariable("VLLM_SKIP_WARMUP", "false", "skip warmup; every shape then compiles at first use"),
        RuntimeVariable(
            "VLLM_GRAPH_RESERVED_MEM",
            "0.4" if name in FORK_2024 else "0.1",
            "share of usable device memory kept for HPU graphs (the rest is KV cache)",
        ),
    ]
    if name in FORK_RATIO_ERA:
        out += [
            RuntimeVariable(
                "VLLM_GRAPH_PROMPT_RATIO",
                "0.5" if name in FORK_2024 else "0.3",
                "share of graph memory for prompt graphs (the rest: decode)",
            ),
            RuntimeVariable("VLLM_GRAPH_PROMPT_STRATEGY", "min_tokens", "prompt graph capture order"),
            RuntimeVariable("VLLM_GRAPH_DECODE_STRATEGY", "max_bs", "decode graph capture order"),
        ]
    # Lazy mode (HPU graphs) is the fork's default; vllm-gaudi and fork main document eager/torch.compile.
    out.append(
        RuntimeVariable("PT_HPU_LAZY_MODE", "0" if name in GAUDI_ALL + ("fork-main", "fork-1.23") else "1",
                        "1: lazy mode with HPU graphs")
    )
    if name not in FORK_2024:
        out.append(
            RuntimeVariable(
                "VLLM_CONTIGUOUS_PA",
                "false" if name in GAUDI_ALL else "true",
                "contiguous paged attention (decode buckets capped by the KV block count)",
            )
        )
    if name == "fork-1.23":  # vllm-fork v1.23.0 hpu_model_runner.py warmup_scenario (from #1997)
        out.append(RuntimeVariable("VLLM_WARMUP_WITH_PENALTY", "0",
                                   "1: warm-up requests sample with presence penalty, top-p and temperature, so "
                                   "the sampler's penalty graphs are compiled before serving"))
    out.append(RuntimeVariable("PT_HPU_RECIPE_CACHE_CONFIG", None, "graph recipe cache: <path>,<delete>,<max_MB>"))
    return out


def runtime_defaults(profile: ReleaseProfile | str) -> dict[str, str]:
    return {v.name: v.default for v in runtime_variables(profile) if v.default is not None}


def reads_variable(profile: ReleaseProfile | str, variable: str, strategy: str | None = None) -> bool:
    """Whether `profile` reads `variable` at all (under `strategy` for bucket variables)."""
    p = get_profile(profile) if isinstance(profile, str) else profile
    if any(v.name == variable for v in runtime_variables(p)):
        return True
    strategies = [strategy] if strategy else list(p.strategies)
    return any(variable in p.bucket_variables(s) for s in strategies)


# --- diagnostics: set in trials, never exported -----------------------------------------------

# Per-step graph-compilation logging. vllm-fork's V0 worker (habana_executor.py in 1.17/1.18,
# hpu_executor.py in 1.19/1.20, hpu_worker.py from 1.21) wraps each engine step in the bridge's
# metric_localcontext("graph_compilation") and logs "VLLM_HPU_STEP_GRAPH_COMPILATION: ..." when the
# step compiled something; PT_HPU_METRICS_GC_DETAILS=1 adds per-recipe details. vllm-gaudi lists the
# variable in its docs but does not read it (it sends compilations to its profiler trace instead).
COMPILE_LOG_RELEASES = FORK_ALL
DIAGNOSTIC_VARIABLES = ("VLLM_HPU_LOG_STEP_GRAPH_COMPILATION", "VLLM_HPU_LOG_STEP_GRAPH_COMPILATION_ALL",
                        "PT_HPU_METRICS_GC_DETAILS")


def supports_compile_log(profile: ReleaseProfile | str) -> bool:
    name = profile if isinstance(profile, str) else profile.name
    return get_profile(name).name in COMPILE_LOG_RELEASES


def diagnostic_env(profile: ReleaseProfile | str | None) -> dict[str, str]:
    """Variables a trial sets so that its log counts graph compilations under load; empty where the
    release has no such log. Never part of an exported env file (tuner/results/export.py drops them)."""
    if profile is None or not supports_compile_log(profile):
        return {}
    return {"VLLM_HPU_LOG_STEP_GRAPH_COMPILATION": "1", "PT_HPU_METRICS_GC_DETAILS": "1"}
