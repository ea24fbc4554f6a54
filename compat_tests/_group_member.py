"""One consumer-group member in its own process, for tests that kill -9 members.

    python -m compat_tests._group_member CLIENT BOOTSTRAP TOPIC GROUP OUT_FILE [options]

CLIENT is kafka-python, confluent or aiokafka. The member subscribes to TOPIC in
GROUP (auto.offset.reset=earliest, no auto-commit) and, for every poll batch,
appends one ``partition offset value`` line per processed record to OUT_FILE, then
commits the batch's offsets synchronously and appends ``# committed p:o ...``.
Assignment changes are appended as ``# assigned <unix time> p,p,...``. SIGTERM makes
it close the consumer (a clean LeaveGroup) and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any


class Out:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.assigned: frozenset[int] | None = None

    def line(self, text: str) -> None:
        os.write(self.fd, (text + "\n").encode())

    def record(self, partition: int, offset: int, value: bytes | None) -> None:
        self.line(f"{partition} {offset} {(value or b'').decode(errors='replace')}")

    def assignment(self, partitions: set[int] | frozenset[int]) -> None:
        ps = frozenset(partitions)
        if ps != self.assigned:
            self.assigned = ps
            self.line(f"# assigned {time.time():.3f} {','.join(map(str, sorted(ps)))}")

    def committed(self, offsets: dict[int, int]) -> None:
        self.line("# committed " + " ".join(f"{p}:{o}" for p, o in sorted(offsets.items())))


STOP = False


def _on_term(signum: int, frame: Any) -> None:
    global STOP
    STOP = True


KAFKA_PYTHON_JOIN_WAIT_MS = 60_000  # a kafka-python member's first join, at most


def kafka_python_learn_topics(consumer: Any, topics: list[str], timeout_s: float = 30.0) -> None:
    """Before a kafka-python consumer's first ``poll()`` (which sends its first
    JoinGroup), wait until its metadata knows the subscribed topics' partitions.

    kafka-python 3.0.12 can orphan a finished rebalance (FINDINGS.md): a leader
    that assigned from metadata lacking a topic rejoins once the metadata arrives,
    with only its metadata snapshot saying so; if the ``poll()`` timer expires
    while that JoinGroup/SyncGroup is in flight, the next ``poll()`` finds nothing
    to rejoin for (the assignment took the new snapshot) and never applies the
    SyncGroup answer: no partitions and no heartbeats until the session times out.
    A member that knows its topics when it first joins does not rejoin for them."""
    deadline = time.monotonic() + timeout_s
    for topic in topics:
        while not consumer.partitions_for_topic(topic):
            if time.monotonic() > deadline:
                raise TimeoutError(f"kafka-python never learned the partitions of {topic}")
            time.sleep(0.05)


def run_kafka_python(a: argparse.Namespace, out: Out) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    c = KafkaConsumer(
        a.topic, bootstrap_servers=a.bootstrap, group_id=a.group,
        auto_offset_reset="earliest", enable_auto_commit=False,
        session_timeout_ms=a.session_timeout_ms, heartbeat_interval_ms=a.heartbeat_ms,
        group_instance_id=a.instance_id, request_timeout_ms=30000,
    )
    try:
        kafka_python_learn_topics(c, [a.topic])
        # the first join and sync in one wait, not across poll(200 ms) timers:
        # kafka-python 3.0.12 drops a join that finishes between two polls and
        # joins again, a second generation (kafka_python/FINDINGS.md)
        c._coordinator.ensure_active_group(timeout_ms=KAFKA_PYTHON_JOIN_WAIT_MS)
        while not STOP:
            batch = c.poll(timeout_ms=200, max_records=a.max_records)
            out.assignment({tp.partition for tp in c.assignment()})
            offsets: dict[Any, Any] = {}
            for tp, msgs in batch.items():
                for m in msgs:
                    out.record(m.partition, m.offset, m.value)
                    offsets[TopicPartition(tp.topic, tp.partition)] = OffsetAndMetadata(
                        m.offset + 1, "", -1)
            if offsets:
                try:
                    c.commit(offsets)
                except Exception as exc:  # noqa: BLE001 - logged for the test to see
                    out.line(f"# commit-error {type(exc).__name__}: {exc}")
                else:
                    out.committed({tp.partition: om.offset for tp, om in offsets.items()})
    finally:
        c.close(autocommit=False)


def run_confluent(a: argparse.Namespace, out: Out) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    cfg: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap, "group.id": a.group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": a.session_timeout_ms, "heartbeat.interval.ms": a.heartbeat_ms,
        "partition.assignment.strategy": a.strategy or "range",
        "fetch.wait.max.ms": 100,
    }
    if a.instance_id:
        cfg["group.instance.id"] = a.instance_id
    c = Consumer(cfg)
    pending: dict[int, int] = {}

    def commit_pending(c: Any, revoking: frozenset[int] = frozenset()) -> None:
        # A cooperative member keeps consuming while it rejoins, and Kafka 4 rejects its
        # commits between JoinGroup and SyncGroup (REBALANCE_IN_PROGRESS at the new
        # generation, ILLEGAL_GENERATION at the old one it uses until the JoinGroup answer):
        # retry after the next poll() (partitions being revoked get no next try).
        if not pending:
            return
        try:
            c.commit(offsets=[TopicPartition(a.topic, p, o) for p, o in pending.items()],
                     asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.REBALANCE_IN_PROGRESS,
                                      KafkaError.ILLEGAL_GENERATION) and not revoking:
                out.line(f"# commit-retry {exc}")
                return
            out.line(f"# commit-error {type(exc).__name__}: {exc}")
            for p in revoking or list(pending):
                pending.pop(p, None)
            return
        out.committed(pending)
        pending.clear()

    def on_revoke(c: Any, parts: Any) -> None:
        # served inside poll(): commit what was processed before giving partitions up
        commit_pending(c, frozenset(tp.partition for tp in parts) or frozenset({-1}))

    c.subscribe([a.topic], on_revoke=on_revoke)
    try:
        while not STOP:
            # one record per poll(): rebalance callbacks run between records only
            for n in range(a.max_records):
                m = c.poll(0.2 if n == 0 else 0)
                if m is None:
                    break
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        out.line(f"# consume-error {m.error()}")
                    continue
                out.record(m.partition(), m.offset(), m.value())
                pending[m.partition()] = m.offset() + 1
            out.assignment({tp.partition for tp in c.assignment()})
            commit_pending(c)
    finally:
        c.close()


async def run_aiokafka(a: argparse.Namespace, out: Out) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

    lock = asyncio.Lock()
    revokes = [0]

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            # aiokafka rebalances in a background task: wait for the batch being
            # processed to be committed before the JoinGroup goes out.
            async with lock:
                revokes[0] += 1

        async def on_partitions_assigned(self, assigned: Any) -> None:
            pass

    c = AIOKafkaConsumer(
        bootstrap_servers=a.bootstrap, group_id=a.group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=a.session_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_ms, group_instance_id=a.instance_id,
    )
    await c.start()
    c.subscribe([a.topic], listener=Listener())
    try:
        while not STOP:
            seen = revokes[0]
            batch = await c.getmany(timeout_ms=200, max_records=a.max_records)
            async with lock:
                out.assignment({tp.partition for tp in c.assignment()})
                if revokes[0] != seen:  # fetched across a revocation: refetch, do not process
                    for tp, msgs in batch.items():
                        if msgs and tp in c.assignment():
                            c.seek(tp, msgs[0].offset)
                    continue
                offsets: dict[Any, int] = {}
                for tp, msgs in batch.items():
                    for m in msgs:
                        out.record(m.partition, m.offset, m.value)
                        offsets[TopicPartition(tp.topic, tp.partition)] = m.offset + 1
                if offsets:
                    try:
                        await c.commit(offsets)
                    except Exception as exc:  # noqa: BLE001
                        out.line(f"# commit-error {type(exc).__name__}: {exc}")
                    else:
                        out.committed({tp.partition: o for tp, o in offsets.items()})
            await asyncio.sleep(0)
    finally:
        await c.stop()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("client", choices=["kafka-python", "confluent", "aiokafka"])
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("out")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--strategy", default=None)
    ap.add_argument("--max-records", type=int, default=100)
    a = ap.parse_args(argv)
    if level := os.environ.get("COMPAT_MEMBER_LOG_LEVEL"):  # client logs on stderr
        logging.basicConfig(level=level, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    signal.signal(signal.SIGTERM, _on_term)
    out = Out(a.out)
    out.line(f"# started {time.time():.3f} pid={os.getpid()} client={a.client}")
    if a.client == "kafka-python":
        run_kafka_python(a, out)
    elif a.client == "confluent":
        run_confluent(a, out)
    else:
        asyncio.run(run_aiokafka(a, out))
    out.line(f"# closed {time.time():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
