"""Topic administration in cluster mode: only the controller changes metadata.

Theory of operation
-------------------
A non-controller answers NOT_CONTROLLER; Kafka clients then refresh metadata
(whose ``controller_id`` names the metadata-quorum leader) and retry there.
The controller validates with the same rules as single-node mode
(``BrokerState.create_topic(validate_only=True)``), plans the replica
assignment and group ids (``ClusterRuntime.plan_assignments``), proposes one
record and answers only after the record is committed and applied, so a
topic a client was told exists survives the loss of any minority of voters.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kcompat.broker.cluster.runtime import NotLeaderError
from kcompat.broker.state import TopicError

if TYPE_CHECKING:
    from kcompat.broker.context import RequestContext
    from kcompat.broker.state import BrokerState

log = logging.getLogger("kcompat.cluster")

NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


def _create_record(state: BrokerState, name: str, partitions: int, replication: int,
                   configs: dict[str, Any], internal: bool = False) -> dict[str, Any]:
    cluster = state.cluster
    assert cluster is not None
    meta = state.create_topic(name, partitions, replication, configs, validate_only=True,
                              internal=internal)
    if replication == -1:
        replication = state.config["default.replication.factor"]
    if replication > len(cluster.voters):
        raise TopicError(ErrorCode.invalid_replication_factor,
                         f"Replication factor: {replication} larger than available brokers: "
                         f"{len(cluster.voters)}.")
    return {"type": "create_topic", "name": name, "id": str(meta.topic_id),
            "partitions": meta.partitions, "configs": meta.configs, "internal": internal,
            "assignments": cluster.plan_assignments(name, 0, meta.partitions, replication)}


async def create_topic(state: BrokerState, name: str, partitions: int, replication: int,
                       configs: dict[str, Any]) -> None:
    """Create through the quorum; TopicError with Kafka's code on failure."""
    cluster = state.cluster
    assert cluster is not None
    if not cluster.is_controller:
        raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    rec = _create_record(state, name, partitions, replication, configs)
    await _commit(state, rec)


async def delete_topic(state: BrokerState, name: str) -> None:
    cluster = state.cluster
    assert cluster is not None
    if not cluster.is_controller:
        raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    if name not in state.topics:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
    await _commit(state, {"type": "delete_topic", "name": name})


async def execute(state: BrokerState, intent: dict[str, Any]) -> None:
    """On the controller: validate a staged or forwarded change (CreatePartitions,
    AlterConfigs, IncrementalAlterConfigs) against this image, plan it and
    commit its record; every broker applies it (``ClusterRuntime._apply_record``)."""
    cluster = state.cluster
    assert cluster is not None
    if not cluster.is_controller:
        raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    op, name = intent.get("op"), str(intent.get("name"))
    if op == "add_partitions":
        total = int(intent["total"])
        state.add_partitions(name, total, validate_only=True)
        old = state.topics[name].partitions
        found = cluster.assignments.get((name, 0))
        replication = len(found[1]) if found else 1
        rec: dict[str, Any] = {
            "type": "add_partitions", "name": name, "partitions": total,
            "assignments": cluster.plan_assignments(name, old, total - old, replication)}
    elif op == "alter_configs":
        from kcompat.broker.topic_config import validate_overrides

        configs = dict(intent["configs"])
        state.set_topic_configs(name, configs, validate_only=True)
        rec = {"type": "alter_configs", "name": name, "configs": validate_overrides(configs)}
    else:
        raise TopicError(ErrorCode.invalid_request, f"unknown metadata change {op!r}")
    await _commit(state, rec)


async def commit_staged(state: BrokerState) -> None:
    """After a ``BrokerState`` change method staged its intent (cluster mode, not
    validate-only): carry it out on the controller — here, or forwarded to it
    over the inter-broker transport — and return once it is committed and
    applied there; TopicError with Kafka's code otherwise."""
    cluster = state.cluster
    if cluster is None:
        return
    intent = cluster.take_staged()
    if intent is None:
        return
    if cluster.is_controller:
        await execute(state, intent)
        return
    code, message = await cluster.forward_to_controller(intent)
    if code != ErrorCode.none:
        raise TopicError(code, message or code.name)


async def _commit(state: BrokerState, rec: dict[str, Any]) -> None:
    assert state.cluster is not None
    try:
        await state.cluster.propose_metadata(rec)
    except NotLeaderError:
        raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE) from None
    except TimeoutError:
        raise TopicError(ErrorCode.request_timed_out,
                         "the metadata change was not committed in time") from None


def auto_create(state: BrokerState, name: str) -> None:
    """Metadata auto-creation: the controller proposes (fire and forget)."""
    from kcompat.broker.groups import OFFSETS_TOPIC
    from kcompat.broker.transactions import TXN_TOPIC

    cluster = state.cluster
    assert cluster is not None
    if not cluster.is_controller or name in state.topics:
        return
    if name in (OFFSETS_TOPIC, TXN_TOPIC):  # internal: created with their own settings
        cluster.ensure_internal_topics()
        return
    try:
        rec = _create_record(state, name, -1, -1, {})
        cluster.propose_metadata_nowait(rec)
    except (TopicError, NotLeaderError) as e:
        log.info("auto-creating %s failed: %s", name, e)


async def create_topics(ctx: RequestContext, request: Any) -> Any:
    """CreateTopics in cluster mode (the handler delegates here)."""
    from kcompat.broker.handlers import create_topics as ct
    from kcompat.broker.handlers._common import NO_THROTTLE, OK, duplicates, null_config_check

    state = ctx.state
    dups = duplicates(t.name for t in request.topics)
    results, reported = [], set()
    for topic in request.topics:
        if topic.name in dups:
            if topic.name not in reported:
                reported.add(topic.name)
                results.append(ct._error(ctx, topic.name, ErrorCode.invalid_request,
                                         "Duplicate topic name."))
            continue
        try:
            if topic.assignments:
                raise TopicError(ErrorCode.invalid_replica_assignment,
                                 "manual replica assignments are not supported in cluster mode")
            configs = null_config_check(topic.configs)
            if request.validate_only:
                if not state.cluster or not state.cluster.is_controller:
                    raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
                _create_record(state, topic.name, topic.num_partitions,
                               topic.replication_factor, configs)
                meta = state.create_topic(topic.name, topic.num_partitions,
                                          topic.replication_factor, configs, True)
            else:
                await create_topic(state, topic.name, topic.num_partitions,
                                   topic.replication_factor, configs)
                meta = state.topics[topic.name]
        except TopicError as e:
            results.append(ct._error(ctx, topic.name, e.code, e.message))
            continue
        replication = topic.replication_factor
        if replication == -1:
            replication = state.config["default.replication.factor"]
        results.append(ctx.build(
            "CreatableTopicResult", name=topic.name, topic_id=meta.topic_id, error_code=OK,
            error_message=None, topic_config_error_code=0, num_partitions=meta.partitions,
            replication_factor=replication, configs=ct._configs(ctx, meta)))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(results))
