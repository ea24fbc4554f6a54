"""Delayed delivery (docs/extensions.md, ``kc-delay-ms``) with Java kafka-clients 4.x in a
real JVM, against a kcompat broker process and a 3-broker cluster at replication
factor 3 (``pbroker`` kinds ``single`` and ``rf3``).

``DelayedDelivery`` (compat_tests/java/clients, built once by Maven, cached) runs a
KafkaProducer with default settings (idempotent, acks=all) and, in the same JVM at
the same time, a KafkaConsumer assigned to both partitions from the beginning. The
producer sends three waves of 20 records, flushing after each, to a 2-partition
topic; every second record carries ``kc-delay-ms``, so every batch has holes and
the batches after the first follow batches with holes (a broker that got the
idempotent sequence of a batch with holes wrong answers OUT_OF_ORDER_SEQUENCE).

* every send is acknowledged, per partition at offsets 0..n-1 in send order (the
  holes keep their offsets);
* the Java consumer sees each plain record once, at its acknowledged offset, at
  once (well before a record sent with it would be due);
* it sees each delayed record exactly once, never before it is due (send time +
  delay: the broker starts the delay when it appends, after our send), at a new
  offset above its hole, with key, value, headers (``kc-delay-ms`` included) and
  CreateTime kept and one more header ``kc-scheduled-offset`` naming the hole;
* nothing is seen at a hole, and a plain record acknowledged before a delayed one
  was due sits below that one's new offset (visibility order = offset order);
* a later kafka-python read of the whole log finds the same, nothing more.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests._deployment import SINGLE_AND_RF3, Deployment
from compat_tests.java.conftest import PKG, run_java

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 2
WAVES = 3
PER_WAVE = 20
DELAY_MS = 3000
#: the Java consumer keeps polling this long after it saw everything (duplicates)
SETTLE_MS = 1500
#: how long after the producer finished the consumer waits for the rest
MAX_WAIT_MS = DELAY_MS + 20_000
#: a delayed record may show up this late after its due time (loaded machine)
LATE_MS = 15_000
SCHEDULED_OFFSET = "kc-scheduled-offset"


def create_topic(bootstrap: str, name: str, partitions: int, replication: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, replication)])
    finally:
        admin.close()


def read_log(bootstrap: str, topic: str) -> tuple[list[Any], dict[int, int]]:
    """Every record of the topic (kafka-python, assigned from the log start to the
    end offsets) and the end offsets."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=5000)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        out = []
        deadline = time.monotonic() + 30
        while any(c.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out.extend(recs)
        return out, {tp.partition: o for tp, o in ends.items()}
    finally:
        c.close()


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_java_producer_and_consumer_with_delayed_records(
        pbroker: Deployment, topic: str, clients_cp: str) -> None:
    create_topic(pbroker.bootstrap, topic, PARTITIONS, pbroker.replication)
    total = WAVES * PER_WAVE
    t0 = time.monotonic()
    run = run_java(clients_cp, f"{PKG}.DelayedDelivery", pbroker.bootstrap, topic,
                   str(PARTITIONS), str(WAVES), str(PER_WAVE), str(DELAY_MS), str(SETTLE_MS),
                   str(MAX_WAIT_MS), timeout=120)
    elapsed = time.monotonic() - t0
    events = run.json_lines()
    failed = [e for e in events if e["event"] in ("failed", "consumer_error")]
    assert not failed, f"{len(failed)} errors, e.g. {failed[:3]}\n{run.explain()}"
    assert run.returncode == 0, run.explain()

    # -- the producer: every send acknowledged, holes keep their offsets --------------
    acked = {e["i"]: e for e in events if e["event"] == "acked"}
    assert sorted(acked) == list(range(total)), run.explain()
    for p in range(PARTITIONS):
        mine = [acked[i] for i in range(total) if acked[i]["partition"] == p]
        assert [a["offset"] for a in mine] == list(range(len(mine))), (
            f"partition {p}: acknowledged offsets in send order "
            f"{[a['offset'] for a in mine]}")
        assert {a["delayed"] for a in mine} == {True, False}
    holes = {(a["partition"], a["offset"]) for a in acked.values() if a["delayed"]}

    # -- the Java consumer, reading while the producer wrote ---------------------------
    seen = [e for e in events if e["event"] == "seen"]
    by_value: dict[str, list[dict[str, Any]]] = {}
    for s in seen:
        by_value.setdefault(s["value"], []).append(s)
    alien = sorted(set(by_value) - {f"v{i}" for i in range(total)})
    assert not alien, f"records nobody sent: {alien[:5]}"
    at_holes = [s for s in seen if (s["partition"], s["offset"]) in holes]
    assert not at_holes, f"records visible at holes: {at_holes[:3]}"
    new_offset: dict[int, int] = {}
    plain_lag, delayed_lag = [], []
    for i, a in sorted(acked.items()):
        got = by_value.get(f"v{i}", [])
        where = f"v{i} (partition {a['partition']}, acknowledged at {a['offset']})"
        assert len(got) == 1, (f"{where}: seen {len(got)} times: "
                               f"{[(g['partition'], g['offset']) for g in got]}")
        s = got[0]
        assert s["partition"] == a["partition"], f"{where}: seen in partition {s['partition']}"
        assert s["key"] == f"k{i}", f"{where}: key {s['key']}"
        assert (s["timestamp"], s["timestamp_type"]) == (a["timestamp"], "CREATE_TIME"), (
            f"{where}: timestamp {s['timestamp']} {s['timestamp_type']}, sent {a['timestamp']}")
        sent_headers = [["seq", str(i)]] + ([["kc-delay-ms", str(DELAY_MS)]] if a["delayed"]
                                            else [])
        if not a["delayed"]:
            assert s["offset"] == a["offset"], f"{where}: seen at offset {s['offset']}"
            assert s["headers"] == sent_headers, f"{where}: headers {s['headers']}"
            # At once: long before a record sent with it could be due.
            assert s["seen_ms"] < a["sent_ms"] + DELAY_MS, (
                f"{where}: seen {s['seen_ms'] - a['sent_ms']} ms after it was sent")
            plain_lag.append(s["seen_ms"] - a["sent_ms"])
            continue
        assert s["offset"] > a["offset"], (
            f"{where}: delivered at offset {s['offset']}, not after its hole")
        marks = [v for k, v in s["headers"] if k == SCHEDULED_OFFSET]
        assert marks == [str(a["offset"])], f"{where}: {SCHEDULED_OFFSET} {marks}"
        rest = [h for h in s["headers"] if h[0] != SCHEDULED_OFFSET]
        assert rest == sent_headers, f"{where}: headers {s['headers']}"
        due_lower = a["sent_ms"] + DELAY_MS
        assert s["seen_ms"] >= due_lower, (
            f"{where}: visible {due_lower - s['seen_ms']} ms before it was due")
        assert s["seen_ms"] <= a["acked_ms"] + DELAY_MS + LATE_MS, (
            f"{where}: visible {s['seen_ms'] - a['acked_ms'] - DELAY_MS} ms after it was due")
        delayed_lag.append(s["seen_ms"] - due_lower)
        new_offset[i] = s["offset"]
    # Visibility order = offset order.
    for d, off in new_offset.items():
        ad = acked[d]
        for i, a in acked.items():
            if (not a["delayed"] and a["partition"] == ad["partition"]
                    and a["acked_ms"] < ad["sent_ms"] + DELAY_MS):
                assert a["offset"] < off, (
                    f"plain v{i} at offset {a['offset']} above delayed v{d} delivered at "
                    f"{off}, though acknowledged before v{d} was due")

    # -- the log, read again by another client -----------------------------------------
    log, ends = read_log(pbroker.bootstrap, topic)
    where_in_log = Counter((r.partition, r.offset, r.value.decode()) for r in log)
    want = Counter((s["partition"], s["offset"], s["value"]) for s in seen)
    assert where_in_log == want, (
        f"log != what the Java consumer saw: extra {list((where_in_log - want).items())[:5]}, "
        f"missing {list((want - where_in_log).items())[:5]}")
    print(f"{pbroker.kind}: {total} records ({len(new_offset)} delayed {DELAY_MS} ms) in "
          f"{elapsed:.1f} s (JVM); plain seen {min(plain_lag)}-{max(plain_lag)} ms after send, "
          f"delayed {min(delayed_lag)}-{max(delayed_lag)} ms after due; end offsets {ends}")
