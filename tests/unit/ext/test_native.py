"""The C loops of a delayed produce (kcompat/ext/_native.c) against their Python twins.

Each C function either answers exactly what its Python loop answers or says None
(the Python loop then decides); for the batches it is for it must answer. The
module must be built: ``make`` installs the project, which compiles it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.ext import native
from kcompat.ext.delay import Cancel
from kcompat.ext.holes import Split, split
from kcompat.ext.moves import Moves
from kcompat.ext.schedule_adds import delayed_records
from kcompat.wire.batch import (
    CODEC_NONE,
    CODEC_ZSTD,
    HEADER_SIZE,
    BatchHeader,
    compute_crc,
    parse_header,
    validate,
)
from kcompat.wire.records import (
    encode_batch,
    encode_key_value,
    encode_raw_records,
    frame_records,
)

NOW = 1_700_000_000_000
MAX_DELAY = 7 * 24 * 3600 * 1000

_native = native.MODULE


@pytest.fixture(autouse=True)
def _built() -> None:
    assert _native is not None, (
        "kcompat.ext._native is not built: `make` (pip install -e .) compiles "
        "kcompat/ext/_native.c; KCOMPAT_PURE_PYTHON must not be set for this test")


def _outcome(raw: bytes, monkeypatch: pytest.MonkeyPatch, module: object,
             header: BatchHeader | None = None) -> object:
    """``split``'s answer (or the exception it raised) with ``module`` as the C
    module; ``header``: the batch's as parsed (else as validated)."""
    monkeypatch.setattr(native, "MODULE", module)
    try:
        return _comparable(split(raw, header or validate(raw), NOW, MAX_DELAY))
    except Exception as exc:  # noqa: BLE001 - compared, not swallowed
        return type(exc), str(exc)


def _comparable(out: Split | None) -> object:
    if out is None:
        return None
    return out.hole, out.moves, out.cancels, out.topics


# a record's headers: none, the forms the C loop is for, their near misses, and others
_digits = st.integers(0, 10**6).map(lambda n: str(n).encode())
_delay = st.one_of(_digits, st.sampled_from([
    b"", b"12a", b"-5", b" 5", "٣".encode(), b"9" * 18, b"9" * 19, str(MAX_DELAY).encode(),
    str(MAX_DELAY + 1).encode(), b"0005"]))
_good_id = st.text(min_size=1, max_size=20).map(str.encode).filter(lambda b: len(b) < 64)
_id = st.one_of(_good_id, st.sampled_from([b"\xff\xfe", b"", b"x" * 63, b"x" * 64, b"x" * 70]))
_at = st.integers(NOW - 10**6, NOW + 10**6).map(lambda n: str(n).encode())  # past and future
_fast = st.one_of(  # what the C loop answers for
    st.just([]),
    _digits.map(lambda d: [("kc-delay-ms", d)]),
    st.tuples(_digits, _good_id).map(
        lambda t: [("kc-delay-ms", t[0]), ("kc-schedule-id", t[1])]),
    _at.map(lambda d: [("kc-deliver-at", d)]),
    st.tuples(_at, _good_id).map(lambda t: [("kc-deliver-at", t[0]), ("kc-schedule-id", t[1])]),
    _good_id.map(lambda i: [("kc-cancel-schedule", i)]),
    st.tuples(_good_id, _digits).map(lambda t: [("kc-schedule-id", t[0]), ("kc-delay-ms", t[1])]),
    st.tuples(_good_id, _at).map(lambda t: [("kc-schedule-id", t[0]), ("kc-deliver-at", t[1])]),
    st.just([("traceparent", b"00-4bf9-01"), ("empty", b""), ("null", None)]),
    st.tuples(_digits, _good_id).map(lambda t: [  # ours among others, in any order
        ("traceparent", b"00-4bf9-01"), ("kc-delay-ms", t[0]), ("null", None),
        ("kc-schedule-id", t[1])]),
    st.tuples(_at, st.binary(max_size=200)).map(lambda t: [
        ("kc-deliver-at", t[0]), ("blob", t[1])]),
    _good_id.map(lambda i: [("kc-schedule-id", i), ("x", b"y")]))
