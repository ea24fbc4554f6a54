"""Delayed delivery (docs/extensions.md) seen through real clients: what the
``test_delayed_delivery`` suite sends, how each client sends and reads it, and
the checks on what a plain consumer observes.

A record is described by a ``Spec`` (its headers as sent, ``kc-*`` included).
``produce`` sends specs with kafka-python, confluent-kafka or aiokafka — in
this process, against the broker subprocess, as the other client suites do —
and answers one ``Sent`` per spec: the offset the broker acknowledged (for a
delayed record: its hole), or the error, with the wall-clock times of the send
and of the last acknowledgement. ``reader`` opens the same client's consumer
(no group, assigned from the log start); ``observe`` polls it, noting when each
record was first seen, and ``check_delivery`` compares the sightings with what
was sent:

* a plain record is seen once, at its acknowledged offset, byte-identical;
* a delayed record is seen once, never before it was due (the broker computes
  the due time from its clock at append, between our send and our ack; same
  machine, same clock), at a new offset above its hole, with its key, value,
  headers and timestamp and one more header ``kc-scheduled-offset`` naming the
  hole;
* nothing is seen at a hole, nothing is seen twice, nothing unknown is seen.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._records import TIMEOUT_MS, TIMEOUT_S, Header, Seen, norm_headers

DELAY_MS = "kc-delay-ms"
DELIVER_AT = "kc-deliver-at"
SCHEDULE_ID = "kc-schedule-id"
CANCEL = "kc-cancel-schedule"
SCHEDULED_OFFSET = "kc-scheduled-offset"

CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka")
#: how long after its due time a delayed record may take to show up before the
#: test gives up (generous: a loaded 2-core machine running three brokers)
LATE_MS = 15_000
#: plain records acknowledged must be readable before the first delayed record
#: of the call is due, within this at most, and are granted at least the floor
#: (acks=1 at rf3: the high watermark passes them a moment after the ack)
AT_ONCE_MS = 3_000
AT_ONCE_FLOOR_MS = 500

T = TypeVar("T")


def now_ms() -> int:
    """The broker's clock (``time.time_ns() // 1e6``), on the same machine."""
    return time.time_ns() // 1_000_000


# -- what is sent ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    partition: int
    key: bytes | None
    value: bytes  # unique per test: it identifies the record when seen
    headers: tuple[Header, ...] = ()  # as sent, kc-* included
    timestamp: int = 0

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)

    @property
    def delay_ms(self) -> int | None:
        v = self.header(DELAY_MS)
        return int(v) if v is not None else None

    @property
    def deliver_at(self) -> int | None:
        v = self.header(DELIVER_AT)
        return int(v) if v is not None else None

    @property
    def delayed(self) -> bool:
        return self.delay_ms is not None or self.deliver_at is not None

    @property
    def cancel(self) -> bool:
        return self.header(CANCEL) is not None


def plain(partition: int, key: bytes | None, value: bytes, ts: int,
          headers: Iterable[Header] = ()) -> Spec:
    return Spec(partition, key, value, tuple(headers), ts)


def delayed(partition: int, key: bytes | None, value: bytes, ts: int, delay_ms: int,
            headers: Iterable[Header] = (), schedule_id: str | None = None) -> Spec:
    extra: tuple[Header, ...] = ((SCHEDULE_ID, schedule_id.encode()),) if schedule_id else ()
    return Spec(partition, key, value,
                (*headers, (DELAY_MS, str(delay_ms).encode()), *extra), ts)


def deliver_at(partition: int, key: bytes | None, value: bytes, ts: int, at_ms: int,
               headers: Iterable[Header] = ()) -> Spec:
    return Spec(partition, key, value, (*headers, (DELIVER_AT, str(at_ms).encode())), ts)


def cancel(partition: int, schedule_id: str, value: bytes, ts: int) -> Spec:
    return Spec(partition, b"cancel", value, ((CANCEL, schedule_id.encode()),), ts)


@dataclass(frozen=True)
class Sent:
    spec: Spec
    offset: int | None  # acknowledged offset (a delayed record's hole); None on error
    error: BaseException | Any | None  # the client's exception / KafkaError
    sent_ms: int  # wall clock just before the client was handed the record
    acked_ms: int  # wall clock once every record of the call was answered

    @property
    def due_lower(self) -> int:
        """The earliest the broker may have made it due."""
        at = self.spec.deliver_at
        if at is not None:
            return at
        assert self.spec.delay_ms is not None
        return self.sent_ms + self.spec.delay_ms

    @property
    def due_upper(self) -> int:
        at = self.spec.deliver_at
        if at is not None:
            return at
        assert self.spec.delay_ms is not None
        return self.acked_ms + self.spec.delay_ms


