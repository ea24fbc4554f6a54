"""Apache Kafka's own test tools (kafka-tools 4.4 jar) against a 3-broker kcompat
cluster of real processes, across broker failures:

- ``VerifiableProducer`` (acks=-1, idempotent, retrying) while the leader of
  partition 0 is killed -9 and restarted: every acknowledged value is in the log
  exactly once, at its acknowledged offset, in send order per partition, and
  nothing else is.
- ``VerifiableConsumer`` (a classic-protocol group member committing synchronously)
  across a SIGTERM (controlled shutdown) of its group coordinator's broker, under
  live production: the member keeps consuming and committing, never restarts below
  a successful commit, reads every acknowledged record, and the group's final
  committed offsets equal the log end offsets.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster, diagnostics
from compat_tests._cluster import read_log as cluster_read_log
from compat_tests._groups import BackgroundProducer, committed_offsets, end_offsets
from compat_tests.java.conftest import java_cmd

pytestmark = pytest.mark.timeout(150)

TOOLS = "org.apache.kafka.tools"
PARTITIONS = 3


# -- helpers --------------------------------------------------------------------------


class JavaTool:
    """A kafka-tools program as a subprocess whose JSON stdout lines are collected
    as they arrive (with the monotonic time each was read)."""

    def __init__(self, classpath: str, main: str, *args: str, stderr_path: Path,
                 heap: str = "256m") -> None:
        self.cmd = java_cmd(classpath, main, *args, heap=heap)
        self.stderr_path = stderr_path
        self._err = open(stderr_path, "w")  # noqa: SIM115 - closed in wait()/kill()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, bufsize=1)
        self.lines: list[str] = []
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            line = line.strip()
            with self._lock:
                self.lines.append(line)
                if line.startswith("{"):
                    with contextlib.suppress(json.JSONDecodeError):
                        self.events.append((now, json.loads(line)))

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for _t, e in self.events if e.get("name") == name]

    def timed(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            return list(self.events)

    def wait_until(self, pred: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.proc.poll() is not None:
                self._reader.join(5)
                if pred():
                    return
                raise AssertionError(f"{what}: the tool exited first\n{self.explain()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f}s\n{self.explain()}")
            time.sleep(0.05)

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"tool still running after {timeout:.0f}s\n{self.explain()}") from None
        self._reader.join(10)
        self._err.close()
        return rc

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM: the tools' shutdown hooks close their clients cleanly."""
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)
        self._err.close()

    def explain(self) -> str:
        with self._lock:
            out = "\n".join(self.lines[-40:])
        err = self.stderr_path.read_text(errors="replace")[-4000:] if self.stderr_path.exists() \
            else ""
        return (f"$ {' '.join(self.cmd)}\nexit {self.proc.poll()}\n--- stdout (tail) ---\n"
                f"{out}\n--- stderr (tail) ---\n{err}")


def read_log(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, str]]]:
    """``_cluster.read_log`` with the values decoded (the tools write text)."""
    return {p: [(o, v.decode()) for o, v in recs]
            for p, recs in cluster_read_log(bootstrap, topic, partitions).items()}


# -- 1. VerifiableProducer across kill -9 of a partition leader ------------------------


