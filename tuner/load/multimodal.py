"""Images in chat requests: vLLM's random-mm dataset (its flags, sampling and seeds) and the image parts
that `vllm bench serve` (0.32.0) sends.

vLLM's ``RandomMultiModalDataset`` draws everything from one ``numpy.random.default_rng(seed)``, in
this order: input lengths, output lengths, id offsets (as the random dataset), the shared prefix,
then per request its text (the decode/re-encode retries may draw extra ids), the number of items
``U{floor(n(1-r)) .. min(sum of limits, ceil(n(1+r)))}``, and per item a bucket ``(height, width,
frames)`` by ``rng.choice`` followed at once by that image's pixels ``rng.integers(0, 256, (h, w, 3),
uint8)``. A modality at its ``limit_mm_per_prompt`` cap loses its buckets and the rest are
renormalised. We draw in the same order from the same generator, so a seed gives vLLM's request mix;
pixels are not kept: each image keeps the generator state it was drawn from and is drawn again,
JPEG-encoded (Pillow's default quality, as vLLM's ``process_image``) when its request is built.

Only images are sent: a bucket with frames > 1 (a video, which vLLM encodes with OpenCV) and a
positive probability is refused, saying so.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .workload import RequestSpec, Workload

Bucket = tuple[int, int, int]  # (height, width, frames): vLLM's key order

# vLLM 0.32.0's defaults (RandomMultiModalDataset)
DEFAULT_BASE_ITEMS_PER_REQUEST = 1
DEFAULT_NUM_MM_ITEMS_RANGE_RATIO = 0.0
DEFAULT_LIMIT_MM_PER_PROMPT = {"image": 255, "video": 1}
DEFAULT_BUCKET_CONFIG: dict[Bucket, float] = {(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}
MULTIMODAL_BACKENDS = ("openai-chat",)  # vLLM also allows openai-audio, which this client does not speak


# ---- The flags, parsed as vLLM parses them


def parse_bucket_config(value: object) -> dict[Bucket, float]:
    """``--random-mm-bucket-config``: a Python literal dict (tuple keys), as vLLM's ``ast.literal_eval``.

    Keys are ``(H, W, T)`` tuples of ints, or strings that evaluate to one (JSON cannot hold tuple
    keys); values become floats. Raises ValueError naming the bad part.
    """
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ValueError(f"--random-mm-bucket-config {value!r} is not a Python literal dict such as "
                             "'{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}'") from None
        if not isinstance(value, dict):
            raise ValueError(f"--random-mm-bucket-config must be a dict of (H, W, T): probability, "
                             f"got {type(value).__name__} {value!r}")
    if not isinstance(value, dict):
        raise ValueError(f"--random-mm-bucket-config: unsupported value {value!r}")
    out: dict[Bucket, float] = {}
    for key, prob in value.items():
        parsed = key
        if isinstance(parsed, str):
            try:
                parsed = ast.literal_eval(parsed)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
        if not (isinstance(parsed, tuple) and len(parsed) == 3 and all(isinstance(x, int) for x in parsed)):
            raise ValueError(f"--random-mm-bucket-config: invalid bucket key {key!r}; expected a tuple (H, W, T)")
        try:
            out[(int(parsed[0]), int(parsed[1]), int(parsed[2]))] = float(prob)
        except (TypeError, ValueError):
            raise ValueError(f"--random-mm-bucket-config: the probability of {key!r} must be a number, "
                             f"got {prob!r}") from None
    return out


def parse_limit_mm_per_prompt(text: object) -> dict[str, int]:
    """``--random-mm-limit-mm-per-prompt``: JSON (vLLM's ``json.loads``), e.g. '{"image": 3, "video": 0}'."""
    if isinstance(text, dict):
        value = text
    else:
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as e:
            raise ValueError(f"--random-mm-limit-mm-per-prompt {text!r} is not JSON ({e}); "
                             'e.g. \'{"image": 3, "video": 0}\'') from None
    if not isinstance(value, dict):
        raise ValueError(f"--random-mm-limit-mm-per-prompt must be a JSON object of modality: count, got {text!r}")
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"--random-mm-limit-mm-per-prompt: the limit of {k!r} must be an integer, got {v!r}")
    return dict(value)


def modality(bucket: Sequence[int]) -> str:
    frames = int(bucket[-1])
    if frames == 1:
        return "image"
    if frames > 1:
        return "video"
    raise ValueError(f"--random-mm-bucket-config: invalid item configuration {tuple(bucket)!r} (frames must be >= 1)")


