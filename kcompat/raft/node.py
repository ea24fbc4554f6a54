"""One Raft group member as a pure state machine: ``tick``, ``step``,
``propose``, ``ready``, ``advance`` (the etcd-io/raft shape, KRaft's messages).

Theory of operation
-------------------
Nothing here does I/O. Time is ``tick()`` (the runtime calls it every
``tick_ms``); randomness is the injected ``random.Random`` that draws election
timeouts; inputs are ``step(message)`` and ``propose(data)``; every effect —
state to persist, entries to write, messages to send, the high watermark —
comes out of ``ready()``. The runtime follows the Ready contract (see
``types.Ready``): persist, sync, then send, then ``advance(ready)``; it must
call ``advance`` before the next ``ready``.

Roles and their step functions: a *follower* pulls entries from the leader
(``_step_follower``); a *pre-candidate* and a *candidate* collect votes
(``_step_candidate``); a *leader* answers fetches and commits
(``_step_leader``). ``step`` first settles terms (§5.1: a higher term turns
any node into a follower; a lower-term message is stale) — except that
pre-votes never change terms (Raft thesis §9.6).

Elections (§5.2): a follower that hears nothing from a leader for its
randomized timeout (``[fetch_timeout, fetch_timeout + election_timeout)``
ticks; ``fetch_timeout_ticks`` is the election timeout unless set) first
runs a pre-vote round at ``term + 1`` without changing its term; only with a
quorum of pre-votes does it become a candidate, raise its term and ask for
real votes (§5.4.1 up-to-date check in both rounds). A voter that has heard
from a live leader within the fetch timeout (its *lease*, held with
``check_quorum``) ignores both kinds of vote request unless they carry
``transfer`` — so a node rejoining from a partition cannot depose a healthy
leader: its pre-votes fail while it is cut off, so its term never rises,
and are ignored once it is back, even when its log is as up-to-date as
theirs (``testdata/rejoin.txt``). This is KIP-996's rule (a voter that has
fetched from its leader refuses pre-votes) with pre-vote and check quorum
both on, as the broker runs every group; with pre-vote alone the lease is
off, as in etcd-io/raft, and only the log check refuses. The winner appends a
leader-change entry (unless ``always_leader_change`` is off and its whole log
is already known committed: then there is no earlier-term entry to commit
through it) and sends BeginQuorumEpoch to all voters, and again to any
voter that stops fetching (it may have missed the announcement, or be stuck
in a higher term it must tell the leader about).

Check quorum: a leader that has not heard from a quorum of voters (itself
included) during a fetch timeout steps down to follower. A voter is
heard when its fetch arrives, and when the runtime says so (``heard``: any
frame from its broker, e.g. the pair heartbeat) — as etcd-io/raft counts any
message. A leader whose fetch wait is half an election timeout (the metadata
log's, KRaft's 500 ms) would otherwise see a live follower's fetches up to
that far apart, and a stall of that follower's loop a little over half an
election timeout could pass a whole check-quorum period without one.

Leadership transfer (thesis §3.10): ``transfer_leadership(target)`` stops
proposals, waits until the target's durable log matches the leader's, and
sends TimeoutNow; the target campaigns at once, skipping pre-vote and leases.
It is abandoned after an election timeout.

The fetch timeout: KRaft's followers wait ``controller.quorum.fetch.timeout.ms``
(2 s by default) without a successful fetch before they campaign, twice its
election timeout and four times its fetch wait, so a leader late by a fetch
wait or two (a busy process on a small host) deposes no one; the broker gives
the metadata log that timeout (``fetch_timeout_ticks``). The partitions' groups
keep the election timeout: their leaders' moves are cheap and their fetch
waits short. A group with a fetch timeout of its own elects only on it: the
runtime's suspicion of a silent peer (``suspect``) does not cut it short, as
KRaft has no such signal.

Fetch timing: a leader parks a fetch that has nothing new for the follower
(no entries, no new high watermark) for at most ``fetch_wait_ticks`` and
answers it as soon as there is (Kafka's long poll); a follower re-sends a
fetch that got no answer within ``fetch_wait_ticks + 2`` ticks.

Quiescence (``RaftConfig.quiesce``; CockroachDB's quiesced ranges, TiKV's
hibernate regions): a group without traffic stops costing anything. A leader
whose log is entirely committed, known to every live follower and durable
there (each has a fetch parked at the log end and has been told the high
watermark) answers those fetches with ``quiesce`` and stops ticking; a
follower that gets such an answer while its log matches re-sends its fetch
marked ``quiet`` and stops ticking too — no fetch re-sends, no election timer.
The leader parks a quiet fetch without waking, so the next proposal answers
it at once, as a parked fetch always is. Anything else wakes a quiesced
member: any other message, a proposal, a campaign or transfer. Liveness
comes from outside (one heartbeat per broker pair, see the runtime): the
runtime keeps ``down``, the peers it has not heard from for an election
timeout, and calls ``suspect(node)`` when a peer goes down — a follower of
it (quiesced or not) drops its lease and campaigns in an order all members
derive alike (``_succession_rank``), the first a couple of ticks later — and
``revive(node)`` when one is heard again — a quiesced leader wakes unless
that follower's fetch is still parked at the log end, so a follower that
missed entries catches up — or restarted (then the leader also announces
itself to it at once). A leader quiesces with down
followers left out, as long as a quorum is live and caught up. Observers
(below) quiesce like followers: the leader waits for each it knows that is
not down (they are not counted for the quorum), else one whose wake-up was
lost would sleep behind for good.

Membership (Raft thesis §4.1, single-server changes; KIP-853). The voter set
in force is the last configuration entry *in the log* — committed or not,
on leader and followers alike — else the snapshot's, else the configured
``RaftConfig.voters`` (``RaftLog.voters``); appending such an entry switches
at once, truncating it reverts. Everything that counts votes, commits,
checks quorum, announces or ranks a succession reads that set (``voters``).
A node outside it is an *observer* (a learner): it fetches from the leader
like a follower, never campaigns and is never counted; when it knows no
leader it sends its fetch to each voter in turn, and a non-leader's rejection
names the leader (KRaft's observers fetching from the bootstrap servers). A
leader answers anybody's fetch and keeps a ``Progress`` for each observer
(``caught_up``), dropped once the runtime holds it down and it has not
fetched for two election timeouts (a live one may be quiesced with its
quiet fetch lost); it re-announces itself to a silent one as to a voter, and when it steps down
it tells each (a rejected fetch naming the leader if known, repeated while
it ticks until the observer answers, for two election timeouts) — nobody
else knows them, and a quiesced observer would sleep on under a leader that
leads no more.

``add_voter(node)`` / ``remove_voter(node)`` append one configuration entry,
the whole new set, and are refused (a ``ChangeRefused``, nothing appended)
when not leader or transferring, while the last configuration entry is not
committed (one change at a time, so any two sets in force overlap in a
majority), before an entry of the leader's term is committed (else an
older leader's uncommitted change, not in our log, could still commit and
race ours — the thesis' §4.1 bug fix and KIP-853's wait for the
LeaderChangeMessage; a partition leader, which writes no leader-change entry
when its log is all committed, writes one on the first change request), for
a duplicate or unknown voter, for the last voter, and for a node not caught up (its durable match
within ``catch_up_max_lag`` offsets of the log end, a fetch within an
election timeout; KIP-853 waits for this). A leader that removed itself
keeps leading, not counting itself, until that entry commits, then resigns
with TimeoutNow to its most caught-up voter and carries on as an observer.

A removed voter cannot depose the leader: votes are granted to any
candidate that asks, voter or not (a new voter may be needed before it knows
it is one — KIP-853 accepts Vote from all replicas), but a leader never
grants to, or takes the term of, a non-voter's vote request — it announces
itself instead (BeginQuorumEpoch) when the requester's term is not above its
own, so the stale voter fetches and learns from the log that it is an
observer — nor the higher term of a non-voter's refusal of that
announcement; others ignore a non-voter's vote request while they hear from
a leader (a lease, even without check quorum) or when their log is more
up-to-date (without pre-vote its term rises at each timeout; taking it would
keep voters' pre-votes failing). With pre-vote (the broker's setting) the
removed node's term never rises at all. A node learns that it is a voter
again from the log, the same way. While no configuration entry was ever
written and every node is a voter, none of this changes a message.
"""

