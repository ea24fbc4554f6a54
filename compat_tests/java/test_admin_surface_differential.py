"""Differential: the admin surface of issue 18 item 5 at the wire level, Apache Kafka
4.4 against kcompat (one broker each).

One script (``run_script``) sends the same raw requests (kio entities) to a broker
and keeps what each answer says, normalized where the order of a list is a hash
map's on Kafka's side: AlterClientQuotas entries good and bad (every error code and
message per entity, ``validate_only``, a duplicate entity whose first entry Kafka
still carries out), then DescribeClientQuotas filters (exact, default, any, strict,
and the bad ones), DescribeLogDirs (null / named topics, unknown names left out,
sizes zero or not, lags, volume bytes), ElectLeaders (not needed, unknown topic and
partition, unknown election type, null = all), DescribeQuorum's answers for a
partition that is not the metadata log's, ListConfigResources per type, and
AlterPartitionReassignments v0/v1 input a single broker refuses or has nothing to
do for (unknown topic or partition, unregistered, repeated or no replicas, a
cancellation with nothing in progress, the current replicas, a replication factor
change with ``allow_replication_factor_change`` false, a topic or partition named
twice; no topics, no partitions) with ListPartitionReassignments after it: nothing
in progress; UnregisterBroker of an id nobody registered. Each step is a test: kcompat's observation must equal Kafka's. Quota
entity names carry a per-run suffix, so the script can run against a long-lived
broker too.
"""

from __future__ import annotations

import datetime
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kio.schema.alter_client_quotas.v1 import request as acq
from kio.schema.alter_partition_reassignments.v0 import request as apr0
from kio.schema.alter_partition_reassignments.v1 import request as apr1
from kio.schema.describe_client_quotas.v1 import request as dcq
from kio.schema.describe_log_dirs.v4 import request as dld
from kio.schema.describe_quorum.v2 import request as dq
from kio.schema.elect_leaders.v2 import request as el
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest
from kio.schema.list_partition_reassignments.v0 import request as lpr
from kio.schema.metadata.v12 import request as metadata
from kio.schema.unregister_broker.v0 import request as ub
from kio.static.primitive import f64, i8, i32

from compat_tests._broker import Broker
from compat_tests.java.kafka_reference import KafkaReference
from kcompat.cli._kio import Connection

pytestmark = pytest.mark.timeout(120)

TOPIC = "admin-surface-diff"
#: Kafka answers AlterClientQuotas once its controller committed the change; the
#: broker's own metadata image may take a moment more to show it to a describe.
SETTLE_S = 0.5
Obs = Any
Entity = tuple[tuple[str, str | None], ...]


def _entity(pairs: Any) -> Entity:
    return tuple(sorted(((p.entity_type, p.entity_name) for p in pairs),
                        key=lambda p: (p[0], p[1] or "")))


def _ops(*ops: tuple[str, float | None]) -> tuple[Any, ...]:
    return tuple(acq.OpData(key=k, value=f64(v if v is not None else 0.0), remove=v is None)
                 for k, v in ops)


