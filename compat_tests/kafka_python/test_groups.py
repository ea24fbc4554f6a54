"""kafka-python 3.x consumer groups against a real kcompat broker: a 3-member group
under live production, kill -9 and clean leave of a member, broker restarts, the
initial rebalance delay, group admin (list/describe/offsets/lag/delete), and static
membership.

Tests on ``gbroker`` also run in a 3-broker cluster at replication factor 1
(conftest.py, ``GROUP_KINDS``; the clean-leave scenario at replication factor 3); kill
-9 of a member (session expiry, the coordinator's alone), the broker restarts and the
default initial rebalance delay stay on a single node.
Every consumer learns its topic's partitions before its first poll()
(``kafka_python_learn_topics``: a kafka-python bug, FINDINGS.md).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from .._broker import Broker, unique_topic
from .._deployment import SINGLE_ONLY, Deployment
from .._group_member import kafka_python_learn_topics
from .._groups import (
    FAST_BROKER_ARGS,
    HEARTBEAT_MS,
    SESSION_MS,
    BackgroundProducer,
    Ledger,
    assignment_covers,
    check_exactly_once,
    clean_leave_scenario,
    create_topic,
    end_offsets,
    kill_member_scenario,
    produce_sync,
    unique_group,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

CLIENT = "kafka-python"


def admin_client(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    admin = admin_client(bootstrap)
    try:
        res = admin.list_group_offsets({group: None})
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in res.get(group, {}).items()}


JOIN_WAIT_MS = 60_000  # a member's first join, at most (the initial delay, CI load)


class Member(threading.Thread):
    """A KafkaConsumer in a thread: poll, process (into the ledger), commit the
    batch synchronously, repeat. ``assigned`` is refreshed after every poll."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, ledger: Ledger,
                 **cfg: Any) -> None:
        super().__init__(daemon=True, name=name)
        self.topic, self.ledger = topic, ledger
        self.cfg: dict[str, Any] = {
            "bootstrap_servers": bootstrap, "group_id": group,
            "auto_offset_reset": "earliest", "enable_auto_commit": False,
            "session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS,
            "request_timeout_ms": 30_000,
        }
        self.cfg.update(cfg)
        self.assigned: frozenset[int] = frozenset()
        self.first_assigned_at: float | None = None
        self.revocations: list[frozenset[int]] = []
        self.commit_errors: list[str] = []
        self.exc: BaseException | None = None
        self.started_at = 0.0
        self.consuming = threading.Event()
        self.consuming.set()
        self.stop = threading.Event()
        self.consumer: KafkaConsumer | None = None
        #: members that pass this barrier once subscribed, so their first polls
        #: (and JoinGroups) go out together, whatever each one's start took
        self.together: threading.Barrier | None = None

    def run(self) -> None:
        from kafka import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                if revoked:
                    member.revocations.append(frozenset(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned: Any) -> None:
                pass

        try:
            self.started_at = time.monotonic()
            c = self.consumer = KafkaConsumer(**self.cfg)
            c.subscribe([self.topic], listener=Listener())
            kafka_python_learn_topics(c, [self.topic])
            if self.together is not None:
                self.together.wait(60)
                self.started_at = time.monotonic()
            # the first join and sync in one wait, not across poll(200 ms) timers:
            # kafka-python 3.0.12 drops a join that finishes between two polls and
            # joins again, a second generation (FINDINGS.md)
            c._coordinator.ensure_active_group(timeout_ms=JOIN_WAIT_MS)
            try:
                while not self.stop.is_set():
                    if not self.consuming.is_set():
                        time.sleep(0.05)  # idle member: stays in the group via heartbeats
                        continue
                    batch = c.poll(timeout_ms=200, max_records=100)
                    self.assigned = frozenset(tp.partition for tp in c.assignment())
                    if self.assigned and self.first_assigned_at is None:
                        self.first_assigned_at = time.monotonic()
                    offsets = {}
                    for tp, msgs in batch.items():
                        for m in msgs:
                            self.ledger.add(self.name, m.partition, m.offset, m.value)
                            offsets[tp] = OffsetAndMetadata(m.offset + 1, "", -1)
                    if offsets:
                        try:
                            c.commit(offsets)
                        except Exception as exc:  # noqa: BLE001 - reported by the test
                            self.commit_errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                c.close(autocommit=False, timeout_ms=10_000)
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
    return "; ".join(f"{m.name}: {sorted(m.assigned)} commit_errors={m.commit_errors[:2]} "
                     f"exc={m.exc!r}" for m in members)


# -- 1. three members, live production, exactly once ------------------------------------


def test_three_members_consume_exactly_once(gbroker: Deployment) -> None:
    bs = gbroker.bootstrap
    topic, group = unique_topic("kp-group3"), unique_group("kp-group3")
    create_topic(bs, topic, 6, gbroker.replication)
    prod = BackgroundProducer(bs, topic, 6, 2200, rate=500)  # 4.4 s: past the 3 joins
    ledger = Ledger()
    members: list[Member] = []
    prod.start()
    try:
        for i in range(3):  # staggered joins: each one forces a rebalance under load
            m = Member(f"kp-{i}", bs, topic, group, ledger)
            m.start()
            members.append(m)
            wait_for(lambda: ok(members) and assignment_covers([x.assigned for x in members], 6), 30,
                     lambda: f"{CLIENT}: {len(members)} members never shared all 6 partitions:"
                             f" {describe(members)}")
        acked = prod.finish()
        wait_for(lambda: ok(members) and ledger.has_all(acked), 30,
                 lambda: f"{CLIENT}: consumed {ledger.distinct()} of {len(acked)} distinct records;"
                         f" {describe(members)}")
        final = [m.assigned for m in members]
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.halt()
    assert all(len(a) == 2 for a in final) and assignment_covers(final, 6), (
        f"{CLIENT}: final assignment {[sorted(a) for a in final]}, expected 2 partitions each")
    check_exactly_once(acked, ledger.snapshot(), CLIENT)
    assert not [e for m in members for e in m.commit_errors], (
        f"{CLIENT}: synchronous commits failed: {[m.commit_errors for m in members]}")
    per_member = ledger.per_member()
    assert len(per_member) == 3, f"{CLIENT}: records processed per member {per_member}"
    ends = prod.end_offsets()
    assert end_offsets(bs, topic, 6) == ends, "broker high watermarks differ from acknowledged"
    assert group_offsets(bs, group) == ends, (
        f"{CLIENT}: committed offsets {group_offsets(bs, group)} != end offsets {ends}")


# -- 2. / 3. member subprocesses: kill -9 and clean leave ------------------------------------


@pytest.mark.parametrize("gbroker", SINGLE_ONLY, indirect=True)
def test_kill9_member_partitions_taken_over(gbroker: Deployment, tmp_path: Path) -> None:
    kill_member_scenario("kafka-python", gbroker, tmp_path)


@pytest.mark.parametrize("gbroker", SINGLE_ONLY, indirect=True)  # the other clients' runs cover the other kinds (suite time)
def test_clean_leave_rebalances_immediately(gbroker: Deployment, tmp_path: Path) -> None:
    clean_leave_scenario("kafka-python", gbroker, tmp_path)


# -- 4. broker restart mid-consumption ---------------------------------------------------


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_group_resumes_from_committed_after_broker_restart(tmp_path: Path, how: str) -> None:
    b = Broker(tmp_path / "broker", extra_args=FAST_BROKER_ARGS)
    b.start()
    c1: KafkaConsumer | None = None
    try:
        bs = b.bootstrap
        topic, group = unique_topic(f"kp-restart-{how}"), unique_group("kp-restart")
        create_topic(bs, topic, 3)
        acked = produce_sync(bs, topic, {p: [f"{p}-{i:04d}".encode() for i in range(100)]
                                         for p in range(3)})
        c1 = KafkaConsumer(topic, bootstrap_servers=bs, group_id=group,
                           auto_offset_reset="earliest", enable_auto_commit=False,
                           session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                           request_timeout_ms=30_000)
        kafka_python_learn_topics(c1, [topic])
        committed: dict[int, int] = {}
        processed = 0
        deadline = time.monotonic() + 30
        while len(committed) < 3 or sum(committed.values()) < 120:
            assert time.monotonic() < deadline, f"{CLIENT}: committed only {committed} in 30s"
            batch = c1.poll(timeout_ms=500, max_records=20)
            offsets = {tp: OffsetAndMetadata(msgs[-1].offset + 1, "", -1)
                       for tp, msgs in batch.items() if msgs}
            processed += sum(len(v) for v in batch.values())
            if offsets:
                c1.commit(offsets)
                committed.update({tp.partition: om.offset for tp, om in offsets.items()})
        # One more batch processed but never committed: it must be redelivered.
        deadline = time.monotonic() + 10
        while not c1.poll(timeout_ms=500, max_records=20):
            assert time.monotonic() < deadline, f"{CLIENT}: no uncommitted batch to process"
        if how == "sigterm":
            assert b.stop() == 0, f"broker exited {b.last_returncode} on SIGTERM"
        else:
            b.kill()
        b.start()
        c1.close(autocommit=False, timeout_ms=5_000)
        c1 = None
        assert group_offsets(bs, group) == committed, (
            f"{CLIENT}: after broker {how} + restart the group's offsets are "
            f"{group_offsets(bs, group)}, committed before were {committed}")
        acked.update(produce_sync(bs, topic, {p: [f"{p}-late-{i:02d}".encode() for i in range(10)]
                                              for p in range(3)}))
        ends = end_offsets(bs, topic, 3)
        assert ends == {p: 110 for p in range(3)}, f"end offsets after restart {ends}"
        c2 = KafkaConsumer(topic, bootstrap_servers=bs, group_id=group,
                           auto_offset_reset="earliest", enable_auto_commit=False,
                           session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                           request_timeout_ms=30_000)
        kafka_python_learn_topics(c2, [topic])
        seen: list[tuple[int, int, bytes]] = []
        try:
            pos: dict[int, int] = {}
            deadline = time.monotonic() + 30
            while any(pos.get(p, -1) < ends[p] for p in range(3)):
                assert time.monotonic() < deadline, (
                    f"{CLIENT}: second consumer reached {pos} of {ends} in 30s")
                batch = c2.poll(timeout_ms=500)
                for msgs in batch.values():
                    for m in msgs:
                        seen.append((m.partition, m.offset, m.value))
                        pos[m.partition] = m.offset + 1
            c2.commit()
        finally:
            c2.close(autocommit=False)
        for p in range(3):
            got = [(o, v) for (q, o, v) in seen if q == p]
            want = sorted((o, v) for v, (q, o) in acked.items() if q == p and o >= committed[p])
            assert got == want, (
                f"{CLIENT}: after broker {how}, partition {p} (committed {committed[p]}) the new "
                f"member read offsets {[o for o, _ in got][:5]}..{[o for o, _ in got][-3:]} "
                f"({len(got)} records), expected {committed[p]}..109 ({len(want)} records)")
        assert group_offsets(bs, group) == ends, f"{CLIENT}: final commit {group_offsets(bs, group)}"
    finally:
        if c1 is not None:
            c1.close(autocommit=False, timeout_ms=2_000)
        b.close()


# -- initial rebalance delay (broker default 3000 ms) -----------------------------------------


def test_initial_rebalance_delay_default(module_broker: Broker) -> None:
    """group.initial.rebalance.delay.ms=3000 (Kafka's default): the first JoinGroup of an
    empty group is held ~3 s, so two members starting together get one generation."""
    bs = module_broker.bootstrap
    topic, group = unique_topic("kp-delay"), unique_group("kp-delay")
    create_topic(bs, topic, 4)
    ledger = Ledger()
    members = [Member(f"kp-d{i}", bs, topic, group, ledger) for i in range(2)]
    # their first JoinGroups go out together: a client's own start (bootstrap,
    # versions, metadata) took over 3 s under CI load, and a member joining
    # after the delay ends makes a second generation with Kafka too
    together = threading.Barrier(len(members))
    for m in members:
        m.together = together
    try:
        for m in members:
            m.start()
        wait_for(lambda: ok(members) and assignment_covers([m.assigned for m in members], 4), 30,
                 lambda: f"{CLIENT}: never assigned: {describe(members)}")
        time.sleep(0.5)
        revoked = {m.name: list(m.revocations) for m in members}  # before anyone leaves
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.halt()
    waits = [m.first_assigned_at - m.started_at for m in members if m.first_assigned_at]
    assert min(waits) >= 2.5, (
        f"{CLIENT}: first assignment after {min(waits):.2f}s; the broker default "
        f"group.initial.rebalance.delay.ms=3000 should hold the first join ~3 s")
    assert max(waits) < 12, f"{CLIENT}: first assignment took {max(waits):.2f}s"
    assert all(not r for r in revoked.values()), (
        f"{CLIENT}: members joining within the delay should land in one generation, but "
        f"partitions were revoked: {revoked}")


# -- 6. admin: list / describe / offsets / lag / delete -----------------------------------------


def _assigned_partitions(assignment: Any) -> set[int]:
    if assignment is None:
        return set()
    if hasattr(assignment, "partitions"):
        return {tp.partition for tp in assignment.partitions()}
    out: set[int] = set()
    for t in assignment.get("assigned_partitions") or []:
        if isinstance(t, dict):
            out.update(t["partitions"])
        else:
            out.update(t[1])
    return out


def test_admin_list_describe_offsets_lag_delete(gbroker: Deployment) -> None:
    bs = gbroker.bootstrap
    topic, group = unique_topic("kp-admin"), unique_group("kp-admin")
    create_topic(bs, topic, 6, gbroker.replication)
    produce_sync(bs, topic, {p: [f"a{p}-{i}".encode() for i in range(10 * (p + 1))]
                             for p in range(6)})
    ledger = Ledger()
    members = [Member(f"kp-a{i}", bs, topic, group, ledger) for i in range(3)]
    admin = admin_client(bs)
    try:
        for m in members:
            m.start()
        wait_for(lambda: ok(members) and assignment_covers([m.assigned for m in members], 6)
                 and ledger.distinct() == 210, 30,
                 lambda: f"{CLIENT}: consumed {ledger.distinct()}/210; {describe(members)}")
        for m in members:
            m.consuming.clear()  # stay in the group, stop consuming
        time.sleep(0.5)  # the last in-flight poll batch is processed and committed
        consumed_to = {p: 0 for p in range(6)}
        for r in ledger.snapshot():
            consumed_to[r.partition] = max(consumed_to[r.partition], r.offset + 1)
        late = produce_sync(bs, topic, {p: [f"late{p}-{i}".encode() for i in range(p + 1)]
                                        for p in range(6)})
        assert len(late) == 21

        listed = admin.list_groups()
        mine = [g for g in listed if g["group_id"] == group]
        assert len(mine) == 1, f"{CLIENT}: list_groups has no {group}: {listed}"
        assert mine[0].get("protocol_type") == "consumer", f"{CLIENT}: listed {mine[0]}"
        if "group_state" in mine[0]:
            assert mine[0]["group_state"] == "Stable", f"{CLIENT}: listed {mine[0]}"

        desc = admin.describe_groups([group])[group]
        assert desc.get("error") is None, f"{CLIENT}: describe_groups error {desc}"
        assert desc["group_state"] == "Stable" and desc["protocol_type"] == "consumer", desc
        assert len(desc["members"]) == 3, f"{CLIENT}: described members {desc['members']}"
        described = [frozenset(_assigned_partitions(mb["member_assignment"]))
                     for mb in desc["members"]]
        assert assignment_covers(described, 6), (
            f"{CLIENT}: described assignments {[sorted(a) for a in described]}")
        assert sorted(map(sorted, described)) == sorted(sorted(m.assigned) for m in members), (
            f"{CLIENT}: describe_groups assignments {[sorted(a) for a in described]} differ from "
            f"what the members hold {[sorted(m.assigned) for m in members]}")

        committed = group_offsets(bs, group)
        assert committed == consumed_to, (
            f"{CLIENT}: list_group_offsets {committed}, members processed up to {consumed_to}")
        ends = end_offsets(bs, topic, 6)
        lag = {p: ends[p] - committed[p] for p in range(6)}
        assert lag == {p: p + 1 for p in range(6)}, (
            f"{CLIENT}: lag (end {ends} - committed {committed}) = {lag}, produced but not "
            f"consumed: {dict((p, p + 1) for p in range(6))}")

        res = admin.delete_groups([group])
        assert res == {group: "NonEmptyGroupError"}, (
            f"{CLIENT}: delete_groups on a group with 3 members answered {res}")
        if hasattr(admin, "delete_group_offsets"):
            res2 = admin.delete_group_offsets(group, [TopicPartition(topic, 0)])
            names = {tp.partition: getattr(e, "__name__", str(e)) for tp, e in res2.items()}
            assert names == {0: "GroupSubscribedToTopicError"}, (
                f"{CLIENT}: OffsetDelete while members are subscribed answered {names}")
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.halt()
    try:
        wait_for(lambda: admin.describe_groups([group])[group]["group_state"] == "Empty", 15,
                 lambda: f"{CLIENT}: group not Empty after all members closed: "
                         f"{admin.describe_groups([group])[group]}")
        if hasattr(admin, "delete_group_offsets"):
            res2 = admin.delete_group_offsets(group, [TopicPartition(topic, 0)])
            names = {tp.partition: getattr(e, "__name__", str(e)) for tp, e in res2.items()}
            assert names == {0: "NoError"}, f"{CLIENT}: OffsetDelete on an empty group: {names}"
            left = group_offsets(bs, group)
            assert sorted(left) == [1, 2, 3, 4, 5], (
                f"{CLIENT}: after OffsetDelete of partition 0 the group still has {left}")
        res = admin.delete_groups([group])
        assert res == {group: "OK"}, f"{CLIENT}: delete_groups on an empty group answered {res}"
        names = [g["group_id"] for g in admin.list_groups()]
        assert group not in names, f"{CLIENT}: deleted group still listed: {names}"
        assert group_offsets(bs, group) == {}, (
            f"{CLIENT}: deleted group still has offsets {group_offsets(bs, group)}")
    finally:
        admin.close()


# -- 7. static membership ------------------------------------------------------------------


def test_static_member_restart_keeps_partitions(gbroker: Deployment) -> None:
    bs = gbroker.bootstrap
    topic, group = unique_topic("kp-static"), unique_group("kp-static")
    create_topic(bs, topic, 4, gbroker.replication)
    session_ms = 20_000
    ledger = Ledger()

    def member(name: str) -> Member:
        return Member(name, bs, topic, group, ledger, group_instance_id=f"static-{name}",
                      session_timeout_ms=session_ms, heartbeat_interval_ms=HEARTBEAT_MS)

    a, b = member("a"), member("b")
    b2: Member | None = None
    try:
        a.start()
        b.start()
        wait_for(lambda: assignment_covers([a.assigned, b.assigned], 4), 30,
                 lambda: f"{CLIENT}: static members never shared 4 partitions: {describe([a, b])}")
        time.sleep(1.0)
        # restart the follower (a static leader rejoining may legitimately rebalance)
        leader_a = bool(getattr(getattr(a.consumer, "_coordinator", None), "_is_leader", False))
        stay, bounce = (a, b) if leader_a else (b, a)
        before, stay_before = bounce.assigned, stay.assigned
        revocations_before = list(stay.revocations)
        bounce.halt()  # static member: close() sends no LeaveGroup
        t0 = time.monotonic()
        b2 = member(bounce.name)
        b2.start()
        new = b2
        wait_for(lambda: bool(new.assigned), 30,
                 lambda: f"{CLIENT}: restarted static member never got partitions: "
                         f"{describe([stay, new])}")
        took = time.monotonic() - t0
        assert b2.assigned == before, (
            f"{CLIENT}: static member {bounce.name} (group.instance.id static-{bounce.name}) "
            f"held {sorted(before)} before its restart and got {sorted(b2.assigned)} after")
        assert took < session_ms / 1000 / 2, (
            f"{CLIENT}: restarted static member waited {took:.1f}s for its partitions "
            f"(session.timeout.ms={session_ms}): the broker did not recognise the instance id")
        time.sleep(1.0)
        assert stay.assigned == stay_before, (
            f"{CLIENT}: the other static member's partitions changed {sorted(stay_before)} -> "
            f"{sorted(stay.assigned)}")
        assert stay.revocations == revocations_before, (
            f"{CLIENT}: the follower's static rejoin made the other member revoke "
            f"{stay.revocations[len(revocations_before):]} (KIP-345: no rebalance)")
    finally:
        for m in (a, b, b2):
            if m is not None:
                m.stop.set()
        for m in (a, b, b2):
            if m is not None and m.is_alive():
                m.halt()
