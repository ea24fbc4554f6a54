"""Schemas kio 0.6.5 lacks (``kcompat.wire.kio_extra``) are found and read by the
codec like kio's own: an ApiVersions v5 request as Java 4.4 writes it (KIP-1242
cluster id and node id after v3's fields), answered with v4's response entity;
DeleteGroups v3 with its error message, written byte by byte as the schema says."""

from __future__ import annotations

import datetime
import struct

from kio.schema.errors import ErrorCode

from kcompat.wire import codec
from kcompat.wire.headers import parse_request_header

API_VERSIONS = 18


def _frame(cluster_id: bytes | None, node_id: int) -> bytes:
    header = struct.pack(">hhih", API_VERSIONS, 5, 9, 4) + b"java" + b"\x00"
    cluster = b"\x00" if cluster_id is None else bytes([len(cluster_id) + 1]) + cluster_id
    body = b"\x06kafka" + b"\x044.4" + cluster + struct.pack(">i", node_id) + b"\x00"
    return header + body


def test_api_versions_v5_request_is_read() -> None:
    assert codec.is_flexible(API_VERSIONS, 5)
    for cluster_id, node_id in ((b"AAAAAAAAAAAAAAAAAAAAAA", 3), (None, -1)):
        frame = _frame(cluster_id, node_id)
        header = parse_request_header(frame, flexible=True)
        request = codec.read_request(API_VERSIONS, 5, frame, header.size)
        assert (request.client_software_name, request.client_software_version) == ("kafka", "4.4")
        assert request.cluster_id == (cluster_id.decode() if cluster_id else None)
        assert request.node_id == node_id


def test_api_versions_v5_answers_with_v4s_shape() -> None:
    assert codec.response_class(API_VERSIONS, 5) is codec.response_class(API_VERSIONS, 4)


def test_delete_groups_v3_round_trip() -> None:
    """v2's request read at v3; the answer carries the per-group error message."""
    header = struct.pack(">hhih", 42, 3, 5, 1) + b"c" + b"\x00"
    frame = header + b"\x03\x02g\x02h" + b"\x00"  # two group names, no tags
    request = codec.read_request(42, 3, frame, parse_request_header(frame, True).size)
    assert request.groups_names == ("g", "h")
    module = codec.response_module(42, 3)
    body = codec.build(codec.response_class(42, 3), throttle_time=datetime.timedelta(0),
                       results=(module.DeletableGroupResult(group_id="g", error_code=ErrorCode(69),
                                                            error_message="gone"),))
    out = codec.encode_response(42, 3, 5, body)
    # size, correlation id, header tags, throttle, 1 result: "g", error 69, "gone", tags x2
    assert out[4:] == (struct.pack(">ib", 5, 0) + struct.pack(">i", 0) + b"\x02" + b"\x02g"
                       + struct.pack(">h", 69) + b"\x05gone" + b"\x00" + b"\x00")