def assert_acked(sent: Sequence[Sent], client: str) -> None:
    """Every record acknowledged, and the acknowledged offsets of each partition
    consecutive in send order (a hole keeps its offset)."""
    failed = [(s.spec.value, str(s.error)) for s in sent if s.error is not None or s.offset is None]
    assert not failed, f"{client}: {len(failed)} of {len(sent)} sends failed, e.g. {failed[:5]}"
    last: dict[int, int] = {}
    for s in sent:
        p = s.spec.partition
        assert s.offset is not None
        if p in last:
            assert s.offset == last[p] + 1, (
                f"{client}: partition {p}: {s.spec.value!r} acknowledged at offset {s.offset} "
                f"after {last[p]}: acknowledged offsets must be consecutive (holes keep theirs)")
        last[p] = s.offset


# -- producing with each client --------------------------------------------------------


def produce(client: str, bootstrap: str, topic: str, specs: Sequence[Spec],
            **config: Any) -> list[Sent]:
    """Send ``specs`` (in order) with one producer of ``client`` and wait for every
    answer. ``config`` is the client's own producer configuration."""
    fn = {"kafka-python": _produce_kafka_python, "confluent-kafka": _produce_confluent,
          "aiokafka": _produce_aiokafka}[client]
    return fn(bootstrap, topic, specs, config)


def _produce_kafka_python(bootstrap: str, topic: str, specs: Sequence[Spec],
                          config: dict[str, Any]) -> list[Sent]:
    from kafka import KafkaProducer

    cfg: dict[str, Any] = {"bootstrap_servers": bootstrap, "request_timeout_ms": 20_000,
                           "delivery_timeout_ms": TIMEOUT_MS, "max_block_ms": TIMEOUT_MS}
    cfg.update(config)
    p = KafkaProducer(**cfg)
    try:
        p.partitions_for(topic)  # metadata first: the send times are the sends'
        futures, sent_at = [], []
        for s in specs:
            sent_at.append(now_ms())
            futures.append(p.send(topic, key=s.key, value=s.value, headers=list(s.headers),
                                  partition=s.partition, timestamp_ms=s.timestamp))
        p.flush(timeout=TIMEOUT_S)
        outcomes: list[tuple[int | None, BaseException | None]] = []
        for f in futures:
            try:
                outcomes.append((f.get(timeout=TIMEOUT_S).offset, None))
            except Exception as e:  # noqa: BLE001 - the test judges it
                outcomes.append((None, e))
        acked = now_ms()
    finally:
        p.close(timeout=TIMEOUT_S)
    return [Sent(s, off, err, t, acked)
            for s, (off, err), t in zip(specs, outcomes, sent_at, strict=True)]


def _produce_confluent(bootstrap: str, topic: str, specs: Sequence[Spec],
                       config: dict[str, Any]) -> list[Sent]:
    from confluent_kafka import Producer

    fatal: list[str] = []
    cfg: dict[str, Any] = {"bootstrap.servers": bootstrap,
                           "error_cb": lambda e: fatal.append(str(e)) if e.fatal() else None}
    cfg.update(config)
    p = Producer(cfg)
    p.list_topics(topic, timeout=TIMEOUT_S)
    reports: dict[int, tuple[Any, Any]] = {}
    sent_at = []
    for i, s in enumerate(specs):
        def on_delivery(err: Any, msg: Any, i: int = i) -> None:
            reports[i] = (err, msg)

        sent_at.append(now_ms())
        p.produce(topic, key=s.key, value=s.value, headers=list(s.headers) or None,
                  partition=s.partition, timestamp=s.timestamp, on_delivery=on_delivery)
        p.poll(0)
    left = p.flush(TIMEOUT_S)
    acked = now_ms()
    assert left == 0, f"confluent-kafka: {left} records still undelivered after {TIMEOUT_S} s"
    assert not fatal, f"confluent-kafka: fatal producer errors {fatal}"
    assert sorted(reports) == list(range(len(specs))), (
        f"confluent-kafka: delivery reports for {len(reports)} of {len(specs)} records")
    out = []
    for i, s in enumerate(specs):
        err, msg = reports[i]
        out.append(Sent(s, msg.offset() if err is None else None, err, sent_at[i], acked))
    return out


