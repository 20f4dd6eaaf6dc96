"""The images a workload sends, as the image-bucket fit needs them: each size's share of the images, the
number of images per request, and the share of requests (or images) a set of sizes serves.

Two sources: vLLM's random-mm flags, read exactly (each image's size is drawn independently from the
bucket config's probabilities, the count per request uniformly in its range: vLLM's sampling for an
images-only config, so a request of n images is served whole with probability q^n), and a trace's
`images` column (the requests as they are).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Size = tuple[int, int]  # (width, height)


@dataclass(frozen=True)
class ImageLoad:
    """`kinds`: a request's image sizes (sorted) -> share of requests, for traces; or, for random-mm,
    `sizes` (image shares) with `counts` (images per request -> share) drawn independently."""

    sizes: Mapping[Size, float]
    counts: Mapping[int, float]
    kinds: Mapping[tuple[Size, ...], float] | None = None
    source: str = ""
    requests: int = 0

    @property
    def max_items(self) -> int:
        return max(self.counts, default=0)

    @property
    def mean_items(self) -> float:
        return sum(n * p for n, p in self.counts.items())

    def image_share(self, ok: Iterable[Size]) -> float:
        return sum(self.sizes.get(s, 0.0) for s in set(ok))

    def request_share(self, ok: Iterable[Size]) -> float:
        """Requests whose every image is of a size in `ok` (a request without images always is)."""
        ok = set(ok)
        if self.kinds is not None:
            return sum(p for kind, p in self.kinds.items() if all(s in ok for s in kind))
        q = self.image_share(ok)
        return sum(p * q ** n for n, p in self.counts.items())

    def count_share(self, ok_counts: Iterable[int], of_images: bool = False) -> float:
        """Requests (or their images) whose image count is in `ok_counts` (none: served, no encoder call)."""
        ok = set(ok_counts) | {0}
        if of_images:
            total = self.mean_items
            return sum(n * p for n, p in self.counts.items() if n in ok) / total if total else 1.0
        return sum(p for n, p in self.counts.items() if n in ok)


def from_random_mm(buckets: Mapping[tuple[int, int, int], float], min_items: int, max_items: int,
                   requests: int) -> ImageLoad:
    """vLLM's random-mm (images only): normalised (H, W, 1) probabilities, counts uniform in [min, max]."""
    total = sum(buckets.values())
    sizes: dict[Size, float] = {}
    for (height, width, _), p in buckets.items():
        sizes[(width, height)] = sizes.get((width, height), 0.0) + p / total
    span = max_items - min_items + 1
    counts = {n: 1.0 / span for n in range(min_items, max_items + 1)}
    return ImageLoad(sizes, counts, source="random-mm", requests=requests)


def from_requests(per_request: Sequence[Sequence[Size]], source: str = "trace") -> ImageLoad:
    """A trace's requests, each with its images' (width, height)."""
    n = len(per_request)
    kinds = Counter(tuple(sorted(tuple(s) for s in r)) for r in per_request)
    images = Counter(tuple(s) for r in per_request for s in r)
    total = sum(images.values())
    counts = Counter(len(r) for r in per_request)
    return ImageLoad({s: c / total for s, c in images.items()} if total else {},
                     {k: c / n for k, c in counts.items()}, {k: c / n for k, c in kinds.items()},
                     source=source, requests=n)
