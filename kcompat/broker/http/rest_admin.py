"""REST v3: the cluster, its brokers, topics, their configs and partitions.

Each endpoint is the Kafka request an admin client would send, handled as for
one (``calls``): Metadata for topics and partitions (the caller sees the
topics it may DESCRIBE), CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs and IncrementalAlterConfigs, DescribeCluster for brokers.
"""

from __future__ import annotations

import datetime
from typing import Any

import trio
from starlette.responses import JSONResponse, Response

from kcompat.broker.http.rest import Ctx, RestError, check, need, no_content
from kcompat.wire import codec
from kcompat.wire import versions as v

TIMEOUT = datetime.timedelta(seconds=30)
TOPIC, BROKER = 2, 4  # config resource types
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


# -- cluster and brokers -----------------------------------------------------------------


def _cluster(c: Ctx, controller: int) -> dict[str, Any]:
    fields: dict[str, Any] = {"cluster_id": c.cluster_id}
    if controller >= 0:
        fields["controller"] = c.related("brokers", controller)
    for name, path in (("acls", "acls"), ("brokers", "brokers"),
                       ("broker_configs", "broker-configs"),
                       ("consumer_groups", "consumer-groups"), ("topics", "topics"),
                       ("partition_reassignments", "topics/-/partitions/-/reassignment")):
        fields[name] = c.related(path)
    return c.resource("KafkaCluster", c.url(), c.crn(), **fields)


