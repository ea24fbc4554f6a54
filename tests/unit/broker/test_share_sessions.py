"""Share sessions (KIP-932): open and replace, the epoch sequence, wrong and
missing sessions, the final epoch, and the cache limit."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kcompat.broker.groups.share_sessions import FINAL_EPOCH, IDLE_EVICT_MS, ShareSessions

OK = ErrorCode.none


def test_open_starts_at_epoch_one_and_replaces_the_members_session() -> None:
    sessions = ShareSessions()
    first, old = sessions.open("g", "m")
    assert first is not None and old is None
    assert (first.group_id, first.member_id, first.next_epoch) == ("g", "m", 1)
    first.partitions[("t", 0)] = None
    assert sessions.advance("g", "m", 1) == (first, OK)
    second, old = sessions.open("g", "m")
    assert old is first and second is not None and second is not first
    assert second.next_epoch == 1 and not second.partitions
    assert sessions.get("g", "m") is second and len(sessions) == 1


def test_sessions_are_per_group_and_member() -> None:
    sessions = ShareSessions()
    a, _ = sessions.open("g", "m")
    b, _ = sessions.open("g", "n")
    c, _ = sessions.open("h", "m")
    assert len({id(a), id(b), id(c)}) == 3 and len(sessions) == 3
    assert sessions.advance("g", "m", 1) == (a, OK)
    assert sessions.advance("h", "m", 1) == (c, OK)  # its own sequence
    assert sessions.advance("g", "n", 2)[1] == ErrorCode.invalid_share_session_epoch


def test_each_request_carries_the_next_epoch() -> None:
    sessions = ShareSessions()
    session, _ = sessions.open("g", "m")
    for epoch in range(1, 6):
        assert sessions.advance("g", "m", epoch) == (session, OK)
    assert session is not None and session.next_epoch == 6


def test_the_epoch_wraps_past_int32_max_to_one() -> None:
    sessions = ShareSessions()
    session, _ = sessions.open("g", "m")
    assert session is not None
    session.next_epoch = (1 << 31) - 1
    assert sessions.advance("g", "m", (1 << 31) - 1) == (session, OK)
    assert session.next_epoch == 1


def test_a_wrong_epoch_is_invalid_and_leaves_the_session_as_it_was() -> None:
    sessions = ShareSessions()
    session, _ = sessions.open("g", "m")
    sessions.advance("g", "m", 1)
    for wrong in (1, 3, 0, -2, 100):
        assert sessions.advance("g", "m", wrong) == (None, ErrorCode.invalid_share_session_epoch)
    assert sessions.advance("g", "m", 2) == (session, OK)


def test_no_session_is_share_session_not_found() -> None:
    sessions = ShareSessions()
    assert sessions.advance("g", "m", 1) == (None, ErrorCode.share_session_not_found)
    assert sessions.advance("g", "m", FINAL_EPOCH) == (None, ErrorCode.share_session_not_found)
    sessions.open("g", "m")
    assert sessions.advance("g", "other", 1) == (None, ErrorCode.share_session_not_found)
    assert sessions.advance("other", "m", 1) == (None, ErrorCode.share_session_not_found)


def test_the_final_epoch_removes_the_session() -> None:
    sessions = ShareSessions()
    session, _ = sessions.open("g", "m")
    sessions.advance("g", "m", 1)
    assert sessions.advance("g", "m", FINAL_EPOCH) == (session, OK)
    assert sessions.get("g", "m") is None and len(sessions) == 0
    assert sessions.advance("g", "m", 2) == (None, ErrorCode.share_session_not_found)
    reopened, old = sessions.open("g", "m")
    assert old is None and reopened is not None and reopened.next_epoch == 1


def test_drop_member() -> None:
    sessions = ShareSessions()
    session, _ = sessions.open("g", "m")
    assert sessions.drop_member("g", "m") is session
    assert sessions.drop_member("g", "m") is None and len(sessions) == 0


def test_the_limit_refuses_new_sessions_but_not_replacements() -> None:
    sessions = ShareSessions(max_sessions=2)
    a, _ = sessions.open("g", "a")
    sessions.open("g", "b")
    assert sessions.open("g", "c") == (None, None)
    assert sessions.get("g", "c") is None and len(sessions) == 2
    replaced, old = sessions.open("g", "a")  # the member's own session: room for it
    assert replaced is not None and old is a and len(sessions) == 2
    sessions.advance("g", "b", FINAL_EPOCH)
    fresh, old = sessions.open("g", "c")
    assert fresh is not None and old is None and len(sessions) == 2


def test_a_full_cache_evicts_sessions_idle_past_the_limit_first() -> None:
    sessions = ShareSessions(max_sessions=2)
    sessions.open("g", "dead", now_ms=0)
    sessions.open("g", "busy", now_ms=0)
    assert sessions.advance("g", "busy", 1, now_ms=IDLE_EVICT_MS)[1] == ErrorCode.none
    assert sessions.open("g", "new", now_ms=IDLE_EVICT_MS) == (None, None)  # not idle yet
    fresh, old = sessions.open("g", "new", now_ms=IDLE_EVICT_MS + 1)
    assert fresh is not None and old is None
    assert sessions.get("g", "dead") is None and sessions.get("g", "busy") is not None
