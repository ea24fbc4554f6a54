"""Log compaction (issue 18 item 1) with real clients against real kcompat
broker processes: one broker of the module (cleaner every 200 ms, admin port
on for ``/metrics``) and a 3-broker cluster of the module at replication
factor 3.

* ``cleanup.policy=compact`` with small segments (Kafka's internal topic
  config ``internal.segment.bytes``, as Kafka's own tests get them:
  ``segment.bytes`` is at least 1 MiB since Kafka 4.0): kafka-python writes many
  versions of each key and tombstones; once the cleaner has run, a fresh
  consumer reads exactly the latest record of each key below the active
  segment, at the offset the producer was acknowledged for it, every record
  after it, offsets rising with gaps, the log end unchanged; tombstones stay
  until ``delete.retention.ms`` after the pass that first saw them; a
  consumer group whose committed offset fell into a gap resumes at the next
  record; ``kcompat_cleaner_*`` counted the pass.
* 3 brokers, RF 3: each replica's segment files, decoded by kafka-python's
  ``MemoryRecords`` straight from the three data dirs, hold the same records —
  the latest per key below the cleaned point.
* kill -9 while a pass is writing its scratch dir (``cleaner.tmp``): after
  the restart the scratch dir is gone, every acknowledged latest record is
  still there, and the broker cleans again.
* transactions (confluent-kafka): after cleaning, read_committed and
  read_uncommitted consumers see only committed latest values, and the
  aborted records are gone from the segment files.
* ``__consumer_offsets`` is compacted (its segments made small by an
  IncrementalAlterConfigs of ``internal.segment.bytes``: Kafka 4.4 refuses to
  create it with an ``offsets.topic.segment.bytes`` below 1 MiB): a group
  committed many times, cleaned, then a restart: the group's offsets are the
  last ones committed.
* DeleteRecords on a compact-only topic is POLICY_VIOLATION, as Kafka answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._broker import running, unique_topic
from ._cluster import Cluster, diagnostics
from ._compaction import (
    Item,
    alter_topic,
    create_topic,
    latest_per_key,
    produce,
    produce_fast,
    read_partition,
    read_partition_fast,
    segment_bases,
    stored_records,
    wait_for,
)
from ._dedup import AdminBroker
from ._deployment import Deployment

BACKOFF_ARGS = ("--set", "log.cleaner.backoff.ms=200")
BROKER_ARGS = (*BACKOFF_ARGS, "--set", "group.initial.rebalance.delay.ms=0",
               "--set", "offsets.topic.num.partitions=1",
               "--set", "transaction.state.log.num.partitions=1",
               "--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=500")
#: a compacted topic whose segments roll every 2 KiB (Kafka's internal key:
#: segment.bytes is at least 1 MiB) and which is cleaned as soon as any
#: segment is dirty
COMPACT = {"cleanup.policy": "compact", "internal.segment.bytes": "2048",
           "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "600000"}


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    yield from running(AdminBroker(tmp_path_factory.mktemp("compaction"), extra_args=BROKER_ARGS))


@pytest.fixture(scope="module")
def ccluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """3 brokers, every topic (internal ones too) at replication factor 3."""
    c = Cluster(tmp_path_factory.mktemp("compaction-rf3"),
                extra_args=(*Deployment.cluster_args("rf3"), *BROKER_ARGS))
    try:
        c.start()
        yield c
    finally:
        c.kill()


def _versions(keys: int, rounds: int, tag: str, size: int = 40) -> list[tuple[bytes, bytes | None]]:
    return [(b"k%03d" % k, f"{tag}-{r}-{k}".encode().ljust(size, b".")) for r in range(rounds)
            for k in range(keys)]


def _active_base(pdir: Path) -> int:
    return segment_bases(pdir)[-1]


def _cleaned_view(bootstrap: str, topic: str, written: list[Item], pdir: Path,
                  drop_tombstones: bool) -> tuple[list[Item], int]:
    """Wait until a fresh consumer reads the compacted view of ``written``
    below the active segment; that view and the end offset."""
    def check() -> tuple[list[Item], int] | None:
        got, end = read_partition(bootstrap, topic)
        want = latest_per_key(written, _active_base(pdir), drop_tombstones)
        if got == want:
            return got, end
        diff = [(g, w) for g, w in zip(got, want, strict=False) if g != w][:3]
        raise AssertionError(f"{len(got)} records read, {len(want)} expected; first "
                             f"differences {diff}")
    return wait_for(check, 20, f"compacted view of {topic}", interval_s=0.3)


def test_compacted_topic_keeps_latest_per_key(cbroker: AdminBroker) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, group = unique_topic("compact"), unique_topic("g")
    create_topic(cbroker.bootstrap, topic, COMPACT)
    pdir = cbroker.data_dir / f"{topic}-0"
    passes0 = cbroker.metric("kcompat_cleaner_passes_total")
    written = produce(cbroker.bootstrap, topic, _versions(20, 8, "a"))
    # a group commits an offset that compaction will remove (an old version of k000)
    tp = TopicPartition(topic, 0)
    committer = KafkaConsumer(bootstrap_servers=cbroker.bootstrap, group_id=group,
                              enable_auto_commit=False)
    committer.commit({tp: OffsetAndMetadata(written[40][0], "", -1)})
    committer.close()
    tombstoned = [b"gone%d" % k for k in range(4)]  # written, then deleted for good
    written += produce(cbroker.bootstrap, topic, [(k, b"soon gone") for k in tombstoned])
    written += produce(cbroker.bootstrap, topic, [(k, None) for k in tombstoned])
    written += produce(cbroker.bootstrap, topic, _versions(20, 8, "b"))
    end_written = written[-1][0] + 1
    assert [o for o, _k, _v in written] == list(range(end_written))

    view, end = _cleaned_view(cbroker.bootstrap, topic, written, pdir, drop_tombstones=False)
    active = _active_base(pdir)
    assert end == end_written, "compaction moved the log end"
    offsets = [o for o, _k, _v in view]
    assert offsets == sorted(set(offsets)) and len(offsets) < end, "no gaps, or not rising"
    below = [(k, v) for o, k, v in view if o < active]
    assert len({k for k, _v in below}) == len(below), "a key twice below the cleaned point"
    assert {k: v for k, v in below if k in tombstoned} == dict.fromkeys(tombstoned), \
        "the tombstones are not all kept until delete.retention.ms"
    assert active > 200, f"too few segments rolled (active segment at {active})"
    assert cbroker.metric("kcompat_cleaner_passes_total") > passes0
    assert cbroker.metric("kcompat_cleaner_records_removed_total") >= 150

    # the group resumes at the first record at or after its committed offset
    resumed = KafkaConsumer(bootstrap_servers=cbroker.bootstrap, group_id=group,
                            enable_auto_commit=False, auto_offset_reset="none")
    try:
        resumed.assign([tp])
        got: list[int] = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            got = [r.offset for rs in resumed.poll(timeout_ms=300).values() for r in rs]
        assert got and got[0] == min(o for o in offsets if o >= written[40][0])
        resumed.commit({tp: OffsetAndMetadata(got[-1] + 1, "", -1)})
        assert resumed.committed(tp) == got[-1] + 1
    finally:
        resumed.close()

    # tombstones go once delete.retention.ms has passed since the pass that kept them
    alter_topic(cbroker.bootstrap, topic, {"delete.retention.ms": "100"})
    time.sleep(0.2)
    written += produce(cbroker.bootstrap, topic, _versions(20, 4, "c"))  # dirty again
    view, end = _cleaned_view(cbroker.bootstrap, topic, written, pdir, drop_tombstones=True)
    assert end == written[-1][0] + 1
    assert not {k for _o, k, _v in view} & set(tombstoned), "a tombstone outlived its horizon"


def test_delete_records_on_compact_only_topic_is_policy_violation(cbroker: AdminBroker) -> None:
    """Kafka refuses DeleteRecords where cleanup.policy lacks ``delete``
    (POLICY_VIOLATION, nothing deleted); ``compact,delete`` accepts it."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    compact, both = unique_topic("compact-dr"), unique_topic("compact-delete-dr")
    create_topic(cbroker.bootstrap, compact, {"cleanup.policy": "compact"})
    create_topic(cbroker.bootstrap, both, {"cleanup.policy": "compact,delete"})
    for t in (compact, both):
        produce(cbroker.bootstrap, t, _versions(5, 1, "x"))
    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap, "log_level": 0})
    (f,) = admin.delete_records([TopicPartition(compact, 0, 3)]).values()
    with pytest.raises(KafkaException) as info:
        f.result(timeout=30)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION
    (f,) = admin.delete_records([TopicPartition(both, 0, 3)]).values()
    assert f.result(timeout=30).low_watermark == 3
    got, _end = read_partition(cbroker.bootstrap, compact)
    assert [o for o, _k, _v in got] == [0, 1, 2, 3, 4]
    got, _end = read_partition(cbroker.bootstrap, both)
    assert [o for o, _k, _v in got] == [3, 4]


