"""KIP-848 consumer groups: the pure machine (group.consumer_group) and its
assignors (group.assignors). Expected answers are Kafka 4.4's, as the
reference broker gave them (compat_tests/java/test_consumer_group_differential.py
checks the same against both brokers)."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kcompat.group.assignors import flat, range_assign, uniform_assign
from kcompat.group.consumer_classic import ClassicJoin, ClassicMemberState
from kcompat.group.consumer_group import ConsumerGroup
from kcompat.group.consumer_messages import ConsumerGroupConfig, Heartbeat, check_request
from kcompat.group.consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kcompat.group.epoch_group import TopicCounts

T = "t"
CFG = ConsumerGroupConfig(session_timeout_ms=3000, heartbeat_interval_ms=500,
                          assignment_interval_ms=0)


def join(member: str, topics: tuple[str, ...] = (T,), **kw: object) -> Heartbeat:
    return Heartbeat(member, 0, rebalance_timeout_ms=10_000, subscribed_topic_names=topics,
                     owned=(), **kw)  # type: ignore[arg-type]


def beat(member: str, epoch: int, owned: object = (), **kw: object) -> Heartbeat:
    return Heartbeat(member, epoch, owned=owned, **kw)  # type: ignore[arg-type]


def test_request_checks_as_kafka() -> None:
    a = ("uniform", "range")
    assert check_request("g", Heartbeat("", 0), a) == (ErrorCode.invalid_request,
                                                       "MemberId can't be empty.")
    assert check_request("", join("m"), a) == (ErrorCode.invalid_request,
                                              "GroupId can't be empty.")
    assert check_request("g", Heartbeat("m", 0, owned=(), subscribed_topic_names=(T,)), a)[1] \
        == "RebalanceTimeoutMs must be provided in first request."  # type: ignore[index]
    assert check_request("g", Heartbeat("m", 0, rebalance_timeout_ms=1, owned=((T, (0,)),),
                                        subscribed_topic_names=(T,)), a)[1] \
        == "TopicPartitions must be empty when (re-)joining."  # type: ignore[index]
    assert check_request("g", Heartbeat("m", -3), a)[1] == "MemberEpoch is invalid."  # type: ignore[index]
    assert check_request("g", Heartbeat("m", -2), a)[1] == "InstanceId can't be null."  # type: ignore[index]
    assert check_request("g", join("m", subscribed_topic_regex="["), a)[0] \
        == ErrorCode.invalid_regular_expression  # type: ignore[index]
    assert check_request("g", join("m", server_assignor="nope"), a) == (
        ErrorCode.unsupported_assignor,
        "ServerAssignor nope is not supported. Supported assignors: uniform, range.")
    assert check_request("g", join("m"), a) is None


def test_join_heartbeat_fence_and_leave() -> None:
    g = ConsumerGroup("g", CFG, {T: 4})
    assert g.heartbeat(beat("m", 5), 0).error == ErrorCode.group_id_not_found
    r = g.heartbeat(join("a"), 0)
    assert (r.error, r.member_epoch, r.assignment) == (ErrorCode.none, 2, ((T, (0, 1, 2, 3)),))
    assert g.state == "Stable"
    assert g.heartbeat(beat("a", 3), 1).error == ErrorCode.fenced_member_epoch
    assert g.heartbeat(beat("a", 1), 1).error == ErrorCode.fenced_member_epoch
    assert g.heartbeat(beat("zz", 2), 1).error == ErrorCode.unknown_member_id
    again = g.heartbeat(join("a"), 2)  # a known member rejoining keeps its epoch
    assert (again.member_epoch, again.assignment) == (2, ((T, (0, 1, 2, 3)),))
    assert g.heartbeat(Heartbeat("a", -1), 3).member_epoch == -1
    assert g.state == "Empty" and g.group_epoch == 3
    assert g.heartbeat(Heartbeat("a", -1), 3).error == ErrorCode.unknown_member_id


def test_revocation_before_assignment() -> None:
    g = ConsumerGroup("g", CFG, {T: 4})
    a = g.heartbeat(join("a"), 0)
    b = g.heartbeat(join("b"), 1)
    assert (b.member_epoch, b.assignment) == (3, ())  # its target is still a's
    a2 = g.heartbeat(beat("a", a.member_epoch, a.assignment), 2)
    assert a2.member_epoch == 2 and a2.assignment == ((T, (0, 1)),)  # revoke 2, 3
    assert g.state == "Reconciling"
    b2 = g.heartbeat(beat("b", b.member_epoch), 3)
    assert b2.member_epoch == 3 and b2.assignment is None  # 2, 3 still owned by a
    assert g.heartbeat(beat("a", 2, a.assignment), 4).member_epoch == 2  # still owns them
    a3 = g.heartbeat(beat("a", 2, a2.assignment), 5)  # acknowledged
    assert a3.member_epoch == 3
    b3 = g.heartbeat(beat("b", 3), 6)
    assert b3.assignment == ((T, (2, 3)),) and g.state == "Stable"
    # the previous epoch is accepted with owned partitions inside the assignment
    assert g.heartbeat(beat("a", 2, a2.assignment), 7).error == ErrorCode.none


def test_partitions_the_member_says_it_no_longer_owns_are_not_asked_back() -> None:
    """As Kafka's CurrentAssignmentBuilder: a heartbeat whose owned list
    leaves out the partitions to revoke (a member rejoining at epoch 0 owns
    nothing) moves the member to the target epoch at once, and the other
    member gets them; an omitted owned list still counts as owning them
    (the fuzzer found it: kcompat asked a rejoined member to revoke)."""
    for omitted_first in (False, True):
        g = ConsumerGroup("g", CFG, {T: 4})
        a = g.heartbeat(join("a"), 0)
        b = g.heartbeat(join("b"), 1)
        if omitted_first:  # asked to revoke 2, 3 (it may still hold them)
            asked = g.heartbeat(beat("a", a.member_epoch, None), 2)
            assert (asked.member_epoch, asked.assignment) == (2, ((T, (0, 1)),))
        a2 = g.heartbeat(join("a"), 3)  # rejoins at epoch 0: owns nothing
        assert (a2.member_epoch, a2.assignment) == (3, ((T, (0, 1)),))
        b2 = g.heartbeat(beat("b", b.member_epoch), 4)
        assert b2.assignment == ((T, (2, 3)),) and g.state == "Stable"


def test_static_member_leaves_and_returns() -> None:
    g = ConsumerGroup("g", CFG, {T: 2})
    s1 = g.heartbeat(join("s1", instance_id="i"), 0)
    assert g.heartbeat(join("s2", instance_id="i"), 1).error == ErrorCode.unreleased_instance_id
    assert g.heartbeat(beat("s1", s1.member_epoch, instance_id="x"), 1).error \
        == ErrorCode.unknown_member_id
    epoch = g.group_epoch
    assert g.heartbeat(Heartbeat("s1", -2, instance_id="i"), 2).member_epoch == -2
    assert g.group_epoch == epoch and g.member("s1") is not None
    s2 = g.heartbeat(join("s2", instance_id="i"), 3)
    assert (s2.member_epoch, s2.assignment) == (s1.member_epoch, s1.assignment)
    assert g.member_ids() == ["s2"] and g.group_epoch == epoch


def test_session_expiry_hands_partitions_over() -> None:
    g = ConsumerGroup("g", CFG, {T: 2})
    a = g.heartbeat(join("a"), 0)
    b = g.heartbeat(join("b"), 100)
    g.heartbeat(beat("a", a.member_epoch, a.assignment), 200)
    b = g.heartbeat(beat("b", b.member_epoch), 2500)
    assert g.tick(3199) == []
    assert g.tick(3200) == ["a"]
    r = g.heartbeat(beat("b", b.member_epoch, b.assignment), 3300)
    assert r.assignment == ((T, (0, 1)),) and r.member_epoch == g.group_epoch


def test_assignment_interval_keeps_group_assigning() -> None:
    cfg = ConsumerGroupConfig(assignment_interval_ms=1000)
    g = ConsumerGroup("g", cfg, {T: 4})
    g.heartbeat(join("a"), 0)
    g.heartbeat(join("b"), 10)
    assert g.state == "Assigning"
    g.heartbeat(beat("a", 2, ((T, (0, 1, 2, 3)),)), 500)
    assert g.state == "Assigning"
    g.heartbeat(beat("a", 2, ((T, (0, 1, 2, 3)),)), 1000)
    assert g.state == "Reconciling" and g.assignment_epoch == 3


def test_regex_subscription_follows_new_topics() -> None:
    g = ConsumerGroup("g", CFG, {"orders-1": 2, "other": 1})
    r = g.heartbeat(Heartbeat("a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="orders-.*",
                              owned=()), 0)
    assert r.assignment == (("orders-1", (0, 1)),)
    assert g.update_metadata({"orders-1": 2, "orders-2": 1, "other": 1})
    r2 = g.heartbeat(beat("a", r.member_epoch, r.assignment), 1)
    assert r2.assignment == (("orders-1", (0, 1)), ("orders-2", (0,)))
    assert not g.update_metadata({"orders-1": 2, "orders-2": 1, "other": 5})


def test_regex_resolves_to_the_topics_the_principal_may_describe() -> None:
    """Kafka's filterTopicDescribeAuthorizedTopics: a regex never brings a
    member a topic its principal may not DESCRIBE (from its host); each member
    is filtered by its own principal; an ACL change reaches the resolution
    group.consumer.regex.refresh.interval.ms later, and bumps the group epoch."""
    cfg = ConsumerGroupConfig(session_timeout_ms=10**9, heartbeat_interval_ms=500,
                              assignment_interval_ms=0, regex_refresh_interval_ms=10_000)
    g = ConsumerGroup("g", cfg, {"orders-eu": 2, "orders-us": 1, "other": 1})
    may = {("User:alice", "/10.0.0.1"): {"orders-eu"},
           ("User:bob", "/10.0.0.2"): {"orders-eu", "orders-us"}}
    asked: list[tuple[str, ...]] = []

    def describable(principal: str, host: str, topics: tuple[str, ...]) -> set[str]:
        asked.append(topics)
        return may.get((principal, host), set()) & set(topics)
    g.topic_filter = describable

    def regex_join(member: str, principal: str, host: str, now: int) -> object:
        return g.heartbeat(Heartbeat(member, 0, rebalance_timeout_ms=1, owned=(),
                                     subscribed_topic_regex="orders-.*", principal=principal,
                                     client_host=host), now)
    def alice_beat(now: int) -> None:
        g.heartbeat(beat("a", a.member_epoch, a.assignment,  # type: ignore[attr-defined]
                         principal="User:alice", client_host="/10.0.0.1"), now)
    a = regex_join("a", "User:alice", "/10.0.0.1", 0)
    assert a.assignment == (("orders-eu", (0, 1)),)  # type: ignore[attr-defined]
    assert asked == [("orders-eu", "orders-us")]  # matches only are asked about
    member = g.member("a")
    assert member is not None
    assert g.subscribed_topics(member) == ("orders-eu",)
    regex_join("b", "User:bob", "/10.0.0.2", 1)
    b = g.member("b")
    assert b is not None and g.subscribed_topics(b) == ("orders-eu", "orders-us")
    regex_join("c", "User:alice", "/10.9.9.9", 2)  # alice from another host: nothing
    c = g.member("c")
    assert c is not None and g.subscribed_topics(c) == ()
    calls = len(asked)
    alice_beat(3)
    assert len(asked) == calls  # resolutions are kept between heartbeats

    may[("User:alice", "/10.0.0.1")].add("orders-us")  # an ACL added
    epoch = g.group_epoch
    alice_beat(9_999)
    assert g.subscribed_topics(member) == ("orders-eu",) and g.group_epoch == epoch
    alice_beat(10_000)
    assert g.subscribed_topics(member) == ("orders-eu", "orders-us")
    assert g.group_epoch == epoch + 1

    # a new matching topic is resolved for each principal at once: bob may describe it
    may[("User:bob", "/10.0.0.2")].add("orders-jp")
    assert g.update_metadata({"orders-eu": 2, "orders-us": 1, "orders-jp": 1, "other": 1})
    assert g.subscribed_topics(b) == ("orders-eu", "orders-jp", "orders-us")
    assert g.subscribed_topics(member) == ("orders-eu", "orders-us")
    # one nobody may describe changes no subscription: no new group epoch
    assert not g.update_metadata({"orders-eu": 2, "orders-us": 1, "orders-jp": 1,
                                  "orders-x": 1, "other": 1})
    back = ConsumerGroup.restore(g.snapshot_json(), 20_000, cfg, None)
    back.topic_filter = describable
    restored = back.member("b")
    assert restored is not None and restored.principal == "User:bob"
    assert back.subscribed_topics(restored) == ("orders-eu", "orders-jp", "orders-us")


def test_offsets_checks() -> None:
    g = ConsumerGroup("g", CFG, {T: 1})
    r = g.heartbeat(join("a"), 0)
    assert g.offsets_error("a", r.member_epoch) is None
    assert g.offsets_error("a", 99)[0] == ErrorCode.stale_member_epoch  # type: ignore[index]
    assert g.offsets_error("zz", 1)[0] == ErrorCode.unknown_member_id  # type: ignore[index]


def test_snapshot_restore_keeps_epochs() -> None:
    g = ConsumerGroup("g", CFG, {T: 3})
    a = g.heartbeat(join("a"), 0)
    g.heartbeat(join("b", server_assignor="range"), 1)
    g.heartbeat(beat("a", a.member_epoch, a.assignment), 2)
    back = ConsumerGroup.restore(g.snapshot_json(), 50, CFG, {T: 3})
    assert back.snapshot_json() == g.snapshot_json()
    assert back.describe() == g.describe()
    assert back.next_deadline_ms() == 50 + CFG.session_timeout_ms


# -- assignors ---------------------------------------------------------------------------


def test_uniform_balanced_and_sticky() -> None:
    subs = {m: [T] for m in "abc"}
    first = uniform_assign(subs, {T: 7}, {})
    sizes = sorted(len(flat(a)) for a in first.values())
    assert sizes == [2, 2, 3]
    subs["d"] = [T]
    second = uniform_assign(subs, {T: 7}, first)
    assert sorted(len(flat(a)) for a in second.values()) == [1, 2, 2, 2]
    moved = sum(len(flat(first[m]) - flat(second[m])) for m in "abc")
    assert moved == 1  # only the member that had three gives one up, to d
    assert all(flat(second[m]) <= flat(first[m]) for m in "abc")


def test_range_per_topic() -> None:
    out = range_assign({"a": ["x", "y"], "b": ["x", "y"]}, {"x": 3, "y": 3}, {})
    assert out == {"a": (("x", (0, 1)), ("y", (0, 1))), "b": (("x", (2,)), ("y", (2,)))}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, unique=True),
                min_size=1, max_size=6),
       st.dictionaries(st.sampled_from(["x", "y", "z"]), st.integers(0, 9)))
def test_uniform_assigns_each_subscribed_partition_once(subs_list: list[list[str]],
                                                         counts: dict[str, int]) -> None:
    subs = {f"m{i}": s for i, s in enumerate(subs_list)}
    for assign in (uniform_assign, range_assign):
        out = assign(subs, counts, {})
        owners = [tp for a in out.values() for tp in flat(a)]
        assert len(owners) == len(set(owners))
        wanted = {(t, p) for s in subs.values() for t in s for p in range(counts.get(t, 0))}
        assert set(owners) == wanted
        for m, a in out.items():
            assert {t for t, _ in a} <= set(subs[m])
    if len({frozenset(s) for s in subs.values()}) == 1:
        sizes = [len(flat(a)) for a in uniform_assign(subs, counts, {}).values()]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from(["uniform", "range"]))
def test_no_partition_owned_by_two_clients(seed: int, assignor: str) -> None:
    """Clients that apply each answer (and keep consuming what they were not
    told to drop) never hold the same partition at the same time, and a quiet
    group converges to a balanced, stable assignment."""
    rnd = random.Random(seed)
    g = ConsumerGroup("g", CFG, {T: 6})
    clients: dict[str, tuple[int, set[tuple[str, int]]]] = {}
    now = 0
    for _ in range(80):
        now += rnd.randint(1, 200)
        name = f"m{rnd.randint(0, 4)}"
        if name not in clients:
            r = g.heartbeat(join(name, server_assignor=assignor), now)
            clients[name] = (r.member_epoch, flat(r.assignment or ()))
        elif rnd.random() < 0.08:
            g.heartbeat(Heartbeat(name, -1), now)
            del clients[name]
        else:
            epoch, owned = clients[name]
            r = g.heartbeat(beat(name, epoch, tuple((T, (p,)) for _, p in sorted(owned))), now)
            assert r.error == ErrorCode.none, r
            clients[name] = (r.member_epoch, owned if r.assignment is None
                             else flat(r.assignment))
        held = [tp for _, owned in clients.values() for tp in owned]
        assert len(held) == len(set(held)), (clients, g.describe())
    for _ in range(4):  # quiet rounds: everyone heartbeats
        for name in sorted(clients):
            epoch, owned = clients[name]
            now += 1
            r = g.heartbeat(beat(name, epoch, tuple((T, (p,)) for _, p in sorted(owned))), now)
            clients[name] = (r.member_epoch, owned if r.assignment is None
                             else flat(r.assignment))
    if clients:
        assert g.state == "Stable"
        sizes = [len(owned) for _, owned in clients.values()]
        assert sum(sizes) == 6 and max(sizes) - min(sizes) <= 1


def test_member_that_does_not_revoke_is_removed_after_its_rebalance_timeout() -> None:
    g = ConsumerGroup("g", CFG, {T: 2})
    a = g.heartbeat(Heartbeat("a", 0, rebalance_timeout_ms=1000, subscribed_topic_names=(T,),
                              owned=()), 0)
    g.heartbeat(join("b"), 10)
    g.heartbeat(beat("a", a.member_epoch, a.assignment), 20)  # asked to revoke one
    assert g.state == "Reconciling"
    g.heartbeat(beat("a", a.member_epoch, a.assignment), 500)  # still holds it
    assert g.tick(1019) == []
    assert g.tick(1020) == ["a"]


def test_group_max_size_and_preferred_assignor() -> None:
    g = ConsumerGroup("g", ConsumerGroupConfig(max_size=1, assignment_interval_ms=0), {T: 2})
    assert g.heartbeat(join("a", server_assignor="range"), 0).error == ErrorCode.none
    full = g.heartbeat(join("b"), 1)
    assert (full.error, full.error_message) == (
        ErrorCode.group_max_size_reached,
        "The consumer group has reached its maximum capacity of 1 members.")
    assert g.describe().assignor_name == "range"


# -- classic members (mixed groups, Kafka 4.4) ----------------------------------------------


def classic_join(member: str, owned: tuple[tuple[str, tuple[int, ...]], ...] = (),
                 new_id: str = "new", instance: str | None = None) -> ClassicJoin:
    return ClassicJoin(member, new_id, instance, 6000, 10_000, "consumer",
                       (("cooperative-sticky", encode_subscription((T,), owned)),))


def test_consumer_protocol_bytes_round_trip() -> None:
    raw = encode_subscription(("a", "b"), (("a", (0, 2)),))
    assert decode_subscription(raw) == Subscription(("a", "b"), (("a", (0, 2)),))
    assert decode_assignment(encode_assignment((("a", (1,)), ("b", (0, 3))))) == (
        ("a", (1,)), ("b", (0, 3)))
    assert decode_subscription(b"\x00") is None


def test_classic_member_joins_a_consumer_group() -> None:
    g = ConsumerGroup("g", CFG, {T: 4})
    a = g.heartbeat(join("a"), 0)
    first = g.classic_join(classic_join(""), 1)
    assert (first.error, first.member_id) == (ErrorCode.member_id_required, "new")
    bad = g.classic_join(ClassicJoin("new", "x", None, 6000, 10_000, "other", (("p", b""),)), 1)
    assert bad.error == ErrorCode.inconsistent_group_protocol
    joined = g.classic_join(classic_join("new"), 2)
    assert joined.error == ErrorCode.none and joined.protocol_name == "cooperative-sticky"
    synced = g.classic_sync("new", None, joined.generation_id, "consumer", "cooperative-sticky", 3)
    assert synced.error == ErrorCode.none and synced.assignment == ()  # a still owns them
    assert g.classic_sync("new", None, 99, None, None, 3).error == ErrorCode.illegal_generation
    assert g.classic_heartbeat("zz", None, 1, 3) == ErrorCode.unknown_member_id
    a2 = g.heartbeat(beat("a", a.member_epoch, a.assignment), 4)  # revokes two
    g.heartbeat(beat("a", a.member_epoch, a2.assignment), 5)  # and releases them
    assert g.classic_heartbeat("new", None, joined.generation_id, 6) \
        == ErrorCode.rebalance_in_progress  # its partitions are free: rejoin
    again = g.classic_join(classic_join("new"), 7)
    synced = g.classic_sync("new", None, again.generation_id, None, None, 8)
    assert len(flat(synced.assignment)) == 2 and g.state == "Stable"
    assert g.classic_heartbeat("new", None, again.generation_id, 9) == ErrorCode.none
    assert g.offsets_error("new", 1)[0] == ErrorCode.illegal_generation  # type: ignore[index]
    assert [m.classic for m in g.describe().members] == [False, True]
    assert g.classic_leave("new", None) == ErrorCode.none and g.member_ids() == ["a"]


def test_classic_group_converted_keeps_assignments_and_generation() -> None:
    members = [ClassicMemberState(
        m, None, "c", "/h", 6000, 10_000, ("range",), encode_subscription((T,)),
        encode_assignment(((T, parts),))) for m, parts in (("c1", (0, 1)), ("c2", (2, 3)))]
    g = ConsumerGroup.from_classic("g", CFG, {T: 4}, 7, members, 0)
    assert g is not None
    assert (g.group_epoch, g.assignment_epoch, g.state) == (7, 7, "Stable")
    assert g.classic_heartbeat("c1", None, 7, 1) == ErrorCode.none
    n = g.heartbeat(join("n"), 2)  # a consumer-protocol member joins: the others rejoin
    assert n.member_epoch == 8 and g.classic_heartbeat("c1", None, 7, 3) \
        == ErrorCode.rebalance_in_progress
    bad = [ClassicMemberState("c1", None, "c", "/h", 6000, 10_000, ("range",), b"\x00", b"")]
    assert ConsumerGroup.from_classic("g", CFG, {T: 4}, 7, bad, 0) is None
    back = ConsumerGroup.restore(g.snapshot_json(), 10, CFG, {T: 4})
    assert back.member("c1") is not None and back.member("c1").is_classic  # type: ignore[union-attr]


def test_commit_at_an_older_epoch_for_partitions_held_since_then() -> None:
    """KIP-1251 (Kafka 4.3+): assignment epoch <= member epoch in the commit <= current."""
    g = ConsumerGroup("g", CFG, {T: 4})
    a = g.heartbeat(join("a"), 0)  # all four at epoch 2
    assert a.member_epoch == 2
    g.heartbeat(join("b"), 1)
    a2 = g.heartbeat(beat("a", 2, a.assignment), 2)  # asked to revoke two
    g.heartbeat(beat("a", 2, a2.assignment), 3)  # a moves to epoch 3 with 0, 1
    assert g.member("a").member_epoch == 3  # type: ignore[union-attr]
    assert g.commit_errors("a", 3, [(T, 0)]) == (None, {})
    assert g.commit_errors("a", 2, [(T, 0), (T, 1)]) == (None, {})  # held since epoch 2
    assert g.commit_errors("a", 2, [(T, 3)]) == (None, {(T, 3): ErrorCode.stale_member_epoch})
    assert g.commit_errors("a", 4, [(T, 0)])[0] == ErrorCode.stale_member_epoch
    assert g.commit_errors("a", 2, [(T, 3)], transactional=True)[1] == {
        (T, 3): ErrorCode.illegal_generation}
    b = g.heartbeat(beat("b", 3), 4)  # b gets 2, 3 at epoch 3
    assert b.assignment == ((T, (2, 3)),)
    assert g.commit_errors("b", 2, [(T, 2)])[1] == {(T, 2): ErrorCode.stale_member_epoch}
    assert g.commit_errors("zz", 1, [(T, 2)])[0] == ErrorCode.unknown_member_id


def test_a_member_subscribed_to_nothing_joins_without_a_new_group_epoch() -> None:
    """Kafka 4.4 (found by the differential fuzzer, F15): a new group is at
    epoch 1, and a joining member bumps it only by what it subscribes to; one
    that subscribes to nothing takes the group's epoch as it is."""
    def epochs(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[int, ...]:
        g = ConsumerGroup("g", CFG, {T: 2})
        a = g.heartbeat(join("a", first), 0).member_epoch
        b = g.heartbeat(join("b", second), 1).member_epoch
        a_again = g.heartbeat(beat("a", a), 2).member_epoch
        described = g.describe()
        return (a, b, a_again, described.group_epoch,
                *(m.member_epoch for m in sorted(described.members, key=lambda m: m.member_id)))

    # as Kafka 4.4.0 answered (a topic that does not exist: nothing to revoke):
    # (a's join, b's join, a's next heartbeat, the group's, a's and b's epochs)
    assert epochs((), ()) == (1, 1, 1, 1, 1, 1)
    assert epochs(("x",), ()) == (2, 2, 2, 2, 2, 2)
    assert epochs((), ("x",)) == (1, 2, 2, 2, 2, 2)
    assert epochs(("x",), ("x",)) == (2, 3, 3, 3, 3, 3)


def test_a_refused_heartbeat_takes_no_topic_change_in() -> None:
    """A topic change reaches the group epoch at the next heartbeat that
    passes the checks; a fenced or unknown member's leaves the group as it
    was (Kafka 4.4; found by the differential fuzzer, F20: kcompat bumped the
    epoch first, and the group showed Assigning with its member behind)."""
    g = ConsumerGroup("g", CFG, {T: 1})
    a = g.heartbeat(join("a"), 0, {T: 1}).member_epoch
    before = g.describe()
    assert g.state == "Stable"
    for refused in (beat("a", a + 1), beat("zz", 1)):
        r = g.heartbeat(refused, 1, {T: 2})
        assert r.error in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id)
        assert (g.describe().group_epoch, g.state) == (before.group_epoch, "Stable")
    r = g.heartbeat(beat("a", a, ((T, (0,)),)), 2, {T: 2})
    assert r.member_epoch == a + 1 and g.describe().group_epoch == a + 1


