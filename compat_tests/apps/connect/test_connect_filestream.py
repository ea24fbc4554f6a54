"""An unmodified Kafka Connect 4.4.0 distributed worker (issue 18 item 4, second bullet).

The worker (``ConnectDistributed``, a JVM of its own, ``_worker.py``) runs the
FileStream connectors: ``FileStreamSource`` reads the lines of an input file into a
one-partition topic and ``FileStreamSink`` writes the topic to an output file. The
test appends distinct lines to the input in bursts and restarts the worker as a new
process twice while lines are in flight:

1. SIGTERM (a graceful restart): the worker commits its source offsets and sink
   offsets as it stops, so the output file holds every line exactly once, in order.
2. kill -9: the source side is exactly-once (``exactly.once.source.support=enabled``:
   records and source offsets commit in one transaction, the next task's producer
   fences and aborts the dead one's), so the topic, read ``read_committed``, holds
   every line once in order. The sink is at-least-once by design: the new task
   resumes from the sink group's committed offset, which the test reads between the
   kill and the restart, so the output must be exactly the lines written before the
   kill followed by every line from that offset on — duplicates only of the lines
   past the last commit, none lost.

At the end the worker's config, offset and status topics exist with
``cleanup.policy=compact`` and the replication factor asked for, the config topic
holds both connectors' configs, the offset topic the source's last position (the
input file's size) and the sink group's committed offset is the topic's end.

The same test runs against one kcompat broker, a 3-broker kcompat cluster
(replication factor 3 for every topic) and the Apache Kafka 4.4.0 reference broker.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from compat_tests._broker import Broker
from compat_tests._cluster import Cluster
from compat_tests._deployment import CLUSTER_BROKER_ARGS, Deployment
from compat_tests.apps.connect._worker import ConnectError, ConnectWorker, connect_libs
from compat_tests.java.kafka_reference import KafkaReference

WAIT_S = 60.0
#: Every broker here looks for timed-out transactions each 0.5 s (the 3-broker
#: cluster's CLUSTER_BROKER_ARGS already say so; Kafka's default is 10 s).
TXN_CLEANUP = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
BURST = 60          # lines per burst
KILL_BURST = 5000   # lines of the burst that a kill -9 interrupts (3 source polls)
# FileStreamSource keeps its default batch.size (2000 lines a poll): a smaller one
# leaves the lines it has buffered past a batch unsent until the file grows again
# (the task extracts lines only after a read), which would stall the end of a burst.


@dataclass
class Target:
    name: str
    bootstrap: str
    replication: int
    create_topic: Callable[[str], None]
    diagnostics: Callable[[], str]
    closers: list[Callable[[], object]] = field(default_factory=list)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _create_topic(bootstrap: str, replication: int) -> Callable[[str], None]:
    def create(name: str) -> None:
        admin = _admin(bootstrap)  # alive until the future resolves
        fut = admin.create_topics([NewTopic(name, 1, replication)],
                                  operation_timeout=20, request_timeout=20)
        fut[name].result(timeout=30)
    return create


@pytest.fixture(scope="module", params=["kcompat", "kcompat-3", "kafka-4.4.0"])
def target(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The brokers, shared by the module's tests (each has its own topic and worker group)."""
    kind = request.param
    connect_libs()  # Maven resolution (once, cached) before any broker starts
    tmp_path = tmp_path_factory.mktemp(kind)
    t: Target
    if kind == "kcompat":
        broker = Broker(tmp_path / "broker", extra_args=(
            "--admin-port", "-1", "--set", "group.initial.rebalance.delay.ms=0",
            "--set", f"{TXN_CLEANUP}=500"))
        broker.start()
        t = Target(kind, broker.bootstrap, 1, _create_topic(broker.bootstrap, 1),
                   lambda: broker.tail(40), [broker.kill])
    elif kind == "kcompat-3":
        cluster = Cluster(tmp_path / "cluster",
                          extra_args=(*Deployment.cluster_args("rf3"), *CLUSTER_BROKER_ARGS))
        try:
            cluster.start()
        except BaseException:
            cluster.kill()
            raise

        def tails() -> str:
            return "\n".join(f"--- broker {n}\n{b.tail(30)}" for n, b in cluster.brokers.items())

        def create(name: str) -> None:
            cluster.create_topic(name, 1, 3)

        t = Target(kind, cluster.bootstrap, 3, create, tails, [cluster.kill])
    else:
        ref = KafkaReference(tmp_path / "kafka", overrides={TXN_CLEANUP: "500"})
        ref.start()
        t = Target(kind, ref.bootstrap, 1, _create_topic(ref.bootstrap, 1),
                   lambda: ref.tail(40), [ref.close])
    try:
        yield t
    finally:
        for close in t.closers:
            close()