def test_kill9_while_cleaning_loses_nothing(tmp_path: Path) -> None:
    """A backlog held back by min.compaction.lag.ms, released at once: the
    broker is killed -9 while the pass writes its scratch dir; after the
    restart the scratch dir is gone before the cleaner's first round and the
    next pass compacts as usual: the latest record of every key is there at
    its acknowledged offset, the log end unchanged."""
    one_offsets_partition = ("--set", "offsets.topic.num.partitions=1")
    b = AdminBroker(tmp_path / "kill9", extra_args=(*BACKOFF_ARGS, *one_offsets_partition))
    b.start()
    try:
        topic = unique_topic("compact-kill9")
        create_topic(b.bootstrap, topic, {**COMPACT, "internal.segment.bytes": str(1 << 20),
                                          "min.compaction.lag.ms": "3600000"})
        pdir = b.data_dir / f"{topic}-0"
        # many small records: a pass long enough (~0.5 s) to be caught writing
        written = produce_fast(b.bootstrap, topic, _versions(1000, 60, "big", size=100))
        assert len(segment_bases(pdir)) >= 5
        alter_topic(b.bootstrap, topic, {"min.compaction.lag.ms": "0"})
        scratch = pdir / "cleaner.tmp"
        deadline = time.monotonic() + 20
        while not scratch.exists():
            assert time.monotonic() < deadline, "no pass started (no cleaner.tmp)"
            time.sleep(0.005)
        b.kill()
        assert scratch.exists()
        b.extra_args = ("--set", f"admin.port={b.admin_port}", *one_offsets_partition,
                        "--set", "log.cleaner.backoff.ms=1000")
        b.start()
        assert not scratch.exists(), "recovery left the scratch dir"
        # the cleaner runs again after its first backoff
        wait_for(lambda: b.metric("kcompat_cleaner_passes_total") >= 1, 30, "a pass after restart")
        got, end = read_partition_fast(b.bootstrap, topic)
        assert got == latest_per_key(written, _active_base(pdir))
        assert end == len(written) and not scratch.exists()
    finally:
        b.close()


