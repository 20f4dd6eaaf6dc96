"""Image buckets: the vision-encoder warm-up (the third warm-up phase) each release runs for a multimodal model.

Why its own module: the text profiles build (bs, seq[, blocks]) lists from the server configuration; this
phase is decided by the model instead (its model_type or class, its patch size, the modalities it
accepts) and by three variables of its own. How each release does it, in our words:

* vllm-gaudi v0.15.1, v0.26.0 (and v0.27.0rc0), main: `HPUVisionBucketManager(hf_config.model_type)`
  (vllm_gaudi/extension/bucketing/vision.py) takes the first table key that is a substring of the
  model_type (with '-' and '.' removed); a model missing from the table is batch-based with [1, 2, 4, 8].
  VLLM_MULTIMODAL_BUCKETS replaces the list ('None': no list at all), sorted. The runner
  (`warmup_multimodal_graphs`) then warms, per modality the user limited with --limit-mm-per-prompt:
  batch-based towers at each batch size on an 896x896 image; the others at five aspect ratios per
  bucket (patches per image -> width x height at the tower's patch size) plus the explicit resolutions
  (v0.26+: VLLM_MULTIMODAL_RESOLUTIONS `WxH[xN[-M]]` and limit-mm-per-prompt width/height; v0.15.1:
  only the latter). v0.26+ keep the table empty for Qwen3.5, Kimi-K2.5 and Gemma-4 on purpose: without
  explicit resolutions nothing is warmed.
* vllm-fork 1.22 and habana_main: `VisionBuckets(is_mm_optimized)` for M-RoPE models (Qwen2-VL family)
  and Gemma-3: batch sizes [1, 2, 4, 8] for Gemma-3, pixel buckets otherwise (multiples of 8); v1.23.0
  decides by the model class (InternVL: min..max_dynamic_patch+1 tiles). Warmed after the prompt graphs.
* vllm-gaudi v0.10.1 and the fork before 1.22 have no vision phase.

Truth: tests/data/vectors/vision/ (rows produced by running the releases' own code; SOURCES.md there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .base import BucketConfigError

BUCKETS_VAR = "VLLM_MULTIMODAL_BUCKETS"
RESOLUTIONS_VAR = "VLLM_MULTIMODAL_RESOLUTIONS"
OUTSIDE_VAR = "VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY"

# vllm_gaudi/extension/bucketing/vision.py MULTIMODAL_CONFIG, in table order (order decides: first
# substring match wins): key -> (is_batch_based, buckets). Data read from the cited commits.
_PIXELS = (1600, 3136, 4096, 6400, 7744, 9216, 12544)
_MISTRAL = (512, 1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 9216, 10240, 11264, 12288, 131076)
TABLE_0_15: dict[str, tuple[bool, tuple[int, ...]]] = {
    "gemma-3": (True, (1, 2, 4, 8)),
    "ovis2.5": (False, (784, 1600, 3136, 4096, 6400, 7744, 9216, 12544)),
    "qwen2_5_vl": (False, _PIXELS),
    "qwen3_vl": (False, (196, 256, 441, 480, 576, 900, 1156)),  # patches per image
}
TABLE_0_26: dict[str, tuple[bool, tuple[int, ...]]] = {
    "gemma-3": (True, (1, 2, 4, 8)),
    "ovis": (False, (1600, 3136, 4096, 6400)),
    "ovis2.5": (False, (784, 1600, 3136, 4096, 6400, 7744, 9216, 12544)),
    "qwen2_5_vl": (False, _PIXELS),
    "qwen3_vl": (False, (196, 256, 441, 480, 576, 900, 1156)),
    "ernie4_5_moe_vl": (False, _PIXELS),
    "pixtral": (False, _MISTRAL),
    "mistral3": (False, _MISTRAL),
    "deepseek_ocr": (False, (1600, 2048, 3072, 6144, 8192, 131076)),
    # Native-resolution towers: empty on purpose, warmed only at explicit resolutions.
    "qwen3_5": (False, ()),
    "kimi_k25": (False, ()),
    "gemma4": (False, ()),
}
NOT_IN_TABLE = (True, (1, 2, 4, 8))  # HPUVisionBucketManager's default for a model missing from the table
ASPECT_RATIOS = ((1, 1), (4, 3), (3, 4), (16, 9), (9, 16))  # bucket_to_image_resolution, width:height
MERGE_SIZE = 2  # bucket_to_image_resolution rounds the patch grid's width up to an even count
BATCH_IMAGE_SIDE = 896  # batch-based towers are warmed on 896x896 images (Gemma-3's size)
GRAPH_WARN_THRESHOLD = 25  # v0.26+: warn once when one modality will compile more graphs than this
FORK_PIXELS = _PIXELS
FORK_BATCH = (1, 2, 4, 8)

# profile -> how it builds the vision phase (None: it has none)
FLAVOUR = {
    "gaudi-0.15.1": "gaudi-0.15",
    "gaudi-0.26.0": "gaudi-0.26",
    "gaudi-main": "gaudi-main",
    "fork-1.22": "fork-flag",
    "fork-main": "fork-flag",
    "fork-1.23": "fork-class",
}

_NONE_TEXT = "object of type 'NoneType' has no len()"  # what upstream raises on VLLM_MULTIMODAL_BUCKETS=None


@dataclass(frozen=True)
class VisionInputs:
    """What the vision phase of a release sees of the model and the server."""

    model_type: str = ""  # vLLM's hf_config.model_type (the top-level one); vllm-gaudi's table key
    model_class: str = ""  # the fork: the loaded model's class name (Gemma-3 / InternVL decide)
    uses_mrope: bool = False  # the fork: M-RoPE models (the Qwen2-VL family) get vision buckets
    env: Mapping[str, str] = field(default_factory=dict)
    patch_size: int = 1  # the tower's patch size (vllm-gaudi probes the loaded tower; 1 when none is found)
    # MultiModalBudget.mm_limits: each modality the model accepts -> items per prompt (vLLM: 999 unless
    # --limit-mm-per-prompt says otherwise), in the model's order.
    mm_limits: Mapping[str, int] = field(default_factory=lambda: {"image": 999})
    # --limit-mm-per-prompt as given: modality -> {"count": n, "width": w, "height": h} (vLLM fills count)
    limit_mm_per_prompt: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    prefix_caching: bool = True
    max_prompt_shape: int = 0  # the fork: the longest prompt bucket's query length (logged as seq_len)
    dynamic_patch: tuple[int, int] | None = None  # fork 1.23 InternVL: (min_dynamic_patch, max_dynamic_patch)
    lazy: bool = False  # PT_HPU_LAZY_MODE=1
    enforce_eager: bool = False
    skip_warmup: bool = False  # VLLM_SKIP_WARMUP


@dataclass(frozen=True)
class VisionStep:
    """One vision-encoder graph the warm-up compiles, in upstream order."""

    modality: str
    batch_size: int  # as logged
    width: int = 0  # vllm-gaudi: the dummy image's pixels
    height: int = 0
    image_args: int | None = None  # vllm-gaudi batch-based: images per batch; the fork: the bucket
    count: int | None = None  # vllm-gaudi v0.26+: items per call the runner passes (None: its default)
    seq_len: int = 0  # as logged (the fork: the longest prompt bucket)
    index: int = 0  # the line's [index/total]: the candidate's place among its modality's candidates
    total: int = 0


@dataclass
class VisionPlan:
    profile: str
    active: bool  # the release runs a vision phase for this model at all
    buckets: list[int] | None = None  # None: VLLM_MULTIMODAL_BUCKETS=None
    is_batch_based: bool = False
    decided_by: str = ""  # the variable or table (entry) the list came from
    table_key: str | None = None
    resolutions: list[tuple] = field(default_factory=list)  # VLLM_MULTIMODAL_RESOLUTIONS, parsed
    steps: list[VisionStep] = field(default_factory=list)
    placement: str = ""
    log_records: list[tuple[str, str]] = field(default_factory=list)  # (level, message)
    warnings: list[str] = field(default_factory=list)

    @property
    def unit(self) -> str:
        if self.is_batch_based:
            return "images per batch"
        return "patches per image" if self.table_key == "qwen3_vl" else "patches (pixels) per image"

    @property
    def log_lines(self) -> list[str]:
        return [msg for _, msg in self.log_records]

    def to_json(self) -> dict:
        return {"active": self.active, "buckets": self.buckets, "count": len(self.buckets or []),
                "unit": self.unit if self.active else None, "is_batch_based": self.is_batch_based,
                "decided_by": self.decided_by, "table_key": self.table_key,
                "resolutions": [list(r[:2]) + [list(r[2]) if isinstance(r[2], tuple) else r[2]]
                                for r in self.resolutions],
                "graphs": len(self.steps),
                "steps": [{"modality": s.modality, "batch_size": s.batch_size, "width": s.width, "height": s.height,
                           "image_args": s.image_args, "count": s.count, "seq_len": s.seq_len} for s in self.steps],
                "placement": self.placement, "warnings": self.warnings}


def releases() -> tuple[str, ...]:
    """The profiles that have a vision phase."""
    return tuple(FLAVOUR)


def build_vision(profile: str, inp: VisionInputs, free_mem: str = "<free>") -> VisionPlan:
    """The image buckets and vision warm-up `profile` (a canonical profile name) runs for `inp`.
    `free_mem` stands in for the free device memory the warm-up lines print."""
    flavour = FLAVOUR.get(profile)
    if flavour is None:
        return VisionPlan(profile, active=False, decided_by="no vision warm-up in this release")
    if flavour.startswith("gaudi"):
        return _gaudi(profile, flavour, inp, free_mem)
    return _fork(profile, flavour, inp, free_mem)


# --- vllm-gaudi --------------------------------------------------------------------------------------

def _squash(text: str) -> str:
    return text.replace("-", "").replace(".", "")


def table_entry(flavour: str, model_type: str) -> tuple[str | None, bool, tuple[int, ...]]:
    """(key, is_batch_based, buckets) of the first table key contained in model_type; key None: not there."""
    table = TABLE_0_15 if flavour == "gaudi-0.15" else TABLE_0_26
    name = _squash(model_type.lower())
    for key, (batch, buckets) in table.items():
        if _squash(key) in name:
            return key, batch, buckets
    return None, *NOT_IN_TABLE


def _int(text: str, variable: str) -> int:
    try:
        return int(text)
    except ValueError as exc:  # the release's own message, as its server would stop with it
        raise BucketConfigError(f"{variable}: {exc}", variable) from None


def _bucket_list(raw: str, table: tuple[int, ...]) -> list[int] | None:
    if raw == "None":
        return None
    values = list(table) if raw == "" else [_int(x, BUCKETS_VAR) for x in raw.split(",")]
    return sorted(values)


def parse_resolutions(raw: str) -> list[tuple]:
    """VLLM_MULTIMODAL_RESOLUTIONS as v0.26+ read it: (width, height, None | N | (lo, hi)) per entry."""
    out: list[tuple] = []
    for item in raw.split(",") if raw else []:
        item = item.strip()
        if not item:
            continue
        parts = item.lower().split("x")
        if len(parts) == 2:
            out.append((_int(parts[0], RESOLUTIONS_VAR), _int(parts[1], RESOLUTIONS_VAR), None))
        elif len(parts) == 3:
            w, h, n = parts
            if "-" in n:
                lo_text, hi_text = n.split("-", 1)
                lo, hi = _int(lo_text, RESOLUTIONS_VAR), _int(hi_text, RESOLUTIONS_VAR)
                if lo < 1 or hi < lo:
                    raise BucketConfigError(f"{RESOLUTIONS_VAR}: Invalid count range '{n}' in "
                                            f"VLLM_MULTIMODAL_RESOLUTIONS entry '{item}'; expected 'N-M' with "
                                            "1 <= N <= M", RESOLUTIONS_VAR)
                out.append((_int(w, RESOLUTIONS_VAR), _int(h, RESOLUTIONS_VAR), (lo, hi)))
            else:
                out.append((_int(w, RESOLUTIONS_VAR), _int(h, RESOLUTIONS_VAR), _int(n, RESOLUTIONS_VAR)))
        else:
            raise BucketConfigError(f"{RESOLUTIONS_VAR}: Invalid VLLM_MULTIMODAL_RESOLUTIONS entry '{item}'; "
                                    "expected 'WxH', 'WxHxN', or 'WxHxN-M'", RESOLUTIONS_VAR)
    return out


def guessed_resolutions(buckets: list[int], patch_size: int) -> list[tuple[int, int]]:
    """Five aspect ratios per bucket: the square root of the patch count is the grid's height, the
    width follows the ratio, rounded up to an even patch count (bucket_to_image_resolution)."""
    out = []
    for patches in buckets:
        for ratio_w, ratio_h in ASPECT_RATIOS:
            grid_h = int(patches ** 0.5)
            height = grid_h * patch_size
            grid_w = int(height * ratio_w / ratio_h) // patch_size
            if grid_w * grid_h // MERGE_SIZE != 0:
                grid_w = (grid_w + MERGE_SIZE - 1) // MERGE_SIZE * MERGE_SIZE
            out.append((grid_w * patch_size, height))
    return out


def _limit_options(lpp: Mapping[str, Mapping[str, int]], modality: str) -> Mapping[str, int] | None:
    # v0.26+: the modality's own entry, else the generic 'image'/'video' one (Kimi's 'vision_chunk')
    if lpp.get(modality) is not None:
        return lpp[modality]
    fallback = {"image": ("image", "video"), "vision_chunk": ("image", "video"), "video": ("video", "image")}
    for key in fallback.get(modality, ()):
        if lpp.get(key) is not None:
            return lpp[key]
    return None


def _gaudi_placement(flavour: str, inp: VisionInputs) -> str:
    if inp.skip_warmup:
        return "skipped (VLLM_SKIP_WARMUP): every shape compiles at its first request"
    torch_compile = not inp.lazy and not inp.enforce_eager
    first = "first phase of the warm-up, before the sampler, prompt and decode graphs"
    if flavour == "gaudi-0.15":
        return f"{first}; outside PT_COMPILE_ONLY_MODE (graphs run)"
    outside = inp.env.get(OUTSIDE_VAR, "false").strip().lower() in ("1", "true") and flavour == "gaudi-main"
    if not torch_compile:
        return f"{first}; outside PT_COMPILE_ONLY_MODE (lazy or eager mode)"
    if outside:
        return f"{first}; outside PT_COMPILE_ONLY_MODE ({OUTSIDE_VAR})"
    return f"{first}; inside PT_COMPILE_ONLY_MODE (torch.compile: recipes only)"


def _gaudi(profile: str, flavour: str, inp: VisionInputs, free_mem: str) -> VisionPlan:
    log: list[tuple[str, str]] = []
    key, batch, table = table_entry(flavour, inp.model_type)
    if key is None:
        log.append(("INFO", f"MultiModal bucket config file for {inp.model_type} not found."))
    raw = inp.env.get(BUCKETS_VAR, "")
    buckets = _bucket_list(raw, table)
    resolutions = parse_resolutions(inp.env.get(RESOLUTIONS_VAR, "")) if flavour != "gaudi-0.15" else []
    where = "vllm_gaudi/extension/bucketing/vision.py"
    decided = (f"{BUCKETS_VAR}={raw}" if raw else
               f"table entry '{key}' ({where})" if key is not None else
               f"not in the table ({where}): batch-based default")
    plan = VisionPlan(profile, active=True, buckets=buckets, is_batch_based=batch, decided_by=decided,
                      table_key=key, resolutions=resolutions, placement=_gaudi_placement(flavour, inp),
                      log_records=log)
    log.append(("INFO", f"Multimodal bucket : {buckets}"))
    if inp.skip_warmup:
        return plan
    if flavour == "gaudi-0.15":
        _warm_0_15(plan, inp, free_mem)
    else:
        _warm_0_26(plan, inp, free_mem)
    for level, msg in log:
        if level == "WARNING":
            plan.warnings.append(msg)
    _note_unwarmed(plan, inp)
    return plan


def _note_unwarmed(plan: VisionPlan, inp: VisionInputs) -> None:
    # Not upstream's words: what an operator most often misses about this phase.
    for modality in ("image", "video"):
        if modality in inp.mm_limits and inp.limit_mm_per_prompt.get(modality) is None:
            plan.warnings.append(f"no {modality} graphs are warmed: the release warms the {modality} encoder only "
                                 f"when --limit-mm-per-prompt names '{modality}'")


def _too_few(msg_for: str) -> BucketConfigError:
    return BucketConfigError(f"{BUCKETS_VAR}=None: the {msg_for} stops with TypeError: {_NONE_TEXT}", BUCKETS_VAR)


def _missing_limit(modality: str) -> BucketConfigError:
    return BucketConfigError(f"--limit-mm-per-prompt names '{modality}', which the model does not accept: "
                             f"v0.15.1's warm-up stops with KeyError: '{modality}'", "limit_mm_per_prompt")


def _warm_0_15(plan: VisionPlan, inp: VisionInputs, free_mem: str) -> None:
    lpp, limits = inp.limit_mm_per_prompt, inp.mm_limits

    def limit(modality: str) -> int:
        if modality not in limits:
            raise _missing_limit(modality)
        return limits[modality]

    warm = {"image": lpp.get("image") is not None and limit("image") != 0,
            "video": lpp.get("video") is not None and limit("video") != 999}
    candidates: list = []
    for modality, unset in (("image", 0), ("video", 999)):
        if lpp.get(modality) is not None and limit(modality) != unset:
            opts = lpp[modality]
            if opts.get("width") is not None and opts.get("height") is not None:
                candidates.append((opts["width"], opts["height"]))
            break
    if not plan.is_batch_based:
        if plan.buckets is None:
            raise _too_few("warm-up")
        if plan.buckets:
            candidates += guessed_resolutions(plan.buckets, inp.patch_size)
    for modality in limits:
        if modality in warm and not warm[modality]:
            continue
        if plan.is_batch_based:
            if plan.buckets is None:
                raise _too_few("warm-up")
            candidates = list(plan.buckets)
        for idx, cand in enumerate(candidates):
            if plan.is_batch_based:
                step = VisionStep(modality, cand, BATCH_IMAGE_SIDE, BATCH_IMAGE_SIDE, image_args=cand)
            else:
                step = VisionStep(modality, 1, cand[0], cand[1])
            _log_step(plan, f"Graph/Multimodal({modality})", idx, len(candidates), step, free_mem)


def _log_step(plan: VisionPlan, phase: str, idx: int, total: int, step: VisionStep, free_mem: str) -> None:
    plan.steps.append(replace(step, index=idx + 1, total=total))
    plan.log_records.append(("INFO", f"[Warmup][{phase}][{idx + 1}/{total}] batch_size:{step.batch_size} "
                                     f"seq_len:{step.seq_len} resolution:{step.width}X{step.height} "
                                     f"free_mem:{free_mem}"))


def _warm_0_26(plan: VisionPlan, inp: VisionInputs, free_mem: str) -> None:
    lpp, limits, log = inp.limit_mm_per_prompt, inp.mm_limits, plan.log_records
    warm = {"image": lpp.get("image") is not None and "image" in limits and limits["image"] != 0,
            "video": lpp.get("video") is not None and "video" in limits and limits["video"] != 999}
    explicit: list[tuple] = []
    warmup_list: list[tuple] = []
    if not plan.is_batch_based:
        explicit += plan.resolutions
        for modality in limits:
            opts = lpp.get(modality)
            if opts is not None and opts.get("width") is not None and opts.get("height") is not None:
                explicit.append((opts["width"], opts["height"], None))
        if plan.buckets is None:
            raise _too_few("warm-up")
        guessed = [(w, h, 1) for w, h in guessed_resolutions(plan.buckets, inp.patch_size)]
        warmup_list = list(dict.fromkeys(guessed + explicit))  # guessed shapes first, duplicates once
        if explicit:
            log.append(("INFO", "Using explicit multimodal warmup resolutions (width, height, "
                                f"count[None=max|N=pin|(lo,hi)=range]): {explicit}"))
        elif not warmup_list:
            log.append(("WARNING", "No multimodal warmup resolutions for this native-resolution vision tower: "
                                   "patch-count buckets are empty and neither VLLM_MULTIMODAL_RESOLUTIONS nor "
                                   "limit-mm-per-prompt width/height is set. The vision-tower graph will recompile "
                                   "on the first request at each resolution. Set VLLM_MULTIMODAL_RESOLUTIONS (e.g. "
                                   "\"1024x768,864x480x1-20\") to precompile your production resolutions."))
    explicit_set = set(explicit)
    for modality in limits:
        if modality in warm and not warm[modality]:
            continue
        if plan.is_batch_based and plan.buckets is None:
            raise _too_few("warm-up")
        candidates = list(plan.buckets) if plan.is_batch_based else warmup_list
        opts = _limit_options(lpp, modality)
        user_max = opts["count"] if opts and "count" in opts else 1
        graphs, warned = 0, False
        for idx, cand in enumerate(candidates):
            if plan.is_batch_based:
                counts: list[int | None] = [None]
            else:
                width, height, spec = cand
                if isinstance(spec, tuple):
                    counts = list(range(spec[0], min(spec[1], user_max) + 1))
                elif spec is not None:
                    counts = [min(spec, user_max)]
                else:
                    counts = [user_max]
                if cand in explicit_set and len(counts) == 1 and user_max > 1 and inp.prefix_caching:
                    log.append(("WARNING", f"VLLM_MULTIMODAL_RESOLUTIONS warms a single item count ({counts[0]}) "
                                           f"for {width}x{height}, but prefix caching is enabled: cached image "
                                           "embeds make the per-call uncached count vary in "
                                           f"[1, {user_max}], so other counts will recompile at runtime. Declare "
                                           f"a range (e.g. \"{width}x{height}x1-{user_max}\") to warm them."))
            graphs += len(counts)
            if not warned and graphs > GRAPH_WARN_THRESHOLD:
                warned = True
                log.append(("WARNING", f"Multimodal warmup will compile over {GRAPH_WARN_THRESHOLD} {modality} "
                                       "graphs (one per item count per resolution). Wide count ranges in "
                                       "VLLM_MULTIMODAL_RESOLUTIONS multiply this and can make warmup slow and "
                                       "memory-heavy; declare only the counts your traffic actually sends."))
            for count in counts:
                if plan.is_batch_based:
                    step = VisionStep(modality, cand, BATCH_IMAGE_SIDE, BATCH_IMAGE_SIDE, image_args=cand)
                else:
                    step = VisionStep(modality, count, width, height, count=count)
                _log_step(plan, f"Graph/Multimodal({modality})", idx, len(candidates), step, free_mem)


# --- vllm-fork ---------------------------------------------------------------------------------------

def _fork(profile: str, flavour: str, inp: VisionInputs, free_mem: str) -> VisionPlan:
    optimized = ("Gemma3ForConditionalGeneration", "InternVLChatModel") if flavour == "fork-class" else \
        ("Gemma3ForConditionalGeneration",)
    is_mm_optimized = any(name in inp.model_class for name in optimized)
    if not (inp.uses_mrope or is_mm_optimized):
        return VisionPlan(profile, active=False,
                          decided_by="no vision buckets: the fork builds them for M-RoPE models and "
                                     + " / ".join(optimized) + " only")
    raw = inp.env.get(BUCKETS_VAR, "")
    where = "vllm/worker/hpu_model_runner.py VisionBuckets"
    if flavour == "fork-flag":
        batch = is_mm_optimized
        default = FORK_BATCH if batch else FORK_PIXELS
        what = "Gemma-3 batch sizes" if batch else "pixel buckets"
    else:
        batch = True
        if "InternVLChatModel" in inp.model_class:
            if inp.dynamic_patch is None:
                raise BucketConfigError("InternVL: the fork's VisionBuckets reads min_dynamic_patch and "
                                        "max_dynamic_patch from the model config; give them", "dynamic_patch")
            lo, hi = inp.dynamic_patch
            default, what = tuple(range(lo, hi + 2)), "InternVL tiles min_dynamic_patch..max_dynamic_patch+1"
        elif "Gemma3ForConditionalGeneration" in inp.model_class:
            default, what = FORK_BATCH, "Gemma-3 batch sizes"
        else:
            default, what = FORK_PIXELS, "pixel buckets"
            batch = raw != ""  # v1.23.0 clears the flag only on this default path
    if raw == "None":
        buckets = None
    else:
        buckets = sorted(default if raw == "" else [_int(x, BUCKETS_VAR) for x in raw.split(",")])
        if not batch:
            for b in buckets:
                if b % 8 != 0:
                    raise BucketConfigError(f"{BUCKETS_VAR}: bucket {b} is not a multiple of 8; the fork asserts "
                                            "'Buckets needs to be multiples 8 (slices of 64)'", BUCKETS_VAR)
    decided = f"{BUCKETS_VAR}={raw}" if raw else f"{where} default: {what}"
    plan = VisionPlan(profile, active=True, buckets=buckets, is_batch_based=batch, decided_by=decided)
    plan.log_records.append(("INFO", "Multimodal bucket : " + str(buckets)))
    if inp.skip_warmup or inp.enforce_eager:
        plan.placement = ("skipped (VLLM_SKIP_WARMUP)" if inp.skip_warmup else
                          "none: the fork warms multimodal graphs with the HPU graphs only (enforce_eager)")
        return plan
    plan.placement = "after the prompt graphs, before the decode graphs (inside PT_COMPILE_ONLY_MODE when available)"
    if buckets is None:
        raise BucketConfigError(f"{BUCKETS_VAR}=None: the fork's warm-up summary stops with TypeError: "
                                f"{_NONE_TEXT}", BUCKETS_VAR)
    graphed: set[int] = set()
    for idx, img_args in enumerate(buckets):
        if img_args in graphed:
            continue
        graphed.add(img_args)
        step = VisionStep("image", 1, image_args=img_args, seq_len=inp.max_prompt_shape, index=idx + 1,
                          total=len(buckets))
        plan.steps.append(step)
        plan.log_records.append(("INFO", f"[Warmup][Graph/Multimodal][{idx + 1}/{len(buckets)}] batch_size:1 "
                                         f"seq_len:{inp.max_prompt_shape} img_args:{img_args} free_mem:{free_mem}"))
    if buckets:
        plan.log_records.append(("INFO", f"Graph/Multimodal captured:{len(graphed)} "
                                         f"({100 * len(graphed) / len(buckets):.1f}%) buckets:{sorted(graphed)}"))
    return plan
