"""A text file as people hand it over: a log rotated and compressed (`server.log.1.gz`, docker's and
logrotate's `compress`), saved by Windows PowerShell 5's `>` (UTF-16 with a byte-order mark), cut in
the middle of a character or of the compressed stream, with binary junk inside. Read by its content,
never its name; what cannot be decoded is replaced, and a cut compressed file gives what it holds up
to the cut (`cut` says so).
"""

from __future__ import annotations

import bz2
import codecs
import lzma
import zlib
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

# magic bytes -> (name, a fresh decompressor); zlib's 16 + MAX_WBITS reads the gzip wrapper
_COMPRESSED = (
    (b"\x1f\x8b", "gzip", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)),
    (b"BZh", "bzip2", bz2.BZ2Decompressor),
    (b"\xfd7zXZ\x00", "xz", lzma.LZMADecompressor),
)
_ZSTD = b"\x28\xb5\x2f\xfd"
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))  # UTF-32 LE starts as UTF-16 LE's


@dataclass(frozen=True)
class Text:
    text: str
    compression: str | None = None  # "gzip", "bzip2", "xz"
    encoding: str = "utf-8"
    cut: bool = False  # the compressed stream ended early: the text is what it held up to there

    def lines(self) -> list[str]:
        return self.text.splitlines()


PACKED_SUFFIXES = (".gz", ".bz2", ".xz")  # a name's packing suffix: the format is the suffix before it


def read_text(path: Path | str, what: str = "", errors: str = "replace") -> Text:
    """A file's text, whatever it was packed or encoded as. `what`: how the error names it (an option);
    `errors`: "strict" for data whose every character counts (a dataset), UnicodeDecodeError then."""
    path = Path(path)
    name = f"{what} {path}" if what else str(path)
    if not path.is_file():
        raise UserError(f"{name}: " + ("not a file" if path.exists() else "file not found"))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{name}: cannot be read ({exc.strerror or exc})") from None
    return decode(data, name, errors)


def format_suffix(path: Path | str) -> str:
    """`trace.jsonl.gz` -> `.jsonl`: the suffix that says the format, under a packing suffix."""
    path = Path(path)
    if path.suffix.lower() in PACKED_SUFFIXES:
        path = path.with_suffix("")
    return path.suffix.lower()


def decode(data: bytes, name: str = "input", errors: str = "replace") -> Text:
    """Bytes (a file's, or standard input's) -> their text."""
    compression, cut = None, False
    if data.startswith(_ZSTD):
        raise UserError(f"{name}: zstd-compressed; unpack it first (zstd -d) or pipe it in (zstdcat FILE | ...)")
    for magic, kind, make in _COMPRESSED:
        if data.startswith(magic):
            data, cut = _unpack(data, magic, make)
            compression = kind
            break
    encoding = _encoding(data)
    text = data.decode(encoding, errors=errors)
    return Text(text.removeprefix("\ufeff"), compression, encoding, cut)


CHUNK = 1 << 20  # compressed bytes fed at a time: a damaged stream keeps what came before the damage


def _unpack(data: bytes, magic: bytes, make) -> tuple[bytes, bool]:
    """Every member of a compressed stream (gzip files may be concatenated); a cut or damaged one gives what
    it held before the damage. Bytes after the last member that start no other are left out."""
    out, rest = [], data
    while rest.startswith(magic):
        d, at = make(), 0
        try:
            while not d.eof and at < len(rest):
                out.append(d.decompress(rest[at:at + CHUNK]))
                at += CHUNK
        except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
            return b"".join(out), True
        if not d.eof:
            return b"".join(out), True
        rest = d.unused_data + rest[at:] if at < len(rest) else d.unused_data
        rest = rest.lstrip(b"\x00")  # gzip members may be followed by padding
    return b"".join(out), False


def _encoding(data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    head = data[:4096]
    half = len(head) // 2
    odd, even = head[1::2].count(0), head[0::2].count(0)  # UTF-16 without its mark: ASCII's high bytes, NUL
    if half >= 4 and odd > 0.4 * half and even < 0.05 * half:
        return "utf-16-le"
    if half >= 4 and even > 0.4 * half and odd < 0.05 * half:
        return "utf-16-be"
    return "utf-8"  # (binary junk with NULs on both sides stays UTF-8, replaced where it does not decode)
