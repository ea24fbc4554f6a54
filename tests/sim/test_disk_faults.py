"""Disk faults a broker survives (``kcompat.broker.replication.disk_faults``).

Real brokers on the broker simulator's in-memory disk (``MemoryFileStore``
with ``DiskFaults``): a full disk (ENOSPC after a short write), EIO on every
write and EIO on every fsync, of the whole disk or of one partition's
directory. Each must leave the broker running, answer KAFKA_STORAGE_ERROR to
produces of the affected partitions (and only those), keep Metadata and reads
of what is stored, count the failures, and take writes again once the disk
heals — with every acknowledged record readable, before and after a power
cut, and the log never torn. Before the fix the first failed write or fsync
stopped the broker (a simulator failure) or, in the pre-write, failed the
request with an exception.

The simulator's nemesis breaks disks too (``BrokerSimOptions(disk_faults=True)``):
``test_broker_simulation_with_disk_faults``.
"""

from __future__ import annotations

import datetime
import errno
import os
from pathlib import Path
from random import Random

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kcompat.broker.replication import disk_faults
from kcompat.log import LogConfig, PartitionLog, segment
from kcompat.testing.broker_sim import (
    PARTITIONS,
    TOPIC,
    BrokerSimOptions,
    BrokerSimulation,
    SimNode,
)
from kcompat.testing.memory_store import DiskFaults, MemoryFileStore
from kcompat.testing.simulator import SimFailure
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.batch import compute_crc, iter_headers, parse_header
from kcompat.wire.records import decode_batch, encode_batch

SEEDS = int(os.environ.get("DISK_FAULT_SEEDS", "20"))
CHUNK = 10
LOST = ("acknowledged produce lost", "acknowledged delayed records never delivered",
        "written 2 times")


def _lone_sim(seed: int = 1, options: BrokerSimOptions | None = None) -> BrokerSimulation:
    """One broker, a perfect network: only the disk misbehaves."""
    return BrokerSimulation.lone(seed, options)


def _node(sim: BrokerSimulation) -> SimNode:
    return sim.nodes[1]


def _stored(node: SimNode, index: int) -> list[bytes | None]:
    """The values of ``TOPIC``-``index`` below the high watermark (what a consumer reads)."""
    assert node.broker is not None
    part = node.broker.state.partition(TOPIC, index)
    assert part is not None
    plog = part.log
    return [r.value for raw, _h in plog.batches(plog.log_start_offset, part.high_watermark)
            for r in decode_batch(raw)]