def test_every_replica_holds_the_same_compacted_log(ccluster: Cluster) -> None:
    """RF 3: each broker cleans its own replica; decoded straight from the three
    data dirs, every replica holds the latest record per key below its cleaned
    point and every record after it — the same records on every replica."""
    topic = unique_topic("compact-rf3")
    with diagnostics(ccluster):
        create_topic(ccluster.bootstrap, topic, COMPACT, partitions=2, replication=3)
        ccluster.wait_for_leaders(topic, 2)
        written = {p: produce(ccluster.bootstrap, topic, _versions(15, 10, f"p{p}")
                              + [(b"gone%d" % k, b"soon gone") for k in range(3)]
                              + [(b"gone%d" % k, None) for k in range(3)]
                              + _versions(15, 6, f"q{p}"), partition=p)
                   for p in (0, 1)}

        def replicas_cleaned() -> bool:
            for p, recs in written.items():
                for node, b in ccluster.brokers.items():
                    pdir = b.data_dir / f"{topic}-{p}"
                    stored = [(r.offset, r.key, r.value) for r in stored_records(pdir)
                              if not r.control]
                    active = _active_base(pdir)
                    want = latest_per_key(recs, active, drop_tombstones=False)
                    assert active > 100, f"broker {node} partition {p}: active at {active}"
                    assert stored == want, (f"broker {node} partition {p}: {len(stored)} "
                                            f"records stored, {len(want)} expected")
            return True

        wait_for(replicas_cleaned, 30, "every replica compacted")
        for p, recs in written.items():
            got, end = read_partition(ccluster.bootstrap, topic, p)
            assert end == recs[-1][0] + 1
            stored = {node: [(r.offset, r.key, r.value) for r in
                             stored_records(b.data_dir / f"{topic}-{p}") if not r.control]
                      for node, b in ccluster.brokers.items()}
            cleaned_to = min(_active_base(b.data_dir / f"{topic}-{p}")
                             for b in ccluster.brokers.values())
            below = {node: [i for i in s if i[0] < cleaned_to] for node, s in stored.items()}
            assert below[1] == below[2] == below[3]
            assert [v for _o, k, v in below[1] if k.startswith(b"gone")] == [None] * 3
            assert [i for i in got if i[0] < cleaned_to] == below[1]


