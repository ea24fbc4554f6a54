"""aiokafka 0.14 against a real kcompat broker: admin create, produce, consume,
codecs, default and idempotent producers, offsets by timestamp, durability.
Tests on ``pbroker`` also run in a 3-broker cluster at replication factor 1 or (those
marked) 3 (conftest.py); those that stop or kill the broker stay on a single node."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from .._broker import Broker
from .._deployment import SINGLE_AND_RF3, Deployment
from .._records import (
    CODEC_IDS,
    HW_WAIT_S,
    TIMEOUT_MS,
    TIMEOUT_S,
    Rec,
    Seen,
    assert_exactly_once,
    assert_round_trip,
    base_timestamp,
    by_partition,
    compressible_records,
    durability_values,
    golden_records,
    norm_headers,
    now_ms,
)

pytestmark = pytest.mark.timeout(120)

CLIENT = "aiokafka"
T = TypeVar("T")

TOPIC_ALREADY_EXISTS = 36


def run(coro_fn: Callable[[], Awaitable[T]], timeout: float = 90.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro_fn(), timeout)
    return asyncio.run(bounded())


async def create_topic(bs: str, name: str, partitions: int = 3,
                       replication: int = 1) -> list[Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS)
    await admin.start()
    try:
        resp = await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=replication)],
            timeout_ms=TIMEOUT_MS)
        errors = list(resp.topic_errors)
        assert [(e[0], e[1]) for e in errors] == [(name, 0)], f"{CLIENT}: CreateTopics answered {errors}"
        # Metadata shows the partitions (poll: creation may propagate asynchronously).
        deadline = asyncio.get_running_loop().time() + TIMEOUT_S
        while True:
            (t,) = await admin.describe_topics([name])
            if t["error_code"] == 0 and len(t["partitions"]) == partitions:
                break
            assert asyncio.get_running_loop().time() < deadline, f"{CLIENT}: metadata {t}"
            await asyncio.sleep(0.1)
        return errors
    finally:
        await admin.close()


async def produce(bs: str, topic: str, recs: list[Rec], **cfg: Any) -> list[Any]:
    p = AIOKafkaProducer(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS, **cfg)
    await p.start()
    try:
        futs = [
            await p.send(topic, value=r.value, key=r.key, partition=r.partition,
                         timestamp_ms=r.timestamp, headers=list(r.headers) or None)
            for r in recs
        ]
        metas = list(await asyncio.gather(*futs))
    finally:
        await p.stop()
    next_offset: dict[int, int] = {}
    for i, (r, md) in enumerate(zip(recs, metas, strict=True)):
        want = next_offset.get(r.partition, 0)
        next_offset[r.partition] = want + 1
        assert (md.partition, md.offset) == (r.partition, want), (
            f"{CLIENT}: record {i} acknowledged at partition {md.partition} offset {md.offset}, "
            f"expected {r.partition}/{want}"
        )
    return metas


async def wait_for_ends_async(c: AIOKafkaConsumer, tps: list[TopicPartition],
                              want: dict[int, int]) -> dict[int, int]:
    """``_records.wait_for_ends`` with aiokafka: the end offsets once they are
    ``want`` (acks=1, aiokafka's default, does not wait for the followers)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HW_WAIT_S
    while True:
        got = {tp.partition: o for tp, o in (await c.end_offsets(tps)).items()}
        if got == want or loop.time() > deadline:
            return got
        await asyncio.sleep(0.02)


async def consume_all(bs: str, topic: str, partitions: list[int],
                      expect_end: dict[int, int] | None = None) -> list[Seen]:
    c = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False,
                         fetch_max_wait_ms=100, request_timeout_ms=TIMEOUT_MS)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)
        if expect_end is not None:
            got = await wait_for_ends_async(c, tps, expect_end)
            assert got == expect_end, f"{CLIENT}: end_offsets {got}, expected {expect_end}"
            ends = {TopicPartition(topic, p): o for p, o in got.items()}
        seen: list[Seen] = []
        pos = {tp: 0 for tp in tps}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT_S
        while any(pos[tp] < ends[tp] for tp in tps):
            assert loop.time() < deadline, (
                f"{CLIENT}: timed out reading {topic}: positions {pos}, end offsets {ends}"
            )
            batch = await c.getmany(timeout_ms=500)
            for tp, msgs in batch.items():
                for m in msgs:
                    seen.append(Seen(m.partition, m.offset, m.key, m.value,
                                     norm_headers(m.headers), m.timestamp, m.timestamp_type))
                    pos[tp] = m.offset + 1
        return seen
    finally:
        await c.stop()


# -- tests ----------------------------------------------------------------------


