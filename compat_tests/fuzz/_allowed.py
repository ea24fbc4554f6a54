"""The differences between Apache Kafka and kcompat the fuzzer accepts.

Each entry is a difference a client cannot act on differently, or a choice
Kafka leaves to the broker, with its reason. Error messages, throttle times,
topic ids, leaders and epochs are never compared (``_ops`` leaves them out of
what it observes). Everything else must be the same: a new entry here needs
a reason a Kafka user would accept, and a line in compat_tests/FINDINGS.md.
"""

from __future__ import annotations

from typing import Any


def _is_ok(seen: Any) -> bool:
    return isinstance(seen, tuple) and bool(seen) and seen[0] == "ok"


def _spread(parts: list[tuple[tuple[str, int], ...] | str]) -> Any:
    """Members' partitions as an assignor's placement-free outcome: which
    members are out of the group, how many partitions the others hold (as a
    multiset: which member gets the odd one is placement too), every
    partition assigned, and whether one is assigned twice."""
    every = [p for member in parts if not isinstance(member, str) for p in member]
    return (tuple(m if isinstance(m, str) else "in" for m in parts),
            tuple(sorted(len(m) for m in parts if not isinstance(m, str))),
            tuple(sorted(set(every))), len(every) != len(set(every)))


def _settled_alike(_args: Any, kafka: Any, kcompat: Any) -> bool:
    """Settled alike: placement-free (``_spread``). And when a member is out
    of the group by the fuzzer's account (fenced, its epoch reset) it may
    still hold partitions at the broker until its session ends: which of them
    the members in view hold is then placement too (a 3-broker run, one
    member in view holding a-1 on Kafka and a-0 on kcompat), so only the
    counts are compared."""
    if kafka == "connection closed" or kcompat == "connection closed" or kafka[0] != kcompat[0]:
        return False
    seen = [_spread(list(kafka[1])), _spread(list(kcompat[1]))]
    if "not in the group" in (*kafka[1], *kcompat[1]):
        seen = [(s[0], s[1], s[3]) for s in seen]
    return seen[0] == seen[1]


def _described_alike(_args: Any, kafka: Any, kcompat: Any) -> bool:
    if not (_is_ok(kafka) and _is_ok(kcompat)):
        return False

    def reduced(seen: Any) -> Any:
        # (who, epoch relation, subscriptions, assignment, target, member type)
        members = seen[4]
        spread = _spread([m[4] for m in members])
        if seen[3] == "assignment behind":  # the target of a membership since changed:
            spread = (spread[0], spread[1], spread[3])  # partitions of members gone
        return (seen[2], seen[3], tuple((m[0], m[2], m[5]) for m in members), spread)

    targets_differ = [m[4] for m in kafka[4]] != [m[4] for m in kcompat[4]]
    if targets_differ:
        return reduced(kafka) == reduced(kcompat)
    # the same targets, members still holding what an earlier placement gave them
    # (each one's state towards its target, and how many it holds, alike)
    held = [_spread([m[3] for m in seen[4]]) for seen in (kafka, kcompat)]
    return reduced(kafka) == reduced(kcompat) and [m[1] for m in kafka[4]] == [
        m[1] for m in kcompat[4]] and [(h[0], h[1], h[3]) for h in held] == [
        (held[0][0], held[0][1], held[0][3])] * 2


def _share_described_alike(_args: Any, kafka: Any, kcompat: Any) -> bool:
    if not (_is_ok(kafka) and _is_ok(kcompat)):
        return False
    # the assignor, and each member (who) and its subscription
    return (kafka[2], tuple(m[::2] for m in kafka[4])) == \
        (kcompat[2], tuple(m[::2] for m in kcompat[4]))


#: the answers for a share session's partitions of a topic id no longer in the
#: metadata (F21, F32): UNKNOWN_SERVER_ERROR, NOT_LEADER_OR_FOLLOWER (Kafka, an
#: incarnation it had loaded), UNKNOWN_TOPIC_OR_PARTITION (one it never loaded; kcompat)
STALE_TOPIC_ID_ERRORS = (-1, 6, 3)


