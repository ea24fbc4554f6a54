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
    check_replication(state, replication)
    return {"type": "create_topic", "name": name, "id": str(meta.topic_id),
            "partitions": meta.partitions, "configs": meta.configs, "internal": internal,
            "assignments": cluster.plan_assignments(name, 0, meta.partitions, replication)}


def check_replication(state: BrokerState, replication: int) -> None:
    """New replicas go to live brokers only (``liveness``)."""
    assert state.cluster is not None
    live = len(state.cluster.lifecycle.live_broker_ids())
    if replication > live:
        raise TopicError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication} time(s): The target "
                         f"replication factor of {replication} cannot be reached because only "
                         f"{live} broker(s) are registered.")


async def create_topic(state: BrokerState, name: str, partitions: int, replication: int,
                       configs: dict[str, Any]) -> None:
    """Create through the quorum; TopicError with Kafka's code on failure."""
    cluster = state.cluster
    assert cluster is not None
    if not cluster.is_controller:
        raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    await cluster.lifecycle.wait_first_registrations(timeout_s=3.0)
    rec = _create_record(state, name, partitions, replication, configs)
    await _commit_creation(state, rec)


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
    commit its record; every broker applies it (``metadata_apply``)."""
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
        check_replication(state, replication)
        rec: dict[str, Any] = {
            "type": "add_partitions", "name": name, "partitions": total,
            "assignments": cluster.plan_assignments(name, old, total - old, replication)}
    elif op == "alter_configs":
        from kcompat.broker.topic_config import validate_overrides

        configs = dict(intent["configs"])
        state.set_topic_configs(name, configs, validate_only=True)
        rec = {"type": "alter_configs", "name": name, "configs": validate_overrides(configs)}
    elif op == "auto_create":
        created = await _auto_create_record(state, name)
        if created is None or name in cluster.creating:
            return
        await _commit_creation(state, created)
        return
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
    code, message = await cluster.calls.forward_to_controller(intent)
    if code != ErrorCode.none:
        raise TopicError(code, message or code.name)


async def _commit_creation(state: BrokerState, rec: dict[str, Any]) -> None:
    """Commit a ``create_topic`` record unless one for the name is in flight
    (the image knows a topic only once its record is applied)."""
    creating = state.cluster.creating if state.cluster else set()
    name = rec["name"]
    if name in creating:
        raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    creating.add(name)
    try:
        await _commit(state, rec)
    finally:
        creating.discard(name)


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
    """Metadata / FindCoordinator auto-creation, on any broker: the topic is
    created in the background — by this broker if it is the controller, else
    forwarded to it — and the client, told LEADER_NOT_AVAILABLE or
    COORDINATOR_NOT_AVAILABLE meanwhile, retries (as with Kafka). Internal
    topics are created this way too, on the first FindCoordinator for them."""
    cluster = state.cluster
    assert cluster is not None
    if name in state.topics or name in cluster.auto_creating:
        return
    if cluster.spawn(_auto_create_task, state, name):
        cluster.auto_creating.add(name)


async def _auto_create_task(state: BrokerState, name: str) -> None:
    cluster = state.cluster
    assert cluster is not None
    try:
        if cluster.is_controller:
            await execute(state, {"op": "auto_create", "name": name})
        else:
            code, message = await cluster.calls.forward_to_controller(
                {"op": "auto_create", "name": name})
            if code != ErrorCode.none:
                raise TopicError(code, message or code.name)
    except TopicError as e:
        log.info("auto-creating %s failed: %s", name, e.message)
    finally:
        cluster.auto_creating.discard(name)


async def _auto_create_record(state: BrokerState, name: str) -> dict[str, Any] | None:
    """On the controller: the record creating ``name`` with broker defaults, or
    an internal topic with its own settings (replication capped by the live
    brokers, as for Kafka's ``offsets.topic.replication.factor``); None if it
    exists already."""
    from kcompat.broker.groups import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
    from kcompat.broker.transactions import TXN_TOPIC, TXN_TOPIC_CONFIGS

    cluster = state.cluster
    assert cluster is not None
    await cluster.lifecycle.wait_first_registrations(timeout_s=3.0)
    if name in state.topics:
        return None
    internal = {OFFSETS_TOPIC: ("offsets.topic", OFFSETS_TOPIC_CONFIGS),
                TXN_TOPIC: ("transaction.state.log", TXN_TOPIC_CONFIGS)}
    if name not in internal:
        return _create_record(state, name, -1, -1, {})
    prefix, configs = internal[name]
    live = len(cluster.lifecycle.live_broker_ids()) or 1
    replication = min(int(state.config[f"{prefix}.replication.factor"]), live)
    count = int(state.config[f"{prefix}.num.partitions"])
    return _create_record(state, name, count, replication, dict(configs), internal=True)


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
