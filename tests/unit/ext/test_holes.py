"""Taking delayed records out of a produced batch: batches with holes (rule 4)."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.ext.delay import Cancel, HeaderError, classify
from kcompat.ext.holes import may_carry_headers, split
from kcompat.wire.batch import CODEC_LZ4, CODEC_NONE, validate
from kcompat.wire.records import decode_batch, encode_batch, rebuild_batch

NOW = 1_700_000_000_000


def _batch(records: list[tuple[bytes, list[tuple[str, bytes]]]], codec: int = CODEC_NONE,
           **kw: int) -> bytes:
    return encode_batch([(k, b"v-" + k, h, NOW + i) for i, (k, h) in enumerate(records)],
                        codec=codec, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_LZ4])
def test_a_plain_batch_is_left_alone(codec: int) -> None:
    raw = _batch([(b"a", []), (b"b", [("trace", b"x")])], codec)
    assert not may_carry_headers(raw, validate(raw))  # all a plain batch pays
    # "kc-" inside a value or a header that is not ours: looked at, nothing taken out
    raw = _batch([(b"kc-key", [("kc-other", b"kc-delay-ms")])], codec)
    assert may_carry_headers(raw, validate(raw))
    assert split(raw, validate(raw), NOW) is None
    raw = _batch([(b"a", [("kc-delay-ms", b"5")])], codec)
    assert may_carry_headers(raw, validate(raw))


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_LZ4])
def test_delayed_records_leave_holes_with_the_same_offsets_and_sequence(codec: int) -> None:
    raw = _batch([(b"a", []), (b"b", [("kc-delay-ms", b"5000")]), (b"c", []),
                  (b"d", [("kc-deliver-at", str(NOW + 9000).encode()), ("kc-schedule-id", b"j")]),
                  (b"e", [("kc-cancel-schedule", b"old")])],
                 codec, producer_id=7, producer_epoch=2, base_sequence=40)
    before = validate(raw)
    out = split(raw, before, NOW)
    assert out is not None
    hole = validate(out.hole)  # a valid batch: CRC, length
    for field in ("base_offset", "last_offset_delta", "producer_id", "producer_epoch",
                  "base_sequence", "base_timestamp", "max_timestamp", "attributes"):
        assert getattr(hole, field) == getattr(before, field), field
    assert hole.records_count == 2
    kept = decode_batch(out.hole)
    assert [(r.offset, r.key, r.timestamp) for r in kept] == [(0, b"a", NOW), (2, b"c", NOW + 2)]
    assert [(m.record.offset, m.record.key, m.due_ms, m.schedule_id, m.topic)
            for m in out.moves] == [(1, b"b", NOW + 5000, None, None),
                                    (3, b"d", NOW + 9000, "j", None)]
    assert out.moves[0].record.headers == (("kc-delay-ms", b"5000"),)
    assert out.moves[0].headers is None  # delivered with its own headers
    assert out.cancels == ((4, Cancel("old")),)


def test_a_batch_of_only_delayed_records_is_kept_empty() -> None:
    raw = _batch([(b"a", [("kc-delay-ms", b"10")]), (b"b", [("kc-delay-ms", b"10")])],
                 CODEC_LZ4, producer_id=1, producer_epoch=0, base_sequence=0)
    out = split(raw, validate(raw), NOW)
    assert out is not None
    hole = validate(out.hole)
    assert hole.records_count == 0 and hole.last_offset_delta == 1
    assert hole.compression == CODEC_NONE  # nothing left to compress
    assert hole.last_sequence == 1 and decode_batch(out.hole) == []


@pytest.mark.parametrize("headers", [
    [("kc-delay-ms", b"abc")], [("kc-delay-ms", b"-5")], [("kc-deliver-at", b"soon")],
    [("kc-delay-ms", b"99999999999")]])
def test_a_bad_header_refuses_the_whole_batch(headers: list[tuple[str, bytes]]) -> None:
    raw = _batch([(b"fine", [("kc-delay-ms", b"100")]), (b"bad", headers)])
    with pytest.raises(HeaderError, match=headers[0][0]):
        split(raw, validate(raw), NOW, max_delay_ms=86_400_000)


def test_a_zero_delay_is_an_ordinary_record() -> None:
    raw = _batch([(b"a", [("kc-delay-ms", b"0")])])
    assert split(raw, validate(raw), NOW) is None


def _reference(raw: bytes, now: int, max_delay_ms: int) -> object:
    """What ``split`` gives, by decoding every record (as it once did)."""
    header = validate(raw)
    kept, moves, cancels = [], [], []
    for record in decode_batch(raw):
        asked = classify(record.headers, now, max_delay_ms)
        if asked is None:
            kept.append(record)
        elif isinstance(asked, Cancel):
            cancels.append((record.offset, asked))
        else:
            moves.append((record, asked.due_ms, asked.schedule_id))
    if not moves and not cancels:
        return None
    return rebuild_batch(header, kept), moves, cancels


_HEADER_NAMES = st.sampled_from(["kc-delay-ms", "kc-delay-ms", "kc-deliver-at", "kc-schedule-id",
                                 "kc-cancel-schedule", "trace", "kc-other", "ключ"])
_HEADER_VALUES = st.one_of(
    st.none(), st.sampled_from([b"0", b"5000", b"60000", b" 70 ", b"-3", b"x", b"", b"12" * 10,
                                b"99999999999", str(NOW + 500).encode()]),
    st.binary(max_size=8))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=90),
                          st.lists(st.tuples(_HEADER_NAMES, _HEADER_VALUES), max_size=3)
                          | st.sampled_from([b"0", b"1", b"5000", b"100001"]).map(
                              lambda v: [("kc-delay-ms", v)])
                          | st.tuples(st.sampled_from([b"0", b"5000", b"x", b""]),
                                      st.sampled_from([b"job", b"", "é".encode(), b"\xff",
                                                       b"i" * 70])).map(
                              lambda v: [("kc-delay-ms", v[0]), ("kc-schedule-id", v[1])]),
                          st.integers(-5, 5_000)),
                min_size=1, max_size=12),
       st.sampled_from([CODEC_NONE, CODEC_LZ4]), st.integers(0, 100_000))
def test_split_reads_records_as_decoding_them_does(
        records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
        codec: int, max_delay_ms: int) -> None:
    _same_split(records, codec, max_delay_ms)


def _same_split(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]],
                                    int]], codec: int, max_delay_ms: int) -> None:
    raw = encode_batch([(k, v, h, NOW + t) for k, v, h, t in records], codec=codec,
                       producer_id=3, producer_epoch=0, base_sequence=9)
    try:
        expected = _reference(raw, NOW, max_delay_ms)
    except HeaderError as e:
        with pytest.raises(HeaderError) as got:
            split(raw, validate(raw), NOW, max_delay_ms)
        assert str(got.value) == str(e)
        return
    out = split(raw, validate(raw), NOW, max_delay_ms)
    if expected is None:
        assert out is None
        return
    assert out is not None and isinstance(expected, tuple)
    hole, moves, cancels = expected
    assert out.hole == hole
    assert [(m.record, m.due_ms, m.schedule_id) for m in out.moves] == moves
    assert list(out.cancels) == cancels


_VALID_HEADERS = st.sampled_from([
    [], [("trace", b"x")], [("kc-delay-ms", b"5000")], [("kc-delay-ms", b"0")],
    [("kc-delay-ms", b"70000")], [("kc-delay-ms", b"00042")],
    [("kc-delay-ms", b"5000"), ("kc-schedule-id", b"job")],
    [("kc-delay-ms", b"7"), ("kc-schedule-id", "é".encode())],
    [("kc-delay-ms", b"7"), ("kc-schedule-id", b"i" * 70)],
    [("kc-schedule-id", b"job"), ("kc-delay-ms", b"7")], [("kc-delay-ms", b" 9 ")],
    [("kc-delay-ms", b"9"), ("trace", None)], [("kc-cancel-schedule", b"job")],
    [("kc-deliver-at", str(NOW + 800).encode())]])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=90),
                          _VALID_HEADERS, st.integers(-5, 5_000)), min_size=1, max_size=12),
       st.sampled_from([CODEC_NONE, CODEC_LZ4]))
def test_split_of_accepted_headers_is_the_decoding_one(
        records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
        codec: int) -> None:
    """The same, with headers a producer may send (none refused): what the
    byte-level recognition of the common header blocks must get right."""
    _same_split(records, codec, 100_000)


def test_the_moves_of_a_split_are_columns_not_an_object_per_record() -> None:
    """A pipelined produce keeps its moves through two commits: held in
    columns (``ext.moves``), a batch's moves are a handful of objects for the
    garbage collector to walk whatever their count, not one per record."""
    raw = _batch([(b"k%d" % i, [("kc-delay-ms", b"5000")] + (
        [("kc-schedule-id", b"s%d" % i)] if i % 2 else [])) for i in range(500)])
    gc.collect()
    before = len(gc.get_objects())
    out = split(raw, validate(raw), NOW)
    assert out is not None and len(out.taken) == 500
    assert len(gc.get_objects()) - before < 20  # tracked: the split, its lists and dict
    assert [(m.offset, m.schedule_id) for m in out.moves][:2] == [(0, None), (1, "s1")]