def _run(make: Callable[[], Awaitable[T]], loop: asyncio.AbstractEventLoop | None = None,
         timeout: float = 90.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(make(), timeout)
    if loop is None:
        return asyncio.run(bounded())
    return loop.run_until_complete(bounded())


def _produce_aiokafka(bootstrap: str, topic: str, specs: Sequence[Spec],
                      config: dict[str, Any]) -> list[Sent]:
    from aiokafka import AIOKafkaProducer

    async def main() -> list[Sent]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS, **config)
        await p.start()
        try:
            await p.partitions_for(topic)
            futures, sent_at = [], []
            for s in specs:
                sent_at.append(now_ms())
                futures.append(await p.send(topic, key=s.key, value=s.value,
                                            headers=list(s.headers) or None,
                                            partition=s.partition, timestamp_ms=s.timestamp))
            answers = await asyncio.gather(*futures, return_exceptions=True)
            acked = now_ms()
        finally:
            await p.stop()
        return [Sent(s, None if isinstance(a, BaseException) else a.offset,
                     a if isinstance(a, BaseException) else None, t, acked)
                for s, a, t in zip(specs, answers, sent_at, strict=True)]
    return _run(main)


# -- reading with each client ----------------------------------------------------------


class Reader:
    """A plain consumer of one client: no group, partitions assigned from the
    log start."""

    def poll(self, timeout_s: float) -> list[Seen]:
        raise NotImplementedError

    def positions(self) -> dict[int, int]:
        raise NotImplementedError

    def ends(self) -> dict[int, int]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reader(client: str, bootstrap: str, topic: str, partitions: Sequence[int]) -> Reader:
    cls = {"kafka-python": _KafkaPythonReader, "confluent-kafka": _ConfluentReader,
           "aiokafka": _AioReader}[client]
    return cls(bootstrap, topic, list(partitions))


class _KafkaPythonReader(Reader):
    def __init__(self, bootstrap: str, topic: str, partitions: list[int]) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.tps = [TopicPartition(topic, p) for p in partitions]
        self.c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                               enable_auto_commit=False, auto_offset_reset="earliest",
                               request_timeout_ms=TIMEOUT_MS, fetch_max_wait_ms=100)
        self.c.assign(self.tps)
        self.c.seek_to_beginning(*self.tps)

    def poll(self, timeout_s: float) -> list[Seen]:
        return [Seen(m.partition, m.offset, m.key, m.value, norm_headers(m.headers),
                     m.timestamp, m.timestamp_type)
                for records in self.c.poll(timeout_ms=int(timeout_s * 1000)).values()
                for m in records]

    def positions(self) -> dict[int, int]:
        return {tp.partition: self.c.position(tp) for tp in self.tps}

    def ends(self) -> dict[int, int]:
        return {tp.partition: o
                for tp, o in self.c.end_offsets(self.tps, timeout_ms=TIMEOUT_MS).items()}

    def close(self) -> None:
        self.c.close()


