"""The HTTP API's produce: keys placed as Kafka's Java producer places them,
and a body's records parsed or refused whole (``http.rest_records``)."""

from __future__ import annotations

import datetime
import json
import random
from typing import Any

import pytest
import trio
import trio.testing
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kio.schema.errors import ErrorCode

from kcompat.broker.http import rest_records
from kcompat.broker.http.rest import RestError
from kcompat.broker.http.rest_records import (
    OutRecord,
    murmur2,
    parse_records,
    partition_for_key,
    place,
    report_lines,
)
from kcompat.wire import codec
from kcompat.wire import versions as v

ZERO = datetime.timedelta(0)


def test_murmur2_is_kafkas() -> None:
    """kafka-python's murmur2 is a port of the Java client's ``Utils.murmur2``
    (it returns the hash as an unsigned 32-bit value)."""
    rng = random.Random(7)
    for size in [*range(0, 17), 100, 1000]:
        for _ in range(20):
            data = bytes(rng.randrange(256) for _ in range(size))
            assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF, data
    # Kafka's own published vector: Utils.murmur2("21".getBytes()) == -973932308
    assert murmur2(b"21") == -973932308
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_records_one_after_another() -> None:
    body = (b'{"value": {"type": "BINARY", "data": "aGk="}}\n'
            b'  {"key": {"type": "STRING", "data": "k"}, "value": {"type": "JSON", '
            b'"data": [1, {"a": null}]}, "partition_id": 2, "headers": '
            b'[{"name": "kc-delay-ms", "value": "MTAwMA=="}, {"name": "n", "value": null}], '
            b'"timestamp": "2024-01-02T03:04:05.006+01:00"}')
    first, second = parse_records(body)
    assert (first.partition, first.key, first.value) == (None, None, b"hi")
    assert (second.partition, second.key, second.value) == (2, b"k", b'[1,{"a":null}]')
    assert second.headers == [("kc-delay-ms", b"1000"), ("n", None)]
    assert second.timestamp == 1704161045006


@pytest.mark.parametrize(("body", "words"), [
    (b"", "required"),
    (b"[1]", "record 0: must be a JSON object"),
    (b'{"value": {"type": "BINARY", "data": "x"}}', "record 0: value.data is not valid base64"),
    (b'{} {"key": "raw"}', "record 1: key must be an object"),
    (b'{"value": {"type": "PROTOBUF", "data": {}}}', "schema registry"),
    (b'{"value": {"type": "XML", "data": "<a/>"}}', "BINARY, JSON or STRING"),
    (b'{"headers": {"a": "b"}}', "headers must be a list"),
    (b'{"headers": [{"value": "eA=="}]}', "string name"),
    (b'{"partition_id": -1}', "partition_id"),
    (b'{"partition_id": true}', "partition_id"),
    (b'{"timestamp": 5}', "ISO 8601"),
    (b'\xff', "UTF-8"),
])
def test_bad_bodies_are_refused_naming_the_record(body: bytes, words: str) -> None:
    with pytest.raises(RestError) as refused:
        parse_records(body)
    assert refused.value.status == 400 and words in refused.value.message


def _keyless(count: int, size: int = 100) -> list[OutRecord]:
    return [OutRecord(None, None, b"v" * size, [], 0, None, "BINARY") for _ in range(count)]


def test_keyless_records_of_a_body_fill_one_partition_then_the_next() -> None:
    """As the Java producer's sticky partitioner (KIP-480): one batch per body of
    small records, the next partition once ``batch.size`` (16 KiB) of values went
    to one; bodies take the partitions in turn; keys and chosen partitions keep
    their own."""
    small = _keyless(100)
    place(small, "t", 6)
    assert len({r.partition for r in small}) == 1
    big = _keyless(300)
    place(big, "t", 6)
    first = big[0].partition
    assert [r.partition for r in big] == ([first] * 164 + [(first + 1) % 6] * 136)
    assert first == (small[0].partition + 1) % 6  # the next body: the next partition
    mixed = [*_keyless(2), OutRecord(None, b"21", b"x", [], 0, "BINARY", "BINARY"),
             OutRecord(4, None, b"x", [], 0, None, "BINARY")]
    place(mixed, "t", 7)
    assert mixed[2].partition == partition_for_key(b"21", 7) and mixed[3].partition == 4
    assert mixed[0].partition == mixed[1].partition
    with pytest.raises(RestError) as missing:
        place([OutRecord(6, None, b"x", [], 0, None, "BINARY")], "t", 6)
    assert (missing.value.status, missing.value.code) == (404, 40403)


