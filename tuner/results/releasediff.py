"""Two releases, the same settings: the bucket sets each builds, diffed offline (`compare --release`).

Before a release upgrade is booted: the same env and server flags go through both releases' bucket
engines (tuner/buckets) and the performance model (tuner/perfmodel: KV blocks, warmup and graph
counts). The diff says, per phase, how many buckets each builds and which ones are only in one of
them; which settings one release ignores, overrides or resolves to another value; and what each
predicts for the warmup. Nothing is booted.

Bucket shapes are compared as tuples. A release with 2-D buckets ((bs, seq) prompts, (bs, blocks)
decodes) against one with 3-D buckets ((bs, query, ctx_blocks), (bs, 1, blocks)) is compared with the
2-D shapes written as (bs, seq, 0) and (bs, 1, blocks), which is what the 3-D releases run a prompt
without cached context and a decode step in. fork-1.17's decode buckets count context tokens, not
blocks: its decode phase is compared by count only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..buckets import IGNORED, USER, Bucket, BucketConfigError, BucketPlan, get_profile
from ..buckets.base import plain_overwrite
from ..buckets.runtime import reads_variable, runtime_variables
from ..models.releasearch import release_lacks

SHOWN = 5  # buckets listed per side of a phase; the rest are counted
TOKEN_DECODE = ("fork-1.17",)  # decode buckets in context tokens


@dataclass
class ReleaseBuild:
    """What one release makes of the settings."""

    release: str
    plan: BucketPlan | None = None
    refused: str | None = None  # the release (or the model) refuses the settings: why
    kv_blocks: int | None = None
    kv_source: str = ""  # "given" (--num-hpu-blocks) or "predicted"
    predicted: dict[str, Any] = field(default_factory=dict)  # warmup_s, prompt_graphs, decode_graphs, failure


@dataclass
class PhaseDiff:
    phase: str  # prompt, decode or unified
    counts: tuple[int, int]
    common: int | None  # None: shapes not comparable (counts only)
    removed: list[Bucket] = field(default_factory=list)  # only in the base release
    added: list[Bucket] = field(default_factory=list)  # only in the other release
    note: str = ""


@dataclass
class SettingDiff:
    name: str
    values: tuple[str, str]  # "VALUE (source)" per release, or "not read"
    why: str


@dataclass
class ReleaseDiff:
    builds: tuple[ReleaseBuild, ReleaseBuild]
    phases: list[PhaseDiff] = field(default_factory=list)
    settings: list[SettingDiff] = field(default_factory=list)

    @property
    def releases(self) -> tuple[str, str]:
        return self.builds[0].release, self.builds[1].release


# ------------------------------------------------------------------------------------------- building

def build_release(release: str, server: dict[str, Any], env: dict[str, str], num_hpu_blocks: int | None = None,
                  device: str = "gaudi2", model: str = "llama-3.1-8b", dtype: str = "bf16") -> ReleaseBuild:
    """The release's buckets for these settings. The KV block count is `num_hpu_blocks` when given,
    else the model's prediction for this release (its memory defaults differ from release to release).
    Raises BucketConfigError for an unknown release name."""
    from ..perfmodel import ServerInputs, SimSettings, predict_startup
    from ..perfmodel.uncertainty import warmup_band

    profile = get_profile(release)
    out = ReleaseBuild(release=profile.name)
    sim = SimSettings(model=model, device=device, dtype=dtype, tp=int(server.get("tensor_parallel_size", 1)),
                      gpu_memory_utilization=float(server.get("gpu_memory_utilization", 0.9)),
                      enforce_eager=bool(server.get("enforce_eager", False)))
    inputs = ServerInputs(block_size=int(server.get("block_size", 128)),
                          max_num_seqs=None if server.get("max_num_seqs") is None else int(server["max_num_seqs"]),
                          max_model_len=server.get("max_model_len"),
                          max_num_batched_tokens=server.get("max_num_batched_tokens"),
                          prefix_caching=server.get("enable_prefix_caching"),
                          max_num_prefill_seqs=server.get("max_num_prefill_seqs"))
    architecture = sim.shape.architecture
    if release_lacks(profile.name, architecture):  # the release cannot serve the model: nothing to build
        out.predicted["failure"] = f"config: {architecture} is not supported (its model registry)"
        out.refused = f"{profile.name}'s vLLM has no {architecture} in its model registry: it cannot serve {model}"
        return out
    pred = predict_startup(profile.name, sim, inputs, env)
    if pred.memory is not None:
        out.predicted["kv_blocks"] = pred.num_blocks
    if pred.failure is None:
        out.predicted.update(warmup_s=round(pred.warmup_seconds, 1), prompt_graphs=len(pred.graphed_prompt),
                             decode_graphs=len(pred.graphed_decode))
        band = warmup_band(pred, None)  # the documented constants alone: the prior's band
        if band is not None:
            out.predicted.update(warmup_low_s=round(band.low, 1), warmup_high_s=round(band.high, 1),
                                 warmup_from=band.source)
    else:
        out.predicted["failure"] = f"{pred.failure.phase}: {pred.failure.message}"
    if num_hpu_blocks is not None:
        out.kv_blocks, out.kv_source = num_hpu_blocks, "given"
    elif pred.memory is not None and pred.num_blocks > 0:
        out.kv_blocks, out.kv_source = pred.num_blocks, "predicted"
    else:
        out.refused = (f"the model predicts no KV cache ({out.predicted.get('failure', 'no memory split')}); "
                       "give --num-hpu-blocks to see the buckets anyway")
        return out
    try:
        out.plan = profile.build(replace(pred.config, num_hpu_blocks=out.kv_blocks))
    except BucketConfigError as exc:
        out.refused = str(exc)
    return out


def diff_releases(base: str, other: str, server: dict[str, Any], env: dict[str, str],
                  num_hpu_blocks: int | None = None, **model: str) -> ReleaseDiff:
    """Both releases' builds of the same settings, and their differences (base first)."""
    a = build_release(base, server, env, num_hpu_blocks, **model)
    b = build_release(other, server, env, num_hpu_blocks, **model)
    diff = ReleaseDiff(builds=(a, b))
    if a.plan is not None and b.plan is not None:
        diff.phases = phase_diffs(a.plan, b.plan)
    diff.settings = setting_diffs(a, b, env)
    return diff


