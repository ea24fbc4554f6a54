"""The inter-broker Raft frame round-trips every message kind and rejects junk."""

from __future__ import annotations

import pytest

from kcompat.broker.replication import codec
from kcompat.broker.replication.codec import Heartbeat
from kcompat.raft import (
    BeginQuorumEpoch,
    Entry,
    EpochEnd,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Snapshot,
    SnapshotId,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from kcompat.wire.headers import peek_api

MESSAGES = (
    VoteRequest(7, 1, 2, 3, 2, 10, pre_vote=True),
    VoteResponse(7, 2, 1, 3, True, True),
    BeginQuorumEpoch(0, 1, 3, 4),
    FetchRequest(65536, 2, 1, 4, 11, 3),
    FetchResponse(65536, 1, 2, 4, 1, 11, 3, 12, (Entry(11, 4, b"\x00batch", 1),
                                                 Entry(12, 4, b"", 1, True)),
                  EpochEnd(3, 9), None),
    FetchResponse(1, 1, 2, 4, 1, 0, 0, snapshot_id=SnapshotId(5, 2), rejected=False),
    FetchSnapshotRequest(1, 2, 1, 4, SnapshotId(5, 2)),
    FetchSnapshotResponse(1, 1, 2, 4, Snapshot(SnapshotId(5, 2), b"snap")),
    TimeoutNow(3, 1, 2, 9),
)


def test_round_trip() -> None:
    frame = codec.RaftFrame(1, MESSAGES, (codec.Announcement(65536, 4, 1, (1, 2)),
                                          codec.Announcement(7, 2, 3, (3,), log_start=40)))
    raw = codec.encode(frame)
    assert int.from_bytes(raw[:4], "big") == len(raw) - 4
    body = raw[4:]
    assert peek_api(body)[0] == codec.KCOMPAT_RAFT
    assert codec.decode(body) == frame


def test_garbage_is_a_codec_error() -> None:
    raw = codec.encode(codec.RaftFrame(1, MESSAGES))[4:]
    with pytest.raises(codec.CodecError):
        codec.decode(raw[:20])
    with pytest.raises(codec.CodecError):
        codec.decode(raw[:10] + b"\x00\x00\x00\x02{}")


def test_round_trip_internal_requests() -> None:
    """Transaction-marker and controller-forwarding requests and replies, heartbeats."""
    internal = (
        codec.MarkerRequest(5, "orders", 3, 1 << 40, 2, True),
        codec.MarkerReply(5, 6),
        codec.ForwardRequest(6, {"op": "alter_configs", "name": "t",
                                 "configs": {"retention.ms": 1000}}),
        codec.ForwardReply(6, 0, None),
        codec.ForwardReply(7, 41, "This is not the correct controller for this cluster."),
        Heartbeat(3, "a1b2", "127.0.0.1", 19094, None, True),
        Heartbeat(1003, "e5f6", "127.0.0.1", 19095, None, True, machine="3"),
        Heartbeat(2, "c3d4", "broker-2.local", 9092, "rack-b", False, shutting_down=True),
    )
    frame = codec.RaftFrame(2, (TimeoutNow(3, 1, 2, 9),), (), internal)
    raw = codec.encode(frame)
    assert codec.decode(raw[4:]) == frame


def test_round_trip_admin_calls() -> None:
    """ElectLeaders' leadership transfer and DescribeQuorum's status (quorum_admin)."""
    internal = (
        codec.AdminCallRequest(8, "transfer_leader", {"topic": "t", "index": 2, "target": 3}),
        codec.AdminCallReply(8, 0, None),
        codec.AdminCallRequest(9, "quorum_status", {}),
        codec.AdminCallReply(9, 0, {"leader": 1, "epoch": 4, "high_watermark": 17,
                                    "voters": [[1, 17, 5, 5], [2, 15, 3, -1]]}),
    )
    frame = codec.RaftFrame(1, (), (), internal)
    decoded = codec.decode(codec.encode(frame)[4:])
    assert decoded.markers[:3] == internal[:3]
    reply = decoded.markers[3]
    assert isinstance(reply, codec.AdminCallReply) and reply.result is not None
    assert reply.result["voters"] == [[1, 17, 5, 5], [2, 15, 3, -1]]  # JSON lists stay lists


def test_round_trip_envelopes() -> None:
    """A Kafka request made for an HTTP caller, handled by another broker: its
    body and the answer's cross as blobs, bytes of any value intact."""
    internal = (
        codec.EnvelopeRequest(11, "User:alice", "10.0.0.7", 0, 9, bytes(range(256)) * 3),
        codec.EnvelopeReply(11, 0, b"\x00answer\xff"),
        codec.EnvelopeReply(12, 7, b""),
    )
    frame = codec.RaftFrame(2, (), (), internal)
    assert codec.decode(codec.encode(frame)[4:]).markers == internal


def test_round_trip_membership() -> None:
    """A configuration entry and a snapshot keep their voter set across the
    frame (what a follower appends and installs must name the voters)."""
    messages = (
        FetchResponse(5, 1, 2, 4, 1, 11, 3, 12, (Entry(11, 4, b"\x00batch", 1),
                                                 Entry(12, 4, b"", 1, True, frozenset({1, 2, 4})),
                                                 Entry(13, 4, b"", 1, True))),
        FetchSnapshotResponse(5, 1, 2, 4, Snapshot(SnapshotId(9, 2), b"", frozenset({3}))),
        FetchSnapshotResponse(5, 1, 2, 4, Snapshot(SnapshotId(9, 2), b"")),
    )
    frame = codec.RaftFrame(1, messages)
    decoded = codec.decode(codec.encode(frame)[4:])
    assert decoded == frame
    entries = decoded.messages[0].entries  # type: ignore[union-attr]
    assert [e.voters for e in entries] == [None, {1, 2, 4}, None]
