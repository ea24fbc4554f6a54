"""The fuzzer's share consumers reading (KIP-932): ShareFetch (v1) and
ShareAcknowledge (v1) by the share members of ``_shares``.

``share_consume`` is what a share consumer's poll loop does, run until
nothing more comes. First the group settles: every member in the group
heartbeats until the members together hold every partition of the topics
they subscribe to and a round changes nothing (bounded: Kafka assigns a
partition once its share coordinator initialized it, S1). Then rounds: each
member holding partitions ShareFetches them from their leaders, one share
session per member per broker (epoch 0 opens, each request increments it, -1
closes; ``ShareMember.sessions``), and acknowledges what it acquired with
the type the machine chose (ACCEPT, RELEASE, REJECT, or by offset: ``mixed``)
in explicit ranges, either at once with ShareAcknowledge or piggybacked on
its next ShareFetch (or, abandoning, closes its sessions holding them). The
loop ends after two rounds that acquired nothing and left nothing to
acknowledge (released records come back with their delivery count raised
until ``share.delivery.count.limit`` archives them).

What is compared is what a client tells apart, over the whole loop: the set
of (topic, partition, offset, delivery count) acquired, the partition and
acknowledgement errors, and the session errors; acquired offsets that hold a
transaction marker (a control batch in the answer) are kept apart (F23).
Per-request batches are not compared: which request acquires a record is timing on Kafka (its first
ShareFetch of a session acquires nothing, FINDINGS S2; a partition is
answered once its share-partition is loaded), and which member acquires it
is the assignor's placement (the set is over all members). After a
top-level session error a member opens a new session, as clients do.
Like a client's session handler, a member forgets (``forgotten_topics_data``,
by topic id) the partitions its session holds but no longer fetches there —
a partition moved to another member or leader, a deleted topic's — so a
session holds only what the member fetches now: what stale partitions a
session would otherwise carry is each broker's own history (which member and
which leader held what), not something to compare.

``share_session_misuse`` sends what a client with a wrong idea of its
session sends: an epoch past the session's, the epoch before it, a session
the broker does not have (a member id it does not know), acknowledgements in
an opening request, and an acknowledgement of offsets it never acquired
(then the session is closed). The errors are compared (without the
partition: on 3 brokers the leaders are each cluster's own); the member's
session model is left as it was unless the broker took the request.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import time
import uuid
from typing import Any

from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kio.schema.share_acknowledge.v1 import request as ack_v1
from kio.schema.share_fetch.v1 import request as fetch_v1
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32, i64

from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz import _shares as shares
from compat_tests.fuzz._consumers import _code, topic_names
from compat_tests.fuzz._wire import CLOSED, Peer

Observation = Any
ACCEPT, RELEASE, REJECT = 1, 2, 3
HOW = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND = 123, 122
SESSION_ERRORS = {INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND}
WAIT_MS = 100  # a ShareFetch with nothing to acquire waits this long
SETTLE_S = 10.0  # a settle's bound (Kafka initializes share-partitions after answering)
# released records come back up to the delivery count limit (5), one at a time from
# their third delivery (Kafka's throttling, F25): enough rounds for every record
# released to reach the limit, so the loop's outcome does not hang on when Kafka
# made a piggybacked release durable (a record released in a ShareFetch is not
# acquirable again in that request until its state is written)
MAX_ROUNDS = 40
EMPTY_ROUNDS = 2  # rounds with nothing acquired that end the loop
# ... once it acquired something; before that, this many: both brokers answer a
# ShareFetch before a share-partition first named has loaded (Kafka reads its state
# from the share coordinator), and on a loaded machine two rounds of WAIT_MS were
# not always enough for Kafka's (3 brokers, 2026-12-01: kcompat acquired a new
# topic's first record, Kafka nothing yet)
FIRST_EMPTY_ROUNDS = 10
Tp = tuple[str, int]


def _type_of(how: str, offset: int) -> int:
    return (ACCEPT, RELEASE, REJECT)[offset % 3] if how == "mixed" else HOW[how]


def _batches(how: str, offsets: list[int]) -> list[tuple[int, int, int]]:
    """``offsets`` as (first, last, type) ranges of one type each."""
    out: list[tuple[int, int, int]] = []
    for offset in sorted(offsets):
        kind = _type_of(how, offset)
        if out and out[-1][1] == offset - 1 and out[-1][2] == kind:
            out[-1] = (out[-1][0], offset, kind)
        else:
            out.append((offset, offset, kind))
    return out


def _partitions(peer: Peer, topics: list[str]) -> set[Tp]:
    """Every partition of those of ``topics`` that exist on ``peer``."""
    answer = peer.call(MetadataRequest, MetadataResponse, 12, {
        "topics": [{"topic_id": None, "name": t} for t in topics],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    if answer == CLOSED or not isinstance(answer, dict):
        return set()
    return {(t["name"], p["partition_index"]) for t in answer["topics"] if not t["error_code"]
            for p in t["partitions"]}


def _in_group(peer: Peer, group: str, member_ids: list[str]) -> list[shares.ShareMember]:
    found = [peer.state.get(f"share:{group}:{who}") for who in range(len(member_ids))]
    return [m for m in found if isinstance(m, shares.ShareMember) and m.epoch > 0]


def settle(peer: Peer, group: str, member_ids: list[str], topics: list[str]) -> None:
    """Heartbeat the members in the group until together they hold every
    partition they subscribe to and a round changes nothing (bounded)."""
    deadline = time.monotonic() + SETTLE_S
    before: Any = None
    while time.monotonic() < deadline:
        members = _in_group(peer, group, member_ids)
        for member in members:
            shares._answered(peer, topics, member,
                             shares._heartbeat(peer, group, member, member.epoch))
        members = _in_group(peer, group, member_ids)
        names = topic_names(peer, topics)
        held = {(names.get(tid, "?"), p) for m in members for tid, parts in m.owned.items()
                for p in parts}
        wanted = _partitions(peer, sorted({t for m in members for t in m.subscribed}))
        now = (sorted(held), [(m.epoch, sorted(m.owned.items())) for m in members])
        if held == wanted and now == before:
            return
        before = now
        time.sleep(0.1)


def _control_offsets(records: Any) -> set[int]:
    """The offsets of the control batches (transaction markers) among the
    log batches of a ShareFetch answer's partition."""
    raw, found, at = bytes(records or b""), set(), 0
    while at + 27 <= len(raw):
        base, length = struct.unpack_from(">qi", raw, at)
        attributes, delta = struct.unpack_from(">hi", raw, at + 21)
        if attributes & 0x20:
            found.update(range(base, base + delta + 1))
        at += 12 + length
    return found


