"""Leader epoch cache: which leader epoch (Raft term) started at which offset.

Theory of operation
-------------------
The cache is the ordered list of (epoch, start_offset) pairs, one per epoch
that wrote at least one batch, both strictly increasing. A new entry is added
when a batch is appended with a leader epoch above the latest one. It answers
OffsetForLeaderEpoch (KIP-101/KIP-279): for a requested epoch, the largest
known epoch <= it and the offset where the next higher epoch starts (the log
end offset if it is the latest). Truncating the log's end drops entries
starting at or after the new end; raising the log start offset drops entries
wholly before it, keeping the last such one moved up to the new start.

Text form (Kafka's checkpoint file layout): a version line ``0``, a count
line, then one ``<epoch> <start_offset>`` line per entry. Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_right

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class LeaderEpochCache:
    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` if it is a new, higher
        epoch; returns True when the cache changed."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()  # an epoch that wrote nothing before this offset
        self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset``."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1][1] >= end_offset:
            keep -= 1
        changed = keep != len(self.entries)
        del self.entries[keep:]
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop entries wholly below ``start_offset``; the last of them, if any,
        is kept with its start moved up to ``start_offset``."""
        below = [i for i, (_, start) in enumerate(self.entries) if start < start_offset]
        if not below:
            return False
        last = below[-1]
        epoch = self.entries[last][0]
        nxt = self.entries[last + 1][1] if last + 1 < len(self.entries) else None
        del self.entries[: last + 1]
        if nxt is None or nxt > start_offset:
            self.entries.insert(0, (epoch, start_offset))
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it.

        * the latest epoch -> (epoch, log_end_offset);
        * an epoch above the latest, no entries, or -1 -> (-1, -1);
        * an epoch below the first entry -> (epoch, first entry's start offset),
          as Kafka does, so a follower truncates to where known history begins;
        * otherwise -> (largest epoch <= requested, start of the next epoch).
        """
        if epoch == UNDEFINED_EPOCH or not self.entries or epoch > self.latest_epoch:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        i = bisect_right(self.entries, epoch, key=lambda e: e[0])
        higher_start = self.entries[i][1]
        if i == 0:
            return epoch, higher_start
        return self.entries[i - 1][0], higher_start

    def to_text(self) -> str:
        lines = [str(_VERSION), str(len(self.entries))]
        lines += [f"{epoch} {start}" for epoch, start in self.entries]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str) -> LeaderEpochCache:
        """Parse a checkpoint; raises ValueError when it is malformed."""
        lines = text.splitlines()
        if len(lines) < 2 or int(lines[0]) != _VERSION:
            raise ValueError("bad leader-epoch checkpoint header")
        count = int(lines[1])
        if len(lines) != 2 + count:
            raise ValueError("leader-epoch checkpoint count mismatch")
        entries: list[tuple[int, int]] = []
        for line in lines[2:]:
            epoch, start = (int(x) for x in line.split())
            if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
                raise ValueError("leader-epoch checkpoint not increasing")
            entries.append((epoch, start))
        return cls(entries)
