"""Filtered views (docs/extensions.md, issue 15) seen through real clients: what the
``test_views`` suite produces to a source topic, how each client reads a view
and its source in a consumer group, and the checks.

The oracle is independent of the broker's filter code (``kcompat.ext.view_filter``):
each view's expression has a hand-written Python twin over the headers as a
client read them (``FILTERS``), with the language's documented semantics — a
repeated header reads its last value, a missing header or a null value is NULL,
a value compared with a number is read as a number (no number: no match), SQL's
three-valued logic. ``check_phase`` compares what one client read of each view
with the same client's read of the source, filtered client-side.

Records are produced with confluent-kafka, each call one batch per partition
(``linger.ms``) plus a trailing batch per partition that no view matches (so a
view's partitions end with holes and empty batches, and a consumer's position
must still get past them).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from ._group_member import kafka_python_learn_topics
from ._records import TIMEOUT_S

#: header values as read (UTF-8 text, None for a null value)
Headers = tuple[tuple[str, str | None], ...]
Tri = bool | None  # SQL's three-valued logic: None is unknown

PARTITIONS = 3
VIEW_OF = "kc.view.of"
VIEW_FILTER = "kc.view.filter"
INVALID_TOPIC_EXCEPTION = 17
INVALID_PARTITIONS = 37
INVALID_CONFIG = 40
INVALID_REQUEST = 42
CLIENTS = ("kafka-python", "confluent-kafka", "java")
#: after the expected records arrived a reader polls this much longer (anything
#: extra a view wrongly delivers shows up in the same fetches)
SETTLE_S = 0.3


# -- the oracle ------------------------------------------------------------------------


def env(headers: Headers) -> dict[str, str | None]:
    """Header name -> its LAST value (Kafka's ``lastHeader``)."""
    out: dict[str, str | None] = {}
    for k, v in headers:
        out[k] = v
    return out


def number(v: str | None) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        return None


def tri_and(a: Tri, b: Tri) -> Tri:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def tri_or(a: Tri, b: Tri) -> Tri:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def tri_not(a: Tri) -> Tri:
    return None if a is None else not a


def eq(v: str | None, lit: str) -> Tri:
    return None if v is None else v == lit


def gt(v: str | None, lit: float) -> Tri:
    n = number(v)
    return None if n is None else n > lit


def in_(v: str | None, lits: Sequence[str]) -> Tri:
    if v is None:
        return None
    return v in lits


def between(v: str | None, lo: float, hi: float) -> Tri:
    n = number(v)
    return None if n is None else lo <= n <= hi


@dataclass(frozen=True)
class ViewFilter:
    name: str
    expression: str
    oracle: Callable[[dict[str, str | None]], Tri]

    def matches(self, headers: Headers) -> bool:
        return self.oracle(env(headers)) is True


FILTERS = (
    ViewFilter("eu-big", "region = 'eu' AND amount > 100",
               lambda e: tri_and(eq(e.get("region"), "eu"), gt(e.get("amount"), 100))),
    ViewFilter("tags-ab", "TAGS IN ('a','b')",
               lambda e: in_(e.get("kc-tag"), ("a", "b"))),
    ViewFilter("no-region", "region IS NULL",
               lambda e: e.get("region") is None),
)
#: the filter the AlterConfigs test starts its view with, and the one it sets
ALTER_FROM = ViewFilter("tag-c", "kc-tag = 'c'", lambda e: eq(e.get("kc-tag"), "c"))
ALTER_TO = ViewFilter(
    "between-or-not-in", "amount BETWEEN 100 AND 200 OR NOT region IN ('eu', 'us')",
    lambda e: tri_or(between(e.get("amount"), 100, 200),
                     tri_not(in_(e.get("region"), ("eu", "us")))))


# -- what is produced --------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    partition: int
    offset: int
    key: str
    headers: Headers


@dataclass(frozen=True)
class Got:
    """One record as a client read it."""

    topic: str
    partition: int
    offset: int
    key: str | None
    headers: Headers


REGIONS: tuple[str | None, ...] = ("eu", "us", "apac", None)
AMOUNTS: tuple[str | None, ...] = ("50", "100", "101", "100.5", "250", "-7", "abc", None)
TAGS: tuple[str | None, ...] = ("a", "b", "c", None)


def make_headers(rng: random.Random, i: int) -> Headers:
    """A mix of region / amount / kc-tag headers; every few records an edge
    case: region twice (the last one counts), region with a null value, an
    unrelated header only."""
    h: list[tuple[str, str | None]] = []
    region = REGIONS[rng.randrange(len(REGIONS))]
    if i % 11 == 3:
        h.append(("region", "us"))  # overridden by the later value
    if region is not None:
        h.append(("region", region))
    elif i % 7 == 2:
        h.append(("region", None))  # a null value is NULL
    amount = AMOUNTS[rng.randrange(len(AMOUNTS))]
    if amount is not None:
        h.append(("amount", amount))
    tag = TAGS[rng.randrange(len(TAGS))]
    if tag is not None:
        h.append(("kc-tag", tag))
    if i % 5 == 0:
        h.append(("trace", f"t{i}"))
    return tuple(h)


#: the trailing batch of each call: matches none of FILTERS
TRAILER_HEADERS: Headers = (("region", "us"), ("amount", "50"), ("kc-tag", "c"))


def produce(bootstrap: str, topic: str, tag: str, per_partition: int, seed: int,
            compression: str = "none", trailer: int = 2) -> list[Produced]:
    """``per_partition`` mixed records to each partition (one batch each), then
    ``trailer`` records per partition no view matches (another batch); keys
    ``<tag>-<p>-<i>``. Returns what was acknowledged, in offset order per partition."""
    rng = random.Random(seed)
    acked: list[Produced] = []
    errors: list[str] = []
    sent: dict[str, Headers] = {}

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        key = msg.key().decode()
        acked.append(Produced(msg.partition(), msg.offset(), key, sent[key]))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": compression,
                  "enable.idempotence": True})
    n = 0
    for rows, headers_of in ((per_partition, lambda i: make_headers(rng, i)),
                             (trailer, lambda i: TRAILER_HEADERS)):
        for part in range(PARTITIONS):
            for _i in range(rows):
                key = f"{tag}-{part}-{n}"
                sent[key] = headers_of(n)
                p.produce(topic, key=key.encode(), value=f"v-{key}".encode(), partition=part,
                          headers=[(k, None if v is None else v.encode()) for k, v in sent[key]],
                          on_delivery=cb)
                n += 1
        left = p.flush(TIMEOUT_S)  # one batch per partition and round
        assert left == 0 and not errors, f"produce to {topic}: {left} undelivered, {errors[:3]}"
    return sorted(acked, key=lambda r: (r.partition, r.offset))


