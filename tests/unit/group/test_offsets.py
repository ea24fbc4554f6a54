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


class _NoWalk(dict):  # type: ignore[type-arg]
    """Groups' offsets that refuse a walk over every group."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("walked every group's offsets")

    def items(self):  # type: ignore[no-untyped-def]
        raise AssertionError("walked every group's offsets")


def test_a_topic_finds_its_groups_without_a_walk_over_all() -> None:
    """A deleted topic's committed offsets are found through the topic's index:
    the cost follows the groups that committed to it, not every group."""
    store = OffsetStore()
    for g in range(2000):
        store.apply(offset_key(f"busy-{g}", "busy", 0), offset_value(CommittedOffset(1, -1, "", 1)))
    store.apply(offset_key("busy-7", "rare", 3), offset_value(CommittedOffset(4, -1, "", 1)))
    store.apply(offset_key("lone", "rare", 0), offset_value(CommittedOffset(9, -1, "", 1)))
    store.offsets = _NoWalk(store.offsets)
    found = store.committed_of_topic("rare")
    assert {g: sorted(tps) for g, tps in found.items()} == {
        "busy-7": [("rare", 3)], "lone": [("rare", 0)]}
    assert store.committed_of_topic("gone") == {}


def test_the_topic_index_follows_commits_tombstones_and_group_deletions() -> None:
    import random

    rng = random.Random(7)
    store = OffsetStore()
    for _ in range(5000):
        g, t, p = f"g{rng.randrange(8)}", f"t{rng.randrange(5)}", rng.randrange(4)
        roll = rng.random()
        if roll < 0.6:
            store.apply(offset_key(g, t, p), offset_value(CommittedOffset(1, -1, "", 1)))
        elif roll < 0.97:
            store.apply(offset_key(g, t, p), None)
        else:
            store.apply(group_key(g), None)
        expected: dict[str, dict[str, int]] = {}
        for group, committed in store.offsets.items():
            for topic, _ in committed:
                expected.setdefault(topic, {}).setdefault(group, 0)
                expected[topic][group] += 1
        assert store.by_topic == expected
