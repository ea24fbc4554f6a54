"""A share group's membership survives its coordinator: kill -9 and restart of
a single broker (its ``__consumer_offsets`` partition is the coordinator's
state), then the member heartbeats on with the epoch it had, keeps its
assignment and is not asked to rejoin — as with Kafka, whose coordinator
loads share groups from ``__consumer_offsets``. Requests go through the CLI's
kio connection (``kcompat.cli._kio``), so the epochs are visible.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest

from compat_tests._broker import Broker, unique_topic
from kcompat.cli._kio import Cluster
from tests.integration._share import share_heartbeat


def test_members_and_epochs_survive_a_coordinator_kill(tmp_path: Path) -> None:
    broker = Broker(tmp_path, extra_args=("--set", "offsets.topic.num.partitions=3"))
    broker.start()
    try:
        topic, group = unique_topic("sgr"), unique_topic("sgr-g")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        member = uuid.uuid4().hex
        joined = share_heartbeat(broker.bootstrap, group, member, 0, (topic,))
        assert joined.error_code == ErrorCode.none, joined  # type: ignore[attr-defined]
        epoch = joined.member_epoch  # type: ignore[attr-defined]
        assert epoch > 0 and joined.assignment is not None  # type: ignore[attr-defined]
        broker.kill()
        broker.start()
        again = share_heartbeat(broker.bootstrap, group, member, epoch, None)
        assert again.error_code == ErrorCode.none, again  # type: ignore[attr-defined]
        assert again.member_epoch == epoch  # type: ignore[attr-defined]
        cluster = Cluster(broker.bootstrap, 10.0)
        try:
            described = cluster.coordinator(group).call(ShareGroupDescribeRequest(
                group_ids=(group,), include_authorized_operations=False))
        finally:
            cluster.close()
        (g,) = described.groups
        assert g.error_code == ErrorCode.none and g.group_state == "Stable", g
        assert [m.member_id for m in g.members] == [member]
        assert [tp.topic_name for tp in g.members[0].assignment.topic_partitions] == [topic]
    finally:
        broker.close()
