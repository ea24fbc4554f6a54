"""Taking delayed records out of a produced batch: batches with holes (rule 4)."""

from __future__ import annotations

import pytest

from kcompat.ext.delay import Cancel, HeaderError
from kcompat.ext.holes import may_carry_headers, split
from kcompat.wire.batch import CODEC_LZ4, CODEC_NONE, validate
from kcompat.wire.records import decode_batch, encode_batch

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
