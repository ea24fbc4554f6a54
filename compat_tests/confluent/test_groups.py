"""confluent-kafka (librdkafka 2.x) consumer groups against a real kcompat broker:
3 members under live production with the range (eager) and cooperative-sticky
(incremental) assignors, kill -9 and clean leave of a member, group admin, and
static membership.

Every test also runs in a 3-broker cluster at replication factor 1 (conftest.py,
``GROUP_KINDS``), except two timed scenarios: clean leave runs at replication factor
3 instead, kill -9 of a member (session expiry, the coordinator's alone) on a single
node only.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from .._broker import unique_topic
from .._deployment import RF3_ONLY, SINGLE_ONLY, Deployment
from .._groups import (
    HEARTBEAT_MS,
    SESSION_MS,
    BackgroundProducer,
    Ledger,
    assignment_covers,
    check_exactly_once,
    clean_leave_scenario,
    committed_offsets,
    create_topic,
    end_offsets,
    kill_member_scenario,
    produce_sync,
    unique_group,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

#: commit errors of a member that rejoins (see ``Member._commit_pending``)
RETRY_AFTER_REBALANCE = (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION)
CLIENT = "confluent-kafka"



class Member(threading.Thread):
    """A librdkafka consumer in a thread: consume, process into the ledger, commit
    the batch synchronously. Tracks what it holds through the rebalance callbacks."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, ledger: Ledger,
                 **cfg: Any) -> None:
        super().__init__(daemon=True, name=name)
        self.topic, self.ledger = topic, ledger
        self.cfg: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
            "fetch.wait.max.ms": 100,
        }
        self.cfg.update(cfg)
        self.held: frozenset[int] = frozenset()
        self.assigned: frozenset[int] = frozenset()
        # (partitions revoked, partitions held just before) while running
        self.revocations: list[tuple[frozenset[int], frozenset[int]]] = []
        self.cooperative = self.cfg.get("partition.assignment.strategy") == "cooperative-sticky"
        self.commit_errors: list[str] = []
        self.pending: dict[int, int] = {}  # processed, not yet committed
        self.commit_retries = 0
        self.consume_errors: list[str] = []
        self.exc: BaseException | None = None
        self.consuming = threading.Event()
        self.consuming.set()
        self.stop = threading.Event()
        self.closing = False

    def _on_assign(self, c: Any, parts: list[TopicPartition]) -> None:
        got = frozenset(tp.partition for tp in parts)
        self.held = self.held | got if self.cooperative else got

    def _commit_pending(self, c: Any, revoking: frozenset[int] = frozenset()) -> None:
        """Commit processed offsets synchronously. A cooperative member keeps consuming
        while it rejoins, and Kafka 4 rejects its commits between JoinGroup and SyncGroup:
        REBALANCE_IN_PROGRESS at the new generation, ILLEGAL_GENERATION at the one it
        still commits with until the JoinGroup answer arrives. Either keeps them pending
        for the next try, after poll() has finished the rebalance (at the new
        generation); partitions being revoked get no next try."""
        if not self.pending:
            return
        try:
            c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in self.pending.items()],
                     asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() in RETRY_AFTER_REBALANCE and not revoking:
                self.commit_retries += 1
                return
            self.commit_errors.append(str(exc))
            for p in revoking or list(self.pending):
                self.pending.pop(p, None)
            return
        self.pending.clear()

    def _on_revoke(self, c: Any, parts: list[TopicPartition]) -> None:
        # Served inside poll(): commit what was processed before giving partitions up.
        gone = frozenset(tp.partition for tp in parts)
        self._commit_pending(c, revoking=gone or frozenset({-1}))
        if not self.closing and gone:
            self.revocations.append((gone, self.held))
        self.held = self.held - gone

    def run(self) -> None:
        try:
            c = RdConsumer(self.cfg)
            c.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
            try:
                while not self.stop.is_set():
                    if not self.consuming.is_set():
                        time.sleep(0.05)
                        continue
                    # poll() one record at a time: rebalance callbacks run between records,
                    # never inside a batch that is not processed yet
                    for n in range(100):
                        m = c.poll(0.2 if n == 0 else 0)
                        if m is None:
                            break
                        if m.error() is not None:
                            if m.error().code() != KafkaError._PARTITION_EOF:
                                self.consume_errors.append(str(m.error()))
                            continue
                        self.ledger.add(self.name, m.partition(), m.offset(), m.value())
                        self.pending[m.partition()] = m.offset() + 1
                    self.assigned = frozenset(tp.partition for tp in c.assignment())
                    self._commit_pending(c)
            finally:
                self.closing = True
                c.close()
        except BaseException as exc:  # noqa: BLE001
            self.exc = exc

    def halt(self) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive(), f"{CLIENT}: member {self.name} did not stop within 30s"
        assert self.exc is None, f"{CLIENT}: member {self.name} failed: {self.exc!r}"