class _Round:
    """What one loop saw, over all members and requests."""

    def __init__(self) -> None:
        self.acquired: set[tuple[str, int, int, int]] = set()
        #: acquired offsets of transaction markers (F23: Kafka acquires them)
        self.markers: set[tuple[str, int, int, int]] = set()
        self.errors: set[tuple[str, str, int, int]] = set()  # (what, topic, partition, code)
        self.session: list[tuple[str, int]] = []  # (request, top-level error)


def _leaders(peer: Peer, owned: set[Tp]) -> dict[str | None, set[Tp]]:
    by: dict[str | None, set[Tp]] = {}
    for tp in sorted(owned):
        by.setdefault(ops._leader(peer, *tp), set()).add(tp)
    return by


def _ack_topics(cls_topic: Any, cls_part: Any, cls_batch: Any, ids: dict[str, uuid.UUID],
                acks: dict[Tp, list[tuple[int, int, int]]], fetch: set[Tp] | None = None
                ) -> tuple[Any, ...]:
    parts: dict[str, list[Any]] = {}
    for tp in sorted(set(acks) | (fetch or set())):
        batches = tuple(cls_batch(first_offset=i64(f), last_offset=i64(last),
                                  acknowledge_types=(i8(k),)) for f, last, k in acks.get(tp, ()))
        if tp[0] in ids:
            parts.setdefault(tp[0], []).append(
                cls_part(partition_index=i32(tp[1]), acknowledgement_batches=batches))
    return tuple(cls_topic(topic_id=ids[t], partitions=tuple(ps)) for t, ps in parts.items())


def _share_fetch(peer: Peer, group: str, member: shares.ShareMember, address: str | None,
                 epoch: int, ids: dict[str, uuid.UUID], fetch: set[Tp],
                 acks: dict[Tp, list[tuple[int, int, int]]], max_records: int = 500) -> Any:
    """A ShareFetch of ``fetch`` (and of the partitions ``acks`` acknowledge);
    in a session already open, the partitions it held that are not fetched
    now are forgotten, as clients do (``ShareMember.in_session``)."""
    want = {(ids[t], p) for t, p in set(acks) | fetch if t in ids}
    held = member.in_session.get(address, set()) if epoch > 0 else set()
    forgotten: dict[uuid.UUID, list[int]] = {}
    for tid, index in sorted(held - want):
        forgotten.setdefault(tid, []).append(index)
    answer = peer.call_kio(fetch_v1.ShareFetchRequest(
        group_id=GroupId(group), member_id=member.member_id, share_session_epoch=i32(epoch),
        max_wait=datetime.timedelta(milliseconds=WAIT_MS), min_bytes=i32(1),
        max_bytes=i32(1 << 20), max_records=i32(max_records), batch_size=i32(500),
        topics=_ack_topics(fetch_v1.FetchTopic, fetch_v1.FetchPartition,
                           fetch_v1.AcknowledgementBatch, ids, acks, fetch),
        forgotten_topics_data=tuple(
            fetch_v1.ForgottenTopic(topic_id=tid, partitions=tuple(i32(i) for i in parts))
            for tid, parts in forgotten.items())), address)
    if answer != CLOSED and not _code(answer.error_code):  # the session took it
        member.in_session[address] = want  # what it held, less what it forgot, and want
    return answer


