"""Group handlers in-process at every advertised version: a single-member group
goes through join, sync, heartbeat, commit, fetch, describe, list, leave and
delete; every response must encode with kio and read back unchanged."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_reader

from kcompat.broker.config import broker_config
from kcompat.broker.groups.groups import NotCoordinatorError
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.group.coordinator import Reply, SyncResult
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = broker_config.load(None, {"log.dirs": str(tmp_path),
                                    "group.initial.rebalance.delay.ms": "0",
                                    "offsets.topic.num.partitions": "3"}, {})
    b = Broker(cfg)
    running.run(b, lambda: running.create_topic(b, "t", 2))
    yield b
    b.close()


async def call(broker: Broker, key: int, version: int,
               make: Callable[[ModuleType], Any]) -> Any:
    request = make(codec.request_module(key, version))
    ctx = RequestContext(broker, key, version, 7, "cli", "/127.0.0.1")
    response = await HANDLERS[key](ctx, request)
    raw = codec.encode_response(key, version, 7, response)
    header = 9 if codec.is_flexible(key, version) else 8
    decoded, _ = entity_reader(type(response))(raw, header)
    assert decoded == response
    return response


def top(key: int) -> int:
    return v.API_RANGES[key].max_version


def low(key: int) -> int:
    return v.API_RANGES[key].parse_min


SECONDS = datetime.timedelta(seconds=10)


def join_request(m: ModuleType, member: str) -> Any:
    return codec.build(m.JoinGroupRequest, group_id="g", session_timeout=SECONDS,
                       rebalance_timeout=SECONDS, member_id=member, group_instance_id=None,
                       protocol_type="consumer",
                       protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b"\0\0"),))


@pytest.mark.parametrize("jv", range(0, top(v.JOIN_GROUP) + 1))
def test_group_lifecycle_at_every_version(broker: Broker, jv: int) -> None:
    sv = min(jv, top(v.SYNC_GROUP))
    hv = min(jv, top(v.HEARTBEAT))
    lv = min(jv, top(v.LEAVE_GROUP))
    cv = max(low(v.OFFSET_COMMIT), min(jv, top(v.OFFSET_COMMIT)))
    fv = max(low(v.OFFSET_FETCH), min(jv, top(v.OFFSET_FETCH)))
    dv = min(jv, top(v.DESCRIBE_GROUPS))

    async def scenario() -> None:
        assert broker.groups is not None
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            nursery.start_soon(broker.groups.run)
            r = await call(broker, v.JOIN_GROUP, jv, lambda m: join_request(m, ""))
            if jv >= 4:
                assert r.error_code == E.member_id_required
                member = r.member_id
                r = await call(broker, v.JOIN_GROUP, jv, lambda m: join_request(m, member))
            assert r.error_code == E.none and r.leader == r.member_id
            member, gen = r.member_id, r.generation_id
            s = await call(broker, v.SYNC_GROUP, sv, lambda m: codec.build(
                m.SyncGroupRequest, group_id="g", generation_id=gen, member_id=member,
                group_instance_id=None, protocol_type="consumer", protocol_name="range",
                assignments=(m.SyncGroupRequestAssignment(member_id=member, assignment=b"A"),)))
            assert (s.error_code, s.assignment) == (E.none, b"A")
            h = await call(broker, v.HEARTBEAT, hv, lambda m: codec.build(
                m.HeartbeatRequest, group_id="g", generation_id=gen, member_id=member,
                group_instance_id=None))
            assert h.error_code == E.none
            await commit_and_fetch(broker, cv, fv, gen, member)
            d = await call(broker, v.DESCRIBE_GROUPS, dv, lambda m: codec.build(
                m.DescribeGroupsRequest, groups=("g", "nope"),
                include_authorized_operations=False))
            assert [g.group_state for g in d.groups] == ["Stable", "Dead"]
            assert d.groups[0].members[0].member_assignment == b"A"
            leave = await call(broker, v.LEAVE_GROUP, lv, lambda m: codec.build(
                m.LeaveGroupRequest, group_id="g", member_id=member, members=(
                    m.MemberIdentity(member_id=member, group_instance_id=None)
                    if lv >= 3 else None,) if lv >= 3 else ()))
            assert leave.error_code == E.none
            nursery.cancel_scope.cancel()

    trio.run(scenario)
    assert broker.groups is not None
    assert broker.groups.coordinator.groups["g"].state.value == "Empty"


def test_an_assignment_not_written_is_not_handed_out(broker: Broker,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """As in Kafka, the leader's SyncGroup is answered once the generation and
    its assignments are written to ``__consumer_offsets``: a failed write
    (the partition's leadership moved, or it timed out) answers the error, not
    the assignment, and the group rebalances; the next generation is handed
    out once written. Answered anyway, the next coordinator formed the same
    generation again with other owners (broker simulator, seed 13)."""
    groups = broker.groups
    assert groups is not None
    append = groups._append

    async def failing(group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        raise NotCoordinatorError(E.coordinator_not_available)

    async def join_and_sync(member: str) -> tuple[str, int, Any]:
        r = await call(broker, v.JOIN_GROUP, 5, lambda m: join_request(m, member))
        if r.error_code == E.member_id_required:
            member = r.member_id
            r = await call(broker, v.JOIN_GROUP, 5, lambda m: join_request(m, member))
        assert r.error_code == E.none
        member, gen = r.member_id, r.generation_id
        s = await call(broker, v.SYNC_GROUP, 3, lambda m: codec.build(
            m.SyncGroupRequest, group_id="g", generation_id=gen, member_id=member,
            group_instance_id=None,
            assignments=(m.SyncGroupRequestAssignment(member_id=member, assignment=b"A"),)))
        return member, gen, s

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            nursery.start_soon(groups.run)
            monkeypatch.setattr(groups, "_append", failing)
            member, gen, s = await join_and_sync("")
            assert (s.error_code, s.assignment) == (E.coordinator_not_available, b"")
            assert groups.coordinator.groups["g"].state.value == "PreparingRebalance"
            monkeypatch.setattr(groups, "_append", append)
            member, again, s = await join_and_sync(member)
            assert (s.error_code, s.assignment, again) == (E.none, b"A", gen + 1)
            assert groups.store.groups["g"].generation_id == gen + 1
            nursery.cancel_scope.cancel()

    trio.run(scenario)


def test_a_sync_of_a_stable_group_waits_for_its_write(broker: Broker,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A member whose SyncGroup comes after the leader's, while the leader's
    write of the assignments is still on its way, gets its assignment once
    the write is done, and the write's error if it failed (broker simulator,
    seed 75: the late member kept an assignment no record held)."""
    groups = broker.groups
    assert groups is not None
    gate = trio.Event()

    async def slow_then_failing(group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        await gate.wait()
        raise NotCoordinatorError(E.not_coordinator)

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            r = await call(broker, v.JOIN_GROUP, 3, lambda m: join_request(m, ""))
            assert r.error_code == E.none
            groups.coordinator.changed.add("g")  # as after the leader's SyncGroup
            monkeypatch.setattr(groups, "_append", slow_then_failing)
            nursery.start_soon(groups.deliver, [])  # the leader's write, on its way
            await trio.testing.wait_all_tasks_blocked()
            token, waiter = groups.new_token()  # the late member's SyncGroup
            answer = Reply(token, SyncResult(E.none, "consumer", "range", b"A"))
            nursery.start_soon(groups.wait, token, waiter, [answer], "g")
            await trio.testing.wait_all_tasks_blocked()
            assert not waiter.event.is_set()
            gate.set()
            await waiter.event.wait()
            assert waiter.result == SyncResult(E.not_coordinator)
            nursery.cancel_scope.cancel()

    trio.run(scenario)


async def commit_and_fetch(broker: Broker, cv: int, fv: int, gen: int, member: str) -> None:
    c = await call(broker, v.OFFSET_COMMIT, cv, lambda m: codec.build(
        m.OffsetCommitRequest, group_id="g", generation_id_or_member_epoch=gen,
        member_id=member, group_instance_id=None, topics=(m.OffsetCommitRequestTopic(
            name="t", partitions=tuple(codec.build(
                m.OffsetCommitRequestPartition, partition_index=i, committed_offset=10 + i,
                committed_leader_epoch=0, committed_metadata=f"m{i}") for i in (0, 1, 9))),)))
    assert [p.error_code for p in c.topics[0].partitions] == [
        E.none, E.none, E.unknown_topic_or_partition]
    if fv >= 8:
        f = await call(broker, v.OFFSET_FETCH, fv, lambda m: codec.build(
            m.OffsetFetchRequest, groups=(codec.build(
                m.OffsetFetchRequestGroup, group_id="g", topics=None),), require_stable=False))
        parts = f.groups[0].topics[0].partitions
    else:
        f = await call(broker, v.OFFSET_FETCH, fv, lambda m: codec.build(
            m.OffsetFetchRequest, group_id="g", require_stable=False, topics=(
                m.OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1, 5)),)))
        parts = f.topics[0].partitions
    got = {p.partition_index: (p.committed_offset, p.metadata) for p in parts}
    assert got[0] == (10, "m0") and got[1] == (11, "m1")
    assert got.get(5, (-1, "")) == (-1, "")


