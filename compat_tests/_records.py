"""Shared record fixtures and checks for the client suites (client-independent)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

Header = tuple[str, bytes]

# Generous, bounded: a broken broker must fail a test, not hang the suite.
TIMEOUT_S = 30.0
TIMEOUT_MS = int(TIMEOUT_S * 1000)
#: how long a reader waits for the high watermark to pass what acks=1 acknowledged
HW_WAIT_S = 10.0


def wait_for_ends(read: Callable[[], dict[int, int]], want: dict[int, int]) -> dict[int, int]:
    """``read()`` (end offsets, i.e. high watermarks) once it equals ``want``, or
    its last answer after ``HW_WAIT_S``. acks=1 (kafka-python's and aiokafka's
    default) is answered after the leader's append; at replication factor 3 the
    high watermark, all that consumers, end offsets and timestamp lookups see,
    passes the batch once a follower has it, a moment later, as in Kafka."""
    deadline = time.monotonic() + HW_WAIT_S
    while True:
        got = read()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = field(default_factory=tuple)
    timestamp: int = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def base_timestamp() -> int:
    """One hour ago, whole second: inside any default retention and in the past
    (Kafka 4 rejects CreateTime more than an hour in the future by default)."""
    return (now_ms() - 3_600_000) // 1000 * 1000


def golden_records(num_partitions: int = 3, base_ts: int | None = None) -> list[Rec]:
    """Records with awkward keys, values and headers, and explicit timestamps.

    Different counts per partition (so a partition mix-up shows), null vs empty
    keys and values, binary bytes, duplicate and non-ASCII header keys, empty
    header values, a 100 KiB value, and one out-of-order timestamp (CreateTime
    is stored as given).
    """
    ts = base_timestamp() if base_ts is None else base_ts
    per_partition: list[list[tuple[bytes | None, bytes | None, tuple[Header, ...]]]] = [
        [
            (b"k0", b"v0", ()),
            (None, b"value with null key", (("h", b"v"),)),
            (b"", b"empty key", ()),
            (b"k-empty-value", b"", (("empty", b""),)),
            (b"tombstone", None, ()),
        ],
        [
            (b"\x00\x01\x02\xff\xfe", b"\x00" * 7 + b"\xff" * 7, (("bin", bytes(range(256))),)),
            (b"dup-headers", b"v", (("dup", b"1"), ("dup", b"2"), ("dup", b"3"))),
            ("ключ".encode(), "значение ✓".encode(), (("заголовок", "знач".encode()),)),
            (b"k3", b"x" * 1000, (("a", b"1"), ("b", b"2"))),
            (b"k4", b"v4", ()),
            (b"k5", b"v5", (("k5", b"h5"),)),
            (b"k6", b"v6", ()),
        ],
        [
            (b"big", bytes(i % 251 for i in range(100 * 1024)), (("size", b"102400"),)),
            (b"k1", b"v1", ()),
            (b"k2", b"v2", (("x", b"y"),)),
            (b"k3", b"v3", ()),
        ],
    ]
    out: list[Rec] = []
    n = 0
    for p in range(num_partitions):
        rows = per_partition[p % len(per_partition)]
        for i, (k, v, h) in enumerate(rows):
            t = ts + n * 1000
            if p == 1 and i == 3:
                t = ts - 500_000  # out of order on purpose
            out.append(Rec(p, k, v, tuple(h), t))
            n += 1
    return out


def by_partition(recs: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for r in recs:
        out.setdefault(r.partition, []).append(r)
    return out


def norm_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> tuple[Header, ...]:
    if not headers:
        return ()
    return tuple((str(k), bytes(v) if v is not None else None) for k, v in headers)  # type: ignore[misc]


@dataclass(frozen=True)
class Seen:
    """What a consumer observed for one record."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int
    timestamp_type: int | None = None


def assert_round_trip(produced: list[Rec], seen: list[Seen], client: str) -> None:
    """Byte-exact keys/values/headers/timestamps, order per partition, dense offsets."""
    assert produced, "test bug: nothing produced"
    want = by_partition(produced)
    got: dict[int, list[Seen]] = {}
    for s in seen:
        got.setdefault(s.partition, []).append(s)
    assert sorted(got) == sorted(want), (
        f"{client}: consumed partitions {sorted(got)} but produced to {sorted(want)}"
    )
    for p, recs in want.items():
        rows = got[p]
        offsets = [s.offset for s in rows]
        assert offsets == list(range(len(recs))), (
            f"{client}: partition {p}: offsets {offsets}, expected dense 0..{len(recs) - 1}"
        )
        for i, (r, s) in enumerate(zip(recs, rows, strict=True)):
            where = f"{client}: partition {p} offset {i}"
            assert s.key == r.key, f"{where}: key {s.key!r:.80} != produced {r.key!r:.80}"
            assert s.value == r.value, (
                f"{where}: value ({None if s.value is None else len(s.value)} bytes) "
                f"{s.value!r:.80} != produced ({None if r.value is None else len(r.value)} bytes) "
                f"{r.value!r:.80}"
            )
            assert s.headers == r.headers, f"{where}: headers {s.headers!r} != produced {r.headers!r}"
            assert s.timestamp == r.timestamp, (
                f"{where}: timestamp {s.timestamp} != produced CreateTime {r.timestamp}"
            )
            if s.timestamp_type is not None:
                assert s.timestamp_type == 0, (
                    f"{where}: timestamp type {s.timestamp_type}, expected 0 (CreateTime)"
                )


def compressible_records(n: int, partition: int = 0, base_ts: int | None = None) -> list[Rec]:
    ts = base_timestamp() if base_ts is None else base_ts
    return [
        Rec(
            partition,
            f"key-{i:05d}".encode(),
            (f"value-{i:05d} " * 40).encode() + bytes([i % 256]),
            (("seq", str(i).encode()),) if i % 3 == 0 else (),
            ts + i,
        )
        for i in range(n)
    ]


def durability_values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:06d}".encode() for i in range(n)]


def assert_exactly_once(acked: Sequence[bytes], consumed: Sequence[bytes], client: str,
                        sent: Sequence[bytes] | None = None) -> None:
    assert acked, f"{client}: test bug: no acknowledged records"
    counts: dict[bytes, int] = {}
    for v in consumed:
        counts[v] = counts.get(v, 0) + 1
    missing = [v for v in acked if counts.get(v, 0) == 0]
    dupes = [v for v in acked if counts.get(v, 0) > 1]
    assert not missing, (
        f"{client}: {len(missing)} of {len(acked)} acknowledged records lost, e.g. {missing[:5]}"
    )
    assert not dupes, f"{client}: acknowledged records duplicated: {dupes[:5]}"
    if sent is not None:
        allowed = set(sent)
        alien = [v for v in consumed if v not in allowed]
        assert not alien, f"{client}: consumed records nobody sent: {alien[:5]}"


# RecordBatch attributes & 7
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
