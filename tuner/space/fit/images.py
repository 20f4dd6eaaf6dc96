"""Image buckets placed on a workload's images: the least multimodal warm-up that serves a target share
of the requests (or images) without an encoder recompile.

Every candidate is judged by the release's own plan (buckets/vision.py) and priced by the performance
model (perfmodel/vision.py), the same functions the simulator serves with: an image is served without
recompiling when its image bucket (`image_key`) is among those the warm-up compiled; the warm-up is the
sum of the multimodal steps, as calibrated.

* VLLM_MULTIMODAL_BUCKETS (every release with a vision phase): the top bucket is the smallest image
  (patches, images per call for batch-based towers, multiples of 8 on the fork's pixel towers) that
  reaches the target; below it, the least-padding list of each length (the exact programme of
  quantize.py, weighted by the images' shares) is judged as the release builds it. The choice is the
  least warm-up among the lists that reach the target, pad the encoder's work by at most
  `max_padding` and make the release warn of nothing (v0.26+: over 25 graphs per modality).
  Without the padding bound the least warm-up is one bucket at the top, every image padded up to it.
* VLLM_MULTIMODAL_RESOLUTIONS (vllm-gaudi v0.26+): resolutions added to what the release warms already
  (its table, empty on purpose for the native-resolution towers): the least-warm-up set of the images'
  own shapes that reaches the target, exactly over every subset of up to 12 candidate shapes, greedily
  (most share per second first) beyond. A shape is written `WxHx1-N` when prefix caching varies the
  items per call up to the limit N (the release asks for a range then), else `WxH`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ...buckets import BucketConfigError
from ...buckets.vision import BUCKETS_VAR, RESOLUTIONS_VAR
from .imageload import ImageLoad, Size
from .quantize import FitError, pareto_curve

EXACT_CANDIDATES = 12  # subsets enumerated up to this many candidate shapes (4,096)
_IRRELEVANT = "no video graphs are warmed"  # our note about a modality an image workload does not send


@dataclass(frozen=True)
class ImageChoice:
    """One value of the variable, as the release builds and the model prices it."""

    variable: str
    value: str  # the environment text
    seconds: float  # the predicted multimodal warm-up
    graphs: int
    image_share: float
    request_share: float
    padding: float  # padded share of the encoder's work (patches, or images per call)
    warnings: tuple[str, ...] = ()

    def share(self, unit: str) -> float:
        return self.image_share if unit == "images" else self.request_share


@dataclass
class ImageFit:
    variable: str
    unit: str  # "requests" or "images": what the target counts
    target: float
    bucket_unit: str  # what a bucket counts (the release's plan)
    limit: int  # the --limit-mm-per-prompt image count the server is given
    rows: list[ImageChoice] = field(default_factory=list)  # the judged candidates
    chosen: ImageChoice | None = None
    base: ImageChoice | None = None  # resolutions: what the release warms without them
    method: str = "exact"
    why_none: str = ""


class Pricer:
    """A start of `model` on `profile` (one prediction), pricing and judging image-bucket values."""

    def __init__(self, model: str, profile: str, env: Mapping[str, str], limit: int, *, prefix_caching: bool = True,
                 max_model_len: int = 8192):
        from ...perfmodel import ServerInputs, SimSettings, predict_startup
        from ...perfmodel.hardware import model_for

        self.shape = model_for(model)
        self.profile, self.env, self.limit, self.prefix_caching = profile, dict(env), limit, prefix_caching
        self.pred = predict_startup(profile, SimSettings(model=model), ServerInputs(
            max_model_len=max_model_len, prefix_caching=prefix_caching,
            limit_mm_per_prompt=json.dumps({"image": limit})), self.env)
        self.cost = self.pred.cost
        queries = [b[1] for b in self.pred.plan.prompt] if self.pred.plan else []
        self.max_prompt = max(queries) if queries else max_model_len

    def phase(self, extra: Mapping[str, str]):
        from ...perfmodel.vision import vision_phase

        return vision_phase(self.shape, self.profile, {**self.env, **extra}, {"image": {"count": self.limit}},
                            prefix_caching=self.prefix_caching, max_prompt_shape=self.max_prompt, enforce_eager=False)

    def judge(self, variable: str, value: str | None, load: ImageLoad) -> ImageChoice:
        """The release's plan with `variable`=`value` (None: as the environment has it), its warm-up and
        the share of the load it serves. BucketConfigError: the release refuses the value."""
        from ...perfmodel.capture import multimodal_steps

        phase = self.phase({} if value is None else {variable: value})
        if phase is None:
            raise FitError(f"{self.profile} runs no vision warm-up for {self.shape.name}: there are no image "
                           "buckets to fit")
        seconds = sum(s.seconds for s in multimodal_steps(replace(self.pred, vision=phase), self.cost, 0.0))
        img, req, pad = coverage(phase, load)
        warnings = tuple(w for w in phase.plan.warnings if not w.startswith(_IRRELEVANT))
        text = self.env.get(variable, "") if value is None else value
        return ImageChoice(variable, text, seconds, len(phase.plan.steps), img, req, pad, warnings)


def coverage(phase, load: ImageLoad) -> tuple[float, float, float]:
    """(images, requests) served in warmed image buckets, and the padded share of the encoder's work."""
    from ...perfmodel.vision import image_key, key_patches

    warmed = phase.warmed_keys()
    if phase.plan.is_batch_based:
        keys = {n: image_key(phase, 0, 0, n) for n in load.counts if n > 0}
        ok = [n for n, k in keys.items() if k in warmed]
        work = sum(p * k[1] for n, p in load.counts.items() if n > 0 for k in (keys[n],))
        waste = sum(p * (keys[n][1] - n) for n, p in load.counts.items() if n > 0)
        return load.count_share(ok, of_images=True), load.count_share(ok), waste / work if work else 0.0
    keys = {s: image_key(phase, *s) for s in load.sizes}
    ok = [s for s, k in keys.items() if k in warmed]
    work = sum(p * key_patches(phase, keys[s]) for s, p in load.sizes.items())
    waste = sum(p * (key_patches(phase, keys[s]) - phase.tower.patches(*s)) for s, p in load.sizes.items())
    return load.image_share(ok), load.request_share(ok), waste / work if work else 0.0


