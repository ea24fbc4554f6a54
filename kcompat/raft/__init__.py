"""Sans-IO Raft core (etcd-style tick/step/ready/advance over KRaft messages).

Public surface: ``Raft``, ``RaftConfig``, ``Role``, ``Status``; the value types
in ``kcompat.raft.types``; the storage protocols in ``kcompat.raft.storage``. ``Raft.add_voter`` /
``remove_voter`` change the voter set (``node``, "Membership").
See ``node`` for the theory of operation, ``replication`` for the fetch and
commit rules, ``log`` for how the core tracks the log it does not own.
"""

from kcompat.raft.node import Raft, RaftConfig, Role, Status
from kcompat.raft.storage import (
    LogStorage,
    MembershipStorage,
    WritableLogStorage,
    persist_ready,
)
from kcompat.raft.types import (
    NO_NODE,
    BeginQuorumEpoch,
    ChangeRefused,
    Entry,
    EpochEnd,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HardState,
    Message,
    NotLeader,
    Ready,
    Refusal,
    Snapshot,
    SnapshotId,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    describe,
)

__all__ = [
    "NO_NODE",
    "BeginQuorumEpoch",
    "ChangeRefused",
    "Entry",
    "EpochEnd",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "HardState",
    "LogStorage",
    "MembershipStorage",
    "Message",
    "NotLeader",
    "Raft",
    "RaftConfig",
    "Ready",
    "Refusal",
    "Role",
    "Snapshot",
    "SnapshotId",
    "Status",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
    "WritableLogStorage",
    "describe",
    "persist_ready",
]
