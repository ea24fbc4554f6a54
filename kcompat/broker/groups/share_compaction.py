"""Snapshots and prefix deletion of ``__share_group_state``, at its leaders (KIP-932).

Theory of operation
-------------------
``group.share_state`` says when a log prefix is redundant: a replay from
``ShareStateLog.needed_offset`` (the oldest key's last ``snapshot``, or the
claim that created it) rebuilds exactly the state of a replay of the whole
history. This module, run by the leader of each state partition once its
machine serves, keeps that offset moving and drops what lies below it, so the
topic's disk use and a restart's replay follow the live keys, not history —
as Kafka's share coordinator does with its ShareSnapshot records and its
"last redundant offset".

**Snapshots.** A key changed ``share.coordinator.snapshot.update.records.per.
snapshot`` times since its ``since`` is *due* (the machine wakes this task);
every ``share.coordinator.state.topic.prune.interval.ms`` the keys whose
``since`` is older than the previous turn's applied offset — not snapshotted
for a whole interval, *cold* — are snapshotted too, when the log above the
cut is more than twice the live keys (and ``COLD_SLACK_RECORDS``): an idle
partition writes nothing. A ``snapshot`` record must equal what its key is
where it lands, at the log end, while the machine has applied only up to
``Group.applied``: records of the key may be in flight in between (a hot key
nearly always has one). So the leader folds them — a scratch
``ShareStateLog`` holding copies of those keys' entries applies the
unapplied tail of the log — and snapshots the result, then appends without
an await in between; ``check`` (the topic's append check, just before the
proposal) refuses the batch if a record of one of its keys was appended
since the fold. The tail is in the leader's log before the snapshot, so
whatever commits the snapshot commits it too, and a leader change that
truncates one truncates both. Batches hold at most ``SNAPSHOT_BATCH_KEYS``
keys or ``SNAPSHOT_BATCH_BYTES``, one in flight per partition, so a step of
the loop encodes a bounded amount however many keys are due.

**Pruning.** Each interval the leader deletes the prefix below
``needed_offset`` — never past what its machine applied, so never past
what is committed — with ``delete_records_before``, and tells the cluster
(``log_starts_moved``), as DeleteRecords does: followers drop the same
prefix once their high watermark is past it, and a follower whose machine
had not applied that far gets ``restore`` and replays from the new log
start. Finding the offset costs one look at the oldest entry.

**Deleted topics.** At each prune, the keys whose topic the caught-up
metadata no longer holds (or holds under another id than the key's claim
named) are noted; those noted at two prunes in a row get a ``delete`` naming
that id (``_sweep_gone``), so a deleted topic's share state leaves the log
within two intervals instead of being snapshotted forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.replication.storage import now_ms
from kcompat.group.share_state import (
    SHARE_STATE_TOPIC,
    ShareKey,
    ShareStateError,
    ShareStateLog,
    decode_key,
    delete_value,
    encode_key,
)
from kcompat.wire.records import decode_batch, encode_batch

if TYPE_CHECKING:
    from kcompat.broker.replication.group import Group
    from kcompat.broker.replication.peer_calls import PeerCalls
    from kcompat.broker.replication.runtime import ClusterRuntime

log = logging.getLogger("kcompat.shares")

SNAPSHOT_BATCH_KEYS = 128  # a batch costs ~5 ms to build and to apply
SNAPSHOT_BATCH_BYTES = 128 * 1024
BATCHES_PER_TURN = 8  # of one partition before the others get theirs
COLD_SLACK_RECORDS = 100
SWEEP_SLICE = 10_000  # keys looked at between two yields of the deleted-topic sweep
WRITE_TIMEOUT_S = 5.0

# (offset, key, raw key, raw value) of a record in the log's unapplied tail
TailRecord = tuple[int, ShareKey, bytes | None, bytes | None]


class ShareCompaction:
    def __init__(self, cluster: ClusterRuntime, calls: PeerCalls,
                 log_of: Callable[[int], ShareStateLog], prune_interval_ms: int) -> None:
        self.cluster = cluster
        self.calls = calls
        self.log_of = log_of
        self.prune_interval_s = prune_interval_ms / 1000
        self.leading: set[int] = set()
        self._wake = trio.Event()
        self._next_prune: dict[int, float] = {}
        self._marks: dict[int, int] = {}  # the applied offset at the previous prune
        self._cold: dict[int, int] = {}  # snapshot the keys whose since is below this
        self._folded: dict[int, tuple[int, frozenset[ShareKey]]] = {}  # see ``check``
        self._gone: dict[int, dict[ShareKey, str]] = {}  # see ``_sweep_gone``

    def on_role(self, index: int, leading: bool) -> None:
        self._next_prune.pop(index, None)
        self._gone.pop(index, None)
        self._marks.pop(index, None)
        self._cold.pop(index, None)
        if leading:
            self.leading.add(index)
            self.wake()
        else:
            self.leading.discard(index)

    def restore(self, index: int) -> None:
        self._marks.pop(index, None)
        self._cold.pop(index, None)

    def wake(self) -> None:
        self._wake.set()

    def _group(self, index: int) -> Group | None:
        if self.cluster.serving_machine(SHARE_STATE_TOPIC, index) is not None:
            return None
        return self.cluster.group_of(SHARE_STATE_TOPIC, index)

    # -- the append check --------------------------------------------------------------------

    def check(self, index: int, keys: set[ShareKey]) -> ErrorCode:
        """Just before a batch with snapshots of ``keys`` is proposed: refused
        unless this task folded them up to a log end past which no record of
        theirs was appended."""
        folded = self._folded.get(index)
        group = self.cluster.group_of(SHARE_STATE_TOPIC, index)
        if folded is None or group is None or not keys <= folded[1]:
            return ErrorCode.fenced_state_epoch
        end = group.storage.plog.log_end_offset
        if any(key in keys for _o, key, _k, _v in _tail(group, folded[0], end)):
            return ErrorCode.fenced_state_epoch
        return ErrorCode.none

    # -- the task -----------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self._wake = trio.Event()
            wait_s = self.prune_interval_s
            for index in sorted(self.leading):
                wait_s = min(wait_s, await self._turn(index))
            if wait_s > 0:
                with trio.move_on_after(wait_s):
                    await self._wake.wait()
            else:
                await trio.sleep(0)

    async def _turn(self, index: int) -> float:
        """Prune if it is time, then write snapshots: how long until the next
        turn is due (0: snapshots are left to write)."""
        group = self._group(index)
        if group is None:
            return self.prune_interval_s  # woken by ``on_role`` when it serves
        now = trio.current_time()
        due_at = self._next_prune.setdefault(index, now + self.prune_interval_s)
        if now >= due_at:
            due_at = self._next_prune[index] = now + self.prune_interval_s
            self._prune(index, group)
            await self._sweep_gone(index)
        for _ in range(BATCHES_PER_TURN):
            found = self._group(index)
            if found is None or not await self._write_snapshots(index, found):
                return max(due_at - trio.current_time(), 0.001)
        return 0.0

    def _prune(self, index: int, group: Group) -> None:
        slog = self.log_of(index)
        plog = group.storage.plog
        applied = min(group.applied, group.hw, plog.log_end_offset)
        cut = slog.needed_offset(applied)
        start = plog.log_start_offset
        if cut > start:
            plog.delete_records_before(cut, now_ms())
            self.cluster.log_starts_moved(SHARE_STATE_TOPIC, index)
            log.debug("%s-%d: dropped the records below %d (%d keys live)", SHARE_STATE_TOPIC,
                      index, cut, slog.entry_count)
        mark = self._marks.get(index)
        self._marks[index] = applied
        if mark is not None and applied - max(cut, start) > (
                2 * slog.entry_count + COLD_SLACK_RECORDS):
            self._cold[index] = mark

    async def _sweep_gone(self, index: int) -> None:
        """Delete the state of keys whose topic is gone: not in the caught-up
        metadata, or there under another topic id than the key's latest claim
        named (deleted, then re-created and never claimed since). Seen gone at
        two prune turns in a row, so a key claimed for a topic this broker's
        metadata has not applied yet is not taken for one. The ``delete``
        names the id seen, so a claim for a newer topic of the name, landing
        first, keeps its key."""
        if not self.cluster.caught_up:
            return
        slog = self.log_of(index)
        topics = self.cluster.state.topics
        gone: dict[ShareKey, str] = {}
        for n, key in enumerate(slog.entry_keys()):
            if n % SWEEP_SLICE == SWEEP_SLICE - 1:
                await trio.lowlevel.checkpoint()
            tid, meta = slog.topic_of(key), topics.get(key[1])
            if meta is None or (tid and tid != str(meta.topic_id)):
                gone[key] = tid
        before = self._gone.get(index, {})
        doomed = sorted(k for k, tid in gone.items() if before.get(k) == tid)
        self._gone[index] = gone
        for at in range(0, len(doomed), SNAPSHOT_BATCH_KEYS):
            keys = doomed[at:at + SNAPSHOT_BATCH_KEYS]
            batch = encode_batch([(encode_key(k), delete_value(gone[k] or None), (), now_ms())
                                  for k in keys])
            code, _offset = await self.calls.append_locally(SHARE_STATE_TOPIC, index, batch,
                                                            WRITE_TIMEOUT_S)
            if code != ErrorCode.none:
                return  # the next turn finds them again
            log.info("%s-%d: deleted the share state of %d partition(s) of deleted topics",
                     SHARE_STATE_TOPIC, index, len(keys))

    async def _write_snapshots(self, index: int, group: Group) -> bool:
        """One batch of snapshots of due or cold keys; False when none is left."""
        slog = self.log_of(index)
        keys = self._candidates(index, slog)
        if not keys:
            return False
        plog = group.storage.plog
        end = plog.log_end_offset
        tail = list(_tail(group, max(group.applied, plog.log_start_offset), end))
        values = snapshot_records(slog, keys, tail)
        if not values:
            return False
        now = now_ms()
        batch = encode_batch([(encode_key(k), v, (), now) for k, v in values])
        self._folded[index] = (end, frozenset(k for k, _v in values))
        try:
            code, _offset = await self.calls.append_locally(SHARE_STATE_TOPIC, index, batch,
                                                            WRITE_TIMEOUT_S)
        finally:
            self._folded.pop(index, None)
        if code != ErrorCode.none:
            log.debug("%s-%d: %d snapshots not written (%s); later", SHARE_STATE_TOPIC, index,
                      len(values), code.name)
            return False
        return True

    def _candidates(self, index: int, slog: ShareStateLog) -> list[ShareKey]:
        """Due keys first, then cold ones (``_cold`` is done once none is left)."""
        keys: list[ShareKey] = []
        for key in slog.due():
            keys.append(key)
            if len(keys) >= SNAPSHOT_BATCH_KEYS:
                return keys
        mark = self._cold.get(index)
        if mark is not None:
            chosen = set(keys)
            for key in slog.pinning(mark):
                if key not in chosen:
                    keys.append(key)
                    if len(keys) >= SNAPSHOT_BATCH_KEYS:
                        return keys
            if len(keys) < SNAPSHOT_BATCH_KEYS:
                del self._cold[index]
        return keys


def _tail(group: Group, start: int, end: int) -> list[TailRecord]:
    """The share records of ``group``'s log in [start, end) (junk left out)."""
    found: list[TailRecord] = []
    if start >= end:
        return found
    for view, header in group.storage.plog.batches(start, end):
        if header.is_control or not header.records_count:
            continue
        for record in decode_batch(view):
            if start <= record.offset < end:
                try:
                    found.append((record.offset, decode_key(record.key), record.key,
                                  record.value))
                except ShareStateError:
                    continue
    return found


def snapshot_records(slog: ShareStateLog, keys: list[ShareKey], tail: list[TailRecord]
                     ) -> list[tuple[ShareKey, bytes]]:
    """The snapshot record of each key as it will be after ``tail``: keys
    without a record there as applied; the others folded through it in a
    scratch log (a key deleted there gets none)."""
    moving = {key for _o, key, _k, _v in tail}.intersection(keys)
    scratch = ShareStateLog()
    out: list[tuple[ShareKey, bytes]] = []
    size = 0
    for key in keys:
        value = slog.snapshot_value(key)
        if value is None:
            continue
        if key in moving:
            scratch.apply(encode_key(key), value, 0)
            continue
        out.append((key, value))
        size += len(value)
        if size >= SNAPSHOT_BATCH_BYTES:
            return out
    if moving:
        for offset, key, raw_key, raw_value in tail:
            if key in moving:
                try:
                    scratch.apply(raw_key, raw_value, offset)
                except ShareStateError:
                    continue
        out.extend((key, value) for key in sorted(moving)
                   if (value := scratch.snapshot_value(key)) is not None)
    return out
