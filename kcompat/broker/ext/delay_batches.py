"""What a produce writes to the schedule log, and which pending records lie low in it.

Theory of operation
-------------------
Pure functions of the delayed-delivery host (``delays``), run in worker
threads when large: ``schedule_batches`` turns the delayed records a stored
batch took out (a ``holes.Split``) into schedule-log batches of
``SCHEDULE_BATCH`` records, each led by its ``adds`` op
(``ext.schedule_adds``), the records keeping the bytes their producer
encoded; ``below`` lists the pending entries whose records lie below an
offset (those a compaction copies forward before the log start passes them).
"""

from __future__ import annotations

from kcompat.ext.delay import SCHEDULED_OFFSET
from kcompat.ext.holes import Split
from kcompat.ext.moves import Moves
from kcompat.ext.schedule import CELLS, Pending, ScheduleImage, Target
from kcompat.ext.schedule_adds import AddParts, adds_batch_of, delayed_records, encode_adds
from kcompat.ext.schedule_image import image_cells
from kcompat.wire import batch as wbatch
from kcompat.wire.records import encode_headers, record_tail

SCHEDULE_BATCH = 2000  # records per schedule-log batch a produce writes, at most (~4 ms to build)


def below(image: ScheduleImage, before: int) -> list[Pending]:
    """The pending entries of ``image`` whose records lie in batches below
    ``before``. Pure: a worker thread runs it."""
    cells, ids = image_cells(image)
    targets = image.targets
    found = []
    for i in range(0, len(cells), CELLS):
        entry, where = cells[i + 1], cells[i + 4]
        if (entry if where == -1 else entry - (where >> 32)) < before:
            due_ms, _entry, offset, tid, _where = cells[i:i + CELLS]
            found.append(Pending(entry, due_ms, ids.get(entry), targets[tid], offset, where))
    return found


def schedule_batches(topic: str, index: int, split: Split, base_offset: int,
                     partitions: dict[str, int], now: int) -> list[bytes]:
    """The schedule-log batches of ``split`` (stored at ``base_offset`` in
    ``topic``-``index``): ``SCHEDULE_BATCH`` records each, so that applying
    one stays a short step on every replica, each led by its ``adds`` op
    (``ext.schedule_adds``), the split's cancellations in the last one. The
    records keep the bytes their producer encoded, with their own headers
    and ``kc-scheduled-offset`` (a retry: the headers its route gives; a dead
    letter: those alone). Pure (a worker thread builds them: ten thousand
    records take about 20 ms)."""
    hole = wbatch.parse_header(split.hole)
    src = (hole.producer_id, hole.producer_epoch, hole.base_sequence)
    shift = base_offset - hole.base_offset
    source = (topic, index)
    txn = hole.is_transactional  # written in the producer's transaction
    cancels = [(offset + shift, c.schedule_id) for offset, c in split.cancels]
    moves = split.taken
    out = []
    for start in range(0, max(len(moves), 1), SCHEDULE_BATCH):
        chunk = moves.chunk(start, start + SCHEDULE_BATCH)
        last = start + SCHEDULE_BATCH >= len(moves)
        if not chunk and not cancels:
            break
        targets: list[Target] = []
        target_of: list[int] = []
        if not split.topics and chunk and chunk.routes is None:
            records = delayed_records(chunk, shift)  # delayed (not a retry topic's)
        else:
            parts, targets, target_of = _parts(chunk, shift, index, partitions)
            records = encode_adds(parts, now)
        out.append(adds_batch_of(
            source, src, records, [offset + shift for offset in chunk.offsets], chunk.dues,
            ids=chunk.ids(),
            cancels=cancels if last else (), targets=targets, target_of=target_of,
            producer_id=hole.producer_id if txn else -1,
            producer_epoch=hole.producer_epoch if txn else -1, transactional=txn))
    return out


def _parts(moves: Moves, shift: int, index: int, partitions: dict[str, int]
           ) -> tuple[list[AddParts], list[Target], list[int]]:
    """The encoded parts of ``moves`` as scheduled, and the targets other
    than their source (with each move's index into [source, *targets]; both
    empty when every move stays in its partition)."""
    parts: list[AddParts] = []
    targets: list[Target] = []
    target_of: list[int] = []
    for m in moves:
        headers = m.headers if m.headers is not None else m.record.headers
        if m.topic is None:  # a retry: the headers its route gives, and its hole
            tid = 0
            headers = (*headers, (SCHEDULED_OFFSET, b"%d" % (m.offset + shift)))
        else:  # a dead letter: the headers its route gives
            count_p = partitions[m.topic]
            target = (m.topic, m.partition if 0 <= m.partition < count_p else index % count_p)
            if target not in targets:
                targets.append(target)
            tid = targets.index(target) + 1
        parts.append((m.timestamp, record_tail(m.body, len(headers), encode_headers(headers))))
        target_of.append(tid)
    return parts, targets, target_of if targets else []
