"""Delayed delivery is exactly once across kill -9 (docs/extensions.md, rule 3), with
real broker processes.

An idempotent acks=all producer sends ``RECORDS`` records, each with a unique
key, to a 3-partition topic; nine in ten carry ``kc-delay-ms`` (a spread of
delays, fixed by the record's number: no seed), the rest are ordinary. Once
all are acknowledged (the delivery reports give each delayed record's hole
offset and its CreateTime), a consumer reads the topic continuously while
brokers are killed with SIGKILL mid-way through the deliveries and restarted
on the same data dir and port:

* ``test_single_node_kill9`` — the only broker, twice;
* ``test_cluster_kill9`` — a 3-broker cluster, topic and ``__kc_schedule``
  at RF 3: first (at 25 % delivered) the leader of the schedule partition
  that delivers to target partition 0 (a new leader must finish the delivery
  in flight), then (at 55 %) the leader of a target partition whose schedule
  partition is led by another broker (the delivery is re-sent, across brokers,
  to the target's new leader); each is restarted before the next kill.

The test waits until the consumer has seen every key and every replica's
copy of the schedule partitions is drained (no pending entry, no ``out``
without ``done``), then reads every partition again from offset 0 to its
high watermark and asserts: every key exactly once; an ordinary record at its
produced offset; a delayed one at a new offset with ``kc-scheduled-offset`` =
its hole, its key, value, headers and CreateTime kept; no record at a hole
offset; no offset read twice with different contents; and no delayed record
seen by the live consumer before CreateTime + delay (the broker's due time is
later still: it counts from its receipt of the batch).

At each kill the killed broker's on-disk schedule log is replayed
(``ScheduleLog``) to print what was pending and in flight, and whether an
in-flight batch was already stored in its target (the re-send must then be
answered as a duplicate: the case exactly-once hinges on). The summary also
prints lateness and, per partition, the longest pause between deliveries
relative to the kills. Run with ``-s`` to see it.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import Broker, unique_topic
from compat_tests._cluster import Cluster, diagnostics
from kcompat.broker.controller.internal_topics import partition_for
from kcompat.ext.schedule_log import SCHEDULE_TOPIC, ScheduleLog, internal_producer_id
from kcompat.wire import batch as wbatch
from kcompat.wire.records import decode_batch

RECORDS = 3000
PARTITIONS = 3
SCHEDULE_PARTITIONS = 3
DELAY_HEADER = "kc-delay-ms"
SCHEDULED_OFFSET = "kc-scheduled-offset"
EARLY_SLACK_MS = 20  # clock rounding: CreateTime and our wall clock are in ms
WAIT_ALL_S = 40.0
CHUNK = 250


def delay_of(i: int, low_ms: int, high_ms: int) -> int | None:
    """Record ``i``'s delay: none for one in ten, else spread over [low, high]."""
    if i % 10 == 0:
        return None
    return low_ms + (i * 7919) % (high_ms - low_ms + 1)


@dataclass(frozen=True)
class Sent:
    partition: int
    offset: int  # the hole, for a delayed record
    timestamp_ms: int
    delay_ms: int | None
    value: bytes


@dataclass(frozen=True)
class Seen:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    first_seen_ms: int = 0

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


