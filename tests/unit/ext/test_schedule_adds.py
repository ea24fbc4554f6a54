"""The ``adds`` op: a produced batch's delayed records in one schedule-log batch.

Its encoding round-trips; a machine applying it holds what the per-record
JSON ``add``/``cancel`` ops of older brokers give (which still apply, in the
same log), its records read back from where the op says they are, a retried
produce is dropped whichever form wrote it, a transaction holds it until its
marker, and a snapshot keeps a held one."""

from __future__ import annotations

import json
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.ext.delay import SCHEDULED_OFFSET
from kcompat.ext.holes import split
from kcompat.ext.schedule_adds import (
    AddParts,
    adds_batch,
    adds_batch_of,
    delayed_records,
    encode_adds,
    is_adds,
    parse_adds,
)
from kcompat.ext.schedule_log import (
    ScheduleLog,
    StoredRecords,
    add_record,
    cancel_record,
    delivered_form,
    located_ops,
    parse_op,
    snapshot_batches,
)
from kcompat.ext.schedule_stored import delivery_batch, take_tails_within
from kcompat.wire.batch import CODEC_LZ4, parse_header, validate
from kcompat.wire.records import (
    Record,
    RecordInput,
    decode_batch,
    encode_batch,
    encode_headers,
    encode_key_value,
    encode_marker_batch,
    record_tail,
)

SOURCE = ("orders", 2)
DLQ = ("orders.dlq", 0)