async def _metadata_ok(sim: BrokerSimulation) -> None:
    m = codec.request_module(v.METADATA, 12)
    r = await sim.request(_node(sim), v.METADATA, 12, topics=(m.MetadataRequestTopic(
        topic_id=None, name=TOPIC),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)
    assert r is not None, "Metadata did not answer"
    (topic,) = r.topics
    assert topic.error_code == E.none
    assert all(p.leader_id == 1 for p in topic.partitions)


async def _fetch(sim: BrokerSimulation) -> dict[int, tuple[E, int]]:
    """A consumer's Fetch of every partition from offset 0: partition ->
    (error, record bytes)."""
    m = codec.request_module(v.FETCH, 12)
    r = await sim.request(_node(sim), v.FETCH, 12, max_wait=datetime.timedelta(0), min_bytes=1,
                          max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                          topics=(m.FetchTopic(topic=TOPIC, partitions=tuple(m.FetchPartition(
                              partition=i, fetch_offset=0, partition_max_bytes=1 << 20)
                              for i in range(PARTITIONS))),),
                          forgotten_topics_data=(), rack_id="")
    assert r is not None, "Fetch did not answer"
    return {p.partition_index: (p.error_code, len(bytes(p.records or b"")))
            for t in r.responses for p in t.partitions}


def _errors(sim: BrokerSimulation, kind: str, op: str) -> float:
    broker = _node(sim).broker
    assert broker is not None
    value = broker.metrics.registry.get_sample_value(
        "kcompat_storage_errors_total", {"kind": kind, "op": op})
    return value or 0.0


def _log_whole(store: MemoryFileStore, index: int) -> list[bytes | None]:
    """Every batch of the partition's segment files is whole and CRC-clean
    (no torn tail: the file ends where its last batch does); its values."""
    directory = f"/sim/n1/{TOPIC}-{index}"
    values: list[bytes | None] = []
    for name in store.names(Path(directory)):
        if not name.endswith(".log"):
            continue
        data = store.read(Path(f"{directory}/{name}"))
        end = 0
        for pos, h in iter_headers(data):
            raw = memoryview(data)[pos:pos + h.size]
            assert compute_crc(raw) == h.crc, f"{name}: corrupt batch at {pos}"
            values += [r.value for r in decode_batch(raw)]
            end = pos + h.size
        assert end == len(data), f"{name}: {len(data) - end} bytes of torn tail"
    return values


@pytest.mark.parametrize("fault", ["full", "eio-write", "eio-sync"])
def test_a_partition_with_a_failing_disk_answers_storage_error_and_recovers(
        fault: str) -> None:
    sim = _lone_sim()
    acked: dict[int, list[bytes]] = {0: [], 1: []}
    seen: dict[str, object] = {}

    async def produce(index: int, value: bytes) -> E:
        error, _offset = await sim.produce(_node(sim), index, value)
        if error == E.none:
            acked[index].append(value)
        return error

    async def scenario(sim: BrokerSimulation) -> None:
        node = _node(sim)
        for i in range(5):
            for index in range(PARTITIONS):
                assert await produce(index, b"before-%d-%d" % (index, i)) == E.none
        # the fault, on partition 0's directory only
        faults = DiskFaults(paths=f"/sim/n1/{TOPIC}-0/")
        if fault == "full":
            faults.capacity = node.store.used_bytes() + 10  # a short write, then ENOSPC
        elif fault == "eio-write":
            faults.write_errno = errno.EIO
        else:
            faults.sync_errno = errno.EIO
        node.store.faults = faults
        refused = [await produce(0, b"refused-%d" % i) for i in range(3)]
        seen["refused"] = refused
        # the other partition and the control plane carry on; reads are served
        for i in range(3):
            assert await produce(1, b"during-%d" % i) == E.none
        await _metadata_ok(sim)
        assert [x for x in _stored(node, 0) if x is not None and x.startswith(b"before")] \
            == acked[0]
        assert node.broker is not None, "the broker stopped"
        kind, op = {"full": ("enospc", "write"), "eio-write": ("eio", "write"),
                    "eio-sync": ("eio", "fsync")}[fault]
        seen["counted"] = _errors(sim, kind, op)
        # the disk heals: after the backoff, writes succeed again
        node.store.faults = DiskFaults()
        await trio.sleep(disk_faults.BACKOFF_MAX_S + 1)
        for i in range(3):
            assert await produce(0, b"after-%d" % i) == E.none
        assert node.broker.cluster.faults.offline == {}
        for index in range(PARTITIONS):
            stored = _stored(node, index)
            assert all(value in stored for value in acked[index]), (index, stored, acked)
            whole = _log_whole(node.store, index)
            assert all(value in whole for value in acked[index])
        # and a power cut loses nothing acknowledged either
        await sim.crash(node)
        await sim.boot(node)
        for _ in range(50):
            if node.broker is not None and node.broker.cluster.leads(TOPIC, 0) and \
                    node.broker.cluster.leads(TOPIC, 1):
                break
            await trio.sleep(0.2)
        for index in range(PARTITIONS):
            stored = _stored(node, index)
            assert all(value in stored for value in acked[index]), (index, stored, acked)

    sim.run(scenario)
    assert seen["refused"] == [E.kafka_storage_error] * 3
    assert seen["counted"] >= 1


def test_a_full_disk_everywhere_keeps_the_broker_up_and_reads_served() -> None:
    """The whole disk full (the metadata log and the Raft journal included):
    produces are refused, Metadata and reads go on, and all recovers."""
    sim = _lone_sim(2)
    acked: list[bytes] = []
    seen: dict[str, object] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        node = _node(sim)
        for i in range(5):
            error, _ = await sim.produce(node, 0, b"a%d" % i)
            assert error == E.none
            acked.append(b"a%d" % i)
        node.store.faults = DiskFaults(capacity=node.store.used_bytes() + 10)
        codes = [(await sim.produce(node, i % 2, b"x%d" % i))[0] for i in range(4)]
        seen["codes"] = codes
        await _metadata_ok(sim)
        await trio.sleep(3)  # heartbeats and ticks go on; nothing stops the broker
        await _metadata_ok(sim)
        assert node.broker is not None
        assert _stored(node, 0)[:5] == acked
        node.store.faults = DiskFaults()
        await trio.sleep(disk_faults.BACKOFF_MAX_S + 1)
        error, _ = await sim.produce(node, 0, b"b0")
        seen["after"] = error
        if error == E.none:
            acked.append(b"b0")
        assert all(x in _stored(node, 0) for x in acked)

    sim.run(scenario)
    assert seen["codes"] == [E.kafka_storage_error] * 4
    assert seen["after"] == E.none


def test_a_failed_write_leaves_no_torn_tail() -> None:
    """A short write followed by ENOSPC is cut back to the last whole batch,
    so the next append, once there is room, continues a whole log."""
    store = MemoryFileStore("/d")
    plog = PartitionLog.open(Path("/d/t-0"), LogConfig(), 0, store)
    def batch(value: bytes) -> memoryview:
        return memoryview(encode_batch([(None, value, (), 1)])).toreadonly()

    first = batch(b"one")
    plog.append(first, parse_header(first), 0, 1)
    store.faults = DiskFaults(capacity=store.used_bytes() + 10)  # 10 bytes reach the file
    second = batch(b"two" * 20)
    with pytest.raises(OSError) as raised:
        plog.append(second, parse_header(second), 0, 1)
    assert raised.value.errno == errno.ENOSPC
    assert store.faults.failed_writes == 1
    assert plog.log_end_offset == 1
    store.faults = DiskFaults()
    plog.append(second, parse_header(second), 0, 1)
    plog.flush()
    segment = store.read(Path("/d/t-0/00000000000000000000.log"))
    values = [r.value for _p, h in iter_headers(segment)
              for r in decode_batch(memoryview(segment)[_p:_p + h.size])]
    assert values == [b"one", b"two" * 20]
    assert sum(h.size for _p, h in iter_headers(segment)) == len(segment)


def test_a_failed_sync_drops_the_pages_as_linux_does() -> None:
    """The in-memory disk's fsync failure: the bytes stay readable, a later
    sync succeeds, yet a power cut finds zeros where they were — unless they
    were written again (what the broker's retry does)."""
    store = MemoryFileStore("/d")
    f = store.open(Path("/d/f"))
    store.sync_dir(Path("/d"))
    f.append([b"kept"])
    f.sync()
    f.append([b"lost"])
    store.faults = DiskFaults(sync_errno=errno.EIO)
    with pytest.raises(OSError):
        f.sync()
    store.faults = DiskFaults()
    assert f.pread(8, 0) == b"keptlost"
    f.sync()
    store.crash(Random(0))
    assert store.read(Path("/d/f")) == b"kept\0\0\0\0"
    g = store.open(Path("/d/f"))
    g.append([b"more"])
    store.faults = DiskFaults(sync_errno=errno.EIO)
    with pytest.raises(OSError):
        g.sync()
    store.faults = DiskFaults()
    g.truncate(8)
    g.append([b"MORE"])  # written again
    g.sync()
    store.crash(Random(0))
    assert store.read(Path("/d/f")) == b"kept\0\0\0\0MORE"


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK), ids=lambda s: f"seeds{s}")
def test_broker_simulation_with_disk_faults(first: int) -> None:
    """The nemesis fills disks and fails writes and fsyncs (whole disks or one
    partition's directory) among crashes and cuts; the brokers must converge
    without a restart once the disks heal, and after one, with no
    acknowledged record lost or written twice and the replicas' logs equal."""
    for seed in range(first, min(first + CHUNK, SEEDS)):
        try:
            BrokerSimulation(seed, BrokerSimOptions(disk_faults=True)).run()
        except SimFailure as failure:
            pytest.fail(str(failure), pytrace=False)