class _CountedTopics(dict):  # type: ignore[type-arg]
    """The cluster's topics, counting each look over all of them."""

    looks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).looks += 1
        return super().__iter__()

    def items(self):  # type: ignore[no-untyped-def]
        type(self).looks += 1
        return super().items()

    def keys(self):  # type: ignore[no-untyped-def]
        type(self).looks += 1
        return super().keys()


def test_heartbeats_with_unchanged_topics_do_not_look_at_every_topic() -> None:
    """The host hands a group the same mapping until a topic changes
    (``HostedGroups.partition_counts``): heartbeats with it cost nothing per
    topic of the cluster; a new mapping (a topic added) is looked at once."""
    topics = _CountedTopics({T: 4, **{f"other-{i}": 1 for i in range(5000)}})
    g = ConsumerGroup("g", CFG, topics)
    r = g.heartbeat(join("a"), 0, topics)
    assert r.error == ErrorCode.none
    _CountedTopics.looks = 0
    for at in range(1, 21):
        assert g.heartbeat(beat("a", r.member_epoch), at, topics).error == ErrorCode.none
    assert _CountedTopics.looks == 0
    grown = _CountedTopics({**topics, "new": 2})
    g.heartbeat(beat("a", r.member_epoch), 21, grown)
    assert 0 < _CountedTopics.looks <= 3


