"""Produce and Fetch checked as Kafka 4.4 checks them (WRITE / READ on each
topic, WRITE on the transactional id of transactional batches): the in-process
broker and helpers of test_authorization.py."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode as E

from kcompat.broker.host.broker import Broker
from kcompat.security.acl import Operation as Op
from kcompat.security.acl import ResourceType as R
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch
from tests.unit.broker.test_authorization import (
    ALICE,
    BOB,
    S5,
    broker,
    call,
    grant,
    lit,
    scenario,
)

__all__ = ["broker"]  # the fixture


async def produce(broker: Broker, who: str, topics: tuple[str, ...], tid: str | None = None,
                  records: bytes | None = None) -> list[E]:
    m = codec.request_module(v.PRODUCE, 9)
    batch = records or encode_batch([(None, b"v", (), 1000)])
    r = await call(broker, who, v.PRODUCE, 9, transactional_id=tid, acks=-1, timeout=S5,
                   topic_data=tuple(m.TopicProduceData(name=t, partition_data=(
                       m.PartitionProduceData(index=0, records=batch),)) for t in topics))
    return [p.error_code for t in r.responses for p in t.partition_responses]


async def fetch(broker: Broker, who: str, topics: tuple[str, ...]) -> list[E]:
    m = codec.request_module(v.FETCH, 12)
    r = await call(broker, who, v.FETCH, 12, max_wait=datetime.timedelta(0), min_bytes=1,
                   max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                   topics=tuple(m.FetchTopic(topic=t, partitions=(m.FetchPartition(
                       partition=0, fetch_offset=0, partition_max_bytes=1 << 20),))
                       for t in topics), forgotten_topics_data=(), rack_id="")
    return [p.error_code for t in r.responses for p in t.partitions]


def test_produce_and_fetch(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, lit(R.TOPIC, "t", ALICE, Op.WRITE), lit(R.TOPIC, "t", ALICE, Op.READ))
        assert await produce(broker, ALICE, ("t", "secret")) == [
            E.none, E.topic_authorization_failed]
        assert await produce(broker, BOB, ("t",)) == [E.topic_authorization_failed]
        secret = broker.state.partition("secret", 0)
        assert secret is not None and secret.high_watermark == 0  # nothing written
        assert await fetch(broker, ALICE, ("t", "secret")) == [
            E.none, E.topic_authorization_failed]
        assert await fetch(broker, BOB, ("t",)) == [E.topic_authorization_failed]
    scenario(broker, body)


def test_transactional_produce_needs_write_on_the_transactional_id(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, lit(R.TOPIC, "t", BOB, Op.WRITE))
        batch = encode_batch([(None, b"v", (), 1000)], producer_id=5, producer_epoch=0,
                             base_sequence=0, transactional=True)
        codes = await produce(broker, BOB, ("t", "secret"), tid="app", records=batch)
        assert codes == [E.transactional_id_authorization_failed] * 2
        # no transactional id at all for transactional batches: the same
        codes = await produce(broker, BOB, ("t",), tid=None, records=batch)
        assert codes == [E.transactional_id_authorization_failed]
    scenario(broker, body)