async def _describe_cluster(c: Ctx) -> Any:
    answer = await c.call(v.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
    check(answer.error_code, answer.error_message)
    return answer


async def list_clusters(c: Ctx) -> Response:
    answer = await _describe_cluster(c)
    return c.listing("KafkaClusterList", [_cluster(c, answer.controller_id)])


async def get_cluster(c: Ctx) -> Response:
    return JSONResponse(_cluster(c, (await _describe_cluster(c)).controller_id))


def _broker(c: Ctx, b: Any) -> dict[str, Any]:
    return c.resource("KafkaBroker", c.url("brokers", b.broker_id),
                      c.crn(("broker", b.broker_id)), cluster_id=c.cluster_id,
                      broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack,
                      configs=c.related("brokers", b.broker_id, "configs"),
                      partition_replicas=c.related("brokers", b.broker_id,
                                                   "partition-replicas"))


async def list_brokers(c: Ctx) -> Response:
    answer = await _describe_cluster(c)
    return c.listing("KafkaBrokerList", [_broker(c, b) for b in
                                         sorted(answer.brokers, key=lambda b: b.broker_id)])


async def get_broker(c: Ctx) -> Response:
    wanted = c.int_param("broker_id")
    for b in (await _describe_cluster(c)).brokers:
        if b.broker_id == wanted:
            return JSONResponse(_broker(c, b))
    raise RestError(404, f"Broker {wanted} cannot be found.")


# -- topics ---------------------------------------------------------------------------------


async def metadata(c: Ctx, topics: list[str] | None) -> Any:
    mod = codec.request_module(v.METADATA, 12)
    wanted = None if topics is None else tuple(
        mod.MetadataRequestTopic(topic_id=None, name=t) for t in topics)
    return await c.call(v.METADATA, 12, topics=wanted, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)


async def one_topic(c: Ctx, name: str) -> Any:
    """The Metadata of topic ``name``; 404 unless it exists and the caller may see it."""
    topic = (await metadata(c, [name])).topics[0]
    check(topic.error_code, None, name)
    return topic


def _topic(c: Ctx, t: Any) -> dict[str, Any]:
    """A topic's resource, written out (a listing makes one per topic)."""
    name = t.name
    url = c.url("topics", name)
    return {"kind": "KafkaTopic",
            "metadata": {"self": url, "resource_name": c.crn(("topic", name))},
            "cluster_id": c.cluster_id, "topic_name": name, "is_internal": t.is_internal,
            "replication_factor": max((len(p.replica_nodes) for p in t.partitions), default=0),
            "partitions_count": len(t.partitions),
            "partitions": {"related": url + "/partitions"},
            "configs": {"related": url + "/configs"},
            "partition_reassignments": {"related": url + "/partitions/-/reassignment"},
            "authorized_operations": []}


async def list_topics(c: Ctx) -> Response:
    answer = await metadata(c, None)
    topics = sorted((t for t in answer.topics if t.error_code == 0), key=lambda t: t.name)
    return c.listing("KafkaTopicList", [_topic(c, t) for t in topics])


async def get_topic(c: Ctx) -> Response:
    return JSONResponse(_topic(c, await one_topic(c, c.param("topic_name"))))


async def create_topic(c: Ctx) -> Response:
    doc = await c.body()
    name = need(doc, "topic_name", str)
    count = need(doc, "partitions_count", int, required=False, default=-1)
    rf = need(doc, "replication_factor", int, required=False, default=-1)
    validate_only = need(doc, "validate_only", bool, required=False, default=False)
    mod = codec.request_module(v.CREATE_TOPICS, 7)
    configs = []
    for item in need(doc, "configs", list, required=False, default=[]):
        configs.append(mod.CreatableTopicConfig(name=need(item, "name", str),
                                                value=need(item, "value", str, required=False)))
    assignments = []
    for item in need(doc, "replicas_assignments", list, required=False, default=[]):
        brokers = need(item, "broker_ids", list)
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in brokers):
            raise RestError(400, "broker_ids must be a list of integers")
        assignments.append(mod.CreatableReplicaAssignment(
            partition_index=need(item, "partition_id", int), broker_ids=tuple(brokers)))
    if assignments:
        count = rf = -1
    topic = mod.CreatableTopic(name=name, num_partitions=count, replication_factor=rf,
                               assignments=tuple(assignments), configs=tuple(configs))
    answer = await c.call(v.CREATE_TOPICS, 7, topics=(topic,), timeout=TIMEOUT,
                          validate_only=validate_only)
    result = answer.topics[0]
    check(result.error_code, result.error_message, name)
    if validate_only:
        body = c.resource("KafkaTopic", c.url("topics", name), c.crn(("topic", name)),
                          cluster_id=c.cluster_id, topic_name=name, is_internal=False,
                          replication_factor=result.replication_factor,
                          partitions_count=result.num_partitions,
                          partitions=c.related("topics", name, "partitions"),
                          configs=c.related("topics", name, "configs"),
                          partition_reassignments=c.related("topics", name, "partitions/-",
                                                            "reassignment"),
                          authorized_operations=[])
        return JSONResponse(body, status_code=200)
    created = await _wait_topic(c, name, max(result.num_partitions, 0))
    return JSONResponse(_topic(c, created), status_code=201)


async def _wait_topic(c: Ctx, name: str, partitions: int = 0) -> Any:
    """A new or grown topic's Metadata once this broker knows its leaders (a
    few ticks after CreateTopics or CreatePartitions answers in a cluster;
    until then Metadata says LEADER_NOT_AVAILABLE, or does not list a new
    partition yet), with at least ``partitions`` partitions, at most 5 s."""
    topic = None
    for _ in range(100):
        topic = (await metadata(c, [name])).topics[0]
        if topic.error_code == 0 and len(topic.partitions) >= partitions and all(
                p.leader_id >= 0 for p in topic.partitions):
            return topic
        await trio.sleep(0.05)
    check(topic.error_code if topic is not None else 5, None, name)
    return topic


async def update_topic(c: Ctx) -> Response:
    name = c.param("topic_name")
    count = need(await c.body(), "partitions_count", int)
    mod = codec.request_module(v.CREATE_PARTITIONS, 3)
    answer = await c.call(v.CREATE_PARTITIONS, 3, topics=(
        mod.CreatePartitionsTopic(name=name, count=count, assignments=None),),
        timeout=TIMEOUT, validate_only=False)
    result = answer.results[0]
    check(result.error_code, result.error_message, name)
    return JSONResponse(_topic(c, await _wait_topic(c, name, count)))


