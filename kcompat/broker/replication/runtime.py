"""The replication runtime: the Multi-Raft driver and replica management.

Theory of operation
-------------------
The metadata quorum's voters are the brokers named in
``controller.quorum.voters`` (``"1@host:port,..."``, each voter's Kafka
listener) or learnt from ``controller.quorum.bootstrap.servers`` at the start
(``broker.quorum_bootstrap``, KIP-853), or the broker alone (a quorum of one,
the same code). A
broker-only node (``process.roles=broker``) follows the metadata log as an
observer of that quorum and joins a running cluster: its frames carry its
listener (``reply_to``) so the voters can answer it before its registration
commits; once registered, every broker links to it (``_link_new_brokers``)
and it hosts partitions like any other. Group 0 is
the metadata quorum over ``__cluster_metadata-0``, fed to the controller
(``controller.quorum``). Every partition is a Raft group among its replicas
over its own ``PartitionLog`` (``storage``): Raft term = partition leader
epoch, Raft high watermark = Kafka high watermark, Raft leader = partition
leader. A group whose only voter is this broker elects itself at once.

The driver (``run``) moves the Raft Ready contract forward, for all groups
at once: every ``tick_ms`` it ticks each group that
is not quiesced (``_ticking``) and runs the tick hooks of the layers above; on
every wake-up (a tick, a received frame, a proposal) it collects the Ready of
every group touched since the last round (``_dirty``) that has one, writes
them all (append, truncate, hard state; no fsync), makes them durable with
**one** fsync pass (``_must_fsync`` says which logs need it; a group whose
write or fsync fails is held back, offline for writes, and retried:
``disk_faults``), then sends the
messages of all groups, batched into one frame per peer, then ``advance``s
each group and publishes its new state (high watermark, leader epoch) to
waiting produce requests and fetches — a leader's high watermark as
``advance`` moved it over the entries just made durable (``_raise_hw``: a
lone replica's acks=all produce is answered after the round that synced it,
not after the next one's Ready; and a partition leader publishes the commit
a follower's answer moves as it steps it) — and feeds its state machine, if any
(``Group.feed``: the metadata image, ``__consumer_offsets``,
``__transaction_state``, ``__kc_schedule``...). Feeding shares one budget per
round (``FEED_BUDGET_S``); a replay longer than that goes on in later turns of
the driver (``_feeding``), each after a checkpoint, so a restart with a long
internal log or a burst of commits never holds the loop past the budget, and
``wait_committed`` answers once the entry is applied as well as committed.

One round beside it (``_overlap``): while the driver waits for its round's
fsync pass, the groups touched meanwhile that have no other replica, are not
the metadata log and only append (``Raft.appends_only``: no message to order
with the driver's frames, no hard state for the shared journal, no
truncation or snapshot) go through rounds of their own — written, synced,
advanced, published — and a lone partition's acks=all produce waits for its
own small fsync, not for the pass of every partition written before it and a
turn of the loop to begin the next round. A group is in one round at a time
(``_in_flight``: the other leaves it dirty for later). Its candidates are
only the lone partitions touched while the pass is in flight
(``_beside``), gathered as they are touched: a kick during the pass costs
the groups it touched, not a walk of every dirty group (on a cluster with
RF 3 none may go beside, and the walk was pure loss).

The metadata log has a lane of its own (``_metadata_lane``): its Ready never
joins the driver's rounds, so it is written, synced (its log and its own
hard-state file) and sent without waiting for a pass of partition logs or
for the driver's turn, and its frames go ahead of the partitions' queued
ones (``transport``: ``urgent``). Its ticks keep wall time too: while the
driver is busy the ticker ticks it itself (``_tick_metadata``). Without
this, a follower of the quorum under a replication load went 1-2.4 s
without word from its leader (``leader_gaps``), past the election timeout:
the leader's answers to its fetches waited behind fsync passes of partition
logs, and its ticks, and so its parked fetches' expiry, behind the driver.
With the lane, gaps of 1.0-1.3 s were still seen where three brokers and
their clients shared two cores; the metadata log's followers therefore wait
KRaft's fetch timeout (``controller.quorum.fetch.timeout.ms``, 2 s) before
they campaign, not an election timeout (``raft.node``, "The fetch timeout").

Replica management: ``assignments`` maps each topic-partition to its group id
and replicas (applied from the metadata log by the controller);
``partition_view`` answers Metadata (leader, epoch, replicas, ISR), and
``led_partition`` / ``serving_machine`` what leader-only requests and
coordinators need. A broker that is not a replica of a partition has no Raft
node for it, yet Metadata must name the leader: leaders announce ``(group,
term, leader, isr)`` to every peer, on change and every ``ANNOUNCE_TICKS``,
and all of them when a peer is linked (a broker-only node that joined);
the highest term wins. Preferred leaders: a new partition's first replica
campaigns as soon as the topic record is applied, and again every few ticks
while nobody leads, since a replica that has not applied the record yet drops
the vote request (``_start_first_campaigns``); every
``leader.imbalance.check.interval.seconds`` a leader whose partition's first
replica is another, caught-up broker transfers the leadership to it
(``_balance_leaders``). Log start offsets follow the leader (``log_starts``).

Idle groups cost nothing (docs/architecture.md, Replication): a partition group without traffic
quiesces (``RaftConfig.quiesce``, see ``kcompat.raft.node``) and leaves
``_ticking``; nothing visits it until a message, a proposal or a liveness
change touches it. Liveness is one heartbeat per broker pair: every frame to
a peer counts, and an empty frame goes out when nothing else did for
``heartbeat_ticks`` (a fifth of an election timeout) — from the ticker
itself while the driver waits for a round's fsync pass (``_beat_while_syncing``, up to
``replica.lag.time.max.ms``): a slow disk is not a dead broker, and its
quiet groups stay where they are; a peer not heard from for an election timeout is
``down`` (its quiesced groups' followers elect, ``Raft.suspect``), heard
again or with a new ``incarnation`` (a restart) it wakes the groups it is in
(``Raft.revive``). Announcements go out when a leader's (term, ISR, log
start) changes — checked every ``ANNOUNCE_TICKS`` for ticking groups — and
in full when a peer comes back or crosses ``replica.lag.time.max.ms`` of
silence, and every ``FULL_ANNOUNCE_TICKS`` (lost frames heal).

An idle broker's cost is its turns of the loop, so it takes few: a tick runs
in the ticker itself while the driver waits, waking the driver only for a
round with work in it; the ticker sleeps on the loop probe's grid
(``sleep_on_grid``), so the two share their wake-ups; and while only the
metadata log ticks (``_quiet``) the ticks go two to a turn.

Nothing here knows the layers above: the controller, the coordinators and the
KIP-890 verifier register what the runtime calls back — ``tick_hooks``,
``inbound`` handlers for inter-broker messages by type, ``machines`` per
internal topic, ``marker_listeners`` — and request/reply calls between brokers
go through ``peer_calls``.

Membership changes: ``controller.quorum.voters`` only seeds the metadata
quorum — AddRaftVoter / RemoveRaftVoter change it through its log
(``quorum_admin``) — and a partition's replicas move by changes of its
group's voters (``new_group(voters=...)`` opens a replica catching up as an
observer, ``set_replicas`` follows a reassignment, ``change_voters`` is the
leader's step; ``controller.reassignment`` drives them). What leaders send
their observers is throttled (``throttle``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import random
import time
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.loop.loop_monitor import sleep_on_grid
from kcompat.broker.replication import codec, log_starts, throttle
from kcompat.broker.replication.disk_faults import DiskFaults
from kcompat.broker.replication.group import (
    FEED_BUDGET_S,
    METADATA_GROUP,
    Group,
    NotLeaderError,
    StateMachine,
)
from kcompat.broker.replication.hard_states import HardStateJournal
from kcompat.broker.replication.leader_gaps import LeaderGaps
from kcompat.broker.replication.storage import PartitionLogStorage, now_ms
from kcompat.broker.replication.throttle import CatchUpThrottle
from kcompat.broker.replication.transport import Link, LinkFactory, PeerLink
from kcompat.broker.storage import placement
from kcompat.broker.storage.flusher import Syncable
from kcompat.broker.storage.metadata import MetadataImage
from kcompat.broker.storage.partition import Partition
from kcompat.log.files import atomic_write, read_int_file
from kcompat.raft import (
    NO_NODE,
    BeginQuorumEpoch,
    ChangeRefused,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotResponse,
    Message,
    NotLeader,
    Raft,
    RaftConfig,
    Ready,
    Role,
)
from kcompat.wire import batch as wbatch
from kcompat.wire.batch import BatchHeader
from kcompat.wire.records import encode_batch

if TYPE_CHECKING:
    from kcompat.broker.storage.state import BrokerState

log = logging.getLogger("kcompat.cluster")

FETCH_WAIT_TICKS = 3
#: the metadata log's followers and observers wait up to this share of an
#: election timeout in a fetch the leader has nothing new for (500 ms at the
#: defaults, as KRaft's fetches wait): a new record or high watermark answers
#: at once, and an idle pair of brokers trades a fetch every 500 ms, not every
#: 150 (the idle cost of a shard, issue 35). Partition groups keep
#: ``FETCH_WAIT_TICKS``: they go quiet when idle, and a shorter wait finds a
#: missed BeginQuorumEpoch or a lost fetch sooner
METADATA_FETCH_WAITS_PER_ELECTION = 2
HEARTBEATS_PER_ELECTION = 5  # pair heartbeats per election timeout of silence
QUIET_TICK_STRIDE = 2  # ticks per turn of the ticker while the broker is quiet
ANNOUNCE_TICKS = 10
FULL_ANNOUNCE_TICKS = 600
STALL_CHECK_MS = 3000  # a led group committing nothing for this long is logged
FIRST_CAMPAIGN_TICKS = 2
#: a brand-new partition's preferred replica campaigns again this often while
#: no replica has answered (its record not applied there yet), ``election_ticks
#: * 2`` in all, before the randomized election timeouts take over
FIRST_CAMPAIGN_RETRY_TICKS = 4
PRODUCER_ID_FILE = "cluster-producer-ids"
PRODUCER_ID_BLOCK = 1000
PRODUCER_ID_NODE_SHIFT = 40
OPENS_AT_ONCE = 4  # replica logs opening in worker threads at once (a restart opens them all)


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``"1@h:p,2@h:p"`` -> {1: (h, p), 2: (h, p)}; ConfigError naming the key."""
    voters: dict[int, tuple[str, int]] = {}
    for item in (s.strip() for s in text.split(",")):
        try:
            node, _, addr = item.partition("@")
            host, _, port = addr.rpartition(":")
            if not host:
                raise ValueError(item)
            voters[int(node)] = (host, int(port))
        except ValueError:
            raise ConfigError("controller.quorum.voters",
                              f"{item!r} is not ID@HOST:PORT") from None
    return voters


