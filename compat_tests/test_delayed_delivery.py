"""Delayed (scheduled) delivery (docs/extensions.md) with unmodified kafka-python,
confluent-kafka and aiokafka clients against a real kcompat broker process, on a
single node and in the session's 3-broker clusters (``pbroker``: replication
factor 3 for the delivery and cancellation tests, 1 for the others, where a
partition and its ``__kc_schedule`` partition mostly live on different brokers).

* a producer marks some records of its batches with ``kc-delay-ms`` or
  ``kc-deliver-at``: a plain consumer reads the other records at once, and each
  delayed one exactly once, never before it is due, at a new offset above the
  hole it left, with ``kc-scheduled-offset`` naming the hole and its key,
  value, headers and timestamp kept;
* idempotent producers keep many batches with holes in flight without a
  sequence error;
* ``kc-schedule-id`` / ``kc-cancel-schedule``: the cancelled record never shows,
  the cancellation itself is not stored, its siblings are delivered;
* a bad header value fails the whole batch with INVALID_RECORD (the message
  names the header where the client shows it) and stores nothing;
* a topic without ``kc-*`` headers round-trips byte for byte.

The checks themselves are in ``_delayed.py``. Delays are 1.5-2.5 s, so each
delivery test waits about that long.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from ._delayed import (
    CLIENTS,
    DELAY_MS,
    DELIVER_AT,
    Spec,
    assert_acked,
    cancel,
    check_delivery,
    delayed,
    deliver_at,
    now_ms,
    observe,
    plain,
    produce,
    reader,
)
from ._deployment import PRODUCE_KINDS, SINGLE_AND_RF3, Deployment
from ._records import TIMEOUT_S, Rec, Seen, assert_round_trip, base_timestamp, golden_records
from .confluent._helpers import create_topic

pytestmark = pytest.mark.timeout(120)

SINGLE_AND_RF1 = PRODUCE_KINDS  # ("single", "rf1")

#: each client's producer settings for the mixed batches: records sent together
#: share a batch (linger), and each client uses another codec (a batch with
#: holes is rebuilt: compressed ones too)
MIXED_CONFIG: dict[str, dict[str, Any]] = {
    "kafka-python": {"linger_ms": 20, "compression_type": "lz4"},
    "confluent-kafka": {"linger.ms": 20},
    "aiokafka": {"linger_ms": 20, "compression_type": "gzip"},
}


def _mixed_specs(tag: str, ts: int, t0: int) -> list[Spec]:
    """Three partitions: plain and delayed records interleaved, the last record
    of a batch delayed (0), a batch with every record delayed (1), a
    ``kc-deliver-at`` among plain ones (2); odd keys, values, headers."""
    def v(name: str) -> bytes:
        return f"{tag}-{name}".encode()
    return [
        plain(0, b"k0", v("p0-plain-0"), ts, (("h", b"1"),)),
        delayed(0, b"k1", v("p0-delayed-1500"), ts + 1, 1500,
                (("trace", bytes(range(16))), ("dup", b"1"), ("dup", b"2"), ("empty", b""))),
        plain(0, None, v("p0-plain-null-key"), ts + 2),
        deliver_at(0, None, v("p0-at-2000"), ts + 3, t0 + 2000, (("x", b"y"),)),
        delayed(0, b"k4", v("p0-delayed-2500-last"), ts - 500_000, 2500),
        delayed(1, b"", v("p1-delayed-2500"), ts + 5, 2500, (("заголовок", "знач".encode()),)),
        delayed(1, b"\x00\xff", v("p1-delayed-1500") + bytes(range(256)), ts + 6, 1500),
        plain(2, b"big", v("p2-plain-big") + bytes(i % 251 for i in range(50_000)), ts + 7),
        plain(2, b"dups", v("p2-plain-dup-headers"), ts + 8, (("d", b"1"), ("d", b"2"))),
        deliver_at(2, b"at", v("p2-at-1500"), ts + 9, t0 + 1500),
        plain(2, b"last", v("p2-plain-last"), ts + 10),
    ]


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
@pytest.mark.parametrize("client", CLIENTS)
def test_delayed_records_in_mixed_batches(pbroker: Deployment, topic: str, client: str) -> None:
    """Some records of each batch carry ``kc-delay-ms`` (1.5 s, 2.5 s) or
    ``kc-deliver-at`` (now + 1.5 s, + 2 s): plain records are readable at once at
    their acknowledged offsets; each delayed record exactly once, not before it
    is due, above its hole, with ``kc-scheduled-offset`` = the hole and
    everything it was sent with; earlier due, lower offset."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=3, replication=pbroker.replication)
    with reader(client, bs, topic, [0, 1, 2]) as rd:
        specs = _mixed_specs(client, base_timestamp(), now_ms())
        sent = produce(client, bs, topic, specs, **MIXED_CONFIG[client])
        assert_acked(sent, client)
        assert [s.offset for s in sent] == [0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3], (
            f"{client}: acknowledged offsets {[s.offset for s in sent]}")
        seen = observe(rd, sent, client)
    check_delivery(sent, seen, client)


