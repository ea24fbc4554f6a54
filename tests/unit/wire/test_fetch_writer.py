"""The hand-written FetchResponse writer is byte-identical to kio's, for every
version it serves (docs/architecture.md, Wire protocol: a hot writer must prove it)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kcompat.wire import codec
from kcompat.wire.fetch_writer import encode_fetch_response

FETCH = 1
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
I32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
ERRORS = st.sampled_from([ErrorCode.none, ErrorCode.offset_out_of_range,
                          ErrorCode.unknown_topic_or_partition, ErrorCode.fenced_leader_epoch])


@st.composite
def responses(draw: Any, version: int) -> Any:
    m = codec.response_module(FETCH, version)

    def partition() -> Any:
        aborted = draw(st.none() | st.lists(st.tuples(I64, I64), max_size=3))
        return codec.build(
            m.PartitionData, partition_index=draw(I32), error_code=draw(ERRORS),
            high_watermark=draw(I64), last_stable_offset=draw(I64),
            log_start_offset=draw(I64), preferred_read_replica=draw(I32),
            aborted_transactions=None if aborted is None else tuple(
                m.AbortedTransaction(producer_id=p, first_offset=f) for p, f in aborted),
            records=draw(st.none() | st.binary(max_size=300)),
        )

    topics = tuple(
        codec.build(
            m.FetchableTopicResponse, topic=draw(st.text(max_size=20)),
            topic_id=draw(st.none() | st.uuids() | st.just(uuid.UUID(int=0))),
            partitions=tuple(partition() for _ in range(draw(st.integers(0, 4)))))
        for _ in range(draw(st.integers(0, 3)))
    )
    return codec.build(
        codec.response_class(FETCH, version),
        throttle_time=datetime.timedelta(milliseconds=draw(st.integers(0, 10_000))),
        error_code=draw(ERRORS), session_id=draw(I32), responses=topics,
    )


@settings(max_examples=90, deadline=None)
@given(st.data(), st.integers(min_value=4, max_value=18), I32)
def test_identical_to_kio(data: Any, version: int, cid: int) -> None:
    body = data.draw(responses(version))
    chunks = encode_fetch_response(version, cid, body)
    assert chunks is not None
    assert b"".join(chunks) == codec.encode_response(FETCH, version, cid, body)


def test_records_are_not_copied() -> None:
    m = codec.response_module(FETCH, 12)
    records = b"x" * 10_000
    body = codec.build(codec.response_class(FETCH, 12), throttle_time=datetime.timedelta(0),
                       error_code=ErrorCode.none, session_id=0, responses=(
                           m.FetchableTopicResponse(topic="t", partitions=(codec.build(
                               m.PartitionData, partition_index=0, error_code=ErrorCode.none,
                               high_watermark=1, last_stable_offset=1, log_start_offset=0,
                               aborted_transactions=None, records=records),)),))
    chunks = encode_fetch_response(12, 1, body)
    assert chunks is not None and any(c is records for c in chunks)


def test_tagged_fields_fall_back_to_kio() -> None:
    m = codec.response_module(FETCH, 12)
    body = codec.build(codec.response_class(FETCH, 12), throttle_time=datetime.timedelta(0),
                       error_code=ErrorCode.none, session_id=0, responses=(
                           m.FetchableTopicResponse(topic="t", partitions=(codec.build(
                               m.PartitionData, partition_index=0, error_code=ErrorCode.none,
                               high_watermark=1, last_stable_offset=1, log_start_offset=0,
                               aborted_transactions=None, records=b"",
                               current_leader=m.LeaderIdAndEpoch(leader_id=2, leader_epoch=3)),
                           )),))
    assert encode_fetch_response(12, 1, body) is None


def test_node_endpoints_fall_back_to_kio() -> None:
    """v16+: a response naming leaders' endpoints (KIP-951) is kio's to write."""
    m = codec.response_module(FETCH, 16)
    body = codec.build(codec.response_class(FETCH, 16), throttle_time=datetime.timedelta(0),
                       error_code=ErrorCode.none, session_id=0, responses=(),
                       node_endpoints=(m.NodeEndpoint(node_id=2, host="h", port=1),))
    assert encode_fetch_response(16, 1, body) is None
    empty = codec.build(codec.response_class(FETCH, 16), throttle_time=datetime.timedelta(0),
                        error_code=ErrorCode.none, session_id=0, responses=())
    assert encode_fetch_response(16, 1, empty) is not None
