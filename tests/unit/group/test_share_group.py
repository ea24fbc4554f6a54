"""The share-group membership machine: Kafka's heartbeat rules, the simple
assignor, session expiry, describe, persistence, and a randomized model check."""

from __future__ import annotations

import dataclasses
from random import Random

import pytest
from kio.schema.errors import ErrorCode

from kcompat.group.epoch_group import TopicCounts
from kcompat.group.share_group import (
    ASSIGNOR_NAME,
    EMPTY,
    STABLE,
    ShareGroup,
    ShareGroupConfig,
    simple_assign,
    snapshot_from_json,
    snapshot_to_json,
)

OK = ErrorCode.none


def joined(counts: dict[str, int] | None = None, *members: str,
           topics: tuple[str, ...] = ("t",)) -> ShareGroup:
    group = ShareGroup("g", partition_counts=counts if counts is not None else {"t": 4})
    for member_id in members:
        assert group.heartbeat(member_id, 0, 0, list(topics)).error is OK
    return group


def owners(group: ShareGroup) -> dict[tuple[str, int], set[str]]:
    out: dict[tuple[str, int], set[str]] = {}
    for member_id in group.member_ids():
        for topic, partitions in group.target_assignment(member_id):
            for p in partitions:
                out.setdefault((topic, p), set()).add(member_id)
    return out


# -- join, heartbeat, leave -----------------------------------------------------


def test_first_join_creates_the_group_and_gets_everything() -> None:
    group = ShareGroup("g", partition_counts={"t": 3})
    assert not group.exists and group.state == EMPTY
    got = group.heartbeat("m1", 0, 0, ["t"], client_id="c", client_host="/1.2.3.4")
    assert got.error is OK and got.member_id == "m1" and got.member_epoch == 1
    assert got.heartbeat_interval_ms == 5000 and got.assignment == (("t", (0, 1, 2)),)
    assert group.exists and group.state == STABLE and group.group_epoch == 1


def test_join_requires_subscribed_topics_and_a_member_id() -> None:
    group = ShareGroup("g", partition_counts={"t": 1})
    assert group.heartbeat("m1", 0, 0, None).error is ErrorCode.invalid_request
    assert group.heartbeat("m1", 0, 0, []).error is ErrorCode.invalid_request
    assert group.heartbeat(" ", 0, 0, ["t"]).error is ErrorCode.invalid_request
    assert group.heartbeat("m1", 0, 0, ["t"], rack_id="").error is ErrorCode.invalid_request
    assert group.heartbeat("m1", -2, 0, ["t"]).error is ErrorCode.invalid_request
    assert not group.exists


def test_heartbeat_without_changes_sends_no_assignment() -> None:
    group = joined({"t": 2}, "a")
    got = group.heartbeat("a", 1, 100)
    assert (got.error, got.member_epoch, got.assignment) == (OK, 1, None)
    full = group.heartbeat("a", 1, 200, ["t"])  # a full request gets it again
    assert full.assignment == (("t", (0, 1)),) and group.group_epoch == 1


def test_a_second_member_takes_half_at_once_no_revocation_phase() -> None:
    group = joined({"t": 4}, "a")
    b = group.heartbeat("b", 0, 0, ["t"])
    assert b.member_epoch == 2 and b.assignment == (("t", (2, 3)),)
    a = group.heartbeat("a", 1, 10)  # a's own epoch; the new one given
    assert a.member_epoch == 2 and a.assignment == (("t", (0, 1)),)
    assert group.member("a") is not None and group.member("a").previous_member_epoch == 1  # type: ignore[union-attr]


