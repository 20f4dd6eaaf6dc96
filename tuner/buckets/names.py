"""One resolver for environment-variable names: is this a variable, and does this release read it?

Every command that takes variables (`--env`, `--env-file`, search spaces, `compare --release`, `fit`) and
every piece of advice the tool writes (`explain`) goes through `check_names` / `keep_read`, so a typo
is refused the same way everywhere and advice cannot name a variable its release does not read:

* a name no release reads (in the families the releases own, VLLM_* and PT_HPU_*) is an error with
  "did you mean", unless the command was given --allow-unknown (then a warning, passed on as given);
* a name another release reads is a warning naming the releases that read it (one env file or
  search space may serve several releases, so this is not an error);
* names outside those families (HF_TOKEN, HABANA_VISIBLE_MODULES, ...) belong to other components
  and pass untouched.

What a release reads comes from its profile (bucket variables and strategy switches under every
strategy, and the runtime table in tuner/buckets/runtime.py), the switches below that the bucket
engine consults outside those lists, and every variable the release's own code declares or reads
(tuner/buckets/declared.py). Given values (a mapping), a value a release would fail to parse is an error
whatever --allow-unknown says (that flag is about names), and a flag read otherwise than it looks
('yes' where the release takes only 1/true) is a warning (tuner/buckets/envcheck.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from . import envcheck
from .base import BucketConfigError
from .registry import get_profile, profiles
from .runtime import (
    DIAGNOSTIC_VARIABLES,
    GAUDI_ALL,
    runtime_variables,
    supports_compile_log,
)

JUDGED_PREFIXES = ("VLLM_", "PT_HPU_")
ALLOW_UNKNOWN_HELP = "accept VLLM_*/PT_HPU_* names no release reads (a warning instead of an error)"

_GAUDI_RANGE = ("gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main")  # the v0.15.1+ range pipeline
# Switches the bucket engine consults besides the profiles' bucket, strategy and runtime variables
# (tuner/buckets/vllm_gaudi/settings.py, extension_3d.py), with the releases that read them.
_SWITCHES: dict[str, tuple[str, ...]] = {
    "VLLM_PREFIX_CACHING": GAUDI_ALL,
    "VLLM_ENABLE_BUCKETING": GAUDI_ALL,
    "VLLM_MERGED_PREFILL": GAUDI_ALL + ("fork-1.22", "fork-main"),
    "VLLM_UNIFIED_ATTN": ("gaudi-0.15.1",),
    "VLLM_FUSEDSDPA_SLIDE_THLD": _GAUDI_RANGE,
    "PT_HPU_SDPA_BC_FACTOR": _GAUDI_RANGE,
    "PT_HPU_SDPA_QKV_SLICE_MODE_FWD": _GAUDI_RANGE,
    "VLLM_EXPONENTIAL_BUCKETING": ("gaudi-0.26.0", "gaudi-main"),  # a deprecated override of the strategy
    # v0.15.1+: the deprecated fallback of an unset VLLM_PROMPT_QUERY_BUCKET_*
    **{f"VLLM_PROMPT_SEQ_BUCKET_{p}": _GAUDI_RANGE for p in ("MIN", "STEP", "MAX")},
}
# The same knob under another release's name (the value's unit may differ: fork 1.17 buckets decode by
# context tokens per sequence, later releases by KV blocks of the whole batch).
_COUNTERPARTS = (("VLLM_DECODE_BLOCK_BUCKET_", "VLLM_DECODE_SEQ_BUCKET_"),
                 ("VLLM_PROMPT_SEQ_BUCKET_", "VLLM_PROMPT_QUERY_BUCKET_"),
                 ("VLLM_EXPONENTIAL_BUCKETING", "VLLM_BUCKETING_STRATEGY"))
# Variables the vLLM / Gaudi stack reads outside bucketing (logging, processes, hardware probes of the
# HPU extension, diagnostics, vLLM on CPU; docs/bucketing.md section E): known, so never called a typo,
# but no release profile models them, so they pass without a verdict.
OUTSIDE_BUCKETING = frozenset({
    "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_USE_V1", "VLLM_WORKER_MULTIPROC_METHOD",
    "VLLM_HOST_IP", "VLLM_PORT", "VLLM_RPC_TIMEOUT", "VLLM_ENGINE_ITERATION_TIMEOUT_S",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_NO_USAGE_STATS", "VLLM_CACHE_ROOT", "VLLM_API_KEY",
    "VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_PT_PROFILE",
    "VLLM_HW", "VLLM_BUILD", "VLLM_BRIDGE_MODE", "VLLM_ENGINE_VERSION", "VLLM_MODEL_TYPE",
    "VLLM_FUSED_BLOCK_SOFTMAX_ADJUSTMENT", "VLLM_PROMPT_USE_FUSEDSDPA", "VLLM_DEFRAG", "VLLM_DELAYED_SAMPLING",
    "VLLM_FULL_WARMUP",
    "PT_HPU_WEIGHT_SHARING", "PT_HPU_ENABLE_LAZY_COLLECTIVES", "PT_HPU_MAX_COMPOUND_OP_SIZE",
    *DIAGNOSTIC_VARIABLES,
})


class UnknownVariableError(BucketConfigError):
    """A VLLM_*/PT_HPU_* name no release reads: a typo until the user says otherwise (--allow-unknown)."""


class BadValueError(BucketConfigError):
    """A value the release cannot parse: its server would stop at start-up (--allow-unknown does not pass it)."""


_READ: dict[str, frozenset[str]] = {}


def release_variables(release: str) -> frozenset[str]:
    """Every variable `release` reads, under any of its strategies."""
    profile = get_profile(release)
    if profile.name not in _READ:
        names: set[str] = {v.name for v in runtime_variables(profile)}
        for strategy in profile.strategies:
            names.update(profile.bucket_variables(strategy), profile.strategy_env(strategy))
        names.update(n for n, readers in _SWITCHES.items() if profile.name in readers)
        names.update(envcheck.declared_by(profile.name))
        if supports_compile_log(profile):
            names.update(DIAGNOSTIC_VARIABLES)
        _READ[profile.name] = frozenset(names)
    return _READ[profile.name]


def readers(name: str) -> list[str]:
    """The releases (canonical names, oldest first) that read `name`."""
    return [p for p in profiles() if name in release_variables(p)]


def known_variables() -> frozenset[str]:
    """Every VLLM_*/PT_HPU_* name the tool knows: what some release reads, and the outside-bucketing table."""
    out: set[str] = set(OUTSIDE_BUCKETING) | envcheck.all_declared()
    for p in profiles():
        out |= release_variables(p)
    return frozenset(out)


def judged(name: str) -> bool:
    """Names in the families the releases own; others belong to other components and pass."""
    return name.startswith(JUDGED_PREFIXES)


def suggestion(name: str, candidates: Iterable[str] | None = None, cutoff: float = 0.6) -> str | None:
    """The closest known name (difflib), or None."""
    pool = sorted(known_variables() if candidates is None else set(candidates))
    match = difflib.get_close_matches(name, pool, n=1, cutoff=cutoff)
    return match[0] if match else None


def did_you_mean(name: str, candidates: Iterable[str] | None = None, cutoff: float = 0.6) -> str:
    match = suggestion(name, candidates, cutoff)
    return f"; did you mean {match}?" if match else ""


def span(releases: list[str]) -> str:
    """Release names with consecutive runs of the profile table shortened: 'fork-1.18 to gaudi-main'."""
    order = list(profiles())
    runs: list[list[str]] = []
    for name in releases:
        if runs and order.index(name) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(name)
        else:
            runs.append([name])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}, {r[1]}" if len(r) == 2 else f"{r[0]} to {r[-1]}"
                     for r in runs)


def unknown_message(name: str, where: str) -> str:
    return f"{where} {name}: no release reads this variable{did_you_mean(name)} (--allow-unknown passes it on)"


def not_read_message(name: str, release: str, where: str) -> str:
    """'<where> NAME: fork-1.17 does not read it (fork-1.18 to gaudi-main do; fork-1.17 reads X)'."""
    others = readers(name)
    text = f"{where} {name}: {get_profile(release).name} does not read it"
    if others:
        text += f" ({span(others)} {'does' if len(others) == 1 else 'do'}"
        own = counterpart(name, release)
        text += f"; {get_profile(release).name} reads {own} instead)" if own else ")"
    return text


def counterpart(name: str, release: str) -> str | None:
    """The name `release` uses for the knob `name` sets under another release's naming, if it has one."""
    for a, b in _COUNTERPARTS:
        for mine, theirs in ((a, b), (b, a)):
            if name.startswith(mine):
                other = theirs + name[len(mine):]
                if other in release_variables(release):
                    return other
    return None