def _share_ack(peer: Peer, group: str, member: shares.ShareMember, address: str | None,
               epoch: int, ids: dict[str, uuid.UUID],
               acks: dict[Tp, list[tuple[int, int, int]]]) -> Any:
    return peer.call_kio(ack_v1.ShareAcknowledgeRequest(
        group_id=GroupId(group), member_id=member.member_id, share_session_epoch=i32(epoch),
        topics=_ack_topics(ack_v1.AcknowledgeTopic, ack_v1.AcknowledgePartition,
                           ack_v1.AcknowledgementBatch, ids, acks)), address)


def _read(answer: Any, names: dict[uuid.UUID, str], seen: _Round, what: str,
          held: dict[Tp, list[int]] | None) -> bool:
    """Note what ``answer`` says in ``seen``; True when the request was
    taken (no top-level error). Acquired offsets go to ``held``."""
    if answer == CLOSED:
        seen.session.append((what, -1))
        return False
    top = _code(answer.error_code)
    if top:
        seen.session.append((what, top))
        return False
    for topic in answer.responses:
        name = names.get(topic.topic_id, "?unknown topic id")
        for part in topic.partitions:
            index = int(part.partition_index)
            if _code(part.error_code):
                seen.errors.add((what, name, index, _code(part.error_code)))
            ack_error = _code(getattr(part, "acknowledge_error_code", 0))
            if ack_error:
                seen.errors.add((what + " ack", name, index, ack_error))
            markers = _control_offsets(getattr(part, "records", None))
            for r in getattr(part, "acquired_records", ()):
                for offset in range(int(r.first_offset), int(r.last_offset) + 1):
                    (seen.markers if offset in markers else seen.acquired).add(
                        (name, index, offset, int(r.delivery_count)))
                    if held is not None:
                        held.setdefault((name, index), []).append(offset)
    return True


def _next(member: shares.ShareMember, address: str | None, taken: bool,
          top_error: bool) -> None:
    """The member's session epoch at ``address`` after a request."""
    epoch = member.sessions.get(address, 0)
    if taken:
        member.sessions[address] = 1 if epoch in (0, -1) else epoch + 1
    elif top_error:
        member.sessions[address] = 0  # a client opens a new session


def share_consume(peer: Peer, group: str, member_ids: list[str], topics: list[str],
                  how: str, piggyback: bool, close: bool, abandon: bool = False
                  ) -> Observation:
    """Poll until nothing more comes, acknowledging ``how``; ``piggyback``:
    acknowledgements ride on the next ShareFetch; ``close``: each session
    is closed at the end (ShareAcknowledge at epoch -1); ``abandon``: the
    consumers stop after the first round that acquired records and close
    their sessions without acknowledging them (a consumer closed holding
    records: Kafka makes them available again, delivery count kept, S17)."""
    settle(peer, group, member_ids, topics)
    members = _in_group(peer, group, member_ids)
    if not any(m.owned for m in members):
        return "no member holds partitions"
    seen, empty, acquired = _Round(), 0, False
    ids_to_names = topic_names(peer, topics)
    ids = {name: tid for tid, name in ids_to_names.items()}
    pending: dict[tuple[int, str | None], dict[Tp, list[tuple[int, int, int]]]] = {}
    for _ in range(MAX_ROUNDS):
        got = False
        for who, member in enumerate(members):
            owned = {(ids_to_names[tid], p) for tid, parts in member.owned.items()
                     for p in parts if tid in ids_to_names}
            for address, fetch in _leaders(peer, owned).items():
                acks = pending.pop((who, address), {})
                epoch = member.sessions.get(address, 0)
                if acks and not piggyback or acks and epoch == 0:
                    answer = _share_ack(peer, group, member, address, epoch, ids, acks)
                    taken = _read(answer, ids_to_names, seen, "ack", None)
                    _next(member, address, taken, answer != CLOSED)
                    acks, epoch = {}, member.sessions.get(address, 0)
                held: dict[Tp, list[int]] = {}
                answer = _share_fetch(peer, group, member, address, epoch, ids, fetch, acks)
                taken = _read(answer, ids_to_names, seen, "fetch", held)
                _next(member, address, taken, answer != CLOSED)
                if held:
                    got = True
                    pending[(who, address)] = {tp: _batches(how, offs)
                                               for tp, offs in held.items()}
        acquired = acquired or got
        empty = 0 if got or pending else empty + 1
        if empty >= (EMPTY_ROUNDS if acquired else FIRST_EMPTY_ROUNDS):
            break
        if abandon and got:
            pending, close = {}, True
            break
    for (who, address), acks in pending.items():  # what the last round left: at once
        member = members[who]
        answer = _share_ack(peer, group, member, address, member.sessions.get(address, 0),
                            ids, acks)
        _next(member, address, _read(answer, ids_to_names, seen, "ack", None), True)
    if close:
        for member in members:
            for address, epoch in list(member.sessions.items()):
                if epoch > 0:
                    answer = _share_ack(peer, group, member, address, -1, ids, {})
                    _read(answer, ids_to_names, seen, "close", None)
                    member.sessions[address] = 0
    return ("ok", tuple(sorted(seen.acquired)), tuple(sorted(seen.errors)),
            tuple(sorted(set(seen.session))), tuple(sorted(seen.markers)))


