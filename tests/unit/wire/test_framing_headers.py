"""Frame and header decoders: fuzzed with hypothesis, checked against kafka-python's encoder."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompat.wire.framing import FrameReader, FrameTooLarge, MalformedFrame, frame
from kcompat.wire.headers import HeaderError, parse_request_header, response_header


@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(min_value=1, max_value=64))
def test_frames_survive_any_split(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(frame(p) for p in payloads)
    reader = FrameReader(1 << 20)
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got.extend(reader.feed(stream[i : i + chunk]))
    assert got == payloads
    assert reader.buffered == 0


@given(st.lists(st.binary(max_size=300), max_size=8),
       st.lists(st.integers(min_value=0, max_value=400), max_size=12), st.booleans())
def test_frames_survive_irregular_splits(payloads: list[bytes], cuts: list[int],
                                         as_bytearray: bool) -> None:
    """Chunks ending anywhere (inside a size, at a frame boundary, several frames
    at once) give the same frames whether or not bytes were buffered before."""
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = FrameReader(1 << 20)
    got: list[bytes] = []
    for a, b in zip(points, points[1:], strict=False):
        chunk = stream[a:b]
        got.extend(reader.feed(bytearray(chunk) if as_bytearray else chunk))
    assert got == payloads
    assert all(type(f) is bytes for f in got)
    assert reader.buffered == 0


def test_oversized_frame_refused_before_buffering() -> None:
    reader = FrameReader(1000)
    with pytest.raises(FrameTooLarge):
        reader.feed(struct.pack(">i", 1001) + b"x")
    assert reader.buffered <= 5


def test_negative_size_is_malformed() -> None:
    with pytest.raises(MalformedFrame):
        FrameReader(1000).feed(struct.pack(">i", -5))


@given(st.binary(max_size=64), st.booleans())
def test_header_parser_raises_only_header_error(data: bytes, flexible: bool) -> None:
    try:
        header = parse_request_header(data, flexible)
    except HeaderError:
        return
    assert 8 <= header.size <= len(data)


def test_header_from_kafka_python_encoder() -> None:
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest[9](topics=None, allow_auto_topic_creation=True,
                                 include_cluster_authorized_operations=False,
                                 include_topic_authorized_operations=False)
    request.with_header(correlation_id=77, client_id="cid-é")
    encoded = bytes(request.encode(header=True))
    header = parse_request_header(encoded, flexible=True)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 9, 77)
    assert header.client_id == "cid-é"
    # v9 has a flexible header: one empty tagged-field section after the client id
    assert header.size == 8 + 2 + len("cid-é".encode()) + 1


def test_response_header_flexible_adds_tag_section() -> None:
    assert response_header(5, False) == b"\0\0\0\x05"
    assert response_header(5, True) == b"\0\0\0\x05\0"