@pytest.mark.parametrize("version", range(0, top(v.LIST_GROUPS) + 1))
def test_list_and_delete_groups(broker: Broker, version: int) -> None:
    async def scenario() -> None:
        assert broker.groups is not None
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            r = await call(broker, v.JOIN_GROUP, 3, lambda m: join_request(m, ""))
            assert r.error_code == E.none
            listed = await call(broker, v.LIST_GROUPS, version, lambda m: codec.build(
                m.ListGroupsRequest, states_filter=(), types_filter=()))
            assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "consumer")]
            dv = min(version, top(v.DELETE_GROUPS))
            d = await call(broker, v.DELETE_GROUPS, dv, lambda m: codec.build(
                m.DeleteGroupsRequest, groups_names=("g", "ghost")))
            assert [x.error_code for x in d.results] == [E.non_empty_group, E.group_id_not_found]
            nursery.cancel_scope.cancel()

    trio.run(scenario)


def test_offsets_of_a_partition_hosted_elsewhere(broker: Broker) -> None:
    """OffsetCommit and OffsetDelete check the metadata image, not the local
    replicas (as Kafka checks its metadata cache): a partition of the image that
    another broker hosts (here: partition 1, taken out of the local replicas) is
    committed and deleted; a partition the image lacks is refused."""
    elsewhere = broker.state.partitions.pop(("t", 1))

    async def scenario() -> None:
        assert broker.groups is not None
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            nursery.start_soon(broker.groups.run)
            c = await call(broker, v.OFFSET_COMMIT, top(v.OFFSET_COMMIT), lambda m: codec.build(
                m.OffsetCommitRequest, group_id="g", generation_id_or_member_epoch=-1,
                member_id="", group_instance_id=None, topics=(codec.build(
                    m.OffsetCommitRequestTopic, name="t",  # v10 names it by id
                    topic_id=broker.state.topics["t"].topic_id, partitions=tuple(codec.build(
                        m.OffsetCommitRequestPartition, partition_index=i, committed_offset=5,
                        committed_leader_epoch=-1, committed_metadata="") for i in (0, 1, 2))),)))
            assert [p.error_code for p in c.topics[0].partitions] == [
                E.none, E.none, E.unknown_topic_or_partition]
            assert set(broker.groups.store.committed("g")) == {("t", 0), ("t", 1)}
            d = await call(broker, v.OFFSET_DELETE, top(v.OFFSET_DELETE), lambda m: codec.build(
                m.OffsetDeleteRequest, group_id="g", topics=(m.OffsetDeleteRequestTopic(
                    name="t", partitions=tuple(m.OffsetDeleteRequestPartition(partition_index=i)
                                               for i in (1, 2))),)))
            assert [p.error_code for p in d.topics[0].partitions] == [
                E.none, E.unknown_topic_or_partition]
            assert set(broker.groups.store.committed("g")) == {("t", 0)}
            nursery.cancel_scope.cancel()

    try:
        trio.run(scenario)
    finally:
        broker.state.partitions[("t", 1)] = elsewhere


