"""The release signs of a log beside the shape of its bucket lines: the versions it prints (vLLM, the
plugin, the Habana build), the token-budget omission lines, the per-variable line format. Each sign
names the release profiles it allows; analysis.detect_release narrows its reading with them.

Why a sign points where it does (the release tables are tuner/buckets/detect.py's):
* "Omitted K prompt buckets due to exceeded token budget": every fork build from vllm-fork #208
  (habana_main, 2024-08-27) on; the 1.17 release filters nothing. A 1.17-shaped log with it (no dims
  label, decode over seq) is a habana_main build between the 1.17 and 1.18 releases.
* `VLLM_..._MIN=1 (default:min)`: the key name where the default belongs, fork 1.18's bug only.
* vLLM's version: a fork tag's label ("+Gaudi-1.22.0") names the release; the base version
  ("0.5.3.post1", "0.7.2") the releases built on it; a habana_main dev build ("0.6.3.dev563") the
  releases of that base's minor; a wheel's driver suffix ("+gaudi118") the driver it was built on
  (a preference, not a proof); "gaudi000" a source build (no release named).
* The Habana software build of the extension's runtime dump ("build: 1.21.0.xxx") names a fork release.
* A vllm-gaudi version printed anywhere names a plugin profile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..buckets import detect
from ..buckets.base import linear_range
from ..logparse import BucketVariable, ConfigValue, EngineInfo, OmittedBuckets, Traceback
from .reading import LogReading


@dataclass(frozen=True)
class Sign:
    text: str                            # what the log shows and what it means, in words
    profiles: tuple[str, ...] | None     # the release profiles it allows (None: it narrows nothing)
    firm: bool = True                    # False: a preference among the allowed, never a restriction


_DRIVER = re.compile(r"\+?\bgaudi(\d)(\d{2})(\d?)\b", re.IGNORECASE)     # +gaudi118, .gaudi1212, gaudi000
_EGG_VERSION = re.compile(r"/vllm-(\d+\.\d+\.\d+[\w.+]*?)(?:-py\d|\.egg|/)")
_PLUGIN_VERSION = re.compile(r"vllm[_-]gaudi(?:[- ]version)?[ =:-]+v?(\d+\.\d+\.\d+\w*)", re.IGNORECASE)
_FORK_PROFILES = tuple(r[0] for r in detect.FORK_RELEASES)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def version_sign(version: str) -> list[Sign]:
    """What a vLLM version printed by a fork build says of its release."""
    out = []
    label = detect.fork_label(version)
    if label:
        found = detect.fork_by_label(label)
        if found:
            out.append(Sign(f"vLLM {version} names Gaudi {'.'.join(map(str, label))}: {found}", (found,)))
            return out
    v = _version(version)
    if v is None:
        return out
    bases = [(r[0], Version(r[2])) for r in detect.FORK_RELEASES if r[2]]
    public = Version(v.public)
    exact = tuple(p for p, b in bases if b == public)
    if exact and not v.is_devrelease:
        out.append(Sign(f"vLLM {version}: the base of {', '.join(exact)}", exact))
    elif v.is_devrelease:
        same = tuple(p for p, b in bases if b.release[:2] == public.release[:2])
        if same:
            out.append(Sign(f"vLLM {version}: a habana_main build on {public.base_version}, the era of "
                            f"{', '.join(same)}", same))
    driver = _DRIVER.search(version)
    if driver:
        digits = tuple(int(x) for x in driver.groups() if x)
        if digits[:2] == (0, 0):
            out.append(Sign(f"vLLM {version}: 'gaudi000', a build from source (no release named)", None))
        else:
            found = detect.fork_by_label(digits if len(digits) > 2 else digits[:2]) \
                or detect.fork_by_label(digits[:2] + (0,))
            if found:
                allowed = tuple(p for s in out for p in (s.profiles or ())) or (found,)
                if found in allowed:
                    out.append(Sign(f"vLLM {version}: a wheel built on the Gaudi {digits[0]}.{digits[1]} driver "
                                    f"({found})", (found,), firm=False))
    return out


def log_versions(reading: LogReading) -> list[str]:
    """vLLM versions the log prints: the engine/API server lines, else the egg paths of a traceback."""
    events = [t.event for t in reading.events]
    found = [e.version for e in events if isinstance(e, EngineInfo) and e.version]
    if found:
        return found[:1]
    for t in reading.events:  # a traceback is one event, read whole (its line is where it ended)
        m = _EGG_VERSION.search(t.event.text if isinstance(t.event, Traceback) else t.text)
        if m:
            return [m.group(1)]
    return []


def budget_sign(reading: LogReading) -> Sign | None:
    omitted = [t.event for t in reading.events if isinstance(t.event, OmittedBuckets) and t.event.token_budget]
    if not omitted:
        return None
    phases = sorted({e.phase for e in omitted}, key=("prompt", "decode").index)
    e = omitted[0]
    return Sign(f"'Omitted {e.count} {e.phase} buckets due to exceeded token budget "
                f"(max_num_batched_tokens={e.token_budget})' ({' and '.join(phases)}): a fork build after 1.17 "
                "(vllm-fork #208 on; the 1.17 release omits nothing)", tuple(p for p in _FORK_PROFILES
                                                                              if p != "fork-1.17"))


def budget_phases(reading: LogReading) -> tuple[str, ...]:
    """The phases a habana_main build between 1.17 and 1.18 filtered by the token budget: decode too
    when the log says so (its own Omitted line) or its decode count falls short of the logged config's
    full product (vllm-fork #208 until #241), else prompt only."""
    s = reading.summary
    if "decode" in s.omitted:
        return ("prompt", "decode")
    generated, cfg = s.generated.get("decode"), s.bucket_configs.get("decode")
    if generated is not None and cfg is not None:
        try:
            full = 1
            for _, rng in cfg.dims:
                lo, step, hi = rng.values[:3]
                full *= len(linear_range(lo, step, hi, drop_below_min=False))
        except (ValueError, TypeError):
            return ("prompt",)
        if generated.count < full:
            return ("prompt", "decode")
    return ("prompt",)


def variable_sign(reading: LogReading) -> Sign | None:
    keyed = [e for t in reading.events for e in [t.event]
             if isinstance(e, BucketVariable) and str(e.default) in ("min", "step", "max")]
    if keyed:
        v = keyed[0]
        return Sign(f"'{v.name}={v.value} (default:{v.default})': the key name where the default belongs, "
                    "fork 1.18's bug", ("fork-1.18",))
    return None


def build_sign(reading: LogReading) -> Sign | None:
    """The Habana software build of the runtime dump ("build: 1.21.0.512"): a fork's release."""
    for t in reading.events:
        e = t.event
        if isinstance(e, ConfigValue) and e.name == "build":
            m = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", e.value)
            found = detect.fork_by_label(tuple(int(x) for x in m.groups())) if m else None
            return Sign(f"Habana software build {e.value.strip()}" + (f": {found}" if found else ""),
                        (found,) if found else None)
    return None


def plugin_sign(reading: LogReading) -> Sign | None:
    for t in reading.events:
        m = _PLUGIN_VERSION.search(t.text)
        if m:
            picked = detect.pick_profile(detect.Installed("log", {"vllm_gaudi": m.group(1)}))
            return Sign(f"vllm-gaudi {m.group(1)}: {picked.profile}"
                        + (f" ({picked.nearest})" if picked.nearest else ""), (picked.profile,))
    return None


def release_signs(reading: LogReading, *, fork: bool, plugin: bool = False) -> list[Sign]:
    """Every sign the log gives beside its bucket-line shapes; vLLM versions are read as a fork's only
    where the log is a fork's (`fork`; a `plugin` build prints upstream vLLM's version, a generic vLLM
    nothing of Gaudi)."""
    if not (fork or plugin):
        return []
    signs = [s for s in (budget_sign(reading), variable_sign(reading), plugin_sign(reading)) if s is not None]
    build = build_sign(reading)
    if build is not None:
        signs.append(build if fork else Sign(build.text.split(":")[0] + " (a plugin build: names no profile)", None))
    for version in log_versions(reading):
        if fork:
            signs += version_sign(version)
        else:
            signs.append(Sign(f"vLLM {version} (upstream vLLM's version; the plugin's is not printed)", None))
    return signs