def test_verifiable_producer_across_leader_kill(tmp_path: Path, reference_cp: str) -> None:
    """VerifiableProducer (acks=-1, enable.idempotence=true, retries as the system tests'
    idempotent runs set them, 15 s at 400 msg/s: a loaded machine once took 7 s to the
    first acknowledgement, and all 3,000 sends of a shorter run were acknowledged before
    the kill); 3 s after its first acknowledgement the leader of partition 0 is killed -9
    and 3 s later restarted. The producer must
    get every send acknowledged (a producer_send_error is a final, non-retried failure),
    and the log must hold exactly the acknowledged values at their acknowledged
    offsets: no loss, no duplicate, per-partition send order."""
    n, rate = 6000, 400
    cluster = Cluster(tmp_path / "cluster")
    try:
        cluster.start()
        with diagnostics(cluster):
            topic = unique_topic("vp-kill")
            cluster.create_topic(topic, PARTITIONS, 3)
            config = tmp_path / "producer.properties"
            config.write_text("enable.idempotence=true\nretries=2147483647\n"
                              "max.in.flight.requests.per.connection=5\n"
                              "delivery.timeout.ms=90000\nrequest.timeout.ms=15000\n"
                              "linger.ms=5\n")
            prod = JavaTool(reference_cp, f"{TOOLS}.VerifiableProducer",
                            "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                            "--max-messages", str(n), "--throughput", str(rate),
                            "--acks", "-1", "--repeating-keys", "100",
                            "--producer.config", str(config),
                            stderr_path=tmp_path / "producer.stderr.log")
            try:
                prod.wait_until(lambda: prod.named("producer_send_success"), 60,
                                "first acknowledgement")
                time.sleep(3.0)
                victim = cluster.leaders(topic)[0]
                acked_before = len(prod.named("producer_send_success"))
                cluster.brokers[victim].kill()
                killed_at = time.monotonic()
                after_kill = cluster.wait_for_leaders(topic, PARTITIONS, exclude=victim)
                failover_s = time.monotonic() - killed_at
                time.sleep(max(0.0, 3.0 - (time.monotonic() - killed_at)))
                cluster.brokers[victim].start()
                print(f"killed broker {victim} (leader of p0) after {acked_before} acks; "
                      f"new leaders {after_kill} after {failover_s:.2f} s; restarted "
                      f"{time.monotonic() - killed_at:.2f} s after the kill")
                rc = prod.wait(90)
            finally:
                prod.kill()
            assert rc == 0, prod.explain()
            assert len(prod.named("producer_send_success")) > acked_before, \
                "no acknowledgement after the kill"

            errors = prod.named("producer_send_error")
            assert not errors, f"{len(errors)} sends failed for good, e.g. {errors[:3]}"
            tool = prod.named("tool_data")
            assert tool and tool[-1]["sent"] == n and tool[-1]["acked"] == n, tool
            success = prod.named("producer_send_success")
            acked: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
            for e in success:
                assert e["topic"] == topic, e
                acked[e["partition"]].append((e["offset"], e["value"]))
            values = [v for rows in acked.values() for _o, v in rows]
            assert len(success) == n and sorted(values, key=int) == [str(i) for i in range(n)], \
                "acknowledged values are not each of 0..n-1 exactly once"
            for p, rows in acked.items():
                rows.sort()
                offsets = [o for o, _v in rows]
                assert len(set(offsets)) == len(offsets), f"p{p}: two acks for one offset"
                # Values are the send sequence; idempotence keeps it per partition.
                order = [int(v) for _o, v in rows]
                assert order == sorted(order), f"p{p}: acknowledged offsets out of send order"

            log = read_log(cluster.live_bootstrap(), topic, PARTITIONS)
            for p in range(PARTITIONS):
                got, want = log[p], acked[p]
                if got != want:
                    gset, wset = set(got), set(want)
                    vals = [v for _o, v in got]
                    raise AssertionError(
                        f"partition {p}: log has {len(got)} records, {len(want)} acknowledged; "
                        f"missing {sorted(wset - gset)[:5]}, unacknowledged "
                        f"{sorted(gset - wset)[:5]}, duplicated values "
                        f"{sorted({v for v in vals if vals.count(v) > 1})[:5]}")
            print(f"{n} acknowledged records, each once at its offset; per partition "
                  f"{ {p: len(r) for p, r in acked.items()} }")
    finally:
        cluster.close()


# -- 2. VerifiableConsumer group across SIGTERM of its coordinator ---------------------


def _offsets(event: dict[str, Any], topic: str) -> dict[int, int]:
    return {o["partition"]: o["offset"] for o in event.get("offsets", []) if o["topic"] == topic}