def test_unknown_and_fenced_members() -> None:
    group = ShareGroup("g", partition_counts={"t": 1})
    assert group.heartbeat("x", 3, 0).error is ErrorCode.group_id_not_found
    assert group.heartbeat("x", -1, 0).error is ErrorCode.group_id_not_found
    group.heartbeat("a", 0, 0, ["t"])
    assert group.heartbeat("x", 1, 0).error is ErrorCode.unknown_member_id
    assert group.heartbeat("x", -1, 0).error is ErrorCode.unknown_member_id
    assert group.heartbeat("a", 2, 0).error is ErrorCode.fenced_member_epoch  # ahead
    group.heartbeat("b", 0, 0, ["t"])
    group.heartbeat("a", 1, 0)  # a moves to epoch 2, previous 1
    group.heartbeat("c", 0, 0, ["t"])
    group.heartbeat("a", 2, 0)  # epoch 3, previous 2
    # Kafka 4.4 share groups fence even the previous epoch (after a lost response
    # the member rejoins with 0), unlike consumer groups
    assert group.heartbeat("a", 2, 0).error is ErrorCode.fenced_member_epoch
    assert group.heartbeat("a", 1, 0).error is ErrorCode.fenced_member_epoch
    failed = group.heartbeat("a", 1, 0)
    assert failed.member_id is None and failed.error_message


def test_a_known_member_may_rejoin_with_epoch_zero() -> None:
    group = joined({"t": 2}, "a", "b")
    epoch = group.group_epoch
    got = group.heartbeat("a", 0, 0, ["t"])
    assert got.error is OK and got.member_epoch == epoch and got.assignment is not None
    assert group.group_epoch == epoch  # same subscription: no bump


def test_leave_bumps_the_epoch_and_the_rest_take_over() -> None:
    group = joined({"t": 4}, "a", "b")
    assert group.heartbeat("a", 1, 0).assignment == (("t", (0, 1)),)
    left = group.heartbeat("b", -1, 0)
    assert (left.error, left.member_id, left.member_epoch) == (OK, "b", -1)
    assert group.member_ids() == ["a"] and group.group_epoch == 3
    assert group.heartbeat("a", 2, 0).assignment == (("t", (0, 1, 2, 3)),)
    assert group.heartbeat("a", -1, 0).error is OK
    assert group.state == EMPTY and group.exists and group.group_epoch == 4
    assert group.heartbeat("a", 3, 0).error is ErrorCode.unknown_member_id


def test_group_max_size() -> None:
    group = ShareGroup("g", ShareGroupConfig(max_size=2), {"t": 1})
    group.heartbeat("a", 0, 0, ["t"])
    group.heartbeat("b", 0, 0, ["t"])
    assert group.heartbeat("c", 0, 0, ["t"]).error is ErrorCode.group_max_size_reached
    assert group.heartbeat("c", 5, 0).error is ErrorCode.group_max_size_reached  # checked first
    assert group.heartbeat("a", 0, 0, ["t"]).error is OK  # a member may rejoin


def test_subscription_change_bumps_and_filters_the_assignment() -> None:
    group = joined({"t": 2, "u": 2}, "a", topics=("t",))
    got = group.heartbeat("a", 1, 0, ["u", "t", "u"])
    assert got.member_epoch == 2 and got.assignment == (("t", (0, 1)), ("u", (0, 1)))
    assert group.member("a").subscribed_topic_names == ("t", "u")  # type: ignore[union-attr]
    got = group.heartbeat("a", 2, 0, ["u"])
    assert got.member_epoch == 3 and got.assignment == (("u", (0, 1)),)


def test_rack_and_client_changes_do_not_bump() -> None:
    group = joined({"t": 1}, "a")
    group.heartbeat("a", 1, 0, rack_id="r1", client_id="c2", client_host="/h")
    record = group.member("a")
    assert record is not None and (record.rack_id, record.client_id) == ("r1", "c2")
    assert group.group_epoch == 1


# -- metadata -------------------------------------------------------------------


def test_topic_appearing_growing_and_disappearing() -> None:
    group = joined({}, "a", topics=("t",))
    assert group.target_assignment("a") == ()
    assert group.update_metadata({"t": 2, "other": 5})
    assert group.heartbeat("a", 1, 0).assignment == (("t", (0, 1)),)
    assert not group.update_metadata({"t": 2, "other": 9})  # not subscribed: no bump
    assert group.update_metadata({"t": 3})
    assert group.heartbeat("a", 2, 0).assignment == (("t", (0, 1, 2)),)
    assert group.update_metadata({})
    got = group.heartbeat("a", 3, 0)
    assert got.member_epoch == 4 and got.assignment == ()


