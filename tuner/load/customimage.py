"""vLLM's custom_image dataset (vllm/benchmarks/datasets: CustomImageDataset): your prompts with your images.

A JSONL file, each line either ``{"prompt": ..., "image_files": [...]}`` (the text, then its images) or
``{"content": [...]}`` (text and image parts interleaved: ``{"type": "text", "text": ...}``,
``{"type": "image", "image": ...}``, ``{"type": "image_url", "image_url": {"url": ...} or "..."}``), as vLLM
0.32 reads it: shuffled with ``random.seed(seed)`` unless --disable-shuffle, the first ``--num-prompts``,
oversampled when fewer. An image is sent as vLLM's client sends it: an http(s), file:// or data: URL as
given, a local path as ``file://`` (the server reads it under its --allowed-local-media-path); with
--custom-ensure-client-side-data a local file is sent as a PNG data URL instead (vLLM's encode_image_url).
Each request asks ``--custom-output-len`` tokens (vLLM's default 256); prompt lengths are the text's, as the
client's tokenizer counts it (the server counts the images).
"""

from __future__ import annotations

import base64
import io
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from .jsonlines import jsonl_objects
from .workload import RequestSpec, TextPrompt, Workload

URL_SCHEMES = ("http://", "https://", "file://", "data:image/")


@dataclass(frozen=True)
class UrlImage:
    """One image as a URL (the content-part interface of tuner.load.multimodal.ImageItem)."""

    url: str
    extra: tuple[tuple[str, Any], ...] = ()  # the image_url's other keys (detail, ...), kept as written
    width_height: tuple[int, int] | None = None  # when the file could be read here

    def content_part(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.url, **dict(self.extra)}}

    @property
    def size(self) -> list[int] | None:
        return list(self.width_height) if self.width_height else None

    @property
    def raw_bytes(self) -> int:  # what building the request holds: the URL (a data URL's whole image)
        return len(self.url)


@dataclass(frozen=True)
class ContentPrompt:
    """A prompt of interleaved text and image parts, sent in its order (the recipe interface of TextPrompt)."""

    parts: tuple[dict, ...]

    @property
    def text(self) -> str:
        return "".join(p["text"] for p in self.parts if p.get("type") == "text")

    def build(self) -> str:
        return self.text

    def build_array(self) -> str:
        return self.text


def _local(url: str) -> Path | None:
    return Path(unquote(urlparse(url).path)) if url.startswith("file://") else None


def _size(url: str) -> tuple[int, int] | None:
    path = _local(url)
    if path is None:
        return None
    try:
        from PIL import Image

        with Image.open(path) as im:
            return im.size
    except (OSError, ValueError):
        return None


def image(ref: Any, client_side: bool, where: str, extra: tuple = ()) -> UrlImage:
    """vLLM's process_image for a string: a URL as given, a path made file://; inlined as PNG when asked."""
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"{where}: an image must be a URL or a file path string, got {ref!r}")
    url = ref if ref.startswith(URL_SCHEMES) else f"file://{ref}"
    if client_side and not url.startswith("data:image/"):
        path = _local(url)
        if path is None:
            raise ValueError(f"{where}: --custom-ensure-client-side-data cannot fetch {url!r} (this client reads "
                             "local files only)")
        try:
            from PIL import Image

            with Image.open(path) as im, io.BytesIO() as buf:
                im.convert("RGB").save(buf, format="PNG")
                size, data = im.size, base64.b64encode(buf.getvalue()).decode("ascii")
        except OSError as e:
            raise ValueError(f"{where}: image {path} cannot be read ({e})") from None
        return UrlImage(f"data:image/png;base64,{data}", extra, size)
    return UrlImage(url, extra, _size(url))


def _part(part: Any, client_side: bool, where: str) -> dict | UrlImage:
    if not isinstance(part, dict):
        raise ValueError(f"{where}: each item in 'content' must be a dictionary, got {type(part).__name__}")
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise ValueError(f"{where}: text content parts must contain a string 'text'")
        return {"type": "text", "text": part["text"]}
    if kind == "image":
        if "image" not in part:
            raise ValueError(f"{where}: image content parts must contain an 'image' field")
        return image(part["image"], client_side, where)
    if kind == "image_url":
        ref = part.get("image_url")
        if isinstance(ref, dict):
            return image(ref.get("url"), client_side, where, tuple((k, v) for k, v in ref.items() if k != "url"))
        return image(ref, client_side, where)
    raise ValueError(f"{where}: content parts must have type 'text', 'image' or 'image_url', found {kind!r}")


