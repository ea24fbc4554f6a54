"""Which replica a consumer reads from: fetching from followers (KIP-392).

Theory of operation
-------------------
A consumer's Fetch (v11+) carries its ``client.rack``. Where the broker's
``replica.selector.class`` is Kafka's ``RackAwareReplicaSelector``, the
partition's leader picks a *preferred read replica* for it: among the live
replicas whose log holds the offset asked (the leader's Raft progress says
how far each follower's durable log matches), those in the client's rack;
the leader itself if it is one of them or none is; else the one with the
longest log (then the lowest node id). A choice other than the leader is
answered with no records and ``preferred_read_replica`` set; the consumer
then fetches from that follower until it errs or its lease ends (librdkafka
and the Java client both fall back to the leader when the follower's broker
goes away). A replica is live while this broker hears its pair heartbeats
and the controller has not fenced it.

Any replica serves a v11+ consumer Fetch, leader or follower, as Kafka
does: a follower reads up to the high watermark (and last stable offset) it
has been told, which trails the leader's by at most a fetch round trip, so a
consumer sees the same records in the same order, a little later. Below
v11 only the leader serves (NOT_LEADER_OR_FOLLOWER). An offset past a
follower's log is OFFSET_OUT_OF_RANGE when the consumer sent its leader
epoch (it then asks the leader, KIP-320), and an empty answer when it did
not (it may have reached this follower through stale metadata; Kafka's
KAFKA-14374 behaviour).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kcompat.broker.config.broker_config import RACK_AWARE_SELECTOR
from kcompat.broker.storage.partition import Partition

if TYPE_CHECKING:
    from kcompat.broker.replication.runtime import ClusterRuntime

NO_REPLICA = -1
FOLLOWER_READS_FROM = 11  # the Fetch version that carries rack_id (KIP-392)


class ReadReplicas:
    def __init__(self, rt: ClusterRuntime) -> None:
        self.rt = rt
        self.rack_aware = rt.state.config["replica.selector.class"] == RACK_AWARE_SELECTOR

    def partition(self, topic: str, index: int, version: int
                  ) -> tuple[Partition | None, ErrorCode, bool]:
        """(local partition, NONE, leads) where a consumer Fetch of ``version``
        may read here; else (None, the error, False)."""
        rt = self.rt
        part, code = rt.led_partition(topic, index)
        if part is not None or code != ErrorCode.not_leader_or_follower \
                or version < FOLLOWER_READS_FROM:
            return part, code, part is not None
        group = rt.group_of(topic, index)
        part = rt.state.source_partition(topic, index)
        if group is None or group.removed or part is None:
            return None, ErrorCode.not_leader_or_follower, False
        return part, ErrorCode.none, False

    def preferred(self, topic: str, index: int, client_rack: str, fetch_offset: int) -> int:
        """At the leader: the replica a client in ``client_rack`` should read
        ``fetch_offset`` from, or NO_REPLICA for this broker (the leader)."""
        rt = self.rt
        if not (self.rack_aware and client_rack):
            return NO_REPLICA
        group = rt.group_of(topic, index)
        if group is None or not group.is_leader:
            return NO_REPLICA
        image = rt.image
        me = image.brokers.get(rt.node_id)
        if me is not None and me.rack == client_rack:
            return NO_REPLICA  # the leader is in the client's rack: it serves
        ends = group.raft.status().match_ends
        best: tuple[int, int] | None = None
        for node, end in ends.items():
            info = image.brokers.get(node)
            if (info is None or info.fenced or info.rack != client_rack or node in rt.down
                    or end < fetch_offset):
                continue
            if best is None or (end, -node) > (best[0], -best[1]):
                best = (end, node)
        return best[1] if best is not None else NO_REPLICA