def quota_alters(suffix: str) -> dict[str, list[tuple[list[tuple[str, str | None]],
                                                     tuple[Any, ...]]]]:
    u, c = f"alice-{suffix}", f"app-{suffix}"
    return {
        "alter_ok": [([("user", u)], _ops(("producer_byte_rate", 1024.0))),
                     ([("user", u), ("client-id", c)],
                      _ops(("consumer_byte_rate", 2048.0), ("request_percentage", 50.0))),
                     ([("user", None), ("client-id", c)], _ops(("producer_byte_rate", 7.0))),
                     ([("ip", "127.0.0.9")], _ops(("connection_creation_rate", 10.0))),
                     ([("client-id", f"ctl-{suffix}")],
                      _ops(("controller_mutation_rate", 2.5)))],
        "alter_bad_keys": [([("user", f"k1-{suffix}")], _ops(("foo", 1.0))),
                           ([("user", f"k2-{suffix}")], _ops(("connection_creation_rate", 1.0))),
                           ([("ip", "127.0.0.8")], _ops(("producer_byte_rate", 1.0)))],
        "alter_bad_values": [([("user", f"v1-{suffix}")], _ops(("producer_byte_rate", -1.0))),
                             ([("user", f"v2-{suffix}")], _ops(("producer_byte_rate", 1.5))),
                             ([("user", f"v3-{suffix}")], _ops(("producer_byte_rate", 1e30))),
                             ([("ip", "127.0.0.7")], _ops(("connection_creation_rate", 1e10))),
                             ([("ip", "127.0.0.6")], _ops(("connection_creation_rate", 2.5))),
                             ([("user", f"v4-{suffix}")], _ops(("request_percentage", 0.0)))],
        "alter_bad_entities": [([], _ops(("producer_byte_rate", 1.0))),
                               ([("group", "g")], _ops(("producer_byte_rate", 1.0))),
                               ([("user", "")], _ops(("producer_byte_rate", 1.0))),
                               ([("client-id", "")], _ops(("producer_byte_rate", 1.0))),
                               ([("ip", "1.2.3.4"), ("user", "x")],
                                _ops(("connection_creation_rate", 1.0))),
                               ([("ip", "no-such-host.invalid")],
                                _ops(("connection_creation_rate", 1.0)))],
        "alter_duplicates": [([("user", f"d-{suffix}")], _ops(("producer_byte_rate", 1.0))),
                             ([("user", f"d-{suffix}")], _ops(("consumer_byte_rate", 1.0))),
                             ([("user", f"k-{suffix}")],
                              _ops(("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)))],
        "alter_remove": [([("user", u), ("client-id", c)], _ops(("request_percentage", None))),
                         ([("user", f"nobody-{suffix}")], _ops(("producer_byte_rate", None),
                                                               ("foo", None)))],
    }


def _alter(conn: Connection, entries: Any, validate_only: bool = False) -> Obs:
    r = conn.call(acq.AlterClientQuotasRequest(validate_only=validate_only, entries=tuple(
        acq.EntryData(entity=tuple(acq.EntityData(entity_type=t, entity_name=n) for t, n in e),
                      ops=ops) for e, ops in entries)))
    return sorted(((_entity(x.entity), x.error_code.name, x.error_message) for x in r.entries),
                  key=repr)


def _describe(conn: Connection, suffix: str, components: tuple[tuple[str, int, str | None], ...],
              strict: bool = False) -> Obs:
    r = conn.call(dcq.DescribeClientQuotasRequest(strict=strict, components=tuple(
        dcq.ComponentData(entity_type=t, match_type=i8(m), match=s) for t, m, s in components)))
    if r.entries is None:
        return (r.error_code.name, r.error_message, None)
    mine = [(_entity(x.entity), sorted((v.key, v.value) for v in x.values)) for x in r.entries
            if all(e.entity_name is None or suffix in e.entity_name or
                   e.entity_name.startswith("127.0.0.") for e in x.entity)]
    return (r.error_code.name, r.error_message, sorted(mine, key=repr))


def _log_dirs(conn: Connection, topics: Any) -> Obs:
    r = conn.call(dld.DescribeLogDirsRequest(topics=topics))
    [result] = r.results
    parts = sorted((t.name, p.partition_index, p.partition_size > 0, p.offset_lag, p.is_future_key)
                   for t in result.topics for p in t.partitions if t.name.startswith(TOPIC))
    return (r.error_code.name, len(r.results), result.error_code.name, parts,
            result.log_dir.startswith("/"), result.total_bytes >= result.usable_bytes > 0)


def _elect(conn: Connection, kind: int, tps: tuple[tuple[str, tuple[int, ...]], ...] | None
           ) -> Obs:
    r = conn.call(el.ElectLeadersRequest(
        election_type=i8(kind), timeout=datetime.timedelta(seconds=5),
        topic_partitions=None if tps is None else tuple(
            el.TopicPartitions(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in tps)))
    topics = sorted(x.topic for x in r.replica_election_results if x.topic.startswith(TOPIC))
    return (r.error_code.name, topics, sorted(
        ((x.topic, p.partition_id, p.error_code.name, p.error_message)
         for x in r.replica_election_results if x.topic.startswith(TOPIC) or tps
         for p in x.partition_result), key=repr))


def _quorum(conn: Connection, topic: str, index: int) -> Obs:
    r = conn.call(dq.DescribeQuorumRequest(topics=(dq.TopicData(
        topic_name=topic, partitions=(dq.PartitionData(partition_index=i32(index)),)),)))
    [t] = r.topics
    [p] = t.partitions
    if topic == "__cluster_metadata" and index == 0:  # the quorums differ: the shape
        return (r.error_code.name, p.error_code.name, len(p.current_voters), p.observers,
                p.leader_id == p.current_voters[0].replica_id, len(r.nodes))
    return (r.error_code.name, p.error_code.name, p.error_message, p.leader_id,
            p.current_voters, r.nodes)


def _list_resources(conn: Connection, *types: int) -> Obs:
    """Topics (2) and groups (32) of this script's own only: the reference Kafka
    is the session's, where other tests (the fuzzer) leave topics and group configs."""
    r = conn.call(ListConfigResourcesRequest(resource_types=tuple(i8(t) for t in types)))
    return (r.error_code.name, sorted((c.resource_type, c.resource_name) for c in r.config_resources
                                      if c.resource_type not in (2, 32)
                                      or c.resource_name.startswith(TOPIC)))


#: a broker id no broker of the script's cluster has
NO_BROKER = 77
Reassign = tuple[tuple[str, tuple[tuple[int, tuple[int, ...] | None], ...]], ...]


def _replicas(conn: Connection, topic: str) -> tuple[int, ...]:
    """The replicas of ``topic``'s partition 0 (the broker's own id on one node)."""
    found = conn.call(metadata.MetadataRequest(
        topics=(metadata.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    [t] = found.topics
    [p] = [p for p in t.partitions if p.partition_index == 0]
    return tuple(int(n) for n in p.replica_nodes)


def _reassign(conn: Connection, tps: Reassign, allow_rf_change: bool | None = None) -> Obs:
    """AlterPartitionReassignments v0 (``allow_rf_change`` None) or v1: the
    top-level answer and each partition's, in the request's order."""
    m: Any = apr0 if allow_rf_change is None else apr1
    extra = {} if allow_rf_change is None else {
        "allow_replication_factor_change": allow_rf_change}
    r = conn.call(m.AlterPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=10), **extra, topics=tuple(
            m.ReassignableTopic(name=t, partitions=tuple(
                m.ReassignablePartition(
                    partition_index=i32(i),
                    replicas=None if rs is None else tuple(i32(n) for n in rs))
                for i, rs in ps)) for t, ps in tps)))
    return (r.error_code.name, r.error_message,
            getattr(r, "allow_replication_factor_change", None),
            [(t.name, [(p.partition_index, p.error_code.name, p.error_message)
                       for p in t.partitions]) for t in r.responses])


def _list_reassignments(conn: Connection,
                        topics: tuple[tuple[str, tuple[int, ...]], ...] | None) -> Obs:
    r = conn.call(lpr.ListPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=10), topics=None if topics is None else tuple(
            lpr.ListPartitionReassignmentsTopics(
                name=t, partition_indexes=tuple(i32(i) for i in ps)) for t, ps in topics)))
    return (r.error_code.name, r.error_message, sorted(
        (t.name, sorted((p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas)
                        for p in t.partitions))
        for t in r.topics if t.name.startswith(TOPIC)))


def reassign_steps(me: int) -> dict[str, tuple[Reassign, bool | None]]:
    """AlterPartitionReassignments input a single broker ``me`` (the replica of
    every partition) refuses or has nothing to do for, by step."""
    other = f"{TOPIC}-other"
    return {
        "reassign_empty_request": ((), None),
        "reassign_v1_empty_request": ((), False),
        "reassign_no_partitions": (((TOPIC, ()), (f"{TOPIC}-none", ())), False),
        "reassign_unknown_topic": (((f"{TOPIC}-none", ((0, (me,)),)),), None),
        "reassign_unknown_partition": (((TOPIC, ((9, (me,)), (-1, (me,)))),), None),
        "reassign_unknown_broker": (((TOPIC, ((0, (NO_BROKER,)), (1, (me, NO_BROKER)))),
                                     (other, ((0, (-1,)),))), None),
        "reassign_duplicate_broker": (((TOPIC, ((0, (me, me)), (1, (NO_BROKER, me, me)))),),
                                      None),
        "reassign_no_replicas": (((TOPIC, ((0, ()),)),), None),
        "reassign_cancel_none": (((TOPIC, ((0, None), (1, None))),), None),
        "reassign_same_replicas": (((TOPIC, ((0, (me,)), (1, (me,)))),), None),
        "reassign_v1_same_replicas": (((TOPIC, ((0, (me,)),)),), False),
        # one broker: a length change needs an unregistered or a repeated broker,
        # and Kafka checks the replicas before the replication factor
        "reassign_v1_rf_change_unknown": (((TOPIC, ((0, (me, NO_BROKER)),)),), False),
        "reassign_v1_rf_change_duplicate": (((TOPIC, ((0, (me, me)),)),), False),
        "reassign_v1_cancel_none": (((TOPIC, ((0, None),)),), False),
        "reassign_v1_allowed_unknown": (((TOPIC, ((0, (me, NO_BROKER)),)),), True),
        "reassign_topic_twice": (((TOPIC, ((0, (me,)),)), (TOPIC, ((0, None), (9, (me,)))),
                                  (f"{TOPIC}-none", ((0, None),)),
                                  (f"{TOPIC}-none", ((0, None),))), None),
        "reassign_partition_twice": (((TOPIC, ((1, (me,)), (1, (NO_BROKER,)), (1, None))),),
                                     None),
    }


LIST_STEPS: dict[str, tuple[tuple[str, tuple[int, ...]], ...] | None] = {
    "reassignments_all": None,
    "reassignments_named": ((TOPIC, (0, 1)), (f"{TOPIC}-other", (0,))),
    "reassignments_unknown": ((f"{TOPIC}-none", (0,)), (TOPIC, (9, -1))),
    "reassignments_no_partitions": ((TOPIC, ()),),
    "reassignments_empty": (),
}


def _setup(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic(f"{TOPIC}-other", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(10):
        producer.send(TOPIC, value=b"v" * 50 + str(i).encode(), partition=0)
    producer.flush()
    producer.close()


def run_script(bootstrap: str) -> dict[str, Obs]:
    suffix = uuid.uuid4().hex[:8]
    _setup(bootstrap)
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 15)
    obs: dict[str, Obs] = {}
    alters = quota_alters(suffix)
    obs["alter_validate_only"] = _alter(conn, alters["alter_ok"], validate_only=True)
    obs["describe_after_validate_only"] = _describe(conn, suffix, ())
    for step, entries in alters.items():
        if step != "alter_remove":
            obs[step] = _alter(conn, entries)
    d: dict[str, tuple[tuple[tuple[str, int, str | None], ...], bool]] = {
        "describe_all": ((), False),
        "describe_none_strict": ((), True),
        "describe_user_any": ((("user", 2, None),), False),
        "describe_user_any_strict": ((("user", 2, None),), True),
        "describe_user_exact": ((("user", 0, f"alice-{suffix}"),), False),
        "describe_user_exact_strict": ((("user", 0, f"alice-{suffix}"),), True),
        "describe_user_default": ((("user", 1, None),), False),
        "describe_client_any": ((("client-id", 2, None),), False),
        "describe_ip_any": ((("ip", 2, None),), False),
        "describe_bad_type": ((("group", 2, None),), False),
        "describe_bad_match_type": ((("user", 7, None),), False),
        "describe_exact_null": ((("user", 0, None),), False),
        "describe_default_with_name": ((("user", 1, "x"),), False),
        "describe_type_twice": ((("user", 2, None), ("user", 0, "a")), False),
        "describe_ip_with_user": ((("ip", 2, None), ("user", 2, None)), False),
    }
    time.sleep(SETTLE_S)
    for step, (components, strict) in d.items():
        obs[step] = _describe(conn, suffix, components, strict)
    obs["alter_remove"] = _alter(conn, alters["alter_remove"])
    time.sleep(SETTLE_S)
    obs["describe_after_remove"] = _describe(conn, suffix, (("user", 2, None),))

    obs["log_dirs_all"] = _log_dirs(conn, None)
    obs["log_dirs_named"] = _log_dirs(conn, (
        dld.DescribableLogDirTopic(topic=TOPIC, partitions=(i32(1), i32(9))),
        dld.DescribableLogDirTopic(topic=f"{TOPIC}-none", partitions=(i32(0),))))
    obs["log_dirs_empty"] = _log_dirs(conn, ())

    obs["elect_preferred"] = _elect(conn, 0, ((TOPIC, (0, 1)),))
    obs["elect_unclean"] = _elect(conn, 1, ((TOPIC, (0,)),))
    obs["elect_unknown"] = _elect(conn, 0, ((f"{TOPIC}-none", (0,)), (TOPIC, (9,))))
    obs["elect_bad_type"] = _elect(conn, 5, ((TOPIC, (0,)),))
    obs["elect_all"] = _elect(conn, 0, None)

    obs["quorum_metadata"] = _quorum(conn, "__cluster_metadata", 0)
    obs["quorum_other_partition"] = _quorum(conn, "__cluster_metadata", 1)
    obs["quorum_other_topic"] = _quorum(conn, TOPIC, 0)

    for step, types in {"resources_brokers": (4,), "resources_loggers": (8,),
                        "resources_topics": (2,), "resources_client_metrics": (16,),
                        "resources_groups": (32,), "resources_bad_type": (3,)}.items():
        obs[step] = _list_resources(conn, *types)

    for step, (tps, allow) in reassign_steps(_replicas(conn, TOPIC)[0]).items():
        obs[step] = _reassign(conn, tps, allow)
    for step, topics in LIST_STEPS.items():
        obs[step] = _list_reassignments(conn, topics)
    r = conn.call(ub.UnregisterBrokerRequest(broker_id=i32(NO_BROKER)))
    obs["unregister_unknown_broker"] = (r.error_code.name, r.error_message)
    return obs


STEPS = ["alter_validate_only", "describe_after_validate_only",
         *[s for s in quota_alters("x") if s != "alter_remove"],
         "describe_all", "describe_none_strict", "describe_user_any", "describe_user_any_strict",
         "describe_user_exact", "describe_user_exact_strict", "describe_user_default",
         "describe_client_any", "describe_ip_any", "describe_bad_type", "describe_bad_match_type",
         "describe_exact_null", "describe_default_with_name", "describe_type_twice",
         "describe_ip_with_user", "alter_remove", "describe_after_remove",
         "log_dirs_all", "log_dirs_named", "log_dirs_empty",
         "elect_preferred", "elect_unclean", "elect_unknown", "elect_bad_type", "elect_all",
         "quorum_metadata", "quorum_other_partition", "quorum_other_topic",
         "resources_brokers", "resources_loggers", "resources_topics",
         "resources_client_metrics", "resources_groups", "resources_bad_type",
         *reassign_steps(1), *LIST_STEPS, "unregister_unknown_broker"]


def _normalized(obs: dict[str, Obs], suffix_of: Callable[[str], str]) -> dict[str, Obs]:
    return {k: suffix_of(repr(v)) for k, v in obs.items()}


@pytest.fixture(scope="module")
def kafka_answers(kafka_reference: KafkaReference) -> dict[str, Obs]:
    return run_script(kafka_reference.bootstrap)


@pytest.fixture(scope="module")
def kcompat_answers(module_broker: Broker) -> dict[str, Obs]:
    return run_script(module_broker.bootstrap)


def _strip_suffix(text: str) -> str:
    """The per-run suffix differs between the two runs."""
    return re.sub(r"-[0-9a-f]{8}\b", "-SUFFIX", text)


@pytest.mark.parametrize("step", STEPS)
def test_step_matches_kafka(kafka_answers: dict[str, Obs], kcompat_answers: dict[str, Obs],
                            step: str) -> None:
    kafka = _normalized(kafka_answers, _strip_suffix)
    ours = _normalized(kcompat_answers, _strip_suffix)
    assert ours.get(step) == kafka.get(step), step


def test_every_step_ran(kafka_answers: dict[str, Obs]) -> None:
    assert sorted(kafka_answers) == sorted(STEPS)
