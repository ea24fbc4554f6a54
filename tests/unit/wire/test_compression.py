"""kcompat.wire.compression against independent implementations of each framing.

Judges: the stdlib ``gzip`` module, kafka-python's xerial snappy framing, raw
snappy as librdkafka sends it, and (when installed) the ``lz4`` and
``zstandard`` bindings, which link the reference C libraries.
"""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.wire.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    XERIAL_HEADER,
    CompressionError,
    compress,
    decompress,
)

ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
COMPRESSED = [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]

# Compressible, and large enough to span several xerial chunks and lz4 blocks.
BIG = b"".join(b"record-%08d|" % i + bytes(range(i % 37)) for i in range(20000))


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("data", [b"", b"x", b"hello kafka " * 100, BIG])
def test_round_trip(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(ALL_CODECS), data=st.binary(max_size=5000))
def test_round_trip_property(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


# --------------------------------------------------------------------- gzip


def test_gzip_is_standard_gzip() -> None:
    assert gzip.decompress(compress(CODEC_GZIP, BIG)) == BIG
    assert decompress(CODEC_GZIP, gzip.compress(BIG)) == BIG
    assert decompress(CODEC_GZIP, gzip.compress(b"")) == b""


# ------------------------------------------------------------------- snappy


def test_snappy_compress_uses_xerial_framing() -> None:
    out = compress(CODEC_SNAPPY, BIG)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert XERIAL_HEADER == out[:16]
    # Walk the chunks independently: int32 length + raw snappy, 32 KiB input each.
    pos, parts = 16, []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        chunk = bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + size]))
        assert len(chunk) <= 32 * 1024
        parts.append(chunk)
        pos += 4 + size
    assert pos == len(out)
    assert len(parts) > 1
    assert b"".join(parts) == BIG


def test_snappy_kafka_python_xerial_is_read_and_reads_ours() -> None:
    from kafka import codec as kcodec

    if not kcodec.has_snappy():
        pytest.skip("python-snappy not installed for kafka-python")
    assert decompress(CODEC_SNAPPY, kcodec.snappy_encode(BIG)) == BIG
    assert kcodec.snappy_decode(compress(CODEC_SNAPPY, BIG)) == BIG


def test_snappy_hand_built_xerial_stream() -> None:
    pieces = [b"a" * 1000, b"bc" * 5000, b"tail"]
    stream = XERIAL_HEADER
    for piece in pieces:
        block = bytes(cramjam.snappy.compress_raw(piece))
        stream += struct.pack(">i", len(block)) + block
    assert decompress(CODEC_SNAPPY, stream) == b"".join(pieces)


def test_snappy_xerial_little_endian_versions_accepted() -> None:
    block = bytes(cramjam.snappy.compress_raw(b"payload"))
    stream = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(CODEC_SNAPPY, stream) == b"payload"


@pytest.mark.parametrize("data", [b"", b"z", b"librdkafka raw snappy " * 50, BIG])
def test_snappy_raw_block_as_librdkafka_sends(data: bytes) -> None:
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CODEC_SNAPPY, raw) == data


@pytest.mark.parametrize(
    "bad",
    [
        b"\x82SNAPPY\x00\x00\x00",  # truncated header
        XERIAL_HEADER + b"\x00\x00",  # truncated chunk length
        XERIAL_HEADER + struct.pack(">i", 100) + b"abc",  # chunk overruns
        XERIAL_HEADER + struct.pack(">i", -1),  # negative chunk
        XERIAL_HEADER + struct.pack(">i", 3) + b"\xff\xff\xff",  # bad raw block
        b"\xff\xff\xff\xff\xff\xff",  # bad raw snappy
    ],
)
def test_snappy_corrupt(bad: bytes) -> None:
    with pytest.raises(CompressionError):
        decompress(CODEC_SNAPPY, bad)


# ---------------------------------------------------------------------- lz4


def test_lz4_frame_has_independent_blocks() -> None:
    out = compress(CODEC_LZ4, BIG)
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # block independence: Kafka's Java reader needs it
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 0x7 == 4  # 64 KiB max block size, as Kafka writes


def test_lz4_reference_library() -> None:
    lz4frame = pytest.importorskip("lz4.frame")
    assert lz4frame.decompress(compress(CODEC_LZ4, BIG)) == BIG
    for linked in (False, True):
        for checksum in (False, True):
            frame = lz4frame.compress(BIG, block_linked=linked, content_checksum=checksum)
            assert decompress(CODEC_LZ4, frame) == BIG


def test_lz4_kafka_java_style_header() -> None:
    # FLG 0x60 (v1, independent blocks, no checksums), BD 0x40, HC 0x82: the
    # exact header the Java client writes; blocks follow as LE int32 size + data,
    # high bit set meaning "stored uncompressed", then a zero end mark.
    payload = b"kafka java lz4"
    frame = (
        b"\x04\x22\x4d\x18\x60\x40\x82"
        + struct.pack("<I", len(payload) | 0x80000000)
        + payload
        + b"\x00\x00\x00\x00"
    )
    assert decompress(CODEC_LZ4, frame) == payload


def test_lz4_corrupt() -> None:
    with pytest.raises(CompressionError):
        decompress(CODEC_LZ4, b"\x04\x22\x4d\x18garbage")
    with pytest.raises(CompressionError):
        decompress(CODEC_LZ4, compress(CODEC_LZ4, BIG)[:-20])


# --------------------------------------------------------------------- zstd


def test_zstd_reference_library() -> None:
    zstandard = pytest.importorskip("zstandard")
    assert zstandard.ZstdDecompressor().decompress(compress(CODEC_ZSTD, BIG)) == BIG
    assert decompress(CODEC_ZSTD, zstandard.ZstdCompressor(level=3).compress(BIG)) == BIG
    # A streamed frame without content size, as a streaming producer writes it.
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(BIG) + cobj.flush()
    assert decompress(CODEC_ZSTD, streamed) == BIG


def test_zstd_frame_magic() -> None:
    assert compress(CODEC_ZSTD, BIG)[:4] == b"\x28\xb5\x2f\xfd"


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_raises_compression_error(codec: int) -> None:
    with pytest.raises(CompressionError):
        decompress(codec, b"\x00\x01definitely not compressed data\xff" * 3)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_raises_compression_error(codec: int) -> None:
    good = compress(codec, BIG)
    with pytest.raises(CompressionError):
        decompress(codec, good[: len(good) // 2])


def test_unknown_codec() -> None:
    with pytest.raises(CompressionError):
        compress(5, b"x")
    with pytest.raises(CompressionError):
        decompress(7, b"x")
    assert issubclass(CompressionError, ValueError)
