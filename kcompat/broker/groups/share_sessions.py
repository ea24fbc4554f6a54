"""Share sessions (KIP-932): which partitions a share consumer fetches from a leader.

Theory of operation
-------------------
A share consumer keeps one share session per leader it fetches from, keyed by
(share group, member id), numbered by a session epoch: ShareFetch with epoch 0
opens it (replacing an earlier one of that member) with the partitions it
names; every later request must carry the next epoch (1, 2, ...) and may add
partitions or forget them (``forgotten_topics_data``); epoch -1 closes it —
the request's acknowledgements are applied, nothing is fetched, and the
member's records still acquired in its partitions are released, their
delivery counted (archived at the limit), as Kafka 4.4.0 does. A wrong epoch is
INVALID_SHARE_SESSION_EPOCH, a missing session SHARE_SESSION_NOT_FOUND
(the consumer opens a new one). ShareAcknowledge uses the session without
changing its partitions: its epoch must be the next one, or -1 to close.

A session keeps the topic id each partition was named with: a topic deleted
(or deleted and re-created: a new id under the same name) while the session
names it is UNKNOWN_TOPIC_OR_PARTITION for that partition in every answer,
as in Kafka, until the consumer forgets it or names the new topic's id.

Sessions live in the broker's memory only, as in Kafka: after a restart or a
leader change a consumer's next request finds none and starts again at 0. A
full cache (``group.share.max.share.sessions``) first evicts the sessions
idle for longer than ``IDLE_EVICT_MS`` — members that died without closing
them (their records come back when their locks expire).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_SESSIONS = 2000  # Kafka's group.share.max.share.sessions
IDLE_EVICT_MS = 120_000  # past any share.session.timeout.ms (at most 60 s in Kafka)

Partition = tuple[str, int]


@dataclass(eq=False)
class Session:
    group_id: str
    member_id: str
    next_epoch: int = 1
    # ordered: each partition -> the id of the topic it was named with
    partitions: dict[Partition, uuid.UUID | None] = field(default_factory=dict)
    turn: int = 0  # which partition the next fetch starts with (each in turn)
    used_ms: int = 0  # when a request last used it


class ShareSessions:
    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> Session | None:
        return self._sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, now_ms: int = 0
             ) -> tuple[Session | None, Session | None]:
        """A new session (epoch 0), and the one it replaces; (None, None) when
        the cache is full of sessions in use (SHARE_SESSION_LIMIT_REACHED)."""
        key = (group_id, member_id)
        old = self._sessions.pop(key, None)
        if old is None and len(self._sessions) >= self.max_sessions:
            for idle in [k for k, s in self._sessions.items()
                         if now_ms - s.used_ms > IDLE_EVICT_MS]:
                del self._sessions[idle]
            if len(self._sessions) >= self.max_sessions:
                return None, None
        session = self._sessions[key] = Session(group_id, member_id, used_ms=now_ms)
        return session, old

    def advance(self, group_id: str, member_id: str, epoch: int, now_ms: int = 0
                ) -> tuple[Session | None, ErrorCode]:
        """The session a request with ``epoch`` (> 0 or -1) continues; -1
        removes it from the cache (the caller releases its records)."""
        key = (group_id, member_id)
        session = self._sessions.get(key)
        if session is None:
            return None, ErrorCode.share_session_not_found
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            return session, ErrorCode.none
        if epoch != session.next_epoch:
            return None, ErrorCode.invalid_share_session_epoch
        session.next_epoch = epoch + 1 if epoch < (1 << 31) - 1 else 1
        session.used_ms = now_ms
        return session, ErrorCode.none

    def drop_member(self, group_id: str, member_id: str) -> Session | None:
        return self._sessions.pop((group_id, member_id), None)
