"""The pure parts of ``kcompat.cli._share_consumer``: acknowledgement ranges and
turning a ShareFetch partition answer into deliveries (acquired only, gaps apart)."""

from __future__ import annotations

from kio.schema.share_fetch.v1 import response as sf

from kcompat.cli._share_consumer import GAP, ack_batches, deliveries
from kcompat.wire.records import encode_batch


def test_ack_batches_merge_runs_of_one_type() -> None:
    rows = [(5, 1), (3, 1), (4, 1), (6, 2), (7, 2), (9, 2), (10, GAP)]
    got = [(b.first_offset, b.last_offset, b.acknowledge_types) for b in ack_batches(rows)]
    assert got == [(3, 5, (1,)), (6, 7, (2,)), (9, 9, (2,)), (10, 10, (GAP,))]
    assert ack_batches([]) == ()


def test_deliveries_keep_only_acquired_records_and_report_gaps() -> None:
    batch = encode_batch([(b"k", b"v%d" % i, (), 1000 + i) for i in range(4)], base_offset=10)
    partition = sf.PartitionData(
        partition_index=1, error_code=0, acknowledge_error_code=0,
        current_leader=sf.LeaderIdAndEpoch(leader_id=1, leader_epoch=0), records=batch,
        acquired_records=(sf.AcquiredRecords(first_offset=11, last_offset=12, delivery_count=3),
                          sf.AcquiredRecords(first_offset=14, last_offset=14, delivery_count=1)))
    got, gaps = deliveries("t", partition)
    assert [(d.partition, d.offset, d.value, d.delivery_count) for d in got] == [
        (1, 11, b"v1", 3), (1, 12, b"v2", 3)]
    assert gaps == [14]  # acquired, but no record at 14