def produce_all(bootstrap: str, topic: str, low_ms: int, high_ms: int,
                ack_lag: list[int]) -> dict[bytes, Sent]:
    """Every record acknowledged, by key; ``ack_lag[0]`` becomes the longest time
    from a record's CreateTime to its acknowledgement (the early check's blur)."""
    sent: dict[bytes, Sent] = {}
    failures: list[str] = []
    delays: dict[bytes, int | None] = {}

    def report(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(f"{msg.key()!r}: {err}")
            return
        sent[msg.key()] = Sent(msg.partition(), msg.offset(), msg.timestamp()[1],
                               delays[msg.key()], msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000,
                         "log_level": 0})
    # Records 0 and 1 first (1 is delayed: it creates __kc_schedule), then chunks, each acknowledged
    # before the next is produced, so that the broker's receipt (its due time is
    # receipt + delay) stays close to the CreateTime the early check counts from.
    starts = [0, 2, *range(2 + CHUNK, RECORDS, CHUNK)]
    for lo, hi in zip(starts, [*starts[1:], RECORDS], strict=True):
        for i in range(lo, hi):
            key = f"k{i:05d}".encode()
            delay = delays[key] = delay_of(i, low_ms, high_ms)
            headers = [("app", f"h{i}".encode())]
            if delay is not None:
                headers.append((DELAY_HEADER, str(delay).encode()))
            producer.produce(topic, key=key, value=f"v{i}".encode(), headers=headers,
                             partition=i % PARTITIONS, on_delivery=report)
        assert producer.flush(60) == 0, "records still unacknowledged after 60 s"
        acked_ms = int(time.time() * 1000)
        for i in range(lo, hi):
            found = sent.get(f"k{i:05d}".encode())
            if found is not None:
                ack_lag[0] = max(ack_lag[0], acked_ms - found.timestamp_ms)
    assert not failures, f"{len(failures)} produce failures, e.g. {failures[:5]}"
    assert len(sent) == RECORDS
    return sent


class Watcher(threading.Thread):
    """A consumer reading every partition from offset 0 all along, noting the
    wall-clock time it first saw each record."""

    def __init__(self, bootstrap: str, topic: str, delayed_keys: set[bytes]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.delayed_keys = bootstrap, topic, delayed_keys
        self.lock = threading.Lock()
        self.by_offset: dict[tuple[int, int], Seen] = {}
        self.keys: set[bytes] = set()
        self.delivered: set[bytes] = set()
        self.conflicts: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": f"watch-{uuid.uuid4().hex}",
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "isolation.level": "read_committed", "fetch.wait.max.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000, "log_level": 0})
            try:
                consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
                while not self.stop.is_set():
                    msg = consumer.poll(0.1)
                    if msg is None:
                        continue
                    if msg.error() is not None:
                        if len(self.errors) < 100:
                            self.errors.append(str(msg.error()))
                        continue
                    self._note(msg)
            finally:
                consumer.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.failure = e

    def _note(self, msg) -> None:  # type: ignore[no-untyped-def]
        now = int(time.time() * 1000)
        seen = Seen(msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1], now)
        where = (msg.partition(), msg.offset())
        with self.lock:
            before = self.by_offset.get(where)
            if before is None:
                self.by_offset[where] = seen
            elif (before.key, before.headers) != (seen.key, seen.headers):
                self.conflicts.append(f"p{where[0]} offset {where[1]} read as {before.key!r} "
                                      f"and later as {seen.key!r}")
            self.keys.add(seen.key)
            if seen.header(SCHEDULED_OFFSET) is not None:
                self.delivered.add(seen.key)

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return len(self.keys), len(self.delivered & self.delayed_keys)