def normalize_buckets(buckets: Mapping[Bucket, float]) -> dict[Bucket, float]:
    """Zero-probability buckets dropped, the rest scaled to sum to 1 (vLLM's normalize_bucket_config)."""
    bad = {k: v for k, v in buckets.items() if v < 0}
    if bad:
        raise ValueError(f"--random-mm-bucket-config: probabilities must be >= 0, got {bad}")
    kept = {k: v for k, v in buckets.items() if v > 0}
    if not kept:
        raise ValueError("--random-mm-bucket-config: every probability is 0; give at least one bucket a positive one")
    total = sum(kept.values())
    return {k: v / total for k, v in kept.items()}


@dataclass(frozen=True)
class ItemPlan:
    """What vLLM's get_mm_item_sampling_params settles before sampling."""

    min_items: int
    max_items: int
    limits: dict[str, int]
    buckets: dict[Bucket, float]


def item_plan(base_items: int, range_ratio: float, limits: Mapping[str, int],
              buckets: Mapping[Bucket, float]) -> ItemPlan:
    """The item-count range, the limits kept and the normalised buckets; vLLM's checks, in its order."""
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"--random-mm-num-mm-items-range-ratio must be in [0, 1], got {range_ratio}")
    for key in buckets:
        if modality(key) not in limits:
            raise ValueError(f"--random-mm-bucket-config: modality {modality(key)} of bucket {key} is not in "
                             f"--random-mm-limit-mm-per-prompt {dict(limits)}")
    norm = normalize_buckets(buckets)
    videos = [k for k in norm if modality(k) == "video"]
    if videos:
        raise ValueError(f"--random-mm-bucket-config: video buckets {videos} are not supported by this client "
                         "(images only; vLLM encodes videos with OpenCV): give them probability 0")
    present = {modality(k) for k in norm}
    kept = {k: v for k, v in limits.items() if k in present}
    if not kept:
        raise ValueError("--random-mm-limit-mm-per-prompt has no limit for the modalities of the bucket config")
    high = min(sum(kept.values()), math.ceil(base_items * (1 + range_ratio)))
    low = max(0, math.floor(base_items * (1 - range_ratio)))
    if low > high:
        raise ValueError(f"--random-mm-base-items-per-request {base_items} with range ratio {range_ratio}: "
                         f"the minimum number of items {low} exceeds the maximum {high} "
                         f"(capped by --random-mm-limit-mm-per-prompt {dict(kept)})")
    return ItemPlan(low, high, kept, norm)


# ---- Images


