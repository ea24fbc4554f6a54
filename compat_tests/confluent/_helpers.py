"""confluent-kafka (librdkafka) helpers shared by the confluent suite and the kcat suite."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from .._records import TIMEOUT_S, Rec, Seen, norm_headers

CLIENT = "confluent-kafka"


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(TIMEOUT_S * 1000)})


def create_topic(bootstrap: str, name: str, partitions: int = 3,
                 config: dict[str, str] | None = None, replication: int = 1) -> None:
    admin = admin_client(bootstrap)
    futs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication,
                  config=config or {})],
        operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S,
    )
    futs[name].result(timeout=TIMEOUT_S)  # raises KafkaException on a broker error
    wait_for_partitions(admin, name, partitions)


def wait_for_partitions(admin: AdminClient, name: str, partitions: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        md = admin.list_topics(topic=name, timeout=TIMEOUT_S)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
            p.leader >= 0 for p in t.partitions.values()
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{CLIENT}: {name} never showed {partitions} led partitions: {t}")
        time.sleep(0.1)


def error_code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), f"expected KafkaException, got {exc!r}"
    err = exc.args[0]
    assert isinstance(err, KafkaError), f"KafkaException without KafkaError: {exc!r}"
    return int(err.code())


class Deliveries:
    """Collects delivery reports."""

    def __init__(self) -> None:
        self.ok: list[Any] = []
        self.failed: list[tuple[Any, Any]] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.ok.append(msg)
        else:
            self.failed.append((err, msg))


def produce_recs(p: Producer, topic: str, recs: list[Rec]) -> list[Any]:
    """Produce every record to its partition; every delivery must succeed, and record
    i of a partition must be acknowledged at offset i with its CreateTime."""
    reports: dict[int, tuple[Any, Any]] = {}
    for i, r in enumerate(recs):
        kwargs: dict[str, Any] = {"partition": r.partition, "timestamp": r.timestamp}
        if r.headers:
            kwargs["headers"] = list(r.headers)

        def on_delivery(err: Any, msg: Any, i: int = i) -> None:
            reports[i] = (err, msg)

        p.produce(topic, value=r.value, key=r.key, on_delivery=on_delivery, **kwargs)
        p.poll(0)
    left = p.flush(TIMEOUT_S)
    assert left == 0, f"{CLIENT}: {left} messages still undelivered after {TIMEOUT_S}s"
    failed = [(i, str(e)) for i, (e, _) in sorted(reports.items()) if e is not None]
    assert not failed, f"{CLIENT}: delivery failed for {len(failed)} records, e.g. {failed[:5]}"
    assert len(reports) == len(recs), f"{CLIENT}: {len(reports)} delivery reports for {len(recs)} records"
    next_offset: dict[int, int] = {}
    msgs = []
    for i, r in enumerate(recs):
        _, m = reports[i]
        want = next_offset.get(r.partition, 0)
        next_offset[r.partition] = want + 1
        assert (m.partition(), m.offset()) == (r.partition, want), (
            f"{CLIENT}: record {i} acknowledged at partition {m.partition()} offset {m.offset()}, "
            f"expected partition {r.partition} offset {want}"
        )
        ts_type, ts = m.timestamp()
        assert (ts_type, ts) == (TIMESTAMP_CREATE_TIME, r.timestamp), (
            f"{CLIENT}: record {i} delivery report timestamp ({ts_type}, {ts}), "
            f"expected CreateTime {r.timestamp}"
        )
        msgs.append(m)
    return msgs


def consumer(bootstrap: str, **overrides: Any) -> Consumer:
    cfg: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        # librdkafka insists on a group.id even for assign(); nothing is committed.
        "group.id": f"compat-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": int(TIMEOUT_S * 1000),
    }
    cfg.update(overrides)
    return Consumer(cfg)


def _ts_type(t: int) -> int | None:
    # librdkafka: 1 = CreateTime, 2 = LogAppendTime; Kafka attribute: 0 / 1.
    return {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}.get(t)


def consume_all(bootstrap: str, topic: str, partitions: list[int],
                expect_end: dict[int, int] | None = None, client: str = CLIENT) -> list[Seen]:
    c = consumer(bootstrap)
    try:
        ends = {}
        for p in partitions:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)
            ends[p] = high
        if expect_end is not None:
            assert ends == expect_end, f"{client}: high watermarks {ends}, expected {expect_end}"
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        seen: list[Seen] = []
        pos = {p: 0 for p in partitions}
        deadline = time.monotonic() + TIMEOUT_S
        while any(pos[p] < ends[p] for p in partitions):
            assert time.monotonic() < deadline, (
                f"{client}: timed out reading {topic}: positions {pos}, high watermarks {ends}"
            )
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"{client}: consumer error {m.error()}")
            ts_type, ts = m.timestamp()
            seen.append(Seen(m.partition(), m.offset(), m.key(), m.value(),
                             norm_headers(m.headers()), ts, _ts_type(ts_type)))
            pos[m.partition()] = m.offset() + 1
        return seen
    finally:
        c.close()