def _caught(seeds: int = 8, phrases: tuple[str, ...] = LOST) -> bool:
    for seed in range(seeds):
        try:
            BrokerSimulation(seed, BrokerSimOptions(disk_faults=True)).run()
        except SimFailure as failure:
            if any(p in str(failure) for p in phrases):
                return True
    return False


def test_a_failed_fsync_taken_as_durable_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks can fail: a driver that advances a Ready whose fsync failed
    acknowledges what a power cut then loses."""
    monkeypatch.setattr(disk_faults.DiskFaults, "after_sync",
                        lambda self, batch, failed, journal: batch)
    assert _caught()


def test_a_retry_that_only_syncs_again_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed fsync the pages may be gone though reported clean: a
    retry that only syncs again, instead of writing the log again from its
    synced end, loses acknowledged records at the next power cut."""
    monkeypatch.setattr(disk_faults.DiskFaults, "_rewrite", lambda self, group: None)
    assert _caught()


def test_a_torn_tail_left_behind_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed short write whose bytes stay at the end of the segment puts
    every later batch at the wrong place: the simulator's brokers stop
    converging (or find the segment torn)."""
    monkeypatch.setattr(segment.LogSegment, "_cut_torn_tail", lambda self: None)
    assert _caught(phrases=("no convergence", "is torn", "unexpected"))


def test_an_unreadable_partition_answers_fetch_storage_error() -> None:
    """Fetch answers KAFKA_STORAGE_ERROR only where the data cannot be read
    (EIO on reads of one partition); a full disk does not stop reads."""
    sim = _lone_sim(3)
    seen: dict[str, object] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        node = _node(sim)
        for index in range(PARTITIONS):
            assert (await sim.produce(node, index, b"v%d" % index))[0] == E.none
        node.store.faults = DiskFaults(capacity=node.store.used_bytes())
        seen["full"] = await _fetch(sim)
        node.store.faults = DiskFaults(read_errno=errno.EIO, paths=f"/sim/n1/{TOPIC}-0/")
        seen["unreadable"] = await _fetch(sim)
        node.store.faults = DiskFaults()
        seen["healed"] = await _fetch(sim)

    sim.run(scenario)
    full, unreadable, healed = seen["full"], seen["unreadable"], seen["healed"]
    assert isinstance(full, dict) and isinstance(unreadable, dict) and isinstance(healed, dict)
    assert all(code == E.none and size > 0 for code, size in full.values())
    assert unreadable[0][0] == E.kafka_storage_error
    assert unreadable[1][0] == E.none and unreadable[1][1] > 0
    assert healed == full


def test_an_acks_1_group_commit_whose_fsync_failed_is_written_again() -> None:
    """``kcompat.flush.mode=always``: acks=1 is answered after the produce
    path's own group-commit fsync. When it fails the record is refused, and
    the pages it dropped must be written again: else the refused record's
    bytes are zeros on the disk, in front of records acknowledged later, and
    recovery after a power cut cuts those too."""
    sim = _lone_sim(4, BrokerSimOptions(configs=(("kcompat.flush.mode", "always"),)))
    acked: list[bytes] = []
    seen: dict[str, object] = {}

    async def scenario(sim: BrokerSimulation) -> None:
        node = _node(sim)

        async def produce(value: bytes) -> E:
            error, _ = await sim.produce(node, 0, value, acks=1)
            if error == E.none:
                acked.append(value)
            return error

        for i in range(3):
            assert await produce(b"a%d" % i) == E.none
        node.store.faults = DiskFaults(sync_errno=errno.EIO, paths=f"/sim/n1/{TOPIC}-0/")
        seen["refused"] = await produce(b"refused")
        node.store.faults = DiskFaults()
        await trio.sleep(disk_faults.BACKOFF_MAX_S + 1)
        for i in range(3):
            assert await produce(b"b%d" % i) == E.none
        await sim.crash(node)
        await sim.boot(node)
        for _ in range(50):
            if node.broker is not None and node.broker.cluster.leads(TOPIC, 0):
                break
            await trio.sleep(0.2)
        seen["stored"] = _stored(node, 0)

    sim.run(scenario)
    assert seen["refused"] == E.kafka_storage_error
    stored = seen["stored"]
    assert isinstance(stored, list)
    assert [v for v in stored if v in acked] == acked, stored
