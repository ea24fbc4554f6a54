"""Delayed records inside transactions (docs/extensions.md): scheduled only if the
transaction commits.

A confluent-kafka (librdkafka) transactional producer writes batches mixing
plain and delayed records to two partitions and commits one transaction and
aborts another; a read_committed consumer must see the committed plain
records, each committed delayed record once after its delay (with
``kc-scheduled-offset``), and nothing of the aborted transaction — ever. On a
single broker and in a 3-broker cluster where ``__transaction_state`` and
``__kc_schedule`` are replicated (``tbroker``: the coordinator, the data
partitions' leaders and the schedule partitions' leaders are spread).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._broker import unique_topic
from compat_tests._deployment import Deployment

pytestmark = pytest.mark.timeout(120)

DELAY_MS = 1500


def test_delayed_records_are_scheduled_only_when_the_transaction_commits(
        tbroker: Deployment) -> None:
    topic = unique_topic("txdelay")
    admin = AdminClient({"bootstrap.servers": tbroker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, tbroker.replication)])[topic].result(30)
    produced_at: dict[bytes, float] = {}
    for outcome in ("commit", "abort"):
        p = Producer({"bootstrap.servers": tbroker.bootstrap,
                      "transactional.id": unique_topic("tid")})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(6):
            key = f"{outcome}-{i}".encode()
            produced_at[key] = time.time()
            p.produce(topic, key=key, value=b"v", partition=i % 2,
                      headers=[("kc-delay-ms", str(DELAY_MS).encode())] if i % 3 == 0 else [])
        assert p.flush(30) == 0
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    consumer = Consumer({"bootstrap.servers": tbroker.bootstrap, "group.id": unique_topic("g"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    seen: dict[bytes, list[tuple[float, int, dict[str, bytes]]]] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        expected = {f"commit-{i}".encode() for i in range(6)}
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None or m.error():
                if expected <= seen.keys() and time.time() > max(produced_at.values()) + (
                        DELAY_MS / 1000 + 1.5):
                    break  # past every due time, with room for an aborted one to show up
                continue
            key = m.key()
            assert key is not None
            seen.setdefault(key, []).append((time.time(), m.offset(),
                                             dict(m.headers() or [])))
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"commit-{i}".encode() for i in range(6)), sorted(seen)
    for key, rows in seen.items():
        assert len(rows) == 1, (key, rows)  # exactly once
        arrived, offset, headers = rows[0]
        if int(key.decode().rsplit("-", 1)[1]) % 3 == 0:
            assert arrived >= produced_at[key] + DELAY_MS / 1000 - 0.05, key  # never early
            hole = int(headers["kc-scheduled-offset"])
            assert hole < offset
        else:
            assert "kc-scheduled-offset" not in headers
