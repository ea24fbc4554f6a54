"""Share-partitions at their partition's leader, and their durable state (KIP-932).

Theory of operation
-------------------
**Where the state lives.** As in Kafka, the leader of a topic-partition owns the
in-flight state of every share group reading it: one ``SharePartition``
(``group.share_partition``, pure) per (share group, topic, partition) — a *share
key* — built on first use. Its durable form is kept in ``__share_group_state``
(created on first use like the coordinators' topics), partition
``javaHash("group:topic:partition") % N``, whose replicas all fold its records
into a ``ShareStateLog`` (``group.share_state``): this service is that topic's
replicated state machine on the host of issue 12.

**Taking a key over.** Before a leader serves a share key it *claims* it: a
claim record with a fresh nonce goes to the state partition's leader (here,
or a ``ShareClaimRequest`` to another broker), which answers, once the claim
is applied, with the key's new generation and the state it holds. The leader
rebuilds the machine from that state (or starts one at
``share.auto.offset.reset``) and writes with that generation from then on; a
deposed leader's late writes carry an older one and are ignored — and
answered FENCED_STATE_EPOCH: before they are proposed when the state leader
knows of the newer claim (``check_write``), else once committed, as the
record did not count (``check_committed``: a claim a former state leader
proposed can sit uncommitted in the log, unseen by the first check). A write
is answered success only if it counted. A leader claims again whenever its
Raft term of the data partition changed (it lost and regained the lead) or a
write failed.

**Durable before answered.** Every ShareFetch and ShareAcknowledge changes the
machines it touches in memory, then has each one's changes written to its
state partition and answers only once those writes are committed — so a
delivery count a consumer saw is never lost, and an acknowledgement that was
answered is never undone by a failover. The writes of one state partition go
out one batch at a time, in order, one record per key per batch however many
requests changed it meanwhile (``share_writes``).
A write that fails drops the machine: the next request claims the key again
and continues from the last committed state (records acquired in between come
back AVAILABLE with their delivery counted — at least once).

**Bounded state.** The state log does not grow with history: the leader of
each state partition writes a ``snapshot`` of a key every
``share.coordinator.snapshot.update.records.per.snapshot`` changes (and of
keys idle for a prune interval while the log is large), and drops the
prefix no key needs any more every
``share.coordinator.state.topic.prune.interval.ms`` (``share_compaction``).
Why a replay from there gives the same state is in ``group.share_state``:
a claim's generation is its own offset plus one, a delete removes the
entry, and a snapshot copies a key's whole entry. So ``restore`` — this
replica's log starts past what it applied (after a restart, or as a
follower handed the leader's log start) — starts the machine empty and the
records from the log start rebuild it. A key's generation is fenced against
deposed holders by that offset: a later claim always has a larger one, and
a deleted key has none, so no older holder's write matches.

**Rooms.** Reading the log for a machine and serving the acquired batches
is ``share_reads``; copying dead letters to a group's DLQ topic,
``share_dead_letters``; the write queues of the state partitions,
``share_writes``; the machine itself, ``group.share_partition``.

**Time.** ``run`` ticks the machines at their next lock expiry or backoff end,
writes what changed and wakes parked fetches; a fetch that acquired nothing
waits (``max_wait``) for new data or such a wake.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Counter

from kcompat.broker.config.group_config import duration_ms
from kcompat.broker.controller.admin import auto_create
from kcompat.broker.controller.internal_topics import partition_for
from kcompat.broker.groups.share_compaction import ShareCompaction
from kcompat.broker.groups.share_dead_letters import ShareDeadLetters
from kcompat.broker.groups.share_metrics import ShareCollector
from kcompat.broker.groups.share_reads import ColdBatch, ShareReads
from kcompat.broker.groups.share_sessions import ShareSessions
from kcompat.broker.groups.share_writes import Held as Held  # handlers import it from here
from kcompat.broker.groups.share_writes import ShareWriter
from kcompat.broker.replication import codec
from kcompat.broker.replication.storage import now_ms
from kcompat.group.share_partition import (
    TERMINAL,
    AckBatch,
    AcquiredRecords,
    ShareConfig,
    SharePartition,
    ShareState,
    start_offset_for_reset,
)
from kcompat.group.share_state import (
    SHARE_STATE_TOPIC,
    ShareKey,
    ShareStateError,
    ShareStateLog,
    claim_value,
    delete_value,
    encode_key,
    read_record,
    share_key_string,
    state_from_json,
    state_to_json,
)
from kcompat.wire import batch as wbatch
from kcompat.wire.records import decode_batch, encode_batch

if TYPE_CHECKING:
    from kcompat.broker.controller.quorum import Controller
    from kcompat.broker.replication.peer_calls import PeerCalls
    from kcompat.broker.replication.runtime import ClusterRuntime
    from kcompat.broker.storage.partition import Partition
    from kcompat.broker.storage.state import BrokerState

log = logging.getLogger("kcompat.shares")

WRITE_TIMEOUT_S = 5.0
CLAIM_TIMEOUT_S = 5.0
CLAIM_RETRY_S = 0.2
# what a share-partition whose state cannot be read or written answers: the
# clients' ShareFetch handling retries it after a metadata refresh
RETRIABLE = ErrorCode.not_leader_or_follower
CREATE_WAIT_S = 5.0
IDLE_WAKE_S = 1.0
def claim_nonce(topic_id: Any = None) -> str:
    """A fresh claim nonce; with the data topic's id after an ``@``: a claim
    naming another id than the key's previous claim (the topic was deleted and
    re-created under its name) starts the key with no state (``share_state``)."""
    nonce = uuid.uuid4().hex
    return nonce if topic_id is None else f"{nonce}@{topic_id}"


def _records_of(batch: memoryview) -> Iterator[tuple[ShareKey, str, int | None, int]]:
    """(key, kind, generation, sequence number) of each record of a batch
    for the state topic — generation None but for a ``state`` record — junk
    left out (apply skips it); BatchError if the batch cannot be read."""
    for record in decode_batch(batch):
        try:
            key, value = read_record(record.key, record.value)
        except ShareStateError:
            continue
        op, generation, seq = str(value["op"]), value.get("gen"), value.get("seq")
        if op == "state" and isinstance(generation, int) and isinstance(seq, int):
            yield key, op, generation, seq
        else:
            yield key, op, None, 0


class ShareError(Exception):
    """A share key cannot be served now (its partition's error code)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class NotLoaded(ShareError):
    """An acknowledgement for a share-partition this broker has not loaded:
    no ShareFetch claimed it here while it led the partition, or its topic
    was re-created since. Kafka's broker acknowledges only the
    share-partitions in its cache, which a ShareFetch fills, and answers the
    others UNKNOWN_TOPIC_OR_PARTITION (``SharePartitionManager.acknowledge``)."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.unknown_topic_or_partition,
                         "The share-partition is not loaded on this broker: fetch it first.")


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """A share group's configs as the partition side uses them."""

    config: ShareConfig = field(default_factory=ShareConfig)
    auto_offset_reset: str = "latest"  # share.auto.offset.reset
    read_committed: bool = False  # share.isolation.level
    dlq_topic: str = ""  # errors.deadletterqueue.topic.name (KIP-1191)
    dlq_copy_record: bool = False  # errors.deadletterqueue.copy.record.enable
    renew_enabled: bool = True  # share.renew.acknowledge.enable (KIP-1222)


class ShareService:
    def __init__(self, state: BrokerState, cluster: ClusterRuntime, calls: PeerCalls,
                 controller: Controller) -> None:
        self.state = state
        self.cluster = cluster
        self.calls = calls
        self.controller = controller
        self.logs: dict[int, ShareStateLog] = {}
        self.held: dict[ShareKey, Held] = {}
        self.reads = ShareReads(state.views)
        self._loading: dict[ShareKey, trio.Event] = {}
        self.writer = ShareWriter(self._append_state, cluster.spawn, now_ms)
        self.sessions = ShareSessions(state.config["group.share.max.share.sessions"])
        self.changed = trio.Event()  # a lock expired or records were released
        self.dead_letters = ShareDeadLetters(state, calls, controller)
        self._timer = trio.Event()
        # a share group's configs (the group side replaces it)
        self.settings_of: Callable[[str], ShareSettings] = lambda _group: ShareSettings()
        self._claiming: dict[tuple[int, ShareKey], int] = {}  # claims proposed here
        self._updates_per_snapshot = int(
            state.config["share.coordinator.snapshot.update.records.per.snapshot"])
        self.compaction = ShareCompaction(
            cluster, calls, self._log,
            int(state.config["share.coordinator.state.topic.prune.interval.ms"]))
        cluster.machines[SHARE_STATE_TOPIC] = self  # fed by the replication host
        cluster.append_checks[SHARE_STATE_TOPIC] = self.check_write
        cluster.commit_checks[SHARE_STATE_TOPIC] = self.check_committed
        cluster.inbound[codec.ShareClaimRequest] = (
            lambda src, m: cluster.spawn(self._serve_claim, src, m))

    # -- the replicated state machine over __share_group_state ----------------------------

    def apply(self, index: int, batch: memoryview, header: wbatch.BatchHeader) -> None:
        if header.is_control or not header.records_count:
            return
        slog = self._log(index)
        for record in decode_batch(batch):
            try:
                key = slog.apply(record.key, record.value, record.offset)
            except ShareStateError as e:
                log.warning("skipping a record of %s-%d at %d: %s", SHARE_STATE_TOPIC, index,
                            record.offset, e)
                continue
            held = self.held.get(key)
            if held is not None and slog.generation(key) != held.generation:
                del self.held[key]  # fenced (deleted, or claimed by another leader)
        if slog.has_due and index in self.compaction.leading:
            self.compaction.wake()

    def check_write(self, index: int, batch: memoryview) -> ErrorCode:
        """At the state partition's leader, before a batch is proposed:
        FENCED_STATE_EPOCH (Kafka's answer to a deposed share-partition
        leader) when a state record is of an older generation, or its key is
        being claimed here — so a deposed holder learns it at once and does
        not answer its consumers as if its write counted. A batch of
        snapshots is the compaction's to check (``ShareCompaction.check``)."""
        slog = self._log(index)
        snapshots: set[ShareKey] = set()
        try:
            for key, op, generation, _seq in _records_of(batch):
                if op == "snapshot":
                    snapshots.add(key)
                elif generation is not None and (
                        generation != slog.generation(key) or (index, key) in self._claiming):
                    return ErrorCode.fenced_state_epoch
        except wbatch.BatchError:
            return ErrorCode.corrupt_message
        return self.compaction.check(index, snapshots) if snapshots else ErrorCode.none

    def check_committed(self, index: int, batch: memoryview) -> ErrorCode:
        """At the state partition's leader, once a batch is committed and
        applied: FENCED_STATE_EPOCH when one of its state records did not
        count (``ShareStateLog.counted``). ``check_write`` sees the claims
        applied or being made here, not one a former leader of the state
        partition proposed that is still uncommitted in the log: the write
        passes, lands after it and is ignored — and its holder must hear so,
        not answer its consumers as if it counted (their acknowledgements
        would be undone by the claim's holder, their records delivered
        again)."""
        slog = self._log(index)
        for key, _op, generation, seq in _records_of(batch):
            if generation is not None and not slog.counted(key, generation, seq):
                log.info("a state record of %s at generation %d did not count: fenced",
                         key, generation)
                return ErrorCode.fenced_state_epoch
        return ErrorCode.none

    def on_role(self, index: int, leading: bool) -> None:
        """Nothing to take over (a share key is claimed by its data
        partition's leader when it serves it) but the compaction."""
        self.compaction.on_role(index, leading)

    def restore(self, index: int, start: int) -> None:
        """The log now starts at ``start``, past what was applied (this
        replica restarted, or is a follower handed the leader's log start):
        start empty; the records from there rebuild the state
        (``group.share_state``)."""
        had = self.logs.get(index)
        log.log(logging.INFO if had is not None and had.entry_count else logging.DEBUG,
                "rebuilding the share state of %s-%d from offset %d", SHARE_STATE_TOPIC, index,
                start)
        self.logs[index] = ShareStateLog(self._updates_per_snapshot)
        self.compaction.restore(index)

    def _log(self, index: int) -> ShareStateLog:
        found = self.logs.get(index)
        if found is None:
            found = self.logs[index] = ShareStateLog(self._updates_per_snapshot)
        return found

    def state_index(self, key: ShareKey) -> int:
        meta = self.state.topics[SHARE_STATE_TOPIC]
        return partition_for(share_key_string(key), meta.partitions)

    # -- claiming a key ---------------------------------------------------------------------

    async def held_machine(self, key: ShareKey, claim: bool = True) -> Held:
        """The machine of ``key``, claimed (again) if this broker does not hold
        it in the data partition's current term; ShareError otherwise.
        ``claim=False`` (acknowledgements): only one this broker loaded, for
        the topic as it is now (or is claiming), else ``NotLoaded``; one
        loaded in an earlier term here is claimed again, as before."""
        topic, index = key[1], key[2]
        part, code = self.cluster.led_partition(topic, index)
        if part is None or code != ErrorCode.none:
            raise ShareError(code)
        term = self._term(topic, index)
        meta = self.state.topics.get(topic)
        topic_id = None if meta is None else meta.topic_id
        while True:
            held = self.held.get(key)
            if held is not None and held.term == term and held.topic_id == topic_id:
                return held
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        if not claim and (held is None or held.topic_id != topic_id):
            raise NotLoaded  # (one of an older term here, a re-election: claimed again)
        self._loading[key] = done = trio.Event()
        try:
            held = await self._claim_retrying(key, part, term)
            held.topic_id = topic_id
            self.held[key] = held
            return held
        finally:
            del self._loading[key]
            done.set()

    async def _claim_retrying(self, key: ShareKey, part: Partition, term: int) -> Held:
        """Claim, retried for a while (the state topic being created, its
        partition electing a leader); then NOT_LEADER_OR_FOLLOWER, which share
        consumers retry after a metadata refresh (librdkafka and the Java
        client stop on COORDINATOR_NOT_AVAILABLE in a ShareFetch)."""
        deadline = trio.current_time() + CLAIM_TIMEOUT_S
        while True:
            try:
                return await self._claim(key, part, term)
            except ShareError as e:
                if trio.current_time() + CLAIM_RETRY_S >= deadline:
                    raise ShareError(RETRIABLE, e.message) from None
                log.debug("claiming %s: %s; retrying", key, e.message)
            await trio.sleep(CLAIM_RETRY_S)
            if not self.cluster.leads(key[1], key[2]) or self._term(key[1], key[2]) != term:
                raise ShareError(ErrorCode.not_leader_or_follower)

    def _term(self, topic: str, index: int) -> int:
        group = self.cluster.group_of(topic, index)
        return -1 if group is None else group.raft.term

    async def _claim(self, key: ShareKey, part: Partition, term: int) -> Held:
        index = await self._state_partition(key)
        meta = self.state.topics.get(key[1])
        generation, raw = await self.at_state_leader(
            index, key, claim_nonce(None if meta is None else meta.topic_id))
        settings = self.settings_of(key[0])
        config = settings.config
        if raw is None:
            strategy = settings.auto_offset_reset
            start = self._start_offset(part, strategy)
            machine = SharePartition(start, config)
            held = Held(key, machine, generation, term, index)
            if await self.write([(held, True)], initial=True):
                raise ShareError(ErrorCode.coordinator_not_available,
                                 "the share-partition state could not be written; retry")
            log.info("share group %s starts %s-%d at offset %d (%s)", key[0], key[1], key[2],
                     start, strategy)
            return held
        machine = SharePartition.restore(state_from_json(raw), config)
        machine.advance_log_start(part.log.log_start_offset)
        return Held(key, machine, generation, term, index)

    async def _state_partition(self, key: ShareKey) -> int:
        """The state partition of ``key`` (the state topic created if need be)."""
        if SHARE_STATE_TOPIC not in self.state.topics:
            auto_create(self.controller, SHARE_STATE_TOPIC)
            await self.cluster.wait_leaders(SHARE_STATE_TOPIC, CREATE_WAIT_S)
            if SHARE_STATE_TOPIC not in self.state.topics:
                raise ShareError(ErrorCode.coordinator_not_available,
                                 f"{SHARE_STATE_TOPIC} is being created; retry")
        return self.state_index(key)

    async def at_state_leader(self, index: int, key: ShareKey, nonce: str
                              ) -> tuple[int, dict[str, Any] | None]:
        """Claim ``key`` with ``nonce`` at its state partition's leader (here
        or remote), or only read it (``nonce`` empty): (generation, state)."""
        if self.cluster.leads(SHARE_STATE_TOPIC, index):
            code, generation, raw = await self.claim_locally(index, key, nonce)
        else:
            leader = self.cluster.partition_view(SHARE_STATE_TOPIC, index)[0]
            if leader not in self.cluster.peers:
                raise ShareError(ErrorCode.coordinator_not_available,
                                 "the share-state partition has no leader")
            slot = await self.calls.call(leader, lambda rid: codec.ShareClaimRequest(
                rid, index, key, nonce), CLAIM_TIMEOUT_S)
            code = slot[1]
            generation, raw = slot[2] if len(slot) > 2 else (0, None)
        if code != ErrorCode.none:
            raise ShareError(ErrorCode.coordinator_not_available,
                             f"the share-state partition answered {code.name}; retry")
        return generation, raw

    async def read_state(self, key: ShareKey) -> ShareState | None:
        """The committed state of ``key`` as its state partition's leader has
        applied it — None when there is none, or nothing of it settled yet
        (Kafka's start offset is unknown until then); ShareError if it cannot
        be read now."""
        if SHARE_STATE_TOPIC not in self.state.topics:
            return None
        _generation, raw = await self.at_state_leader(self.state_index(key), key, "")
        meta = self.state.topics.get(key[1])
        if raw is not None and raw.get("topic") and (
                meta is None or raw["topic"] != str(meta.topic_id)):
            return None  # the state of a deleted topic of that name
        return None if raw is None or raw.get("unsettled") else state_from_json(raw)

    def lag(self, found: ShareState, topic: str, index: int) -> int:
        """Records not yet acknowledged or archived (KIP-1226's lag): the high
        watermark less the start offset less the finished records in flight;
        -1 where no replica of the partition is here."""
        part = self.state.source_partition(topic, index)
        if part is None:
            return -1
        hw = part.high_watermark
        if found.start_offset > hw:
            return -1  # as Kafka: no lag for a start past the end
        done = sum(min(b.last_offset, hw - 1) - b.first_offset + 1 for b in found.batches
                   if b.state in TERMINAL and b.first_offset < hw)
        return max(hw - found.start_offset - done, 0)

    async def reset_state(self, key: ShareKey, start_offset: int) -> None:
        """AlterShareGroupOffsets: the key starts again at ``start_offset``
        with nothing in flight; its holder (fenced by the claim) reads that
        when it claims again. ShareError if it cannot be done now."""
        index = await self._state_partition(key)
        generation, _raw = await self.at_state_leader(index, key, uuid.uuid4().hex)
        held = Held(key, SharePartition(start_offset), generation, -1, index)
        if await self.write([(held, True)]):
            raise ShareError(ErrorCode.coordinator_not_available,
                             "the share-partition state could not be written; retry")

    async def claim_locally(self, index: int, key: ShareKey, nonce: str
                            ) -> tuple[ErrorCode, int, dict[str, Any] | None]:
        if not nonce:  # a read: what the machine applied, once it serves
            if self.cluster.serving_machine(SHARE_STATE_TOPIC, index) is not None:
                return ErrorCode.coordinator_load_in_progress, 0, None
            slog = self._log(index)
            found = slog.state(key)
            raw = None if found is None else state_to_json(found)
            if raw is not None and not slog.settled(key):
                raw["unsettled"] = True
            if raw is not None and slog.topic_of(key):
                raw["topic"] = slog.topic_of(key)  # the topic id it was claimed for
            return ErrorCode.none, slog.generation(key), raw
        batch = encode_batch([(encode_key(key), claim_value(nonce), (), now_ms())])
        claiming = (index, key)
        self._claiming[claiming] = self._claiming.get(claiming, 0) + 1
        try:
            return await self._claim_here(index, key, nonce, batch)
        finally:
            self._claiming[claiming] -= 1
            if not self._claiming[claiming]:
                del self._claiming[claiming]

    async def _claim_here(self, index: int, key: ShareKey, nonce: str, batch: bytes
                          ) -> tuple[ErrorCode, int, dict[str, Any] | None]:
        code, _offset = await self.calls.append_locally(SHARE_STATE_TOPIC, index, batch,
                                                        CLAIM_TIMEOUT_S)
        if code != ErrorCode.none:
            return code, 0, None
        # applied as it commits; wait a little if the apply lags. Never found:
        # another claim of the key came right after ours — the caller retries
        with trio.move_on_after(1.0):
            while True:
                claimed = self._log(index).claimed(key, nonce)
                if claimed is not None:
                    generation, found = claimed
                    return (ErrorCode.none, generation,
                            None if found is None else state_to_json(found))
                await trio.sleep(0.01)
        return ErrorCode.coordinator_load_in_progress, 0, None

    async def _serve_claim(self, src: int, req: codec.ShareClaimRequest) -> None:
        code, generation, raw = await self.claim_locally(req.index, req.key, req.nonce)
        self.cluster.send_internal(src, codec.ShareClaimReply(req.request_id, int(code),
                                                              generation, raw))

    def _start_offset(self, part: Partition, strategy: str) -> int:
        found = None
        if strategy.startswith("by_duration:"):
            back = duration_ms(strategy[12:])
            hit = None if back is None else part.log.offset_for_timestamp(now_ms() - back)
            found = None if hit is None else hit[0]
        return start_offset_for_reset(strategy, part.log.log_start_offset,
                                      part.high_watermark, found)

    # -- durable writes ---------------------------------------------------------------------

    async def write(self, changed: list[tuple[Held, bool]], initial: bool = False
                    ) -> set[ShareKey]:
        """Make each machine's changes (or, ``full``, its whole state) durable
        in its state partition and wait for all of them (``share_writes``);
        the keys whose write failed (dropped, to be claimed again)."""
        failed: set[ShareKey] = set()
        for held, code in await self.writer.write(changed, initial):
            failed.add(held.key)
            if self.held.get(held.key) is held:
                del self.held[held.key]
                log.info("share state of %s not written (%s): claiming it again",
                         held.key, code.name)
        return failed

    async def _append_state(self, index: int, batch: bytes) -> ErrorCode:
        code, _offset = await self.calls.append(SHARE_STATE_TOPIC, index, batch,
                                                WRITE_TIMEOUT_S)
        return code

    async def delete_state(self, keys: list[ShareKey]) -> ErrorCode:
        """Delete the share-partition state of ``keys`` (DeleteGroups)."""
        if SHARE_STATE_TOPIC not in self.state.topics:
            return ErrorCode.none
        by_index: dict[int, list[ShareKey]] = {}
        for key in keys:
            by_index.setdefault(self.state_index(key), []).append(key)
        now = now_ms()
        for index, found in sorted(by_index.items()):
            batch = encode_batch([(encode_key(k), delete_value(), (), now) for k in found])
            code, _ = await self.calls.append(SHARE_STATE_TOPIC, index, batch, WRITE_TIMEOUT_S)
            if code != ErrorCode.none:
                return code
        for key in keys:
            self.held.pop(key, None)
        return ErrorCode.none

    # -- dead letters (KIP-1191) ----------------------------------------------------------

    async def send_dead_letters(self, helds: list[Held]) -> None:
        """Copy the records the machines archived as dead letters to their
        group's DLQ topic before the archive is made durable (``share_dead_letters``)."""
        for held in helds:
            held.dead.extend(held.machine.take_dead_letters())
            if held.dead:
                settings = self.settings_of(held.key[0])
                await self.dead_letters.send(held, settings.dlq_topic, settings.dlq_copy_record)

    async def warm(self, held: Held, part: Partition, isolation_committed: bool) -> None:
        """Before an acquisition: the large batches it would look at (a
        view's, a keyed read's) are read and looked at in a worker thread."""
        cold: list[ColdBatch] = []
        self.reads.plan(held.machine, part, self.state.topics.get(held.key[1]),
                        isolation_committed, cold)
        if cold:
            await self.reads.warm(cold)

    def acquire(self, held: Held, part: Partition, member_id: str, max_records: int,
                isolation_committed: bool, max_bytes: int | None = None,
                min_one: bool = True, whole_batches: bool = False
                ) -> tuple[list[AcquiredRecords], bytes]:
        """Acquire up to ``max_records`` for the member, from the whole
        batches that ``max_bytes`` lets a fetch hand out (at least one with
        ``min_one``: Kafka's soft limit); (the ranges, their batches).
        ``whole_batches`` (batch_optimized): ``ShareReads.soft_end``."""
        machine = held.machine
        start, end, upper, flt, view = self.reads.plan(
            machine, part, self.state.topics.get(held.key[1]), isolation_committed, [])
        first = machine.next_fetch_offset(now_ms())
        fetch_end = self.reads.soft_end(part, first, max_records, isolation_committed
                                        ) if whole_batches else None
        max_records = max_records if fetch_end is None else fetch_end - first
        if max_bytes is not None:
            byte_end = self.reads.byte_end(part, first, isolation_committed, max_bytes, min_one,
                                           max_records + max(0, machine.read_offset - first))
            if byte_end is not None:
                fetch_end = byte_end if fetch_end is None else min(fetch_end, byte_end)
        if fetch_end is not None:
            end = min(end, max(fetch_end, start))
        records: Iterator[tuple[int, bytes | None]] = iter(())
        if start < end:
            records = self.reads.records_from(
                part, start, end, upper, machine.config.ordering_message_group,
                isolation_committed, flt)
        ranges = machine.acquire(member_id, max_records, now_ms(), records,
                                 end if start < end else None, fetch_end)
        if ranges:
            self._timer.set()
        return ranges, (self.reads.batches_for(part, ranges, view) if ranges else b"")

    def acknowledge(self, held: Held, member_id: str, batches: list[AckBatch]) -> ErrorCode:
        code = held.machine.acknowledge(member_id, batches, now_ms())
        if code == ErrorCode.none:
            self._wake()
            self._timer.set()  # a release may have started a redelivery backoff
        return code

    def is_held(self, key: ShareKey) -> bool:
        """``held_machine`` would answer at once (no claim to wait for)."""
        held = self.held.get(key)
        meta = self.state.topics.get(key[1])
        return held is not None and held.term == self._term(key[1], key[2]) and (
            held.topic_id == (None if meta is None else meta.topic_id))

    def claim_soon(self, key: ShareKey) -> None:
        """Claim ``key`` in the background: a fetch that has records to answer
        does not wait for it (Kafka answers with the share-partitions that
        are initialized and loads the others meanwhile)."""
        if key in self._loading:
            return

        async def claim() -> None:
            try:
                await self.held_machine(key)
            except ShareError as e:
                log.debug("claiming %s in the background: %s", key, e.message)
        self.cluster.spawn(claim)

    def release_member(self, key: ShareKey, member_id: str) -> Held | None:
        held = self.held.get(key)
        if held is None:
            return None
        if held.machine.release_member(member_id, now_ms()):
            self._wake()
        return held

    def _wake(self) -> None:
        """Parked fetches look again: records may be acquirable."""
        self.changed.set()
        self.changed = trio.Event()

    async def _expired(self, due: list[tuple[Held, bool]]) -> None:
        await self.send_dead_letters([held for held, _ in due])
        await self.write(due)

    # -- metrics ----------------------------------------------------------------------------

    def export(self, registry: CollectorRegistry) -> None:
        self.dead_letters.counter = Counter(
            "kcompat_share_dead_letters", "Records a share group moved to its dead-letter "
            "topic (KIP-1191), per dead-letter topic", ["topic"], registry=registry)
        registry.register(ShareCollector(lambda: self.held))

    # -- time ---------------------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.compaction.run)
            await self._run_timers()

    async def _run_timers(self) -> None:
        while True:
            self._timer = trio.Event()
            now = now_ms()
            due = []
            wait_ms = IDLE_WAKE_S * 1000
            for held in list(self.held.values()):
                meta = self.state.topics.get(held.key[1])
                if meta is None or meta.topic_id != held.topic_id:
                    if held.topic_id is not None and self.held.get(held.key) is held:
                        del self.held[held.key]  # its topic was deleted: nothing to serve
                    continue
                deadline = held.machine.next_deadline_ms()
                if deadline is None:
                    continue
                if deadline <= now:
                    if held.machine.tick(now):
                        due.append((held, False))
                    deadline = held.machine.next_deadline_ms()
                if deadline is not None:
                    wait_ms = min(wait_ms, max(deadline - now, 1))
            if due:
                self._wake()
                self.cluster.spawn(self._expired, due)
            with trio.move_on_after(wait_ms / 1000):
                await self._timer.wait()
