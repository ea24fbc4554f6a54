"""The consumer's embedded protocol bytes (ConsumerProtocolSubscription and
ConsumerProtocolAssignment), sans-IO.

Theory of operation
-------------------
A classic consumer says what it subscribes to in JoinGroup's protocol metadata
and learns its partitions from SyncGroup's assignment bytes; the group
coordinator reads and writes them only when it serves classic members of a
KIP-848 consumer group (Kafka 4.4's mixed groups). Layouts (Kafka's
``ConsumerProtocolSubscription`` v0-3 and ``ConsumerProtocolAssignment`` v0-3):

* subscription: version int16, topics [int16 string], user data (int32
  nullable bytes); v1+ owned partitions [topic, [int32]]; v2+ generation
  int32; v3+ rack (nullable string).
* assignment: version int16, partitions [topic, [int32]], user data.

``decode_subscription`` returns None for bytes it cannot read (the caller
answers INCONSISTENT_GROUP_PROTOCOL); ``encode_assignment`` writes v0, which
every client reads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned: TopicPartitions
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def done(self) -> bool:
        return self.pos >= len(self.data)


def decode_subscription(data: bytes) -> Subscription | None:
    try:
        r = _Reader(bytes(data))
        version = r.i16()
        topics = tuple(r.string() or "" for _ in range(max(r.i32(), 0)))
        user_data = r.i32()
        if user_data > 0:
            r.take(user_data)
        owned: list[tuple[str, tuple[int, ...]]] = []
        rack = None
        if version >= 1 and not r.done():
            for _ in range(max(r.i32(), 0)):
                topic = r.string() or ""
                owned.append((topic, tuple(r.i32() for _ in range(max(r.i32(), 0)))))
        if version >= 2 and not r.done():
            r.i32()  # the generation the owned partitions are from
        if version >= 3 and not r.done():
            rack = r.string()
        return Subscription(topics, tuple(owned), rack)
    except (ValueError, UnicodeDecodeError, struct.error):
        return None


def _string(s: str) -> bytes:
    data = s.encode()
    return _I16.pack(len(data)) + data


def encode_assignment(assigned: TopicPartitions) -> bytes:
    out = bytearray(_I16.pack(0))
    out += _I32.pack(len(assigned))
    for topic, partitions in assigned:
        out += _string(topic) + _I32.pack(len(partitions))
        for p in partitions:
            out += _I32.pack(p)
    out += _I32.pack(-1)  # no user data
    return bytes(out)


def decode_assignment(data: bytes) -> TopicPartitions | None:
    try:
        r = _Reader(bytes(data))
        if not data:
            return ()
        r.i16()
        out = []
        for _ in range(max(r.i32(), 0)):
            topic = r.string() or ""
            out.append((topic, tuple(sorted(r.i32() for _ in range(max(r.i32(), 0))))))
        return tuple(sorted(out))
    except (ValueError, UnicodeDecodeError, struct.error):
        return None


def encode_subscription(topics: tuple[str, ...], owned: TopicPartitions = (),
                        version: int = 1) -> bytes:
    """For tests and tools: a subscription as a classic consumer sends it."""
    out = bytearray(_I16.pack(version)) + _I32.pack(len(topics))
    for t in topics:
        out += _string(t)
    out += _I32.pack(-1)
    if version >= 1:
        out += _I32.pack(len(owned))
        for topic, partitions in owned:
            out += _string(topic) + _I32.pack(len(partitions))
            for p in partitions:
                out += _I32.pack(p)
    return bytes(out)
