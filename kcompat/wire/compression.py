"""Kafka record-batch compression codecs (gzip, snappy, lz4, zstd) on top of cramjam.

Theory of operation
-------------------
A compressed RecordBatch v2 keeps its 61-byte header in the clear and compresses
only the records that follow it; attribute bits 0-2 name the codec. Each codec
has a Kafka-specific framing, and that framing -- not the bare algorithm -- is
what other clients expect to read:

* **gzip (1)**: a standard gzip (RFC 1952) member, as ``GZIPOutputStream`` writes.
* **snappy (2)**: the Java client (and kafka-python) use the *xerial* framing:
  a 16-byte header ``b"\\x82SNAPPY\\x00"`` + int32 version + int32 compatible
  version (both 1, big-endian), then chunks of big-endian int32 length followed
  by one raw snappy block (each compressing at most 32 KiB of input).
  librdkafka can also send a single raw snappy block with no framing at all.
  ``decompress`` accepts both (the magic header decides), ``compress`` always
  emits xerial framing, which every client can read.
* **lz4 (3)**: the LZ4 *frame* format. Kafka's Java reader decompresses each
  block on its own, so we write frames with *independent* blocks (64 KiB max
  block size, no content checksum); any valid frame is accepted on decompress.
* **zstd (4)**: a standard zstd frame (Kafka's default level 3 when compressing).

All failures to decode surface as :class:`CompressionError` (a ``ValueError``),
never as a cramjam-specific exception. This module is pure: bytes in, bytes out.
"""

from __future__ import annotations

import struct

import cramjam

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4

CODEC_NAMES: dict[int, str] = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # uncompressed bytes per xerial chunk (xerial's default)

DEFAULT_ZSTD_LEVEL = 3  # Kafka's default (KIP-390)

_I32 = struct.Struct(">i")


class CompressionError(ValueError):
    """Data that cannot be (de)compressed with the named codec."""


def compress(codec: int, data: bytes | memoryview, *, level: int | None = None) -> bytes:
    """Compress ``data`` with a Kafka codec id (0 returns the bytes unchanged).

    ``level`` is passed to gzip / zstd / lz4 when given; snappy has no level.
    """
    try:
        if codec == CODEC_NONE:
            return bytes(data)
        if codec == CODEC_GZIP:
            return bytes(cramjam.gzip.compress(bytes(data), level=level))
        if codec == CODEC_SNAPPY:
            return _xerial_compress(bytes(data))
        if codec == CODEC_LZ4:
            compressor = cramjam.lz4.Compressor(
                level=level, content_checksum=False, block_linked=False
            )
            compressor.compress(bytes(data))
            return bytes(compressor.finish())
        if codec == CODEC_ZSTD:
            zlevel = DEFAULT_ZSTD_LEVEL if level is None else level
            return bytes(cramjam.zstd.compress(bytes(data), level=zlevel))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own CompressionError / ValueError
        raise CompressionError(f"{_name(codec)} compression failed: {exc}") from exc
    raise CompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress ``data`` written with a Kafka codec id (0 returns it unchanged)."""
    try:
        if codec == CODEC_NONE:
            return bytes(data)
        if codec == CODEC_GZIP:
            return bytes(cramjam.gzip.decompress(bytes(data)))
        if codec == CODEC_SNAPPY:
            raw = bytes(data)
            if raw.startswith(XERIAL_MAGIC):
                return _xerial_decompress(raw)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == CODEC_LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == CODEC_ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise CompressionError(f"corrupt {_name(codec)} data: {exc}") from exc
    raise CompressionError(f"unknown compression codec {codec}")


def _name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"codec {codec}")


def _xerial_compress(data: bytes) -> bytes:
    out = bytearray(XERIAL_HEADER)
    view = memoryview(data)
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[start : start + XERIAL_BLOCK_SIZE])))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _xerial_decompress(data: bytes) -> bytes:
    if len(data) < len(XERIAL_HEADER):
        raise CompressionError("truncated xerial snappy header")
    # The version fields are not checked: every reader ignores them, and some
    # producers are known to write them little-endian.
    out = bytearray()
    pos = len(XERIAL_HEADER)
    view = memoryview(data)
    while pos < len(data):
        if len(data) - pos < 4:
            raise CompressionError("truncated xerial snappy chunk length")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CompressionError(f"xerial snappy chunk of {size} bytes overruns the data")
        out += cramjam.snappy.decompress_raw(bytes(view[pos : pos + size]))
        pos += size
    return bytes(out)