def test_a_topic_re_created_under_its_name_is_sent_again() -> None:
    """Kafka keys assignments by topic id: a subscribed topic deleted and
    re-created at the same partition count bumps the group epoch and the
    member gets its assignment again; an ordinary heartbeat after that gets
    none. A group restored from a snapshot (no ids kept) learns them quietly."""
    g = ConsumerGroup("g", CFG, TopicCounts({T: 2}, {T: "id-1"}))
    assert g.heartbeat(join("a"), 0).assignment == ((T, (0, 1)),)
    assert g.heartbeat(beat("a", 2, ((T, (0, 1)),)), 1).assignment is None
    assert g.update_metadata(TopicCounts({T: 2}, {T: "id-2"}))
    got = g.heartbeat(beat("a", 2, ((T, (0, 1)),)), 2)
    assert (got.member_epoch, got.assignment) == (3, ((T, (0, 1)),))
    assert g.heartbeat(beat("a", 3, ((T, (0, 1)),)), 3).assignment is None
    restored = ConsumerGroup.restore(g.snapshot_json(), 4, CFG, TopicCounts({T: 2}, {T: "id-2"}))
    assert restored.heartbeat(beat("a", 3, ((T, (0, 1)),)), 5).assignment is None


class _CountingGroup(ConsumerGroup):
    looks = 0

    def _assigned_ids(self, member):  # type: ignore[no-untyped-def]
        self.looks += 1
        return super()._assigned_ids(member)


