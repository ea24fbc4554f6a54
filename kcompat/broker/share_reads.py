"""Reading a partition's log for its share-partitions (KIP-932).

Theory of operation
-------------------
A share-partition's machine (``group.share_partition``) learns records as it
offers them: ``records_from`` reads the log from the machine's read offset in
whole batches below the high watermark (or last stable offset), and yields
(offset, message group) per record. A batch whose every offset holds a record
and whose records need not be looked at (no message groups, no view filter)
is never decoded: its offsets are counted out. Otherwise its records are
scanned for the headers needed only (``wire.record_scan``: the view's
filter's, ``kc-group``) and the result kept for the last ``DECODED_BATCHES``
batches, since consecutive acquisitions take records of the same batches.
Records of aborted transactions (read_committed) and those a view's filter
does not match are left out: gaps, archived unseen.

``batches_for`` then serves the whole log batches holding the acquired
offsets, through the view's filter for a view (``views``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kcompat.ext.view_filter import Filter
from kcompat.group.share_partition import AcquiredRecords
from kcompat.wire import batch as wbatch
from kcompat.wire import record_scan

if TYPE_CHECKING:
    from kcompat.broker.partition import Partition
    from kcompat.broker.views import ViewReader

GROUP_HEADER = "kc-group"  # the message group of kc.share.ordering=message-group
_GROUP_NAMES = frozenset((GROUP_HEADER,))
DECODED_BATCHES = 64  # batches whose records' offsets and groups are kept decoded


class ShareReads:
    """The log reads of the share-partitions, with their batch cache."""

    def __init__(self, views: ViewReader) -> None:
        self.views = views
        self._decoded: OrderedDict[tuple[str, int, int, int, bool, str | None],
                                  list[tuple[int, bytes | None]]] = OrderedDict()

    def records_from(self, part: Partition, start: int, end: int, upper: int, keyed: bool,
                     committed: bool = False, flt: Filter | None = None
                     ) -> Iterator[tuple[int, bytes | None]]:
        """(offset, message group) of every record in [start, end) — read
        from whole batches below ``upper`` (a batch boundary: the high
        watermark or last stable offset), so none in that range is missed;
        the group is header ``kc-group``, else the key, when ``keyed``. With
        ``committed`` (``share.isolation.level=read_committed``) the records
        of aborted transactions are left out: gaps, archived unseen; so are
        the records a filtered view's ``flt`` does not match."""
        aborted = part.log.aborted_transactions(start, upper) if committed else []
        for view, header in part.log.batches(start, upper):
            if header.is_control:
                continue
            if aborted and header.is_transactional and any(
                    a.producer_id == header.producer_id
                    and a.first_offset <= header.base_offset <= a.last_offset
                    for a in aborted):
                continue
            if flt is None and not keyed and (
                    header.records_count == header.last_offset_delta + 1):
                # every offset of the batch holds a record: no need to decode it
                for offset in range(max(start, header.base_offset),
                                    min(end, header.next_offset)):
                    yield offset, None
                if header.next_offset >= end:
                    return
                continue
            for offset, group in self._batch_records(part, view, header, keyed, flt):
                if offset >= end:
                    return
                if offset >= start:
                    yield offset, group

    def _batch_records(self, part: Partition, view: memoryview, header: wbatch.BatchHeader,
                       keyed: bool, flt: Filter | None = None) -> list[tuple[int, bytes | None]]:
        """(offset, message group) of a batch's records (those ``flt``
        matches), decoded once while the batch is among the last few read
        (consecutive acquisitions take records of the same batches)."""
        # the CRC tells a batch from another one at its offset after a truncation
        cache_key = (part.topic, part.index, header.base_offset, header.crc, keyed,
                     flt.text if flt is not None else None)
        found = self._decoded.get(cache_key)
        if found is not None:
            self._decoded.move_to_end(cache_key)
            return found
        found = []
        # only the headers the filter and the message group need, no Record objects
        wanted = (flt.header_names if flt is not None else frozenset()) | (
            _GROUP_NAMES if keyed else frozenset())
        _header, _payload, records = record_scan.scan(view, wanted, with_key=keyed)
        base = header.base_offset
        for record in records:
            if flt is not None and not flt.matches(record.headers):
                continue
            group = None
            if keyed:
                group = next((v for k, v in record.headers if k == GROUP_HEADER),
                             None) or record.key
            found.append((base + record.offset_delta, group))
        self._decoded[cache_key] = found
        while len(self._decoded) > DECODED_BATCHES:
            self._decoded.popitem(last=False)
        return found

    def batches_for(self, part: Partition, ranges: list[AcquiredRecords],
                    view: tuple[str, str] | None = None) -> bytes:
        """The whole log batches holding the acquired offsets, in offset
        order; for a filtered ``view`` (name, filter) with the records it
        does not match taken out (``views``)."""
        out: list[bytes] = []
        seen: set[int] = set()
        upper = part.high_watermark
        for r in sorted(ranges, key=lambda a: a.first_offset):
            offset = r.first_offset
            while offset <= r.last_offset:
                chunk = part.log.read(offset, 1, upper)  # the batch holding offset
                if not chunk:
                    break
                header = wbatch.parse_header(chunk)
                if header.base_offset not in seen:
                    seen.add(header.base_offset)
                    whole = chunk[:header.size]
                    if view is not None:
                        whole = self.views.filter_records(view[0], view[1], part.topic,
                                                                part.index, whole)
                    out.append(whole)
                offset = header.next_offset
        return b"".join(out)
