"""Runtime around the group coordinator: parked requests, time, the offsets log.

Theory of operation
-------------------
The pure ``GroupCoordinator`` answers with ``Reply(token, result)`` values; this
service maps tokens to waiting handler tasks (a trio Event and a result slot
each), runs a ticker that calls ``tick`` at the coordinator's next deadline,
and persists what must survive a restart into ``__consumer_offsets``: offset
commits (before they are acknowledged) and group metadata (before the joins
and syncs that depend on it are answered, and instead of them when the write
fails: ``deliver``). The coordinator of a group is the leader of partition
``abs(javaHash(group)) % offsets.topic.num.partitions``, as in Kafka.

The offsets topic is replicated like any partition (a single broker is a
quorum of one) and created by the controller on the first FindCoordinator;
only the Raft leader of a group's partition coordinates it
(``coordinator_error``), after applying everything committed in its
log; writes are Raft proposals (``write_committed``). ``GroupService`` is
the replicated state machine of ``__consumer_offsets`` (``StateMachine``):
every replica applies each committed batch to its ``OffsetStore`` as it
commits, the leader's own writes included, so a broker that takes over a
partition only rebuilds the live groups from the store (``on_role``).

A deleted topic takes its committed offsets with it, as in Kafka: each
broker applying the deletion hands the name to ``topic_deleted``, and the
coordinator of each group that committed to it writes their tombstones (an
offset committed again since, to a topic created again under the name, is
kept). OffsetFetch answers none for a topic the metadata no longer holds
meanwhile, and the periodic offset expiry deletes any a coordinator did not
see go (a deletion while it was down).

Every ``offsets.retention.check.interval.ms``, as Kafka's coordinator does,
``run`` expires offsets (``offsets.retention.minutes``), then deletes each
group it coordinates that is left with no members and no offsets, committed
or pending in a transaction (``delete_empty_groups``; a share group never,
as in Kafka): the group ids a workload used once do not pile up in the
state, and a late heartbeat of such a group's last member is answered
GROUP_ID_NOT_FOUND, as Kafka answers it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller.internal_topics import OFFSETS_TOPIC, partition_for
from kcompat.broker.replication.group import NotLeaderError
from kcompat.broker.replication.runtime import ClusterRuntime
from kcompat.broker.storage.partition import Partition
from kcompat.broker.storage.state import BrokerState, now_ms
from kcompat.group.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    JoinResult,
    Reply,
    SyncResult,
)
from kcompat.group.group import GroupState
from kcompat.group.offsets import (
    CommittedOffset,
    OffsetStore,
    group_key,
    group_value,
    offset_key,
    offset_value,
    parse_offset_record,
)
from kcompat.wire import batch as wbatch
from kcompat.wire.records import decode_batch, encode_batch, marker_aborts

log = logging.getLogger("kcompat.groups")

TICK_MAX_S = 1.0
SWEEP_SLICE = 20_000  # committed offsets the expiry sweep looks at between two yields


@dataclass(eq=False)
class _Waiter:
    event: trio.Event
    result: Any = None


@dataclass(eq=False)
class _GroupWrite:
    """A group record on its way to ``__consumer_offsets``."""

    done: trio.Event
    error: ErrorCode | None = None


async def write_committed(cluster: ClusterRuntime, part: Partition, view: memoryview,
                          now: int, timeout_s: float = 10.0) -> None:
    """Propose one coordinator batch to ``part``'s Raft group as its leader and
    wait for its commit (NotCoordinatorError otherwise)."""
    group = cluster.group_of(part.topic, part.index)
    if group is None:
        raise NotCoordinatorError(ErrorCode.not_coordinator)
    term = group.raft.term
    try:
        header = cluster.propose_batch(group, view, wbatch.validate(view), now)
    except NotLeaderError:
        raise NotCoordinatorError(ErrorCode.not_coordinator) from None
    code = await cluster.wait_committed(group, header.base_offset, term,
                                        trio.current_time() + timeout_s)
    if code != ErrorCode.none:
        raise NotCoordinatorError(ErrorCode.not_coordinator
                                  if code == ErrorCode.not_leader_or_follower else
                                  ErrorCode.coordinator_not_available)


def _refused(result: Any, code: ErrorCode) -> Any:
    """A successful JoinGroup or SyncGroup answer turned into ``code``."""
    if isinstance(result, JoinResult) and result.error == ErrorCode.none:
        return JoinResult(code, member_id=result.member_id)
    if isinstance(result, SyncResult) and result.error == ErrorCode.none:
        return SyncResult(code)
    return result


class HostedKind(Protocol):
    """What the classic service asks of the KIP-848 and share groups hosted
    beside it (``hosted_groups.HostedGroups``)."""

    @property
    def expires(self) -> bool: ...  # deleted when empty and without offsets

    def group(self, group_id: str) -> object | None: ...

    def has_members(self, group_id: str) -> bool: ...

    def stored_ids(self) -> list[str]: ...

    async def delete(self, group_id: str) -> ErrorCode: ...


class NotCoordinatorError(Exception):
    """This broker no longer leads the group's offsets partition (or the write
    was not committed in time); the client must re-discover."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class GroupService:
    def __init__(self, state: BrokerState, cluster: ClusterRuntime) -> None:
        self.state = state
        self.cluster = cluster
        cfg = state.config
        self.coordinator = GroupCoordinator(CoordinatorConfig(
            min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
            max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
            max_group_size=cfg["group.max.size"],
        ))
        self.store = OffsetStore()
        # transactional offsets (TxnOffsetCommit) awaiting their marker, per producer id
        self.pending: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}
        self._held_partition: dict[int, int] = {}  # pid -> offsets partition of its batch
        self._waiters: dict[int, _Waiter] = {}
        self._group_writes: dict[str, _GroupWrite] = {}  # group id -> its write in flight
        self._next_token = 0
        self._wake = trio.Event()
        # committed offsets of deleted topics to delete: group -> tp -> the offset seen
        self._doomed: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        # the KIP-848 consumer groups and share groups hosted beside the classic ones
        # (``hosted_groups``: each adds itself)
        self.hosted: list[HostedKind] = []
        cluster.machines[OFFSETS_TOPIC] = self  # fed by the replication host
        cluster.topic_deleted_hooks.append(self.topic_deleted)

    # -- the offsets topic ----------------------------------------------------
    @property
    def num_partitions(self) -> int:
        meta = self.state.topics.get(OFFSETS_TOPIC)
        return meta.partitions if meta else int(self.state.config["offsets.topic.num.partitions"])

    def ensure_offsets_topic(self) -> None:
        if OFFSETS_TOPIC not in self.state.topics:
            raise NotCoordinatorError(ErrorCode.coordinator_not_available)

    # -- the coordinator is the leader of the offsets partition ----------------
    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """None when this broker may serve ``group_id`` now: only the Raft
        leader of the group's offsets partition coordinates, once it has
        applied everything committed before its term; else NOT_COORDINATOR
        (the client re-discovers) or COORDINATOR_LOAD_IN_PROGRESS (it retries);
        COORDINATOR_NOT_AVAILABLE before the offsets topic exists
        (FindCoordinator has it created)."""
        if OFFSETS_TOPIC not in self.state.topics:
            return ErrorCode.coordinator_not_available
        return self.cluster.serving_machine(
            OFFSETS_TOPIC, partition_for(group_id, self.num_partitions))

    # -- the replicated state machine over __consumer_offsets ------------------
    def apply(self, index: int, batch: memoryview, header: wbatch.BatchHeader) -> None:
        """A committed batch of offsets partition ``index`` (every replica)."""
        self._replay_batch(batch, header, index)

    def restore(self, index: int, start: int) -> None:
        """The log was cut below what was applied (DeleteRecords on an internal
        topic): the state already applied stays."""

    def on_role(self, index: int, leading: bool) -> None:
        """Take over (or hand back) the groups of offsets partition ``index``:
        the store is current on every replica, so a new coordinator only
        rebuilds the live groups from it — no log replay."""
        n = self.num_partitions
        stored = {g: v for g, v in self.store.groups.items() if partition_for(g, n) == index}
        if leading:
            offsets_only = [g for g in self.store.offsets
                            if g not in stored and g not in self.store.consumer_groups
                            and partition_for(g, n) == index]
            self.coordinator.take_over(stored, offsets_only, now_ms())
            log.log(logging.INFO if stored or offsets_only else logging.DEBUG,
                    "coordinating %d groups of %s-%d", len(stored) + len(offsets_only),
                    OFFSETS_TOPIC, index)
            return
        self._release(self.coordinator.unload(
            [g for g in self.coordinator.groups if partition_for(g, n) == index]))

    def _offsets_partition(self, group_id: str) -> Partition:
        self.ensure_offsets_topic()
        part = self.state.partition(OFFSETS_TOPIC, partition_for(group_id, self.num_partitions))
        assert part is not None
        return part

    def _replay_batch(self, batch: memoryview, header: wbatch.BatchHeader, index: int) -> None:
        if header.is_control:
            if header.producer_id < 0:  # a Raft leader-change record
                return
            self.complete_transaction(header.producer_id, not marker_aborts(batch), {index})
            return
        records: list[tuple[bytes | None, bytes | None]] = [
            (r.key, r.value) for r in decode_batch(batch) if r.key is not None]
        if header.is_transactional:
            self._hold(header.producer_id, index, records)
            return
        for key, value in records:
            if key is not None:
                self.store.apply(key, value)

    def _hold(self, pid: int, index: int, records: list[tuple[bytes | None, bytes | None]]) -> None:
        """Keep transactional offset records until their transaction's marker."""
        held = self.pending.setdefault(pid, {})
        for key, value in records:
            parsed = parse_offset_record(key, value) if key is not None else None
            if parsed is not None:
                (group, topic, partition), committed = parsed
                held[(group, topic, partition)] = committed
        self._held_partition[pid] = index

    def complete_transaction(self, pid: int, commit: bool, partitions: set[int]) -> None:
        """A marker reached ``__consumer_offsets`` partitions: publish or drop."""
        if self._held_partition.get(pid) not in partitions:
            return
        held = self.pending.pop(pid, {})
        self._held_partition.pop(pid, None)
        if commit:
            for (group, topic, partition), committed in held.items():
                self.store.apply(offset_key(group, topic, partition), offset_value(committed))

    def is_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return any((group_id, topic, partition) in held for held in self.pending.values())

    async def txn_commit_offsets(self, group_id: str, pid: int, epoch: int,
                                 offsets: dict[tuple[str, int], CommittedOffset]) -> ErrorCode:
        """TxnOffsetCommit: write a transactional batch; visible after COMMIT.
        INVALID_PRODUCER_EPOCH (nothing written) when the offsets partition
        already holds a newer epoch of ``pid``: the abort marker written when
        a newer producer with the same transactional id fenced this one. As
        Kafka's log append refuses it, whichever broker coordinates the
        transaction; a batch accepted after that marker would stay pending
        forever (OffsetFetch: UNSTABLE_OFFSET_COMMIT). No await between this
        check and the append (``write_committed`` proposes synchronously)."""
        part = self._offsets_partition(group_id)
        seen = part.log.producers.producers.get(pid)
        if seen is not None and seen.epoch > epoch:
            return ErrorCode.invalid_producer_epoch
        records: list[tuple[bytes | None, bytes | None]] = [
            (offset_key(group_id, t, p), offset_value(c)) for (t, p), c in offsets.items()]
        now = now_ms()
        raw = encode_batch([(k, v, (), now) for k, v in records], producer_id=pid,
                           producer_epoch=epoch, transactional=True)
        await self._write(part, raw, now)  # held by apply once committed
        return ErrorCode.none

    async def _write(self, part: Partition, raw: bytes, now: int) -> None:
        """Make one batch durable: a Raft proposal answered once committed
        (NotCoordinatorError when leadership is lost first)."""
        await write_committed(self.cluster, part, memoryview(raw), now)

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append records for one group; they reach the store once committed."""
        part = self._offsets_partition(group_id)
        now = now_ms()
        raw = encode_batch([(k, v, (), now) for k, v in records])
        await self._write(part, raw, now)  # in the store once committed (apply)

    async def commit_offsets(self, group_id: str,
                             offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        if offsets:
            await self._append(group_id, [(offset_key(group_id, t, p), offset_value(c))
                                          for (t, p), c in offsets.items()])

    async def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, t, p), None) for t, p in partitions]
        if records:
            await self._append(group_id, records)

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Delete a group this broker coordinates, of any kind, if it has no
        members (DeleteGroups): a KIP-848 group's or share group's own record
        (``hosted``) and share-partition state, then tombstones for the
        classic record and the committed offsets."""
        kind = self._hosting(group_id)
        if kind is not None:
            error = await kind.delete(group_id)
            if error == ErrorCode.none:  # the Empty classic placeholder of its offsets too
                self.coordinator.delete_group(group_id, now_ms(), keep_dead=True)
        else:
            error = self.coordinator.delete_group(group_id, now_ms(), keep_dead=True)
        if error != ErrorCode.none:
            return error
        # Dead until the tombstones are in the log: a join or commit meanwhile is
        # refused (retriable), not taken by a group the tombstones then wipe
        self.coordinator.changed.discard(group_id)  # tombstoned below, not written
        try:
            await self.delete_group_records(group_id)
        except NotCoordinatorError as e:
            error = e.code
        finally:
            self.coordinator.forget_dead(group_id)
        return error

    def _hosting(self, group_id: str) -> HostedKind | None:
        """The service hosting ``group_id`` if it is a KIP-848 or share group."""
        return next((h for h in self.hosted if h.group(group_id) is not None), None)

    async def delete_empty_groups(self) -> None:
        """After the offsets' expiry, as Kafka's coordinator does every
        ``offsets.retention.check.interval.ms``: delete each group this broker
        coordinates that has no members, no committed offsets and no
        transactional ones pending — but a share group (its state is not
        offsets, and Kafka keeps those) — and, a classic group, Empty since
        the sweep before at least. The ids of groups used once and left do
        not pile up for ever."""
        ids = dict.fromkeys(self.coordinator.groups)
        for hosted in self.hosted:
            ids.update(dict.fromkeys(hosted.stored_ids()))
        in_txn = {key[0] for held in self.pending.values() for key in held}
        # a classic group Empty since the last sweep at least: not one a member is
        # joining (KIP-394: Empty between its two JoinGroups)
        settled = now_ms() - int(self.state.config["offsets.retention.check.interval.ms"])
        for n, group_id in enumerate(ids, 1):
            if n % SWEEP_SLICE == 0:
                await trio.lowlevel.checkpoint()
            if self.coordinator_error(group_id) is not None or self.store.committed(group_id) \
                    or group_id in in_txn:
                continue
            kind = self._hosting(group_id)
            classic = self.coordinator.groups.get(group_id)
            if kind is not None:
                if not kind.expires or kind.has_members(group_id):
                    continue
            elif classic is None or not classic.is_(GroupState.EMPTY) \
                    or classic.state_since_ms > settled:
                continue
            error = await self.delete_group(group_id)
            if error == ErrorCode.none:
                log.info("deleted group %s: empty, and no committed offsets", group_id)

    async def delete_group_records(self, group_id: str) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, t, p), None) for t, p in self.store.committed(group_id)]
        records.append((group_key(group_id), None))
        await self._append(group_id, records)

    # -- parked requests ------------------------------------------------------
    def new_token(self) -> tuple[int, _Waiter]:
        self._next_token += 1
        waiter = _Waiter(trio.Event())
        self._waiters[self._next_token] = waiter
        return self._next_token, waiter

    async def wait(self, token: int, waiter: _Waiter, replies: list[Reply],
                   group_id: str | None = None) -> Any:
        try:
            await self.deliver(replies, group_id)
            await waiter.event.wait()
            return waiter.result
        finally:
            self._waiters.pop(token, None)

    async def deliver(self, replies: list[Reply], group_id: str | None = None) -> None:
        """Persist changed groups, then release the waiting requests. As in
        Kafka, what a group's record holds (a generation's assignments, a
        static member's new id) is answered only once written: when the write
        fails (a new leader took over, or it timed out) the joins and syncs
        answered here get that error instead, and a group this broker still
        coordinates rebalances (``GroupCoordinator.write_failed``). Replies
        about ``group_id`` read from its state (a SyncGroup of a Stable
        group) wait for a write of it another request started, and share its
        fate. Answered anyway, a SyncGroup handed out an assignment the next
        coordinator never saw, and the same generation was formed again there
        with other owners (broker simulator, seeds 13 and 75)."""
        refused: ErrorCode | None = None
        for changed in self.coordinator.pop_group_changes():
            if (code := await self._write_group(changed)) is not None:
                refused = code
                replies = replies + self.coordinator.write_failed(changed, now_ms())
        pending = self._group_writes.get(group_id) if group_id is not None else None
        if refused is None and pending is not None:
            await pending.done.wait()
            refused = pending.error
        if refused is not None:  # one group's replies at a time, but for the ticker's
            replies = [Reply(r.token, _refused(r.result, refused)) for r in replies]
        self._release(replies)
        self._wake.set()

    async def _write_group(self, group_id: str) -> ErrorCode | None:
        """Write the record of ``group_id`` as it is now; the error if it failed."""
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return None
        write = self._group_writes[group_id] = _GroupWrite(trio.Event())
        try:
            await self._append(group_id, [(group_key(group_id), group_value(group))])
        except NotCoordinatorError as e:
            log.info("group %s metadata not written: %s", group_id, e)
            write.error = e.code
        finally:
            write.done.set()
            if self._group_writes.get(group_id) is write:
                del self._group_writes[group_id]
        return write.error

    def _release(self, replies: list[Reply]) -> None:
        for reply in replies:
            waiter = self._waiters.get(reply.token)
            if waiter is not None:
                waiter.result = reply.result
                waiter.event.set()

    @staticmethod
    def new_member_suffix() -> str:
        return str(uuid.uuid4())

    # -- deleted topics ---------------------------------------------------------
    def topic_deleted(self, topic: str) -> None:
        """``topic`` was deleted: the groups coordinated here lose their
        committed offsets of it, as in Kafka (a topic created again under the
        name starts with none). Tombstones are written by ``run`` (every
        replica applies them); OffsetFetch meanwhile answers no offset for a
        topic the metadata does not hold."""
        for group_id, gone in self.store.committed_of_topic(topic).items():
            if self.coordinator_error(group_id) is None:
                self._doomed.setdefault(group_id, {}).update(gone)
        if self._doomed:
            self._wake.set()

    async def _delete_doomed(self) -> None:
        """Tombstones for the offsets ``topic_deleted`` found, but not for one
        committed again since (to a topic created again under the name)."""
        doomed, self._doomed = self._doomed, {}
        for group_id, offsets in doomed.items():
            committed = self.store.committed(group_id)
            tps = [tp for tp, c in offsets.items() if committed.get(tp) is c]
            if not tps or self.coordinator_error(group_id) is not None:
                continue
            log.info("deleting %d committed offsets of group %s: their topic was deleted",
                     len(tps), group_id)
            try:
                await self.delete_offsets(group_id, tps)
            except NotCoordinatorError:
                pass

    def _of_deleted_topics(self, group_id: str) -> list[tuple[str, int]]:
        """The group's committed offsets whose topic the caught-up metadata
        does not hold (deleted while no coordinator here saw it go)."""
        if not self.cluster.caught_up:
            return []
        topics = self.state.topics
        return [tp for tp in self.store.committed(group_id) if tp[0] not in topics]

    # -- time -----------------------------------------------------------------
    async def run(self) -> None:
        last_sweep = now_ms()  # the first a check interval after start, as Kafka's
        while True:
            deadline = self.coordinator.next_deadline_ms()
            now = now_ms()
            wait_s = TICK_MAX_S if deadline is None else min(max((deadline - now) / 1000, 0),
                                                             TICK_MAX_S)
            self._wake = trio.Event()
            with trio.move_on_after(wait_s):
                await self._wake.wait()
            now = now_ms()
            if self._doomed:
                await self._delete_doomed()
            await self.deliver(self.coordinator.tick(now))
            if now - last_sweep >= int(self.state.config["offsets.retention.check.interval.ms"]):
                last_sweep = now
                await self.expire_offsets(now)
                await self.delete_empty_groups()

    async def expire_offsets(self, now: int) -> None:
        retention_ms = int(self.state.config["offsets.retention.minutes"]) * 60_000
        swept = 0
        for group_id in list(self.store.offsets):
            swept += len(self.store.committed(group_id))
            if swept >= SWEEP_SLICE:  # many groups: the sweep yields the loop in slices
                swept = 0
                await trio.lowlevel.checkpoint()
            group = self.coordinator.groups.get(group_id)
            expired = self.store.expired(group, group_id, now, retention_ms)
            seen = set(expired)
            expired += [tp for tp in self._of_deleted_topics(group_id) if tp not in seen]
            if expired and self.coordinator_error(group_id) is None:
                log.info("expiring %d offsets of group %s", len(expired), group_id)
                try:
                    await self.delete_offsets(group_id, expired)
                except NotCoordinatorError:
                    pass