def ok(members: list[Member]) -> bool:
    """For wait predicates: a member thread that crashed fails the test at once."""
    for m in members:
        if m.exc is not None:
            raise AssertionError(f"{CLIENT}: member {m.name} failed: {m.exc!r}")
    return True


def describe(members: list[Member]) -> str:
    for m in members:  # a crashed member thread fails the wait at once
        if m.exc is not None:
            raise AssertionError(f"{CLIENT}: member {m.name} failed: {m.exc!r}")
    return "; ".join(f"{m.name}: {sorted(m.assigned)} commit_errors={m.commit_errors[:2]} "
                     f"exc={m.exc!r}" for m in members)


# -- 1. three members, live production, exactly once -----------------------------------


# range on one node; cooperative-sticky on one node and on a cluster (suite time)
@pytest.mark.parametrize(("gbroker", "strategy"), [
    ("single", "range"), ("single", "cooperative-sticky"), ("rf1", "cooperative-sticky")],
    indirect=["gbroker"])
def test_three_members_consume_exactly_once(gbroker: Deployment, strategy: str) -> None:
    bs = gbroker.bootstrap
    topic, group = unique_topic(f"rd-group3-{strategy}"), unique_group("rd-group3")
    create_topic(bs, topic, 6, gbroker.replication)
    # 300 of them once the third member has joined, so that each member gets records
    # however long the joins took on a loaded machine
    joined = threading.Event()
    prod = BackgroundProducer(bs, topic, 6, 2200, rate=500, held=joined, held_count=300)
    ledger = Ledger()
    members: list[Member] = []
    prod.start()
    try:
        for i in range(3):  # staggered joins: each forces a rebalance under load
            m = Member(f"rd-{i}", bs, topic, group, ledger,
                       **{"partition.assignment.strategy": strategy})
            m.start()
            members.append(m)
            wait_for(lambda: ok(members) and assignment_covers([x.assigned for x in members], 6), 30,
                     lambda: f"{CLIENT} {strategy}: {len(members)} members never shared all 6 "
                             f"partitions: {describe(members)}")
        joined.set()
        acked = prod.finish()
        wait_for(lambda: ok(members) and ledger.has_all(acked), 30,
                 lambda: f"{CLIENT}: consumed {ledger.distinct()} of {len(acked)} distinct records;"
                         f" {describe(members)}")
        final = [m.assigned for m in members]
        revocations = {m.name: list(m.revocations) for m in members}
    finally:
        joined.set()
        for m in members:
            m.stop.set()
        for m in members:
            m.halt()
    assert all(len(a) == 2 for a in final) and assignment_covers(final, 6), (
        f"{CLIENT} {strategy}: final assignment {[sorted(a) for a in final]}, expected 2 "
        f"partitions each covering 0..5")
    check_exactly_once(acked, ledger.snapshot(), f"{CLIENT} {strategy}")
    assert not [e for m in members for e in m.commit_errors], (
        f"{CLIENT} {strategy}: synchronous commits failed: {[m.commit_errors for m in members]}")
    assert len(ledger.per_member()) == 3, f"{CLIENT}: per member {ledger.per_member()}"
    first = revocations["rd-0"]
    if strategy == "cooperative-sticky":
        # rd-0 started alone with all 6 partitions and handed some over twice,
        # never giving up everything it held (incremental rebalancing)
        assert first, f"{CLIENT}: the first member never revoked anything: {revocations}"
        for gone, held in first:
            assert gone < held, (
                f"{CLIENT} cooperative-sticky: {'rd-0'} revoked {sorted(gone)} while holding "
                f"{sorted(held)}: not incremental; all revocations {revocations}")
    else:
        assert first and first[0][0] == frozenset(range(6)), (
            f"{CLIENT} range: eager rebalance should revoke all 6 from rd-0: {revocations}")
    ends = prod.end_offsets()
    assert end_offsets(bs, topic, 6) == ends
    got = committed_offsets(bs, group, topic, 6)
    assert got == ends, f"{CLIENT}: committed {got} != end offsets {ends}"


