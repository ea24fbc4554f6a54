"""Pure replication rules: how a leader validates a follower's fetch, how a
follower resolves divergence, and when the high watermark may advance.

Theory of operation
-------------------
Replication is pulled, as in KRaft (KIP-595). A follower asks for entries from
``fetch_offset`` (its log end) and names ``last_fetched_term``, the term of
its entry at ``fetch_offset - 1``. The leader answers from ``validate_fetch``:

* ``fetch_offset`` below the leader's log start, or at the log start with a
  term other than the snapshot's — the follower needs the snapshot
  (``snapshot_id``; KIP-630);
* the leader's largest term <= ``last_fetched_term`` is not that term, or that
  term ends before ``fetch_offset`` — the logs diverge; the answer is that
  (term, end) pair (Fetch's DivergingEpoch). The follower truncates
  (``truncation_point``: to ``min(end, its own end for that term)`` if it has
  that term, else to the end of its largest term below it) and fetches
  again. This replaces Raft's per-entry consistency check (§5.3) with one
  round trip per divergent *term*;
* otherwise the follower's log is a prefix of the leader's: the leader's entry
  at ``fetch_offset - 1`` has the same term, and by the Log Matching Property
  (§5.3) so does everything below. ``fetch_offset`` is then the follower's
  durable match, counted towards the quorum.

Why a truncation point never cuts a committed entry: every entry the follower
drops has a term the leader does not have at that offset, so it conflicts with
the leader's log; by Leader Completeness (§5.4) a conflicting entry was never
committed. A truncation point is the end of a term both logs share (equal
prefixes by Log Matching) or of one of the follower's own terms — an entry
boundary either way.

Commit (§5.4.2): the leader advances the high watermark to the largest offset
N that a quorum (itself included, counting only its *durable* log) has
reached, and only if the entry at N - 1 has the leader's current term; older
entries become committed indirectly. The leader-change entry a new leader
writes first makes that happen without waiting for a client write.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcompat.raft.log import RaftLog
from kcompat.raft.types import EpochEnd, SnapshotId


@dataclass(frozen=True, slots=True)
class FetchCheck:
    """The outcome of validating a fetch: exactly one field is set."""

    match_end: int | None = None
    diverging: EpochEnd | None = None
    snapshot_id: SnapshotId | None = None


def validate_fetch(log: RaftLog, fetch_offset: int, last_fetched_term: int) -> FetchCheck:
    """The leader's check of a follower's (fetch offset, last fetched term)."""
    snap = log.snapshot_id
    if fetch_offset < log.start:
        return FetchCheck(snapshot_id=snap)
    if fetch_offset == log.start:
        if last_fetched_term == snap.term:
            return FetchCheck(match_end=fetch_offset)
        return FetchCheck(snapshot_id=snap)
    found = log.end_for_term(last_fetched_term)
    if found is None:
        return FetchCheck(snapshot_id=snap)
    if found.term != last_fetched_term or found.end < fetch_offset:
        return FetchCheck(diverging=found)
    return FetchCheck(match_end=fetch_offset)


def truncation_point(log: RaftLog, diverging: EpochEnd) -> int:
    """Where a follower truncates on a DivergingEpoch (KIP-320/KIP-595).

    If the follower has the leader's term, the logs agree up to the smaller of
    the two end offsets for it. If not, the follower truncates to the end of
    its own largest term below it and asks again (a later round settles the
    rest): every entry past that point has a term in ``(diverging.term,
    last_fetched_term]``, a range the leader holds nothing of. Never below the
    log start: the snapshot below it is committed on both sides."""
    own = log.end_for_term(diverging.term)
    if own is None:
        return log.start
    if own.term == diverging.term:
        return min(diverging.end, own.end)
    return own.end


def quorum_end(match_ends: list[int], quorum: int) -> int:
    """The largest offset reached by at least ``quorum`` of ``match_ends``."""
    return sorted(match_ends, reverse=True)[quorum - 1]


def next_high_watermark(log: RaftLog, term: int, hw: int, quorum_match: int) -> int:
    """§5.4.2: move the high watermark to ``quorum_match`` only when that is
    progress and the entry just below it belongs to the current ``term``."""
    if quorum_match > hw and log.term_at(quorum_match - 1) == term:
        return quorum_match
    return hw