def test_a_topic_re_created_under_its_name_is_a_new_assignment() -> None:
    """Kafka keys assignments by topic id: a subscribed topic deleted and
    re-created (same name and partition count, a new id) bumps the group
    epoch and the members get their assignment again, naming the new id
    (the fuzzer found a member left holding the deleted topic's id). A group
    restored from a snapshot, which keeps no ids, learns them without a bump."""
    group = ShareGroup("g", partition_counts=TopicCounts({"t": 2}, {"t": "id-1"}))
    assert group.heartbeat("a", 0, 0, ["t"]).assignment == (("t", (0, 1)),)
    assert group.heartbeat("a", 1, 1).assignment is None
    assert not group.update_metadata(TopicCounts({"t": 2}, {"t": "id-1"}))
    assert group.update_metadata(TopicCounts({"t": 2}, {"t": "id-2"}))
    got = group.heartbeat("a", 1, 2)
    assert (got.member_epoch, got.assignment) == (2, (("t", (0, 1)),))
    assert group.heartbeat("a", 2, 3).assignment is None
    restored = ShareGroup.restore(group.snapshot(), 4)
    assert not restored.update_metadata(TopicCounts({"t": 2}, {"t": "id-2"}))
    assert restored.group_epoch == 2


def test_a_topic_re_created_while_no_coordinator_watched() -> None:
    """Snapshots keep the subscribed topics' ids: a group restored (a
    coordinator move, a restart) over a topic re-created meanwhile bumps its
    epoch and sends its members their assignment again; over the same topic
    it does neither; from an older broker's snapshot (no ids) it learns them
    quietly."""
    group = ShareGroup("g", partition_counts=TopicCounts({"t": 2}, {"t": "id-1"}))
    assert group.heartbeat("a", 0, 0, ["t"]).assignment == (("t", (0, 1)),)
    snap = group.snapshot()
    assert snap.topic_ids == (("t", "id-1"),)
    assert snapshot_from_json(snapshot_to_json(snap))[0] == snap
    same = ShareGroup.restore(snap, 1, partition_counts=TopicCounts({"t": 2}, {"t": "id-1"}))
    assert same.group_epoch == 1 and same.heartbeat("a", 1, 2).assignment is None
    moved = ShareGroup.restore(snap, 1, partition_counts=TopicCounts({"t": 2}, {"t": "id-2"}))
    assert moved.group_epoch == 2
    got = moved.heartbeat("a", 1, 2)
    assert (got.member_epoch, got.assignment) == (2, (("t", (0, 1)),))
    older = dataclasses.replace(snap, topic_ids=())
    quiet = ShareGroup.restore(older, 1, partition_counts=TopicCounts({"t": 2}, {"t": "id-2"}))
    assert quiet.group_epoch == 1 and quiet.heartbeat("a", 1, 2).assignment is None


def test_one_heartbeat_bumps_the_group_epoch_once() -> None:
    """Metadata taken in before a heartbeat that changes the subscription:
    one bump for both, as Kafka, and the target covers the new subscription."""
    group = ShareGroup("g", partition_counts={})
    first = group.heartbeat("a", 0, 0, ["t"])
    assert group.update_metadata({"t": 1, "u": 1})
    got = group.heartbeat("a", first.member_epoch, 1, ["t", "u"])
    assert got.member_epoch == first.member_epoch + 1 == group.group_epoch
    assert got.assignment == (("t", (0,)), ("u", (0,)))


def test_a_refused_heartbeat_takes_no_topic_change_in() -> None:
    """As Kafka (and the consumer groups' F20): the metadata a heartbeat
    brings is taken in once the member and its epoch passed the checks, so
    a fenced heartbeat leaves the group epoch as it is; the next good one
    bumps it."""
    group = ShareGroup("g", partition_counts={"t": 1})
    first = group.heartbeat("a", 0, 0, ["t"], partition_counts={"t": 1})
    fenced = group.heartbeat("a", first.member_epoch + 5, 1, partition_counts={"t": 2})
    assert fenced.error == ErrorCode.fenced_member_epoch
    assert group.group_epoch == first.member_epoch
    got = group.heartbeat("a", first.member_epoch, 2, partition_counts={"t": 2})
    assert got.member_epoch == first.member_epoch + 1
    assert got.assignment == (("t", (0, 1)),)


# -- session expiry -------------------------------------------------------------


