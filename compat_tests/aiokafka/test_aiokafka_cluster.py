"""aiokafka 0.14 against a 3-broker kcompat cluster of real processes: an idempotent
acks='all' producer and a consumer group member carry on across a kill -9 of a
broker that is not the group coordinator (but leads data partitions)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, diagnostics
from compat_tests._groups import committed_offsets, end_offsets

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, extra_args=("--set", "offsets.topic.num.partitions=3",
                                      "--set", "group.initial.rebalance.delay.ms=0"))
    try:
        yield c.start()
    finally:
        c.close()


def _coordinator(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return admin.describe_consumer_groups([group])[group].result(timeout=20).coordinator.id


def test_group_and_idempotent_producer_across_non_coordinator_kill(cluster: Cluster) -> None:
    """600 records acknowledged (acks=all, idempotent); a group member consumes and
    commits about half; a broker that is not the group coordinator and leads at least
    one partition of the topic is killed -9; the same producer gets 600 more
    acknowledged; the member consumes everything exactly once at the acknowledged
    offsets without leaving its generation, and its committed offsets end at the log
    end offsets."""
    with diagnostics(cluster):
        topic = unique_topic("aio-cluster")
        group = unique_topic("aio-group")
        cluster.create_topic(topic, PARTITIONS, 3)
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        acked: dict[bytes, tuple[int, int]] = {}
        consumed: list[tuple[int, int, bytes]] = []
        info: dict[str, object] = {}

        async def produce(producer: AIOKafkaProducer, tag: str, n: int) -> None:
            values = [f"{tag}-{i:05d}".encode() for i in range(n)]
            futures = [await producer.send(topic, v, partition=i % PARTITIONS)
                       for i, v in enumerate(values)]
            for v, md in zip(values, await asyncio.gather(*futures), strict=True):
                acked[v] = (md.partition, md.offset)

        async def consume_until(consumer: AIOKafkaConsumer, pred, timeout: float,  # type: ignore[no-untyped-def]
                                what: str) -> None:
            deadline = time.monotonic() + timeout
            while not pred():
                assert time.monotonic() < deadline, f"{what}: consumed {len(consumed)}"
                batches = await consumer.getmany(timeout_ms=500)
                for tp, records in batches.items():
                    consumed.extend((tp.partition, r.offset, r.value) for r in records)
                if batches:
                    await consumer.commit()

        async def main() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                        enable_idempotence=True, linger_ms=5,
                                        request_timeout_ms=15000)
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap,
                                        group_id=group, enable_auto_commit=False,
                                        auto_offset_reset="earliest", session_timeout_ms=10000,
                                        heartbeat_interval_ms=1000, metadata_max_age_ms=5000)
            await producer.start()
            try:
                await produce(producer, "a", 600)
                await consumer.start()
                try:
                    await consume_until(consumer, lambda: len(consumed) >= 300, 60,
                                        "first 300 records")
                    generation = consumer._coordinator.generation
                    coordinator = await asyncio.to_thread(_coordinator, cluster.bootstrap, group)
                    leaders = await asyncio.to_thread(cluster.leaders, topic)
                    candidates = [n for n in cluster.brokers if n != coordinator]
                    victim = max(candidates, key=lambda n: list(leaders.values()).count(n))
                    assert victim in leaders.values(), (coordinator, leaders)
                    cluster.brokers[victim].kill()
                    killed_at = time.monotonic()
                    info.update(coordinator=coordinator, victim=victim, leaders=leaders,
                                consumed_before=len(consumed))
                    await produce(producer, "b", 600)
                    info["produce_s"] = time.monotonic() - killed_at
                    await consume_until(consumer, lambda: {v for _p, _o, v in consumed} >=
                                        set(acked), 60, "all 1200 records")
                    info["consume_s"] = time.monotonic() - killed_at
                    ends = await consumer.end_offsets(tps)
                    committed = {tp.partition: await consumer.committed(tp) for tp in tps}
                    info.update(ends={tp.partition: o for tp, o in ends.items()},
                                committed=committed,
                                generation=(generation, consumer._coordinator.generation))
                finally:
                    await consumer.stop()
            finally:
                await producer.stop()

        asyncio.run(asyncio.wait_for(main(), 100))
        print(info)
        assert len(acked) == 1200
        by_offset = {(p, o): v for p, o, v in consumed}
        assert len(by_offset) == len(consumed), \
            f"{len(consumed) - len(by_offset)} records consumed twice"
        missing = {v: at for v, at in acked.items() if by_offset.get(at) != v}
        assert not missing, f"{len(missing)} acknowledged records not consumed at their offset, " \
                            f"e.g. {list(missing.items())[:5]}"
        assert len(consumed) == 1200, f"{len(consumed)} consumed, 1200 acknowledged"
        ends = {p: max(o for q, o in acked.values() if q == p) + 1 for p in range(PARTITIONS)}
        assert info["ends"] == ends and info["committed"] == ends, info
        gen_before, gen_after = info["generation"]  # type: ignore[misc]
        assert gen_before == gen_after, f"the member rejoined: generation {gen_before} -> {gen_after}"
        # Read back through librdkafka from the live brokers only.
        assert end_offsets(cluster.live_bootstrap(), topic, PARTITIONS) == ends
        assert committed_offsets(cluster.live_bootstrap(), group, topic, PARTITIONS) == ends