@dataclass
class CustomImageWorkload(Workload):
    path: Path
    num_prompts: int = 1000
    seed: int = 0
    output_len: int = 256
    shuffle: bool = True
    oversample: bool = True
    client_side: bool = False  # --custom-ensure-client-side-data
    count: Callable[[str], int] | None = field(default=None, repr=False, compare=False)
    token_space: Any = field(default=None, repr=False, compare=False)

    kind = "custom_image"

    def __post_init__(self) -> None:
        items = self._read()
        random.seed(self.seed)
        if self.shuffle:
            random.shuffle(items)
        count = self.count or (lambda t: max(1, len(t.split())))
        specs = [self._spec(i, item, count) for i, item in enumerate(items[:self.num_prompts])]
        if not specs:
            raise ValueError(f"--dataset-path {self.path}: no entries")
        if len(specs) < self.num_prompts and self.oversample:  # vLLM's maybe_oversample_requests
            random.seed(self.seed)
            specs += [random.choice(specs) for _ in range(self.num_prompts - len(specs))]
        self._specs = [RequestSpec(index=i, prompt_len=s.prompt_len, output_len=s.output_len, recipe=s.recipe,
                                   images=s.images) for i, s in enumerate(specs)]

    def _read(self) -> list[dict]:
        return [{**item, "_line": n} for n, item in jsonl_objects(
            self.path, "'prompt' and 'image_files', or 'content' (vLLM's custom_image)",
            lambda item: ("prompt" in item and "image_files" in item) or "content" in item)]

    def _spec(self, i: int, item: dict, count: Callable[[str], int]) -> RequestSpec:
        where = f"{self.path}:{item['_line']}"
        if "content" in item:
            content = item["content"]
            if not isinstance(content, list) or not content:
                raise ValueError(f"{where}: 'content' must be a non-empty list of text and image parts")
            parts = [_part(p, self.client_side, where) for p in content]
            prompt = ContentPrompt(tuple(p.content_part() if isinstance(p, UrlImage) else p for p in parts))
            return RequestSpec(index=i, prompt_len=count(prompt.text), output_len=self.output_len, recipe=prompt)
        if not isinstance(item["prompt"], str):
            raise ValueError(f"{where}: 'prompt' must be a string")
        files = item["image_files"]
        if not isinstance(files, list) or not files:
            raise ValueError(f"{where}: 'image_files' must be a non-empty list")
        images = tuple(image(f, self.client_side, where) for f in files)
        return RequestSpec(index=i, prompt_len=count(item["prompt"]), output_len=self.output_len,
                           recipe=TextPrompt(item["prompt"]), images=images)

    def lengths(self) -> tuple[list[int], list[int]]:
        return [s.prompt_len for s in self._specs], [s.output_len for s in self._specs]

    def requests(self) -> list[RequestSpec]:
        return list(self._specs)

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        """The first requests again, their text made distinct (no prefix-cache hits on the measured ones)."""
        base = self._specs
        out = []
        for i in range(max(0, n)):
            s = base[i % len(base)]
            recipe = (ContentPrompt(({"type": "text", "text": f"{i} "}, *s.recipe.parts))
                      if isinstance(s.recipe, ContentPrompt) else TextPrompt(f"{i} " + s.recipe.text))
            out.append(RequestSpec(index=i, prompt_len=s.prompt_len, output_len=s.output_len, recipe=recipe,
                                   images=s.images))
        return out

    def image_count(self) -> int:
        return sum(len(s.images) + sum(p.get("type") == "image_url" for p in getattr(s.recipe, "parts", ()))
                   for s in self._specs)

    def params(self) -> dict[str, Any]:
        return {"source": str(self.path), "seed": self.seed, "output_len": self.output_len}

    def describe(self) -> dict[str, Any]:
        ins, outs = self.lengths()
        return {"kind": self.kind, **self.params(), "num_prompts": len(ins), "prompt_format": "text+images",
                "images": self.image_count()}

    to_dict = describe