class _ConfluentReader(Reader):
    def __init__(self, bootstrap: str, topic: str, partitions: list[int]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.topic, self.partitions = topic, partitions
        self.c = Consumer({"bootstrap.servers": bootstrap,
                           "group.id": f"compat-delayed-{uuid.uuid4().hex[:8]}",
                           "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                           "socket.timeout.ms": TIMEOUT_MS, "log_level": 0})
        self.c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

    def poll(self, timeout_s: float) -> list[Seen]:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

        out = []
        for m in self.c.consume(num_messages=1000, timeout=timeout_s):
            if m.error() is not None:
                raise AssertionError(f"confluent-kafka: consumer error {m.error()}")
            ts_type, ts = m.timestamp()
            out.append(Seen(m.partition(), m.offset(), m.key(), m.value(),
                            norm_headers(m.headers()), ts,
                            {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}.get(ts_type)))
        return out

    def positions(self) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        return {tp.partition: tp.offset for tp in self.c.position(
            [TopicPartition(self.topic, p) for p in self.partitions])}

    def ends(self) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        return {p: self.c.get_watermark_offsets(TopicPartition(self.topic, p),
                                                timeout=TIMEOUT_S, cached=False)[1]
                for p in self.partitions}

    def close(self) -> None:
        self.c.close()


class _AioReader(Reader):
    """aiokafka's consumer on an event loop of its own, run only inside calls."""

    def __init__(self, bootstrap: str, topic: str, partitions: list[int]) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        self.loop = asyncio.new_event_loop()
        self.tps = [TopicPartition(topic, p) for p in partitions]

        async def start() -> AIOKafkaConsumer:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=100, request_timeout_ms=TIMEOUT_MS)
            await c.start()
            c.assign(self.tps)
            await c.seek_to_beginning(*self.tps)
            return c
        try:
            self.c = _run(start, self.loop)
        except BaseException:
            self.loop.close()
            raise

    def poll(self, timeout_s: float) -> list[Seen]:
        batch = _run(lambda: self.c.getmany(timeout_ms=int(timeout_s * 1000)), self.loop)
        return [Seen(m.partition, m.offset, m.key, m.value, norm_headers(m.headers),
                     m.timestamp, m.timestamp_type)
                for msgs in batch.values() for m in msgs]

    def positions(self) -> dict[int, int]:
        async def read() -> dict[int, int]:
            return {tp.partition: await self.c.position(tp) for tp in self.tps}
        return _run(read, self.loop)

    def ends(self) -> dict[int, int]:
        async def read() -> dict[int, int]:
            return {tp.partition: o for tp, o in (await self.c.end_offsets(self.tps)).items()}
        return _run(read, self.loop)

    def close(self) -> None:
        try:
            _run(self.c.stop, self.loop)
        finally:
            self.loop.close()


# -- observing and checking ------------------------------------------------------------


@dataclass
class Sightings:
    """Every record a reader returned, with the wall clock when it was returned."""

    rows: list[tuple[Seen, int]] = field(default_factory=list)

    def add(self, seen: Iterable[Seen]) -> None:
        t = now_ms()
        self.rows.extend((s, t) for s in seen)

    def of(self, value: bytes | None) -> list[tuple[Seen, int]]:
        return [r for r in self.rows if r[0].value == value]

    def values(self) -> set[bytes | None]:
        return {s.value for s, _t in self.rows}


def observe(rd: Reader, sent: Sequence[Sent], client: str, until_ms: int | None = None,
            plain_at_once: bool = True) -> Sightings:
    """Poll ``rd`` until every plain and delayed record of ``sent`` was seen (and,
    with ``until_ms``, at least until then), then up to the end offsets of that
    moment, so that a second copy already in the log shows too. With
    ``plain_at_once``, the plain records must all be seen before the first
    delayed record is due (``AT_ONCE_*``), whatever the delayed records of
    their batches."""
    want_plain = {s.spec.value for s in sent if not s.spec.delayed and not s.spec.cancel}
    want_delayed = {s.spec.value for s in sent if s.spec.delayed}
    acked = max(s.acked_ms for s in sent)
    seen = Sightings()
    if plain_at_once:
        first_due = min((s.due_lower for s in sent if s.spec.delayed), default=acked + AT_ONCE_MS)
        deadline = max(acked + AT_ONCE_FLOOR_MS, min(acked + AT_ONCE_MS, first_due))
        while not want_plain <= seen.values() and now_ms() < deadline:
            seen.add(rd.poll(0.1))
        missing = sorted(v for v in want_plain - seen.values() if v is not None)
        assert not missing, (
            f"{client}: plain records {missing[:5]} not readable {deadline - acked} ms after "
            f"their acknowledgement, when the first delayed record was due (positions "
            f"{rd.positions()}, ends {rd.ends()})")
    last_due = max((s.due_upper for s in sent if s.spec.delayed), default=acked)
    deadline = max(last_due + LATE_MS, acked + TIMEOUT_MS)
    while not (want_plain | want_delayed) <= seen.values() or (
            until_ms is not None and now_ms() < until_ms):
        if now_ms() > deadline:
            missing = sorted(v for v in (want_plain | want_delayed) - seen.values()
                             if v is not None)
            raise AssertionError(
                f"{client}: {len(missing)} records never seen, {LATE_MS} ms after the last "
                f"was due: {missing[:5]} (positions {rd.positions()}, ends {rd.ends()}, "
                f"seen {len(seen.rows)})")
        seen.add(rd.poll(0.1))
    ends = rd.ends()
    settle = time.monotonic() + 2.0
    while time.monotonic() < settle:
        pos = rd.positions()
        if all(pos.get(p, -1) >= e for p, e in ends.items()):
            break
        seen.add(rd.poll(0.1))
    return seen


def check_delivery(sent: Sequence[Sent], seen: Sightings, client: str,
                   never: Sequence[Sent] = ()) -> None:
    """The contract (module docstring) for every record of ``sent``; the records
    of ``never`` (cancelled) and the cancellations must not be seen at all, and
    their offsets stay holes."""
    for s in never:
        got = seen.of(s.spec.value)
        assert not got, f"{client}: {s.spec.value!r} must never be visible, seen at {got[0][0]}"
    known = {s.spec.value for s in sent}
    alien = sorted({v for v in seen.values() if v not in known}, key=repr)
    assert not alien, f"{client}: consumed records nobody sent: {alien[:5]}"
    holes: dict[int, set[int]] = {}
    for s in [*sent, *never]:
        if (s.spec.delayed or s.spec.cancel) and s.offset is not None:
            holes.setdefault(s.spec.partition, set()).add(s.offset)
    for row, _t in seen.rows:
        assert row.offset not in holes.get(row.partition, set()), (
            f"{client}: a record ({row.value!r}) is visible at partition {row.partition} "
            f"offset {row.offset}, a hole left by a delayed record or a cancellation")
    new_offset: dict[bytes, int] = {}
    for s in sent:
        spec, got = s.spec, seen.of(s.spec.value)
        where = f"{client}: {spec.value!r} (partition {spec.partition}, acknowledged at {s.offset})"
        assert s.offset is not None, f"{where}: was not acknowledged: {s.error}"
        if spec.cancel:
            assert not got, f"{where}: a kc-cancel-schedule record is visible: {got[0][0]}"
            continue
        assert len(got) == 1, (
            f"{where}: seen {len(got)} times, expected exactly once: "
            f"{[(r.partition, r.offset) for r, _t in got]}")
        row, at = got[0]
        assert row.partition == spec.partition, f"{where}: seen in partition {row.partition}"
        assert row.key == spec.key, f"{where}: key {row.key!r} != sent {spec.key!r}"
        assert row.timestamp == spec.timestamp, (
            f"{where}: timestamp {row.timestamp} != sent CreateTime {spec.timestamp}")
        if row.timestamp_type is not None:
            assert row.timestamp_type == 0, f"{where}: timestamp type {row.timestamp_type}"
        if not spec.delayed:
            assert row.offset == s.offset, f"{where}: seen at offset {row.offset}"
            assert row.headers == spec.headers, (
                f"{where}: headers {row.headers!r} != sent {spec.headers!r}")
            continue
        assert row.offset > s.offset, (
            f"{where}: delivered at offset {row.offset}, not after its hole {s.offset}")
        marks = [v for k, v in row.headers if k == SCHEDULED_OFFSET]
        assert marks == [str(s.offset).encode()], (
            f"{where}: {SCHEDULED_OFFSET} headers {marks}, expected [{str(s.offset)!r}] "
            f"(headers {row.headers!r})")
        rest = tuple(h for h in row.headers if h[0] != SCHEDULED_OFFSET)
        assert rest == spec.headers, (
            f"{where}: headers {rest!r} (besides {SCHEDULED_OFFSET}) != sent {spec.headers!r}")
        assert at >= s.due_lower, (
            f"{where}: visible at {at}, {s.due_lower - at} ms before it was due "
            f"(sent at {s.sent_ms}, delay {spec.delay_ms}, deliver-at {spec.deliver_at})")
        new_offset[spec.value] = row.offset
    # Visibility order = offset order: what was surely due earlier sits lower, and
    # a plain record acknowledged before a delayed one was due sits below it.
    delayed_sent = [s for s in sent if s.spec.delayed]
    for a in delayed_sent:
        for b in delayed_sent:
            if a.spec.partition == b.spec.partition and a.due_upper < b.due_lower:
                assert new_offset[a.spec.value] < new_offset[b.spec.value], (
                    f"{client}: {a.spec.value!r} (due by {a.due_upper}) delivered at offset "
                    f"{new_offset[a.spec.value]}, after {b.spec.value!r} (due from "
                    f"{b.due_lower}) at {new_offset[b.spec.value]}")
        for p in sent:
            if (not p.spec.delayed and not p.spec.cancel and p.offset is not None
                    and p.spec.partition == a.spec.partition and p.acked_ms < a.due_lower):
                assert p.offset < new_offset[a.spec.value], (
                    f"{client}: plain {p.spec.value!r} at offset {p.offset}, after "
                    f"{a.spec.value!r} delivered at {new_offset[a.spec.value]} though it was "
                    f"acknowledged before that one was due")
