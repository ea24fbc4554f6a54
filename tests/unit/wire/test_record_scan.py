"""Scanning records without decoding them and splicing a subset (``wire.record_scan``):
the same batch ``records.rebuild_batch`` builds, for every codec."""

from __future__ import annotations

import random

import pytest

from kcompat.wire import record_scan
from kcompat.wire.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, validate
from kcompat.wire.records import RecordError, decode_batch, encode_batch, rebuild_batch

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD]


def _batch(codec: int, rng: random.Random, count: int = 40) -> bytes:
    records = []
    for i in range(count):
        headers = [(rng.choice(["region", "amount", "kc-tag", "trace"]),
                    rng.choice([b"eu", b"", None, b"x" * rng.randrange(200)]))
                   for _ in range(rng.randrange(4))]
        key = rng.choice([None, b"", b"k%d" % i])
        value = rng.choice([None, b"", b"v" * rng.randrange(300)])
        records.append((key, value, headers, 1_700_000_000_000 + rng.randrange(-5, 10_000)))
    return encode_batch(records, codec=codec, base_offset=100, producer_id=4, producer_epoch=2,
                        base_sequence=9, transactional=bool(rng.randrange(2)))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("seed", range(5))
def test_scan_and_splice_equal_decode_and_rebuild(codec: int, seed: int) -> None:
    rng = random.Random(seed)
    raw = _batch(codec, rng)
    decoded = decode_batch(raw)
    header, payload, scanned = record_scan.scan(raw, frozenset({"region", "kc-tag"}),
                                                with_body=True)
    assert [(r.key, r.value) for r in scanned] == [(d.key, d.value) for d in decoded]
    assert [r.headers for r in scanned] == [
        [(n, v) for n, v in d.headers if n in ("region", "kc-tag")] for d in decoded]
    every = record_scan.scan(raw, None)[2]
    assert [tuple(r.headers) for r in every] == [d.headers for d in decoded]
    assert all(r.key is None and r.value is None for r in every)  # not asked for
    assert [r.keyed for r in every] == [d.key is not None for d in decoded]
    for keep in ([], list(range(len(decoded))), sorted(rng.sample(range(len(decoded)), 7))):
        spliced = record_scan.splice(raw, header, payload, [scanned[i] for i in keep])
        assert spliced == rebuild_batch(validate(raw), [decoded[i] for i in keep])
        assert [r.offset for r in decode_batch(spliced)] == [decoded[i].offset for i in keep]


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_malformed_records_raise(cut: int) -> None:
    raw = bytearray(_batch(CODEC_NONE, random.Random(1), count=3))
    del raw[-cut:]
    raw[8:12] = (len(raw) - 12).to_bytes(4, "big")  # a consistent but short batch
    with pytest.raises(RecordError):
        record_scan.scan(bytes(raw))