def test_admin_create_and_already_exists(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap

    async def scenario() -> list[Any]:
        await create_topic(bs, topic, 3, replication=pbroker.replication)
        admin = AIOKafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS)
        await admin.start()
        try:
            resp = await admin.create_topics([NewTopic(topic, 3, pbroker.replication)],
                                             timeout_ms=TIMEOUT_MS)
            names = await admin.list_topics()
            assert topic in names, f"{CLIENT}: list_topics {names}"
            return list(resp.topic_errors)
        finally:
            await admin.close()

    errors = run(scenario)
    assert [(e[0], e[1]) for e in errors] == [(topic, TOPIC_ALREADY_EXISTS)], (
        f"{CLIENT}: second CreateTopics answered {errors}, expected TOPIC_ALREADY_EXISTS (36)"
    )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_round_trip_keys_headers_timestamps(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    recs = golden_records(3)
    counts = {p: len(rs) for p, rs in by_partition(recs).items()}

    async def scenario() -> list[Seen]:
        await create_topic(bs, topic, 3, replication=pbroker.replication)
        await produce(bs, topic, recs)  # aiokafka defaults: acks=1, not idempotent
        return await consume_all(bs, topic, [0, 1, 2], expect_end=counts)

    assert_round_trip(recs, run(scenario), CLIENT)


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_idempotent_producer(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    recs = golden_records(3)

    async def scenario() -> tuple[Any, list[Seen]]:
        await create_topic(bs, topic, 3, replication=pbroker.replication)
        p = AIOKafkaProducer(bootstrap_servers=bs, enable_idempotence=True,
                             request_timeout_ms=TIMEOUT_MS)
        await p.start()
        try:
            futs = [await p.send(topic, value=r.value, key=r.key, partition=r.partition,
                                 timestamp_ms=r.timestamp, headers=list(r.headers) or None)
                    for r in recs]
            await asyncio.gather(*futs)
            pid = p._txn_manager.producer_id if p._txn_manager is not None else None
        finally:
            await p.stop()
        return pid, await consume_all(bs, topic, [0, 1, 2])

    pid, seen = run(scenario)
    assert pid is not None and pid >= 0, f"{CLIENT}: no producer id from InitProducerId: {pid}"
    assert_round_trip(recs, seen, f"{CLIENT} idempotent")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codec(pbroker: Deployment, topic: str, codec: str) -> None:
    bs = pbroker.bootstrap
    recs = compressible_records(300)

    async def scenario() -> list[Seen]:
        await create_topic(bs, topic, 1, replication=pbroker.replication)
        await produce(bs, topic, recs, compression_type=codec, linger_ms=20)
        return await consume_all(bs, topic, [0], expect_end={0: len(recs)})

    assert_round_trip(recs, run(scenario), f"{CLIENT} {codec}")
    stored = pbroker.stored_codecs(topic, 0)
    assert stored and set(stored) == {CODEC_IDS[codec]}, (
        f"{CLIENT}: batches on disk have codecs {sorted(set(stored))}, expected only {codec}"
    )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_offsets_for_times(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    base = base_timestamp()
    recs = [Rec(1, f"k{i}".encode(), f"v{i}".encode(), (), base + i * 1000) for i in range(10)]
    recs.append(Rec(2, b"only", b"one", (), base))
    tp0, tp1, tp2 = (TopicPartition(topic, i) for i in range(3))

    async def scenario() -> dict[str, Any]:
        await create_topic(bs, topic, 3, replication=pbroker.replication)
        await produce(bs, topic, recs)
        c = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=TIMEOUT_MS)
        await c.start()
        try:
            out: dict[str, Any] = {}
            # timestamp lookups search below the high watermark (acks=1: wait for it)
            await wait_for_ends_async(c, [tp0, tp1, tp2], {0: 0, 1: 10, 2: 1})
            for ts in (base - 5000, base, base + 1, base + 2500, base + 9000, base + 9001):
                out[f"single{ts - base:+d}"] = (await c.offsets_for_times({tp1: ts}))[tp1]
            out["multi"] = await c.offsets_for_times({tp0: base, tp1: base + 2500, tp2: base})
            out["begin"] = await c.beginning_offsets([tp0, tp1, tp2])
            out["end"] = await c.end_offsets([tp0, tp1, tp2])
            return out
        finally:
            await c.stop()

    out = run(scenario)
    for delta, want in [(-5000, 0), (0, 0), (1, 1), (2500, 3), (9000, 9)]:
        got = out[f"single{delta:+d}"]
        assert got is not None, f"{CLIENT}: offsets_for_times(base{delta:+d}) gave None, expected {want}"
        assert (got.offset, got.timestamp) == (want, base + want * 1000), (
            f"{CLIENT}: base{delta:+d}ms -> offset {got.offset} ts {got.timestamp}, expected {want}"
        )
    assert out["single+9001"] is None, (
        f"{CLIENT}: timestamp past the last record gave {out['single+9001']} (Kafka: -1 -> None)"
    )
    multi = out["multi"]
    assert multi[tp0] is None and multi[tp1].offset == 3 and multi[tp2].offset == 0, f"{CLIENT}: {multi}"
    assert out["begin"] == {tp0: 0, tp1: 0, tp2: 0}, f"{CLIENT}: {out['begin']}"
    assert out["end"] == {tp0: 0, tp1: 10, tp2: 1}, f"{CLIENT}: {out['end']}"


def test_auto_create_on_send(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap

    async def scenario() -> tuple[Any, list[Seen]]:
        p = AIOKafkaProducer(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS)
        await p.start()
        try:
            md = await p.send_and_wait(topic, key=b"k", value=b"auto")
            parts = p.client.cluster.partitions_for_topic(topic)
        finally:
            await p.stop()
        return (md.partition, md.offset, parts), await consume_all(bs, topic, [0], expect_end={0: 1})

    (part, off, parts), seen = run(scenario)
    assert (part, off, parts) == (0, 0, {0}), f"{CLIENT}: auto-created topic {parts}, acked {part}/{off}"
    assert [(s.key, s.value) for s in seen] == [(b"k", b"auto")]


def test_log_append_time_topic(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap

    async def scenario() -> tuple[int, int, list[Seen]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS)
        await admin.start()
        try:
            resp = await admin.create_topics([NewTopic(
                topic, 1, pbroker.replication,
                topic_configs={"message.timestamp.type": "LogAppendTime"})])
            assert [e[1] for e in resp.topic_errors] == [0], f"{CLIENT}: {resp.topic_errors}"
        finally:
            await admin.close()
        t0 = now_ms()
        await produce(bs, topic, [Rec(0, None, f"lat-{i}".encode(), (), base_timestamp())
                                  for i in range(3)])
        t1 = now_ms()
        return t0, t1, await consume_all(bs, topic, [0], expect_end={0: 3})

    t0, t1, seen = run(scenario)
    for s in seen:
        assert s.timestamp_type == 1 and t0 - 5000 <= s.timestamp <= t1 + 5000, (
            f"{CLIENT}: LogAppendTime topic gave ({s.timestamp_type}, {s.timestamp}), "
            f"expected (1, broker time in [{t0}, {t1}])"
        )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_fetch_out_of_range_resets_to_earliest(pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap

    async def scenario() -> list[int]:
        await create_topic(bs, topic, 1, replication=pbroker.replication)
        await produce(bs, topic, [Rec(0, None, f"r{i}".encode(), (), base_timestamp() + i)
                                  for i in range(5)])
        c = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100,
                             request_timeout_ms=TIMEOUT_MS)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 100)
            got: list[int] = []
            while len(got) < 5:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got.extend(m.offset for m in msgs)
            return got
        finally:
            await c.stop()

    assert run(scenario, timeout=TIMEOUT_S) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_admin_round_trip(pbroker: Deployment, topic: str) -> None:
    """AIOKafkaAdminClient's older API versions: configs, partitions, records, delete."""
    bs = pbroker.bootstrap
    tp0 = TopicPartition(topic, 0)

    async def describe(admin: AIOKafkaAdminClient, retention_ms: str) -> dict[str, Any]:
        """DescribeConfigs, polled until it shows ``retention_ms``: any broker answers
        from its metadata image, which follows the controller's answer to CreateTopics
        or AlterConfigs by a moment in a cluster (as in Kafka)."""
        deadline = asyncio.get_running_loop().time() + TIMEOUT_S
        while True:
            (resp,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)])
            (res,) = resp.to_object()["resources"]
            entries = {e["config_names"]: e for e in res["config_entries"]}
            shown = entries.get("retention.ms", {}).get("config_value")
            if (res["error_code"] == 0 and shown == retention_ms
                    or asyncio.get_running_loop().time() > deadline):
                break
            await asyncio.sleep(0.1)
        assert res["error_code"] == 0, f"{CLIENT}: DescribeConfigs {res}"
        return entries

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        admin = AIOKafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS)
        await admin.start()
        try:
            resp = await admin.create_topics([NewTopic(
                topic, 3, pbroker.replication,
                topic_configs={"retention.ms": "86400000", "cleanup.policy": "delete"})])
            out["create"] = [(e[0], e[1]) for e in resp.topic_errors]
            out["described"] = await describe(admin, "86400000")
            (alter,) = await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3600000"})])
            out["alter"] = [r["error_code"] for r in alter.to_object()["resources"]]
            out["after_alter"] = await describe(admin, "3600000")
            resp = await admin.create_partitions({topic: NewPartitions(5)})
            out["partitions"] = [(e[0], e[1]) for e in resp.topic_errors]
            # Metadata may come from a broker that applies the change a moment after
            # the controller answered (as in Kafka): poll, as for the creation.
            deadline = asyncio.get_running_loop().time() + TIMEOUT_S
            while len((t := (await admin.describe_topics([topic]))[0])["partitions"]) < 5:
                if asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.1)
            out["partition_count"] = len(t["partitions"])
            # acks=all: DeleteRecords may not go past the high watermark (Kafka answers
            # OFFSET_OUT_OF_RANGE), which an acks=1 answer does not wait for at RF 3.
            await produce(bs, topic, [Rec(0, None, f"r{i}".encode(), (), base_timestamp() + i)
                                      for i in range(6)], acks="all")
            out["delete_records"] = await admin.delete_records({tp0: RecordsToDelete(4)})
            resp = await admin.delete_topics([topic])
            out["delete"] = [(e[0], e[1]) for e in resp.topic_error_codes]
            deadline = asyncio.get_running_loop().time() + TIMEOUT_S
            while topic in await admin.list_topics():
                assert asyncio.get_running_loop().time() < deadline, f"{CLIENT}: {topic} not deleted"
                await asyncio.sleep(0.1)
        finally:
            await admin.close()
        return out

    out = run(scenario)
    assert out["create"] == [(topic, 0)], f"{CLIENT}: CreateTopics {out['create']}"
    d = out["described"]
    assert d["retention.ms"]["config_value"] == "86400000" and d["retention.ms"]["config_source"] == 1, (
        f"{CLIENT}: DescribeConfigs retention.ms {d.get('retention.ms')}"
    )
    assert d["cleanup.policy"]["config_value"] == "delete"
    assert out["alter"] == [0], f"{CLIENT}: AlterConfigs {out['alter']}"
    a = out["after_alter"]
    assert a["retention.ms"]["config_value"] == "3600000", f"{CLIENT}: {a['retention.ms']}"
    # Legacy AlterConfigs replaces the topic's whole override set.
    assert a["cleanup.policy"]["config_source"] != 1, f"{CLIENT}: {a['cleanup.policy']}"
    assert out["partitions"] == [(topic, 0)] and out["partition_count"] == 5, f"{CLIENT}: {out}"
    assert out["delete_records"] == {tp0: 4}, f"{CLIENT}: DeleteRecords {out['delete_records']}"
    assert out["delete"] == [(topic, 0)], f"{CLIENT}: DeleteTopics {out['delete']}"


