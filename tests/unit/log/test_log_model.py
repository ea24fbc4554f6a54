"""Property test: a PartitionLog against a list-of-batches model, through
appends, reads, reopenings (clean and crashed), truncations and deletions."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import headers_of, make_batch

from kcompat.log import LogConfig, OffsetOutOfRange, PartitionLog


@dataclass
class Model:
    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # base, next, bytes
    start: int = 0

    @property
    def end(self) -> int:
        return self.batches[-1][1] if self.batches else self.start

    def holding(self, offset: int) -> int:
        return next(i for i, (_, nxt, _) in enumerate(self.batches) if nxt > offset)


op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 6), st.integers(0, 300)),
    st.tuples(st.just("read"), st.integers(0, 10_000), st.integers(0, 2_000)),
    st.tuples(st.just("reopen"), st.booleans(), st.just(0)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("delete_before"), st.integers(0, 10_000), st.just(0)),
)


def _check_read(log: PartitionLog, model: Model, offset: int, max_bytes: int) -> None:
    max_offset = offset + max_bytes % 17
    data = log.read(offset, max_bytes, max_offset)
    if offset == model.end:
        assert data == b""
        return
    i = model.holding(offset)
    tail = b"".join(b for _, _, b in model.batches[i:])
    assert tail.startswith(data)
    whole = headers_of(data)
    assert all(h.last_offset < max_offset for h in whole)
    if not data:
        assert model.batches[i][1] > max_offset
        return
    assert whole[0].base_offset == model.batches[i][0]
    assert len(data) <= max(max_bytes, whole[0].size)


def _step(
    log: PartitionLog, model: Model, cfg: LogConfig, path: Path, o: tuple[str, int, int]
) -> PartitionLog:
    kind, a, b = o
    if kind == "append":
        batch, header = make_batch(a, ts=1000 + model.end, value_size=b)
        assigned = log.append(batch, header, 1, 0)
        assert assigned.base_offset == model.end
        stored = log.read_batch_at(assigned.base_offset)
        model.batches.append((assigned.base_offset, assigned.next_offset, stored))
    elif kind == "read" and model.end > model.start:
        offset = model.start + a % (model.end - model.start + 1)
        _check_read(log, model, offset, b)
    elif kind == "reopen":
        log.close(clean=a)
        log = PartitionLog.open(path, cfg, 0)
    elif kind == "truncate" and model.batches:
        offset = model.start + a % (model.end - model.start + 1)
        log.truncate_to(offset)
        cut = model.batches[model.holding(offset)][0] if offset < model.end else offset
        if min(offset, cut) <= model.start:
            model.batches, model.start = [], min(offset, model.start)
        model.batches = [x for x in model.batches if x[1] <= offset]
    elif kind == "delete_before":
        offset = model.start + a % (model.end - model.start + 1)
        log.delete_records_before(offset)
        model.start = max(model.start, offset)
    return log


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(op, max_size=40),
    st.integers(200, 2_000),
    st.integers(0, 600),
)
def test_log_matches_model(ops: list[tuple[str, int, int]], seg_bytes: int, interval: int) -> None:
    cfg = LogConfig(segment_bytes=seg_bytes, index_interval_bytes=interval)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t-0"
        log = PartitionLog.open(path, cfg, 0)
        model = Model()
        for o in ops:
            log = _step(log, model, cfg, path, o)
            assert (log.log_start_offset, log.log_end_offset) == (model.start, model.end)
        for offset in range(model.start, model.end):
            assert log.read_batch_at(offset) == model.batches[model.holding(offset)][2]
        if model.start > 0:
            try:
                log.read(model.start - 1, 100, model.end)
                raise AssertionError("expected OffsetOutOfRange")
            except OffsetOutOfRange:
                pass
        log.close()
