"""The HTTP API's produce: keys placed as Kafka's Java producer places them,
and a body's records parsed or refused whole (``http.rest_records``)."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kcompat.broker.http.rest import RestError
from kcompat.broker.http.rest_records import murmur2, parse_records, partition_for_key


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