# -- durability -------------------------------------------------------------------

N_DURABLE = 300


async def _produce_acked(bs: str, topic: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    p = AIOKafkaProducer(bootstrap_servers=bs, acks="all", request_timeout_ms=TIMEOUT_MS)
    await p.start()
    try:
        futs = [await p.send(topic, value=v, key=v[-3:], partition=i % 3) for i, v in enumerate(values)]
        metas = await asyncio.gather(*futs)
    finally:
        await p.stop()
    return [(md.partition, md.offset, v) for md, v in zip(metas, values, strict=True)]


def test_sigterm_restart_keeps_acked_records(broker: Broker, topic: str) -> None:
    bs = broker.bootstrap
    values = durability_values(N_DURABLE, "term")

    async def before() -> list[tuple[int, int, bytes]]:
        await create_topic(bs, topic, 3)
        return await _produce_acked(bs, topic, values)

    acked = run(before)
    rc = broker.stop()
    assert rc == 0, f"broker exited with {rc} after SIGTERM, expected a clean exit (0)"
    broker.start()
    ends = {p: sum(1 for a in acked if a[0] == p) for p in range(3)}
    seen = run(lambda: consume_all(bs, topic, [0, 1, 2], expect_end=ends))
    assert sorted((s.partition, s.offset, s.value) for s in seen) == sorted(acked)


def test_kill9_restart_keeps_acked_records(broker: Broker, topic: str) -> None:
    bs = broker.bootstrap
    values = durability_values(N_DURABLE, "kill")

    async def before() -> list[tuple[int, int, bytes]]:
        await create_topic(bs, topic, 3)
        return await _produce_acked(bs, topic, values)

    acked = run(before)
    broker.kill()
    broker.start()
    seen = run(lambda: consume_all(bs, topic, [0, 1, 2]))
    assert_exactly_once([a[2] for a in acked], [s.value for s in seen], CLIENT, sent=values)
    assert sorted((s.partition, s.offset, s.value) for s in seen) == sorted(acked)