@dataclass(frozen=True)
class ImageItem:
    """One image of ``width`` x ``height`` random RGB pixels, drawn from the generator ``state``."""

    width: int
    height: int
    state: Mapping[str, Any] = field(repr=False, compare=False)

    def pixels(self) -> np.ndarray:
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = dict(self.state)
        return rng.integers(0, 256, (self.height, self.width, 3), dtype=np.uint8)

    def jpeg(self) -> bytes:
        """The image as vLLM's client encodes it: Pillow, RGB, JPEG at Pillow's default quality."""
        image = _pil().fromarray(self.pixels())
        with io.BytesIO() as buf:
            image.convert("RGB").save(buf, format="JPEG")
            return buf.getvalue()

    def content_part(self) -> dict[str, Any]:
        """The OpenAI chat content part: an ``image_url`` holding a base64 JPEG data URL."""
        data = base64.b64encode(self.jpeg()).decode("ascii")
        return {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{data}"}}

    @property
    def size(self) -> list[int]:
        return [self.width, self.height]

    @property
    def raw_bytes(self) -> int:
        return self.width * self.height * 3


def _pil():
    try:
        from PIL import Image
    except ImportError:  # a dependency; only a broken install lacks it
        raise RuntimeError("images need Pillow (a dependency of bucket-tuner): pip install 'pillow>=9.3'") from None
    return Image


def draw_image(rng: np.random.Generator, width: int, height: int) -> ImageItem:
    """An image whose pixels are the next ``rng`` draw, advancing ``rng`` past them as vLLM's does."""
    state = rng.bit_generator.state
    rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    return ImageItem(int(width), int(height), state)


def seeded_image(seed: int, request: int, item: int, width: int, height: int) -> ImageItem:
    """An image of a given size whose pixels depend only on (seed, request, item): trace images."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, request, item, 0x494D47])  # "IMG"
    return ImageItem(int(width), int(height), rng.bit_generator.state)


def sample_items(rng: np.random.Generator, plan: ItemPlan) -> list[ImageItem]:
    """One request's images, drawn as vLLM's get_mm_item_iterator + generate_mm_item draw them."""
    count = int(rng.integers(plan.min_items, plan.max_items + 1))
    items: list[ImageItem] = []
    if count == 0:
        return items
    used = {modality(k): 0 for k in plan.buckets}
    buckets = dict(plan.buckets)
    while sum(used.values()) < count:
        keys = list(buckets)
        choice = rng.choice(keys, p=list(buckets.values()))
        kind = modality(choice)
        if used[kind] < plan.limits[kind]:
            used[kind] += 1
            items.append(draw_image(rng, width=int(choice[1]), height=int(choice[0])))
            continue
        buckets = {k: (0 if modality(k) == kind else v) for k, v in buckets.items()}
        if all(v == 0 for v in buckets.values()):
            break
        buckets = normalize_buckets(buckets)
    return items


# ---- The workload


@dataclass(frozen=True)
class ChatPrompt:
    """A text prompt and the images sent after it (the recipe interface of workload.PromptRecipe)."""

    text: str
    images: tuple[ImageItem, ...] = ()

    def build(self) -> str:
        return self.text

    def build_array(self) -> str:
        return self.text


def image_stats(per_request: Sequence[Sequence[ImageItem]]) -> dict[str, Any]:
    """What the result file says of the images: counts, sizes and their shares, per request sizes."""
    counts = [len(items) for items in per_request]
    sizes: dict[str, int] = {}
    for items in per_request:
        for im in items:
            key = f"{im.width}x{im.height}"
            sizes[key] = sizes.get(key, 0) + 1
    return {"total": sum(counts), "per_request_min": min(counts, default=0),
            "per_request_max": max(counts, default=0),
            "per_request_mean": float(np.mean(counts)) if counts else 0.0,
            "by_size": dict(sorted(sizes.items())),
            "sizes_per_request": [[im.size for im in items] for items in per_request]}


TextMaker = Callable[[list[int], int, np.random.Generator], tuple[str, int]]
"""(ids, target tokens, the dataset's generator) -> (text, its token count): vLLM's decode/re-encode."""


@dataclass
class RandomMultiModalWorkload(Workload):
    """vLLM's random-mm dataset: random-dataset text plus images sampled from the bucket config.

    ``text`` sizes a prompt with the model's tokenizer drawing from the shared generator (see
    tuner.load.chatprompt.vllm_text_maker); without one, prompts are synthetic words and no draw is
    made for them, so image sizes match vLLM's only where its retries drew nothing either.
    ``num_special`` is the tokenizer's own special tokens, taken off the input length as vLLM does;
    ``allowed_ids`` the ids prompts are built from (vLLM: the vocabulary minus the special added tokens).
    """

    input_len: int
    output_len: int
    range_ratio: float = 0.0
    num_prompts: int = 1000
    seed: int = 0
    prefix_len: int = 0
    base_items: int = DEFAULT_BASE_ITEMS_PER_REQUEST
    items_range_ratio: float = DEFAULT_NUM_MM_ITEMS_RANGE_RATIO
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMIT_MM_PER_PROMPT))
    buckets: dict[Bucket, float] = field(default_factory=lambda: dict(DEFAULT_BUCKET_CONFIG))
    vocab_size: int = 32000
    allowed_ids: np.ndarray | None = field(default=None, repr=False)
    num_special: int = 0
    text: TextMaker | None = field(default=None, repr=False, compare=False)
    sized_by: str | None = None
    token_space: Any = field(default=None, init=False, repr=False, compare=False)
    _cache: Any = field(default=None, init=False, repr=False, compare=False)

    kind = "random-mm"

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.range_ratio) < 1.0:
            raise ValueError(f"--random-range-ratio must be in [0, 1), got {self.range_ratio}")
        for name in ("input_len", "output_len", "num_prompts", "prefix_len", "base_items", "seed"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {val!r}")
        self.plan = item_plan(self.base_items, float(self.items_range_ratio), self.limits, self.buckets)
        if self.allowed_ids is None:
            self.allowed_ids = np.arange(self.vocab_size, dtype=np.int64)

    def bounds(self) -> tuple[tuple[int, int], tuple[int, int]]:
        r = float(self.range_ratio)
        real = max(0, int(self.input_len) - self.num_special)
        return ((math.floor(real * (1 - r)), math.ceil(real * (1 + r))),
                (max(1, math.floor(self.output_len * (1 - r))), max(1, math.ceil(self.output_len * (1 + r)))))

    def _sample(self) -> tuple[list[str], list[int], list[int], list[tuple[ImageItem, ...]], int]:
        if self._cache is not None:
            return self._cache
        from .client import synthetic_text

        (il, ih), (ol, oh) = self.bounds()
        rng = np.random.default_rng(self.seed)
        n = self.num_prompts
        in_lens = rng.integers(il, ih + 1, size=n)
        out_lens = rng.integers(ol, oh + 1, size=n).tolist()
        offsets = rng.integers(0, self.vocab_size, size=n)
        allowed = self.allowed_ids
        mismatch = 0
        prefix: list[int] = []
        if self.prefix_len > 0:
            prefix = allowed[rng.integers(0, len(allowed), size=self.prefix_len)].tolist()
            if self.text is not None:
                _, prefix, miss = self._retext(prefix, self.prefix_len, rng)
                mismatch += miss
        texts, lens, images = [], [], []
        for i in range(n):
            ids = prefix + allowed[(int(offsets[i]) + i + np.arange(int(in_lens[i]))) % len(allowed)].tolist()
            target = self.prefix_len + int(in_lens[i])
            if self.text is not None:
                text, seq, miss = self._retext(ids, target, rng)
                mismatch += miss
                texts.append(text)
                lens.append(len(seq))
            else:
                texts.append(synthetic_text(ids))
                lens.append(target)
            images.append(tuple(sample_items(rng, self.plan)))
        self._cache = (texts, lens, out_lens, images, mismatch)
        return self._cache

    def _retext(self, ids: list[int], target: int, rng: np.random.Generator) -> tuple[str, list[int], int]:
        text, seq = self.text(ids, target, rng)
        return text, seq, (len(seq) - target)

    @property
    def mismatch(self) -> int:
        """Tokens over (+) or under (-) the targets after the retries, as vLLM's warning counts them."""
        return self._sample()[4]

    def lengths(self) -> tuple[list[int], list[int]]:
        _, lens, outs, _, _ = self._sample()
        return list(lens), list(outs)

    def requests(self) -> list[RequestSpec]:
        texts, lens, outs, images, _ = self._sample()
        return [RequestSpec(index=i, prompt_len=n, output_len=o, recipe=ChatPrompt(t, im), images=im)
                for i, (t, n, o, im) in enumerate(zip(texts, lens, outs, images))]

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        """Requests of the same sizes and images, their texts made distinct (no prefix-cache hits)."""
        base = self.requests()
        out = []
        for i in range(max(0, n) if base else 0):
            src = base[i % len(base)]
            out.append(RequestSpec(index=i, prompt_len=src.prompt_len, output_len=src.output_len,
                                   recipe=ChatPrompt(f"{i} " + src.recipe.text, src.images), images=src.images))
        return out

    def image_count(self) -> int:
        return sum(len(im) for im in self._sample()[3])

    def params(self) -> dict[str, Any]:
        (il, ih), (ol, oh) = self.bounds()
        return {"input_len": self.input_len, "output_len": self.output_len, "range_ratio": float(self.range_ratio),
                "prefix_len": self.prefix_len, "seed": self.seed, "input_len_bounds": [il, ih],
                "output_len_bounds": [ol, oh], "base_items_per_request": self.base_items,
                "num_mm_items_range_ratio": float(self.items_range_ratio), "limit_mm_per_prompt": dict(self.limits),
                "bucket_config": {str(k): v for k, v in self.plan.buckets.items()},
                "items_per_request_bounds": [self.plan.min_items, self.plan.max_items]}

    def describe(self) -> dict[str, Any]:
        texts, lens, outs, images, mismatch = self._sample()
        stats = lambda v: {"min": min(v), "max": max(v), "mean": float(np.mean(v))} if v else {}  # noqa: E731
        return {"kind": self.kind, **self.params(), "num_prompts": len(texts), "prompt_format": "chat text + images",
                "prompt_len_stats_client": stats(lens), "output_len_stats": stats(outs),
                "text_sized_by": self.sized_by, "text_mismatch_tokens": mismatch,
                "images": image_stats(images)}
