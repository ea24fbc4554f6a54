"""Encoding of the private inter-broker frame that carries Raft messages.

Theory of operation
-------------------
One frame carries every Raft message one broker has for one peer after a
driver round — for any number of groups (the metadata log and every partition
they share) — plus the sender's leadership announcements (see ``runtime``).
That is the per-broker-pair batching of Multi-Raft: one frame, not one per
partition. A frame with nothing else in it is the pair's heartbeat (peer
liveness, which quiesced groups rely on; ``incarnation`` tells a restart).

Layout: a Kafka request header v1 (api key ``KCOMPAT_RAFT`` = 1000, version 0,
correlation id 0, null client id) so the ordinary frame reader and
``peek_api`` accept it, then ``u32 json_length``, a UTF-8 JSON document, and
the entry and snapshot payloads concatenated (the JSON refers to them by
index), so record batches travel as raw bytes, never base64. A configuration
entry and a snapshot carry their voter set (``Entry.voters``,
``Snapshot.voters``) as a trailing id list. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass
from typing import Any

from kcompat.raft.types import (
    BeginQuorumEpoch,
    Entry,
    EpochEnd,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    Snapshot,
    SnapshotId,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

KCOMPAT_RAFT = 1000
_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
HEADER_SIZE = _HEADER.size
_U32 = struct.Struct(">I")

_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (VoteRequest, VoteResponse, BeginQuorumEpoch, FetchRequest, FetchResponse,
                FetchSnapshotRequest, FetchSnapshotResponse, TimeoutNow)
}


class CodecError(ValueError):
    """A frame this module cannot decode (dropped by the receiver)."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A broker's heartbeat to the controller (``controller.liveness``)."""

    node_id: int
    incarnation: str
    host: str
    port: int
    rack: str | None
    caught_up: bool
    shutting_down: bool = False
    controller_only: bool = False  # process.roles=controller: never hosts partitions
    # every listener's advertised (name, host, port), the inter-broker one first
    endpoints: tuple[tuple[str, str, int], ...] = ()
    machine: str = ""  # kcompat.machine.id: the shards of one node share it


@dataclass(frozen=True, slots=True)
class Announcement:
    """A leader's claim: ``leader`` leads ``group`` in ``term``; ``isr`` are
    the replicas it sees caught up; ``log_start`` is its log start offset
    (DeleteRecords and retention reach the followers through it)."""

    group: int
    term: int
    leader: int
    isr: tuple[int, ...]
    log_start: int = 0


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """Transaction coordinator -> partition leader: write a COMMIT/ABORT marker
    of ``producer_id``/``producer_epoch`` to ``topic``-``index`` through its Raft
    group and answer (``MarkerReply``) once it is committed."""

    request_id: int
    topic: str
    index: int
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class MarkerReply:
    request_id: int
    error_code: int


@dataclass(frozen=True, slots=True)
class ForwardRequest:
    """Any broker -> controller: carry out a metadata change (``intent``, see
    ``admin.execute``) and answer (``ForwardReply``) once it is applied."""

    request_id: int
    intent: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ForwardReply:
    request_id: int
    error_code: int
    message: str | None


@dataclass(frozen=True, slots=True)
class VerifyTxnRequest:
    """Partition leader -> transaction coordinator: is ``topic``-``index`` part
    of the ongoing transaction of ``producer_id``/``producer_epoch`` (KIP-890,
    see ``txn_verify``)? With ``add``: make it part of it (the schedule-log
    partition a transactional produce's delayed records go to). Answered with
    a ``VerifyTxnReply``."""

    request_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic: str
    index: int
    add: bool = False  # add the partition to the transaction (a broker-written one)