def test_an_ordinary_heartbeat_looks_at_no_topic_id() -> None:
    """The ids of a member's assigned topics are compared only when the
    cluster's topic ids are another mapping than at its last heartbeat: a
    member holding 1,000 partitions heartbeats at no cost per partition."""
    counts = TopicCounts({T: 1000}, {T: "id-1"})
    g = _CountingGroup("g", CFG, counts)
    first = g.heartbeat(join("a"), 0)
    owned = first.assignment
    looks = g.looks
    for i in range(50):
        assert g.heartbeat(beat("a", first.member_epoch, owned), 1 + i).assignment is None
        g.update_metadata(counts)  # the host's very mapping: unchanged
    assert g.looks == looks
    g.update_metadata(TopicCounts({T: 1000, "other": 1}, {T: "id-1", "other": "id-9"}))
    assert g.heartbeat(beat("a", first.member_epoch, owned), 99).assignment is None
    assert g.looks == looks + 1


def test_a_topic_re_created_while_no_coordinator_watched() -> None:
    """Snapshots keep the subscribed topics' ids: a group restored over a
    topic re-created meanwhile bumps its epoch and sends the assignment
    again; over the same topic, or from an older broker's snapshot (no
    ids), it does not."""
    g = ConsumerGroup("g", CFG, TopicCounts({T: 2}, {T: "id-1"}))
    assert g.heartbeat(join("a"), 0).assignment == ((T, (0, 1)),)
    raw = g.snapshot_json()
    owned = ((T, (0, 1)),)
    same = ConsumerGroup.restore(raw, 1, CFG, TopicCounts({T: 2}, {T: "id-1"}))
    assert same.group_epoch == 2 and same.heartbeat(beat("a", 2, owned), 2).assignment is None
    moved = ConsumerGroup.restore(raw, 1, CFG, TopicCounts({T: 2}, {T: "id-2"}))
    assert moved.group_epoch == 3
    got = moved.heartbeat(beat("a", 2, owned), 2)
    assert (got.member_epoch, got.assignment) == (3, owned)
    older = json.loads(raw)
    del older["ids"]
    quiet = ConsumerGroup.restore(json.dumps(older).encode(), 1, CFG,
                                  TopicCounts({T: 2}, {T: "id-2"}))
    assert quiet.group_epoch == 2
    assert quiet.heartbeat(beat("a", 2, owned), 2).assignment is None