def _committed_so_far(tool: JavaTool, topic: str) -> dict[int, int]:
    """The member's view of its committed offsets: each successful commit carries the
    partitions of one poll's records only, so the latest per partition."""
    out: dict[int, int] = {}
    for e in tool.named("offsets_committed"):
        if e["success"]:
            out.update(_offsets(e, topic))
    return out


def test_verifiable_consumer_group_across_coordinator_shutdown(tmp_path: Path,
                                                               reference_cp: str) -> None:
    """A VerifiableConsumer group member (sync commits after every poll) consumes a
    topic while a producer writes to it; its group coordinator's broker gets SIGTERM
    (controlled shutdown) mid-stream. The member goes on consuming and committing
    through the new coordinator, whenever it is (re)assigned a partition it resumes
    at or above its last successful commit, it reads every acknowledged record, and
    the final committed offsets (OffsetFetch from a live broker) equal the end offsets."""
    cluster = Cluster(tmp_path / "cluster", extra_args=(
        "--set", "offsets.topic.num.partitions=3",
        "--set", "group.initial.rebalance.delay.ms=0"))
    try:
        cluster.start()
        with diagnostics(cluster):
            topic = unique_topic("vc-coord")
            group = unique_topic("vc-group")
            cluster.create_topic(topic, PARTITIONS, 3)
            producer = BackgroundProducer(cluster.bootstrap, topic, PARTITIONS, count=3000,
                                          rate=300.0)
            producer.start()
            cons = JavaTool(reference_cp, f"{TOOLS}.VerifiableConsumer",
                            "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                            "--group-id", group, "--max-messages", "-1",
                            "--reset-policy", "earliest", "--session-timeout", "10000",
                            "--verbose", stderr_path=tmp_path / "consumer.stderr.log")
            try:
                cons.wait_until(lambda: [e for e in cons.named("offsets_committed")
                                         if e["success"]], 60, "first successful commit")
                admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
                desc = admin.describe_consumer_groups([group])[group].result(timeout=20)
                coordinator = desc.coordinator.id
                assert len(desc.members) == 1, desc
                cons.wait_until(lambda: len(cons.named("record_data")) >= 900, 60,
                                "900 records consumed")
                last_ok = _committed_so_far(cons, topic)
                cluster.brokers[coordinator].stop()
                stopped_at = time.monotonic()
                print(f"SIGTERM to coordinator {coordinator} after "
                      f"{len(cons.named('record_data'))} records consumed; last commit {last_ok}")
                # records after the shutdown too: a member that had read them all by
                # then (a slow start on a loaded machine) has something to commit
                late = BackgroundProducer(cluster.live_bootstrap(), topic, PARTITIONS,
                                          count=300, rate=300.0)
                late.start()

                # The commits it acknowledged are all readable at the new coordinator.
                fetched = committed_offsets(cluster.live_bootstrap(), group, topic, PARTITIONS)
                assert all(fetched[p] >= o for p, o in last_ok.items()), \
                    f"committed offsets went back after the shutdown: {fetched} < {last_ok}"
                live_admin = AdminClient({"bootstrap.servers": cluster.live_bootstrap(),
                                          "log_level": 0})  # alive until the future resolves
                new_desc = live_admin.describe_consumer_groups([group])[group].result(timeout=20)
                assert new_desc.coordinator.id != coordinator, new_desc.coordinator

                def commit_after_stop() -> bool:
                    return any(t > stopped_at and e.get("name") == "offsets_committed"
                               and e["success"] for t, e in cons.timed())
                cons.wait_until(commit_after_stop, 60, "a successful commit after the SIGTERM")
                resumed_s = next(t for t, e in cons.timed() if t > stopped_at and e.get(
                    "name") == "offsets_committed" and e["success"]) - stopped_at

                acked = {**producer.finish(), **late.finish()}
                ends = end_offsets(cluster.live_bootstrap(), topic, PARTITIONS)
                written = {p: max(producer.end_offsets()[p], late.end_offsets()[p])
                           for p in range(PARTITIONS)}
                assert ends == written, (ends, written)

                def caught_up() -> bool:
                    return _committed_so_far(cons, topic) == ends
                cons.wait_until(caught_up, 60, f"a commit of the end offsets {ends}")
                rc = cons.terminate()
            finally:
                cons.kill()
                producer.join(1)
            # 143: the JVM's exit status after SIGTERM, once the shutdown hook ran.
            assert rc in (0, 143) and cons.named("shutdown_complete"), cons.explain()

            # Replay the member's output: a (re)assigned partition must resume at or
            # above the last successful commit (a lower start means a lost commit).
            last_commit: dict[int, int] = {}
            position: dict[int, int] = {}
            resume_check: dict[int, int] = {}
            consumed: list[tuple[int, int, str]] = []
            regressions: list[str] = []
            gaps: list[tuple[int, int, int]] = []
            assignments = 0
            rebalances = []
            for t, e in cons.timed():
                name = e.get("name")
                if name in ("partitions_assigned", "partitions_revoked"):
                    rebalances.append(f"{name} {t - stopped_at:+.2f}s "
                                      f"{sorted(tp['partition'] for tp in e['partitions'])}")
                if name == "partitions_assigned":
                    assignments += 1
                    for tp in e["partitions"]:
                        if tp["topic"] == topic:
                            resume_check[tp["partition"]] = last_commit.get(tp["partition"], 0)
                            position.pop(tp["partition"], None)
                elif name == "record_data" and e["topic"] == topic:
                    p, o = e["partition"], e["offset"]
                    consumed.append((p, o, e["value"]))
                    if p in resume_check:
                        floor = resume_check.pop(p)
                        if o < floor:
                            regressions.append(f"p{p} resumed at {o} below commit {floor}")
                    elif p in position and o != position[p]:
                        gaps.append((p, position[p], o))
                    position[p] = o + 1
                elif name == "offsets_committed" and e["success"]:
                    last_commit.update(_offsets(e, topic))
            assert not regressions, regressions[:5]
            # A position may skip offsets without data (a new partition leader's control
            # batch), never an acknowledged record.
            acked_at = {pos for pos in acked.values()}
            skipped = [(p, a, b) for p, a, b in gaps if any((p, o) in acked_at
                                                            for o in range(a, b))]
            assert not skipped, f"fetch position skipped acknowledged records: {skipped[:5]}"

            by_value = {v.encode(): (p, o) for p, o, v in consumed}
            missing = [v for v in acked if v not in by_value]
            assert not missing, f"{len(missing)} acknowledged records never consumed: {missing[:5]}"
            wrong = [(v, acked[v], by_value[v]) for v in acked if by_value[v] != acked[v]]
            assert not wrong, f"records consumed at other offsets than acknowledged: {wrong[:5]}"
            duplicates = len(consumed) - len({(p, o) for p, o, _v in consumed})
            assert duplicates == 0 or assignments > 1, \
                f"{duplicates} records consumed twice without any rebalance"

            final = committed_offsets(cluster.live_bootstrap(), group, topic, PARTITIONS)
            assert final == ends, f"committed {final} != end offsets {ends}"
            # As with Kafka, the group metadata record lets the new coordinator carry on
            # with the same generation: a coordinator move is no reason to rebalance.
            # (Before the consumer's own SIGTERM it was assigned once, never revoked.)
            before_exit = rebalances[:-1] if rebalances[-1].startswith("partitions_revoked") \
                else rebalances
            assert assignments == 1 and len(before_exit) == 1, (
                f"the member lost its partitions across the coordinator move (time from the "
                f"SIGTERM's return): {rebalances}; {duplicates} records consumed twice")
            print(f"{len(consumed)} records consumed ({duplicates} again after a rebalance, "
                  f"{assignments} assignments); first commit {resumed_s:.2f} s after the "
                  f"SIGTERM; committed == end offsets {ends}; rebalance events (time from the "
                  f"SIGTERM's return): {rebalances}")
    finally:
        cluster.close()