def _share_consumed_alike(_args: Any, kafka: Any, kcompat: Any) -> bool:
    """Alike once three known differences are left out. F21 and F32: a share
    session's partitions of a topic id no longer in the metadata. Kafka keeps
    one entry per incarnation of a re-created topic, answered
    UNKNOWN_SERVER_ERROR (-1), NOT_LEADER_OR_FOLLOWER (6) on 3 brokers, or
    UNKNOWN_TOPIC_OR_PARTITION (3) for one it never loaded. kcompat keeps one
    per topic name: none once the request names the new id, or one stale id
    answered 3, and a partition the new topic lacks answered 3 under the new
    id. So the requests in which kcompat gives a stale-id error must be among
    Kafka's, and its 3s for those partitions are left out. F23: the
    transaction markers Kafka acquires (kcompat archives them as gaps, never
    handing them out). And which partition of a deleted topic a member's
    session held, which is the assignor's placement (the errors of a topic
    the metadata lacks are compared without the partition index)."""
    if not (_is_ok(kafka) and _is_ok(kcompat)) or kcompat[4]:
        return False

    def stale(e: Any) -> bool:
        return e[1] == "?unknown topic id" and e[3] in STALE_TOPIC_ID_ERRORS

    old_ids = {(e[0], e[2]) for e in kafka[2] if stale(e)}
    # kcompat answers an old id's partition the re-created topic lacks under the
    # new id, UNKNOWN_TOPIC_OR_PARTITION (its session is keyed by name: F21)
    mine = tuple(e for e in kcompat[2] if not (e[3] == 3 and (e[0], e[2]) in old_ids))

    def placed(seen: tuple[Any, ...]) -> Any:
        return sorted({(e[0], e[1], -1 if e[1] == "?unknown topic id" else e[2], e[3])
                       for e in seen if not stale(e)})

    def stale_ops(seen: tuple[Any, ...]) -> set[Any]:
        return {e[0] for e in seen if stale(e)}

    return (kafka[:2], placed(kafka[2]), kafka[3]) == (kcompat[:2], placed(mine), kcompat[3]) \
        and stale_ops(kcompat[2]) <= stale_ops(kafka[2])


def _past_the_log_end(args: Any, kafka: Any, kcompat: Any) -> bool:
    """Kafka failed the whole ShareAcknowledge (UNKNOWN_SERVER_ERROR) where
    kcompat refused the partition (INVALID_RECORD_STATE, or INVALID_REQUEST
    with records in flight: F24); the close after it alike."""
    if args[-1] != "ack unacquired" or not (isinstance(kafka, tuple) and len(kafka) == 3
                                            and isinstance(kcompat, tuple)):
        return False
    kafka_errors, kafka_session, _ = kafka
    return (kafka_session[:1] == (("ack unacquired", -1),) and not kafka_errors
            and [e[1] for e in kcompat[0] if e[0] == "ack unacquired"] in ([42], [121])
            and kcompat[1] == kafka_session[1:] and kcompat[2] == kafka[2])


def _session_placed(args: Any, kafka: Any, kcompat: Any) -> bool:
    """One broker's member has no session at the partition's leader: the
    partition went to the other member there (placement)."""
    return args[-1] == "ack unacquired" and "no session open at the partition's leader" in (
        kafka, kcompat) and isinstance(kafka, tuple) != isinstance(kcompat, tuple)


