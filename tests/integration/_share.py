"""ShareGroupHeartbeat at the group's coordinator as a real client sends it:
retried while the coordinator is being found, is loading or has moved.

A coordinator answers COORDINATOR_LOAD_IN_PROGRESS between winning its
offsets partition and having applied what was committed before (Kafka does
the same while it loads a partition); every client retries it, so a test
that sends the request raw must too.
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from kcompat.cli._kio import Cluster

RETRIABLE = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
             ErrorCode.coordinator_load_in_progress)


def share_heartbeat(bootstrap: str, group: str, member: str, epoch: int,
                    topics: tuple[str, ...] | None, timeout: float = 30.0) -> Any:
    """The first answer that is not a retriable coordinator error."""
    deadline = time.monotonic() + timeout
    while True:
        cluster = Cluster(bootstrap, 10.0)
        try:
            answer = cluster.coordinator(group).call(ShareGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                subscribed_topic_names=topics))
        except Exception:
            answer = None
        finally:
            cluster.close()
        if answer is not None and answer.error_code not in RETRIABLE:
            return answer
        assert time.monotonic() < deadline, f"no coordinator answer: {answer}"
        time.sleep(0.2)