def _txn_producer(bootstrap: str) -> Any:
    """A confluent-kafka transactional producer, initialized (its coordinator's
    ``__transaction_state`` exists afterwards)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx"),
                         "linger.ms": 5, "log_level": 0})
    producer.init_transactions(30)
    return producer


def _transactions(producer: Any, topic: str, txns: list[tuple[bool, list[tuple[bytes, bytes]]]],
                  ) -> tuple[list[Item], list[Item]]:
    """Each (commit?, pairs) as one transaction of ``producer``; the (offset,
    key, value) of the committed and the aborted records."""
    committed: list[Item] = []
    aborted: list[Item] = []
    acked: list[Item] = []

    def done(err: object, msg: Any) -> None:
        if err is None:
            acked.append((msg.offset(), msg.key(), msg.value()))

    for commit, pairs in txns:
        acked.clear()
        producer.begin_transaction()
        for k, v in pairs:
            producer.produce(topic, key=k, value=v, partition=0, on_delivery=done)
        producer.flush(30)
        assert len(acked) == len(pairs)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        (committed if commit else aborted).extend(acked)
    return committed, aborted


@pytest.mark.parametrize("kind", ["single", "rf3"])
def test_transactions_compacted(kind: str, request: pytest.FixtureRequest) -> None:
    """Committed and aborted transactions on a compacted topic: once cleaned,
    read_committed and read_uncommitted consumers both read the latest
    committed value of each key, and no replica's segments hold an aborted
    record any more. On 3 brokers the topic is led by a broker other than the
    transaction coordinator (its markers come over the network)."""
    topic = unique_topic("compact-txn")
    if kind == "single":
        b: AdminBroker = request.getfixturevalue("cbroker")
        bootstrap, dirs = b.bootstrap, [b.data_dir]
        producer = _txn_producer(bootstrap)
        create_topic(bootstrap, topic, COMPACT)
    else:
        c: Cluster = request.getfixturevalue("ccluster")
        bootstrap, dirs = c.bootstrap, [x.data_dir for x in c.brokers.values()]
        producer = _txn_producer(bootstrap)
        coordinator = c.wait_for_leaders("__transaction_state", 1)[0]
        leader = min(n for n in c.brokers if n != coordinator)
        create_topic(bootstrap, topic, COMPACT,
                     assignment=[[leader, *(n for n in c.brokers if n != leader)]])
        assert c.wait_for_leaders(topic, 1)[0] == leader != coordinator
    keys = [b"k%03d" % k for k in range(10)]
    txns = [(True, [(k, b"c1-" + k) for k in keys]),
            (False, [(k, b"aborted-1-" + k) for k in keys]),
            (True, [(k, b"c2-" + k) for k in keys[:5]]),
            (False, [(k, b"aborted-2-" + k) for k in keys[5:]] + [(b"only-aborted", b"aborted-3")]),
            (True, [(k, b"c3-" + k.ljust(100, b".")) for k in keys[:2]]),
            *[(True, [(b"tail%d" % j, b"t%d" % i * 100) for j in range(6)]) for i in range(4)]]
    committed, aborted = _transactions(producer, topic, txns)
    pdirs = [d / f"{topic}-0" for d in dirs]

    def cleaned() -> bool:
        for pdir in pdirs:
            active = _active_base(pdir)
            assert max(o for o, _k, _v in aborted) < active, "an aborted record in the active segment"
            stored = [r for r in stored_records(pdir) if not r.control]
            assert not [r for r in stored if (r.value or b"").startswith(b"aborted")], \
                f"{pdir}: aborted records still stored"
            assert [(r.offset, r.key, r.value) for r in stored] == \
                latest_per_key(committed, active)
        return True

    wait_for(cleaned, 20, "aborted records removed, latest committed kept")
    views = [latest_per_key(committed, _active_base(p)) for p in pdirs]  # the leader's is one
    for isolation in ("read_committed", "read_uncommitted"):
        got, end = read_partition(bootstrap, topic, isolation_level=isolation)
        assert got in views, isolation
        assert end == committed[-1][0] + 2  # the last commit marker
        assert {v for _o, k, v in got if k in keys} == {b"c3-" + k.ljust(100, b".") for k in keys[:2]} \
            | {b"c2-" + k for k in keys[2:5]} | {b"c1-" + k for k in keys[5:]}


def test_consumer_offsets_compacted_then_restart(cbroker: AdminBroker) -> None:
    """``__consumer_offsets`` (``internal.segment.bytes=4096`` set on it) is compacted:
    a group's hundreds of commits shrink to one record per partition below the
    cleaned point, and after a kill -9 and restart (replaying the compacted
    log) the group's committed offsets are the last ones it committed."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, group = unique_topic("compact-offsets"), unique_topic("g-offsets")
    create_topic(cbroker.bootstrap, topic, {}, partitions=3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer = KafkaConsumer(bootstrap_servers=cbroker.bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        consumer.commit({tp: OffsetAndMetadata(0, "", -1) for tp in tps})  # creates it
        alter_topic(cbroker.bootstrap, "__consumer_offsets", {"internal.segment.bytes": "4096"})
        for i in range(200):
            consumer.commit({tp: OffsetAndMetadata(i * 10 + tp.partition, "m" * 60, -1)
                             for tp in tps})
    finally:
        consumer.close()
    last = {tp: 1990 + tp.partition for tp in tps}
    pdir = cbroker.data_dir / "__consumer_offsets-0"

    def compacted() -> bool:
        active = _active_base(pdir)
        below = [r for r in stored_records(pdir) if not r.control and r.offset < active]
        keys = [r.key for r in below]
        ours = [r for r in below if r.key and group.encode() in r.key and topic.encode() in r.key]
        assert active > 300, f"__consumer_offsets rolled only to {active}"
        assert len(keys) == len(set(keys)) and len(ours) <= 3, \
            f"{len(keys) - len(set(keys))} older records, {len(ours)} of the group, below {active}"
        return True

    wait_for(compacted, 20, "__consumer_offsets compacted")
    cbroker.kill()
    cbroker.start()
    consumer = KafkaConsumer(bootstrap_servers=cbroker.bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        assert {tp: consumer.committed(tp) for tp in tps} == last
    finally:
        consumer.close()
