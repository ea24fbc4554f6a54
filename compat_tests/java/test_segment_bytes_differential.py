"""Differential: ``segment.bytes`` and ``internal.segment.bytes`` on Apache
Kafka 4.4 and on kcompat (FINDINGS LC2).

Kafka 4 refuses a topic ``segment.bytes`` below 1 MiB (KAFKA-16368) and a
broker ``log.segment.bytes`` below it; small segments come only from the
internal topic key ``internal.segment.bytes`` (any int, no lower bound), which
wins over ``segment.bytes`` where set and is listed by CreateTopics and
DescribeConfigs only where a topic sets it. Both brokers are asked the same
things through kafka-python's protocol classes (an independent codec):
CreateTopics v5 with good and bad values (error code, message, the configs it
lists back), DescribeConfigs of topics with and without the internal key (all
keys and by name: value, source, read-only, type, synonyms), AlterConfigs and
IncrementalAlterConfigs of topics (refusals, SET, DELETE, a whole legacy
replacement) and of the broker (``log.segment.bytes`` below 1 MiB; the
internal key at the broker level, which Kafka accepts as an unknown key).
Then the same single-record batches go to topics with
``internal.segment.bytes`` 2048 (and ``segment.bytes`` 1 MiB) and 0: both
brokers roll their segments at the same offsets, read from their data dirs.

Not here (a reference with its own server.properties costs ~15 s): Kafka 4.4
with ``offsets.topic.segment.bytes=4096`` never creates ``__consumer_offsets``
(auto topic creation fails with INVALID_CONFIG, groups see
COORDINATOR_NOT_AVAILABLE); kcompat does the same (checked by hand, FINDINGS LC2).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)

from compat_tests._broker import Broker, running, unique_topic
from compat_tests._compaction import segment_bases
from compat_tests.java._differential import (
    BROKER,
    TOPIC,
    alter,
    call,
    incremental_alter,
    on_both,
    produce_batch,
    record_batch,
)
from compat_tests.java.kafka_reference import KafkaReference
from tests.integration._raw import RawConnection

SET, DELETE = 0, 1
INTERNAL = "internal.segment.bytes"


@pytest.fixture(scope="module")
def kcompat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("segment-bytes")))


@pytest.fixture(scope="module")
def both(kafka_reference: KafkaReference, kcompat_broker: Broker) -> dict[str, Any]:
    return {"kafka": kafka_reference, "kcompat": kcompat_broker}


def _on_both(both: dict[str, Any], fn: Any, *args: Any) -> dict[str, Any]:
    return on_both({name: b.bootstrap for name, b in both.items()}, fn, *args)


def _create(bootstrap: str, topic: str, configs: dict[str, str], validate_only: bool = False
            ) -> tuple[int, str | None, dict[str, tuple[str, int, bool]]]:
    """CreateTopics v5: (error code, message, the segment keys it lists back)."""
    R = CreateTopicsRequest
    req = R(version=5, timeout_ms=10000, validate_only=validate_only, topics=[R.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, assignments=[],
        configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                 for k, v in configs.items()])])
    t = call(bootstrap, req, CreateTopicsResponse[5]).topics[0]
    listed = {c.name: (c.value, c.config_source, c.read_only) for c in t.configs or ()
              if "segment" in c.name}
    return t.error_code, t.error_message, listed


def _describe(bootstrap: str, name: str, kind: int = TOPIC, keys: list[str] | None = None
              ) -> dict[str, tuple[Any, ...]]:
    """The segment keys of a DescribeConfigs v4 with synonyms (documentation
    aside: kcompat does not carry Kafka's prose)."""
    R = DescribeConfigsRequest
    req = R(version=4, include_synonyms=True, include_documentation=False, resources=[
        R.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                  configuration_keys=keys)])
    result = call(bootstrap, req, DescribeConfigsResponse[4]).results[0]
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_source, c.read_only, c.config_type,
                     [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs if "segment.bytes" in c.name}


def _incremental(bootstrap: str, name: str, ops: list[tuple[str, int, str | None]],
                 validate_only: bool = False, kind: int = TOPIC) -> tuple[int, str | None]:
    return incremental_alter(bootstrap, name, ops, validate_only, kind)