_headers = st.one_of(
    _fast,
    _delay.map(lambda d: [("kc-delay-ms", d)]),
    st.tuples(_delay, _id).map(lambda t: [("kc-delay-ms", t[0]), ("kc-schedule-id", t[1])]),
    st.tuples(_id, _delay).map(lambda t: [("kc-schedule-id", t[0]), ("kc-delay-ms", t[1])]),
    _delay.map(lambda d: [("trace", b"t"), ("kc-delay-ms", d)]),
    _digits.map(lambda d: [("kc-delay-ms", d), ("trace", b"t")]),
    _id.map(lambda i: [("kc-cancel-schedule", i)]),
    st.tuples(_id, _delay).map(lambda t: [("kc-cancel-schedule", t[0]), ("kc-delay-ms", t[1])]),
    _delay.map(lambda d: [("kc-deliver-at", d)]),
    st.just([("kc-deliver-at", str(NOW + MAX_DELAY + 1).encode())]),
    st.just([("kc-deliver-at", b"5"), ("kc-delay-ms", b"5")]),
    _delay.map(lambda d: [("ключ", b"v"), ("kc-delay-ms", d)]),  # a name not ASCII
    st.tuples(_delay, _id).map(lambda t: [("kc-delay-ms", t[0]), ("kc-delay-ms", t[0]),
                                          ("kc-schedule-id", t[1])]),
    st.just([("kc-delay-ms", None)]),
    st.just([("kc-schedule-id", None), ("kc-delay-ms", b"5")]),
)


def _records(headers: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                     st.one_of(st.none(), st.binary(max_size=300)), headers,
                     st.integers(-10**6, 10**6))


# a batch of the forms the C loop answers for, or one with any headers at all
_some_records = st.one_of(st.lists(_records(_fast), min_size=1, max_size=12),
                          st.lists(_records(_headers), min_size=1, max_size=12))


def _batch(records: list, codec: int = CODEC_NONE, append_time: bool = False,
           **kw: int) -> bytes:
    raw = bytearray(encode_batch([(k, v, h, NOW + ts) for k, v, h, ts in records],
                                 codec=codec, **kw))  # type: ignore[arg-type]
    if append_time:  # the records take the batch's log-append time
        raw[22] |= 0x08
        raw[17:21] = compute_crc(memoryview(raw)).to_bytes(4, "big")
    return bytes(raw)


@settings(max_examples=400, deadline=None)
@given(_some_records, st.sampled_from([CODEC_NONE, CODEC_ZSTD]),
       st.integers(0, 2**40), st.booleans())
def test_split_answers_as_its_python_loop(records: list, codec: int, base_offset: int,
                                          append_time: bool) -> None:
    raw = _batch(records, codec, append_time, base_offset=base_offset)
    with pytest.MonkeyPatch.context() as mp:
        assert _outcome(raw, mp, _native) == _outcome(raw, mp, None)