def lone_voter(node_id: int, host: str, port: int) -> str:
    """The voters of a broker started without ``controller.quorum.voters``:
    itself alone, a quorum of one running the same code as a cluster."""
    return f"{node_id}@{host}:{port}"


class ClusterRuntime:
    def __init__(self, state: BrokerState, voters_text: str,
                 links: LinkFactory | None = None, rng: random.Random | None = None) -> None:
        self.state = state
        self.node_id = state.node_id
        self.voters = parse_voters(voters_text)
        self.alone = set(self.voters) == {self.node_id}
        config = state.config
        # a voter of the metadata quorum (a controller), or a broker-only node
        # that follows the metadata log as an observer (KRaft's process.roles)
        self.is_voter = "controller" in config["process.roles"]
        if self.is_voter and self.node_id not in self.voters:
            raise ConfigError("controller.quorum.voters",
                              f"node.id {self.node_id} is not one of the voters (set "
                              f"process.roles=broker for a broker-only node; it may become "
                              f"a voter later: kcompat cluster add-voter)")
        if not self.is_voter and not (config["controller.quorum.voters"]
                                      or config["controller.quorum.bootstrap.servers"]):
            raise ConfigError("controller.quorum.voters",
                              "a broker-only node (process.roles=broker) joins a cluster: name "
                              "its controllers in controller.quorum.bootstrap.servers (host:port,"
                              "...) or controller.quorum.voters (id@host:port,...)")
        if not self.is_voter and self.node_id in self.voters:
            raise ConfigError("process.roles",
                              f"node.id {self.node_id} is one of controller.quorum.voters, so it "
                              f"is a controller: process.roles must be broker,controller")
        # how many replicas CreateTopics may ask for before the controller
        # counts the registered brokers (a cluster may grow past its voters)
        state.voter_count = 1 if self.alone else 1 << 15
        tick_ms = config["kcompat.raft.tick.ms"]
        self.tick_s = tick_ms / 1000
        self.election_ticks = max(FETCH_WAIT_TICKS + 2,
                                  config["kcompat.raft.election.timeout.ms"] // tick_ms)
        self.metadata_fetch_wait_ticks = max(
            FETCH_WAIT_TICKS, self.election_ticks // METADATA_FETCH_WAITS_PER_ELECTION)
        # KRaft's controller.quorum.fetch.timeout.ms: the metadata log's followers
        # campaign after this long without word from their leader, not after an
        # election timeout (``raft.node``, "The fetch timeout")
        self.metadata_fetch_timeout_ticks = max(
            self.election_ticks, config["controller.quorum.fetch.timeout.ms"] // tick_ms)
        self.rng = rng or random.Random()  # election timeouts (seeded by the simulator)
        self.announce_ticks = ANNOUNCE_TICKS
        # a fifth of an election timeout (200 ms at the defaults): a silent peer
        # is down after five missed heartbeats, and the members of a group
        # notice it at most a heartbeat and a tick apart, which is what a
        # suspecting member waits before it campaigns (``suspect_skew_ticks``)
        self.heartbeat_ticks = max(1, self.election_ticks // HEARTBEATS_PER_ELECTION)
        self.stall_ticks = max(1, STALL_CHECK_MS // tick_ms)
        self.lag_ticks = max(self.election_ticks, config["replica.lag.time.max.ms"] // tick_ms)
        self.groups: dict[int, Group] = {}
        self.assignments: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}
        self.announced: dict[int, codec.Announcement] = {}
        link = links or PeerLink
        self.peers: dict[int, Link] = {n: link(n, h, p) for n, (h, p) in self.voters.items()
                                       if n != self.node_id}
        self._wake = trio.Event()
        self._tick_due = False
        self._parked = False  # the driver waits for a kick (between rounds)
        self.ticks = 0
        self._syncing = False  # the driver waits for a round's fsync pass
        self._in_flight: set[int] = set()  # groups whose Ready a round holds (``_overlap``)
        self._overlap_wake = trio.Event()
        # lone partitions touched during the pass in flight (``_overlap``'s candidates)
        self._beside: dict[int, Group] = {}
        self._sync_beats = 0  # ticks it has waited so far
        # the metadata log touched since its lane's last round (``_metadata_lane``;
        # the group itself: it is touched inside ``new_group``, before ``self.meta``
        # is set), and ticked by the ticker since the driver's last ``_tick``
        # (``_tick_metadata``)
        self._meta_touched: Group | None = None
        self._meta_wake = trio.Event()
        self._meta_ahead = False
        # how long the metadata follower here goes without word from its leader
        self.leader_gaps = LeaderGaps(self.metadata_fetch_timeout_ticks * self.tick_s,
                                      trio.current_time)
        self._stall_seen: dict[int, int] = {}  # led group id -> high watermark at the last check
        # this process among the peers' view of us (a restart is a new one)
        self.incarnation = self.rng.getrandbits(31) | 1
        # peer liveness: the tick each peer was last heard from / sent to, its
        # incarnation, and ``down``: the peers silent for an election timeout
        # (every Raft core reads this set)
        self.down: set[int] = set()
        self._heard: dict[int, int] = dict.fromkeys(self.peers, 0)
        self._sent: dict[int, int] = dict.fromkeys(self.peers, 0)
        self._link = link
        self._brokers_seen = 0  # registered brokers already given a peer link
        self._incarnations: dict[int, int] = {}
        # the groups that tick (not quiesced) and those touched since the last
        # round (insertion-ordered: the simulator replays exactly)
        self._ticking: dict[int, Group] = {}
        self._dirty: dict[int, Group] = {}
        # groups whose machine has committed batches left to apply (``_feed``)
        self._feeding: dict[int, Group] = {}
        self._feed_deadline = 0.0
        self._announce: set[int] = set()  # led groups whose announcement is due
        self._announce_all = True
        # group id -> (tick to campaign at, the last tick to campaign again at)
        self._first_campaigns: dict[int, tuple[int, int]] = {}
        # partitions created while this broker was live whose first leader is
        # not known here yet (``first_leader_pending``), and the metadata offset
        # from which a created partition counts as new (set once caught up)
        self._awaiting_first_leader: set[int] = set()
        self._live_from: int | None = None
        # topic -> the replicated state machine of each of its partitions (Group.feed)
        self.machines: dict[str, StateMachine] = {}
        # what a deleted topic's name is given to, as each broker applies the deletion
        # (the group coordinator deletes the committed offsets of its partitions)
        self.topic_deleted_hooks: list[Callable[[str], None]] = []
        # topic -> a check a batch the broker writes itself must pass at the
        # partition's leader before it is proposed (index, batch) -> error
        self.append_checks: dict[str, Callable[[int, memoryview], ErrorCode]] = {}
        # after an internal append committed and was applied: whether its
        # topic's state machine took it (``PeerCalls.append_locally``)
        self.commit_checks: dict[str, Callable[[int, memoryview], ErrorCode]] = {}
        # what the layers above register: per-tick work, inbound inter-broker
        # messages by type (called with the sender and the message), and who
        # must hear of a transaction marker written here (topic, index, producer id)
        self.tick_hooks: list[Callable[[int], None]] = []
        self.inbound: dict[type, Callable[[int, Any], object]] = {}
        self.marker_listeners: list[Callable[[str, int, int], None]] = []
        self._nursery: trio.Nursery | None = None
        # replicas whose logs open in worker threads (``metadata_apply``): group
        # id -> (topic, voters); a lock per directory being opened (one open of
        # a directory at a time, in the order asked) and how many open at once
        self.opening: dict[int, tuple[str, tuple[int, ...] | None]] = {}
        self.opening_dirs: dict[str, trio.Lock] = {}
        self.opening_limit = trio.CapacityLimiter(OPENS_AT_ONCE)
        self.balance_ticks = (max(1, config["leader.imbalance.check.interval.seconds"] * 1000
                                  // tick_ms)
                              if config["auto.leader.rebalance.enable"] else 0)
        # what the leader sends replicas catching up (``throttle``)
        self.throttle = CatchUpThrottle(
            lambda: throttle.configured_rate(self.image.broker_configs, self.node_id),
            trio.current_time)
        self.journal = HardStateJournal(Path(state.data_dir), state.store,
                                        live=lambda: set(self.groups))
        self.faults = DiskFaults(self.node_id, self._touch)  # failed writes and fsyncs
        self._pid_path = Path(state.data_dir) / PRODUCER_ID_FILE
        self._pid_next = read_int_file(self._pid_path, state.store) or 0
        self._pid_limit = self._pid_next
        cid = config["kcompat.cluster.id"] or _cluster_id(voters_text)
        state.metadata.image.cluster_id = cid
        self.meta: Group  # the metadata quorum's group (start_metadata)

    def start_metadata(self, storage: PartitionLogStorage, machine: StateMachine) -> None:
        """Group 0 over the metadata log, fed to ``machine`` (the controller)."""
        assert storage.journal is None  # its hard state is its own (``_metadata_lane``)
        self.meta = self.new_group(METADATA_GROUP, tuple(sorted(self.voters)), storage)
        self.meta.machine = machine

    # -- lookups used by the handlers ----------------------------------------------

    @property
    def is_controller(self) -> bool:
        return self.meta.is_leader

    @property
    def controller_id(self) -> int:
        return self.meta.raft.leader

    @property
    def caught_up(self) -> bool:
        """The metadata image has applied the log up to the high watermark a
        leader last told us (a restarted broker is not caught up until it hears
        a leader and replays what was committed while it was away)."""
        meta = self.meta
        target = max(1, meta.raft.heard_high_watermark)
        return meta.raft.leader != NO_NODE and meta.applied >= target

    def group_of(self, topic: str, index: int) -> Group | None:
        found = self.assignments.get((topic, index))
        return self.groups.get(found[0]) if found else None

    def leads(self, topic: str, index: int) -> bool:
        group = self.group_of(topic, index)
        return group is not None and group.is_leader

    def partition_error(self, topic: str, index: int) -> ErrorCode | None:
        """The error a leader-only request gets here, or None if we lead it."""
        if (topic, index) not in self.assignments:
            return ErrorCode.unknown_topic_or_partition
        return None if self.leads(topic, index) else ErrorCode.not_leader_or_follower

    @property
    def replaying(self) -> bool:
        """Replica logs still opening here, or state machines with committed
        batches the driver has not fed them yet (a restart's replays)."""
        return bool(self.opening) or bool(self._feeding)

    @property
    def settling(self) -> bool:
        """A state machine's group here (a coordinator's, a schedule's) knows
        no leader yet, or leads without having applied its earlier entries: a
        restart's elections and replays, after which its service takes up the
        partition (and reports how far behind it is)."""
        return any(g.machine is not None and not g.removed and g.broken is None
                   and (g.raft.leader == NO_NODE or (g.is_leader and not g.serving))
                   for g in self.groups.values())

    def serving_machine(self, topic: str, index: int) -> ErrorCode | None:
        """None when this broker leads ``topic``'s partition ``index`` and its
        state machine has caught up in this term; COORDINATOR_LOAD_IN_PROGRESS
        while a new leader still applies earlier entries; NOT_COORDINATOR else."""
        group = self.group_of(topic, index)
        if group is None or group.removed or not group.is_leader or group.broken is not None:
            return ErrorCode.not_coordinator
        if self.faults.is_offline(group):  # its log cannot be written now (disk_faults)
            return ErrorCode.coordinator_not_available
        return None if group.serving else ErrorCode.coordinator_load_in_progress

    def led_partition(self, topic: str, index: int) -> tuple[Partition | None, ErrorCode]:
        """The local partition if this broker leads it (error NONE), else None
        and UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER: what
        leader-only requests (Fetch from consumers, ListOffsets, DeleteRecords,
        OffsetForLeaderEpoch) answer. A filtered view's partition is its
        source's (``views``)."""
        error = self.partition_error(topic, index)
        part = self.state.source_partition(topic, index) if error is None else None
        if error is None and part is None:
            error = ErrorCode.unknown_topic_or_partition
        return part, error or ErrorCode.none

    async def wait_leaders(self, topic: str, timeout_s: float) -> bool:
        """Wait (bounded) until ``topic`` exists and every partition has a
        leader this broker knows of; False on timeout."""
        with trio.move_on_after(timeout_s):
            while True:
                meta = self.image.topics.get(topic)
                if meta is not None and all(
                        (topic, i) in self.assignments
                        and self.partition_view(topic, i)[0] != NO_NODE
                        for i in range(meta.partitions)):
                    return True
                await trio.sleep(self.tick_s)
        return False

    def note_new_partition(self, gid: int) -> None:
        """A partition's assignment was applied (``metadata_apply``): one created
        while this broker is live (the metadata offset in its group id at or
        past ``_live_from``) awaits its first leader; replayed ones do not."""
        if self._live_from is not None and gid >> 16 >= self._live_from:
            self._awaiting_first_leader.add(gid)

    def forget_partition(self, gid: int) -> None:
        self._awaiting_first_leader.discard(gid)

    def first_leaders_pending(self) -> bool:
        """Whether any new partition here still waits for its first leader."""
        return bool(self._awaiting_first_leader)

    def first_leader_pending(self, topic: str, index: int) -> bool:
        """A brand-new partition whose first leader this broker does not know
        yet. Kafka's controller names a new partition's leader in the record
        that creates it, so a Kafka broker never describes a new topic without
        leaders: until it knows the topic, Metadata answers LEADER_NOT_AVAILABLE
        for the whole topic (clients retry after ``retry.backoff.ms``). Here the
        first leader is elected a moment after the record is applied, and
        Metadata answers the same until then (a partition that had a leader and
        lost it stays a partition-level LEADER_NOT_AVAILABLE, as in Kafka)."""
        found = self.assignments.get((topic, index))
        if found is None or found[0] not in self._awaiting_first_leader:
            return False
        if self._raw_view(found[0])[0] == NO_NODE:
            return True
        self._awaiting_first_leader.discard(found[0])
        return False

    def fenced_ids(self) -> set[int]:
        return {b.node_id for b in self.image.brokers.values() if b.fenced}

    def partition_view(self, topic: str, index: int, fenced: set[int] | None = None
                       ) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
        """(leader or -1, leader epoch, replicas, isr) for Metadata. A broker
        the controller fenced is neither leader nor in the ISR (as in KRaft): a
        non-replica knows leaders only from announcements, and the last one of
        a dead leader whose partition cannot elect another must not send
        clients to it. ``fenced``: ``fenced_ids()``, when the caller has it."""
        gid, replicas = self.assignments[(topic, index)]
        leader, epoch, isr = self._raw_view(gid)
        if fenced is None:
            fenced = self.fenced_ids()
        if leader in fenced:
            leader = NO_NODE
        return leader, epoch, replicas, tuple(n for n in isr if n not in fenced)

    def _raw_view(self, gid: int) -> tuple[int, int, tuple[int, ...]]:
        group = self.groups.get(gid)
        ann = self.announced.get(gid)
        if group is not None:
            raft = group.raft
            if group.is_leader:
                return self.node_id, raft.term, self.isr(group)
            return follower_view(raft.term, raft.leader, ann)
        if ann is not None:
            return ann.leader, ann.term, ann.isr
        return NO_NODE, 0, ()

    def isr(self, group: Group) -> tuple[int, ...]:
        """The leader and the followers caught up to the high watermark that
        fetched within ``replica.lag.time.max.ms`` (an idle partition's dead
        follower leaves it too: a quiesced group's followers do not fetch, so
        their broker's silence counts)."""
        ticks, heard, lag = self.ticks, self._heard, self.lag_ticks
        replicas = group.replicas  # not a replica a reassignment removed (still observing)
        hw = group.hw
        caught_up = [n for n, end, idle in group.raft.followers()  # heard: a quiet group's too
                     if end >= hw and idle < lag and ticks - heard.get(n, ticks) < lag
                     and n in replicas]
        return tuple(sorted([self.node_id, *caught_up]))

    # -- producer ids -------------------------------------------------------------------

    def reserve_producer_ids(self) -> None:
        """Make sure the next id is in a durable block (OSError if the block
        cannot be written: a full disk; nothing is handed out then)."""
        # ids a data directory of an older single-node broker handed out stay unused
        self._pid_next = max(self._pid_next, self.image.producer_id_limit)
        if self._pid_next >= self._pid_limit:
            limit = self._pid_next + PRODUCER_ID_BLOCK
            atomic_write(self._pid_path, str(limit).encode(), self.state.store)
            self._pid_limit = limit

    def allocate_producer_id(self) -> int:
        """Ids ``node_id << 40 | n`` from durable local blocks: unique cluster-wide
        without a controller round trip, never reused after a restart."""
        self.reserve_producer_ids()
        pid = (self.node_id << PRODUCER_ID_NODE_SHIFT) | self._pid_next
        self._pid_next += 1
        return pid

    # -- proposals ----------------------------------------------------------------------

    def transfer_leadership(self, group: Group, target: int) -> bool:
        """Begin handing ``group``'s leadership to ``target`` (Raft's transfer)."""
        started = group.raft.transfer_leadership(target)
        self._touch(group)
        return started

    def log_starts_moved(self, topic: str | None = None, index: int = 0) -> None:
        """Log starts moved (DeleteRecords on ``topic``-``index``, or retention
        anywhere): tell the Raft cores, and the followers through announcements."""
        if topic is None:
            log_starts.sync_all(self.groups.values())
            self._announce_all = True
        elif (group := self.group_of(topic, index)) is not None:
            log_starts.sync_group(group)
            self._announce.add(group.gid)
        self.kick()

    def propose_batch(self, group: Group, view: memoryview, header: BatchHeader,
                      now_ms: int, durable: bool = True) -> BatchHeader:
        """Append a validated batch as the leader (written to the log at once, see
        ``storage``); raises NotLeaderError. No await: atomic under trio.
        ``durable``: the caller will wait for the commit and needs it on disk
        (acks=all, coordinator writes); else a lone replica's round may skip
        the fsync (see ``_round``)."""
        raft = group.raft
        if group.removed or raft.role is not Role.LEADER:
            raise NotLeaderError(raft.leader)
        faults = self.faults  # a failed write: StorageError, the group offline (disk_faults)
        faults.check(group)
        for entry in list(raft.log.unstable):  # e.g. the leader-change entry
            faults.write_now(group, partial(group.storage.append_now, entry))
        proposed = raft.propose(bytes(view), header.last_offset_delta + 1)
        if isinstance(proposed, NotLeader):
            raise NotLeaderError(proposed.leader)
        entry = proposed
        faults.write_now(group, partial(group.storage.append_now, entry, view))
        group.sync_wanted |= durable
        self._touch(group)
        self.kick()
        return header.placed(entry.index, entry.term)

    async def wait_committed(self, group: Group, offset: int, term: int,
                             deadline: float) -> ErrorCode:
        """Wait until ``offset`` (proposed in ``term``) is below the high watermark."""
        while True:
            changed = group.changed
            if group.removed:
                return ErrorCode.unknown_topic_or_partition
            if group.broken is not None:  # its machine failed: offline (``Group.feed``)
                return ErrorCode.not_coordinator
            if group.hw > offset and group.raft.term == term and (
                    group.machine is None or group.applied > offset):
                return ErrorCode.none
            if self.faults.is_offline(group):
                return ErrorCode.kafka_storage_error
            if group.raft.term != term or not group.is_leader:
                return ErrorCode.not_leader_or_follower
            if trio.current_time() >= deadline:
                return ErrorCode.request_timed_out
            with trio.move_on_at(deadline):
                await changed.wait()

    def plan_assignments(self, name: str, first: int, count: int,
                         replication: int) -> list[list[Any]]:
        """[[group id, [replica ids]], ...] for partitions first..first+count-1.
        Must be proposed without an await in between (ids use the log end)."""
        base = self.meta.raft.log.end
        order = placement.ring((b.node_id, b.machine_id) for b in self.image.live_brokers()) \
            or [(node, str(node)) for node in sorted(self.voters)]
        start = zlib.crc32(name.encode()) % len(order)
        return [[(base << 16) | (first + i), replicas] for i, replicas
                in enumerate(placement.spread(order, start + first, count, replication))]

    def propose_metadata_nowait(self, rec: dict[str, Any]) -> BatchHeader:
        """Propose one metadata record; NotLeaderError if not the controller."""
        now = now_ms()
        raw = encode_batch([(None, json.dumps(rec, separators=(",", ":")).encode(), (), now)])
        view = memoryview(raw).toreadonly()
        return self.propose_batch(self.meta, view, wbatch.parse_header(view), now)

    async def propose_metadata(self, rec: dict[str, Any], timeout_s: float = 10.0) -> None:
        """Commit and apply one metadata record; NotLeaderError if not the controller,
        TimeoutError when it is not applied in time."""
        written = self.propose_metadata_nowait(rec)
        deadline = trio.current_time() + timeout_s
        while self.meta.applied <= written.base_offset:
            changed = self.meta.changed
            if self.meta.raft.term != written.partition_leader_epoch:
                raise NotLeaderError(self.meta.raft.leader)
            if trio.current_time() >= deadline:
                raise TimeoutError("metadata record not committed in time")
            with trio.move_on_at(deadline):
                await changed.wait()

    # -- inbound ------------------------------------------------------------------------

    def receive(self, frame: bytes) -> None:
        """A KCOMPAT_RAFT frame from a peer (called by the connection handler)."""
        try:
            decoded = codec.decode(frame)
        except codec.CodecError as e:
            log.warning("dropping raft frame: %s", e)
            return
        if decoded.reply_to is not None and decoded.src not in self.peers \
                and decoded.src != self.node_id and decoded.src not in self.voters:
            self._add_peer(decoded.src, *decoded.reply_to)  # a broker-only node joining
        self._hear(decoded.src, decoded.incarnation)
        for ann in decoded.announcements:
            old = self.announced.get(ann.group)
            if old is None or ann.term >= old.term:
                self.announced[ann.group] = ann
                self._awaiting_first_leader.discard(ann.group)
                log_starts.follow_announced(self.groups.get(ann.group), ann)
        for m in decoded.messages:
            group = self.groups.get(m.group)
            if group is not None and not group.removed and m.dst == self.node_id:
                if isinstance(m, FetchRequest) and self._catching_up(group, m.src):
                    admitted = self.throttle.admit(m)
                    if admitted is None:
                        continue  # throttled: stepped once the bucket refills (``_tick``)
                    m = admitted
                self._step(group, m)
                if m.group == METADATA_GROUP:
                    self._metadata_contact(m)
        for mk in decoded.markers:
            handler = self.inbound.get(type(mk))
            if handler is not None:
                handler(decoded.src, mk)
            else:
                log.debug("no handler for %s from node %d", type(mk).__name__, decoded.src)
        self.kick()

    def _step(self, group: Group, m: Message) -> None:
        if group.raft.quiesced and group.part is not None:
            log_starts.sync_group(group)  # retention may have run meanwhile
        group.raft.step(m)
        self._touch(group)
        # a partition leader's commit that a follower's answer just moved:
        # published now, so the acks=all produces below it are answered without
        # waiting for the next round to report it (a machine is fed, and the
        # metadata image applied, by the rounds)
        if group.machine is None and group.gid != METADATA_GROUP and self._raise_hw(group):
            self._publish(group)

    def _metadata_contact(self, m: Message) -> None:
        """A message of the metadata log stepped: word from the leader this
        broker follows (what only a leader sends: a fetch answered, its
        epoch begun), for ``leader_gaps``."""
        raft = self.meta.raft
        if raft.role is not Role.FOLLOWER:
            self.leader_gaps.left()
        elif m.src == raft.leader and isinstance(
                m, FetchResponse | BeginQuorumEpoch | FetchSnapshotResponse):
            self.leader_gaps.heard(m.src)

    @staticmethod
    def _catching_up(group: Group, node: int) -> bool:
        """``node`` is an observer of this partition group (a replica being
        added): what the replication throttle applies to."""
        return group.gid != METADATA_GROUP and node not in group.raft.voters

    def send_internal(self, node: int, message: codec.Internal) -> None:
        """One request, reply or heartbeat to a peer, best effort."""
        peer = self.peers.get(node)
        if peer is not None:
            self._sent[node] = self.ticks
            peer.send(self._frame(markers=(message,)),
                      urgent=isinstance(message, codec.CONTROL_MARKERS))

    @property
    def image(self) -> MetadataImage:
        return self.state.metadata.image

    def kick(self) -> None:
        self._wake.set()

    def spawn(self, fn: Any, *args: Any) -> bool:
        """Run ``fn(*args)`` in the runtime's nursery; False before it runs."""
        if self._nursery is None:
            return False
        self._nursery.start_soon(fn, *args)
        return True

    # -- the driver ---------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """The driver, with the peer links and the ticker."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for peer in self.peers.values():
                nursery.start_soon(peer.run)
            nursery.start_soon(self._ticker)
            nursery.start_soon(self._drive)
            nursery.start_soon(self._overlap)
            nursery.start_soon(self._metadata_lane)
            task_status.started()

    async def _drive(self) -> None:
        while True:
            self._parked = True
            await self._wake.wait()
            self._parked = False
            self._wake = trio.Event()
            if self._feeding:
                self._feed_more()
                await trio.lowlevel.checkpoint()  # a replay's turn (up to FEED_BUDGET_S) is a step
            if self._tick_due:
                self._tick_due = False
                self._tick()
            for _ in range(8):
                if not await self._round():
                    break
                await trio.lowlevel.checkpoint()  # each round is a turn of its own

    async def _overlap(self) -> None:
        """Rounds beside the driver's while its fsync pass is in flight, of the
        groups that only append and have no other replica (``_may_overlap``):
        a lone partition's acks=all produce then waits for its own small
        fsync, not for the pass of every partition written before it, the
        end of that round and a turn of the loop to start the next."""
        while True:
            await self._overlap_wake.wait()
            self._overlap_wake = trio.Event()
            while self._syncing and await self._round(overlap=True):
                await trio.lowlevel.checkpoint()

    async def _metadata_lane(self) -> None:
        """Every round of the metadata log, in a lane of its own beside the
        driver's and the overlap's: the control plane (registrations and
        heartbeats, the quorum's fetches and elections, topics) never waits
        for an fsync pass of partition logs, nor for a turn of the driver
        behind rounds of them. Its Ready is written and its log and hard
        state synced on their own, its messages sent ahead of the partitions'
        (``Link.send``'s ``urgent``)."""
        while True:
            await self._meta_wake.wait()
            self._meta_wake = trio.Event()
            while self._meta_touched is not None and await self._round(meta=True):
                await trio.lowlevel.checkpoint()

    async def _ticker(self) -> None:
        last = trio.current_time()
        while True:
            # a quiet broker's ticks go in pairs, a turn of the loop each
            # QUIET_TICK_STRIDE ticks (``_quiet``)
            stride = QUIET_TICK_STRIDE if self._quiet() else 1
            # with the loop probe's (``loop_monitor``); a late wake skips ticks
            at = await sleep_on_grid(self.tick_s * stride)
            missed = min(max(round((at - last) / self.tick_s) - stride, 0), self.heartbeat_ticks)
            last = at
            if self._parked and not self._feeding:
                # the driver waits for work, so no round is under way: the
                # tick runs here, and the driver wakes only for the round it
                # left (an idle broker's tick is one turn of the loop, not two)
                for _ in range(stride):
                    self._tick()
                self._tick_metadata(0, missed, ahead=False)
                if self._round_wanted():
                    self.kick()
            else:
                self._tick_due = True
                self._tick_metadata(stride, missed)
                self.kick()
            if self._syncing:
                self._beat_while_syncing()

    def _quiet(self) -> bool:
        """Nothing here needs its ticks a tick apart: no group ticks but the
        metadata log (the partitions are quiesced), and no round, replay,
        fsync pass, first campaign or throttled fetch is under way. Its ticks
        then go two at a time: every timeout keeps its count of ticks and is
        at most a tick late, and an idle broker wakes half as often (the
        idle cost of a shard, issue 35). Anything that makes a group tick
        again ends it at the next tick."""
        return (self._parked and not self._syncing and not self._feeding
                and not self._first_campaigns and not self.throttle.holding
                and all(gid == METADATA_GROUP for gid in self._ticking))

    def _round_wanted(self) -> bool:
        """Whether a round may have something to do (``_round`` says for sure)."""
        return bool(self._announce or self._announce_all or self.faults.pending
                    or any(g.raft.has_ready() for g in self._dirty.values()))

    def _beat_while_syncing(self) -> None:
        """The driver waits for a round's fsync pass (seconds on a busy disk):
        the pair heartbeats go on from the ticker meanwhile, so peers do not
        take a slow disk for a dead broker and elect away its groups (Kafka's
        broker heartbeats do not wait for log I/O either) — up to
        ``replica.lag.time.max.ms``, past which a disk that hangs should cost
        this broker its leaderships."""
        self._sync_beats += 1
        if self._sync_beats % self.heartbeat_ticks == 0 and self._sync_beats <= self.lag_ticks:
            for peer in self.peers.values():
                peer.send(self._frame(), urgent=True)

    def _tick_metadata(self, ticks: int, missed: int, ahead: bool = True) -> None:
        """The metadata log's ``ticks`` on time while the driver is busy (a
        round's fsync pass, rounds in a row, a replay): its timeouts count
        wall time, not the driver's turns, and its Ready goes through its own
        lane (``_metadata_lane``); the driver's next ``_tick`` leaves it out
        (``ahead``). A leader also gets the ``missed`` ticks of a late wake
        (a busy loop, a process waiting for a core; at most a heartbeat's):
        its followers' parked fetches are answered after their wait in wall
        time, not after twice that when every other tick is skipped —
        followers elect past a timeout. A follower's own timeouts are not
        caught up: a broker that could not run cannot tell its leader was
        silent, and an election is what a missed timeout costs there."""
        meta = self._ticking.get(METADATA_GROUP)
        if meta is None or meta.removed:
            return
        if meta.raft.role is Role.LEADER:
            ticks += missed
        if not ticks:
            return
        for _ in range(ticks):
            meta.raft.tick()
        self._meta_ahead |= ahead
        self._mark(meta, ticked=True)

    def _tick(self) -> None:
        self.ticks += 1
        if len(self.image.brokers) != self._brokers_seen:
            self._link_new_brokers()
        if self._live_from is None and self.caught_up:
            self._live_from = self.meta.applied
        self._check_peers()
        for gid, group in list(self._ticking.items()):
            if group.removed:
                del self._ticking[gid]
                continue
            if gid == METADATA_GROUP and self._meta_ahead:
                self._meta_ahead = False  # ticked by the ticker meanwhile
                continue
            group.raft.tick()
            self._mark(group, ticked=True)
            if group.raft.quiesced:
                del self._ticking[gid]
                # announce the ISR it goes quiet with (a follower back since the
                # last announcement check), or nobody else learns it while quiet
                if group.is_leader and group.announced != self._announcement(group):
                    self._announce.add(gid)
        self._start_first_campaigns()
        for m in self.throttle.release():
            held = self.groups.get(m.group)
            if held is not None and not held.removed:
                self._step(held, m)
        for hook in self.tick_hooks:
            hook(self.ticks)
        if self.ticks % FULL_ANNOUNCE_TICKS == 0:
            self._announce_all = True
            log_starts.sync_all(self.groups.values())  # after retention dropped segments
        elif self.ticks % self.announce_ticks == 0:
            ticking = list(self._ticking.values())
            log_starts.sync_all(ticking)
            for group in ticking:  # an ISR or log start that moved
                if group.is_leader and group.announced != self._announcement(group):
                    self._announce.add(group.gid)
        if self.balance_ticks and self.ticks % self.balance_ticks == 0:
            self._balance_leaders()
        if self.ticks % self.stall_ticks == 0:
            self._log_stalls()

    def _log_stalls(self) -> None:
        """A warning for each led group with entries past its high watermark
        and a high watermark that did not move since the last check: what its
        followers have and when each last fetched, to tell a lost message
        from a slow follower or disk."""
        seen, self._stall_seen = self._stall_seen, {}
        for gid, group in self._ticking.items():  # a quiesced group costs nothing (docs/architecture.md, Replication)
            raft = group.raft
            if group.hw >= raft.log.end or group.removed or not group.is_leader:
                continue
            self._stall_seen[gid] = group.hw
            if seen.get(gid) == group.hw:
                st = raft.status()
                log.warning(
                    "group %d (%s) committed nothing for %d ticks: term %d, high watermark "
                    "%d, log end %d, durable end %d, follower match ends %s, ticks since "
                    "each fetched %s, peers down %s, quiesced %s, offline %s", gid, group.name,
                    self.stall_ticks, st.term, st.high_watermark, st.log_end, st.stable_end,
                    st.match_ends, st.idle_ticks, sorted(self.down), raft.quiesced,
                    self.faults.is_offline(group))

    # -- peer liveness ------------------------------------------------------------------

    def _hear(self, node: int, incarnation: int) -> None:
        """A frame from ``node``: it is alive (and restarted if its incarnation
        changed). The metadata log's leader counts it heard for check quorum
        (``Raft.heard``): its followers fetch only every half election timeout
        when idle. Partition groups, whose fetch wait is 3 ticks, count
        fetches alone (a call per group here would cost per partition)."""
        if node not in self._heard:
            return
        self._heard[node] = self.ticks
        self.meta.raft.heard(node)
        before = self._incarnations.get(node)
        self._incarnations[node] = incarnation
        if before is None:  # heard first: it may have missed what ``_add_peer`` announced
            self._announce_all = True
        if before is not None and before != incarnation:
            log.info("node %d: peer %d restarted", self.node_id, node)
            self._for_member(node, Raft.suspect)  # it leads nothing now
            self._revive(node, restarted=True)
        elif node in self.down:
            log.info("node %d: peer %d is back", self.node_id, node)
            self._revive(node)

    def _link_new_brokers(self) -> None:
        """Peers beyond the voters: every registered broker (a broker-only
        node that joined) gets a link, once its registration is applied."""
        brokers = self.image.brokers
        self._brokers_seen = len(brokers)
        for node, info in sorted(brokers.items()):
            if node != self.node_id and node not in self.peers:
                self._add_peer(node, info.host, info.port)

    def _add_peer(self, node: int, host: str, port: int) -> None:
        log.info("node %d: links to broker %d at %s:%d", self.node_id, node, host, port)
        peer = self.peers[node] = self._link(node, host, port)
        self._heard[node] = self.ticks
        self._sent[node] = 0
        # it knows no leader of the partitions it does not replicate: the next frame
        # announces every group led here (quiet ones announce nothing on their own
        # until the full announcement, and Metadata from it would say LEADER_NOT_AVAILABLE)
        self._announce_all = True
        if self._nursery is not None:
            self._nursery.start_soon(peer.run)

    def endpoint(self, node: int, listener: str = "") -> tuple[str, int] | None:
        """Where clients (on ``listener``) reach ``node``: its registration,
        else its voter entry."""
        info = self.image.brokers.get(node)
        if info is not None:
            return info.address(listener)
        return self.voters.get(node)

    def _revive(self, node: int, restarted: bool = False) -> None:
        self.down.discard(node)
        self._for_member(node, lambda raft, n: raft.revive(n, restarted))
        self._announce_all = True

    def _check_peers(self) -> None:
        """Mark silent peers down and send the pair heartbeats that are due."""
        for node, peer in self.peers.items():
            silent = self.ticks - self._heard[node]
            if silent >= self.election_ticks and node not in self.down:
                log.info("node %d: peer %d silent for %d ticks, down", self.node_id, node,
                         silent)
                self.down.add(node)
                self._for_member(node, Raft.suspect)
            if silent == self.lag_ticks:
                self._announce_all = True  # it leaves the ISR of quiet groups too
            if self.ticks - self._sent[node] >= self.heartbeat_ticks:
                self._sent[node] = self.ticks
                peer.send(self._frame(), urgent=True)

    def _for_member(self, node: int, action: Callable[[Raft, int], None]) -> None:
        for group in list(self.groups.values()):
            if not group.removed and node in group.replicas:
                action(group.raft, node)
                self._touch(group)

    def _touch(self, group: Group) -> None:
        """``group``'s core was fed something: collect its Ready next round,
        and tick it from now on unless it is (still) quiesced."""
        self._mark(group)
        if not group.raft.quiesced and not group.removed:
            self._ticking[group.gid] = group

    def _mark(self, group: Group, ticked: bool = False) -> None:
        """Collect ``group``'s Ready in the next round: the metadata log's in
        its own lane (``_metadata_lane``; after a tick only if the tick made
        one: an idle tick wakes nothing), a partition's in the driver's (or
        beside its pass: ``_may_go_beside``)."""
        if group.gid == METADATA_GROUP:
            self._meta_touched = group
            if not ticked or group.raft.has_ready():
                self._meta_wake.set()
            return
        self._dirty[group.gid] = group
        if self._syncing:
            self._may_go_beside(group)

    def _may_go_beside(self, group: Group) -> None:
        """A lone partition touched while the driver's pass is in flight: a
        candidate for ``_overlap``'s next round."""
        if group.lone and group.gid != METADATA_GROUP:
            self._beside[group.gid] = group
            self._overlap_wake.set()

    def _balance_leaders(self) -> None:
        """Preferred leaders (Kafka's auto.leader.rebalance): a leader of a
        partition whose first assigned replica is another broker hands the
        leadership to it with the Raft leadership transfer once that replica is
        caught up (in the ISR), so leaders spread again after failures heal.
        Checked every ``leader.imbalance.check.interval.seconds``."""
        for group in list(self.groups.values()):
            if group.gid == METADATA_GROUP or group.removed or not group.is_leader:
                continue
            preferred = group.replicas[0]
            if preferred == self.node_id or preferred not in self.isr(group):
                continue
            if self.transfer_leadership(group, preferred):
                log.info("node %d hands %s to preferred leader %d", self.node_id,
                         group.name, preferred)

    async def _round(self, overlap: bool = False, meta: bool = False) -> bool:
        """One Ready round over every group (``overlap``: over those that may
        go beside the driver's round in flight; ``meta``: the metadata log's,
        in its lane, beside it too); False when nobody had anything."""
        overlap |= meta
        batch: list[tuple[Group, Ready]] = []
        if meta:
            touched, self._meta_touched = self._meta_touched, None
            dirty = {METADATA_GROUP: touched} if touched is not None else {}
        elif overlap:  # (each stays in ``_dirty`` too: one not taken here goes next round)
            dirty, self._beside = self._beside, {}
        else:
            dirty, self._dirty = self._dirty, {}
            self._feed_deadline = time.monotonic() + FEED_BUDGET_S
        faults = self.faults  # a failed write or fsync holds its group's Ready back
        in_flight = self._in_flight
        for gid, group in dirty.items():
            if group.removed or faults.is_offline(group) or not group.raft.has_ready():
                continue
            if overlap and (gid in in_flight or not self._may_overlap(group)):
                if gid == METADATA_GROUP:
                    self._meta_touched = group  # held by a retry's round: the next lane's
                continue
            if gid in in_flight:
                self._dirty.setdefault(gid, group)  # the next round's
                continue
            ready = group.raft.ready()
            if faults.write(group, ready):
                batch.append((group, ready))
        if overlap:
            if not batch:
                return False
            announce: tuple[codec.Announcement, ...] = ()
        else:
            if faults.pending:
                batch += faults.due()  # held Readies written again after their backoff
            announce = self._take_announcements()
            if not batch and not announce:
                return False
        gids = [g.gid for g, _r in batch]
        in_flight.update(gids)
        try:
            return await self._persist(batch, announce, overlap)
        finally:
            in_flight.difference_update(gids)
            if overlap:  # the driver left them dirty meanwhile; what the metadata
                self.kick()  # records applied touched (a new topic's groups)
            elif METADATA_GROUP in gids:
                self._meta_wake.set()  # a retried Ready of the lane's went here

    @staticmethod
    def _may_overlap(group: Group) -> bool:
        """Whether ``group``'s next Ready may be made durable beside the
        driver's round: the metadata log's always (its hard state is in a file
        of its own, not the shared journal, and its messages concern it
        alone); a partition's whose only replica is here and whose Ready holds
        appends at most — no message to order with the driver's frames, no
        hard state for the shared journal, no truncation or snapshot."""
        if group.gid == METADATA_GROUP:
            return True
        return group.lone and group.raft.appends_only()

    async def _persist(self, batch: list[tuple[Group, Ready]],
                       announce: tuple[codec.Announcement, ...], overlap: bool) -> bool:
        """The written Readies of a round made durable, their messages sent,
        advanced and published."""
        faults = self.faults
        logs = [g.storage.plog for g, r in batch if r.must_sync and self._must_fsync(g)]
        # hard states: the journal's records of the round (partition groups;
        # made durable by one fsync) and the metadata log's own file
        durable: list[Syncable] = [g.storage for g, r in batch
                                   if r.hard_state is not None and g.storage.journal is None]
        for group, _ready in batch:
            group.sync_wanted = False
        if overlap:
            if logs or durable:  # (the metadata log's own hard state; no journal)
                batch = await faults.sync(self.state.flusher, batch, durable, logs,
                                          self.journal)
        elif self.journal.pending:
            durable.append(self.journal)
        if not overlap and (logs or durable):
            # off the event loop; a group whose fsync failed is held back
            self._syncing, self._sync_beats = True, 0
            for group in self._dirty.values():  # what came meanwhile may go beside it
                self._may_go_beside(group)
            try:
                batch = await faults.sync(self.state.flusher, batch, durable, logs, self.journal)
            finally:
                self._syncing = False
                self._beside = {}  # (still dirty: the driver's next round takes them)
        self._send([m for _g, r in batch for m in r.messages], announce)
        for group, ready in batch:
            if group.removed:
                continue
            group.raft.advance(ready)
            faults.advanced(group)
            group.hw = max(group.hw, ready.high_watermark)  # (a commit never goes back)
            self._raise_hw(group)  # the commit ``advance`` moved over this round's entries
            self._publish(group)
            self._touch(group)  # advance may have answered parked fetches
        return bool(batch)

    @staticmethod
    def _raise_hw(group: Group) -> bool:
        """A leader's high watermark raised to its Raft commit before the next
        Ready reports it: the commit ``advance`` moved over the entries a
        round made durable (a lone replica's every append), or that a
        follower's answer moved (``_step``). Durable on a quorum, the
        leader's own part included (never above its durable log end); each
        is a turn of the loop less for the produces waiting on it. True when
        it rose (to publish)."""
        raft = group.raft
        if raft.role is not Role.LEADER:
            return False
        hw = min(raft.high_watermark, raft.log.stable_end)
        if hw <= group.hw:
            return False
        group.hw = hw
        return True

    def _must_fsync(self, group: Group) -> bool:
        """Raft makes entries durable before it sends or acknowledges them. The
        exceptions: partition entries under ``kcompat.flush.mode=never``
        (Kafka's default of relying on replication, not fsync), and a lone
        replica's entries that nobody waits to see durable (acks=0/1: Kafka
        does not sync those either). The metadata log always syncs."""
        if group.gid == METADATA_GROUP:
            return True
        if self._flush_never:
            return False
        return not group.lone or group.sync_wanted

    @property
    def _flush_never(self) -> bool:
        return bool(self.state.config["kcompat.flush.mode"] == "never")

    def _send(self, messages: list[Message], announce: tuple[codec.Announcement, ...]) -> None:
        """A round's messages, a frame per peer; the metadata log's in a frame
        of their own that goes ahead of the queued partition frames
        (``Link.send``'s ``urgent``)."""
        by_peer: dict[int, list[Message]] = {}
        urgent: dict[int, list[Message]] = {}
        for m in messages:
            (urgent if m.group == METADATA_GROUP else by_peer).setdefault(m.dst, []).append(m)
            if isinstance(m, FetchResponse) and m.entries:
                group = self.groups.get(m.group)
                if group is not None and self._catching_up(group, m.dst):
                    self.throttle.spend(sum(len(e.data) for e in m.entries))
        for node, peer in self.peers.items():
            control = urgent.get(node)
            if control:
                peer.send(self._frame(tuple(control)), urgent=True)
            msgs = by_peer.get(node)
            if msgs or announce:
                peer.send(self._frame(tuple(msgs or ()), announce))
            if control or msgs or announce:
                self._sent[node] = self.ticks

    def _frame(self, messages: tuple[Message, ...] = (),
               announce: tuple[codec.Announcement, ...] = (),
               markers: tuple[codec.Internal, ...] = ()) -> bytes:
        """One encoded frame from this broker: its incarnation, and, from a
        broker-only node, where to answer it."""
        return codec.encode(codec.RaftFrame(self.node_id, messages, announce, markers,
                                            self.incarnation, self._reply_to()))

    def _reply_to(self) -> tuple[str, int] | None:
        """A broker-only node's listener, for peers that do not know it yet
        (the bound port: ``--port 0`` picks one)."""
        if self.is_voter:
            return None
        config = self.state.config
        return config["advertised.host"] or config["host"], self.state.advertised_port

    def _announcement(self, group: Group) -> codec.Announcement:
        return codec.Announcement(group.gid, group.raft.term, self.node_id, self.isr(group),
                                  group.storage.plog.log_start_offset)

    def _take_announcements(self) -> tuple[codec.Announcement, ...]:
        if self._announce_all:
            self._announce_all = False
            self._announce.clear()
            due = [g for g in self.groups.values() if g.gid != METADATA_GROUP]
        elif self._announce:
            due = [g for gid in sorted(self._announce) if (g := self.groups.get(gid)) is not None]
            self._announce.clear()
        else:
            return ()
        out = []
        for group in due:
            if group.is_leader and not group.removed:
                group.announced = self._announcement(group)
                out.append(group.announced)
        return tuple(out)

    def _publish(self, group: Group) -> None:
        raft = group.raft
        seen = (raft.role, raft.term, raft.leader, group.hw)
        if seen == group.seen:
            return
        before = group.seen
        group.seen = seen
        if before is None or before[:3] != seen[:3]:
            self._announce.add(group.gid)
            if raft.role is Role.LEADER:  # a lone replica always leads: no news
                log.log(logging.DEBUG if group.lone else logging.INFO,
                        "node %d leads group %d (%s) in term %d", self.node_id, group.gid,
                        group.name, raft.term)
        part = group.part
        if part is not None:
            if raft.leader != NO_NODE:
                part.leader_epoch = raft.term
                self._awaiting_first_leader.discard(group.gid)
            if before is not None and before[3] != seen[3] and \
                    (ann := self.announced.get(group.gid)) is not None:
                # a log start announced while our high watermark was below it:
                # leaders announce on change only, so adopt it once past it
                log_starts.follow_announced(group, ann)
            part.notify_append()
        self._feed(group)
        group.notify()

    def _feed(self, group: Group) -> None:
        """Feed ``group``'s machine within this turn's budget (``Group.feed``);
        what is left waits in ``_feeding`` for the next turns of the driver.
        The metadata log goes first, always with a budget of its own: the
        control plane (registrations, heartbeats, fencing, topics) never waits
        behind the replay of a service's log."""
        if group.machine is None:
            return
        if group.gid == METADATA_GROUP:
            if group.feed(FEED_BUDGET_S):
                self._feeding.pop(group.gid, None)
            else:
                self._feeding[group.gid] = group
                self.kick()
            return
        left = self._feed_deadline - time.monotonic()
        if group.gid in self._feeding or left <= 0 or not group.feed(left):
            self._feeding[group.gid] = group
            self.kick()

    def _feed_more(self) -> None:
        """A turn of the replays left over (after every other task's turn:
        the driver's wake-up checkpoints), then their waiters: the metadata
        log first, then the others in turn — one fed in part goes to the back,
        so every replay moves on however many there are."""
        self._feed_deadline = time.monotonic() + FEED_BUDGET_S
        meta = self._feeding.get(METADATA_GROUP)
        if meta is not None and (meta.removed or meta.feed(FEED_BUDGET_S)):
            del self._feeding[METADATA_GROUP]
            meta.notify()
        for gid, group in list(self._feeding.items()):
            left = self._feed_deadline - time.monotonic()
            if left <= 0:
                break
            if gid == METADATA_GROUP:
                continue
            del self._feeding[gid]
            if group.removed or group.feed(left):
                group.notify()
            else:
                self._feeding[gid] = group  # to the back of the line
        if self._feeding:
            self.kick()

    # -- groups and partitions ------------------------------------------------------------

    def new_group(self, gid: int, replicas: tuple[int, ...], storage: PartitionLogStorage,
                  part: Partition | None = None, voters: tuple[int, ...] | None = None
                  ) -> Group:
        """The Raft group ``gid`` of ``replicas`` here. ``voters``: its voter set
        when it differs (a partition being reassigned: this broker joins as an
        observer and catches up before it votes; a configuration entry in the
        log overrides either)."""
        members = replicas if voters is None else voters
        config = RaftConfig(self.node_id, frozenset(members), gid, self.election_ticks,
                            self.metadata_fetch_wait_ticks if gid == METADATA_GROUP
                            else FETCH_WAIT_TICKS,
                            fetch_timeout_ticks=self.metadata_fetch_timeout_ticks
                            if gid == METADATA_GROUP else 0,
                            always_leader_change=gid == METADATA_GROUP,
                            quiesce=gid != METADATA_GROUP,
                            suspect_skew_ticks=self.heartbeat_ticks + 1)
        # a lone replica's log carries its epochs; ``never`` trusts replication
        storage.durable_hard_state = gid == METADATA_GROUP or not (
            len(replicas) == 1 or self._flush_never)
        group = Group(gid, Raft(config, storage, self.rng, down=self.down), storage, replicas,
                      part)
        if part is not None:
            group.machine = self.machines.get(part.topic)
        self.groups[gid] = group
        self._set_hw_source(group)
        self._touch(group)
        if replicas == (self.node_id,):
            group.raft.campaign()  # a lone replica elects itself at once
        elif part is not None and replicas[0] == self.node_id and group.never_elected \
                and group.raft.is_voter:
            # A brand-new partition: its preferred replica campaigns as soon as
            # the other replicas have applied the record too, instead of
            # everyone waiting out a randomized election timeout (Kafka names
            # a leader at creation).
            first = self.ticks + FIRST_CAMPAIGN_TICKS
            self._first_campaigns[gid] = (first, first + 2 * self.election_ticks)
        self.kick()
        return group

    def set_replicas(self, group: Group, replicas: tuple[int, ...]) -> None:
        """A hosted partition's replicas changed (a reassignment started,
        moved or finished; its Raft voters change through its own log)."""
        group.replicas = replicas
        if len(replicas) > 1 and not self._flush_never:
            group.storage.durable_hard_state = True  # no longer alone: votes count
        self._set_hw_source(group)
        if group.is_leader:
            self._announce.add(group.gid)  # its ISR (within the replicas) may change
        self._touch(group)
        self.kick()

    def change_voters(self, group: Group, add: int | None = None, remove: int | None = None
                      ) -> Entry | ChangeRefused:
        """Add or remove one voter of a group this broker leads (a partition
        reassignment, ``controller.reassignment``)."""
        raft = group.raft
        result = raft.add_voter(add) if add is not None else raft.remove_voter(
            remove if remove is not None else NO_NODE)
        self._touch(group)
        self.kick()
        return result

    @staticmethod
    def _set_hw_source(group: Group) -> None:
        part = group.part
        if part is not None and group.lone:
            # Kafka's high watermark with the leader alone in the ISR: its log
            # end. Waiters for durability (acks=all, coordinators) still wait
            # for the Raft commit after the fsync (``wait_committed``).
            part.hw_source = lambda: part.log.log_end_offset
        elif part is not None:
            part.hw_source = lambda: group.hw

    def _start_first_campaigns(self) -> None:
        """A brand-new partition's preferred replica campaigns (a pre-vote: no
        term is spent) a moment after the record creating it was applied, and
        again every ``FIRST_CAMPAIGN_RETRY_TICKS`` while nobody leads: the
        other replicas drop a vote request for a group they do not know yet,
        and a broker slow to apply the metadata record would otherwise leave
        the partition leaderless for a whole randomized election timeout."""
        for gid, (due, last) in list(self._first_campaigns.items()):
            group = self.groups.get(gid)
            if group is None or group.raft.leader != NO_NODE or not group.never_elected \
                    or self.ticks > last:
                del self._first_campaigns[gid]
            elif self.ticks >= due:
                self._first_campaigns[gid] = (self.ticks + FIRST_CAMPAIGN_RETRY_TICKS, last)
                group.raft.campaign()
                self._touch(group)


def follower_view(term: int, leader: int, ann: codec.Announcement | None
                  ) -> tuple[int, int, tuple[int, ...]]:
    """(leader or -1, leader epoch, isr) of a partition this broker follows:
    its Raft node's term and leader, with the leader's last announcement for
    the ISR. A replica that knows no leader and is not past the announced
    term names the announced leader, as a broker without a replica does (a
    term has one leader at most, and the announcement comes from it):
    - a replica opened after its partition's first election (the open runs
      in a worker thread while the others vote) missed the vote and the new
      leader's BeginQuorumEpoch and sits in the fresh term -1 until the
      leader asks again, a few ticks later. Metadata named the partition
      leaderless then (leader -1, epoch -1), and librdkafka parked its first
      produce to the new topic until its 1 s topic scan;
    - a restarted replica reads its term from disk but not who leads it,
      until the leader's BeginQuorumEpoch or fetch answer comes. Metadata
      named the partition leaderless meanwhile (leader -1, the same epoch);
      librdkafka keeps such an answer for a watermark query and fails it
      with _UNKNOWN_PARTITION without asking again (``test_quiet_failover``
      caught it once in about five runs).
    Only a replica past the announced term (a vote under way) names none."""
    if ann is not None and ann.leader != NO_NODE and (
            ann.term >= term and leader == NO_NODE
            or ann.term == term and ann.leader == leader):
        return ann.leader, ann.term, ann.isr
    return leader, term, (leader,) if leader != NO_NODE else ()


def _cluster_id(voters_text: str) -> str:
    digest = hashlib.sha256(voters_text.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