# -- 2. / 3. member subprocesses ----------------------------------------------------------


@pytest.mark.parametrize("gbroker", SINGLE_ONLY, indirect=True)
def test_kill9_member_partitions_taken_over(gbroker: Deployment, tmp_path: Path) -> None:
    kill_member_scenario("confluent", gbroker, tmp_path)


@pytest.mark.parametrize("gbroker", RF3_ONLY, indirect=True)  # the other clients' runs cover the other kinds (suite time)
def test_clean_leave_rebalances_immediately(gbroker: Deployment, tmp_path: Path) -> None:
    clean_leave_scenario("confluent", gbroker, tmp_path)


# -- 6. admin --------------------------------------------------------------------------


def test_admin_list_describe_offsets_lag_delete(gbroker: Deployment) -> None:
    bs = gbroker.bootstrap
    topic, group = unique_topic("rd-admin"), unique_group("rd-admin")
    create_topic(bs, topic, 6, gbroker.replication)
    produce_sync(bs, topic, {p: [f"a{p}-{i}".encode() for i in range(10 * (p + 1))]
                             for p in range(6)})
    ledger = Ledger()
    members = [Member(f"rd-a{i}", bs, topic, group, ledger) for i in range(3)]
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        for m in members:
            m.start()
        wait_for(lambda: ok(members) and assignment_covers([m.assigned for m in members], 6)
                 and ledger.distinct() == 210, 30,
                 lambda: f"{CLIENT}: consumed {ledger.distinct()}/210; {describe(members)}")
        for m in members:
            m.consuming.clear()
        time.sleep(0.5)
        consumed_to = {p: 0 for p in range(6)}
        for r in ledger.snapshot():
            consumed_to[r.partition] = max(consumed_to[r.partition], r.offset + 1)
        produce_sync(bs, topic, {p: [f"late{p}-{i}".encode() for i in range(p + 1)]
                                 for p in range(6)})

        listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
        assert not listed.errors, f"{CLIENT}: list_consumer_groups errors {listed.errors}"
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1, f"{CLIENT}: {group} not in {[g.group_id for g in listed.valid]}"
        assert mine[0].state.name == "STABLE", f"{CLIENT}: listed state {mine[0].state}"
        assert not mine[0].is_simple_consumer_group, f"{CLIENT}: listed {mine[0]}"

        desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=30)
        assert desc.state.name == "STABLE", f"{CLIENT}: described state {desc.state}"
        assert desc.partition_assignor == "range", f"{CLIENT}: assignor {desc.partition_assignor}"
        assert len(desc.members) == 3, f"{CLIENT}: described members {desc.members}"
        described = [frozenset(tp.partition for tp in mb.assignment.topic_partitions
                               if tp.topic == topic) for mb in desc.members]
        assert assignment_covers(described, 6) and all(len(a) == 2 for a in described), (
            f"{CLIENT}: described assignments {[sorted(a) for a in described]}")
        assert sorted(map(sorted, described)) == sorted(sorted(m.assigned) for m in members), (
            f"{CLIENT}: describe shows {[sorted(a) for a in described]}, members hold "
            f"{[sorted(m.assigned) for m in members]}")

        res = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=30)[group].result(timeout=30)
        committed = {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == topic}
        assert committed == consumed_to, (
            f"{CLIENT}: list_consumer_group_offsets {committed}, processed up to {consumed_to}")
        ends = end_offsets(bs, topic, 6)
        lag = {p: ends[p] - committed[p] for p in range(6)}
        assert lag == {p: p + 1 for p in range(6)}, (
            f"{CLIENT}: lag {lag} (end {ends}, committed {committed}); produced but not "
            f"consumed: {dict((p, p + 1) for p in range(6))}")

        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=30)
        assert ei.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, (
            f"{CLIENT}: deleting a group with 3 members failed with {ei.value}, "
            f"expected NON_EMPTY_GROUP")
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.halt()

    def state() -> str:
        return admin.describe_consumer_groups([group], request_timeout=30)[group].result(
            timeout=30).state.name

    wait_for(lambda: state() == "EMPTY", 15, lambda: f"{CLIENT}: group state {state()}")
    admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=30)
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
    assert group not in [g.group_id for g in listed.valid], f"{CLIENT}: deleted group still listed"
    got = committed_offsets(bs, group, topic, 6)
    assert all(o < 0 for o in got.values()), f"{CLIENT}: deleted group still has offsets {got}"