def test_member_commit_to_an_unknown_group(broker: Broker) -> None:
    """A commit in a generation (or member epoch) to a group the coordinator
    does not know: ILLEGAL_GENERATION up to v8, GROUP_ID_NOT_FOUND from v9, as
    Kafka 4.4 answers (found by the differential fuzzer, F16)."""
    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            seen = {}
            for version in (8, 9):  # (v10 names topics by id)
                c = await call(broker, v.OFFSET_COMMIT, version, lambda m: codec.build(
                    m.OffsetCommitRequest, group_id="ghost", generation_id_or_member_epoch=3,
                    member_id="m", group_instance_id=None, topics=(m.OffsetCommitRequestTopic(
                        name="t", partitions=(codec.build(
                            m.OffsetCommitRequestPartition, partition_index=0,
                            committed_offset=1, committed_leader_epoch=-1,
                            committed_metadata=""),)),)))
                seen[version] = c.topics[0].partitions[0].error_code
            nursery.cancel_scope.cancel()
        assert seen == {8: E.illegal_generation, 9: E.group_id_not_found}

    trio.run(scenario)


def test_share_group_describe_of_an_unknown_group(broker: Broker) -> None:
    """GROUP_ID_NOT_FOUND with no state, epochs 0 and no assignor, as Kafka 4.4
    answers (found by the differential fuzzer's share members, F19; kcompat
    said "Dead" and -1)."""
    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            d = await call(broker, v.SHARE_GROUP_DESCRIBE, 1, lambda m: codec.build(
                m.ShareGroupDescribeRequest, group_ids=("ghost",),
                include_authorized_operations=False))
            found = d.groups[0]
            assert (found.error_code, found.group_state, found.group_epoch,
                    found.assignment_epoch, found.assignor_name) == (
                E.group_id_not_found, "", 0, 0, "")
            nursery.cancel_scope.cancel()

    trio.run(scenario)
