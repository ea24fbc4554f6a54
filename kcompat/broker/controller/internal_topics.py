"""The internal topics of the coordinators and which partition serves a key.

Theory of operation
-------------------
``__consumer_offsets`` (group coordinator) and ``__transaction_state``
(transaction coordinator) are created by the controller on the first
FindCoordinator that needs them, with these configs and the partition counts
and replication factors of the broker config
(``offsets.topic.num.partitions``, ``transaction.state.log.replication.factor``
...); both are compacted, with the segment size of
``offsets.topic.segment.bytes`` / ``transaction.state.log.segment.bytes``.
``__kc_schedule`` (delayed records, ``ext.schedule_log``) is created the same
way on the first produce of a delayed record, ``__share_group_state``
(share-partition state, ``group.share_state``; segments of
``share.coordinator.state.topic.segment.bytes``, its prefix dropped by its
leaders as its keys are snapshotted) on a share group's first fetch. The coordinator of a
group id or transactional id is the leader of partition
``abs(javaHash(id)) % partitions``, as in Kafka, so records land where Kafka
puts them; a topic-partition's delayed records go to the schedule partition
of ``"topic-partition"`` alike.
"""

from __future__ import annotations

from kcompat.ext.schedule_log import SCHEDULE_TOPIC
from kcompat.group.share_state import SHARE_STATE_TOPIC

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
TXN_TOPIC = "__transaction_state"
TXN_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
# delayed records wait here until delivered: never deleted by time or size
SCHEDULE_TOPIC_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1"}
# share-partition state: never deleted by time or size; its leaders drop the
# prefix no live key needs (broker.share_compaction), in segments of
# share.coordinator.state.topic.segment.bytes, as Kafka's share coordinator does
SHARE_STATE_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1",
                             "retention.bytes": "-1"}
# topic -> prefix of its broker config keys (``<prefix>.num.partitions`` ...,
# ``<prefix>.segment.bytes`` where the broker has one), configs
INTERNAL_TOPICS = {OFFSETS_TOPIC: ("offsets.topic", OFFSETS_TOPIC_CONFIGS),
                   TXN_TOPIC: ("transaction.state.log", TXN_TOPIC_CONFIGS),
                   SCHEDULE_TOPIC: ("kc.schedule.topic", SCHEDULE_TOPIC_CONFIGS),
                   SHARE_STATE_TOPIC: ("share.coordinator.state.topic",
                                       SHARE_STATE_TOPIC_CONFIGS)}


def java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """The internal-topic partition of a group id or transactional id."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