#: (operation, a predicate of (args, kafka's observation, kcompat's), the reason)
ALLOWED: list[tuple[str, Any, str]] = [
    # KIP-848: both brokers assign with "uniform" (group.consumer.assignors'
    # first, Kafka 4.4's default and kcompat's), balanced and sticky, but
    # where members' subscriptions differ the two place partitions
    # differently (e.g. which of a shared topic's partitions the member that
    # also has a new topic gives up). Where placement is the assignor's
    # choice, the fuzzer compares that every partition is assigned once and
    # how many each member holds (a settled group), and the error of every
    # heartbeat; the steps a member takes towards its target (epoch moves,
    # revocations) follow from the placement.
    ("consumer_settle", _settled_alike, "KIP-848 assignor placement (uniform, heterogeneous)"),
    ("consumer_describe", _described_alike,
     "KIP-848 assignor placement (uniform, heterogeneous)"),
    # a commit at the epoch before (KIP-1251) is accepted for the partitions
    # the member has held since: the member holds it on one broker only
    ("consumer_commit", lambda args, kafka, kcompat: args[3] and isinstance(kafka, tuple)
     and isinstance(kcompat, tuple) and kafka[1] != kcompat[1],
     "KIP-848 assignor placement: a stale commit of a partition one broker placed with "
     "the member"),
    *((op, lambda _a, kafka, kcompat: _is_ok(kafka) and _is_ok(kcompat),
       "KIP-848 reconciliation steps follow the assignor's placement")
      for op in ("consumer_join", "consumer_heartbeat", "consumer_resubscribe",
                 "consumer_misbehave")),
    # Share groups: Kafka 4.4 assigns a share member a partition only once its
    # share coordinator initialized the partition's state, which it asks for
    # after answering a heartbeat; the group epoch moves when that completes.
    # When a member first gets its partitions is timing: the fuzzer compares
    # the heartbeats' errors, and each described member's subscription.
    *((op, lambda _a, kafka, kcompat: _is_ok(kafka) and _is_ok(kcompat),
       "share assignments follow Kafka's asynchronous share-partition initialization")
      for op in ("share_join", "share_heartbeat")),
    ("share_describe", _share_described_alike,
     "share assignments follow Kafka's asynchronous share-partition initialization"),
    # F21: a topic deleted and re-created under its name while a member's share
    # session holds its partitions. Kafka keys the session by topic id: the
    # old id's partitions stay and each ShareFetch answers them
    # UNKNOWN_SERVER_ERROR (NOT_LEADER_OR_FOLLOWER on 3 brokers); kcompat's session keeps one id per topic name, so
    # naming the new id replaces the old (FINDINGS, "topic re-created under the
    # same name"). A client drops the old id either way.
    # Placement: two members split a deleted topic's partitions; which one's
    # session held which is the assignor's choice (its errors compared
    # without the partition index).
    # F23: Kafka acquires a transaction marker's offset (read_uncommitted)
    # and hands it out in AcquiredRecords with its control batch; kcompat
    # archives it as a gap. Both clients acknowledge an acquired offset that
    # holds no record as GAP, so the marker ends archived on both. The data
    # records acquired, and their delivery counts, must still agree.
    ("share_consume", _share_consumed_alike,
     "F21: a re-created topic's old id in a share session; F23: transaction markers"),
    # F22: ShareAcknowledge of offsets from below the share-partition's start
    # to past the log end (never acquired): Kafka 4.4 fails the request with
    # UNKNOWN_SERVER_ERROR (and its session epoch moves); kcompat refuses that
    # partition as Kafka does other offsets never handed out (F24).
    # Both refuse the acknowledgement; a client gives its session up after
    # either.
    ("share_session_misuse", _session_placed,
     "share assignor placement: which member's session holds the partition"),
    ("share_session_misuse", _past_the_log_end,
     "F22: acknowledgements past the log end: Kafka UNKNOWN_SERVER_ERROR, kcompat a "
     "partition error"),
]


def allowed(op: str, args: tuple[Any, ...], kafka: Any, kcompat: Any) -> str | None:
    """The reason the difference is allowed, or None."""
    for name, predicate, reason in ALLOWED:
        if name == op and predicate(args, kafka, kcompat):
            return reason
    return None
