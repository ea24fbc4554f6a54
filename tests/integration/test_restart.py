"""State that must survive a restart: data, producer state (dedup), topic configs,
producer ids; after kill -9 a torn tail is cut and appends continue."""

from __future__ import annotations

import pytest

from compat_tests._broker import Broker
from tests.integration._raw import RawConnection
from tests.integration.test_produce_paths import latest, make_batch, new_topic, produce


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_producer_state_survives_restart(broker: Broker, how: str) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = new_topic(conn, broker)
    batches = [make_batch(2, pid=77, epoch=0, seq=s) for s in (0, 2, 4)]
    offsets = [produce(conn, topic, b).base_offset for b in batches]
    assert offsets == [0, 2, 4]
    conn.close()
    broker.stop() if how == "sigterm" else broker.kill()
    broker.restart()
    conn = RawConnection(broker.bootstrap)
    assert latest(conn, topic) == 6
    again = produce(conn, topic, batches[1])  # a retry after restart is still a duplicate
    assert (again.error_code, again.base_offset) == (0, 2)
    gap = produce(conn, topic, make_batch(1, pid=77, epoch=0, seq=9))
    assert gap.error_code == 45
    assert produce(conn, topic, make_batch(1, pid=77, epoch=0, seq=6)).base_offset == 6


def test_torn_tail_after_kill_is_truncated(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = new_topic(conn, broker)
    for _ in range(5):
        produce(conn, topic, make_batch(3))
    conn.close()
    broker.kill()
    segment = broker.data_dir / f"{topic}-0" / ("0" * 20 + ".log")
    with open(segment, "ab") as f:
        f.write(make_batch(3)[:40])  # half a batch: what a crash mid-write leaves
    broker.restart()
    conn = RawConnection(broker.bootstrap)
    assert latest(conn, topic) == 15
    assert produce(conn, topic, make_batch(1)).base_offset == 15