#: every ``DELAY_EVERY``-th record of the idempotent runs is delayed, so that
#: most batches have holes, some at their end and some none
IDEMPOTENT_RECORDS = 240
DELAY_EVERY = 4
IDEMPOTENT_DELAY_MS = 5000
IDEMPOTENT_CONFIG: dict[str, dict[str, Any]] = {
    # small batches, several in flight per partition (the idempotent maximum, 5)
    "kafka-python": {"enable_idempotence": True, "acks": "all", "linger_ms": 2,
                     "batch_size": 400, "max_in_flight_requests_per_connection": 5},
    "confluent-kafka": {"enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 6,
                        "max.in.flight.requests.per.connection": 5},
}


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF1, indirect=True)
@pytest.mark.parametrize("client", sorted(IDEMPOTENT_CONFIG))
def test_idempotent_producer_many_batches_with_holes(pbroker: Deployment, topic: str,
                                                     client: str) -> None:
    """An idempotent producer sends 240 records over 2 partitions in small
    batches, several in flight, a quarter of them delayed 5 s: every send
    succeeds (no OUT_OF_ORDER_SEQUENCE_NUMBER, no duplicate), at consecutive
    offsets, and every record is read exactly once. (Sends that outlast the
    delay — a loaded machine took 6.5 s — let a record delivered meanwhile take
    the next offset of its partition: then the acknowledged offsets and those
    deliveries' offsets together are consecutive.)"""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=2, replication=pbroker.replication)
    ts = base_timestamp()
    specs = []
    for i in range(IDEMPOTENT_RECORDS):
        value = f"{client}-idem-{i:04d}".encode()
        if i % DELAY_EVERY == DELAY_EVERY - 1:
            # due well after the last send, most often: see the docstring
            specs.append(delayed(i % 2, b"k%d" % i, value, ts + i, IDEMPOTENT_DELAY_MS))
        else:
            specs.append(plain(i % 2, b"k%d" % i, value, ts + i))
    with reader("confluent-kafka", bs, topic, [0, 1]) as rd:
        sent = produce(client, bs, topic, specs, **IDEMPOTENT_CONFIG[client])
        first_due = min(s.due_lower for s in sent if s.spec.delayed)
        if max(s.acked_ms for s in sent) < first_due:  # nothing was due before the last ack
            assert_acked(sent, client)
            for p in (0, 1):
                offsets = [s.offset for s in sent if s.spec.partition == p]
                assert offsets == list(range(IDEMPOTENT_RECORDS // 2)), (
                    f"{client}: partition {p} acknowledged offsets {offsets[:10]}...")
        seen = observe(rd, sent, client, plain_at_once=False)
    for p in (0, 1):
        acked = [s.offset for s in sent if s.spec.partition == p and s.offset is not None]
        assert len(acked) == IDEMPOTENT_RECORDS // 2 and acked == sorted(set(acked)), (
            f"{client}: partition {p} acknowledged offsets out of order: {acked}")
        delivered = {r.offset for r, _t in seen.rows if r.partition == p
                     and any(name == "kc-scheduled-offset" for name, _v in r.headers)}
        taken = sorted(set(acked) | {o for o in delivered if o < acked[-1]})
        assert taken == list(range(acked[-1] + 1)), (
            f"{client}: partition {p}: acknowledged offsets {acked} and the offsets of "
            f"records delivered meanwhile {sorted(delivered)} are not consecutive")
    check_delivery(sent, seen, client)
    # the test is only worth its name if the producer really sent many batches
    batches = {p: len(pbroker.stored_codecs(topic, p)) for p in (0, 1)}
    assert all(n >= 10 for n in batches.values()), (
        f"{client}: only {batches} batches stored per partition: the producer did not "
        f"send many small batches (test bug)")


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_cancel_a_scheduled_record(pbroker: Deployment, topic: str) -> None:
    """confluent-kafka (idempotent) schedules ``job-a`` (2 s) and ``job-b`` (1.5 s)
    in partition 0 and another ``job-a`` (1.5 s) in partition 1, then sends
    ``kc-cancel-schedule: job-a`` to partition 0 (with a plain record in the same
    batch) and a cancellation of an unknown id to partition 1. Partition 0's
    ``job-a`` never shows (read until 1 s after it was due); the cancellations
    are not stored (their offsets stay holes); ``job-b``, partition 1's ``job-a``
    and the plain records are read once."""
    client = "confluent-kafka"
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=2, replication=pbroker.replication)
    ts = base_timestamp()
    cfg = {"enable.idempotence": True, "linger.ms": 10}
    with reader(client, bs, topic, [0, 1]) as rd:
        first = produce(client, bs, topic, [
            plain(0, b"p", b"plain-before", ts),
            delayed(0, b"a", b"job-a-p0", ts + 1, 2000, schedule_id="job-a"),
            delayed(0, b"b", b"job-b-p0", ts + 2, 1500, schedule_id="job-b"),
            delayed(1, b"a", b"job-a-p1", ts + 3, 1500, schedule_id="job-a"),
        ], **cfg)
        assert_acked(first, client)
        second = produce(client, bs, topic, [
            cancel(0, "job-a", b"cancel-job-a-p0", ts + 4),
            plain(0, b"p", b"plain-after-cancel", ts + 5),
            cancel(1, "job-unknown", b"cancel-unknown-p1", ts + 6),
        ], **cfg)
        assert_acked(second, client)
        assert [s.offset for s in second] == [3, 4, 1], (
            f"{client}: acknowledged offsets {[s.offset for s in second]}")
        target = first[1]
        assert max(s.acked_ms for s in second) < target.due_lower, (
            f"{client}: the cancellation was acknowledged only after job-a was due "
            f"(machine too slow for this test)")
        seen = observe(rd, [first[0], first[2], first[3], *second], client,
                       until_ms=target.due_upper + 1000)
    check_delivery([first[0], first[2], first[3], *second], seen, client,
                   never=[target])
    assert target.offset == 1, f"{client}: job-a acknowledged at {target.offset}"