_DELAY = b"\x16kc-delay-ms"
_OVER = str(MAX_DELAY + 1).encode()
_AT = b"\x1akc-deliver-at"
_FAR = str(NOW + MAX_DELAY + 1).encode()
_CANCEL = b"\x24kc-cancel-schedule"
_ID = b"\x1ckc-schedule-id"
# header blocks (their count first) that look like the forms the C loop is for, and are not
NEAR_MISSES = {
    "delay's length too long": b"\x02" + _DELAY + b"\x0a1234",
    "delay's length too short": b"\x02" + _DELAY + b"\x06" + b"1234",
    "delay null": b"\x02" + _DELAY + b"\x01",
    "delay empty": b"\x02" + _DELAY + b"\x00",
    "delay's length negative": b"\x04" + _DELAY + b"\x0b12345" + _ID + b"\x02a",
    "delay's length of two bytes": b"\x02" + _DELAY + b"\x80\x01" + b"1" * 64,
    "id's length too long": b"\x04" + _DELAY + b"\x0812345"[:1] + b"1234" + _ID + b"\x06ab",
    "id's length too short": b"\x04" + _DELAY + b"\x081234" + _ID + b"\x02ab",
    "id not UTF-8": b"\x04" + _DELAY + b"\x081234" + _ID + b"\x04\xff\xfe",
    "id empty": b"\x04" + _DELAY + b"\x081234" + _ID + b"\x00",
    "id of 64 bytes": b"\x04" + _DELAY + b"\x081234" + _ID + b"\x80\x01" + b"x" * 64,
    "other second header": b"\x04" + _DELAY + b"\x081234" + b"\x0akc-id" + b"\x02a",
    "three headers": b"\x06" + _DELAY + b"\x081234" + _ID + b"\x02a" + b"\x02t\x00",
    "no header, then bytes": b"\x00\x00",
    "delay with a sign": b"\x02" + _DELAY + b"\x04-5",
    "delay over int64": b"\x02" + _DELAY + b"\x28" + b"9" * 20,
    "delay over the limit": b"\x02" + _DELAY + bytes((2 * len(_OVER),)) + _OVER,
    "time too far ahead": b"\x02" + _AT + bytes((2 * len(_FAR),)) + _FAR,
    "time with a space": b"\x02" + _AT + b"\x0a 1234",
    "cancel empty": b"\x02" + _CANCEL + b"\x00",
    "cancel null": b"\x02" + _CANCEL + b"\x01",
    "cancel not UTF-8": b"\x02" + _CANCEL + b"\x04\xc3\x28",
    "cancel with an id": b"\x04" + _CANCEL + b"\x02a" + _ID + b"\x02a",
    "cancel's length too long": b"\x02" + _CANCEL + b"\x06ab",
    "cancel's length too short": b"\x02" + _CANCEL + b"\x02ab",
    "id not UTF-8, delay 0": b"\x04" + _DELAY + b"\x020" + _ID + b"\x04\xff\xfe",
    "id not UTF-8, time past": b"\x04" + _AT + b"\x025" + _ID + b"\x04\xff\xfe",
    "id first, not UTF-8": b"\x04" + _ID + b"\x04\xff\xfe" + _DELAY + b"\x025",
    "id first, empty": b"\x04" + _ID + b"\x00" + _DELAY + b"\x025",
    "id first, then a cancel": b"\x04" + _ID + b"\x02a" + _CANCEL + b"\x02b",
    "id first, then another": b"\x04" + _ID + b"\x02a" + b"\x0akc-id" + b"\x025",
    "id first, alone": b"\x02" + _ID + b"\x02a",
    "id twice": b"\x04" + _ID + b"\x02a" + _ID + b"\x02b",
    "a count of one, id then delay": b"\x02" + _ID + b"\x02a" + _DELAY + b"\x025",
    "a count of three, two headers": b"\x06" + _DELAY + b"\x025" + _ID + b"\x02a",
    "a name not ASCII": b"\x04" + b"\x04\xd0\xba" + b"\x00" + _DELAY + b"\x025",
    "a name not UTF-8": b"\x04" + b"\x04\xff\xfe" + b"\x00" + _DELAY + b"\x025",
    "a null name": b"\x04" + b"\x01" + b"\x00" + _DELAY + b"\x025",
    "a value's length under -1": b"\x04" + b"\x02t" + b"\x03" + _DELAY + b"\x025",
    "a cancel and an id": b"\x04" + _ID + b"\x02a" + _CANCEL + b"\x02a",
    "a cancel and a delay": b"\x04" + _DELAY + b"\x025" + _CANCEL + b"\x02a",
    "a cancel among others": b"\x04" + b"\x02t\x00" + _CANCEL + b"\x02a",
    "a time and a delay": b"\x04" + _AT + b"\x025" + _DELAY + b"\x025",
    "a null id": b"\x04" + _ID + b"\x01" + _DELAY + b"\x025",
    "an id alone": b"\x02" + _ID + b"\x02a",
    "an empty id alone": b"\x02" + _ID + b"\x00",
    "a count of 64": b"\x80\x01" + b"\x02t\x00" * 64,
    "a negative count": b"\x01",
    "a count of one, delay then id": b"\x02" + _DELAY + b"\x025" + _ID + b"\x02a",
}


