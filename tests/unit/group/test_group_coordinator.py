"""Every transition of the classic group state machine, driven through the pure
coordinator with explicit times (no I/O, no clock)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from kcompat.group.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from kcompat.group.group import GroupState as S
from kcompat.group.offsets import OffsetStore, group_key, group_value

SESSION, REBALANCE = 10_000, 20_000


class Driver:
    """Sends requests with tokens and collects replies by token."""

    def __init__(self, delay_ms: int = 3000) -> None:
        self.c = GroupCoordinator(CoordinatorConfig(initial_rebalance_delay_ms=delay_ms))
        self.replies: dict[int, Any] = {}
        self.token = 0
        self.uid = 0

    def _collect(self, replies: list[Any]) -> None:
        for r in replies:
            self.replies[r.token] = r.result

    def join(self, member: str = "", now: int = 0, instance: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, v4: bool = True,
             session: int = SESSION, ptype: str = "consumer") -> int:
        self.token += 1
        self.uid += 1
        req = JoinRequest("g", member, instance, "client", "/127.0.0.1", session, REBALANCE,
                          ptype, protocols or [("range", b"m")], v4)
        self._collect(self.c.join_group(self.token, req, now, f"u{self.uid}"))
        return self.token

    def sync(self, member: str, gen: int, now: int = 0,
             assignments: dict[str, bytes] | None = None, instance: str | None = None) -> int:
        self.token += 1
        self._collect(self.c.sync_group(self.token, "g", gen, member, instance, None, None,
                                        assignments or {}, now))
        return self.token

    def tick(self, now: int) -> None:
        self._collect(self.c.tick(now))

    def result(self, token: int) -> Any:
        return self.replies.get(token)

    @property
    def group(self) -> Any:
        return self.c.groups["g"]

    def stable_group(self, n: int) -> list[str]:
        """n members joined (with the KIP-394 handshake) and synced; returns ids."""
        ids = []
        for _ in range(n):
            t = self.join()
            ids.append(self.result(t).member_id)
        tokens = [self.join(mid) for mid in ids]
        self.tick(3000)  # past the initial rebalance delay
        for m in self.group.members.values():
            m.last_heartbeat_ms = 0  # tests count session time from 0
        results = [self.result(t) for t in tokens]
        assert all(isinstance(r, JoinResult) and r.error == E.none for r in results)
        gen = results[0].generation_id
        leader = results[0].leader
        assignments = {mid: mid.encode() for mid in ids}
        for mid in ids:
            self.sync(mid, gen, assignments=assignments if mid == leader else None)
        assert self.group.state is S.STABLE
        return ids


def test_member_id_required_handshake_then_join_completes() -> None:
    d = Driver(delay_ms=0)
    t = d.join()
    first = d.result(t)
    assert first.error == E.member_id_required and first.member_id.startswith("client-")
    assert d.group.state is S.EMPTY and first.member_id in d.group.pending_members
    t2 = d.join(first.member_id)
    r = d.result(t2)
    assert r.error == E.none and r.generation_id == 1 and r.leader == first.member_id
    assert r.members == ((first.member_id, None, b"m"),)
    assert d.group.is_(S.COMPLETING_REBALANCE)


def test_join_v3_needs_no_handshake() -> None:
    d = Driver(delay_ms=0)
    r = d.result(d.join(v4=False))
    assert r.error == E.none and r.generation_id == 1


def test_initial_delay_holds_the_first_rebalance() -> None:
    d = Driver(delay_ms=3000)
    t = d.join(v4=False, now=0)
    assert d.result(t) is None and d.group.state is S.PREPARING_REBALANCE
    t2 = d.join(v4=False, now=1000)  # a second member extends the delay
    d.tick(3500)
    assert d.result(t) is None
    d.tick(4000)
    assert d.result(t).error == E.none and d.result(t2).error == E.none
    assert d.result(t).generation_id == 1 and len(d.result(t).members) == 2
    assert d.result(t2).members == ()  # only the leader gets the member list


def test_followers_sync_waits_for_leader_then_stable() -> None:
    d = Driver()
    a = d.result(d.join()).member_id
    b = d.result(d.join()).member_id
    ta, tb = d.join(a), d.join(b)
    d.tick(3000)
    gen = d.result(ta).generation_id
    leader = d.result(ta).leader
    follower = b if leader == a else a
    tf = d.sync(follower, gen)
    assert d.result(tf) is None and d.group.state is S.COMPLETING_REBALANCE
    tl = d.sync(leader, gen, assignments={a: b"A", b: b"B"})
    assert d.group.is_(S.STABLE)
    assert d.result(tl).error == E.none
    assert {d.result(tf).assignment, d.result(tl).assignment} == {b"A", b"B"}
    assert d.result(tb) is not None


def test_new_member_rebalances_stable_group_and_heartbeats_say_so() -> None:
    d = Driver()
    (a,) = d.stable_group(1)
    gen = d.group.generation_id
    b = d.result(d.join(now=100)).member_id
    tb = d.join(b, now=100)
    assert d.group.state is S.PREPARING_REBALANCE and d.result(tb) is None
    assert d.c.heartbeat("g", gen, a, None, 200) == E.rebalance_in_progress
    ta = d.join(a, now=300)
    assert d.result(ta).generation_id == gen + 1 and d.result(tb).generation_id == gen + 1
    assert d.c.heartbeat("g", gen, a, None, 400) == E.illegal_generation
    assert d.c.heartbeat("g", gen + 1, a, None, 400) == E.none  # CompletingRebalance is fine


def test_rejoin_without_change_in_stable_returns_current_generation() -> None:
    d = Driver()
    a, b = d.stable_group(2)
    follower = b if d.group.leader_id == a else a
    gen = d.group.generation_id
    r = d.result(d.join(follower))
    assert r.error == E.none and r.generation_id == gen and d.group.state is S.STABLE


def test_changed_protocols_trigger_rebalance() -> None:
    d = Driver()
    a, b = d.stable_group(2)
    d.join(a, protocols=[("range", b"other-metadata")])
    assert d.group.state is S.PREPARING_REBALANCE


def test_leave_rebalances_and_last_leave_empties_group() -> None:
    d = Driver()
    a, b = d.stable_group(2)
    gen = d.group.generation_id
    top, per, replies = d.c.leave_group("g", [(a, None)], 0)
    d._collect(replies)
    assert (top, per) == (E.none, [E.none]) and d.group.state is S.PREPARING_REBALANCE
    t = d.join(b)
    assert d.result(t).generation_id == gen + 1 and d.result(t).leader == b
    _, per, _ = d.c.leave_group("g", [(b, None), ("ghost", None)], 0)
    assert per == [E.none, E.unknown_member_id]
    assert d.group.is_(S.EMPTY) and d.group.protocol_type == "consumer"


def test_leave_of_an_unknown_group_names_each_member_unknown() -> None:
    # Kafka 4.4: the request succeeds, each member is UNKNOWN_MEMBER_ID (the
    # handler answers v0-2 with the first member's error)
    d = Driver()
    assert d.c.leave_group("nogroup", [("", None), ("m", "i")], 0) == (
        E.none, [E.unknown_member_id, E.unknown_member_id], [])


def test_session_expiry_removes_member_and_rebalances() -> None:
    d = Driver()
    a, b = d.stable_group(2)
    assert d.c.heartbeat("g", d.group.generation_id, a, None, SESSION - 1) == E.none
    d.tick(SESSION + 1)  # b never heartbeated: expired; a is still alive
    assert list(d.group.members) == [a] and d.group.state is S.PREPARING_REBALANCE
    t = d.join(a, now=SESSION + 2)
    assert d.result(t).error == E.none and d.group.is_(S.COMPLETING_REBALANCE)


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    d = Driver()
    a, b = d.stable_group(2)
    c = d.result(d.join(now=0)).member_id
    tc = d.join(c, now=0)
    ta = d.join(a, now=0)
    for t in (9_000, 18_000):  # b stays alive but never re-joins
        assert d.c.heartbeat("g", d.group.generation_id, b, None, t) == E.rebalance_in_progress
    d.tick(REBALANCE - 1)
    assert d.result(tc) is None
    d.tick(REBALANCE)
    assert d.result(tc).error == E.none and d.result(ta).error == E.none
    assert set(d.group.members) == {a, c}


def test_sync_timeout_drops_members_that_never_sync() -> None:
    d = Driver()
    a = d.result(d.join()).member_id
    b = d.result(d.join()).member_id
    ta, _ = d.join(a), d.join(b)
    d.tick(3000)
    gen = d.result(ta).generation_id
    leader = d.result(ta).leader
    other = b if leader == a else a
    d.sync(other, gen, now=3000)
    for t in (12_000, 21_000):  # both stay alive; only one ever sent SyncGroup
        assert d.c.heartbeat("g", gen, leader, None, t) == E.none
        assert d.c.heartbeat("g", gen, other, None, t) == E.none
    d.tick(3000 + REBALANCE - 1)
    assert leader in d.group.members
    d.tick(3000 + REBALANCE)
    assert leader not in d.group.members and d.group.state is S.PREPARING_REBALANCE


def test_unknown_member_and_illegal_generation() -> None:
    d = Driver()
    (a,) = d.stable_group(1)
    gen = d.group.generation_id
    assert d.c.heartbeat("g", gen, "nobody", None, 0) == E.unknown_member_id
    assert d.c.heartbeat("nogroup", gen, a, None, 0) == E.unknown_member_id
    assert d.result(d.sync(a, gen + 5)).error == E.illegal_generation
    assert d.result(d.join("nobody")).error == E.unknown_member_id


def test_static_member_rejoin_fences_old_instance() -> None:
    d = Driver(delay_ms=0)
    t = d.join(instance="i1", v4=True)
    old = d.result(t)
    assert old.error == E.none  # static members skip the KIP-394 handshake
    d.sync(old.member_id, old.generation_id, assignments={old.member_id: b"x"})
    t2 = d.join(instance="i1", now=50)  # the same instance restarted
    new = d.result(t2)
    assert new.error == E.none and new.member_id != old.member_id
    # KIP-345: no rebalance — same generation, and the old assignment is kept
    assert d.group.state is S.STABLE and new.generation_id == old.generation_id
    assert new.skip_assignment and new.leader == new.member_id
    assert d.result(d.sync(new.member_id, new.generation_id, instance="i1")).assignment == b"x"
    assert d.c.heartbeat("g", new.generation_id, old.member_id, "i1", 60) == E.fenced_instance_id
    assert d.result(d.join(old.member_id, instance="i1")).error == E.fenced_instance_id
    _, per, _ = d.c.leave_group("g", [("", "i1")], 70)
    assert per == [E.none] and not d.group.members


def test_inconsistent_protocols_and_bad_session_timeout() -> None:
    d = Driver()
    d.stable_group(1)
    assert d.result(d.join(protocols=[("other", b"")])).error == E.inconsistent_group_protocol
    assert d.result(d.join(ptype="connect")).error == E.inconsistent_group_protocol
    assert d.result(d.join(session=10)).error == E.invalid_session_timeout


def test_protocol_selection_by_vote() -> None:
    d = Driver()
    ids = []
    for prefs in ([("cooperative-sticky", b""), ("range", b"")],
                  [("range", b""), ("cooperative-sticky", b"")],
                  [("range", b""), ("cooperative-sticky", b"")]):
        ids.append((d.result(d.join(protocols=prefs)).member_id, prefs))
    tokens = [d.join(mid, protocols=p) for mid, p in ids]
    d.tick(3000)
    assert d.result(tokens[0]).protocol_name == "range"


def test_commit_checks() -> None:
    d = Driver()
    assert d.c.commit_error("fresh", -1, "", None) is None  # standalone commit
    assert d.c.commit_error("fresh", 3, "m", None) == E.illegal_generation
    a, b = d.stable_group(2)
    gen = d.group.generation_id
    assert d.c.commit_error("g", gen, a, None) is None
    assert d.c.commit_error("g", gen - 1, a, None) == E.illegal_generation
    assert d.c.commit_error("g", gen, "x", None) == E.unknown_member_id
    assert d.c.commit_error("g", -1, "", None) == E.unknown_member_id
    # a rebalance to the next generation, waiting for SyncGroup (Kafka 4's order):
    # the old generation is ILLEGAL_GENERATION, the new one REBALANCE_IN_PROGRESS
    ta, tb = d.join(a), d.join(b)
    d.tick(3000)
    new = d.result(ta).generation_id
    assert new == gen + 1 and d.group.state is S.COMPLETING_REBALANCE
    assert d.c.commit_error("g", gen, a, None) == E.illegal_generation
    assert d.c.commit_error("g", new, a, None) == E.rebalance_in_progress
    # a transactional commit of the new generation is taken (Kafka: only the
    # generation fences a producer's TxnOffsetCommit)
    assert d.c.commit_error("g", new, a, None, transactional=True) is None
    assert d.c.commit_error("g", gen, a, None, transactional=True) == E.illegal_generation
    assert d.c.commit_error("g", new, "x", None) == E.unknown_member_id
    assert d.c.commit_error("g", new, a, "not-a-static-member") == E.unknown_member_id
    assert d.result(tb).generation_id == new


def test_delete_group_only_when_empty() -> None:
    d = Driver()
    (a,) = d.stable_group(1)
    assert d.c.delete_group("g", 0) == E.non_empty_group
    d.c.leave_group("g", [(a, None)], 0)
    assert d.c.delete_group("g", 0) == E.none
    assert "g" not in d.c.groups
    assert d.c.delete_group("g", 0) == E.group_id_not_found


def test_a_group_deleted_keeps_dead_until_its_tombstones_are_written() -> None:
    """A deletion (DeleteGroups, the sweep of empty groups) keeps the group
    Dead until its tombstones are in the log: a member's second JoinGroup
    (KIP-394) or a commit meanwhile is refused, retriably, instead of
    starting a new incarnation whose offsets the tombstones would wipe."""
    d = Driver()
    pending = d.result(d.join()).member_id  # MEMBER_ID_REQUIRED: the group Empty
    assert d.group.is_(S.EMPTY)
    assert d.c.delete_group("g", 0, keep_dead=True) == E.none
    assert d.group.is_(S.DEAD)
    assert d.result(d.join(pending)).error == E.coordinator_not_available
    assert d.result(d.join()).error == E.coordinator_not_available
    assert d.c.commit_error("g", -1, "", None) == E.coordinator_not_available
    d.c.forget_dead("g")
    assert "g" not in d.c.groups
    assert d.result(d.join(pending)).error == E.unknown_member_id  # the client starts over
    assert d.result(d.join()).error == E.member_id_required
    d.c.forget_dead("g")  # a live group stays
    assert d.group.is_(S.EMPTY)


@pytest.mark.parametrize("members", [1, 3])
def test_group_record_round_trip_restores_stable_group(members: int) -> None:
    d = Driver()
    ids = d.stable_group(members)
    store = OffsetStore()
    store.apply(group_key("g"), group_value(d.group))
    restored = GroupCoordinator()
    restored.restore("g", store.groups["g"], 1_000)
    g = restored.groups["g"]
    assert g.state is S.STABLE and g.generation_id == d.group.generation_id
    assert set(g.members) == set(ids) and g.leader_id == d.group.leader_id
    assert all(m.assignment == mid.encode() for mid, m in g.members.items())
    assert restored.heartbeat("g", g.generation_id, ids[0], None, 1_100) == E.none


def test_a_generation_is_written_with_its_assignments_not_before() -> None:
    """As Kafka: a completed join writes nothing (the leader's SyncGroup
    writes the generation with its assignments), only a rebalance that leaves
    the group Empty does. A record of the joined generation without
    assignments came back, on the coordinator that took over before the
    leader synced, as a Stable group whose members were all handed nothing,
    with no rebalance ever to come (broker simulator, seed 10 with disk
    faults). From the last record written, the members learn they must rejoin."""
    d = Driver()
    a, b = d.stable_group(2)
    assert d.c.pop_group_changes() == {"g"}  # the leader's SyncGroup
    store = OffsetStore()
    store.apply(group_key("g"), group_value(d.group))
    gen = d.group.generation_id
    d.join(a, now=100, protocols=[("range", b"other-metadata")])
    tb = d.join(b, now=100)
    assert d.result(tb).generation_id == gen + 1
    assert d.group.state is S.COMPLETING_REBALANCE and d.c.pop_group_changes() == set()
    taken_over = GroupCoordinator()
    taken_over.restore("g", store.groups["g"], 200)
    assert taken_over.heartbeat("g", gen + 1, b, None, 200) == E.illegal_generation
    token = 1
    synced = taken_over.sync_group(token, "g", gen + 1, b, None, None, None, {}, 200)
    assert [r.result.error for r in synced] == [E.illegal_generation]
    d.c.leave_group("g", [(a, None), (b, None)], 300)
    assert d.group.is_(S.EMPTY) and d.c.pop_group_changes() == {"g"}


def test_sync_result_types() -> None:
    d = Driver()
    (a,) = d.stable_group(1)
    r = d.result(d.sync(a, d.group.generation_id))
    assert isinstance(r, SyncResult) and r.assignment == a.encode()


def test_assignments_stay_until_the_next_sync_and_reset_when_it_never_comes() -> None:
    # Kafka keeps each member's last assignment through a rebalance (DescribeGroups
    # shows it) and resets them all when a rebalance starts again before the sync
    d = Driver()
    a, b = d.stable_group(2)
    assert {m.assignment for m in d.group.members.values()} == {a.encode(), b.encode()}
    d.join(a), d.join(b)
    assert d.group.is_(S.COMPLETING_REBALANCE)
    assert d.group.members[a].assignment == a.encode()
    assert d.group.members[b].assignment == b.encode()
    d.c.leave_group("g", [(b, None)], 0)  # the rebalance starts again: none synced
    assert d.group.is_(S.PREPARING_REBALANCE)
    assert d.group.members[a].assignment == b""