# -- 7. static membership --------------------------------------------------------------


def test_static_member_restart_keeps_partitions(gbroker: Deployment) -> None:
    bs = gbroker.bootstrap
    topic, group = unique_topic("rd-static"), unique_group("rd-static")
    create_topic(bs, topic, 4, gbroker.replication)
    session_ms = 20_000
    ledger = Ledger()

    def member(name: str) -> Member:
        return Member(name, bs, topic, group, ledger,
                      **{"group.instance.id": f"static-{name}", "session.timeout.ms": session_ms})

    a, b = member("a"), member("b")
    b2: Member | None = None
    try:
        a.start()
        b.start()
        wait_for(lambda: assignment_covers([a.assigned, b.assigned], 4), 30,
                 lambda: f"{CLIENT}: static members never shared 4 partitions: {describe([a, b])}")
        time.sleep(1.0)
        before, a_before, a_revs = b.assigned, a.assigned, list(a.revocations)
        b.halt()  # librdkafka: a static member's close() sends no LeaveGroup
        t0 = time.monotonic()
        b2 = new = member("b")
        new.start()
        wait_for(lambda: bool(new.assigned), 30,
                 lambda: f"{CLIENT}: restarted static member never got partitions: "
                         f"{describe([a, new])}")
        took = time.monotonic() - t0
        assert new.assigned == before, (
            f"{CLIENT}: static member b held {sorted(before)} before its restart and got "
            f"{sorted(new.assigned)} after")
        assert took < session_ms / 1000 / 2, (
            f"{CLIENT}: restarted static member waited {took:.1f}s for its partitions "
            f"(session.timeout.ms={session_ms})")
        time.sleep(1.0)
        assert a.assigned == a_before, f"{CLIENT}: a's partitions {a_before} -> {a.assigned}"
        assert a.revocations == a_revs, (
            f"{CLIENT}: b's static rejoin made a revoke {a.revocations[len(a_revs):]} "
            f"(KIP-345: a Stable group does not rebalance for a known static member)")
    finally:
        for m in (a, b, b2):
            if m is not None:
                m.stop.set()
        for m in (a, b, b2):
            if m is not None and m.is_alive():
                m.halt()
