"""Value types of the Raft core: log entries, persistent state, snapshots, messages.

Theory of operation
-------------------
Indexes are Kafka offsets. They start at 0; ``log_end`` is exclusive (the
offset the next entry gets) and the *high watermark* is exclusive too: every
offset below it is committed. (Classic Raft's 1-based, inclusive "commit index"
is ``high_watermark - 1``.) Terms are Kafka leader epochs: a batch's
``partitionLeaderEpoch`` is the term of the entry; term 0 is the initial term
in which nothing is ever written.

An :class:`Entry` is one RecordBatch: it covers ``count`` consecutive offsets
``[index, index + count)`` (``count = lastOffsetDelta + 1``). The core never
splits an entry: fetch offsets, truncation points and snapshot boundaries are
always entry boundaries. ``control`` marks the leader-change entry the core
appends when it wins an election (Kafka's LeaderChangeMessage control batch);
the storage turns it into the real control batch. A *configuration entry* is
a control entry whose ``voters`` is set: the whole voter set from that offset
on (KIP-853's VotersRecord control batch; see ``node``, "Membership"). A
:class:`Snapshot` carries the voter set in force at its end the same way
(``None`` in both: the statically configured voters, ``RaftConfig.voters``).

Messages are small frozen value objects carrying the ``group`` (partition or
metadata log) they belong to, so a runtime can coalesce many groups' messages
between one broker pair into one request. They mirror KRaft's RPCs:

=====================  ======================================================
message                KRaft RPC (KIP-595 / KIP-630 / KIP-996)
=====================  ======================================================
VoteRequest/Response   Vote (``pre_vote`` = KIP-996 PreVote field)
BeginQuorumEpoch       BeginQuorumEpoch (new leader announces its epoch)
FetchRequest/Response  Fetch with ReplicaId (the follower's replication pull;
                       ``diverging`` = DivergingEpoch, ``snapshot_id`` =
                       SnapshotId, ``high_watermark`` = HighWatermark)
FetchSnapshot*         FetchSnapshot (whole snapshot; the runtime may chunk)
TimeoutNow             EndQuorumEpoch with PreferredSuccessors = [dst]
=====================  ======================================================

The follower's fetch offset doubles as its acknowledgement: a follower sends
a fetch for offset N only after everything below N is durable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NO_NODE = -1
"""A node id meaning "nobody" (no vote cast, no leader known)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry (a RecordBatch) covering offsets ``[index, index + count)``."""

    index: int
    term: int
    data: bytes = b""
    count: int = 1
    control: bool = False
    voters: frozenset[int] | None = None  # a configuration entry: the new voter set

    @property
    def end(self) -> int:
        """The offset after this entry's last offset."""
        return self.index + self.count

    @property
    def size_bytes(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message of the same Ready is sent:
    the current term and the vote cast in it (KRaft's quorum-state file)."""

    term: int = 0
    vote: int = NO_NODE


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """A snapshot of every offset below ``end``; ``term`` is the term of the
    entry at ``end - 1`` (Kafka's SnapshotId: EndOffset and Epoch)."""

    end: int
    term: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot with its state-machine ``data``. Empty data is legal: it is
    how a partition log whose prefix was deleted by retention tells a lagging
    follower to restart at the leader's log start offset."""

    id: SnapshotId
    data: bytes = b""
    # the voter set in force at ``id.end`` (None: the configured voters, as
    # long as no configuration entry was ever written)
    voters: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """A (term, end offset) pair: OffsetForLeaderEpoch's answer and Fetch's
    DivergingEpoch."""

    term: int
    end: int


# -- messages -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoteRequest:
    group: int
    src: int
    dst: int
    term: int  # the term the candidate wants (for a pre-vote: its term + 1)
    last_term: int
    log_end: int
    pre_vote: bool = False
    transfer: bool = False  # sent on a TimeoutNow: ignores the leader lease


@dataclass(frozen=True, slots=True)
class VoteResponse:
    group: int
    src: int
    dst: int
    term: int
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class BeginQuorumEpoch:
    group: int
    src: int  # the new leader
    dst: int
    term: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    group: int
    src: int  # the fetching replica (Fetch's ReplicaId)
    dst: int
    term: int
    fetch_offset: int
    last_fetched_term: int
    quiet: bool = False  # sent by a quiesced follower: park it without waking the group
    max_bytes: int = 0  # entries' bytes to answer at most (0: the leader's max_fetch_bytes)


@dataclass(frozen=True, slots=True)
class FetchResponse:
    group: int
    src: int
    dst: int
    term: int
    leader: int  # the responder's view of the leader (NO_NODE if unknown)
    fetch_offset: int  # echoed from the request, to drop stale responses
    last_fetched_term: int
    high_watermark: int = 0
    entries: tuple[Entry, ...] = ()
    diverging: EpochEnd | None = None
    snapshot_id: SnapshotId | None = None
    rejected: bool = False  # the responder is not the leader of this term
    quiesce: bool = False  # the leader's group is quiet: stop ticking until woken


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    group: int
    src: int
    dst: int
    term: int
    snapshot_id: SnapshotId


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    group: int
    src: int
    dst: int
    term: int
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    group: int
    src: int
    dst: int
    term: int


Message = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpoch
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
    | TimeoutNow
)

LEADER_MESSAGES = (BeginQuorumEpoch, FetchSnapshotResponse, TimeoutNow)
"""Messages only a leader of ``term`` sends (a FetchResponse names its leader)."""


@dataclass(frozen=True, slots=True)
class NotLeader:
    """A proposal was refused: this node is not the leader (or is handing
    leadership over). ``leader`` is a hint for NOT_LEADER_OR_FOLLOWER."""

    leader: int
    term: int


class Refusal(enum.Enum):
    """Why ``Raft.add_voter`` / ``remove_voter`` refused a change, with the
    Kafka error an AddRaftVoter / RemoveRaftVoter answer maps it to (KIP-853)."""

    NOT_LEADER = "not the leader"  # NOT_LEADER_OR_FOLLOWER
    CHANGE_PENDING = "an earlier voter change is not committed yet"  # REQUEST_TIMED_OUT
    TERM_NOT_COMMITTED = "the leader has not committed its own term yet"  # REQUEST_TIMED_OUT
    NOT_CAUGHT_UP = "the new voter has not caught up with the leader"  # REQUEST_TIMED_OUT
    ALREADY_VOTER = "already a voter"  # DUPLICATE_VOTER
    NOT_A_VOTER = "not a voter"  # VOTER_NOT_FOUND
    LAST_VOTER = "the last voter cannot be removed"  # INVALID_REQUEST


@dataclass(frozen=True, slots=True)
class ChangeRefused:
    """A voter change was refused (nothing was appended); ``leader`` and
    ``term`` as in :class:`NotLeader`."""

    reason: Refusal
    leader: int
    term: int


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the runtime must do, in this order:

    1. install ``snapshot`` if set (replacing the whole log);
    2. drop every entry at or after ``truncate_from`` if set;
    3. append ``entries`` (contiguous, starting at the log end);
    4. write ``hard_state`` if set;
    5. make 1-4 durable (fsync), and only then
    6. send ``messages`` — persist before send: a vote, a fetch offset or a
       leader's log must never be observable by a peer before it is durable;
    7. expose ``high_watermark`` (apply committed entries below it) and call
       ``advance(ready)``.
    """

    hard_state: HardState | None = None
    snapshot: Snapshot | None = None
    truncate_from: int | None = None
    entries: tuple[Entry, ...] = ()
    high_watermark: int = 0
    messages: tuple[Message, ...] = field(default=())

    @property
    def must_sync(self) -> bool:
        """Whether step 5 has anything to make durable."""
        return bool(
            self.hard_state is not None
            or self.snapshot is not None
            or self.truncate_from is not None
            or self.entries
        )


def describe(m: Message) -> str:
    """A one-line human form of a message, used in traces and failure reports."""
    head = f"{m.src}->{m.dst} {type(m).__name__} term={m.term}"
    if isinstance(m, VoteRequest):
        flags = "".join([" pre" if m.pre_vote else "", " transfer" if m.transfer else ""])
        return f"{head} last={m.last_term}/{m.log_end}{flags}"
    if isinstance(m, VoteResponse):
        return f"{head} {'granted' if m.granted else 'rejected'}{' pre' if m.pre_vote else ''}"
    if isinstance(m, FetchRequest):
        return f"{head} offset={m.fetch_offset} last_term={m.last_fetched_term}"
    if isinstance(m, FetchResponse):
        return head + _describe_fetch_response(m)
    if isinstance(m, FetchSnapshotRequest):
        return f"{head} snapshot={m.snapshot_id.end}/{m.snapshot_id.term}"
    if isinstance(m, FetchSnapshotResponse):
        return f"{head} snapshot={m.snapshot.id.end}/{m.snapshot.id.term}"
    return head


def _describe_fetch_response(m: FetchResponse) -> str:
    if m.rejected:
        return f" rejected leader={m.leader}"
    text = f" offset={m.fetch_offset} hw={m.high_watermark}"
    if m.diverging is not None:
        text += f" diverging={m.diverging.term}/{m.diverging.end}"
    if m.snapshot_id is not None:
        text += f" snapshot_id={m.snapshot_id.end}/{m.snapshot_id.term}"
    if m.entries:
        text += " entries=" + ",".join(describe_entry(e) for e in m.entries)
    return text


def describe_entry(e: Entry) -> str:
    """``index/term`` plus the payload (``index+count`` when count > 1)."""
    span = f"{e.index}" if e.count == 1 else f"{e.index}+{e.count}"
    if e.voters is not None:
        payload = "voters=" + ",".join(str(v) for v in sorted(e.voters))
    else:
        payload = "lc" if e.control else e.data.decode("utf-8", "replace")
    return f"{span}/{e.term}:{payload}"
