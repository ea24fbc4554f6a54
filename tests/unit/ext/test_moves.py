"""A batch's moves in columns (``ext.moves``): cut in chunks for the schedule
log, each chunk's moves and schedule ids are those of its range, indexed
from 0 again, and a chunk finds its ids by bisection."""

from __future__ import annotations

from kcompat.ext.moves import Move, Moves


def _moves(n: int, named_every: int) -> Moves:
    out = Moves()
    for i in range(n):
        out.add(Move(100 + i, 1_000 + i, b"kv%d" % i, 1, b"h", 5_000 + i,
                     f"id-{i}" if i % named_every == 0 else None))
    return out


def test_a_chunk_holds_its_range_and_its_ids_indexed_from_zero() -> None:
    moves = _moves(10, 3)  # ids at 0, 3, 6, 9
    assert moves.ids() == [(0, "id-0"), (3, "id-3"), (6, "id-6"), (9, "id-9")]
    chunk = moves.chunk(4, 8)
    assert len(chunk) == 4 and list(chunk.offsets) == [104, 105, 106, 107]
    assert chunk.ids() == [(2, "id-6")]
    assert [m.schedule_id for m in chunk] == [None, None, "id-6", None]
    assert moves.chunk(8, 20).ids() == [(1, "id-9")]
    assert moves.chunk(10, 12).ids() == [] and not moves.chunk(10, 12)


def test_chunks_of_a_large_batch_cover_every_move_once() -> None:
    moves = _moves(20_000, 7)
    seen = []
    for start in range(0, len(moves), 2_000):
        chunk = moves.chunk(start, start + 2_000)
        seen.extend((start + i, name) for i, name in chunk.ids())
    assert seen == moves.ids()
    assert list(moves)[7] == Move(107, 1_007, b"kv7", 1, b"h", 5_007, "id-7")