def _served(load: ImageLoad, unit: str, sizes=None, counts=None) -> float:
    if counts is not None:
        return load.count_share(counts, of_images=unit == "images")
    return load.image_share(sizes) if unit == "images" else load.request_share(sizes)


def fit_buckets(pricer: Pricer, load: ImageLoad, *, target: float, unit: str, max_padding: float,
                max_buckets: int = 8) -> ImageFit:
    """VLLM_MULTIMODAL_BUCKETS: the least-warm-up list that serves `target` of the `unit`."""
    base = pricer.phase({})
    if base is None:
        pricer.judge(BUCKETS_VAR, None, load)  # raises, saying the release has no vision phase
    batch, fork = base.plan.is_batch_based, pricer.profile.startswith("fork")
    fit = ImageFit(BUCKETS_VAR, unit, target, base.plan.unit, pricer.limit)
    if batch:
        weights = {n: p for n, p in load.counts.items() if n > 0}
        value_of = None
    else:
        def value_of(size: Size) -> int:
            patches = pricer.shape.vision_tower.patches(*size)
            return -(-patches // 8) * 8 if fork else patches  # the fork asserts multiples of 8
        weights = {}
        for size, p in load.sizes.items():
            weights[value_of(size)] = weights.get(value_of(size), 0.0) + p
    if not weights:
        raise FitError("the workload sends no images")
    values = sorted(weights)

    def served_upto(top: int) -> float:
        if batch:
            return _served(load, unit, counts=[n for n in values if n <= top])
        return _served(load, unit, sizes=[s for s in load.sizes if value_of(s) <= top])

    top = next((v for v in values if served_upto(v) >= target - 1e-12), values[-1])
    kept = [v for v in values if v <= top]
    curve = pareto_curve(kept, [weights[v] for v in kept], max_buckets=max(1, min(max_buckets, len(kept))))
    for f in curve:
        try:
            fit.rows.append(pricer.judge(BUCKETS_VAR, ",".join(str(b) for b in f.boundaries), load))
        except BucketConfigError as exc:  # not expected for lists we build; said, not hidden
            fit.why_none = f"{BUCKETS_VAR}={f.boundaries}: {exc}"
    _choose(fit, max_padding)
    return fit


def _choose(fit: ImageFit, max_padding: float) -> None:
    good = [r for r in fit.rows if r.share(fit.unit) >= fit.target - 1e-12 and r.padding <= max_padding + 1e-12
            and not r.warnings]
    if good:
        fit.chosen = min(good, key=lambda r: (r.seconds, r.graphs))
        return
    if not fit.rows:
        return
    best = max(fit.rows, key=lambda r: r.share(fit.unit))
    least = min(fit.rows, key=lambda r: r.padding)
    warned = [r for r in fit.rows if r.warnings]
    fit.why_none = (f"no list serves {fit.target:.1%} of the {fit.unit} within {max_padding:.0%} padding without a "
                    f"warning from the release: the most served is {best.share(fit.unit):.1%} ({best.value}), "
                    f"the least padding {least.padding:.1%} ({least.value})"
                    + (f"; {warned[0].value} makes the release warn: {warned[0].warnings[0]}" if warned else "")
                    + "; lower --image-coverage or raise --max-image-padding")


def resolution_spec(size: Size, limit: int, prefix_caching: bool) -> str:
    """One VLLM_MULTIMODAL_RESOLUTIONS entry: items per call vary in [1, limit] under prefix caching, and
    the release then asks for that range (a single count draws its warning)."""
    width, height = size
    return f"{width}x{height}x1-{limit}" if limit > 1 and prefix_caching else f"{width}x{height}"


def fit_resolutions(pricer: Pricer, load: ImageLoad, *, target: float, unit: str) -> ImageFit:
    """VLLM_MULTIMODAL_RESOLUTIONS: the least-warm-up set of the workload's shapes, added to what the
    release warms without it, that serves `target` of the `unit`."""
    from ...perfmodel.vision import image_key

    base_choice = pricer.judge(RESOLUTIONS_VAR, pricer.env.get(RESOLUTIONS_VAR, ""), load)
    phase = pricer.phase({})
    if phase.plan.is_batch_based:
        raise FitError(f"{pricer.shape.name} has a batch-based vision tower on {pricer.profile}: resolutions do not "
                       f"change what it warms; fit {BUCKETS_VAR} (images per batch) instead")
    fit = ImageFit(RESOLUTIONS_VAR, unit, target, phase.plan.unit, pricer.limit, base=base_choice)
    warmed = phase.warmed_keys()
    groups: dict[tuple, list[Size]] = {}
    for size in sorted(load.sizes, key=lambda s: -load.sizes[s]):
        key = image_key(phase, *size)
        if key not in warmed:
            groups.setdefault(key, []).append(size)
    served = [s for s in load.sizes if image_key(phase, *s) in warmed]
    if _served(load, unit, sizes=served) >= target - 1e-12 and not base_choice.warnings:
        fit.chosen = base_choice  # nothing to add
        return fit
    base_text = pricer.env.get(RESOLUTIONS_VAR, "")
    cands = []  # (spec, sizes it serves, added seconds)
    for sizes in groups.values():
        spec = resolution_spec(sizes[0], pricer.limit, pricer.prefix_caching)
        added = pricer.judge(RESOLUTIONS_VAR, ",".join(filter(None, (base_text, spec))), load).seconds
        cands.append((spec, sizes, added - base_choice.seconds))

    def estimate(subset) -> float:
        return _served(load, unit, sizes=served + [s for c in subset for s in c[1]])

    if len(cands) <= EXACT_CANDIDATES:
        subsets = [c for r in range(1, len(cands) + 1) for c in itertools.combinations(cands, r)]
        order = sorted((s for s in subsets if estimate(s) >= target - 1e-12), key=lambda s: sum(c[2] for c in s))
    else:
        fit.method = "greedy"
        picked: list = []
        for c in sorted(cands, key=lambda c: -_served(load, unit, sizes=c[1]) / max(c[2], 1e-9)):
            picked.append(c)
            if estimate(picked) >= target - 1e-12:
                break
        order = [tuple(picked)] if estimate(picked) >= target - 1e-12 else []
    for subset in order[:32]:  # the cheapest first, each judged as the release builds it
        value = ",".join(filter(None, (base_text, *(c[0] for c in subset))))
        row = pricer.judge(RESOLUTIONS_VAR, value, load)
        fit.rows.append(row)
        if row.share(unit) >= target - 1e-12 and not row.warnings:
            fit.chosen = row
            return fit
    if base_choice.warnings:
        fit.why_none = (f"the release warns about what it warms without resolutions already ({base_choice.graphs} "
                        f"graphs: {base_choice.warnings[0]}); fit {BUCKETS_VAR} instead, or fix a shorter list of it "
                        "with --env")
    elif fit.rows:
        last = fit.rows[-1]
        fit.why_none = (f"the cheapest sets that should serve {target:.1%} of the {unit} do not as the release builds "
                        f"them (e.g. {last.value}: {last.share(unit):.1%}"
                        + (f"; it warns: {last.warnings[0]}" if last.warnings else "") + ")")
    else:
        fit.why_none = f"no set of the workload's shapes serves {target:.1%} of the {unit}"
    return fit