def test_reports_are_the_encoders_json() -> None:
    """A body's reports (successes by a template) are what the JSON encoder makes
    of REST Proxy's report objects."""
    ok = OutRecord(3, None, b"v" * 100, [], 1764547200123, None, "BINARY", offset=12)
    keyed = OutRecord(0, b"", None, [], 1764547200000, "STRING", None, offset=0)
    refused = OutRecord(1, None, b"x", [], 0, None, "BINARY",
                        error=(40403, 'no "such" partition'))
    records = [ok, keyed, refused]
    lines = report_lines(records, 'a"b', "t.1").split("\n")
    assert lines[-1] == ""
    assert lines[:-1] == [json.dumps(r.report('a"b', "t.1"), separators=(",", ":"))
                          for r in records]
    assert json.loads(lines[0]) == {
        "error_code": 200, "cluster_id": 'a"b', "topic_name": "t.1", "partition_id": 3,
        "offset": 12, "timestamp": "2025-12-01T00:00:00.123Z", "key": None,
        "value": {"type": "BINARY", "size": 100}}
    assert json.loads(lines[1])["key"] == {"type": "STRING", "size": 0}
    assert json.loads(lines[2]) == {"error_code": 40403, "message": 'no "such" partition'}


class _Broker:
    """What ``rest_records.send`` asks of the broker, answered as a cluster whose
    partition 0 moved from broker 1 to broker 2 after the caller looked it up."""

    def __init__(self) -> None:
        self.leader = 1  # what Metadata says
        self.moved_to = 2  # who leads now
        self.produced: list[tuple[int, tuple[int, ...]]] = []  # (node, partitions)
        self.metadata_calls = 0
        self.topic_error = ErrorCode.none  # the topic's error in Metadata
        self.cluster_id = "c"
        self.broker = self
        self.caller = type("Caller", (), {"principal": "User:ANONYMOUS"})()

    async def call(self, api_key: int, version: int, node: int = -1, size: int = 0,
                   **fields: object) -> object:
        if api_key == v.METADATA:
            self.metadata_calls += 1
            m = codec.response_module(v.METADATA, 12)
            part = m.MetadataResponsePartition(
                error_code=ErrorCode.none, partition_index=0, leader_id=self.leader,
                leader_epoch=1, replica_nodes=(1, 2), isr_nodes=(1, 2), offline_replicas=())
            topic = m.MetadataResponseTopic(error_code=self.topic_error, name="t", topic_id=None,
                                            is_internal=False, partitions=(part,),
                                            topic_authorized_operations=0)
            return codec.build(codec.response_class(v.METADATA, 12), throttle_time=ZERO,
                               brokers=(), cluster_id="c", controller_id=1, topics=(topic,),
                               cluster_authorized_operations=0, error_code=ErrorCode.none)
        assert api_key == v.PRODUCE
        data = fields["topic_data"][0].partition_data  # type: ignore[index]
        self.produced.append((node, tuple(d.index for d in data)))
        p = codec.response_module(v.PRODUCE, 9)
        code = ErrorCode.none if node == self.moved_to else ErrorCode.not_leader_or_follower
        parts = tuple(p.PartitionProduceResponse(
            index=d.index, error_code=code, base_offset=7 if code == ErrorCode.none else -1,
            log_append_time=None, log_start_offset=0, record_errors=(), error_message=None)
            for d in data)
        return p.ProduceResponse(responses=(p.TopicProduceResponse(name="t",
                                                                   partition_responses=parts),),
                                 throttle_time=ZERO)