# -- reading in a group ------------------------------------------------------------------


def _confluent_poll(c: Any, got: list[Got]) -> Callable[[], None]:
    """One poll of a confluent-kafka consumer, its record appended to ``got``."""
    def poll() -> None:
        msg = c.poll(0.1)
        if msg is None:
            return
        assert msg.error() is None, f"confluent-kafka: consumer error {msg.error()}"
        got.append(Got(msg.topic(), msg.partition(), msg.offset(),
                       None if msg.key() is None else msg.key().decode(),
                       _headers(msg.headers())))
    return poll


def _headers(raw: Sequence[tuple[str, bytes | None]] | None) -> Headers:
    return tuple((str(k), None if v is None else bytes(v).decode()) for k, v in raw or ())


@dataclass
class GroupRead:
    records: list[Got]
    #: "topic:partition" -> committed offset after the read (None: nothing committed)
    committed: dict[str, int | None]
    timed_out: bool


def _until(expected: int, count: Callable[[], int], poll: Callable[[], None],
           timeout: float = TIMEOUT_S) -> bool:
    """Poll until ``expected`` records arrived, then ``SETTLE_S`` more; True if timed out."""
    deadline = time.monotonic() + timeout
    settle_until: float | None = None
    while True:
        now = time.monotonic()
        if settle_until is not None and now >= settle_until:
            return False
        if now >= deadline:
            return True
        poll()
        if settle_until is None and count() >= expected:
            settle_until = time.monotonic() + SETTLE_S


def read_kafka_python(bootstrap: str, group: str, topics: Sequence[str], expected: int) -> GroupRead:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    got: list[Got] = []
    c = KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      client_id=f"views-{group}")
    try:
        kafka_python_learn_topics(c, list(topics))  # kafka_python/FINDINGS.md

        def poll() -> None:
            for tp, recs in c.poll(timeout_ms=100).items():
                for r in recs:
                    got.append(Got(tp.topic, tp.partition, r.offset,
                                   None if r.key is None else r.key.decode(), _headers(r.headers)))
        timed_out = _until(expected, lambda: len(got), poll)
        c.commit()
        tps = [KTP(t, p) for t in topics for p in range(PARTITIONS)]
        committed = {f"{tp.topic}:{tp.partition}": c.committed(tp) for tp in tps}
    finally:
        c.close()
    return GroupRead(got, committed, timed_out)