def test_a_topic_left_leaves_the_assignment_before_the_target_moves() -> None:
    """Kafka 4.4's updateCurrentAssignment: while the next target waits for
    its interval, a member that stops subscribing to a topic loses its
    partitions at once, to revoke first (its epoch kept), then stands as it
    is; the target, when it comes, gives it nothing of that topic."""
    cfg = ConsumerGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=500,
                              assignment_interval_ms=15_000)
    g = ConsumerGroup("g", cfg, {"t1": 1, "t2": 1})
    both = (("t1", (0,)), ("t2", (0,)))
    first = g.heartbeat(join("a", ("t1", "t2")), 0)
    assert first.assignment == both
    left = g.heartbeat(beat("a", first.member_epoch, both, subscribed_topic_names=("t1",)), 1)
    assert (left.member_epoch, left.assignment) == (first.member_epoch, (("t1", (0,)),))
    member = g.member("a")
    assert member is not None and member.state == "unrevoked_partitions"
    after = g.heartbeat(beat("a", first.member_epoch, (("t1", (0,)),)), 2)
    assert (after.member_epoch, after.assignment) == (first.member_epoch, None)
    assert g.member("a").state == "stable"  # type: ignore[union-attr]
    later = g.heartbeat(beat("a", first.member_epoch, (("t1", (0,)),)), 20_000)
    assert later.member_epoch > first.member_epoch and later.assignment is None


def test_one_heartbeat_bumps_the_group_epoch_once() -> None:
    """A heartbeat changing the member's subscription while a subscribed
    topic appeared: one bump for both, as Kafka (kcompat bumped twice, and
    the member's previous epoch was then two behind)."""
    g = ConsumerGroup("g", CFG, {})
    first = g.heartbeat(join("a", ("a",)), 0, {})
    again = g.heartbeat(join("a", ("a", "b")), 1, {"a": 1})
    assert (again.member_epoch, again.assignment) == (first.member_epoch + 1, (("a", (0,)),))
    assert g.heartbeat(beat("a", first.member_epoch, (("a", (0,)),)), 2).error == ErrorCode.none
