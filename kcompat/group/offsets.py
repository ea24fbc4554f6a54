"""Committed offsets and group records in ``__consumer_offsets``, sans-IO.

Theory of operation
-------------------
docs/architecture.md, principle 5: the group coordinator's durable state is the committed content
of its log. Records use Kafka's own key/value layouts, so the topic is
compacted by key exactly like Kafka's:

* offset commit  key v1: version int16=1, group, topic (int16-length strings),
  partition int32; value v3: version int16=3, offset int64, leader epoch
  int32, metadata string, commit timestamp int64. A null value deletes.
* group metadata key v2: version int16=2, group; value v3: protocol type,
  generation int32, protocol (nullable), leader (nullable), state timestamp
  int64, members [member id, instance id (nullable), client id, client host,
  rebalance timeout int32, session timeout int32, subscription bytes,
  assignment bytes]. A null value deletes the group.

``OffsetStore.apply`` is the only way state changes; it is called for records
replayed at start and for records the broker has just made durable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kcompat.group.group import Group, GroupState, Member

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
# kcompat's own record: a share group's membership snapshot (KIP-932), its value
# the JSON of ``share_group.snapshot_to_json``; Kafka's tools skip unknown versions
SHARE_GROUP_KEY_VERSION = 32000
# kcompat's own record: a KIP-848 consumer group, its value ``ConsumerGroup.snapshot_json``
CONSUMER_GROUP_KEY_VERSION = 32001
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(slots=True)
class StoredGroup:
    """What the log says about a group's membership (restored after restart)."""

    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_since_ms: int
    members: list[Member] = field(default_factory=list)


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i16(self, v: int) -> _Writer:
        self.buf += _I16.pack(v)
        return self

    def i32(self, v: int) -> _Writer:
        self.buf += _I32.pack(v)
        return self

    def i64(self, v: int) -> _Writer:
        self.buf += _I64.pack(v)
        return self

    def string(self, s: str | None) -> _Writer:
        if s is None:
            return self.i16(-1)
        data = s.encode()
        self.i16(len(data))
        self.buf += data
        return self

    def blob(self, b: bytes) -> _Writer:
        self.i32(len(b))
        self.buf += b
        return self


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated offsets record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def blob(self) -> bytes:
        return self._take(self.i32())


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition).buf)


def offset_value(c: CommittedOffset) -> bytes:
    return bytes(_Writer().i16(OFFSET_VALUE_VERSION).i64(c.offset).i32(c.leader_epoch)
                 .string(c.metadata).i64(c.commit_timestamp_ms).buf)


def group_key(group: str) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(group).buf)


def share_group_key(group: str) -> bytes:
    return bytes(_Writer().i16(SHARE_GROUP_KEY_VERSION).string(group).buf)


def consumer_group_key(group: str) -> bytes:
    return bytes(_Writer().i16(CONSUMER_GROUP_KEY_VERSION).string(group).buf)


def group_value(group: Group) -> bytes:
    w = (_Writer().i16(GROUP_VALUE_VERSION).string(group.protocol_type or "")
         .i32(group.generation_id).string(group.protocol_name).string(group.leader_id)
         .i64(group.state_since_ms))
    members = list(group.members.values())
    w.i32(len(members))
    for m in members:
        (w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
         .string(m.client_host).i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
         .blob(m.metadata_for(group.protocol_name or "")).blob(m.assignment))
    return bytes(w.buf)


def _decode_group_value(data: bytes) -> StoredGroup:
    r = _Reader(data)
    version = r.i16()
    if version not in (2, 3):
        raise ValueError(f"unsupported group metadata value version {version}")
    stored = StoredGroup(r.string() or "", r.i32(), r.string(), r.string(), r.i64())
    for _ in range(r.i32()):
        mid, iid, cid, host = r.string() or "", r.string(), r.string() or "", r.string() or ""
        rebalance, session = r.i32(), r.i32()
        subscription, assignment = r.blob(), r.blob()
        protocols = [(stored.protocol_name or "", subscription)]
        stored.members.append(Member(mid, iid, cid, host, session, rebalance,
                                     stored.protocol_type, protocols, assignment))
    return stored