def read_confluent(bootstrap: str, group: str, topics: Sequence[str], expected: int) -> GroupRead:
    got: list[Got] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "client.id": f"views-{group}"})
    try:
        c.subscribe(list(topics))
        timed_out = _until(expected, lambda: len(got), _confluent_poll(c, got))
        c.commit(asynchronous=False)
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        committed = {f"{tp.topic}:{tp.partition}": (tp.offset if tp.offset >= 0 else None)
                     for tp in c.committed(tps, timeout=TIMEOUT_S)}
    finally:
        c.close()
    return GroupRead(got, committed, timed_out)


def read_java(bootstrap: str, group: str, topics: Sequence[str], expected: int,
              clients_cp: str) -> GroupRead:
    from .java.conftest import PKG, run_java

    run = run_java(clients_cp, f"{PKG}.ViewRead", bootstrap, group, ",".join(topics),
                   str(expected), str(int(SETTLE_S * 1000)), str(int(TIMEOUT_S * 1000)),
                   timeout=TIMEOUT_S + 30)
    events = run.json_lines()
    errors = [e for e in events if e["event"] == "error"]
    assert not errors and run.returncode == 0, f"java: {errors[:1]}\n{run.explain()}"
    done = [e for e in events if e["event"] == "done"]
    assert len(done) == 1, run.explain()
    got = [Got(e["topic"], e["partition"], e["offset"], e["key"],
               tuple((k, v) for k, v in e["headers"]))
           for e in events if e["event"] == "record"]
    return GroupRead(got, done[0]["committed"], done[0]["timed_out"])


def group_read(client: str, bootstrap: str, group: str, topics: Sequence[str], expected: int,
               clients_cp: str | None = None) -> GroupRead:
    """One consumer of ``client`` in ``group`` subscribed to ``topics``: polls
    until ``expected`` records arrived (and ``SETTLE_S`` more), commits, closes."""
    if client == "kafka-python":
        return read_kafka_python(bootstrap, group, topics, expected)
    if client == "confluent-kafka":
        return read_confluent(bootstrap, group, topics, expected)
    assert client == "java" and clients_cp is not None
    return read_java(bootstrap, group, topics, expected, clients_cp)


def assign_read(bootstrap: str, topics: Sequence[str], expected: int,
                timeout: float = TIMEOUT_S) -> list[Got]:
    """A fresh confluent-kafka consumer without a group, every partition of
    ``topics`` from the beginning: what it read once ``expected`` records (and
    ``SETTLE_S``) passed, or ``timeout``."""
    got: list[Got] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(PARTITIONS)])
        _until(expected, lambda: len(got), _confluent_poll(c, got), timeout)
    finally:
        c.close()
    return got


# -- checks ------------------------------------------------------------------------------


def per_partition(recs: Sequence[Got], topic: str) -> dict[int, list[tuple[int, str | None, Headers]]]:
    """``topic``'s records by partition, in the order read."""
    out: dict[int, list[tuple[int, str | None, Headers]]] = {p: [] for p in range(PARTITIONS)}
    for r in recs:
        if r.topic == topic:
            out[r.partition].append((r.offset, r.key, r.headers))
    return out


def check_view(client: str, got: Sequence[Got], source: str, view: str, flt: ViewFilter,
               produced: Sequence[Produced]) -> int:
    """What ``client`` read of ``view`` is exactly the client-side filter of
    what it read of ``source``, per partition in source offset order; and the
    source read is exactly ``produced``. Returns the number of matches."""
    src = per_partition(got, source)
    want_src = {p: [(r.offset, r.key, r.headers) for r in produced if r.partition == p]
                for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        assert src[p] == want_src[p], (
            f"{client}: source {source} partition {p}: read offsets {[o for o, _, _ in src[p]]}, "
            f"produced {[o for o, _, _ in want_src[p]]} (or keys/headers differ)")
    seen = per_partition(got, view)
    matched = 0
    for p in range(PARTITIONS):
        want = [r for r in src[p] if flt.matches(r[2])]
        matched += len(want)
        if seen[p] != want:
            extra = sorted({o for o, _, _ in seen[p]} - {o for o, _, _ in want})
            missing = sorted({o for o, _, _ in want} - {o for o, _, _ in seen[p]})
            raise AssertionError(
                f"{client}: view {view} ({flt.expression!r}) partition {p}: read offsets "
                f"{[o for o, _, _ in seen[p]]}, the client-side filter of the source gives "
                f"{[o for o, _, _ in want]} (extra {extra}, missing {missing}; "
                f"or keys/headers/order differ)")
    return matched


def expected_count(produced: Sequence[Produced], filters: Sequence[ViewFilter]) -> int:
    """Records a group subscribed to the source and the views should read."""
    return len(produced) + sum(1 for f in filters for r in produced if f.matches(r.headers))


def wait_until(pred: Callable[[], bool], what: Callable[[], str], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout:.0f} s: {what()}")
        time.sleep(0.1)