def read_all(bootstrap: str, topic: str, timeout_s: float = 30.0
             ) -> dict[tuple[int, int], Seen]:
    """Every record of ``topic``, from offset 0 to the high watermark each
    partition has when reading starts (empty batches and holes included)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "log_level": 0})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: dict[tuple[int, int], Seen] = {}
        done: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"final read incomplete: ends {ends}, " \
                                                f"done {sorted(done)}, read {len(out)}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            p = msg.partition()
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= ends[p]:
                    done.add(p)
                continue
            if msg.offset() < ends[p]:
                out[(p, msg.offset())] = Seen(msg.key(), msg.value(), tuple(msg.headers() or ()),
                                              msg.timestamp()[1])
        return out
    finally:
        consumer.close()


# -- the schedule log as a broker has it on disk -------------------------------------------

def batches_on_disk(data_dir: Path, topic: str, index: int
                    ) -> Iterator[tuple[wbatch.BatchHeader, memoryview]]:
    """Every whole batch in the segment files of ``topic``-``index`` under
    ``data_dir`` (what recovery would find, uncommitted tail included)."""
    for path in sorted((data_dir / f"{topic}-{index}").glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + wbatch.HEADER_SIZE <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            end = pos + 12 + length
            if length <= 0 or data[pos + 16] != 2 or end > len(data):
                break  # preallocated zeros or a torn tail
            view = memoryview(data)[pos:end]
            yield wbatch.parse_header(view), view
            pos = end


def schedule_on_disk(data_dir: Path, index: int) -> ScheduleLog:
    """``__kc_schedule``-``index`` as the broker with ``data_dir`` has it."""
    slog = ScheduleLog()
    for header, view in batches_on_disk(data_dir, SCHEDULE_TOPIC, index):
        if not header.is_control and header.records_count:
            slog.apply_batch(decode_batch(view))
    return slog


def describe_schedule(data_dir: Path, indexes: set[int]) -> str:
    """Pending and in-flight entries per schedule partition and, for a
    delivery in flight, whether its batch is already in the target partition
    (then a new leader's re-send must be answered as a duplicate)."""
    parts = []
    for index in sorted(indexes):
        slog = schedule_on_disk(data_dir, index)
        flying = []
        for (topic, p), d in slog.inflight.items():
            stored = any(h.producer_id == internal_producer_id(index)
                         and h.base_sequence == d.seq
                         for h, _v in batches_on_disk(data_dir, topic, p))
            flying.append(f"{len(d.entries)} to p{p} seq {d.seq} "
                          f"({'ALREADY STORED there' if stored else 'not stored there'})")
        parts.append(f"{SCHEDULE_TOPIC}-{index}: {len(slog.schedule)} pending, in flight: "
                     f"{', '.join(flying) or 'none'}")
    return "; ".join(parts)


def schedule_drained(data_dirs: list[Path], indexes: set[int]) -> bool:
    for data_dir in data_dirs:
        for index in indexes:
            slog = schedule_on_disk(data_dir, index)
            if len(slog) or slog.inflight:
                return False
    return True


# -- verification --------------------------------------------------------------------------

def verify(sent: dict[bytes, Sent], final: dict[tuple[int, int], Seen], watcher: Watcher
           ) -> list[str]:
    problems: list[str] = []
    where: dict[bytes, list[tuple[int, int]]] = {}
    for at, seen in final.items():
        where.setdefault(seen.key, []).append(at)
    holes = {(s.partition, s.offset) for s in sent.values() if s.delay_ms is not None}
    for key, s in sorted(sent.items()):
        found = where.get(key, [])
        if not found:
            problems.append(f"{key!r} (delay {s.delay_ms}, p{s.partition} hole/offset "
                            f"{s.offset}) lost")
            continue
        if len(found) > 1:
            problems.append(f"{key!r} duplicated at {sorted(found)}")
        for p, off in found:
            rec = final[(p, off)]
            if p != s.partition:
                problems.append(f"{key!r} in p{p}, produced to p{s.partition}")
            if rec.value != s.value or rec.timestamp_ms != s.timestamp_ms:
                problems.append(f"{key!r} at p{p}@{off}: value/timestamp {rec.value!r}/"
                                f"{rec.timestamp_ms} != produced {s.value!r}/{s.timestamp_ms}")
            if rec.header("app") is None:
                problems.append(f"{key!r} at p{p}@{off} lost its own header")
            if s.delay_ms is None:
                if off != s.offset or rec.header(SCHEDULED_OFFSET) is not None:
                    problems.append(f"ordinary {key!r} at p{p}@{off} (produced at {s.offset}, "
                                    f"headers {rec.headers})")
                continue
            if rec.header(SCHEDULED_OFFSET) != str(s.offset).encode():
                problems.append(f"delayed {key!r} at p{p}@{off}: {SCHEDULED_OFFSET}="
                                f"{rec.header(SCHEDULED_OFFSET)!r}, hole is {s.offset}")
            if off <= s.offset:
                problems.append(f"delayed {key!r} at p{p}@{off}, not after its hole {s.offset}")
            if rec.header(DELAY_HEADER) != str(s.delay_ms).encode():
                problems.append(f"delayed {key!r} at p{p}@{off} lost {DELAY_HEADER}")
    for at, seen in final.items():
        if seen.key not in sent:
            problems.append(f"unexpected record {seen.key!r} at p{at[0]}@{at[1]}")
        if at in holes:
            problems.append(f"a record ({seen.key!r}) at hole p{at[0]}@{at[1]}")
    with watcher.lock:
        observed = dict(watcher.by_offset)
        problems += watcher.conflicts
    early = []
    for at, seen in observed.items():
        if at in holes:
            problems.append(f"the consumer read a record ({seen.key!r}) at hole p{at[0]}@{at[1]}")
        rec = final.get(at)
        if rec is None or rec.key != seen.key:
            problems.append(f"the consumer read {seen.key!r} at p{at[0]}@{at[1]}; the final log "
                            f"has {rec.key if rec else None!r} there")
        s = sent.get(seen.key)
        if s is not None and s.delay_ms is not None and seen.header(SCHEDULED_OFFSET):
            due = s.timestamp_ms + s.delay_ms
            if seen.first_seen_ms < due - EARLY_SLACK_MS:
                early.append(f"{seen.key!r} seen {due - seen.first_seen_ms} ms before due")
    problems += early
    return problems


def lateness_summary(sent: dict[bytes, Sent], watcher: Watcher,
                     kills: list[tuple[str, int]]) -> list[str]:
    """Lateness of the delivered records as the consumer saw them, and per
    partition the longest pause between two deliveries, placed against the
    kills (delays are spread evenly, so a long pause is a stalled delivery)."""
    with watcher.lock:
        seen = [(p, s) for (p, _o), s in watcher.by_offset.items()
                if s.key in sent and s.header(SCHEDULED_OFFSET)]
    if not seen:
        return ["no delivered record seen"]
    late = sorted(s.first_seen_ms - sent[s.key].timestamp_ms - (sent[s.key].delay_ms or 0)
                  for _p, s in seen)
    lines = [f"seen after CreateTime+delay: min {late[0]} ms, median {late[len(late) // 2]} "
             f"ms, max {late[-1]} ms"]

    def at(ms: int) -> str:
        before = [(name, t) for name, t in kills if t <= ms]
        if not before:
            return f"{(ms - kills[0][1]) / 1000:+.1f} s from kill 1" if kills else f"{ms}"
        name, t = before[-1]
        return f"{(ms - t) / 1000:+.1f} s from {name}"

    for p in range(PARTITIONS):
        times = sorted(s.first_seen_ms for q, s in seen if q == p)
        if len(times) < 2:
            continue
        gap, start = max((b - a, a) for a, b in zip(times, times[1:], strict=False))
        worst = max((s.first_seen_ms - sent[s.key].timestamp_ms - (sent[s.key].delay_ms or 0))
                    for q, s in seen if q == p)
        lines.append(f"p{p}: longest pause between deliveries {gap / 1000:.1f} s (from "
                     f"{at(start)} to {at(start + gap)}), max lateness {worst} ms")
    return lines


def wait_for(cond: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@contextlib.contextmanager
def watching(bootstrap: str, topic: str, sent: dict[bytes, Sent]) -> Iterator[Watcher]:
    watcher = Watcher(bootstrap, topic, {k for k, s in sent.items() if s.delay_ms is not None})
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop.set()
        watcher.join(15)


@dataclass
class Run:
    topic: str
    sent: dict[bytes, Sent]
    watcher: Watcher
    schedule_indexes: set[int]
    data_dirs: list[Path]
    events: list[str] = field(default_factory=list)
    kills: list[tuple[str, int]] = field(default_factory=list)  # (name, wall ms)

    @property
    def delayed(self) -> int:
        return sum(1 for s in self.sent.values() if s.delay_ms is not None)

    def schedules(self) -> str:
        return "\n    ".join(f"{d.parent.name}: {describe_schedule(d, self.schedule_indexes)}"
                              for d in self.data_dirs)

    def wait_delivered(self, fraction: float, timeout_s: float = 30.0) -> None:
        assert wait_for(lambda: self.watcher.counts()[1] >= fraction * self.delayed, timeout_s), (
            f"{timeout_s:.0f} s without {fraction:.0%} of the delayed records delivered: the "
            f"consumer saw {self.watcher.counts()[1]}/{self.delayed}; on disk:\n    "
            f"{self.schedules()}")

    def not_yet_due(self, at_ms: int) -> int:
        return sum(1 for s in self.sent.values()
                   if s.delay_ms is not None and s.timestamp_ms + s.delay_ms > at_ms)

    def note_kill(self, what: str, data_dir: Path) -> int:
        now = int(time.time() * 1000)
        self.kills.append((f"kill {len(self.kills) + 1}", now))
        seen = self.watcher.counts()[1]
        pending = self.not_yet_due(now + 300)
        self.events.append(f"kill {len(self.kills)}: kill -9 {what}: consumer had seen "
                           f"{seen}/{self.delayed} delivered, {pending} not due for 300 ms "
                           f"more; its disk: "
                           f"{describe_schedule(data_dir, self.schedule_indexes)}")
        return pending

    def finish(self, bootstrap: str) -> None:
        """Wait for every key and drained schedule logs, read everything
        again, and verify (a stall is reported with the records it lost)."""
        stalls = []
        if not wait_for(lambda: self.watcher.counts()[0] >= RECORDS
                        or self.watcher.failure is not None, WAIT_ALL_S):
            stalls.append(f"{WAIT_ALL_S:.0f} s after the last restart the consumer had seen "
                          f"{self.watcher.counts()[0]}/{RECORDS} keys; schedule logs on disk:"
                          f"\n    {self.schedules()}")
        assert self.watcher.failure is None, f"consumer failed: {self.watcher.failure!r}"
        if not wait_for(lambda: schedule_drained(self.data_dirs, self.schedule_indexes),
                        1 if stalls else 20):
            stalls.append(f"schedule logs not drained:\n    {self.schedules()}")
        time.sleep(0.5)  # a stray re-send would land now
        final = read_all(bootstrap, self.topic)
        time.sleep(0.3)  # the watcher catches up with what read_all saw
        self.watcher.stop.set()
        self.watcher.join(15)
        for event in self.events:
            print("  " + event)
        for line in lateness_summary(self.sent, self.watcher, self.kills):
            print(f"  {line}")
        print(f"  final log: {len(final)} records over {PARTITIONS} partitions; consumer errors "
              f"seen: {len(self.watcher.errors)} {self.watcher.errors[:3]}")
        problems = stalls + verify(self.sent, final, self.watcher)
        assert not problems, f"{len(problems)} problems, e.g.\n  " + "\n  ".join(problems[:20])


# -- the tests -----------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_single_node_kill9(tmp_path: Path) -> None:
    started = time.monotonic()
    broker = Broker(tmp_path / "broker", extra_args=(
        "--admin-port", "-1",
        "--set", f"kc.schedule.topic.num.partitions={SCHEDULE_PARTITIONS}"))
    broker.start()
    try:
        topic = unique_topic("delayed-chaos")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=20)
        ack_lag = [0]
        sent = produce_all(broker.bootstrap, topic, 2000, 6000, ack_lag)
        print(f"\n  produced {RECORDS} in {time.monotonic() - started:.1f} s since start; "
              f"CreateTime to ack at most {ack_lag[0]} ms")
        indexes = {partition_for(f"{topic}-{p}", SCHEDULE_PARTITIONS) for p in range(PARTITIONS)}
        with watching(broker.bootstrap, topic, sent) as watcher:
            run = Run(topic, sent, watcher, indexes, [broker.data_dir])
            for fraction in (0.3, 0.6):
                run.wait_delivered(fraction)
                broker.kill()
                pending = run.note_kill(f"the broker at {fraction:.0%}", broker.data_dir)
                if fraction == 0.3:
                    assert pending > 0, "test timing: nothing left to deliver at the kill"
                broker.start()
            run.finish(broker.bootstrap)
        print(f"  single node: {time.monotonic() - started:.1f} s")
    except BaseException:
        print(f"\n===== broker {broker.log_path}\n{broker.tail(60)}")
        raise
    finally:
        broker.close()


@pytest.mark.timeout(180)
def test_cluster_kill9(tmp_path: Path) -> None:
    started = time.monotonic()
    cluster = Cluster(tmp_path, extra_args=(
        "--set", "kc.schedule.topic.replication.factor=3",
        "--set", f"kc.schedule.topic.num.partitions={SCHEDULE_PARTITIONS}"))
    try:
        with diagnostics(cluster):
            cluster.start()
            topic = unique_topic("delayed-chaos")
            cluster.create_topic(topic, PARTITIONS, 3)
            ack_lag = [0]
            sent = produce_all(cluster.bootstrap, topic, 3000, 9000, ack_lag)
            print(f"\n  produced {RECORDS} in {time.monotonic() - started:.1f} s since start; "
                  f"CreateTime to ack at most {ack_lag[0]} ms")
            index_of = {p: partition_for(f"{topic}-{p}", SCHEDULE_PARTITIONS)
                        for p in range(PARTITIONS)}
            indexes = set(index_of.values())
            cluster.wait_for_leaders(SCHEDULE_TOPIC, SCHEDULE_PARTITIONS)
            with watching(cluster.bootstrap, topic, sent) as watcher:
                run = Run(topic, sent, watcher, indexes,
                          [b.data_dir for b in cluster.brokers.values()])

                def kill(victim: int, why: str, fraction: float) -> int:
                    broker = cluster.brokers[victim]
                    broker.kill()
                    killed = time.monotonic()
                    pending = run.note_kill(f"broker {victim} ({why}) at {fraction:.0%}",
                                            broker.data_dir)
                    cluster.wait_for_leaders(topic, PARTITIONS, exclude=victim)
                    cluster.wait_for_leaders(SCHEDULE_TOPIC, SCHEDULE_PARTITIONS, exclude=victim)
                    run.events.append(f"  new leaders after {time.monotonic() - killed:.2f} s")
                    time.sleep(0.3)
                    broker.start()
                    cluster.wait_for_brokers()
                    return pending

                # 1: the leader of the schedule partition that delivers to p0
                run.wait_delivered(0.25)
                sched = cluster.wait_for_leaders(SCHEDULE_TOPIC, SCHEDULE_PARTITIONS)
                target = cluster.wait_for_leaders(topic, PARTITIONS)
                victim = sched[index_of[0]]
                pending = kill(victim, f"leader of {SCHEDULE_TOPIC}-{index_of[0]} delivering to "
                                       f"p0; target leaders {target}, schedule leaders {sched}",
                               0.25)
                assert pending > 0, "test timing: nothing left to deliver at the first kill"
                # 2: the leader of a target partition whose deliveries come from another broker
                run.wait_delivered(0.55)
                sched = cluster.wait_for_leaders(SCHEDULE_TOPIC, SCHEDULE_PARTITIONS)
                target = cluster.wait_for_leaders(topic, PARTITIONS)
                p = next((q for q in range(PARTITIONS) if target[q] != sched[index_of[q]]), 0)
                if run.not_yet_due(int(time.time() * 1000) + 500) > 0:
                    kill(target[p], f"leader of p{p}, its schedule partition "
                                    f"{index_of[p]} led by {sched[index_of[p]]}", 0.55)
                else:
                    run.events.append("second kill skipped: everything was already due")
                run.finish(cluster.live_bootstrap())
        print(f"  cluster: {time.monotonic() - started:.1f} s")
    finally:
        cluster.close()