class StoredLog:
    """Stored batches with consecutive offsets; reads a record where it is."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.end = 0

    def write(self, batch: bytes) -> tuple[memoryview, object]:
        data = bytearray(batch)
        data[0:8] = self.end.to_bytes(8, "big")
        header = validate(bytes(data))
        self.batches.append(bytes(data))
        self.end = header.next_offset
        return memoryview(self.batches[-1]), header

    def slice_at(self, offset: int) -> object:
        for data in self.batches:
            header = parse_header(data)
            if header.base_offset <= offset < header.next_offset:
                return _Slice(data)
        raise AssertionError(f"no batch holds {offset}")


class _Slice:
    def __init__(self, data: bytes) -> None:
        self.file, self.position, self.length, self._data = self, 0, len(data), data

    def pread(self, size: int, position: int) -> bytes:
        return self._data[position:position + size]


Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int,
            str | None, int]  # hole, timestamp, key, value, headers, due, id, target index


def _parts(rows: list[Row]) -> list[AddParts]:
    return [(ts, record_tail(encode_key_value(k, v), len(h), encode_headers(h)))
            for _hole, ts, k, v, h, _due, _sid, _t in rows]


def _adds(rows: list[Row], src: tuple[int, int, int], cancels: Sequence[tuple[int, str]] = (),
          **kw: object) -> bytes:
    targets = [DLQ] if any(r[7] for r in rows) else []
    return adds_batch(SOURCE, src, _parts(rows), [r[0] for r in rows], [r[5] for r in rows],
                      ids=[(i, r[6]) for i, r in enumerate(rows) if r[6] is not None],
                      cancels=cancels, targets=targets,
                      target_of=[r[7] for r in rows] if targets else [],
                      timestamp=77, **kw)


def _json_form(rows: list[Row], src: tuple[int, int, int],
               cancels: Sequence[tuple[int, str]] = ()) -> list[RecordInput]:
    """The same, as an older broker wrote it: one JSON op per record."""
    out: list[RecordInput] = [add_record(Record(hole, ts, k, v, h), DLQ if t else SOURCE, due, sid, src, h,
                      SOURCE) for hole, ts, k, v, h, due, sid, t in rows]
    out += [cancel_record(SOURCE[0], SOURCE[1], hole, sid, src, 77) for hole, sid in cancels]
    return out


def _state(m: ScheduleLog) -> object:
    return (sorted((p.due_ms, p.schedule_id, p.target, p.offset, moving)
                   for p, moving in m.listing()),
            sorted(m.pending_by_target.items()), len(m))


ROWS: list[Row] = [
    (10, 1_000, b"k10", b"v" * 100, (("kc-delay-ms", b"5000"),), 6_000, None, 0),
    (11, 1_001, None, None, (), 9_000, "job", 0),
    (12, 999, b"", b"x", (("a", None), ("kc-delay-ms", b"1")), 2_000, "job", 0),
    (13, 1_003, b"k13", b"dead", (("kc-error", b"boom"),), 1_003, None, 1),
]

rows_strategy = st.lists(st.tuples(
    st.integers(0, 1 << 40), st.integers(0, 1 << 42), st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20)),
             max_size=3).map(tuple),
    st.integers(0, 1 << 42), st.none() | st.text(max_size=8), st.integers(0, 1)),
    max_size=30)


@settings(max_examples=60, deadline=None)
@given(rows_strategy, st.lists(st.tuples(st.integers(0, 1 << 40), st.text(max_size=8)),
                               max_size=3))
def test_the_encoding_round_trips(rows: list[Row], cancels: list[tuple[int, str]]) -> None:
    batch = _adds(rows, (7, 1, 40), cancels)
    header = validate(batch)  # a valid batch: CRC, length, count
    assert header.records_count == 1 + len(rows)
    records = decode_batch(batch)
    ((offset, op, _where),) = located_ops(batch)
    assert offset == 0 and is_adds(op) and op == records[0].headers[-1][1]
    doc = parse_op(op)
    assert doc is not None and doc == parse_adds(op or b"")
    assert (doc["t"], doc["p"], doc["src"]) == (*SOURCE, [7, 1, 40])
    assert list(doc["o"]) == [r[0] for r in rows] and list(doc["due"]) == [r[5] for r in rows]
    assert doc.get("ids", []) == [[i, r[6]] for i, r in enumerate(rows) if r[6] is not None]
    assert doc.get("c", []) == [list(c) for c in cancels]
    for record, row in zip(records[1:], rows, strict=True):
        assert (record.key, record.value, record.headers, record.timestamp) == (
            row[2], row[3], row[4], row[1])


def test_it_applies_as_the_json_ops_of_older_brokers_do() -> None:
    new, old = StoredLog(), StoredLog()
    m_new, m_old = ScheduleLog(), ScheduleLog()
    src = (7, 0, 10)
    cancels = [(14, "job")]  # the earliest "job" of the partition
    for log, m, batch in ((new, m_new, _adds(ROWS, src, cancels)),
                          (old, m_old, encode_batch(_json_form(ROWS, src, cancels)))):
        m.feed(*log.write(batch))  # type: ignore[arg-type]
    assert _state(m_new) == _state(m_old)
    assert sorted(p.offset for p, _ in m_new.listing()) == [10, 12, 13]
    assert m_new.pending_by_target == {SOURCE: 2, DLQ: 1}
    # every record reads back, from its own bytes, as the older form delivers it
    read_new = StoredRecords(new.slice_at)  # type: ignore[arg-type]
    read_old = StoredRecords(old.slice_at)  # type: ignore[arg-type]
    by_hole = {p.offset: delivered_form(read_old.record(p)) for p, _ in m_old.listing()}
    for p, _ in m_new.listing():
        assert p.where != -1
        assert delivered_form(read_new.record(p)) == by_hole[p.offset]
    assert read_new.decoded == 3  # one record decoded per record read


def test_old_and_new_forms_apply_in_one_log_and_retries_are_dropped_across_them() -> None:
    log, m = StoredLog(), ScheduleLog()
    src = (7, 0, 10)
    m.feed(*log.write(encode_batch(_json_form(ROWS[:2], src))))  # type: ignore[arg-type]
    m.feed(*log.write(_adds(ROWS, src)))  # type: ignore[arg-type]  # the retry, newer broker
    assert sorted(p.offset for p, _ in m.listing()) == [10, 11, 12, 13]
    m.feed(*log.write(_adds(ROWS, src)))  # type: ignore[arg-type]  # and once more
    m.feed(*log.write(encode_batch(_json_form(ROWS, src))))  # type: ignore[arg-type]
    assert len(m) == 4
    m.feed(*log.write(_adds(ROWS, (-1, -1, -1))))  # type: ignore[arg-type]
    assert len(m) == 8  # not idempotent: at least once, as in Kafka
    m.feed(*log.write(_adds(ROWS[:1], (7, 0, 14))))  # type: ignore[arg-type]  # a new batch
    assert len(m) == 9


def test_a_compressed_copy_is_scanned_and_applies_alike() -> None:
    plain, packed = StoredLog(), StoredLog()
    batch = _adds(ROWS, (7, 0, 10))
    records = [(r.key, r.value, r.headers, r.timestamp) for r in decode_batch(batch)]
    lz4 = encode_batch(records, codec=CODEC_LZ4)
    m_plain, m_packed = ScheduleLog(), ScheduleLog()
    m_plain.feed(*plain.write(batch))  # type: ignore[arg-type]
    m_packed.feed(*packed.write(lz4))  # type: ignore[arg-type]
    assert [p for p, _ in m_plain.listing()] == [p for p, _ in m_packed.listing()]
    stored = StoredRecords(packed.slice_at)  # type: ignore[arg-type]
    keys = {r[0]: r[2] for r in ROWS}
    assert all(stored.record(p).key == keys[p.offset] for p, _ in m_packed.listing())


def test_a_transaction_holds_its_adds_until_the_marker_and_a_snapshot_keeps_them() -> None:
    log, m = StoredLog(), ScheduleLog()
    m.feed(*log.write(_adds(ROWS, (50, 0, 0), producer_id=50,  # type: ignore[arg-type]
                            producer_epoch=0, transactional=True)))
    m.feed(*log.write(_adds(ROWS, (51, 0, 0), producer_id=51,  # type: ignore[arg-type]
                            producer_epoch=0, transactional=True)))
    assert len(m) == 0 and sorted(m.held) == [50, 51]
    batches, low = snapshot_batches(m.capture(log.end), 99)
    assert low == 0  # the held batches stay in the log
    meta = json.loads(decode_batch(batches[0])[0].value or b"")
    assert all(isinstance(op, list) and op[0] == "b64" for _pid, ops in meta["held"]
               for _o, op, _w in ops)
    rebuilt = ScheduleLog(fresh_from=log.end)
    for batch in batches:
        data = log.write(batch)
        m.feed(*data)  # type: ignore[arg-type]
        rebuilt.feed(*data)  # type: ignore[arg-type]
    assert rebuilt.fresh_from is None and rebuilt.held == m.held
    for machine in (m, rebuilt):
        machine.feed(*log.write(encode_marker_batch(  # type: ignore[arg-type]
            True, producer_id=50, producer_epoch=0, coordinator_epoch=0, timestamp=1)))
        machine.feed(*log.write(encode_marker_batch(  # type: ignore[arg-type]
            False, producer_id=51, producer_epoch=0, coordinator_epoch=0, timestamp=1)))
    assert _state(rebuilt) == _state(m)
    assert sorted(p.offset for p, _ in m.listing()) == [10, 11, 12, 13] and m.held == {}
    stored = StoredRecords(log.slice_at)  # type: ignore[arg-type]
    assert {stored.record(p).key for p, _ in rebuilt.listing()} == {b"k10", None, b"", b"k13"}


def test_a_malformed_adds_op_is_ignored() -> None:
    op = _adds(ROWS, (7, 0, 10))
    value = decode_batch(op)[0].headers[-1][1] or b""
    assert parse_adds(value[:-1]) is None  # an array cut short
    assert parse_adds(value[:5]) is None
    assert parse_op(b"\x01") is None
    m = ScheduleLog()
    m.apply_op(0, value[:-3])
    assert len(m) == 0


def test_records_are_delivered_from_their_stored_bytes_as_decoding_them_gives() -> None:
    """``tails``: an adds op's records are delivered from their bytes, never
    decoded; a record with an op of its own (the JSON form) has it taken off.
    Either way the delivery batch is the one the decoded records make."""
    for json_form in (False, True):
        log, m = StoredLog(), ScheduleLog()
        batch = (encode_batch(_json_form(ROWS, (7, 0, 10))) if json_form
                 else _adds(ROWS, (7, 0, 10)))
        m.feed(*log.write(batch))  # type: ignore[arg-type]
        entries = [p for p, _ in m.listing()]
        stored = StoredRecords(log.slice_at)  # type: ignore[arg-type]
        decoded = [delivered_form(stored.record(p)) for p in entries]
        stored.decoded = 0
        tails = stored.tails(entries)
        assert stored.decoded == (len(entries) if json_form else 0)
        assert delivery_batch(tails, 9, 40) == encode_batch(
            decoded, producer_id=9, producer_epoch=0, base_sequence=40)
        assert take_tails_within(tails, 1) == 1 and take_tails_within(tails, 1 << 20) == 4


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=200),
                          st.integers(-100, 100_000), st.booleans()), min_size=1, max_size=40),
       st.integers(0, 1 << 40))
def test_delayed_records_are_the_records_with_their_hole_named(
        rows: list[tuple[bytes | None, bytes | None, int, bool]], shift: int) -> None:
    """``delayed_records`` (the loop of a produce) encodes what the general
    path does: each record's own headers, then kc-scheduled-offset."""
    now = 1_700_000_000_000
    raw = encode_batch([(k, v, [("kc-delay-ms", b"5000")] + ([("x", b"y")] if extra else []),
                         now + t) for k, v, t, extra in rows])
    out = split(raw, validate(raw), now)
    assert out is not None
    moves = out.moves
    expected = encode_adds([(m.timestamp, record_tail(
        m.body, m.header_count + 1, m.header_bytes + encode_headers(
            ((SCHEDULED_OFFSET, b"%d" % (m.offset + shift)),)))) for m in moves])
    assert delayed_records(out.taken, shift) == expected
    records = decode_batch(adds_batch_of(SOURCE, (1, 0, 0), expected,
                                         [m.offset + shift for m in moves],
                                         [m.due_ms for m in moves]))[1:]
    assert [r.headers for r in records] == [
        (*m.record.headers, (SCHEDULED_OFFSET, b"%d" % (m.offset + shift))) for m in moves]
