"""A client process for the quota tests (confluent-kafka / librdkafka):
``produce BOOTSTRAP TOPIC CLIENT_ID SECONDS`` sends 10 000-byte records as fast
as it may for SECONDS; ``consume BOOTSTRAP TOPIC CLIENT_ID SECONDS`` reads the
topic from the start for SECONDS, committing its position (group
``quota-CLIENT_ID``) every 200 ms. It claims nothing: the tests measure on the
broker. Prints ``started`` once its first request is sent.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

RECORD_BYTES = 10_000


def produce(bootstrap: str, topic: str, client_id: str, seconds: float) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "acks": "all", "linger.ms": 5, "compression.type": "none",
                         "queue.buffering.max.kbytes": 16384, "log_level": 0})
    value = b"q" * RECORD_BYTES
    print("started", flush=True)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        try:
            producer.produce(topic, value)
        except BufferError:  # queue full: the broker is the limit
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.purge()


def consume(bootstrap: str, topic: str, client_id: str, seconds: float) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "group.id": f"quota-{client_id}", "enable.auto.commit": True,
                         "auto.commit.interval.ms": 200, "log_level": 0})
    consumer.assign([TopicPartition(topic, 0, 0)])
    print("started", flush=True)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        consumer.consume(num_messages=1000, timeout=0.2)
    consumer.close()


if __name__ == "__main__":
    mode, bootstrap, topic, client_id, seconds = sys.argv[1:6]
    {"produce": produce, "consume": consume}[mode](bootstrap, topic, client_id, float(seconds))
