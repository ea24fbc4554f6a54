"""The order app against a real Kafka protocol peer: kcompat's session broker.

``kcompat_broker`` (the bootstrap string) and ``kcompat_topic`` (a fresh topic
per test) come from kcompat's pytest plugin; ``conftest.py`` gives the broker
three partitions per topic.
"""

from __future__ import annotations

import json
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from order_events import Order, publish_orders, revenue_by_customer

ORDERS = [Order("o1", "alice", 1250), Order("o2", "bob", 300), Order("o3", "alice", 99),
          Order("o4", "carol", 4200), Order("o5", "bob", 700)]


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, dict[str, object]]]:
    """(partition, key, event) of every record of ``topic``, with kafka-python."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        records = []
        for r in consumer:
            records.append((r.partition, r.key, json.loads(r.value)))
            if all(consumer.position(tp) >= end for tp, end in ends.items()):
                break
        return records
    finally:
        consumer.close()


def test_each_customers_orders_share_a_partition_in_order(kcompat_broker: str,
                                                          kcompat_topic: str) -> None:
    assert publish_orders(kcompat_broker, kcompat_topic, ORDERS) == len(ORDERS)

    records = read_all(kcompat_broker, kcompat_topic)
    assert sorted(e["order_id"] for _p, _k, e in records) == ["o1", "o2", "o3", "o4", "o5"]
    partition_of = {key: {p for p, k, _e in records if k == key} for _p, key, _e in records}
    assert all(len(parts) == 1 for parts in partition_of.values()), partition_of
    alice = [e["order_id"] for _p, k, e in records if k == b"alice"]
    assert alice == ["o1", "o3"]


def test_revenue_job_totals_new_events_once(kcompat_broker, kcompat_topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=kcompat_broker)
    for order in ORDERS:
        producer.send(kcompat_topic, key=order.customer.encode(),
                      value=json.dumps(order.__dict__).encode())
    producer.flush()
    group = f"revenue-{uuid.uuid4().hex[:8]}"

    first = revenue_by_customer(kcompat_broker, kcompat_topic, group)
    assert first == {"alice": 1349, "bob": 1000, "carol": 4200}

    publish_orders(kcompat_broker, kcompat_topic, [Order("o6", "bob", 5)])
    assert revenue_by_customer(kcompat_broker, kcompat_topic, group) == {"bob": 5}
    producer.close()


def test_a_topic_with_its_own_settings(kcompat_broker) -> None:
    topic = kcompat_broker.create_topic(partitions=1, config={"retention.ms": 60_000})
    publish_orders(kcompat_broker, topic, ORDERS[:2])
    assert [p for p, _k, _e in read_all(kcompat_broker, topic)] == [0, 0]
    assert topic in kcompat_broker.list_topics()