# ------------------------------------------------------------------------------------------- diffing

def _as_3d(bucket: Bucket, phase: str) -> Bucket:
    if len(bucket) == 3:
        return tuple(bucket)
    bs, x = bucket
    return (bs, x, 0) if phase == "prompt" else (bs, 1, x)


def phase_diffs(a: BucketPlan, b: BucketPlan) -> list[PhaseDiff]:
    out = []
    mixed = a.dims != b.dims
    for phase in ("prompt", "decode", "unified"):
        left, right = getattr(a, phase), getattr(b, phase)
        if not left and not right:
            continue
        counts = (len(left), len(right))
        if phase == "decode" and (a.profile in TOKEN_DECODE) != (b.profile in TOKEN_DECODE):
            out.append(PhaseDiff(phase, counts, None, note="decode buckets in context tokens on one side and "
                                                           "in KV blocks on the other: counts only"))
            continue
        note = ""
        if mixed and phase != "unified":
            left, right = [_as_3d(x, phase) for x in left], [_as_3d(x, phase) for x in right]
            note = ("2-D buckets written as (bs, seq, 0)" if phase == "prompt" else
                    "2-D buckets written as (bs, 1, blocks)") + " to compare with the 3-D release"
        sa, sb = set(map(tuple, left)), set(map(tuple, right))
        out.append(PhaseDiff(phase, counts, len(sa & sb), removed=sorted(sa - sb), added=sorted(sb - sa), note=note))
    return out


def _shown(value: Any, source: str) -> str:
    return f"{value} ({source})"