from __future__ import annotations

import enum
from collections.abc import Set
from dataclasses import dataclass, field
from typing import Protocol

from kcompat.raft import replication
from kcompat.raft.log import RaftLog
from kcompat.raft.storage import LogStorage
from kcompat.raft.types import (
    LEADER_MESSAGES,
    NO_NODE,
    BeginQuorumEpoch,
    ChangeRefused,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HardState,
    Message,
    NotLeader,
    Ready,
    Refusal,
    SnapshotId,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

# ticks a member waits after it suspects its leader before it campaigns: the
# other members notice the silence up to a pair heartbeat and a tick later
# (``RaftConfig.suspect_skew_ticks``; the runtime's is its heartbeat + 1)
SUSPECT_SKEW_TICKS = 2


class RandomSource(Protocol):
    """What the core needs of an injected ``random.Random`` (the module itself
    is off limits to the sans-IO core)."""

    def randint(self, a: int, b: int) -> int: ...


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: int
    voters: frozenset[int]
    group: int = 0
    election_timeout_ticks: int = 10
    fetch_wait_ticks: int = 3
    # how long a follower waits without word from its leader before it
    # campaigns, the lease and the check-quorum period (see "The fetch
    # timeout" above); 0: the election timeout
    fetch_timeout_ticks: int = 0
    max_fetch_bytes: int = 1 << 20
    pre_vote: bool = True
    check_quorum: bool = True
    # Append the leader-change entry even when every entry in the new leader's
    # log is already known committed (the entry exists to commit earlier terms'
    # entries, §5.4.2). KRaft's metadata log always has it; Kafka partitions
    # have no such record, so partition groups skip it when it is not needed
    # and a new topic's first record is at offset 0, as clients expect.
    always_leader_change: bool = True
    # Stop ticking while the group has no traffic (see "Quiescence" above).
    quiesce: bool = False
    # ``add_voter``: how far (offsets) the new voter's durable log may end
    # behind the leader's (see "Membership" above).
    catch_up_max_lag: int = 1000
    # ``suspect``: how much later than this member the others may notice a
    # silent leader (the runtime's pair heartbeat period and a tick)
    suspect_skew_ticks: int = SUSPECT_SKEW_TICKS

    def __post_init__(self) -> None:
        assert self.voters, "no voters"
        assert 0 < self.fetch_wait_ticks < self.election_timeout_ticks
        assert self.fetch_timeout_ticks == 0 or \
            self.fetch_timeout_ticks >= self.election_timeout_ticks

    @property
    def fetch_timeout(self) -> int:
        """``fetch_timeout_ticks``, or the election timeout when unset."""
        return self.fetch_timeout_ticks or self.election_timeout_ticks


@dataclass(slots=True)
class Progress:
    """The leader's view of one follower."""

    match_end: int = 0  # durable prefix known to match the leader's log
    active: bool = False  # heard (a fetch, or ``heard``) this check-quorum period
    idle_ticks: int = 0  # ticks since its last fetch (re-announce when idle)
    hw_sent: int = -1
    parked: FetchRequest | None = None
    parked_ticks: int = 0


@dataclass(frozen=True, slots=True)
class Status:
    node_id: int
    role: Role
    term: int
    vote: int
    leader: int
    log_start: int
    log_end: int
    stable_end: int
    last_term: int
    high_watermark: int
    match_ends: dict[int, int] = field(default_factory=dict)
    idle_ticks: dict[int, int] = field(default_factory=dict)  # leader: ticks since each fetched
    voters: frozenset[int] = frozenset()  # the voter set in force
    config_pending: bool = False  # its configuration entry is not committed yet


class Raft:
    def __init__(
        self, config: RaftConfig, storage: LogStorage, rng: RandomSource, high_watermark: int = 0,
        down: Set[int] = frozenset(),
    ) -> None:
        self.config = config
        self.id = config.node_id
        self.group = config.group
        self.rng = rng
        self.log = RaftLog(storage)
        hs = storage.hard_state()
        self._persisted = hs
        self.term = hs.term
        self.vote = hs.vote
        self.role = Role.FOLLOWER
        self.leader = NO_NODE
        if self.voters == {self.id}:
            # A lone voter: what its log holds is committed (no other member can
            # hold a different history), so a restart needs no leader-change entry.
            high_watermark = self.log.end
        self.high_watermark = min(max(high_watermark, self.log.start), self.log.end)
        # The highest high watermark a leader has told us (ours while leading):
        # how far this member must get before its state is caught up.
        self.heard_high_watermark = self.high_watermark
        self._reported_hw = -1
        self._msgs: list[Message] = []
        self._outstanding: Ready | None = None
        self._votes: dict[int, bool] = {}
        self._progress: dict[int, Progress] = {}
        self._transfer_to = NO_NODE
        self._transfer_ticks = 0
        self._election_elapsed = 0
        self._timeout = 0
        self._fetch_ticks: int | None = None
        self._want_snapshot: SnapshotId | None = None
        self._contact = -1  # an observer without a leader: the voter asked last
        self._orphans: dict[int, int] = {}  # observers of our last leadership -> ticks left
        # the peers the runtime's liveness considers down (its live set, read here)
        self._down = down
        self.quiesced = False
        self._reset_timeout()
        if not self.is_voter:
            self._send_fetch()  # an observer looks for the leader at once

    # -- public API --------------------------------------------------------------

    @property
    def voters(self) -> frozenset[int]:
        """The voter set in force (see "Membership" above)."""
        voters = self.log.voters
        return self.config.voters if voters is None else voters

    @property
    def is_voter(self) -> bool:
        return self.id in self.voters

    @property
    def _quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def voters_at(self, end: int) -> frozenset[int] | None:
        """The voter set a snapshot ending at ``end`` must record
        (``Snapshot.voters``; None while no configuration was ever written)."""
        return self.log.voters_at(end)

    def tick(self) -> None:
        """Advance logical time by one tick (nothing happens while quiesced)."""
        if self.quiesced:
            return
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def step(self, m: Message) -> None:
        """Feed one message addressed to this node."""
        assert m.group == self.group and m.dst == self.id, f"misrouted {m}"
        if self._orphans:
            self._orphans.pop(m.src, None)  # it heard us (or never needed to)
        if self.quiesced:
            if self._park_quiet(m):
                return
            self._wake()
        if isinstance(m, VoteRequest) and m.src not in self.voters and self._ignore_vote(m):
            return
        if (m.term > self.term and self.role is Role.LEADER
                and isinstance(m, FetchResponse) and m.src not in self.voters):
            # a non-voter's refusal of our announcement: its term rose while
            # it did not know it was removed (no pre-vote); it cannot depose us
            return
        if m.term > self.term and not self._on_higher_term(m):
            return
        if m.term < self.term:
            self._on_lower_term(m)
            return
        if isinstance(m, VoteRequest):
            self._on_vote_request(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role is Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    def propose(self, data: bytes, count: int = 1) -> Entry | NotLeader:
        """Append one entry (a batch of ``count`` offsets) if leader."""
        if self.role is not Role.LEADER or self._transfer_to != NO_NODE:
            return NotLeader(self.leader if self.role is not Role.LEADER else NO_NODE, self.term)
        if self.quiesced:
            self._wake()
        entry = Entry(self.log.end, self.term, data, count)
        self.log.append(entry)
        self._answer_parked()
        return entry

    def add_voter(self, node: int) -> Entry | ChangeRefused:
        """Leader: append a configuration entry adding ``node`` (an observer
        that has caught up); see "Membership" above."""
        refusal = self._change_refusal(node in self.voters and Refusal.ALREADY_VOTER)
        if refusal is None and not self.caught_up(node):
            refusal = Refusal.NOT_CAUGHT_UP
        if refusal is not None:
            return self._refused(refusal)
        return self._append_config(self.voters | {node})

    def remove_voter(self, node: int) -> Entry | ChangeRefused:
        """Leader: append a configuration entry removing ``node`` (may be
        the leader itself: it resigns once the entry is committed)."""
        invalid = (node not in self.voters and Refusal.NOT_A_VOTER
                   or self.voters == {node} and Refusal.LAST_VOTER)
        refusal = self._change_refusal(invalid)
        if refusal is not None:
            return self._refused(refusal)
        return self._append_config(self.voters - {node})

    def caught_up(self, node: int) -> bool:
        """Leader: ``node`` fetched within an election timeout and its durable
        log ends within ``catch_up_max_lag`` of ours."""
        progress = self._progress.get(node) if self.role is Role.LEADER else None
        return (
            progress is not None
            and progress.idle_ticks < self.config.election_timeout_ticks
            and self.log.end - progress.match_end <= self.config.catch_up_max_lag
        )

    def campaign(self) -> None:
        """Start an election now, as if the election timeout had elapsed."""
        if self.role is not Role.LEADER:
            self.quiesced = False
            self._hup(transfer=False)

    def transfer_leadership(self, target: int) -> bool:
        """Begin handing leadership to ``target``; False if not possible."""
        if self.role is not Role.LEADER or target == self.id or target not in self.voters:
            return False
        if self.quiesced:
            self._wake()
        self._transfer_to = target
        self._transfer_ticks = 0
        self._maybe_send_timeout_now()
        return True

    def compact(self, snapshot_id: SnapshotId) -> None:
        """Storage now holds ``snapshot_id`` and dropped the entries below it
        (a metadata snapshot, or a partition log's raised log start)."""
        assert snapshot_id.end <= self.high_watermark, "only committed entries are compacted"
        self.log.compact(snapshot_id)

    def has_ready(self) -> bool:
        return (self.log.end != self.log.written_end
                or self.high_watermark != self._reported_hw
                or not self.appends_only())

    def appends_only(self) -> bool:
        """The next Ready would hold entries and a high watermark at most: no
        message, hard state, truncation or snapshot (what a runtime may make
        durable beside another Ready's round: ``ClusterRuntime._overlap``)."""
        return (not self._msgs and self.log.truncate_pending is None
                and self.log.snapshot_pending is None
                and HardState(self.term, self.vote) == self._persisted)

    def ready(self) -> Ready:
        """Collect the pending effects (see ``types.Ready`` for the contract)."""
        assert self._outstanding is None, "advance the previous Ready first"
        log = self.log
        hs = HardState(self.term, self.vote)
        ready = Ready(
            hard_state=hs if hs != self._persisted else None,
            snapshot=log.snapshot_pending,
            truncate_from=log.truncate_pending,
            entries=tuple(log.unstable),
            high_watermark=self.high_watermark,
            messages=tuple(self._msgs),
        )
        self._msgs.clear()
        log.handed_out()
        self._reported_hw = self.high_watermark
        self._outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """The runtime has persisted ``ready`` and sent its messages."""
        assert ready is self._outstanding, "advance the Ready last returned"
        self._outstanding = None
        if ready.hard_state is not None:
            self._persisted = ready.hard_state
        if ready.entries:
            self.log.stable_to(ready.entries[-1].end)
        if self.role is Role.LEADER:
            self._maybe_commit()

    def followers(self) -> list[tuple[int, int, int]]:
        """(node, match end, idle ticks) of each follower the leader tracks:
        ``status()``'s ``match_ends`` and ``idle_ticks`` without the rest."""
        return [(i, p.match_end, p.idle_ticks) for i, p in self._progress.items()]

    def status(self) -> Status:
        log = self.log
        matches = {i: p.match_end for i, p in self._progress.items()}
        idle = {i: p.idle_ticks for i, p in self._progress.items()}
        pending = log.pending_config
        return Status(
            self.id, self.role, self.term, self.vote, self.leader, log.start, log.end,
            log.stable_end, log.last_term, self.high_watermark, matches, idle, self.voters,
            pending is not None and pending >= self.high_watermark,
        )  # fmt: skip

    # -- terms -------------------------------------------------------------------

    def _on_higher_term(self, m: Message) -> bool:
        """§5.1 with the pre-vote and lease exceptions; False drops ``m``."""
        if isinstance(m, VoteRequest):
            if self._in_lease() and not m.transfer:
                return False
            if not m.pre_vote:
                self._become_follower(m.term, NO_NODE)
            return True
        if isinstance(m, VoteResponse) and m.pre_vote and m.granted:
            return True  # granted pre-votes carry the proposed term
        leader = NO_NODE
        if isinstance(m, LEADER_MESSAGES):
            leader = m.src
        elif isinstance(m, FetchResponse):
            leader = m.leader
        self._become_follower(m.term, leader)
        return True

    def _on_lower_term(self, m: Message) -> None:
        """A stale sender: tell it our term where that helps it catch up."""
        if isinstance(m, FetchRequest | BeginQuorumEpoch):
            self._send(self._rejected_fetch(m.src))
        elif isinstance(m, VoteRequest) and m.pre_vote:
            self._send(VoteResponse(self.group, self.id, m.src, self.term, False, True))

    def _ignore_vote(self, m: VoteRequest) -> bool:
        """A vote request from a non-voter (a removed voter that does not
        know it yet, or a new one we do not know of yet): a leader never
        takes it up — it announces itself if the requester's term is not
        above ours, so the requester fetches and learns its part from the
        log. Nor does anyone whose log is more up-to-date (the vote would be
        refused; its term, raised without pre-vote, is not taken either, so
        it cannot hold off the election of a voter), or who hears from a
        leader — a follower that knows the leader names it (a rejected fetch),
        as the leader itself is not among the voters a stale node asks when
        it missed the change that made the leader a voter."""
        own_term = m.term - 1 if m.pre_vote else m.term
        if self.role is Role.LEADER:
            if own_term <= self.term:
                self._send(BeginQuorumEpoch(self.group, self.id, m.src, self.term))
            return True
        if self.leader not in (NO_NODE, self.id) and own_term <= self.term:
            # name the leader: a removed voter back with a stale voter set may
            # not count it among the voters it asks, and would never hear it
            self._send(self._rejected_fetch(m.src))
        if not self.log.is_up_to_date(m.last_term, m.log_end):
            return True
        return (
            not m.transfer
            and self.leader != NO_NODE
            and self._election_elapsed < self.config.fetch_timeout
        )

    def _in_lease(self) -> bool:
        return (
            self.config.check_quorum
            and self.leader != NO_NODE
            and self._election_elapsed < self.config.fetch_timeout
        )

    def _on_vote_request(self, m: VoteRequest) -> None:
        up_to_date = self.log.is_up_to_date(m.last_term, m.log_end)
        if m.pre_vote:
            granted = m.term > self.term and up_to_date
        else:
            free = self.vote == m.src or (self.vote == NO_NODE and self.leader == NO_NODE)
            granted = free and up_to_date
            if granted:
                self.vote = m.src
                self._election_elapsed = 0
        term = m.term if granted and m.pre_vote else self.term
        self._send(VoteResponse(self.group, self.id, m.src, term, granted, m.pre_vote))

    # -- role changes ------------------------------------------------------------

    def _reset_timeout(self) -> None:
        et = self.config.election_timeout_ticks
        self._election_elapsed = 0
        # a follower of a known leader waits its fetch timeout; one that knows
        # none, and a (pre-)candidate trying again, an election timeout (as
        # KRaft's unattached voters and candidates do)
        base = (self.config.fetch_timeout
                if self.role is Role.FOLLOWER and self.leader != NO_NODE else et)
        self._timeout = base + self.rng.randint(0, et - 1)

    def _become_follower(self, term: int, leader: int) -> None:
        if term > self.term:
            self.term = term
            self.vote = NO_NODE
        observers: list[int] = []
        if self.role is Role.LEADER:
            voters = self.voters
            observers = sorted(p for p in self._progress if p not in voters)
            self._progress.clear()
            self._transfer_to = NO_NODE
        self.role = Role.FOLLOWER
        self.leader = leader
        self._want_snapshot = None
        self._reset_timeout()
        if leader != NO_NODE and leader != self.id:
            self._send_fetch()
        elif not self.is_voter:
            self._fetch_ticks = 0  # an observer keeps asking the voters in turn
        else:
            self._fetch_ticks = None
        # nobody else knows our observers: tell each (again, while we tick,
        # until it answers, for two election timeouts) or a quiesced one
        # would sleep on under a leader that leads no more
        if observers:
            self._orphans = dict.fromkeys(observers, 2 * self.config.election_timeout_ticks)
        for observer in observers:
            self._send(self._rejected_fetch(observer))

    def _hup(self, transfer: bool) -> None:
        if not self.is_voter:
            # an observer never campaigns: it looks for the leader instead
            self._become_follower(self.term, NO_NODE)
            self._send_fetch()
            return
        if self.config.pre_vote and not transfer:
            self._become_pre_candidate()
        else:
            self._become_candidate(transfer)

    def _become_pre_candidate(self) -> None:
        self.role = Role.PRE_CANDIDATE
        self.leader = NO_NODE
        self._fetch_ticks = None
        self._reset_timeout()
        self._start_poll(pre_vote=True, transfer=False)

    def _become_candidate(self, transfer: bool) -> None:
        self.role = Role.CANDIDATE
        self.term += 1
        self.vote = self.id
        self.leader = NO_NODE
        self._fetch_ticks = None
        self._reset_timeout()
        self._start_poll(pre_vote=False, transfer=transfer)

    def _start_poll(self, pre_vote: bool, transfer: bool) -> None:
        self._votes = {self.id: True}
        term = self.term + 1 if pre_vote else self.term
        for peer in sorted(self.voters - {self.id}):
            self._send(VoteRequest(
                self.group, self.id, peer, term, self.log.last_term, self.log.end,
                pre_vote, transfer,
            ))  # fmt: skip
        self._tally()

    def _tally(self) -> None:
        voters = self.voters
        granted = sum(1 for n, v in self._votes.items() if v and n in voters)
        rejected = sum(1 for n, v in self._votes.items() if not v and n in voters)
        if granted >= self._quorum:
            if self.role is Role.PRE_CANDIDATE:
                self._become_candidate(transfer=False)
            else:
                self._become_leader()
        elif rejected >= self._quorum:
            self._become_follower(self.term, NO_NODE)

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader = self.id
        self._election_elapsed = 0
        self._want_snapshot = None
        self._fetch_ticks = None
        self._progress = {p: Progress() for p in self.voters - {self.id}}
        if self.config.always_leader_change or self.log.end > self.high_watermark:
            self.log.append(Entry(self.log.end, self.term, b"", 1, control=True))
        for peer in sorted(self._progress):
            self._send(BeginQuorumEpoch(self.group, self.id, peer, self.term))

    # -- candidate ---------------------------------------------------------------

    def _step_candidate(self, m: Message) -> None:
        if isinstance(m, VoteResponse):
            if m.pre_vote == (self.role is Role.PRE_CANDIDATE):
                self._votes.setdefault(m.src, m.granted)
                self._tally()
        elif isinstance(m, BeginQuorumEpoch | FetchSnapshotResponse | TimeoutNow):
            self._become_follower(m.term, m.src)
            self._step_follower(m)
        elif isinstance(m, FetchResponse) and m.leader != NO_NODE:
            self._become_follower(m.term, m.leader)
            self._step_follower(m)
        elif isinstance(m, FetchRequest):
            self._send(self._rejected_fetch(m.src))

    # -- follower ----------------------------------------------------------------

    def _step_follower(self, m: Message) -> None:
        if isinstance(m, FetchResponse):
            self._on_fetch_response(m)
        elif isinstance(m, BeginQuorumEpoch):
            self._follow(m.src)
        elif isinstance(m, FetchSnapshotResponse):
            self._follow(m.src)
            self._on_snapshot(m)
        elif isinstance(m, TimeoutNow):
            if m.src == self.leader or self.leader == NO_NODE:
                self._hup(transfer=True)
        elif isinstance(m, FetchRequest):
            self._send(self._rejected_fetch(m.src))

    def _follow(self, leader: int) -> None:
        """Contact from the leader of our term: adopt it and restart the timer."""
        if self.leader != leader:
            self.leader = leader
            self._want_snapshot = None
            self._send_fetch()
            if self.config.fetch_timeout_ticks:
                self._reset_timeout()  # a known leader: the fetch timeout from now on
        elif self._fetch_ticks is None:
            self._send_fetch()
        self._election_elapsed = 0

    def _send_fetch(self, quiet: bool = False) -> None:
        self._fetch_ticks = 0
        dst = self.leader
        if dst == NO_NODE:
            # an observer looking for the leader: each voter in turn
            others = sorted(self.voters - {self.id})
            if not others:
                self._fetch_ticks = None
                return
            self._contact = (self._contact + 1) % len(others)
            dst = others[self._contact]
        if self._want_snapshot is not None:
            self._send(FetchSnapshotRequest(
                self.group, self.id, dst, self.term, self._want_snapshot,
            ))  # fmt: skip
            return
        self._send(FetchRequest(
            self.group, self.id, dst, self.term, self.log.end, self.log.last_term, quiet,
        ))  # fmt: skip

    def _on_fetch_response(self, m: FetchResponse) -> None:
        if m.rejected:
            if m.leader not in (NO_NODE, self.id, self.leader):
                self._follow(m.leader)
            return
        self._follow(m.src)
        self.heard_high_watermark = max(self.heard_high_watermark, m.high_watermark)
        log = self.log
        stale = (m.fetch_offset, m.last_fetched_term) != (log.end, log.last_term)
        if stale or self._want_snapshot is not None:
            return
        if m.snapshot_id is not None:
            self._want_snapshot = m.snapshot_id
        elif m.diverging is not None:
            point = replication.truncation_point(log, m.diverging)
            assert point >= self.high_watermark, f"diverging below the hw at {point}"
            log.truncate(point)
        else:
            for entry in m.entries:
                log.append(entry)
            self._raise_hw(min(m.high_watermark, log.end))
            if (m.quiesce and self.config.quiesce and not m.entries
                    and self.high_watermark == log.end):
                self._send_fetch(quiet=True)
                self.quiesced = True
                return
        self._send_fetch()

    def _on_snapshot(self, m: FetchSnapshotResponse) -> None:
        if self._want_snapshot is None or m.snapshot.id.end <= self.high_watermark:
            return
        self.log.restore(m.snapshot)
        self._want_snapshot = None
        self._raise_hw(m.snapshot.id.end)
        self._send_fetch()

    def _raise_hw(self, hw: int) -> None:
        if hw > self.high_watermark:
            self.high_watermark = hw

    def _rejected_fetch(self, dst: int) -> FetchResponse:
        leader = self.leader
        return FetchResponse(self.group, self.id, dst, self.term, leader, -1, -1, rejected=True)

    # -- leader ------------------------------------------------------------------

    def _step_leader(self, m: Message) -> None:
        if isinstance(m, FetchRequest):
            self._on_fetch_request(m)
        elif isinstance(m, FetchSnapshotRequest):
            progress = self._peer(m.src)
            progress.active, progress.idle_ticks = True, 0
            snapshot = self.log.storage.snapshot()
            if snapshot.id.end >= self.log.start:
                self._send(FetchSnapshotResponse(self.group, self.id, m.src, self.term, snapshot))

    def _peer(self, node: int) -> Progress:
        """The leader's progress of ``node``; a new one for an observer."""
        progress = self._progress.get(node)
        if progress is None:
            progress = self._progress[node] = Progress()
        return progress

    def _on_fetch_request(self, m: FetchRequest) -> None:
        progress = self._peer(m.src)
        progress.active, progress.idle_ticks = True, 0
        progress.parked = None
        check = replication.validate_fetch(self.log, m.fetch_offset, m.last_fetched_term)
        if check.match_end is not None and check.match_end > progress.match_end:
            progress.match_end = check.match_end
            self._maybe_commit()
            if self.role is not Role.LEADER:  # resigned: that commit removed us
                self._send(self._rejected_fetch(m.src))
                return
            if m.src == self._transfer_to:
                self._maybe_send_timeout_now()
        self._answer_fetch(m, check, force=False)

    def _answer_fetch(self, m: FetchRequest, check: replication.FetchCheck, force: bool) -> None:
        progress = self._progress[m.src]
        entries: tuple[Entry, ...] = ()
        if check.match_end is not None:
            entries = tuple(self.log.entries_from(
                m.fetch_offset, m.max_bytes or self.config.max_fetch_bytes))
            if not entries and progress.hw_sent == self.high_watermark and not force:
                progress.parked = m
                progress.parked_ticks = 0
                return
            progress.hw_sent = self.high_watermark
        self._send(FetchResponse(
            self.group, self.id, m.src, self.term, self.id, m.fetch_offset,
            m.last_fetched_term, self.high_watermark, entries, check.diverging,
            check.snapshot_id,
        ))  # fmt: skip

    def _answer_parked(self, expired_only: bool = False) -> None:
        for progress in self._progress.values():
            m = progress.parked
            if m is None or (expired_only and progress.parked_ticks < self.config.fetch_wait_ticks):
                continue
            progress.parked = None
            check = replication.validate_fetch(self.log, m.fetch_offset, m.last_fetched_term)
            self._answer_fetch(m, check, force=expired_only)

    def _maybe_commit(self) -> None:
        voters = self.voters
        progress = self._progress
        ends = [self.log.stable_end if v == self.id else progress[v].match_end for v in voters]
        match = replication.quorum_end(ends, len(voters) // 2 + 1)
        hw = replication.next_high_watermark(self.log, self.term, self.high_watermark, match)
        if hw != self.high_watermark:
            self.high_watermark = hw
            self.heard_high_watermark = max(self.heard_high_watermark, hw)
            self._answer_parked()
            if self.id not in voters:
                self._maybe_resign()

    # -- membership --------------------------------------------------------------

    def _change_refusal(self, invalid: Refusal | bool) -> Refusal | None:
        """What forbids a voter change now (see "Membership" above); after
        leadership, an ``invalid`` request is refused as such."""
        if self.role is not Role.LEADER or self._transfer_to != NO_NODE:
            return Refusal.NOT_LEADER
        if isinstance(invalid, Refusal):
            return invalid
        pending = self.log.pending_config
        if pending is not None and pending >= self.high_watermark:
            return Refusal.CHANGE_PENDING
        log = self.log
        if self.high_watermark == 0 or log.term_at(self.high_watermark - 1) != self.term:
            # nothing of our term committed yet: an older leader's uncommitted
            # change, not in our log, could still commit and race ours. A
            # leader without a leader-change entry (a partition whose log was
            # all committed at election) writes one now, once.
            if not log.epochs or log.last_term != self.term:  # (an empty log: term 0 too)
                if self.quiesced:
                    self._wake()
                log.append(Entry(log.end, self.term, b"", 1, control=True))
                self._answer_parked()
            return Refusal.TERM_NOT_COMMITTED
        return None

    def _refused(self, reason: Refusal) -> ChangeRefused:
        leader = self.leader if self.role is not Role.LEADER else NO_NODE
        return ChangeRefused(reason, leader, self.term)

    def _append_config(self, voters: frozenset[int]) -> Entry:
        if self.quiesced:
            self._wake()
        entry = Entry(self.log.end, self.term, b"", 1, control=True, voters=voters)
        self.log.append(entry)  # in force from now on
        for peer in voters - {self.id}:
            self._peer(peer)
        self._answer_parked()
        self._maybe_commit()  # a smaller quorum may commit earlier entries now
        return entry

    def _maybe_resign(self) -> None:
        """A leader outside the voter set leads until that configuration is
        committed, then hands over to its most caught-up voter."""
        pending = self.log.pending_config
        if pending is None or pending >= self.high_watermark:
            return
        target = max(sorted(self.voters), key=lambda v: self._progress[v].match_end)
        self._send(TimeoutNow(self.group, self.id, target, self.term))
        self._become_follower(self.term, NO_NODE)
        self._send_fetch()

    def _maybe_send_timeout_now(self) -> None:
        target = self._transfer_to
        if target != NO_NODE and self._progress[target].match_end == self.log.end:
            self._send(TimeoutNow(self.group, self.id, target, self.term))

    # -- ticks -------------------------------------------------------------------

    def _tick_election(self) -> None:
        if self._orphans:
            self._tell_orphans()
        self._election_elapsed += 1
        if self._fetch_ticks is not None:
            self._fetch_ticks += 1
            if self._fetch_ticks >= self.config.fetch_wait_ticks + 2:
                self._send_fetch()
        if self._election_elapsed >= self._timeout:
            self._hup(transfer=False)

    def _tell_orphans(self) -> None:
        resend = self._election_elapsed % (self.config.fetch_wait_ticks + 2) == 0
        for observer, left in sorted(self._orphans.items()):
            if left <= 1:
                del self._orphans[observer]
                continue
            self._orphans[observer] = left - 1
            if resend:
                self._send(self._rejected_fetch(observer))

    def _tick_leader(self) -> None:
        self._election_elapsed += 1
        for progress in self._progress.values():
            progress.idle_ticks += 1
            if progress.parked is not None:
                progress.parked_ticks += 1
        # before the expired parked fetches are answered: a follower whose
        # answer is in flight is not parked, and fetch waits that expire on
        # different ticks would otherwise never leave every follower parked
        self._maybe_quiesce()
        if self.quiesced:
            return
        self._answer_parked(expired_only=True)
        if self._transfer_to != NO_NODE:
            self._transfer_ticks += 1
            if self._transfer_ticks >= self.config.election_timeout_ticks:
                self._transfer_to = NO_NODE
        wait = self.config.fetch_wait_ticks
        voters = self.voters
        if len(self._progress) >= len(voters):  # observers too: forget those gone
            gone = 2 * self.config.election_timeout_ticks
            for peer in [p for p, pr in self._progress.items()
                         if p not in voters and pr.idle_ticks >= gone and p in self._down]:
                del self._progress[peer]
        for peer, progress in sorted(self._progress.items()):
            idle = progress.idle_ticks - wait - 2
            if idle >= 0 and idle % wait == 0:
                self._send(BeginQuorumEpoch(self.group, self.id, peer, self.term))
        if self._election_elapsed >= self.config.fetch_timeout:
            self._check_quorum()

    def heard(self, node: int) -> None:
        """The runtime heard from ``node``'s broker (any frame): a leader
        counts it as active for this check-quorum period (see "Check quorum"
        above). Nothing else changes: its fetches still drive replication,
        re-announcements and quiescence."""
        if self.role is Role.LEADER:
            progress = self._progress.get(node)
            if progress is not None:
                progress.active = True

    def _check_quorum(self) -> None:
        self._election_elapsed = 0
        voters = self.voters
        active = (self.id in voters) + sum(
            1 for peer, p in self._progress.items() if p.active and peer in voters
        )
        for progress in self._progress.values():
            progress.active = False
        if self.config.check_quorum and active < self._quorum:
            self._become_follower(self.term, NO_NODE)

    # -- quiescence --------------------------------------------------------------

    def suspect(self, node: int) -> None:
        """The runtime stopped hearing from ``node`` (it is in ``down`` now)."""
        if node not in self.voters:
            return
        if self.role is not Role.LEADER and self.leader == node:
            # Our leader is gone (a quiesced follower's timers are stopped; an
            # awake one may hold a lease from a frozen count): no lease, and
            # an election in an order every member derives alike — so they do
            # not split the vote — after ``suspect_skew_ticks`` (the others
            # notice the silence up to a heartbeat later and must be out of
            # their lease to grant), then half an election timeout per rank.
            self.quiesced = False
            et = self.config.election_timeout_ticks
            if self.config.fetch_timeout_ticks:
                return  # it elects on its fetch timeout alone (see the module)
            if self._election_elapsed < et:
                self._election_elapsed = et
                self._timeout = (et + self.config.suspect_skew_ticks
                                 + self._succession_rank(node) * (et // 2))
        elif self.quiesced and self.role is Role.LEADER:
            live = sum(1 for v in self.voters if v == self.id or v not in self._down)
            if live < self._quorum:
                self._wake()  # check quorum will depose us unless fetches come

    def _succession_rank(self, gone: int) -> int:
        """0 for the live member that should campaign first when ``gone``
        leads no more, 1 for the next...: a rotation by group id, so the
        new leaders of many groups spread over the members."""
        live = sorted(v for v in self.voters if v != gone and v not in self._down)
        if self.id not in live:
            return 0
        return (live.index(self.id) - self.group % len(live)) % len(live)

    def revive(self, node: int, restarted: bool = False) -> None:
        """``node`` is heard from again, or ``restarted``. A quiesced leader
        wakes if that follower may lack entries (it was left out while down).
        A restart also lost the follower's parked fetch and its knowledge of
        the leader: any leader forgets that fetch and announces itself at
        once, so the follower names its leader within a round trip, not after
        its own election timeout (a re-sent announcement follows while it
        stays silent). A follower need not wake: a leader that is back answers
        our parked fetch, or wakes on its next proposal and re-sends
        BeginQuorumEpoch when our fetch is lost."""
        progress = self._progress.get(node) if self.role is Role.LEADER else None
        if progress is None:
            return
        if restarted:
            progress.parked, progress.hw_sent = None, -1
            self._send(BeginQuorumEpoch(self.group, self.id, node, self.term))
        if self.quiesced and (progress.parked is None
                              or progress.parked.fetch_offset != self.log.end):
            self._wake()

    def _wake(self) -> None:
        self.quiesced = False
        if self.role is Role.LEADER:
            # a fresh check-quorum period: nobody fetched while we slept
            self._election_elapsed = 0
            for progress in self._progress.values():
                progress.active, progress.idle_ticks, progress.parked_ticks = True, 0, 0
        elif self._fetch_ticks is not None:
            # our quiet fetch may be lost: re-send it on the next tick unless
            # what woke us gets it answered first
            self._fetch_ticks = self.config.fetch_wait_ticks + 1

    def _park_quiet(self, m: Message) -> bool:
        """A quiesced leader keeps a quiet fetch at its log end without waking."""
        log = self.log
        if not (isinstance(m, FetchRequest) and m.quiet and self.role is Role.LEADER
                and m.term == self.term and m.fetch_offset == log.end
                and m.last_fetched_term == log.last_term):
            return False
        progress = self._peer(m.src)
        progress.parked, progress.parked_ticks = m, 0
        progress.match_end = max(progress.match_end, m.fetch_offset)
        return True

    def _maybe_quiesce(self) -> None:
        """Quiesce when everything is committed and every live follower has
        it, knows it and waits at the log end (a quorum of them at least)."""
        log = self.log
        end = log.end
        if (not self.config.quiesce or self._transfer_to != NO_NODE
                or self.high_watermark != end or log.stable_end != end):
            return
        voters = self.voters
        caught_up = int(self.id in voters)
        for peer, progress in self._progress.items():
            if peer in self._down:
                continue
            parked = progress.parked
            if parked is None or parked.fetch_offset != end or progress.hw_sent != end:
                return  # an observer is waited for too (once gone, it is down or dropped)
            caught_up += peer in voters
        if caught_up < self._quorum:
            return
        self.quiesced = True
        for peer, progress in sorted(self._progress.items()):
            parked = progress.parked
            if (parked is None or peer in self._down or parked.fetch_offset != end
                    or progress.hw_sent != end):
                continue
            progress.parked = None
            self._send(FetchResponse(
                self.group, self.id, peer, self.term, self.id, parked.fetch_offset,
                parked.last_fetched_term, self.high_watermark, quiesce=True,
            ))  # fmt: skip

    # -- output ------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        self._msgs.append(m)