def test_session_expiry_removes_the_member_and_reports_it() -> None:
    group = joined({"t": 2}, "a")
    group.heartbeat("b", 0, 1000, ["t"])
    assert group.next_deadline_ms() == 45_000
    assert group.tick(44_999) == []
    assert group.tick(45_000) == ["a"] and group.member("a") is None
    assert group.target_assignment("b") == (("t", (0, 1)),)
    assert group.next_deadline_ms() == 46_000
    assert group.heartbeat("b", 2, 40_000).member_epoch == 3
    assert group.next_deadline_ms() == 85_000
    assert group.tick(100_000) == ["b"] and group.next_deadline_ms() is None
    assert group.state == EMPTY


# -- the assignor ---------------------------------------------------------------


def test_more_members_than_partitions_share_partitions() -> None:
    got = simple_assign({m: ["t"] for m in "abcde"}, {"t": 2}, {})
    per_partition = {p: sum(p in dict(a).get("t", ()) for a in got.values()) for p in (0, 1)}
    assert per_partition == {0: 3, 1: 3}  # ceil(5 / 2) members each
    assert all(len(dict(a)["t"]) in (1, 2) for a in got.values())


def test_fewer_members_than_partitions_balance_within_one() -> None:
    got = simple_assign({m: ["t", "u"] for m in "abc"}, {"t": 5, "u": 3}, {})
    sizes = sorted(sum(len(ps) for _, ps in a) for a in got.values())
    assert sizes == [2, 3, 3]
    assigned = [(t, p) for a in got.values() for t, ps in a for p in ps]
    assert len(assigned) == len(set(assigned)) == 8


def test_heterogeneous_balances_topic_by_topic() -> None:
    got = simple_assign({"a": ["t"], "b": ["u"], "c": ["t", "u"]}, {"t": 4, "u": 2}, {})
    assert dict(got["a"])["t"] and "u" not in dict(got["a"])
    assert len(dict(got["c"])["t"]) == 2 and len(dict(got["c"])["u"]) == 1


def test_assignment_is_sticky_and_deterministic() -> None:
    subs = {m: ["t"] for m in "ab"}
    first = simple_assign(subs, {"t": 6}, {})
    assert first == simple_assign(subs, {"t": 6}, {})
    subs3 = {m: ["t"] for m in "abc"}
    second = simple_assign(subs3, {"t": 6}, first)
    kept = {m: set(dict(second[m])["t"]) & set(dict(first[m])["t"]) for m in "ab"}
    assert all(len(k) == 2 for k in kept.values())  # a and b each keep 2 of their 3


# -- describe and persistence ----------------------------------------------------


def test_describe() -> None:
    group = joined({"t": 2}, "b", "a")
    group.heartbeat("b", 1, 0, rack_id="r")
    described = group.describe()
    assert (described.group_id, described.group_state, described.assignor_name) == (
        "g", STABLE, ASSIGNOR_NAME)
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert [m.member_id for m in described.members] == ["a", "b"]
    b = described.members[1]
    assert (b.member_epoch, b.rack_id, b.subscribed_topic_names) == (2, "r", ("t",))
    assert b.assignment == group.target_assignment("b")


def test_snapshot_restore_round_trip() -> None:
    group = joined({"t": 3, "u": 1}, "a", "b", topics=("t", "u"))
    group.heartbeat("c", 0, 500, ["u"], rack_id="r", client_id="cid", client_host="/h")
    snap = group.snapshot()
    restored = ShareGroup.restore(snap, 10_000, partition_counts={"t": 3, "u": 1, "v": 7})
    assert restored.snapshot() == snap
    assert restored.describe() == group.describe()
    assert restored.next_deadline_ms() == 55_000  # sessions restart on load
    assert restored.heartbeat("a", 2, 10_000) == group.heartbeat("a", 2, 10_000)


# -- randomized model check ------------------------------------------------------