async def delete_topic(c: Ctx) -> Response:
    name = c.param("topic_name")
    mod = codec.request_module(v.DELETE_TOPICS, 6)
    answer = await c.call(v.DELETE_TOPICS, 6, topics=(mod.DeleteTopicState(name=name,
                                                                          topic_id=None),),
                          timeout=TIMEOUT)
    result = answer.responses[0]
    check(result.error_code, result.error_message, name)
    return no_content()


# -- configs -------------------------------------------------------------------------------


async def _configs(c: Ctx, kind: int, resource: str, names: tuple[str, ...] | None,
                   node: int = -1) -> Any:
    """DescribeConfigs of one resource, by broker ``node`` (a broker's own
    configs: Kafka brokers describe only themselves)."""
    mod = codec.request_module(v.DESCRIBE_CONFIGS, 4)
    answer = await c.call(v.DESCRIBE_CONFIGS, 4, node, resources=(mod.DescribeConfigsResource(
        resource_type=kind, resource_name=resource, configuration_keys=names),),
        include_synonyms=True, include_documentation=False)
    result = answer.results[0]
    check(result.error_code, result.error_message, resource)
    return result.configs


def _config(c: Ctx, kind: str, owner: dict[str, Any], path: tuple[object, ...],
            crn: tuple[tuple[str, object], ...], entry: Any) -> dict[str, Any]:
    return c.resource(kind, c.url(*path, "configs", entry.name),
                      c.crn(*crn, ("config", entry.name)), cluster_id=c.cluster_id, **owner,
                      name=entry.name, value=None if entry.is_sensitive else entry.value,
                      is_default=entry.config_source == 5, is_read_only=entry.read_only,
                      is_sensitive=entry.is_sensitive,
                      source=SOURCES.get(entry.config_source, "UNKNOWN"),
                      synonyms=[{"name": s.name,
                                 "value": None if entry.is_sensitive else s.value,
                                 "source": SOURCES.get(s.source, "UNKNOWN")}
                                for s in entry.synonyms])


def _topic_config(c: Ctx, topic: str, entry: Any) -> dict[str, Any]:
    return _config(c, "KafkaTopicConfig", {"topic_name": topic}, ("topics", topic),
                   (("topic", topic),), entry)


def _broker_config(c: Ctx, broker: int, entry: Any) -> dict[str, Any]:
    return _config(c, "KafkaBrokerConfig", {"broker_id": broker}, ("brokers", broker),
                   (("broker", broker),), entry)


async def list_topic_configs(c: Ctx) -> Response:
    topic = c.param("topic_name")
    entries = await _configs(c, TOPIC, topic, None)
    return c.listing("KafkaTopicConfigList",
                     [_topic_config(c, topic, e) for e in sorted(entries, key=lambda e: e.name)])


async def get_topic_config(c: Ctx) -> Response:
    topic, name = c.param("topic_name"), c.param("name")
    entries = [e for e in await _configs(c, TOPIC, topic, (name,)) if e.name == name]
    if not entries:
        raise RestError(404, f"Config {name} cannot be found for topic {topic}.", 404)
    return JSONResponse(_topic_config(c, topic, entries[0]))


async def _alter(c: Ctx, kind: int, resource: str, changes: list[tuple[str, int, str | None]],
                 validate_only: bool) -> Response:
    mod = codec.request_module(v.INCREMENTAL_ALTER_CONFIGS, 1)
    configs = tuple(mod.AlterableConfig(name=n, config_operation=op, value=value)
                    for n, op, value in changes)
    answer = await c.call(v.INCREMENTAL_ALTER_CONFIGS, 1, resources=(mod.AlterConfigsResource(
        resource_type=kind, resource_name=resource, configs=configs),),
        validate_only=validate_only)
    result = answer.responses[0]
    check(result.error_code, result.error_message, resource)
    return no_content()


async def put_topic_config(c: Ctx) -> Response:
    value = need(await c.body(), "value", str, required=False)
    return await _alter(c, TOPIC, c.param("topic_name"),
                        [(c.param("name"), SET if value is not None else DELETE, value)], False)