def share_poll_join(peer: Peer, group: str, member_id: str, who: int, subscribed: list[str],
                    topics: list[str]) -> Observation:
    """A poll's heartbeat: ``who`` joins subscribed to ``subscribed`` unless
    it is in the group; the join's error (when it is assigned is timing, S1)."""
    if shares._member(peer, group, who, member_id).epoch > 0:
        return "in the group"
    seen = shares.share_join(peer, group, member_id, who, subscribed, topics)
    return seen if seen == CLOSED else seen[:2]


MISUSES = ("epoch ahead", "epoch behind", "no session", "acks on open", "ack unacquired")


def share_session_misuse(peer: Peer, group: str, member_id: str, who: int,
                         topics: list[str], how: str) -> Observation:
    """One wrong request by member ``who`` (``MISUSES``) naming a partition
    of the topics it subscribes to (not of its assignment, which comes at
    Kafka's own time, S1), to a broker where it has a share session open
    (else that partition's leader): on 3 brokers, which broker leads which
    partition is each cluster's own, so the errors are compared without the
    partition they name. "no session" is sent by a member id no broker knows;
    "ack unacquired" goes to the first subscribed partition's leader, if the
    member has a session there (with two members, whether it has is the
    assignor's placement: ``_allowed``)."""
    member = shares._member(peer, group, who, member_id)
    names = topic_names(peer, topics)
    ids = {name: tid for tid, name in names.items()}
    subscribed = sorted(_partitions(peer, list(member.subscribed)))
    if not subscribed:
        return "subscribes to no topic that exists"
    open_at = [a for a, e in member.sessions.items() if e > 0]
    if how == "ack unacquired":  # the offsets must be the same partition's on both
        tp = subscribed[0]
        address = ops._leader(peer, *tp)
    else:
        address = open_at[0] if open_at else ops._leader(peer, *subscribed[0])
        tp = next((tp for tp in subscribed if ops._leader(peer, *tp) == address),
                  subscribed[0])
    epoch = member.sessions.get(address, 0)
    seen = _Round()
    acks = {tp: [(0, 2, ACCEPT)]}
    if how == "ack unacquired":
        if epoch <= 0:
            return "no session open at the partition's leader"
        _read(_share_ack(peer, group, member, address, epoch, ids, acks), names, seen, how,
              None)
        # the client gives the session up (F22: after Kafka's UNKNOWN_SERVER_ERROR its
        # session epoch has moved anyway)
        _read(_share_ack(peer, group, member, address, -1, ids, {}), names, seen, "close",
              None)
        member.sessions[address] = 0
    else:
        sent = {"epoch ahead": epoch + 2, "epoch behind": epoch - 1, "no session": 7,
                "acks on open": 0}[how]
        if how == "epoch behind" and epoch <= 1:
            return "not applicable"
        sender = member if how != "no session" else dataclasses.replace(
            member, member_id=str(uuid.uuid5(uuid.UUID(member.member_id), "stranger")))
        answer = _share_fetch(peer, group, sender, address, sent, ids, {tp},
                              acks if how == "acks on open" else {})
        if _read(answer, names, seen, how, {}) and sender is member:  # its session moved
            member.sessions[address] = sent + 1 if sent > 0 else 1
    return (tuple(sorted({(e[0], e[3]) for e in seen.errors})), tuple(seen.session),
            len(seen.acquired))
