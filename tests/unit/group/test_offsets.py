"""__consumer_offsets records and offset expiry."""

from __future__ import annotations

import struct

from kcompat.group.group import Group, GroupState
from kcompat.group.offsets import (
    CommittedOffset,
    OffsetStore,
    group_key,
    offset_key,
    offset_value,
)

DAY_MS = 86_400_000


def test_offset_key_layout_matches_kafka_v1() -> None:
    key = offset_key("grp", "tp", 7)
    assert key == struct.pack(">h", 1) + b"\x00\x03grp" + b"\x00\x02tp" + struct.pack(">i", 7)


def test_commit_delete_and_group_tombstone() -> None:
    store = OffsetStore()
    store.apply(offset_key("g", "t", 0), offset_value(CommittedOffset(5, 2, "meta", 100)))
    store.apply(offset_key("g", "t", 1), offset_value(CommittedOffset(9, -1, "", 100)))
    assert store.committed("g")[("t", 0)] == CommittedOffset(5, 2, "meta", 100)
    store.apply(offset_key("g", "t", 0), None)
    assert list(store.committed("g")) == [("t", 1)]
    store.apply(group_key("g"), None)
    assert store.committed("g") == {}


def test_kafka_v1_offset_value_is_read() -> None:
    # value v1: version, offset, metadata, commit timestamp, expire timestamp
    v1 = struct.pack(">hq", 1, 42) + b"\x00\x00" + struct.pack(">qq", 1000, 2000)
    store = OffsetStore()
    store.apply(offset_key("g", "t", 0), v1)
    assert store.committed("g")[("t", 0)].offset == 42


def test_expiry_of_empty_consumer_group_counts_from_when_it_emptied() -> None:
    store = OffsetStore()
    store.apply(offset_key("g", "t", 0), offset_value(CommittedOffset(1, -1, "", 0)))
    group = Group("g", state=GroupState.EMPTY, protocol_type="consumer", state_since_ms=5 * DAY_MS)
    assert store.expired(group, "g", 11 * DAY_MS, 7 * DAY_MS) == []
    assert store.expired(group, "g", 12 * DAY_MS, 7 * DAY_MS) == [("t", 0)]
    group.state = GroupState.STABLE
    assert store.expired(group, "g", 30 * DAY_MS, 7 * DAY_MS) == []


def test_standalone_offsets_expire_one_by_one() -> None:
    store = OffsetStore()
    store.apply(offset_key("s", "t", 0), offset_value(CommittedOffset(1, -1, "", 0)))
    store.apply(offset_key("s", "t", 1), offset_value(CommittedOffset(1, -1, "", 3 * DAY_MS)))
    assert store.expired(Group("s"), "s", 8 * DAY_MS, 7 * DAY_MS) == [("t", 0)]
