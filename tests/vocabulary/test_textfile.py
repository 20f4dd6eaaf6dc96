"""A text file as people hand it over (tuner/vocabulary/textfile.py): compressed by logrotate or docker,
saved as UTF-16 by Windows PowerShell 5, cut in the middle of its compressed stream."""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma

import pytest

from tuner.vocabulary.errors import UserError
from tuner.vocabulary.textfile import decode, read_text

TEXT = ("INFO 11-06 03:03:36 hpu_model_runner.py:119] VLLM_PROMPT_BS_BUCKET_MAX=256 (default:256)\n"
        "VLLM_DECODE_BS_BUCKET_MAX=16 (default:16) \u2014 ü\n") * 200
PACKED = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("kind", sorted(PACKED))
def test_a_compressed_file_is_read_by_its_content_not_its_name(tmp_path, kind):
    path = tmp_path / "server.log.1"  # logrotate's name says nothing of the packing
    path.write_bytes(PACKED[kind](TEXT.encode()))
    got = read_text(path)
    assert (got.text, got.compression, got.cut) == (TEXT, kind, False)


@pytest.mark.parametrize("kind", sorted(PACKED))
def test_a_cut_compressed_file_gives_what_it_holds_up_to_the_cut(kind):
    whole = PACKED[kind](TEXT.encode() * 5)
    got = decode(whole[: len(whole) * 2 // 3])
    assert got.cut and got.compression == kind
    assert (TEXT * 5).startswith(got.text.rsplit("\n", 1)[0])
    # gzip and xz stream out what they decompressed; bzip2 only whole blocks (900 kB), none whole here
    assert bool(got.text) == (kind != "bzip2")


def test_a_damaged_gzip_keeps_what_came_before_the_damage(monkeypatch):
    import tuner.vocabulary.textfile as T
    monkeypatch.setattr(T, "CHUNK", 4096)
    whole = gzip.compress(TEXT.encode() * 30, compresslevel=1)
    broken = whole[:len(whole) // 2] + b"\xff" * 64 + whole[len(whole) // 2 + 64:]
    got = decode(broken)
    # what came before the damage (the bytes just before the checksum fails may already be wrong)
    assert got.cut and len(got.text) > 5 * len(TEXT) and (TEXT * 30).startswith(got.text[:5 * len(TEXT)])


def test_concatenated_gzip_members_are_all_read():
    got = decode(gzip.compress(b"first\n") + gzip.compress(b"second\n") + b"\x00" * 8)
    assert got.lines() == ["first", "second"] and not got.cut


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
                                           ("utf-8", codecs.BOM_UTF8), ("utf-32-le", codecs.BOM_UTF32_LE)])
def test_a_byte_order_mark_names_the_encoding(encoding, bom):
    got = decode(bom + TEXT.encode(encoding))
    assert (got.text, got.encoding) == (TEXT, encoding)


def test_utf16_without_its_mark_is_recognised_by_its_zero_bytes():
    assert decode(TEXT.encode("utf-16-le")).text == TEXT
    assert decode(TEXT.encode("utf-16-be")).text == TEXT


def test_a_log_that_starts_with_binary_zeros_is_not_taken_for_utf16():
    got = decode(b"\x00" * 3000 + TEXT.encode())
    assert got.encoding == "utf-8" and got.text.endswith(TEXT)


def test_binary_junk_and_a_cut_character_are_replaced_not_fatal():
    got = decode(TEXT.encode() + b"\x00\xff junk \xe2\x82")
    assert got.text.startswith(TEXT) and got.encoding == "utf-8" and "\ufffd" in got.text


def test_zstd_is_refused_with_the_way_to_read_it(tmp_path):
    path = tmp_path / "server.log.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
    with pytest.raises(UserError, match=r"--log .*server.log.zst: zstd-compressed; unpack it first \(zstd -d\)"):
        read_text(path, "--log")


def test_a_missing_file_and_a_folder_are_named(tmp_path):
    with pytest.raises(UserError, match=r"--env-file .*nope.env: file not found"):
        read_text(tmp_path / "nope.env", "--env-file")
    with pytest.raises(UserError, match=r"--env-file .*: not a file"):
        read_text(tmp_path, "--env-file")
