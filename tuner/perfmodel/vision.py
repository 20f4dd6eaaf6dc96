"""The multimodal warm-up phase and the vision encoder, priced from the tower's shape (models/vision.py)
and the image buckets the release builds (buckets/vision.py).

What one warm-up step costs (docs/calibration.md section 7.6):

* compiling the tower's graph for one image shape: A_V + B_V x patches, scaled by depth / 27 (a
  Qwen3-VL tower; 36 graphs compiled only, vllm-gaudi PR #1182 after its fix: 17 s, 0.47 s a graph);
* where the release runs the graphs (lazy mode, v0.15.1, VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY): the
  forward pass, and for the vllm-gaudi towers one blocking device-to-host copy per encoder layer
  (`cu_seqlens.tolist()`, ~0.35 s each, PR #1182: 10.31 s of host time per bucket; 362 s over the
  held-out log's 36 multimodal steps);
* the fork warms each image bucket inside a prompt scenario at the longest prompt bucket: that
  prompt compile too.

The vision tower keeps 16-bit weights under the FP8 recipes, so FP8 does not scale its compile time.
At runtime an image runs the graph of its image bucket (`image_key`): vllm-gaudi pads an image's
patches up to the smallest bucket that holds them (`get_multimodal_bucket`; an image larger than
every bucket runs unpadded, a shape of its own), batch-based towers pad the images of a call up to
a batch bucket. A key the warm-up did not compile compiles on the critical path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..buckets import BucketConfigError
from ..buckets.vision import VisionInputs, VisionPlan, build_vision
from ..models import ModelShape
from ..models.vision import VisionTower
from .costs import CostModel

A_V, B_V = 0.25, 0.4e-3  # compile: seconds per graph and per patch, for a 27-layer tower; GUESS (fitted, see above)
REF_DEPTH = 27
HOST_SYNC_S = 0.35  # vllm-gaudi HpuMMEncoderAttention: one blocking .tolist() per layer per forward (PR #1182)
BATCH_IMAGE_SIDE = 896


def parse_limit_mm(text: str | None) -> dict[str, dict[str, int]]:
    """--limit-mm-per-prompt as vLLM reads it: a count or {count, width, height} per modality (count 999
    when only a size is given). Raises ValueError naming the bad part."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--limit-mm-per-prompt {text!r}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"--limit-mm-per-prompt {text!r}: give a JSON object, e.g. '{{\"image\": 4}}'")
    out = {}
    for modality, value in raw.items():
        if isinstance(value, int) and not isinstance(value, bool):
            out[modality] = {"count": value}
        elif isinstance(value, dict) and all(k in ("count", "width", "height", "num_frames") for k in value):
            out[modality] = {"count": 999, **value}
        else:
            raise ValueError(f"--limit-mm-per-prompt: {modality}: {value!r} is neither a count nor "
                             "{count, width, height}")
    return out


def modalities_of(shape: ModelShape, model_type: str) -> tuple[str, ...]:
    if model_type == "kimi_k25":
        return ("vision_chunk",)  # Kimi-K2.5's one modality for images and video
    if "temporal_patch_size" in (shape.vision or {}):
        return ("image", "video")  # Qwen-VL style towers take video too
    return ("image",)


def vision_inputs(shape: ModelShape, profile: str, env: Mapping[str, str], limit_mm: Mapping[str, Mapping[str, int]],
                  *, prefix_caching: bool | None = None, max_prompt_shape: int = 0, enforce_eager: bool = False,
                  mm_model_type: str | None = None) -> tuple[VisionInputs, tuple[str, ...]]:
    """What the release's vision phase sees of this model and server (env: the user's variables)."""
    from ..buckets.runtime import runtime_defaults

    vision = shape.vision or {}
    model_type = mm_model_type or shape.config_model_type or shape.model_type.removesuffix("_text")
    modalities = modalities_of(shape, model_type)
    patch = vision.get("patch_size") or 1
    seen = {**runtime_defaults(profile), **env}
    return VisionInputs(
        model_type=model_type, model_class=shape.architecture, uses_mrope=shape.fork_mrope, env=dict(env),
        patch_size=int(patch[0] if isinstance(patch, (list, tuple)) else patch),
        mm_limits={m: limit_mm.get(m, {}).get("count", 999) for m in modalities}, limit_mm_per_prompt=dict(limit_mm),
        prefix_caching=prefix_caching is not False, lazy=seen.get("PT_HPU_LAZY_MODE") == "1",
        enforce_eager=enforce_eager, skip_warmup=seen.get("VLLM_SKIP_WARMUP", "").lower() in ("1", "true"),
        max_prompt_shape=max_prompt_shape,
    ), modalities