@dataclass(frozen=True, slots=True)
class VerifyTxnReply:
    request_id: int
    error_code: int


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Broker -> partition leader: append this batch the broker wrote itself
    (a schedule-log write, a due delayed record's delivery) through the
    partition's idempotence check and Raft group, and answer (``AppendReply``)
    once it is committed, with its base offset (the original one for a
    duplicate)."""

    request_id: int
    topic: str
    index: int
    batch: bytes


@dataclass(frozen=True, slots=True)
class AppendReply:
    request_id: int
    error_code: int
    base_offset: int


@dataclass(frozen=True, slots=True)
class ShareClaimRequest:
    """Share-partition leader -> leader of a ``__share_group_state``
    partition: commit a claim of the share key (group, topic, partition) with
    this nonce and answer (``ShareClaimReply``) with the key's new generation
    and its state (JSON, ``group.share_state``; None when it has none)."""

    request_id: int
    index: int
    key: tuple[str, str, int]
    nonce: str


@dataclass(frozen=True, slots=True)
class ShareClaimReply:
    request_id: int
    error_code: int
    generation: int
    state: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class AdminCallRequest:
    """Broker -> the broker that can carry out an admin operation on a Raft
    group (``quorum_admin``: a partition leader's leadership transfer, the
    metadata leader's quorum status); answered with an ``AdminCallReply``."""

    request_id: int
    op: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AdminCallReply:
    request_id: int
    error_code: int
    result: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class EnvelopeRequest:
    """Broker -> the broker that must handle a Kafka request made on behalf of
    a client of the first one (the HTTP API's produce to a partition led
    elsewhere, a group's coordinator elsewhere): the request's body as kio
    writes it, and who made it (as Kafka's Envelope, KIP-590). The peer link
    is authenticated, so the receiver trusts the principal named."""

    request_id: int
    principal: str
    client_host: str
    api_key: int
    version: int
    body: bytes


@dataclass(frozen=True, slots=True)
class EnvelopeReply:
    request_id: int
    error_code: int
    body: bytes  # the response's body as kio writes it (empty with an error)


Reply = (MarkerReply | ForwardReply | VerifyTxnReply | AppendReply | ShareClaimReply
         | AdminCallReply | EnvelopeReply)
Internal = (MarkerRequest | MarkerReply | ForwardRequest | ForwardReply | Heartbeat
            | VerifyTxnRequest | VerifyTxnReply | AppendRequest | AppendReply
            | ShareClaimRequest | ShareClaimReply | AdminCallRequest | AdminCallReply
            | EnvelopeRequest | EnvelopeReply)
#: the control plane's calls between brokers (a broker's heartbeat to the controller,
#: requests forwarded to it, quorum admin): they go ahead of queued partition frames
#: (an Envelope may carry a produce's records: it queues with them)
CONTROL_MARKERS = (Heartbeat, ForwardRequest, ForwardReply, AdminCallRequest, AdminCallReply)


@dataclass(frozen=True, slots=True)
class RaftFrame:
    src: int
    messages: tuple[Message, ...] = ()
    announcements: tuple[Announcement, ...] = ()
    markers: tuple[Internal, ...] = ()  # coordinator/forwarding requests, replies, heartbeats
    incarnation: int = 0  # the sender's process (a new one on every start): peer liveness
    # a broker-only sender's listener (host, port): a voter links back to it
    # before its registration names it (None: a voter, known from the config)
    reply_to: tuple[str, int] | None = None


def _enc(value: Any, blobs: list[bytes]) -> Any:
    if isinstance(value, Entry):
        blobs.append(value.data)
        fields: list[Any] = [value.index, value.term, value.count, value.control, len(blobs) - 1]
        if value.voters is not None:  # a configuration entry
            fields.append(sorted(value.voters))
        return {"E": fields}
    if isinstance(value, EpochEnd):
        return {"EE": [value.term, value.end]}
    if isinstance(value, SnapshotId):
        return {"SI": [value.end, value.term]}
    if isinstance(value, Snapshot):
        blobs.append(value.data)
        fields = [value.id.end, value.id.term, len(blobs) - 1]
        if value.voters is not None:
            fields.append(sorted(value.voters))
        return {"S": fields}
    if isinstance(value, tuple):
        return [_enc(v, blobs) for v in value]
    return value


def _dec(value: Any, blobs: list[bytes]) -> Any:
    if isinstance(value, dict):
        if "E" in value:
            index, term, count, control, blob, *voters = value["E"]
            return Entry(index, term, blobs[blob], count, bool(control), _voters(voters))
        if "EE" in value:
            return EpochEnd(*value["EE"])
        if "SI" in value:
            return SnapshotId(*value["SI"])
        if "S" in value:
            end, term, blob, *voters = value["S"]
            return Snapshot(SnapshotId(end, term), blobs[blob], _voters(voters))
        raise CodecError(f"unknown value {sorted(value)}")
    if isinstance(value, list):
        return tuple(_dec(v, blobs) for v in value)
    return value


def _voters(extra: list[Any]) -> frozenset[int] | None:
    """The optional voter set trailing an entry or snapshot (membership)."""
    return frozenset(int(v) for v in extra[0]) if extra else None


def _enc_internal(m: Internal, blobs: list[bytes]) -> list[Any]:
    if isinstance(m, AppendRequest):
        blobs.append(m.batch)
        return ["aq", m.request_id, m.topic, m.index, len(blobs) - 1]
    if isinstance(m, AppendReply):
        return ["ar", m.request_id, m.error_code, m.base_offset]
    if isinstance(m, ShareClaimRequest):
        return ["sq", m.request_id, m.index, list(m.key), m.nonce]
    if isinstance(m, ShareClaimReply):
        return ["sr", m.request_id, m.error_code, m.generation, m.state]
    if isinstance(m, MarkerRequest):
        return ["q", m.request_id, m.topic, m.index, m.producer_id, m.producer_epoch,
                int(m.commit)]
    if isinstance(m, MarkerReply):
        return ["r", m.request_id, m.error_code]
    if isinstance(m, ForwardRequest):
        return ["fq", m.request_id, m.intent]
    if isinstance(m, VerifyTxnRequest):
        return ["vq", m.request_id, m.transactional_id, m.producer_id, m.producer_epoch,
                m.topic, m.index, int(m.add)]
    if isinstance(m, VerifyTxnReply):
        return ["vr", m.request_id, m.error_code]
    if isinstance(m, EnvelopeRequest):
        blobs.append(m.body)
        return ["eq", m.request_id, m.principal, m.client_host, m.api_key, m.version,
                len(blobs) - 1]
    if isinstance(m, EnvelopeReply):
        blobs.append(m.body)
        return ["er", m.request_id, m.error_code, len(blobs) - 1]
    if isinstance(m, AdminCallRequest):
        return ["xq", m.request_id, m.op, m.args]
    if isinstance(m, AdminCallReply):
        return ["xr", m.request_id, m.error_code, m.result]
    if isinstance(m, Heartbeat):
        return ["hb", m.node_id, m.incarnation, m.host, m.port, m.rack, int(m.caught_up),
                int(m.shutting_down), int(m.controller_only), [list(e) for e in m.endpoints],
                m.machine]
    return ["fr", m.request_id, m.error_code, m.message]


def endpoints_of(items: Any) -> tuple[tuple[str, str, int], ...]:
    """Listener endpoints as a heartbeat or a registration record carries them."""
    return tuple((str(name), str(host), int(port)) for name, host, port in items or ())


def encode(frame: RaftFrame) -> bytes:
    """The whole frame, with its 4-byte size prefix, ready to send."""
    blobs: list[bytes] = []
    msgs = []
    for m in frame.messages:
        fields = {f.name: _enc(getattr(m, f.name), blobs) for f in dataclasses.fields(m)}
        msgs.append({"t": type(m).__name__, **fields})
    doc: dict[str, Any] = {"src": frame.src, "inc": frame.incarnation, "msgs": msgs,
           "ann": [[a.group, a.term, a.leader, list(a.isr), a.log_start]
                   for a in frame.announcements],
           "mk": [_enc_internal(m, blobs) for m in frame.markers],
           "blobs": [len(b) for b in blobs]}
    if frame.reply_to is not None:
        doc["at"] = list(frame.reply_to)
    body = json.dumps(doc, separators=(",", ":")).encode()
    size = HEADER_SIZE + 4 + len(body) + sum(map(len, blobs))
    return b"".join([_U32.pack(size), _HEADER.pack(KCOMPAT_RAFT, 0, 0, -1),
                     _U32.pack(len(body)), body, *blobs])  # one copy of the entries' bytes


def decode(frame: bytes) -> RaftFrame:
    """Decode a frame as delivered by the frame reader (no size prefix)."""
    try:
        pos = HEADER_SIZE
        (length,) = _U32.unpack_from(frame, pos)
        pos += 4
        doc = json.loads(frame[pos : pos + length])
        pos += length
        blobs = []
        for size in doc["blobs"]:
            blobs.append(bytes(frame[pos : pos + size]))
            pos += size
        msgs = []
        for item in doc["msgs"]:
            cls = _TYPES[item.pop("t")]
            msgs.append(cls(**{k: _dec(v, blobs) for k, v in item.items()}))
        anns = tuple(Announcement(int(a[0]), int(a[1]), int(a[2]), tuple(a[3]), int(a[4]))
                     for a in doc["ann"])
        markers: list[Internal] = []
        for item in doc.get("mk", ()):
            if item[0] == "q":
                markers.append(MarkerRequest(int(item[1]), str(item[2]), int(item[3]),
                                             int(item[4]), int(item[5]), bool(item[6])))
            elif item[0] == "r":
                markers.append(MarkerReply(int(item[1]), int(item[2])))
            elif item[0] == "fq":
                markers.append(ForwardRequest(int(item[1]), dict(item[2])))
            elif item[0] == "fr":
                markers.append(ForwardReply(int(item[1]), int(item[2]), item[3]))
            elif item[0] == "vq":
                markers.append(VerifyTxnRequest(int(item[1]), str(item[2]), int(item[3]),
                                                int(item[4]), str(item[5]), int(item[6]),
                                                bool(item[7]) if len(item) > 7 else False))
            elif item[0] == "aq":
                markers.append(AppendRequest(int(item[1]), str(item[2]), int(item[3]),
                                             blobs[int(item[4])]))
            elif item[0] == "ar":
                markers.append(AppendReply(int(item[1]), int(item[2]), int(item[3])))
            elif item[0] == "sq":
                group, topic, partition = item[3]
                markers.append(ShareClaimRequest(int(item[1]), int(item[2]),
                                                 (str(group), str(topic), int(partition)),
                                                 str(item[4])))
            elif item[0] == "sr":
                state = item[4]
                markers.append(ShareClaimReply(int(item[1]), int(item[2]), int(item[3]),
                                               None if state is None else dict(state)))
            elif item[0] == "vr":
                markers.append(VerifyTxnReply(int(item[1]), int(item[2])))
            elif item[0] == "eq":
                markers.append(EnvelopeRequest(int(item[1]), str(item[2]), str(item[3]),
                                               int(item[4]), int(item[5]), blobs[int(item[6])]))
            elif item[0] == "er":
                markers.append(EnvelopeReply(int(item[1]), int(item[2]), blobs[int(item[3])]))
            elif item[0] == "xq":
                markers.append(AdminCallRequest(int(item[1]), str(item[2]), dict(item[3])))
            elif item[0] == "xr":
                result = item[3]
                markers.append(AdminCallReply(int(item[1]), int(item[2]),
                                              None if result is None else dict(result)))
            elif item[0] == "hb":
                rack = None if item[5] is None else str(item[5])
                markers.append(Heartbeat(int(item[1]), str(item[2]), str(item[3]),
                                         int(item[4]), rack, bool(item[6]), bool(item[7]),
                                         len(item) > 8 and bool(item[8]),
                                         endpoints_of(item[9] if len(item) > 9 else ()),
                                         str(item[10]) if len(item) > 10 else ""))
        at = doc.get("at")
        return RaftFrame(int(doc["src"]), tuple(msgs), anns, tuple(markers),
                         int(doc.get("inc", 0)), None if at is None else (str(at[0]), int(at[1])))
    except (KeyError, TypeError, ValueError, struct.error) as e:
        raise CodecError(f"bad raft frame: {e!r}") from None
