"""Images of a chat request as the simulated server reads them: the size of each `image_url` part.

Only the size matters to the simulator (the image bucket, the encoder's cost and the image tokens), so
a data URL's header is read, not its pixels: a PNG's IHDR or a JPEG's start-of-frame marker. A local
file (`file://`) is read as vLLM reads it: only under `--allowed-local-media-path`, with vLLM's words
otherwise. A remote URL is refused with a clear message: the simulator fetches nothing.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from urllib.parse import unquote, urlparse


class ImageError(ValueError):
    """An image part the simulator cannot size (the message says which and why)."""


# JPEG start-of-frame markers (baseline, progressive, ...): they carry the height and width
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG or JPEG from its header."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 4 <= len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
                i += 1 if marker == 0xFF else 2
                continue
            length = struct.unpack(">H", data[i + 2:i + 4])[0]
            if marker in _SOF and i + 9 <= len(data):
                height, width = struct.unpack(">HH", data[i + 5:i + 9])
                return width, height
            i += 2 + length
    raise ImageError("not a PNG or JPEG image (the simulator reads those two formats)")


def _local_file(url: str, allowed: str | None) -> bytes:
    """The head of a file:// image as vLLM's MediaConnector allows it (its messages)."""
    if not allowed:
        raise ImageError("Cannot load local files without `--allowed-local-media-path`.")
    path = os.path.realpath(unquote(urlparse(url).path))
    root = os.path.realpath(allowed)
    if os.path.commonpath([path, root]) != root:
        raise ImageError(f"The file path {path} must be a subpath of `--allowed-local-media-path {allowed}`.")
    try:
        with open(path, "rb") as f:
            return f.read(65536)
    except OSError as exc:
        raise ImageError(f"image file {path}: {exc.strerror or exc}") from None


def part_size(part: dict, allowed: str | None = None) -> tuple[int, int]:
    """The size of one OpenAI `image_url` content part: a base64 data URL, or a local file under `allowed`."""
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    if not isinstance(url, str) or not url:
        raise ImageError("an image_url part without a url")
    if url.startswith("file://"):
        return image_size(_local_file(url, allowed))
    if not url.startswith("data:"):
        raise ImageError(f"image url {url[:40]!r}: the simulated server reads images from data URLs and local "
                         "files only (data:image/jpeg;base64,..., file://...)")
    head, _, body = url.partition(",")
    if ";base64" not in head:
        raise ImageError("an image data URL that is not base64-encoded")
    try:
        raw = base64.b64decode(body[:87384], validate=False)  # the first 64 KiB hold the header
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"an image data URL whose base64 cannot be read ({exc})") from None
    return image_size(raw)


def message_images(messages: list, allowed: str | None = None) -> list[tuple[int, int]]:
    """Sizes of every image part of a chat request's messages, in order (`allowed`: the server's
    --allowed-local-media-path)."""
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            out += [part_size(p, allowed) for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return out