@dataclass(frozen=True)
class VisionPhase:
    """The vision warm-up of one start: the release's plan, the tower, and whether its graphs run."""

    plan: VisionPlan
    tower: VisionTower
    runs_graphs: bool  # the warm-up executes the encoder (outside PT_COMPILE_ONLY_MODE)
    host_sync: bool  # vllm-gaudi's per-layer blocking copy applies when it runs

    @property
    def fork(self) -> bool:
        return self.plan.profile.startswith("fork")

    def step_key(self, step) -> tuple:
        """The image bucket a warm-up step compiles (see image_key)."""
        if self.plan.is_batch_based:
            return ("batch", step.image_args or step.batch_size)
        if self.fork:
            return ("patches", step.image_args)
        return ("patches", pad_patches(self.plan, self.tower.patches(step.width, step.height)))

    def warmed_keys(self) -> frozenset:
        return frozenset(self.step_key(s) for s in self.plan.steps)

    def patches_of(self, step) -> int:
        if self.plan.is_batch_based:
            return (step.image_args or step.batch_size) * self.tower.patches(BATCH_IMAGE_SIDE, BATCH_IMAGE_SIDE)
        if self.fork:
            return int(step.image_args or 0)
        return max(1, step.count or 1) * self.tower.patches(step.width, step.height)


def pad_patches(plan: VisionPlan, patches: int) -> int:
    """vllm-gaudi's get_multimodal_bucket: the smallest bucket that holds the patches, else the patches."""
    for b in plan.buckets or ():
        if patches <= b:
            return b
    return patches


def image_key(phase: VisionPhase, width: int, height: int, images: int = 1) -> tuple:
    """The image bucket (the encoder graph) an image of width x height runs in, `images` per call for a
    batch-based tower."""
    if phase.plan.is_batch_based:
        for b in phase.plan.buckets or ():
            if images <= b:
                return ("batch", b)
        return ("batch", images)
    return ("patches", pad_patches(phase.plan, phase.tower.patches(width, height)))


def key_patches(phase: VisionPhase, key: tuple) -> int:
    """Patches the encoder runs over for one call in this bucket."""
    if key[0] == "batch":
        return key[1] * phase.tower.patches(BATCH_IMAGE_SIDE, BATCH_IMAGE_SIDE)
    return key[1]


def describe_key(key: tuple) -> str:
    return f"{key[1]} images" if key[0] == "batch" else f"{key[1]} patches"


def vision_phase(shape: ModelShape, profile: str, env: Mapping[str, str], limit_mm: Mapping[str, Mapping[str, int]],
                 *, prefix_caching: bool | None, max_prompt_shape: int, enforce_eager: bool) -> VisionPhase | None:
    """The multimodal warm-up this start runs, or None (a text model, a release without the phase, a
    tower the config does not describe). A bucket list the release refuses raises BucketConfigError."""
    tower = shape.vision_tower
    if not shape.multimodal or tower is None:
        return None
    inp, _ = vision_inputs(shape, profile, env, limit_mm, prefix_caching=prefix_caching,
                           max_prompt_shape=max_prompt_shape, enforce_eager=enforce_eager)
    plan = build_vision(profile, inp)
    if not plan.active:
        return None
    runs = "outside PT_COMPILE_ONLY_MODE" in plan.placement or plan.profile.startswith("fork")
    return VisionPhase(plan, tower, runs_graphs=runs, host_sync=runs and not plan.profile.startswith("fork"))


def encoder_seconds(cost: CostModel, tower: VisionTower, patches: int) -> float:
    """One encoder call over `patches` patches (graphed; 16-bit compute)."""
    d = cost.device
    return d.c_pre + tower.flops(patches) / (d.eta_c * d.flops_bf16) * cost.corr.prefill_step


def encoder_compile_seconds(tower: VisionTower, patches: int) -> float:
    """Compiling the encoder's graph for one image bucket (a warm-up step, or a recompile at runtime)."""
    return (A_V + B_V * patches) * tower.depth / REF_DEPTH


def step_seconds(phase: VisionPhase, cost: CostModel, step, prompt_compile: float = 0.0) -> float:
    """One multimodal warm-up step, uncorrected: compile, and the forward pass where the release runs it."""
    patches = phase.patches_of(step)
    secs = encoder_compile_seconds(phase.tower, patches) + prompt_compile
    if phase.runs_graphs:
        secs += encoder_seconds(cost, phase.tower, patches)
        if phase.host_sync:
            secs += HOST_SYNC_S * phase.tower.depth
    return secs


__all__ = ["BucketConfigError", "VisionPhase", "encoder_compile_seconds", "encoder_seconds", "image_key",
           "parse_limit_mm", "step_seconds", "vision_inputs", "vision_phase"]