async def delete_topic_config(c: Ctx) -> Response:
    return await _alter(c, TOPIC, c.param("topic_name"), [(c.param("name"), DELETE, None)],
                        False)


async def alter_topic_configs(c: Ctx) -> Response:
    doc = await c.body()
    changes = []
    for item in need(doc, "data", list):
        op = (need(item, "operation", str, required=False) or "SET").upper()
        if op not in ("SET", "DELETE"):
            raise RestError(400, f"operation must be SET or DELETE, not {op!r}")
        changes.append((need(item, "name", str), SET if op == "SET" else DELETE,
                        need(item, "value", str, required=op == "SET")))
    return await _alter(c, TOPIC, c.param("topic_name"), changes,
                        need(doc, "validate_only", bool, required=False, default=False))


async def list_broker_configs(c: Ctx) -> Response:
    broker = c.int_param("broker_id")
    listed = await c.call(v.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
    if broker not in {b.broker_id for b in listed.brokers}:
        raise RestError(404, f"Broker {broker} cannot be found.")
    entries = await _configs(c, BROKER, str(broker), None, node=broker)
    return c.listing("KafkaBrokerConfigList", [_broker_config(c, broker, e) for e in
                                               sorted(entries, key=lambda e: e.name)])


# -- partitions ----------------------------------------------------------------------------


def _partition(c: Ctx, topic: str, p: Any) -> dict[str, Any]:
    index = p.partition_index
    base = ("topics", topic, "partitions", index)
    fields: dict[str, Any] = {"cluster_id": c.cluster_id, "topic_name": topic,
                              "partition_id": index}
    if p.leader_id >= 0:
        fields["leader"] = c.related(*base, "replicas", p.leader_id)
    fields["replicas"] = c.related(*base, "replicas")
    fields["reassignment"] = c.related(*base, "reassignment")
    return c.resource("KafkaPartition", c.url(*base),
                      c.crn(("topic", topic), ("partition", index)), **fields)


async def list_partitions(c: Ctx) -> Response:
    topic = await one_topic(c, c.param("topic_name"))
    parts = sorted(topic.partitions, key=lambda p: p.partition_index)
    return c.listing("KafkaPartitionList", [_partition(c, topic.name, p) for p in parts])


async def partition_of(c: Ctx, topic_name: str, index: int) -> Any:
    topic = await one_topic(c, topic_name)
    for p in topic.partitions:
        if p.partition_index == index:
            return p
    raise RestError(404, f"This server does not host this topic-partition: {topic_name}-{index}",
                    40403)


async def get_partition(c: Ctx) -> Response:
    topic = c.param("topic_name")
    p = await partition_of(c, topic, c.int_param("partition_id"))
    return JSONResponse(_partition(c, topic, p))


def routes() -> list[tuple[str, Any, str]]:
    """(path under ``/v3``, handler taking a ``Ctx``, method)."""
    cl = "/clusters/{cluster_id}"
    tp = cl + "/topics/{topic_name}"
    return [
        ("/clusters", list_clusters, "GET"),
        (cl, get_cluster, "GET"),
        (cl + "/brokers", list_brokers, "GET"),
        (cl + "/brokers/{broker_id}", get_broker, "GET"),
        (cl + "/brokers/{broker_id}/configs", list_broker_configs, "GET"),
        (cl + "/topics", list_topics, "GET"),
        (cl + "/topics", create_topic, "POST"),
        (tp, get_topic, "GET"),
        (tp, update_topic, "PATCH"),
        (tp, delete_topic, "DELETE"),
        (tp + "/configs", list_topic_configs, "GET"),
        (tp + "/configs:alter", alter_topic_configs, "POST"),
        (tp + "/configs/{name}", get_topic_config, "GET"),
        (tp + "/configs/{name}", put_topic_config, "PUT"),
        (tp + "/configs/{name}", delete_topic_config, "DELETE"),
        (tp + "/partitions", list_partitions, "GET"),
        (tp + "/partitions/{partition_id}", get_partition, "GET"),
    ]