def check_names(names: Iterable[str] | Mapping[str, str], releases: str | Iterable[str] | None, *, where: str,
                allow_unknown: bool = False) -> list[str]:
    """Warnings about `names` for `releases` (one name, several, or None: no release to judge against).

    Raises UnknownVariableError for a VLLM_*/PT_HPU_* name no release reads, unless `allow_unknown`
    (then it is a warning). A name one of `releases` does not read but another release does is a warning.
    Given a mapping (NAME -> value), the values are checked too (check_values), allow_unknown or not.
    """
    if isinstance(releases, str):
        releases = [releases]
    releases = [get_profile(r).name for r in (releases or [])]
    known = known_variables()
    warnings: list[str] = []
    for name in dict.fromkeys(names):
        if not judged(name) or name in OUTSIDE_BUCKETING:
            continue
        if name not in known:
            if not allow_unknown:
                raise UnknownVariableError(unknown_message(name, where), name)
            warnings.append(f"{where} {name}: no release reads this variable{did_you_mean(name)}; "
                            "passed on as given (--allow-unknown)")
            continue
        warnings += [not_read_message(name, r, where) for r in releases if name not in release_variables(r)]
    if isinstance(names, Mapping):
        warnings += check_values(names, releases, where=where)
    return warnings


def check_values(env: Mapping[str, str], releases: str | Iterable[str] | None, *, where: str) -> list[str]:
    """Warnings about flags read otherwise than they look; raises BadValueError for the first value a
    release (of `releases`; None: every release that declares it) cannot parse, as its server would."""
    if isinstance(releases, str):
        releases = [releases]
    releases = [get_profile(r).name for r in (releases or [])] or list(profiles())
    warnings: list[str] = []
    for name, value in env.items():
        for problem in envcheck.value_problems(name, str(value), releases):
            verb = "parses" if len(problem.releases) == 1 else "parse"
            if problem.error:
                raise BadValueError(
                    f"{where} {name}={value}: the server would fail at start-up: {span(list(problem.releases))} "
                    f"{verb} it as {envcheck.expects(problem.parser)} ({problem.source}): {problem.error}", name)
            warnings.append(f"{where} {name}={value}: {span(list(problem.releases))} "
                            f"read{'s' if len(problem.releases) == 1 else ''} it as "
                            f"{'true' if problem.read_as else 'false'} (true is "
                            f"{envcheck.true_spellings(problem.parser)}; {problem.source})")
    return warnings


def keep_read(env: Mapping[str, str], release: str) -> tuple[dict[str, str], list[str]]:
    """(the variables of `env` that `release` reads or that are not ours to judge, the names dropped).

    Advice is built through this, so it never sets a variable its release ignores."""
    kept, dropped = {}, []
    for name, value in env.items():
        if judged(name) and name not in OUTSIDE_BUCKETING and name not in release_variables(release):
            dropped.append(name)
        else:
            kept[name] = value
    return kept, dropped
