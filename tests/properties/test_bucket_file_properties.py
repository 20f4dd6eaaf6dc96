"""vllm-gaudi bucket files (`VLLM_BUCKETING_FROM_FILE`, tuner/space/fit/bucketfile.py): any text is read into
buckets or refused with a BucketFileError naming the file and line; the engine's model of the server's
reading takes, skips or stops on it with a BucketConfigError."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tuner.space.fit.bucketfile import BucketFileError, format_bucket_file, parse_bucket_file, read_bucket_file

SMALL = st.integers(-2, 300)
ELEMENT = (SMALL.map(str) | st.lists(SMALL, max_size=4).map(str)
           | st.tuples(SMALL, SMALL, st.integers(-3, 50)).map(lambda t: f"range({t[0]}, {t[1]}, {t[2]})")
           | st.sampled_from(["2.7", "True", "None", "'a'", "[", "range(1,", "1e9", "-0", "[[1]]", "{1}", "0x10"]))
LINES = (st.lists(ELEMENT, min_size=0, max_size=4).map(lambda xs: "(" + ", ".join(xs) + ")")
         | st.text(max_size=30) | st.sampled_from(["# comment", "", "  ", "(1, 1, 1)", "((1, 2), 3, 4)"]))
FILES = st.lists(LINES, max_size=6).map("\n".join)


@given(FILES)
def test_strict_reading_takes_or_refuses_every_line(text):
    try:
        prompt, decode = parse_bucket_file(text, "b.txt")
    except BucketFileError as exc:
        assert str(exc).startswith("b.txt:")
        return
    assert all(len(b) == 3 and b[1] != 1 for b in prompt) and all(b[1] == 1 for b in decode)


@given(FILES, st.booleans())
def test_the_servers_reading_takes_skips_or_stops_with_our_error(tmp_path_factory, text, capped):
    from tuner.buckets import BucketConfigError
    from tuner.buckets.vllm_gaudi.bucket_file import read_bucket_file as server_reading

    path = tmp_path_factory.mktemp("bucketfile") / "b.txt"
    path.write_text(text)
    try:
        prompt, decode = server_reading(str(path), capped)
    except BucketConfigError as exc:  # a line the release dies on, named
        assert "VLLM_BUCKETING_FROM_FILE" in str(exc) or "bucket-file line" in str(exc)
        return
    assert all(b[1] != 1 for b in prompt) and all(b[1] == 1 for b in decode)


def test_a_line_of_huge_ranges_is_refused_not_expanded():
    line = "(range(0, 10000), range(0, 10000), range(0, 10000))\n"
    try:
        parse_bucket_file(line, "b.txt")
    except BucketFileError as exc:
        assert "b.txt:1" in str(exc) and "buckets" in str(exc)
    else:
        raise AssertionError("a line of 10^12 buckets was accepted")


@given(st.lists(st.integers(1, 64), min_size=1, max_size=3), st.lists(st.integers(2, 4096), min_size=1, max_size=4),
       st.dictionaries(st.integers(1, 64), st.lists(st.integers(0, 512), min_size=1, max_size=4), max_size=3))
def test_what_we_write_reads_back(prompt_bs, query, decode):
    text = format_bucket_file(prompt_bs, query, list(decode.items()), ["header"])
    prompt, dec = parse_bucket_file(text, "b.txt")
    assert set(prompt) == {(b, q, 0) for b in prompt_bs for q in query}
    assert set(dec) == {(bs, 1, c) for bs, blocks in decode.items() for c in blocks}


@given(st.binary(max_size=200))
def test_any_bytes_on_disk(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bucketfile") / "buckets.txt"
    path.write_bytes(data)
    try:
        read_bucket_file(path)
    except BucketFileError as exc:
        assert str(path) in str(exc)
