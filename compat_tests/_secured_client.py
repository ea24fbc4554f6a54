"""A round trip over a secured listener by one Python client, in its own process.

    python -m compat_tests._secured_client SPEC_JSON

SPEC_JSON is ``RoundTrip.to_json()``: the client (``kafka-python``, ``confluent``
or ``aiokafka``), the listener's bootstrap address, a topic and a group, a record
count and a ``ClientSecurity``. The process produces ``count`` records
``<topic>-<i>``, then consumes them back as a member of the group, commits, reads
its committed offsets back, and prints one JSON line: ``{"event": "done",
"produced": [...], "consumed": [...], "committed": {partition: offset}}``; on a
failure ``{"event": "error", "type": <exception class>, "message": ..., "log":
[the client's warnings]}`` and exit 1. Every step has a deadline
(``timeout_s``), so a refused login ends the process with the client's own
error instead of a hang.

``ClientSecurity`` is also where each client's option names live: the same
secured connection spelled for kafka-python, aiokafka, librdkafka (confluent-kafka
and kcat) and the Java clients.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

PYTHON_CLIENTS = ("kafka-python", "confluent", "aiokafka")
REFUSED_BOOTSTRAP_S = 5.0


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects: Kafka's ``security.protocol``, a SASL mechanism with
    its username and password, the CA it trusts and (for mTLS) its own key and
    chain — PEM files from ``compat_tests._tls``."""

    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    username: str | None = None
    password: str | None = None
    ca: str | None = None
    cert: str | None = None  # chain PEM (leaf first)
    key: str | None = None  # PKCS#8 PEM
    keystore: str | None = None  # key + chain in one PEM (Java's ssl.keystore.location)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def kafka_python(self) -> dict[str, Any]:
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            out.update(ssl_cafile=self.ca, ssl_certfile=self.cert, ssl_keyfile=self.key)
        if self.sasl:
            out.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                       sasl_plain_password=self.password)
        return out

    def aiokafka(self) -> dict[str, Any]:
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            from aiokafka.helpers import create_ssl_context
            out["ssl_context"] = create_ssl_context(cafile=self.ca, certfile=self.cert,
                                                    keyfile=self.key)
        if self.sasl:
            out.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                       sasl_plain_password=self.password)
        return out

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka's config and kcat's ``-X`` pairs (the same library)."""
        out = {"security.protocol": self.protocol.lower()}
        if self.tls:
            out["ssl.ca.location"] = str(self.ca)
            if self.cert is not None:
                out["ssl.certificate.location"] = self.cert
                out["ssl.key.location"] = str(self.key)
        if self.sasl:
            out.update({"sasl.mechanisms": str(self.mechanism),
                        "sasl.username": str(self.username),
                        "sasl.password": str(self.password)})
        return out

    def java(self) -> dict[str, str]:
        out = {"security.protocol": self.protocol}
        if self.tls:
            out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)})
            if self.keystore is not None:
                out.update({"ssl.keystore.type": "PEM",
                            "ssl.keystore.location": self.keystore})
        if self.sasl:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                      if self.mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            out.update({"sasl.mechanism": str(self.mechanism),
                        "sasl.jaas.config": f'{module} required username="{self.username}" '
                                            f'password="{self.password}";'})
        return out


@dataclass(frozen=True)
class RoundTrip:
    client: str
    bootstrap: str
    topic: str
    group: str
    count: int
    security: ClientSecurity
    timeout_s: float = 20.0
    #: the login is expected to be refused: kafka-python, which retries a failed
    #: bootstrap connection until its bootstrap timeout and then raises only
    #: KafkaTimeoutError (the refusal only logged), gives up after
    #: REFUSED_BOOTSTRAP_S; the Java round trip starts no consumer
    refused: bool = False

    @property
    def bootstrap_timeout_ms(self) -> int:
        return int(1000 * (REFUSED_BOOTSTRAP_S if self.refused else self.timeout_s))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> RoundTrip:
        doc = json.loads(text)
        doc["security"] = ClientSecurity(**doc["security"])
        return RoundTrip(**doc)

    def expected(self) -> list[str]:
        return [f"{self.topic}-{i}" for i in range(self.count)]


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self, what: str) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError(what)
        return left


def kafka_python_round_trip(rt: RoundTrip) -> dict[str, Any]:
    from kafka import KafkaConsumer, KafkaProducer

    from compat_tests._group_member import kafka_python_learn_topics

    sec = rt.security.kafka_python()
    timeout_ms = int(rt.timeout_s * 1000)
    producer = KafkaProducer(bootstrap_servers=rt.bootstrap, max_block_ms=timeout_ms,
                             request_timeout_ms=timeout_ms,
                             bootstrap_timeout_ms=rt.bootstrap_timeout_ms, **sec)
    try:
        futures = [producer.send(rt.topic, v.encode()) for v in rt.expected()]
        producer.flush(timeout=rt.timeout_s)
        for f in futures:
            f.get(timeout=rt.timeout_s)
    finally:
        producer.close(timeout=5)
    deadline = Deadline(rt.timeout_s)
    consumer = KafkaConsumer(rt.topic, bootstrap_servers=rt.bootstrap, group_id=rt.group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             request_timeout_ms=timeout_ms,
                             bootstrap_timeout_ms=rt.bootstrap_timeout_ms, **sec)
    try:
        kafka_python_learn_topics(consumer, [rt.topic], rt.timeout_s)
        got: list[str] = []
        while len(got) < rt.count:
            deadline.left(f"kafka-python consumed {len(got)} of {rt.count}")
            for msgs in consumer.poll(timeout_ms=200).values():
                got += [m.value.decode() for m in msgs]
        consumer.commit()
        committed = {tp.partition: consumer.committed(tp) for tp in consumer.assignment()}
    finally:
        consumer.close(autocommit=False)
    return {"consumed": got, "committed": committed}


class _Errors:
    """librdkafka reports a failed login through ``error_cb``, not an exception:
    keep the first error and let the poll loops raise it."""

    def __init__(self) -> None:
        self.first: Any = None

    def __call__(self, err: Any) -> None:
        if self.first is None:
            self.first = err

    def check(self) -> None:
        from confluent_kafka import KafkaException
        if self.first is not None:
            raise KafkaException(self.first)


def confluent_round_trip(rt: RoundTrip) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    errors = _Errors()
    base = {"bootstrap.servers": rt.bootstrap, "error_cb": errors, **rt.security.librdkafka()}
    producer = Producer({**base, "message.timeout.ms": int(rt.timeout_s * 1000)})
    delivered: list[Any] = []
    deadline = Deadline(rt.timeout_s)
    for v in rt.expected():
        producer.produce(rt.topic, v.encode(), on_delivery=lambda e, m: delivered.append(e))
    while len(delivered) < rt.count:
        errors.check()
        deadline.left(f"confluent delivered {len(delivered)} of {rt.count}")
        producer.poll(0.1)
    if any(e is not None for e in delivered):
        raise KafkaException(next(e for e in delivered if e is not None))
    consumer = Consumer({**base, "group.id": rt.group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([rt.topic])
        got: list[str] = []
        while len(got) < rt.count:
            errors.check()
            deadline.left(f"confluent consumed {len(got)} of {rt.count}")
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
        consumer.commit(asynchronous=False)
        parts = consumer.committed([TopicPartition(rt.topic, tp.partition)
                                    for tp in consumer.assignment()], timeout=rt.timeout_s)
        committed = {tp.partition: tp.offset for tp in parts}
    finally:
        consumer.close()
    return {"consumed": got, "committed": committed}


async def aiokafka_round_trip(rt: RoundTrip) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    timeout_ms = int(rt.timeout_s * 1000)
    producer = AIOKafkaProducer(bootstrap_servers=rt.bootstrap, request_timeout_ms=timeout_ms,
                                **rt.security.aiokafka())
    await asyncio.wait_for(producer.start(), rt.timeout_s)
    try:
        for v in rt.expected():
            await asyncio.wait_for(producer.send_and_wait(rt.topic, v.encode()), rt.timeout_s)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(rt.topic, bootstrap_servers=rt.bootstrap, group_id=rt.group,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                request_timeout_ms=timeout_ms, **rt.security.aiokafka())
    await asyncio.wait_for(consumer.start(), rt.timeout_s)
    try:
        deadline = Deadline(rt.timeout_s)
        got: list[str] = []
        while len(got) < rt.count:
            deadline.left(f"aiokafka consumed {len(got)} of {rt.count}")
            for msgs in (await consumer.getmany(timeout_ms=200)).values():
                got += [m.value.decode() for m in msgs]
        await consumer.commit()
        committed = {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
    finally:
        await consumer.stop()
    return {"consumed": got, "committed": committed}


def run(rt: RoundTrip) -> dict[str, Any]:
    if rt.client == "kafka-python":
        return kafka_python_round_trip(rt)
    if rt.client == "confluent":
        return confluent_round_trip(rt)
    if rt.client == "aiokafka":
        return asyncio.run(aiokafka_round_trip(rt))
    raise ValueError(f"unknown client {rt.client!r} (one of {PYTHON_CLIENTS})")


class ClientLog(logging.Handler):
    """kafka-python and aiokafka log why a connection failed (a rejected login, a
    TLS alert) and raise only "Unable to bootstrap": keep those log lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.name}: {record.getMessage()}"
        if line not in self.lines:
            self.lines.append(line)


def main(argv: list[str]) -> int:
    rt = RoundTrip.from_json(argv[0])
    log = ClientLog()
    for name in ("kafka", "aiokafka"):
        logging.getLogger(name).addHandler(log)
    try:
        result = run(rt)
    except Exception as exc:  # noqa: BLE001 - the test reads the client's own error
        print(json.dumps({"event": "error", "type": type(exc).__name__, "message": str(exc),
                          "log": log.lines[:12]}), flush=True)
        return 1
    print(json.dumps({"event": "done", "produced": rt.expected(), **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
