"""The hand-written ProduceResponse writer is byte-identical to kio's, for every
version it serves (docs/architecture.md, Wire protocol: a hot writer must prove it)."""

from __future__ import annotations

import datetime
import io
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kcompat.wire import codec
from kcompat.wire.headers import response_header
from kcompat.wire.produce_writer import encode_produce_response

PRODUCE = 0
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
I32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
ERRORS = st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower,
                          ErrorCode.invalid_record, ErrorCode.kafka_storage_error,
                          ErrorCode.duplicate_sequence_number])
TEXT = st.none() | st.text(max_size=30)
APPEND_TIMES = st.none() | st.integers(0, 4_000_000_000_000).map(
    lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))


def kio_bytes(version: int, cid: int, body: Any) -> bytes:
    """What kio's generic writer makes of ``body`` (``codec.encode_response``
    itself now hands Produce to the hand-written writer)."""
    buf = io.BytesIO()
    buf.write(response_header(cid, version >= 9))
    codec._writer(type(body))(buf, body)
    payload = buf.getvalue()
    return len(payload).to_bytes(4, "big") + payload


@st.composite
def responses(draw: Any, version: int) -> Any:
    m = codec.response_module(PRODUCE, version)

    def partition() -> Any:
        errors = draw(st.lists(st.tuples(I32, TEXT), max_size=3))
        return codec.build(
            m.PartitionProduceResponse, index=draw(I32), error_code=draw(ERRORS),
            base_offset=draw(I64), log_append_time=draw(APPEND_TIMES),
            log_start_offset=draw(I64), error_message=draw(TEXT),
            record_errors=tuple(codec.build(m.BatchIndexAndErrorMessage, batch_index=i,
                                            batch_index_error_message=e)
                                for i, e in errors) if version >= 8 else (),
        )

    topics = tuple(
        codec.build(m.TopicProduceResponse, name=draw(st.text(max_size=20)),
                    topic_id=draw(st.none() | st.uuids() | st.just(uuid.UUID(int=0))),
                    partition_responses=tuple(partition() for _ in range(draw(st.integers(0, 4)))))
        for _ in range(draw(st.integers(0, 3)))
    )
    return codec.build(codec.response_class(PRODUCE, version), responses=topics,
                       throttle_time=datetime.timedelta(milliseconds=draw(st.integers(0, 10**6))))


@settings(max_examples=110, deadline=None)
@given(st.data(), st.integers(min_value=3, max_value=13), I32)
def test_identical_to_kio(data: Any, version: int, cid: int) -> None:
    body = data.draw(responses(version))
    written = encode_produce_response(version, cid, body)
    assert written is not None
    assert written == kio_bytes(version, cid, body)
    assert codec.encode_response(PRODUCE, version, cid, body) == written


def _one_partition(version: int, **extra: Any) -> Any:
    m = codec.response_module(PRODUCE, version)
    part = codec.build(m.PartitionProduceResponse, index=0,
                       error_code=ErrorCode.not_leader_or_follower, base_offset=-1,
                       log_append_time=None, log_start_offset=-1, record_errors=(),
                       error_message=None, **extra)
    return m, codec.build(m.TopicProduceResponse, name="t", topic_id=None,
                          partition_responses=(part,))


def test_a_current_leader_falls_back_to_kio() -> None:
    """v10+: a partition naming its current leader (KIP-951) is kio's to write."""
    m, topic = _one_partition(10)
    _m, led = _one_partition(10, current_leader=m.LeaderIdAndEpoch(leader_id=2,
                                                                    leader_epoch=3))
    cls = codec.response_class(PRODUCE, 10)
    plain = codec.build(cls, responses=(topic,), throttle_time=datetime.timedelta(0))
    assert encode_produce_response(10, 1, plain) is not None
    body = codec.build(cls, responses=(led,), throttle_time=datetime.timedelta(0))
    assert encode_produce_response(10, 1, body) is None
    assert codec.encode_response(PRODUCE, 10, 1, body) == kio_bytes(10, 1, body)


def test_node_endpoints_fall_back_to_kio() -> None:
    m, topic = _one_partition(12)
    body = codec.build(codec.response_class(PRODUCE, 12), responses=(topic,),
                       throttle_time=datetime.timedelta(0),
                       node_endpoints=(m.NodeEndpoint(node_id=2, host="h", port=1),))
    assert encode_produce_response(12, 1, body) is None
    assert codec.encode_response(PRODUCE, 12, 1, body) == kio_bytes(12, 1, body)
