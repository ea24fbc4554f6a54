"""A produce to a retry topic routes its records from their headers alone: no
record is decoded (key and value), and the moves equal those of the decoded
records (issue 31: the nack path paid a decode and two encodes per record)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.ext import holes, moves
from kcompat.ext.moves import Move
from kcompat.ext.retry import Retry, RetryPolicy, route
from kcompat.wire import records as wrecords
from kcompat.wire.batch import validate
from kcompat.wire.records import decode_batch, encode_batch

NOW = 1_700_000_000_000
POLICY = RetryPolicy("orders", max_attempts=3)

_header = st.tuples(st.sampled_from(["a", "kc-error", "kc-original-partition",
                                     "kc-original-offset", "kc-attempt", "x-trace"]),
                    st.one_of(st.none(), st.binary(max_size=8)))
_attempt = st.sampled_from([None, b"1", b"2", b"3"])


def _record(i: int, headers: list[tuple[str, bytes | None]], attempt: bytes | None,
            key: bytes | None, value: bytes | None) -> tuple[bytes | None, bytes | None,
                                                           tuple[tuple[str, bytes | None],
                                                                 ...], int]:
    kept = [(n, v) for n, v in headers
            if n not in ("kc-attempt", "kc-original-partition", "kc-original-offset")]
    if attempt is not None:
        kept.append(("kc-attempt", attempt))
    return key, value, tuple(kept), NOW - 1000 + i


def _expected(raw: bytes) -> list[Move]:
    out = []
    for record in decode_batch(raw):
        where = route(record, POLICY, NOW)
        if isinstance(where, Retry):
            out.append(Move.of(record, where.due_ms, None, where.headers, retry=True))
        else:
            out.append(Move.of(record, NOW, None, where.headers, where.topic, where.partition))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(_header, max_size=4), _attempt,
                          st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=200))),
                min_size=1, max_size=30))
def test_moves_of_a_retry_batch_equal_those_of_its_decoded_records(drawn: list) -> None:
    raw = encode_batch([_record(i, *d) for i, d in enumerate(drawn)])
    found = holes.split(raw, validate(raw), NOW, retry=POLICY)
    assert found is not None
    assert list(found.moves) == _expected(raw)
    assert found.topics == {m.topic for m in found.moves if m.topic is not None}


def test_no_record_is_decoded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls: list[int] = []
    real_records, real_at = wrecords.decode_records, wrecords.decode_record_at

    def counting_records(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real_records(*a, **k)

    def counting_at(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real_at(*a, **k)

    monkeypatch.setattr(wrecords, "decode_records", counting_records)
    monkeypatch.setattr(wrecords, "decode_record_at", counting_at)
    monkeypatch.setattr(holes, "decode_batch", lambda *a, **k: calls.append(1) or [],
                        raising=False)  # the old path decoded the batch
    monkeypatch.setattr(moves, "decode_record_at", counting_at)
    raw = encode_batch([(b"k%d" % i, b"v" * 50, (("kc-error", b"boom"),
                                                 ("kc-attempt", b"%d" % (i % 4))), NOW)
                        for i in range(500)])
    found = holes.split(raw, validate(raw), NOW, retry=POLICY)
    assert found is not None and len(found.taken) == 500
    assert calls == []
    assert found.taken.routes is not None  # attempts 1..3 retried; 125 dead letters
    assert sum(retry for _, _, _, retry in found.taken.routes) == 375