def check_invariants(group: ShareGroup, counts: dict[str, int]) -> None:
    by_partition = owners(group)
    for member_id in group.member_ids():
        record = group.member(member_id)
        assert record is not None
        for topic, _ in group.target_assignment(member_id):
            assert topic in record.subscribed_topic_names
        for topic in record.subscribed_topic_names:
            for p in range(counts.get(topic, 0)):
                assert (topic, p) in by_partition, (topic, p)
    assert set(by_partition) <= {(t, p) for t, n in counts.items() for p in range(n)}
    assert group.assignment_epoch == group.group_epoch
    subs = {m: group.member(m).subscribed_topic_names for m in group.member_ids()}  # type: ignore[union-attr]
    targets = {m: group.target_assignment(m) for m in group.member_ids()}
    assert simple_assign(subs, counts, targets) == simple_assign(subs, counts, targets)


def run_seed(seed: int) -> None:
    rng = Random(seed)
    config = ShareGroupConfig(session_timeout_ms=1000, max_size=rng.randint(2, 8))
    topics = ["t0", "t1", "t2"]
    counts = {t: rng.randint(0, 4) for t in topics}
    group = ShareGroup("g", config, counts)
    epochs: dict[str, int] = {}  # what each live client believes
    gone: set[str] = set()
    now_ms, last_group_epoch = 0, 0
    for _ in range(150):
        now_ms += rng.randint(0, 400)
        roll = rng.random()
        member_id = f"m{rng.randint(0, 9)}"
        if roll < 0.3:
            subs = rng.sample(topics, rng.randint(1, 3))
            got = group.heartbeat(member_id, 0, now_ms, subs)
            if got.error is OK:
                epochs[member_id] = got.member_epoch
                gone.discard(member_id)
            else:
                assert got.error is ErrorCode.group_max_size_reached
        elif roll < 0.6 and epochs:
            member_id = rng.choice(sorted(epochs))
            subs2 = rng.sample(topics, rng.randint(1, 3)) if rng.random() < 0.2 else None
            got = group.heartbeat(member_id, epochs[member_id], now_ms, subs2)
            if member_id in gone:  # the size check comes first, as Kafka's
                assert got.error in (ErrorCode.unknown_member_id,
                                     ErrorCode.group_max_size_reached)
                del epochs[member_id]
            else:
                assert got.error is OK, got
                assert got.member_epoch >= epochs[member_id]
                epochs[member_id] = got.member_epoch
                assert got.member_epoch == group.assignment_epoch
                if got.assignment is not None:
                    assert got.assignment == group.target_assignment(member_id)
        elif roll < 0.7 and epochs:
            member_id = rng.choice(sorted(epochs))
            got = group.heartbeat(member_id, -1, now_ms)
            assert got.error is (ErrorCode.unknown_member_id if member_id in gone else OK)
            del epochs[member_id]
            gone.add(member_id)
        elif roll < 0.8:
            counts = {t: rng.randint(0, 4) for t in topics if rng.random() < 0.9}
            group.update_metadata(counts)
        else:
            for member_id in group.tick(now_ms):
                gone.add(member_id)
        for member_id in gone:
            assert group.member(member_id) is None
            assert group.target_assignment(member_id) == ()
            assert all(member_id not in holders for holders in owners(group).values())
        assert group.group_epoch >= last_group_epoch
        last_group_epoch = group.group_epoch
        check_invariants(group, counts)
        if rng.random() < 0.05:
            restored = ShareGroup.restore(group.snapshot(), now_ms, config, counts)
            assert restored.describe() == group.describe()
            assert restored.snapshot() == group.snapshot()
            group = restored


@pytest.mark.parametrize("seed", range(200))
def test_random_operations_keep_the_invariants(seed: int) -> None:
    run_seed(seed)


def test_stored_snapshot_round_trip_and_junk() -> None:
    group = joined({"t": 4, "u": 1}, "a", "b")
    group.heartbeat("c", 0, 5, ["u"], rack_id="r1", client_id="cli", client_host="/h")
    stored = snapshot_to_json(group.snapshot(), {"t", "u", "gone"})
    snapshot, seen = snapshot_from_json(stored)
    assert snapshot == group.snapshot() and seen == {"t", "u", "gone"}
    back = ShareGroup.restore(snapshot, 100, partition_counts={"t": 4, "u": 1})
    assert back.describe() == group.describe()
    for junk in (b"[]", b'{"group": "g"}', b'{"group":"g","epoch":1,"assignment_epoch":1,'
                 b'"members":[["a"]],"target":[],"topics":[]}'):
        with pytest.raises(ValueError):
            snapshot_from_json(junk)