def _alter(bootstrap: str, name: str, configs: dict[str, str], validate_only: bool = False,
           kind: int = TOPIC) -> tuple[int, str | None]:
    return alter(bootstrap, name, configs.items(), validate_only, kind)


def _described_alike(both: dict[str, Any], topic: str, keys: list[str] | None,
                     expect: dict[str, str]) -> dict[str, tuple[Any, ...]]:
    """Kafka applies a committed change asynchronously: until both list the
    ``expect``ed values of the segment keys; then both must list the same."""
    deadline = time.monotonic() + 15
    while True:
        seen = _on_both(both, _describe, topic, TOPIC, keys)
        if all({k: v[0] for k, v in s.items()} == expect for s in seen.values()):
            break
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)
    assert seen["kcompat"] == seen["kafka"]
    return dict(seen["kafka"])


CREATES = [
    {"segment.bytes": "1048575"},
    {"segment.bytes": "14"},
    {"segment.bytes": "1048576"},
    {INTERNAL: "2048"},
    {INTERNAL: "0"},
    {INTERNAL: "-1"},
    {INTERNAL: "abc"},
    {INTERNAL: "2147483648"},
    {INTERNAL: "2048", "segment.bytes": "1000"},
    {INTERNAL: "2048", "segment.bytes": "1048576"},
]


@pytest.mark.parametrize("configs", CREATES, ids=[",".join(f"{k}={v}" for k, v in c.items())
                                                  for c in CREATES])
def test_create_topics_answers_alike(both: dict[str, Any], configs: dict[str, str]) -> None:
    answers = _on_both(both, _create, unique_topic("seg"), configs)
    assert answers["kcompat"] == answers["kafka"]


def test_create_refuses_below_one_mib_in_kafkas_words(both: dict[str, Any]) -> None:
    """The differential above, pinned: what both answer is Kafka's refusal."""
    answers = _on_both(both, _create, unique_topic("seg"), {"segment.bytes": "1048575"}, True)
    refused = (40, "Invalid value 1048575 for configuration segment.bytes: "
                   "Value must be at least 1048576", {})
    assert answers["kafka"] == answers["kcompat"] == refused


def test_describe_lists_the_internal_key_only_where_set(both: dict[str, Any]) -> None:
    small, plain = unique_topic("seg-small"), unique_topic("seg-plain")
    for topic, configs in ((small, {INTERNAL: "2048"}), (plain, {})):
        created = _on_both(both, _create, topic, configs)
        assert {a[0] for a in created.values()} == {0}, created
    every = _described_alike(both, small, None,
                             {"segment.bytes": "1073741824", INTERNAL: "2048"})
    assert every[INTERNAL] == ("2048", 1, False, 3, [(INTERNAL, "2048", 1)])
    _described_alike(both, small, [INTERNAL, "segment.bytes"],
                     {"segment.bytes": "1073741824", INTERNAL: "2048"})
    _described_alike(both, plain, None, {"segment.bytes": "1073741824"})
    _described_alike(both, plain, [INTERNAL], {})


def test_alter_configs_answer_and_describe_alike(both: dict[str, Any]) -> None:
    topic = unique_topic("seg-alter")
    created = _on_both(both, _create, topic, {"segment.bytes": "1048576"})
    assert created["kcompat"] == created["kafka"] and created["kafka"][0] == 0
    refused = (40, "Invalid value 1048575 for configuration segment.bytes: "
                   "Value must be at least 1048576")
    steps: list[tuple[Any, tuple[Any, ...], dict[str, str]]] = [
        (_alter, (topic, {"segment.bytes": "1048575"}, True), {"segment.bytes": "1048576"}),
        (_incremental, (topic, [("segment.bytes", SET, "1048575")], True),
         {"segment.bytes": "1048576"}),
        (_incremental, (topic, [(INTERNAL, SET, "abc")]), {"segment.bytes": "1048576"}),
        (_incremental, (topic, [(INTERNAL, SET, "4096")]),
         {"segment.bytes": "1048576", INTERNAL: "4096"}),
        # the legacy AlterConfigs replaces every override: segment.bytes back to its default
        (_alter, (topic, {INTERNAL: "8192"}), {"segment.bytes": "1073741824", INTERNAL: "8192"}),
        (_incremental, (topic, [(INTERNAL, DELETE, None)]), {"segment.bytes": "1073741824"}),
    ]
    for fn, args, expect in steps:
        answers = _on_both(both, fn, *args)
        assert answers["kcompat"] == answers["kafka"], (fn.__name__, args, answers)
        _described_alike(both, topic, None, expect)
    assert _on_both(both, _alter, topic, {"segment.bytes": "1048575"}, True)["kafka"] == refused