def parse_offset_record(key: bytes, value: bytes | None
                        ) -> tuple[tuple[str, str, int], CommittedOffset] | None:
    """(group, topic, partition) and the offset of an offset-commit record."""
    r = _Reader(key)
    if r.i16() not in (0, 1) or value is None:
        return None
    group, topic, partition = r.string() or "", r.string() or "", r.i32()
    return (group, topic, partition), _decode_offset_value(value)


def _decode_offset_value(value: bytes) -> CommittedOffset:
    v = _Reader(value)
    version = v.i16()
    offset = v.i64()
    epoch = v.i32() if version >= 3 else -1
    metadata = v.string() or ""
    return CommittedOffset(offset, epoch, metadata, v.i64())


@dataclass
class OffsetStore:
    offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    groups: dict[str, StoredGroup] = field(default_factory=dict)
    share_groups: dict[str, bytes] = field(default_factory=dict)  # raw snapshots
    consumer_groups: dict[str, bytes] = field(default_factory=dict)  # raw snapshots
    # topic -> group -> how many of the group's committed offsets are of the
    # topic, so a deleted topic finds its groups without a walk over all
    by_topic: dict[str, dict[str, int]] = field(default_factory=dict)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Apply one committed record of ``__consumer_offsets``."""
        r = _Reader(key)
        version = r.i16()
        if version in (0, 1):
            group, topic, partition = r.string() or "", r.string() or "", r.i32()
            if value is None:
                self._drop(group, (topic, partition))
                return
            committed = self.offsets.setdefault(group, {})
            if (topic, partition) not in committed:
                counts = self.by_topic.setdefault(topic, {})
                counts[group] = counts.get(group, 0) + 1
            committed[(topic, partition)] = _decode_offset_value(value)
        elif version == GROUP_KEY_VERSION:
            group = r.string() or ""
            if value is None:
                self.groups.pop(group, None)
                for topic, _ in self.offsets.pop(group, {}):
                    self._unindex(topic, group)
            else:
                self.groups[group] = _decode_group_value(value)
        elif version == SHARE_GROUP_KEY_VERSION:
            group = r.string() or ""
            if value is None:
                self.share_groups.pop(group, None)
            else:
                self.share_groups[group] = bytes(value)
        elif version == CONSUMER_GROUP_KEY_VERSION:
            group = r.string() or ""
            if value is None:
                self.consumer_groups.pop(group, None)
            else:
                self.consumer_groups[group] = bytes(value)

    def _drop(self, group: str, tp: tuple[str, int]) -> None:
        committed = self.offsets.get(group)
        if committed is None or committed.pop(tp, None) is None:
            return
        if not committed:
            del self.offsets[group]
        self._unindex(tp[0], group)

    def _unindex(self, topic: str, group: str) -> None:
        """One committed offset of ``group`` of ``topic`` fewer."""
        counts = self.by_topic.get(topic)
        if counts is None or group not in counts:
            return
        counts[group] -= 1
        if counts[group] <= 0:
            del counts[group]
            if not counts:
                del self.by_topic[topic]

    def committed_of_topic(self, topic: str) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
        """Per group, its committed offsets of ``topic`` (the groups from the
        index, so the cost follows the groups of that topic, not all)."""
        found = {}
        for group in self.by_topic.get(topic, ()):
            committed = self.offsets.get(group, {})
            gone = {tp: c for tp, c in committed.items() if tp[0] == topic}
            if gone:
                found[group] = gone
        return found

    def committed(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.offsets.get(group, {})

    def expired(self, group: Group | None, group_id: str, now_ms: int,
                retention_ms: int) -> list[tuple[str, int]]:
        """Offsets to delete: all of an Empty group's once it has been empty for
        the retention time; a group without members or protocol (standalone
        commits) ages each offset from its commit time."""
        committed = self.offsets.get(group_id, {})
        if group is not None and not group.is_(GroupState.EMPTY):
            return []
        if group is not None and group.protocol_type is not None:
            return list(committed) if now_ms - group.state_since_ms >= retention_ms else []
        return [tp for tp, c in committed.items() if now_ms - c.commit_timestamp_ms >= retention_ms]