def test_a_moved_leader_is_looked_up_again_and_the_records_sent_once_more() -> None:
    """As a producer refreshes its metadata after NOT_LEADER_OR_FOLLOWER and
    retries: the layout kept from the first send names broker 2; the leader
    moved to 3; broker 2 refuses, the layout is looked up again and the
    records go to broker 3, once. A leader still wrong is retried with a
    backoff until ``RETRY_FOR_S`` has passed (on trio's mock clock), then
    keeps its error."""
    broker = _Broker()
    ctx: Any = broker  # a Ctx as far as ``send`` asks
    rest_records._layouts.clear()
    broker.leader = broker.moved_to = 2
    first = [OutRecord(0, None, b"a", [], 0, None, "BINARY")]
    trio.run(rest_records.send, ctx, "t", first)
    assert (first[0].error, first[0].offset, broker.metadata_calls) == (None, 7, 1)
    broker.produced.clear()
    broker.leader = broker.moved_to = 3  # moved, within the kept layout's second
    moved = [OutRecord(0, None, b"b", [], 0, None, "BINARY"),
             OutRecord(0, None, b"c", [], 0, None, "BINARY")]
    trio.run(rest_records.send, ctx, "t", moved)
    assert broker.produced == [(2, (0,)), (3, (0,))] and broker.metadata_calls == 2
    assert [(r.error, r.offset) for r in moved] == [(None, 7), (None, 8)]
    broker.produced.clear()
    broker.moved_to = 1  # Metadata (3) stays behind the move: refused every time
    stuck = [OutRecord(0, None, b"d", [], 0, None, "BINARY")]
    took = _on_mock_clock(rest_records.send, ctx, "t", stuck)
    tries = len(broker.produced)
    # at once, then 0.1, 0.2, 0.4, 0.8, 1, 1, ... s apart, within 10 s
    assert broker.produced == [(3, (0,))] * tries and 10 <= tries <= 15, broker.produced
    assert broker.metadata_calls == 2 + tries - 1 and took <= rest_records.RETRY_FOR_S
    assert stuck[0].error is not None and stuck[0].error[0] == 50003


def _on_mock_clock(fn: Any, *args: Any) -> float:
    """``fn(*args)`` on a clock that jumps over sleeps; the time it took there."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    trio.run(fn, *args, clock=clock)
    return clock.current_time()


def test_records_wait_out_an_election_and_are_stored() -> None:
    """A leader being elected (Metadata says -1, the old leader refuses) for
    about 3 s after a broker died: the records are stored once it is known,
    not failed after one retry."""
    broker = _Broker()
    ctx: Any = broker
    rest_records._layouts.clear()
    broker.leader, broker.moved_to = 1, 2  # 1 died; 2 leads 3 s later
    tries: list[float] = []
    real_call = broker.call

    async def call(api_key: int, version: int, node: int = -1, size: int = 0,
                   **fields: object) -> object:
        if api_key == v.METADATA:
            broker.leader = -1 if trio.current_time() < 3 else 2
        else:
            tries.append(trio.current_time())
        return await real_call(api_key, version, node, size, **fields)

    broker.call = call  # type: ignore[method-assign]
    records = [OutRecord(0, None, b"a", [], 0, None, "BINARY")]
    took = _on_mock_clock(rest_records.send, ctx, "t", records)
    assert (records[0].error, records[0].offset) == (None, 7)
    assert 3 <= took < 5 and tries[-1] >= 3  # stored within a backoff of the election


def test_records_to_a_topic_whose_leaders_are_not_known_yet_wait_for_them() -> None:
    """A topic created a moment ago through another broker: this one's
    Metadata answers the topic LEADER_NOT_AVAILABLE until it hears the
    leaders (2 s here). The records are stored then, as a producer waits for
    its metadata, not refused at once; an unknown topic still is (404)."""
    broker = _Broker()
    ctx: Any = broker
    rest_records._layouts.clear()
    broker.leader = broker.moved_to = 2
    real_call = broker.call

    async def call(api_key: int, version: int, node: int = -1, size: int = 0,
                   **fields: object) -> object:
        if api_key == v.METADATA:
            broker.topic_error = (ErrorCode.leader_not_available if trio.current_time() < 2
                                  else ErrorCode.none)
        return await real_call(api_key, version, node, size, **fields)

    broker.call = call  # type: ignore[method-assign]
    records = [OutRecord(0, None, b"a", [], 0, None, "BINARY")]
    took = _on_mock_clock(rest_records.send, ctx, "t", records)
    assert (records[0].error, records[0].offset) == (None, 7)
    assert 2 <= took < 3 and broker.metadata_calls >= 3

    rest_records._layouts.clear()
    broker.call = real_call  # type: ignore[method-assign]
    broker.topic_error = ErrorCode.unknown_topic_or_partition
    calls_before = broker.metadata_calls
    with pytest.raises(RestError) as refused:
        _on_mock_clock(rest_records.send, ctx, "t", [OutRecord(0, None, b"b", [], 0, None,
                                                              "BINARY")])
    assert refused.value.status == 404 and broker.metadata_calls == calls_before + 1