BROKER_ASKS: list[tuple[Any, tuple[Any, ...]]] = [
    (_incremental, ("", [("log.segment.bytes", SET, "1048575")], True, BROKER)),
    (_incremental, ("1", [("log.segment.bytes", SET, "1048575")], True, BROKER)),
    (_incremental, ("", [("log.segment.bytes", SET, "1048576")], True, BROKER)),
    (_alter, ("", {"log.segment.bytes": "1048575"}, True, BROKER)),
    (_incremental, ("", [(INTERNAL, SET, "2048")], True, BROKER)),
    (_incremental, ("1", [(INTERNAL, SET, "2048")], True, BROKER)),
    (_alter, ("1", {INTERNAL: "2048"}, True, BROKER)),
]


def test_broker_level_answers_alike(both: dict[str, Any]) -> None:
    for fn, args in BROKER_ASKS:
        answers = _on_both(both, fn, *args)
        assert answers["kcompat"] == answers["kafka"], (fn.__name__, args, answers)
    fn, args = BROKER_ASKS[0]
    assert _on_both(both, fn, *args)["kafka"] == (
        42, "Invalid value 1048575 for configuration log.segment.bytes: "
            "Value must be at least 1048576")
    described = _on_both(both, _describe, "1", BROKER, ["log.segment.bytes", INTERNAL])
    assert described["kcompat"] == described["kafka"]
    assert set(described["kafka"]) == {"log.segment.bytes"}


def _produce(bootstrap: str, topic: str, count: int, value_size: int = 300
             ) -> list[tuple[int, str | None, int]]:
    """``count`` single-record batches of the same size (raw Produce v9, so both
    logs get the same bytes): (error code, message, base offset) of each."""
    conn = RawConnection(bootstrap, timeout=20)
    answers = []
    try:
        for i in range(count):
            # a timestamp a day old: segments roll by record time, not the clock
            batch = record_batch([(b"k%04d" % i, b"v" * value_size)],
                                 int(time.time() * 1000) - 86_400_000)
            part = produce_batch(conn, topic, batch)
            answers.append((part.error_code, part.error_message, part.base_offset))
    finally:
        conn.close()
    return answers


def _created(both: dict[str, Any], configs: dict[str, str]) -> str:
    topic = unique_topic("seg-roll")
    created = _on_both(both, _create, topic, configs)
    assert {a[0] for a in created.values()} == {0}, created
    return topic


def test_segments_roll_at_the_same_offsets(both: dict[str, Any]) -> None:
    """internal.segment.bytes sizes the segments, not segment.bytes: the same
    30 ~370-byte batches roll both logs at the same offsets, five to a 2 KiB
    segment; a batch larger than the segment is refused alike."""
    topic = _created(both, {INTERNAL: "2048", "segment.bytes": "1048576"})
    written = _on_both(both, _produce, topic, 30)
    assert written["kcompat"] == written["kafka"] == [(0, None, i) for i in range(30)]
    bases = {name: segment_bases(b.data_dir / f"{topic}-0") for name, b in both.items()}
    assert bases["kcompat"] == bases["kafka"] == list(range(0, 30, 5))
    too_big = _on_both(both, _produce, topic, 1, 3000)
    assert too_big["kcompat"] == too_big["kafka"]
    assert too_big["kafka"][0][0] == 18, too_big  # RECORD_LIST_TOO_LARGE


@pytest.mark.parametrize("size", ["0", "-1"])
def test_no_batch_fits_a_segment_of_zero(both: dict[str, Any], size: str) -> None:
    topic = _created(both, {INTERNAL: size})
    answers = _on_both(both, _produce, topic, 2)
    assert answers["kcompat"] == answers["kafka"]
    assert {a[0] for a in answers["kafka"]} == {18}, answers
