"""A confluent-kafka member of a KIP-848 consumer group, in its own process.

    python -m compat_tests._consumer_protocol_member BOOTSTRAP TOPIC GROUP CLIENT_ID

``group.protocol=consumer`` (the broker assigns; no client-side session or
assignor settings). Prints the same JSON lines as the Java ``GroupConsumer``:
``assigned`` (with ``all``, the whole assignment), ``record`` (partition,
offset, key), ``committed`` after each synchronous commit of what it consumed,
and ``error``. SIGTERM (or a line ``stop`` on stdin) closes the consumer.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    bootstrap, topic, group, client_id = argv[:4]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    assigned: list[int] = []

    def report() -> None:
        nonlocal assigned
        now = sorted(tp.partition for tp in c.assignment())
        if now != assigned:
            assigned = now
            emit(event="assigned", all=now)

    c.subscribe([topic])
    try:
        while not stop.is_set():
            msgs = c.consume(50, 0.2)
            report()
            good = [m for m in msgs if m.error() is None]
            for m in msgs:
                if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                    emit(event="error", error=str(m.error()))
            for m in good:
                emit(event="record", partition=m.partition(), offset=m.offset(),
                     key=(m.key() or b"").decode())
            if good:
                try:
                    c.commit(asynchronous=False)
                    emit(event="committed", count=len(good))
                except KafkaException as exc:  # shown to the test, which decides
                    emit(event="error", error=f"commit: {exc}")
    finally:
        c.close()
        emit(event="closed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