BAD_HEADERS = [(DELAY_MS, b"abc"), (DELAY_MS, b"-5"), (DELAY_MS, b"5000"),
               (DELIVER_AT, b"soon")]
INVALID_RECORD = 87


def _bad_batches(tag: str, ts: int) -> list[Spec]:
    """Partition i: a plain record, a valid delayed record (300 ms) and one with
    the i-th bad header value, sent together (one batch)."""
    return [spec for i, (name, value) in enumerate(BAD_HEADERS) for spec in (
        plain(i, b"k", f"{tag}-{i}-plain".encode(), ts),
        delayed(i, b"k", f"{tag}-{i}-valid-delayed".encode(), ts, 300),
        Spec(i, b"k", f"{tag}-{i}-bad".encode(), ((name, value),), ts),
    )]


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF1, indirect=True)
def test_bad_delay_headers_refuse_the_batch(pbroker: Deployment, topic: str) -> None:
    """``kc-delay-ms: abc``, ``-5``, ``5000`` (topic ``kc.delay.max.ms=1000``) and
    ``kc-deliver-at: soon``, each in a batch with a plain and a valid delayed
    record, sent by confluent-kafka, kafka-python and aiokafka: every record of
    the batch fails with INVALID_RECORD — kafka-python shows the broker's
    message, which names the header and the value — and nothing of it is ever
    readable (not even the valid delayed record, once due); the partitions stay
    empty: the next record gets offset 0."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=len(BAD_HEADERS), config={"kc.delay.max.ms": "1000"},
                 replication=pbroker.replication)
    ts = base_timestamp()
    partitions = list(range(len(BAD_HEADERS)))
    with reader("confluent-kafka", bs, topic, partitions) as rd:
        # confluent-kafka: KafkaError code INVALID_RECORD. librdkafka 2.16 does not
        # pass the broker's error message on (str() is the generic "Broker: Broker
        # failed to validate record"); if a version does, it must name the header.
        sent = produce("confluent-kafka", bs, topic, _bad_batches("confluent", ts),
                       **{"linger.ms": 100})
        for s in sent:
            assert s.error is not None and s.error.code() == INVALID_RECORD, (
                f"confluent-kafka: {s.spec.value!r}: delivery report {s.error} at offset "
                f"{s.offset}, expected INVALID_RECORD ({INVALID_RECORD})")
            text = s.error.str()
            if "kc-" in text:
                bad = BAD_HEADERS[s.spec.partition][0]
                assert bad in text, f"confluent-kafka: error message {text!r} names no {bad}"

        # kafka-python: InvalidRecordError carrying the broker's message. Not
        # idempotent: kafka-python 3.0.12's idempotent producer turns any
        # non-retriable batch error into a fatal producer error and fails the
        # batches still in flight (other partitions, other brokers) with that
        # first exception (TransactionManager.classify_batch_error).
        from kafka.errors import InvalidRecordError

        sent_kp = produce("kafka-python", bs, topic, _bad_batches("kafka-python", ts),
                          linger_ms=100, enable_idempotence=False)
        for s in sent_kp:
            name, value = BAD_HEADERS[s.spec.partition]
            assert isinstance(s.error, InvalidRecordError), (
                f"kafka-python: {s.spec.value!r}: answered {s.error!r} at offset {s.offset}, "
                f"expected InvalidRecordError")
            text = str(s.error)
            assert name in text and value.decode() in text, (
                f"kafka-python: the error message {text!r} does not name the header "
                f"{name} and its value {value!r}")

        # aiokafka 0.14 has no class for error 87: it raises what its for_code gives
        from aiokafka import errors as aioerrors

        sent_aio = produce("aiokafka", bs, topic, _bad_batches("aiokafka", ts), linger_ms=100)
        want = aioerrors.for_code(INVALID_RECORD)
        for s in sent_aio:
            assert isinstance(s.error, want), (
                f"aiokafka: {s.spec.value!r}: answered {s.error!r} at offset {s.offset}, "
                f"expected {want.__name__} (its class for error {INVALID_RECORD})")

        # nothing readable, not even after the valid delayed records would be due
        until = max(s.acked_ms for s in [*sent, *sent_kp, *sent_aio]) + 300 + 1000
        leaked: list[Seen] = []
        while now_ms() < until:
            leaked += rd.poll(0.1)
        assert not leaked, (
            f"records of refused batches are readable: "
            f"{[(r.partition, r.offset, r.value) for r in leaked][:5]}")
        ends = rd.ends()
        assert ends == dict.fromkeys(partitions, 0), (
            f"refused batches left offsets behind: end offsets {ends}")

        after = produce("confluent-kafka", bs, topic,
                        [plain(p, b"k", f"after-{p}".encode(), ts) for p in partitions])
        assert_acked(after, "confluent-kafka")
        assert [s.offset for s in after] == [0] * len(partitions), (
            f"the first record after the refused batches got offsets "
            f"{[s.offset for s in after]}, expected 0 in every partition")
        seen = observe(rd, after, "confluent-kafka")
    check_delivery(after, seen, "confluent-kafka")


def _lookalikes(ts: int) -> list[Rec]:
    """Records whose bytes contain ``kc-`` without any ``kc-*`` header: the broker
    looks closer at them and must still store them as sent."""
    return [
        Rec(0, b"kc-schedule-id", b"kc-delay-ms: 1000", (("x-kc-delay-ms", b"1000"),
                                                         ("kc", b"kc-deliver-at")), ts + 100),
        Rec(2, b"kc-", b"kc-cancel-schedule", (("kc_delay_ms", b"1"),), ts + 101),
    ]


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF1, indirect=True)
@pytest.mark.parametrize("client", CLIENTS)
def test_plain_topic_round_trips_unchanged(pbroker: Deployment, topic: str, client: str) -> None:
    """No ``kc-*`` header, no ``kc.*`` config: keys, values, headers and timestamps
    come back byte for byte at dense offsets (docs/extensions.md, rule 1), including
    records whose keys, values and header names merely contain ``kc-``."""
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=3, replication=pbroker.replication)
    ts = base_timestamp()
    recs = sorted([*golden_records(3, ts), *_lookalikes(ts)],
                  key=lambda r: r.partition)  # stable: each partition's records in order
    specs = [Spec(r.partition, r.key, r.value, r.headers, r.timestamp)  # type: ignore[arg-type]
             for r in recs]
    config = {"kafka-python": {"linger_ms": 10}, "confluent-kafka": {"linger.ms": 10},
              "aiokafka": {"linger_ms": 10}}[client]
    sent = produce(client, bs, topic, specs, **config)
    assert_acked(sent, client)
    counts: dict[int, int] = {}
    for r in recs:
        counts[r.partition] = counts.get(r.partition, 0) + 1
    with reader(client, bs, topic, [0, 1, 2]) as rd:
        seen = _read_to(rd, counts, client)
    assert_round_trip(recs, seen, f"{client} (plain topic)")


def _read_to(rd: Any, ends: dict[int, int], client: str) -> list[Seen]:
    """Everything up to ``ends`` (which the high watermarks must reach)."""
    deadline = now_ms() + int(TIMEOUT_S * 1000)
    while rd.ends() != ends:
        assert now_ms() < deadline, f"{client}: end offsets {rd.ends()}, expected {ends}"
        time.sleep(0.02)
    seen: list[Seen] = []
    while not all(rd.positions().get(p, -1) >= e for p, e in ends.items()):
        assert now_ms() < deadline, (
            f"{client}: read {len(seen)} records; positions {rd.positions()}, ends {ends}")
        seen += rd.poll(0.2)
    return seen
