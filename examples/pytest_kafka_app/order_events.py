"""A tiny Kafka application: a shop publishes order events and a job totals revenue.

``publish_orders`` produces one JSON event per order, keyed by customer, so
all of one customer's orders land on one partition in order.
``revenue_by_customer`` is a consumer-group job: it reads every event its group
has not yet processed, up to the end of each partition, commits and returns the
revenue per customer it saw. Both are written against confluent-kafka, the
client most Python services use in production; the tests drive and check them
with kafka-python as an independent client.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, KafkaError, Producer


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    amount_cents: int


def publish_orders(bootstrap: str, topic: str, orders: Iterable[Order]) -> int:
    """Produce every order (acks=all); the number delivered."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    delivered = 0

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        nonlocal delivered
        if err is not None:
            raise RuntimeError(f"order not delivered: {err}")
        delivered += 1

    for order in orders:
        producer.produce(topic, key=order.customer.encode(),
                         value=json.dumps(asdict(order)).encode(), on_delivery=on_delivery)
    producer.flush(10)
    return delivered


def revenue_by_customer(bootstrap: str, topic: str, group_id: str,
                        timeout_s: float = 10.0) -> Counter[str]:
    """Total amount_cents per customer over the events ``group_id`` has not processed yet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True,
                         "fetch.wait.max.ms": 100})  # a batch job: no long poll at the end
    totals: Counter[str] = Counter()
    at_end: set[int] = set()
    try:
        consumer.subscribe([topic])
        partitions = len(consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
        while len(at_end) < partitions:
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise TimeoutError(f"no event from {topic} in {timeout_s} s")
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(msg.error())
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            event = json.loads(msg.value())
            totals[event["customer"]] += event["amount_cents"]
        if totals:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return totals
