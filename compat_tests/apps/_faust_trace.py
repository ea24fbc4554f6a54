"""Which lines of the Faust word count's input were split into the words topic, found
from the two topics alone (``compat_tests/apps/test_faust.py`` prints it and asserts
that no line below the committed offsets went unsplit).

The ``split`` agent sends a line's words in order, each keyed by the word, so each word
lands in one words partition (the same one every time) and every processed line leaves,
in each words partition, its own words of that partition as a contiguous run. Reading
both words partitions from the start, ``align`` explains them as a sequence of whole
lines: the next line of a lines partition costs nothing, a jump ahead (lines never
split, unless met later) or back (a restarted worker resumes from its committed offset)
costs ``JUMP_COST`` however far it goes, and a word no line explains costs
``UNEXPLAINED_WORD_COST`` (a line cut short by a stopped worker, or a record the broker
lost or invented), more than a jump: a far jump must not cost more than dropping words,
or the search would try every way of dropping them first. A cheapest explanation is
found with Dijkstra over (position in each words partition, next line in each lines
partition); the branching is small because a whole line (3 to 7 words, split over the
two partitions in its order) rarely equals another, and in sequence is cheaper than a
jump to an equal line elsewhere. A lost word leaves its line unsplit (and the line's
other words unexplained).

It answers which lines were never split, which were split twice or more, and how many
words no line explains.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass

JUMP_COST = 1
UNEXPLAINED_WORD_COST = 2
STATES_MAX = 400_000

Piece = tuple[tuple[str, ...], tuple[str, ...]]  # a line's words in words partition 0, 1


@dataclass
class Alignment:
    order: list[tuple[int, int]]  # (lines partition, offset) in the order split
    unsplit: list[tuple[int, int]]  # never split
    repeated: dict[tuple[int, int], int]  # split more than once: how many times
    unexplained_words: int
    complete: bool  # every word placed (False: STATES_MAX reached; `order` is a prefix)


def align(lines: dict[int, list[str]], words: dict[int, list[str]]) -> Alignment:
    """``lines``: lines partition -> its lines in offset order; ``words``: words partition
    (0 or 1) -> its words in offset order."""
    part = {w: p for p, ws in words.items() for w in ws}
    pieces: dict[int, list[Piece]] = {}
    by_piece: dict[Piece, list[tuple[int, int]]] = {}
    for p, texts in lines.items():
        pieces[p] = []
        for j, text in enumerate(texts):
            ws = text.split()
            # a word that never reached the words topic: its partition is unknown, and
            # no run of the words topic can hold this line whole
            piece = (tuple(w for w in ws if part.get(w) == 0),
                     tuple(w for w in ws if part.get(w, 1) == 1))
            pieces[p].append(piece)
            by_piece.setdefault(piece, []).append((p, j))
    w0, w1 = tuple(words.get(0, ())), tuple(words.get(1, ()))
    longest = max((len(a) + len(b) for a, b in by_piece), default=0)
    parts = sorted(lines)
    start = (0, 0, tuple(0 for _ in parts))
    best = {start: 0}
    parent: dict[tuple[int, int, tuple[int, ...]], tuple[tuple[int, int, tuple[int, ...]],
                                                         tuple[int, int] | None]] = {}
    heap = [(0, start)]
    goal = None
    far = start
    while heap and len(best) < STATES_MAX:
        cost, state = heapq.heappop(heap)
        if cost > best[state]:
            continue
        k0, k1, nexts = state
        if k0 + k1 > far[0] + far[1]:
            far = state
        if k0 == len(w0) and k1 == len(w1):
            goal = state
            break
        moves: list[tuple[int, tuple[int, int, tuple[int, ...]], tuple[int, int] | None]] = []
        for la in range(min(longest, len(w0) - k0) + 1):
            for lb in range(min(longest - la, len(w1) - k1) + 1):
                if la + lb == 0:
                    continue
                for p, j in by_piece.get((w0[k0:k0 + la], w1[k1:k1 + lb]), ()):
                    i = nexts[parts.index(p)]
                    step = 0 if j == i else JUMP_COST
                    after = tuple(j + 1 if q == p else n for q, n in zip(parts, nexts, strict=True))
                    moves.append((step, (k0 + la, k1 + lb, after), (p, j)))
        if k0 < len(w0):
            moves.append((UNEXPLAINED_WORD_COST, (k0 + 1, k1, nexts), None))
        if k1 < len(w1):
            moves.append((UNEXPLAINED_WORD_COST, (k0, k1 + 1, nexts), None))
        for step, nxt, line in moves:
            if cost + step < best.get(nxt, 1 << 60):
                best[nxt] = cost + step
                parent[nxt] = (state, line)
                heapq.heappush(heap, (cost + step, nxt))
    end = goal if goal is not None else far
    order: list[tuple[int, int]] = []
    unexplained = 0
    state = end
    while state != start:
        state, line = parent[state]
        if line is None:
            unexplained += 1
        else:
            order.append(line)
    order.reverse()
    seen = Counter(order)
    unsplit = [(p, j) for p in parts for j in range(len(lines[p])) if (p, j) not in seen]
    return Alignment(order, unsplit, {ln: n for ln, n in seen.items() if n > 1}, unexplained,
                     goal is not None)


def ranges(found: list[tuple[int, int]]) -> str:
    """``[(0, 380), (0, 381), (1, 7)]`` -> ``'0:380-381 1:7'``."""
    runs: list[list[int]] = []  # [partition, first, last]
    for p, j in sorted(found):
        if runs and runs[-1][0] == p and runs[-1][2] == j - 1:
            runs[-1][2] = j
        else:
            runs.append([p, j, j])
    return " ".join(f"{p}:{a}" + (f"-{b}" if b != a else "") for p, a, b in runs)