@pytest.mark.parametrize("block", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
@pytest.mark.parametrize("at", [0, 3])
def test_a_near_miss_is_answered_as_its_python_loop_answers_it(block: bytes, at: int) -> None:
    tails = [encode_key_value(b"k", b"v" * 10) + b"\x02" + _DELAY + b"\x0a12345"] * 4
    tails.insert(at, encode_key_value(b"k", b"v") + block)
    payload = b"".join(encode_raw_records([(NOW, t) for t in tails], 0, NOW))
    raw = frame_records([payload], NOW, NOW)  # framed as one record: its count set below
    raw = raw[:57] + len(tails).to_bytes(4, "big") + raw[61:]
    with pytest.MonkeyPatch.context() as mp:
        assert _outcome(raw, mp, _native, header=parse_header(raw)) == \
            _outcome(raw, mp, None, header=parse_header(raw))


@settings(max_examples=1000, deadline=None)
@given(st.lists(_records(_fast).map(lambda r: (r[0], r[1] and r[1][:8], *r[2:])),
                min_size=1, max_size=4), st.data())
def test_a_damaged_batch_is_answered_as_its_python_loop_answers_it(records: list,
                                                                   data: st.DataObject) -> None:
    """One change at a time: a byte of the records, their end, or their count."""
    raw = bytearray(_batch(records))
    count = len(records)
    damage = data.draw(st.sampled_from(["byte", "cut", "count"]))
    if damage == "byte":
        at = data.draw(st.integers(HEADER_SIZE, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[at]))
    elif damage == "cut":
        raw = raw[:data.draw(st.integers(HEADER_SIZE, len(raw) - 1))]
    else:
        count = data.draw(st.integers(0, count + 2).filter(lambda c: c != count))
    payload = bytes(raw[HEADER_SIZE:])
    answer = _native.split_delays(payload, count, 5, NOW, None, NOW, MAX_DELAY)
    if answer is None:
        return  # the Python loop decides: no claim to check
    raw[57:61] = count.to_bytes(4, "big")
    raw[8:12] = (len(raw) - 12).to_bytes(4, "big")
    header = parse_header(bytes(raw))
    with pytest.MonkeyPatch.context() as mp:
        expected = _outcome(bytes(raw), mp, None, header=header)
        assert not (isinstance(expected, tuple) and isinstance(expected[0], type)), \
            f"C answered a payload the Python loop refuses: {expected}"
        assert _outcome(bytes(raw), mp, _native, header=header) == expected


def test_the_batches_it_is_for_are_answered_in_c() -> None:
    records = [(b"k%d" % i, b"v" * 100, [("kc-delay-ms", b"%d" % (5000 + i))], i)
               for i in range(500)]
    records[7] = (None, b"plain", [], 7)
    records[9] = (b"k", None, [("kc-delay-ms", b"0")], 9)  # due now: kept
    records[11] = (b"k", b"v", [("kc-delay-ms", b"60000"), ("kc-schedule-id", "jób".encode())],
                   11)
    records[12] = (b"k", b"v", [("kc-cancel-schedule", b"old")], 12)
    records[13] = (b"k", b"v", [("kc-deliver-at", str(NOW + 90000).encode())], 13)
    records[14] = (b"k", b"v", [("kc-deliver-at", str(NOW - 1).encode())], 14)  # due: kept
    records[15] = (b"k", b"v", [("kc-schedule-id", b"first"), ("kc-delay-ms", b"7")], 15)
    records[16] = (b"k", b"v", [("traceparent", b"00-ab-01"), ("kc-delay-ms", b"8")], 16)
    records[17] = (b"k", b"v", [("traceparent", b"00-ab-01")], 17)  # none of ours: kept
    raw = _batch(records, base_offset=1000)
    header = validate(raw)
    answer = _native.split_delays(raw[HEADER_SIZE:], header.records_count, 1000,
                                  header.base_timestamp, None, NOW, MAX_DELAY)
    assert answer is not None  # not left to the Python loop
    assert answer[1] == 4  # four kept
    out = split(raw, header, NOW, MAX_DELAY)
    assert out is not None and len(out.taken) == 495
    assert out.taken.ids() == [(9, "jób"), (11, "first")]
    moved = out.moves[9]
    assert (moved.offset, moved.due_ms, moved.header_count) == (1011, NOW + 60000, 2)
    assert (out.moves[10].offset, out.moves[10].due_ms) == (1013, NOW + 90000)
    assert out.cancels == ((1012, Cancel("old")),)
    assert out.moves[12].offset == 1016 and out.moves[12].header_count == 2
    with pytest.MonkeyPatch.context() as mp:
        assert _outcome(raw, mp, _native) == _outcome(raw, mp, None)


def test_delayed_records_encodes_as_its_python_loop() -> None:
    records = [(b"k%d" % i, b"v" * (i * 37 % 300), [("kc-delay-ms", b"%d" % (5000 + i))],
                (-1) ** i * i * 1000) for i in range(300)]
    records[3] = (b"k", b"v", [("kc-delay-ms", b"9"), ("kc-schedule-id", b"abc")], 0)
    raw = _batch(records, base_offset=2**33)
    out = split(raw, validate(raw), NOW, MAX_DELAY)
    assert out is not None
    for shift in (0, 17, -2**33):
        in_c = _native.delayed_records(out.taken.offsets, out.taken.timestamps,
                                       out.taken.bodies, out.taken.header_counts,
                                       out.taken.header_bytes, shift)
        assert in_c is not None
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(native, "MODULE", None)
            assert in_c == delayed_records(out.taken, shift)


def test_delayed_records_leaves_an_overflow_to_python() -> None:
    moves = Moves()
    moves.offsets.append(2**63 - 1)
    moves.timestamps.append(NOW)
    moves.bodies.append(b"\x01\x01")
    moves.header_counts.append(0)
    moves.header_bytes.append(b"")
    assert _native.delayed_records(moves.offsets, moves.timestamps, moves.bodies,
                                   moves.header_counts, moves.header_bytes, 1) is None
    encoded, _, _ = delayed_records(moves, 1)  # the Python loop: Python's integers
    assert encoded[0].endswith(b"%d" % 2**63)