def setting_diffs(a: ReleaseBuild, b: ReleaseBuild, env: dict[str, str]) -> list[SettingDiff]:  # noqa: C901 (one branch per kind of setting a release change can touch)
    """Settings the two releases treat differently: read by one only, ignored or overridden by one, or
    resolved to different values (another default, another meaning). The ones the env sets come first."""
    out: list[SettingDiff] = []
    resolved = [{s.name: s for s in (x.plan.settings if x.plan else [])} for x in (a, b)]
    names = list(dict.fromkeys([*resolved[0], *resolved[1]]))
    for name in names:
        pair = [r.get(name) for r in resolved]
        if None in pair:
            # Listed by one release only: for a variable, the other does not read it (its bucket variables
            # are known per strategy); a server input one of them does not list is no difference.
            present = pair[0] or pair[1]
            if not name.startswith(("VLLM_", "PT_HPU_")) or present.source == IGNORED:
                continue
            reader = a if pair[0] is not None else b
            other = b if reader is a else a
            if _reads(other, name):  # read, but resolved under another name (a deprecated fallback)
                if name in env:
                    values = tuple(_shown(p.value, p.source) if p else "read, under another name" for p in pair)
                    out.append(SettingDiff(name, values, f"{other.release} reads it in place of another "
                                                         "setting (see its warnings)"))
                continue
            values = tuple("not read" if p is None else _shown(p.value, p.source) for p in pair)
            out.append(SettingDiff(name, values, f"only {reader.release} reads it"))
            continue
        sa, sb = pair
        if (str(sa.value), sa.source) == (str(sb.value), sb.source):
            if name in env and sa.note != sb.note:  # the same value given, read with another meaning
                said = "; ".join(f"{x.release}: {plain_overwrite(p.note, x.plan.strategy if x.plan else None)}"
                                 for x, p in ((a, sa), (b, sb)) if p.note)
                out.append(SettingDiff(name, (_shown(sa.value, sa.source), _shown(sb.value, sb.source)), said))
            continue
        if IGNORED in (sa.source, sb.source):
            ignored = sa if sa.source == IGNORED else sb
            who = a if ignored is sa else b
            note = plain_overwrite(ignored.note, who.plan.strategy if who.plan else None)
            why = f"{who.release} ignores it" + (f": {note}" if note else "")
        elif "forced" in (sa.source, sb.source):
            why = f"{a.release if sa.source == 'forced' else b.release} overrides the value"
        elif str(sa.value) != str(sb.value):
            why = "same input, another value" if name in env else "another default"
        else:
            why = "taken from another source"
        out.append(SettingDiff(name, (_shown(sa.value, sa.source), _shown(sb.value, sb.source)), why))
    seen = {d.name for d in out} | set(names)
    # Variables of the env that a release does not read at all (no resolved setting for them).
    for name in sorted(env):
        if name in seen or not name.startswith(("VLLM_", "PT_HPU_")):
            continue
        reads = [_reads(x, name) for x in (a, b)]
        if reads[0] != reads[1]:
            values = tuple(f"{env[name]} (user)" if r else "not read" for r in reads)
            out.append(SettingDiff(name, values, f"only {(a if reads[0] else b).release} reads it"))
            seen.add(name)
    # Warmup and memory variables: read by one only, or another default.
    defaults = [{v.name: v.default for v in runtime_variables(x.release)} for x in (a, b)]
    for name in dict.fromkeys([*defaults[0], *defaults[1]]):
        if name in seen:
            continue
        vals = [_runtime_value(d, name, env) for d in defaults]
        if vals[0] != vals[1]:
            read = [name in d for d in defaults]
            why = (f"only {(a if read[0] else b).release} reads it" if read[0] != read[1] else
                   "same input, another value" if name in env else "another default")
            out.append(SettingDiff(name, (vals[0], vals[1]), why))
    return sorted(out, key=lambda d: d.name not in env)  # stable: what the env sets first


def _reads(build: ReleaseBuild, name: str) -> bool:
    strategy = build.plan.strategy if build.plan else None
    return reads_variable(build.release, name, strategy)


def _runtime_value(defaults: dict[str, str | None], name: str, env: dict[str, str]) -> str:
    if name not in defaults:
        return "not read"
    if name in env:
        return _shown(env[name], USER)
    return "unset (default)" if defaults[name] is None else _shown(defaults[name], "default")