# -- helpers ------------------------------------------------------------------------

def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:  # one write: FileStreamSource never sees half a burst's line
        f.write("".join(f"{line}\n" for line in lines))


def _wait(what: str, cond: Callable[[], bool], timeout: float = WAIT_S,
          explain: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s\n{explain()}")
        time.sleep(0.1)


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0, want: int = 0
               ) -> dict[int, list[tuple[int, str | None, str | None]]]:
    """Every committed record of every partition of ``topic`` as (offset, key, value),
    read ``read_committed`` from the start to the end each partition has now — and
    then on until ``want`` records in all (records still being written) and an end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": 0})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(md.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: dict[int, list[tuple[int, str | None, str | None]]] = {p: [] for p in parts}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < len(parts) or sum(map(len, out.values())) < want:
            assert time.monotonic() < deadline, (
                f"{topic}: {sum(map(len, out.values()))} of {want} records, partitions "
                f"{sorted(at_end)} of {len(parts)} read to the end")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            key, value = msg.key(), msg.value()
            out[msg.partition()].append((msg.offset(), key.decode() if key else None,
                                         value.decode() if value is not None else None))
        return out
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset of partition 0 of ``topic`` (-1: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0,
                         "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(bootstrap)  # alive until the future resolves
    entries = admin.describe_configs([res])[res].result(timeout=20)
    return {k: v.value for k, v in entries.items()}


def replication_of(bootstrap: str, topic: str) -> set[int]:
    md = _admin(bootstrap).list_topics(topic, timeout=10).topics[topic]
    return {len(p.replicas) for p in md.partitions.values()}


# -- the test -----------------------------------------------------------------------

def _new_run(target: Target, tmp_path: Path) -> tuple[str, str, str, Path, Path]:
    """A run id, a topic named after it (created) and a Connect group name, an
    empty input file and the path of the output file."""
    run = uuid.uuid4().hex[:8]
    topic, group = f"lines-{run}", f"connect-{run}"
    target.create_topic(topic)
    src_file, out_file = tmp_path / "input.txt", tmp_path / "output.txt"
    src_file.write_text("")
    return run, topic, group, src_file, out_file


@contextlib.contextmanager
def _reported(target: Target, marks: dict[str, float], explain: Callable[[], str],
              *workers: ConnectWorker) -> Iterator[None]:
    """Around a test's steps: on failure print ``explain()``; at the end close the
    workers and print the time each step was reached (``marks``)."""
    try:
        yield
    except BaseException:
        print(explain())
        raise
    finally:
        for worker in workers:
            worker.close()
        print(f"[{target.name}] " + ", ".join(f"{k} {v:.1f}s" for k, v in marks.items()))


def test_filestream_through_worker_restarts(target: Target, tmp_path: Path) -> None:
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    run, topic, group, src_file, out_file = _new_run(target, tmp_path)
    worker = ConnectWorker(tmp_path / "worker", target.bootstrap, group, target.replication,
                           overrides={
                               "exactly.once.source.support": "enabled",
                               # the sink reads only committed source transactions
                               "consumer.isolation.level": "read_committed",
                               "offset.flush.interval.ms": "1000",
                               # a dead worker's tasks move at the next rebalance, which
                               # its group (and its sink consumer's) starts after 6 s
                               "scheduled.rebalance.max.delay.ms": "0",
                               "session.timeout.ms": "6000",
                               "heartbeat.interval.ms": "1000",
                               "consumer.session.timeout.ms": "6000",
                               "consumer.heartbeat.interval.ms": "1000",
                               # With exactly-once sources a worker reads its offsets
                               # topic read_committed up to the end *including* open
                               # transactions (Connect's KafkaBasedLog, by design), so
                               # the worker restarted after a kill -9 mid-commit waits
                               # until the dead task's transaction times out: 60 s by
                               # default, on Kafka as on kcompat.
                               "producer.transaction.timeout.ms": "5000",
                           })
    lines: list[str] = []

    def burst(n: int = BURST) -> None:
        new = [f"{run} line {len(lines) + i:05d}" for i in range(n)]
        lines.extend(new)
        _append(src_file, new)

    def explain() -> str:
        return (f"[{target.name}] output has {len(_lines(out_file))} of {len(lines)} lines\n"
                f"--- worker log\n{worker.tail(60)}\n--- broker\n{target.diagnostics()}")

    def wait_output(n: int, why: str) -> None:
        _wait(f"[{target.name}] {why}: {n} lines in the output",
              lambda: len(_lines(out_file)) >= n, explain=explain)

    with _reported(target, marks, explain, worker):
        worker.start()
        marks["worker up"] = time.monotonic() - t0
        worker.put_connector("file-source", {
            "connector.class": "FileStreamSource", "tasks.max": "1", "topic": topic,
            "file": str(src_file),
            "exactly.once.support": "required"})
        worker.put_connector("file-sink", {
            "connector.class": "FileStreamSink", "tasks.max": "1", "topics": topic,
            "file": str(out_file)})
        worker.wait_running("file-source")
        worker.wait_running("file-sink")
        burst()
        wait_output(BURST // 2, "first burst")
        burst()  # in flight while the worker stops
        worker.stop()
        marks["SIGTERM"] = time.monotonic() - t0
        burst()  # written while no worker runs
        worker.start()
        burst()
        wait_output(len(lines), "after the graceful restart")
        time.sleep(1.5)  # a duplicate would come after the last line
        assert _lines(out_file) == lines, (
            f"[{target.name}] after a graceful restart the output is not every line once "
            f"in order\n{explain()}")
        marks["graceful checked"] = time.monotonic() - t0

        # kill -9 while lines are in flight: a larger burst (FileStreamSource reads up
        # to batch.size = 2000 lines a poll, one transaction each), killed once its
        # first lines reach the output
        done_before = len(lines)
        burst(KILL_BURST)
        wait_output(done_before + 1, "before the kill")
        worker.kill()
        written_at_kill = len(_lines(out_file))
        sink_committed = committed(target.bootstrap, "connect-file-sink", topic)
        marks["kill -9"] = time.monotonic() - t0
        burst()
        worker.start()
        burst()
        records = read_topic(target.bootstrap, topic, want=len(lines))[0]
        marks["topic read"] = time.monotonic() - t0
        assert [v for _o, _k, v in records] == lines, (
            f"[{target.name}] the topic (read_committed) is not every line once in order "
            f"after kill -9 of an exactly-once source")
        replay_from = sum(1 for off, _k, _v in records if off < sink_committed)
        assert 0 < replay_from <= written_at_kill, (
            f"[{target.name}] the sink group committed offset {sink_committed} (line "
            f"{replay_from}) is not within the {written_at_kill} lines written at the kill")
        expected = lines[:written_at_kill] + lines[replay_from:]
        wait_output(len(expected), "after kill -9")
        time.sleep(1.5)
        out = _lines(out_file)
        assert out == expected, (
            f"[{target.name}] after kill -9 the output should be the {written_at_kill} lines "
            f"written before it, then every line from the committed line {replay_from} on; "
            f"got {len(out)} lines\n{explain()}")
        marks["kill checked"] = time.monotonic() - t0
        print(f"[{target.name}] kill -9 with {written_at_kill} of {done_before + KILL_BURST} lines "
              f"in the output, the sink committed up to line {replay_from}: "
              f"{written_at_kill - replay_from} lines written again")

        worker.stop()
        marks["stopped"] = time.monotonic() - t0
        _check_internal_topics(target, worker, topic, src_file)
        marks["internal topics checked"] = time.monotonic() - t0


def _check_internal_topics(target: Target, worker: ConnectWorker, topic: str,
                           src_file: Path) -> None:
    props = worker.properties()
    names = {kind: props[f"{kind}.storage.topic"] for kind in ("config", "offset", "status")}
    for kind, name in names.items():
        configs = topic_configs(target.bootstrap, name)
        assert configs.get("cleanup.policy") == "compact", (
            f"[{target.name}] {kind} topic {name}: cleanup.policy {configs.get('cleanup.policy')}")
        assert replication_of(target.bootstrap, name) == {target.replication}, name

    config_log = [(k, v) for recs in read_topic(target.bootstrap, names["config"]).values()
                  for _o, k, v in recs]
    latest = {k: json.loads(v) if v else None for k, v in config_log}
    for name, want in (("file-source", str(src_file)), ("file-sink", None)):
        stored = latest.get(f"connector-{name}")
        assert stored is not None, f"[{target.name}] no config of {name} in {sorted(map(str, latest))}"
        assert stored["properties"]["connector.class"].startswith("FileStream"), stored
        if want is not None:
            assert stored["properties"]["file"] == want, stored
        assert f"task-{name}-0" in latest, f"[{target.name}] no task config of {name}"

    offsets = [(k, v) for recs in read_topic(target.bootstrap, names["offset"]).values()
               for _o, k, v in recs]
    source_offsets = [json.loads(v) for k, v in offsets
                      if k is not None and v is not None
                      and json.loads(k) == ["file-source", {"filename": str(src_file)}]]
    assert source_offsets, f"[{target.name}] no offset of file-source in {offsets[:5]}"
    assert source_offsets[-1] == {"position": src_file.stat().st_size}, (
        f"[{target.name}] the source's last offset {source_offsets[-1]} is not the end of the "
        f"input ({src_file.stat().st_size} bytes)")

    status_keys = {k for recs in read_topic(target.bootstrap, names["status"]).values()
                   for _o, k, _v in recs}
    assert {"status-connector-file-source", "status-task-file-sink-0"} <= status_keys, status_keys

    end = read_topic(target.bootstrap, topic)[0]
    last = end[-1][0]
    sink_at = committed(target.bootstrap, "connect-file-sink", topic)
    assert sink_at > last, (f"[{target.name}] the sink committed {sink_at}, not past the "
                            f"topic's last record {last}")


def test_offsets_api_and_lifecycle(target: Target, tmp_path: Path) -> None:
    """Two workers in one group, Connect's default at-least-once source (no
    transactions) and KIP-875's offsets API. The connectors and tasks spread over
    both workers; every request goes to the one that is not the group's leader,
    which forwards what only the leader may do. Read both connectors' offsets, stop
    a connector, rewind its offsets (a sink to a Kafka offset, a source to a byte
    position of its file), reset them, resume: the output replays exactly from the
    offsets set. Deleting a connector leaves a tombstone in the config topic."""
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    run, topic, group, src_file, out_file = _new_run(target, tmp_path)
    leader, worker = (ConnectWorker(tmp_path / name, target.bootstrap, group,
                                    target.replication,
                                    overrides={"offset.flush.interval.ms": "500",
                                               "scheduled.rebalance.max.delay.ms": "0",
                                               # the leader hears of a joining member
                                               # at its next heartbeat (default 3 s)
                                               "heartbeat.interval.ms": "1000"})
                      for name in ("worker-1", "worker-2"))
    lines = [f"{run} line {i:05d}" for i in range(100)]
    sink_partition = {"kafka_topic": topic, "kafka_partition": 0}
    source_partition = {"filename": str(src_file)}
    expected: list[str] = []

    def explain() -> str:
        return (f"[{target.name}] output has {len(_lines(out_file))} lines, expected "
                f"{len(expected)}\n--- worker-1 log\n{leader.tail(40)}\n"
                f"--- worker-2 log\n{worker.tail(40)}\n"
                f"--- broker\n{target.diagnostics()}")

    def wait_output(why: str) -> None:
        _wait(f"[{target.name}] {why}: {len(expected)} lines in the output",
              lambda: len(_lines(out_file)) >= len(expected), explain=explain)
        time.sleep(1.0)  # a duplicate would come after the last line
        assert _lines(out_file) == expected, f"[{target.name}] {why}\n{explain()}"

    def offsets(name: str) -> list[Any]:
        return worker.request("GET", f"/connectors/{name}/offsets")[1]["offsets"]

    def wait_offsets(name: str, want: list[Any]) -> None:
        _wait(f"[{target.name}] offsets of {name} = {want}", lambda: offsets(name) == want,
              timeout=30.0, explain=lambda: f"last: {offsets(name)}\n{worker.tail(30)}")

    def rewind(name: str, new: list[Any] | None) -> None:
        """Stop, alter (``new``) or reset (None) the offsets, resume."""
        worker.request("PUT", f"/connectors/{name}/stop")
        worker.wait_state(name, "STOPPED")
        if new is None:
            worker.request("DELETE", f"/connectors/{name}/offsets")
            wait_offsets(name, [])
        else:
            worker.request("PATCH", f"/connectors/{name}/offsets", {"offsets": new})
            wait_offsets(name, new)
        worker.request("PUT", f"/connectors/{name}/resume")
        worker.wait_running(name)

    with _reported(target, marks, explain, worker, leader):
        leader.start()  # the first member leads the group
        worker.launch()  # its JVM starts while the connectors are created
        leader.put_connector("rewind-source", {
            "connector.class": "FileStreamSource", "tasks.max": "1", "topic": topic,
            "file": str(src_file)})
        worker.wait_healthy()
        worker.put_connector("rewind-sink", {
            "connector.class": "FileStreamSink", "tasks.max": "1", "topics": topic,
            "file": str(out_file)})
        ids = {f"127.0.0.1:{w.rest_port}" for w in (leader, worker)}

        def placed() -> set[str]:
            try:  # 404 until the connector's status is written
                return {unit["worker_id"] for name in ("rewind-source", "rewind-sink")
                        for st in [worker.status(name)]
                        for unit in [st["connector"], *st["tasks"]]}
            except ConnectError:
                return set()

        _wait(f"[{target.name}] connectors and tasks on both workers",
              lambda: placed() == ids, explain=lambda: f"{placed()} != {ids}")

        def same_tasks() -> bool:  # 500 while "a rebalance is expected"
            try:
                return bool(leader.request("GET", "/connectors/rewind-source/tasks")[1]
                            == worker.request("GET", "/connectors/rewind-source/tasks")[1])
            except ConnectError:
                return False

        _wait(f"[{target.name}] both workers list the same tasks", same_tasks)
        marks["spread over both workers"] = time.monotonic() - t0
        _append(src_file, lines)
        expected += lines
        wait_output("first run")
        wait_offsets("rewind-source", [{"partition": source_partition,
                                      "offset": {"position": src_file.stat().st_size}}])
        wait_offsets("rewind-sink", [{"partition": sink_partition,
                                    "offset": {"kafka_offset": 100}}])
        marks["offsets read"] = time.monotonic() - t0

        rewind("rewind-sink", [{"partition": sink_partition, "offset": {"kafka_offset": 40}}])
        expected += lines[40:]
        wait_output("the sink rewound to offset 40")
        marks["sink rewound"] = time.monotonic() - t0

        position = sum(len(line) + 1 for line in lines[:70])
        rewind("rewind-source", [{"partition": source_partition,
                                "offset": {"position": position}}])
        expected += lines[70:]  # read again into the topic (offsets 100..129), then written
        wait_output("the source rewound to line 70")
        marks["source rewound"] = time.monotonic() - t0

        rewind("rewind-sink", None)  # the sink group's offsets deleted: from the earliest
        expected += lines + lines[70:]
        wait_output("the sink's offsets reset")
        marks["sink reset"] = time.monotonic() - t0

        assert worker.request("GET", "/connectors/rewind-sink/topics")[1] == {
            "rewind-sink": {"topics": [topic]}}
        worker.request("DELETE", "/connectors/rewind-source")
        _wait("rewind-source deleted",
              lambda: worker.request("GET", "/connectors")[1] == ["rewind-sink"])
        worker.stop()
        leader.stop()
        configs = worker.properties()["config.storage.topic"]
        latest = {k: v for recs in read_topic(target.bootstrap, configs).values()
                  for _o, k, v in recs}
        assert "connector-rewind-source" in latest, f"[{target.name}] {sorted(map(str, latest))}"
        assert latest["connector-rewind-source"] is None, (
            f"[{target.name}] no tombstone of the deleted connector in {configs}")
        assert latest.get("connector-rewind-sink") is not None
        marks["deleted"] = time.monotonic() - t0
