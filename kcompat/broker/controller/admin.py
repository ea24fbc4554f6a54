"""Topic administration: only the controller changes metadata.

Theory of operation
-------------------
Any broker accepts a metadata change, as a Kafka 4 broker does (KIP-590):
CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs of topics and
groups, client quotas, SCRAM credentials and auto-creation are validated where they arrive and
carried out on the controller (``submit``): here if this broker is the
controller, else forwarded to it over the inter-broker transport, where the
controller validates again against its own image and config. While no
controller is known, or the one asked is replaced or goes silent, ``submit``
asks again (after ``RETRY_BACKOFF_S``) until the request's timeout, then
answers REQUEST_TIMED_OUT, as Kafka's forwarding manager does; clients never
see NOT_CONTROLLER. A creation carries the topic id its first attempt chose,
so an attempt repeated after the first one committed finds its own topic and
succeeds. A forwarded creation or deletion answers once this broker's own
image shows it (the answer carries the topic's id, partitions and configs).
A single broker is a quorum of one and its own controller. The controller validates (``BrokerState.validate_new_topic``,
``add_partitions``, ``set_topic_configs``), plans the replica
assignment and group ids (``ClusterRuntime.plan_assignments``), proposes one
record and answers only after the record is committed and applied, so a
topic a client was told exists survives the loss of any minority of voters.
Increases of one topic's partitions are decided one at a time (``adding``):
a second one, a client's retry of the first among them, is validated once
the first is committed or failed, against the image it left.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.config.broker_config import BROKER_CONFIGS
from kcompat.broker.config.topic_config import RETRY_KEYS, VIEW_KEYS
from kcompat.broker.controller import acls, client_quotas, reassignment, scram_credentials
from kcompat.broker.controller.internal_topics import INTERNAL_TOPICS
from kcompat.broker.controller.quorum import Controller
from kcompat.broker.replication import codec
from kcompat.broker.replication.group import NotLeaderError
from kcompat.broker.storage.metadata import TopicMeta
from kcompat.broker.storage.state import UNKNOWN_SERVER_ERROR_MESSAGE, TopicError
from kcompat.ext.retry import DLQ_SUFFIX, RETRY_SUFFIX

log = logging.getLogger("kcompat.cluster")

NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."

#: how long a change waits for a controller when its request names no timeout
#: (Kafka's broker ``request.timeout.ms`` bounds its forwarding the same way)
FORWARD_TIMEOUT_S = 30.0
#: the pause before asking again while no controller is known or it just changed
RETRY_BACKOFF_S = 0.05
#: how long the controller waits for a change's record to commit by default
COMMIT_TIMEOUT_MS = 10_000


def _create_record(ctl: Controller, name: str, partitions: int, replication: int,
                   configs: dict[str, Any], internal: bool = False,
                   manual: list[tuple[int, ...]] | None = None) -> dict[str, Any]:
    """The ``create_topic`` record for a validated topic: replicas planned on
    the live brokers, or the ``manual`` replica lists (one per partition)."""
    cluster = ctl.rt
    if manual:
        partitions, replication = len(manual), len(manual[0])
    if manual and any(k in configs for k in VIEW_KEYS):
        raise TopicError(ErrorCode.invalid_request, "A view has the replicas of its source: "
                         "no manual partition assignment")
    meta = ctl.state.validate_new_topic(name, partitions, replication, configs, internal=internal)
    if meta.view_of is not None:  # no partitions of its own (metadata_apply aliases them)
        return {"type": "create_topic", "name": name, "id": str(meta.topic_id),
                "partitions": meta.partitions, "configs": meta.configs, "internal": False,
                "assignments": []}
    if replication == -1:
        replication = ctl.state.config["default.replication.factor"]
    if manual:
        base = cluster.meta.raft.log.end
        assignments = [[(base << 16) | i, list(r)] for i, r in enumerate(manual)]
    else:
        check_replication(ctl, replication)
        assignments = cluster.plan_assignments(name, 0, meta.partitions, replication)
    return {"type": "create_topic", "name": name, "id": str(meta.topic_id),
            "partitions": meta.partitions, "configs": meta.configs, "internal": internal,
            "assignments": assignments}


def check_replication(ctl: Controller, replication: int) -> None:
    """New replicas go to live brokers only (``liveness``)."""
    live = len(ctl.lifecycle.live_broker_ids())
    if replication > live:
        raise TopicError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication} time(s): The target "
                         f"replication factor of {replication} cannot be reached because only "
                         f"{live} broker(s) are registered.")
    machines = ctl.lifecycle.live_machines()
    if replication > machines:  # shards of one machine (``placement``)
        raise TopicError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication} time(s): The target "
                         f"replication factor of {replication} cannot be reached because the "
                         f"{live} registered broker(s) run on only {machines} machine(s), and "
                         f"kcompat never places two replicas of a partition on one machine.")


def _controller(ctl: Controller) -> None:
    if not ctl.rt.is_controller:
        raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)


async def create_topic(ctl: Controller, name: str, partitions: int, replication: int,
                       configs: dict[str, Any], validate_only: bool = False,
                       manual: list[tuple[int, ...]] | None = None,
                       timeout_s: float = FORWARD_TIMEOUT_S,
                       quota: Callable[[int], None] | None = None) -> TopicMeta:
    """CreateTopics on any broker: validate and plan, or create, through the
    controller (``submit``) within ``timeout_s``; the topic as this broker's
    image has it once created (or as it would be), or TopicError with Kafka's
    code. ``validate_only`` is judged by the controller too, as Kafka's
    forwarding does: which brokers are live (the replication factor's bound)
    is the controller's knowledge, and this broker's image may not yet have
    applied a registration the controller already counts. ``quota`` takes the
    topic's partition count once it is valid (a controller mutation quota,
    which may refuse it), as Kafka's controller does before it creates."""
    topic_id = str(uuid.uuid4())
    intent = {"op": "create_topic", "name": name, "id": topic_id, "partitions": partitions,
              "replication": replication, "configs": configs,
              "manual": [list(r) for r in manual] if manual else None}
    if validate_only:
        await submit(ctl, {**intent, "validate_only": True}, timeout_s)
        if manual:
            partitions, replication = len(manual), len(manual[0])
        meta = ctl.state.validate_new_topic(name, partitions, replication, configs)
        if quota is not None:
            quota(meta.partitions)
        return meta
    if quota is not None:
        quota(_create_record(ctl, name, partitions, replication, configs,
                             manual=manual)["partitions"])
    deadline = trio.current_time() + timeout_s
    try:
        await submit(ctl, intent, timeout_s)
    except TopicError as e:
        if e.code != ErrorCode.topic_already_exists:
            raise
        # an attempt repeated after the first one committed (or while it commits)
        found = await _wait_topic(ctl, name, deadline)
        if found is None or str(found.topic_id) != topic_id:
            raise
        return found
    found = await _wait_topic(ctl, name, deadline, topic_id)
    if found is None or str(found.topic_id) != topic_id:
        raise TopicError(ErrorCode.request_timed_out, f"Topic '{name}' was created, but this "
                         "broker did not learn of it within the request's timeout.")
    return found


async def _wait_topic(ctl: Controller, name: str, deadline: float,
                      topic_id: str | None = None) -> TopicMeta | None:
    """The topic ``name`` (with ``topic_id`` if given: not a deleted namesake)
    once this broker's image has it and its replicas here are open (they open
    in a worker thread: ``metadata_apply``); what the image has at the deadline."""
    while trio.current_time() < deadline:
        found = ctl.state.topics.get(name)
        if found is not None and (topic_id is None or str(found.topic_id) == topic_id) \
                and name not in (topic for topic, _voters in ctl.rt.opening.values()):
            return found
        await trio.sleep(min(ctl.rt.tick_s, max(0.0, deadline - trio.current_time())))
    return ctl.state.topics.get(name)


async def delete_topic(ctl: Controller, name: str, timeout_s: float = FORWARD_TIMEOUT_S) -> None:
    """DeleteTopics on any broker, through the controller (``submit``); returns
    once this broker's image no longer has the topic (bounded by ``timeout_s``)."""
    if name not in ctl.state.topics:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
    deadline = trio.current_time() + timeout_s
    try:
        await submit(ctl, {"op": "delete_topic", "name": name}, timeout_s)
    except ForwardError as e:
        # an attempt repeated after the first one committed finds no topic
        if e.code != ErrorCode.unknown_topic_or_partition or e.attempts < 2:
            raise
    while name in ctl.state.topics and trio.current_time() < deadline:
        await trio.sleep(min(ctl.rt.tick_s, max(0.0, deadline - trio.current_time())))


async def execute(ctl: Controller, intent: dict[str, Any]) -> None:
    """On the controller: validate a change (CreateTopics, DeleteTopics,
    CreatePartitions, AlterConfigs, IncrementalAlterConfigs of a topic or group,
    AlterClientQuotas, Create/DeleteAcls, AlterUserScramCredentials, UnregisterBroker,
    auto-creation), here or forwarded from another broker, against this image, plan it and commit its record; every broker
    applies it (``metadata_apply``)."""
    cluster = ctl.rt
    _controller(ctl)
    op, name = intent.get("op"), str(intent.get("name"))
    if op == "add_partitions":
        await increase_settled(ctl, name)  # one increase of a topic in flight at a time
        total = int(intent["total"])
        ctl.state.add_partitions(name, total)
        old = ctl.state.topics[name].partitions
        manual = intent.get("assignments")
        if manual:
            base = cluster.meta.raft.log.end
            assignments = [[(base << 16) | (old + i), list(r)] for i, r in enumerate(manual)]
        else:
            found = cluster.assignments.get((name, 0))
            replication = len(found[1]) if found else 1
            check_replication(ctl, replication)
            assignments = cluster.plan_assignments(name, old, total - old, replication)
        rec: dict[str, Any] = {"type": "add_partitions", "name": name, "partitions": total,
                               "assignments": assignments}
        await _commit_increase(ctl, rec, _commit_timeout(intent))
        return
    elif op == "alter_configs":
        change = ctl.state.set_topic_configs(name, dict(intent["configs"]))
        rec = {"type": "alter_configs", "name": name, "configs": change["configs"]}
    elif op == "alter_group_configs":
        change = ctl.state.set_group_configs(name, dict(intent["configs"]))
        rec = {"type": "group_configs", "name": name, "configs": change["configs"]}
    elif op == "alter_broker_configs":
        configs = {str(k): str(v) for k, v in dict(intent["configs"]).items()}
        ctl.state.set_broker_configs(name, configs, here=False)
        rec = {"type": "broker_configs", "name": name, "configs": configs}
    elif op == "alter_client_quotas":
        rec = client_quotas.record(client_quotas.entity_of_record(intent), intent["ops"])
    elif op == "alter_scram_credentials":
        rec = _scram_record(ctl, intent)
    elif op == "acls":
        changed = acls.record(ctl.rt.image.acls, intent)
        if changed is None:
            return  # nothing to change
        rec = changed
    elif op in ("reassign", "reassign_done"):
        index = int(intent["index"])
        if op == "reassign":
            moved = reassignment.reassign_record(ctl, name, index, intent["replicas"],
                                                 bool(intent.get("allow_rf_change", True)))
        else:
            moved = reassignment.done_record(ctl, name, index, list(intent["replicas"]))
        if moved is None:
            return  # nothing to change
        rec = moved
    elif op == "unregister_broker":
        rec = _unregister_record(ctl, int(intent["id"]))
    elif op == "create_topic":
        await _create_forwarded(ctl, intent)
        return
    elif op == "delete_topic":
        if name not in ctl.state.topics:
            raise TopicError(ErrorCode.unknown_topic_or_partition,
                             f"Topic {name} does not exist")
        rec = {"type": "delete_topic", "name": name}
    elif op == "auto_create":
        created = await _auto_create_record(ctl, name)
        if created is None or name in ctl.creating:
            return
        await _commit_creation(ctl, created)
        return
    else:
        raise TopicError(ErrorCode.invalid_request, f"unknown metadata change {op!r}")
    await _commit(ctl, rec, _commit_timeout(intent))


def _scram_record(ctl: Controller, intent: dict[str, Any]) -> dict[str, Any]:
    """AlterUserScramCredentials: the changes its receiver validated, unless a
    credential to delete is gone meanwhile (the whole request fails, as
    Kafka's controller commits a request's changes together)."""
    ops = scram_credentials.decode_ops(intent["ops"])
    gone = scram_credentials.missing_deletions(ctl.rt.image.scram_credentials, ops)
    if gone:
        raise TopicError(ErrorCode.resource_not_found, scram_credentials.DELETE_MISSING)
    return scram_credentials.record(ops)


def _unregister_record(ctl: Controller, node: int) -> dict[str, Any]:
    """UnregisterBroker: the registration in force goes (fenced for good:
    this incarnation never registers again, a restart does)."""
    broker = ctl.rt.image.brokers.get(node)
    if broker is None or broker.retired:
        raise TopicError(ErrorCode.broker_id_not_registered,
                         f"Broker ID {node} is not currently registered")
    return {"type": "unregister_broker", "id": node, "incarnation": broker.incarnation}


async def _create_forwarded(ctl: Controller, intent: dict[str, Any]) -> None:
    """On the controller: a CreateTopics from any broker, with the topic id its
    receiver chose; a repeated attempt whose topic is already committed
    succeeds; ``validate_only`` checks and plans it, and commits nothing."""
    name = str(intent["name"])
    await ctl.lifecycle.wait_first_registrations(timeout_s=3.0)
    _controller(ctl)
    existing = ctl.state.topics.get(name)
    if existing is not None and str(existing.topic_id) == intent["id"]:
        return
    manual = intent.get("manual")
    rec = _create_record(ctl, name, int(intent["partitions"]), int(intent["replication"]),
                         dict(intent["configs"]),
                         manual=[tuple(r) for r in manual] if manual else None)
    if intent.get("validate_only"):
        return
    rec["id"] = str(intent["id"])
    await _commit_creation(ctl, rec, _commit_timeout(intent))


def _commit_timeout(intent: dict[str, Any]) -> float:
    """How long the controller waits for a change's record to commit: what is
    left of its requester's timeout (``submit``), at least a moment."""
    return max(0.5, int(intent.get("timeout_ms", COMMIT_TIMEOUT_MS)) / 1000)


class ForwardError(TopicError):
    """TopicError of a change carried out through ``submit``, with the number
    of attempts it took."""

    def __init__(self, code: ErrorCode, message: str, attempts: int) -> None:
        super().__init__(code, message)
        self.attempts = attempts


async def submit(ctl: Controller, intent: dict[str, Any],
                 timeout_s: float = FORWARD_TIMEOUT_S) -> int:
    """Carry out a validated change on the controller — here, or forwarded to
    it over the inter-broker transport — and return once it is committed and
    applied there (the number of attempts it took). While no controller is
    known, or the one asked lost its place or went silent, ask again until
    ``timeout_s``; then REQUEST_TIMED_OUT. Other errors: ForwardError with
    Kafka's code."""
    cluster = ctl.rt
    deadline = trio.current_time() + timeout_s
    attempts = 0
    message: str | None
    while True:
        attempts += 1
        left = max(0.0, deadline - trio.current_time())
        intent = {**intent, "timeout_ms": int(left * 1000)}
        if cluster.is_controller:
            try:
                await execute(ctl, intent)
                return attempts
            except TopicError as e:
                code, message = e.code, e.message
        else:
            code, message = await ctl.calls.forward_to_controller(intent, left)
            if code == ErrorCode.none:
                return attempts
        if code != ErrorCode.not_controller:
            raise ForwardError(code, message or code.name, attempts)
        if trio.current_time() >= deadline:
            raise ForwardError(ErrorCode.request_timed_out,
                               f"No controller took the request within {timeout_s:g} s "
                               f"(last: {message}).", attempts)
        await trio.sleep(min(RETRY_BACKOFF_S, max(0.0, deadline - trio.current_time())))


async def _opened(ctl: Controller, deadline: float) -> None:
    """Once the replicas this broker was asked to open are open (they open in
    a worker thread: ``metadata_apply``), or at the deadline: the change a
    controller answers for is in force here, partitions included."""
    while ctl.rt.opening and trio.current_time() < deadline:
        await trio.sleep(min(ctl.rt.tick_s, max(0.0, deadline - trio.current_time())))


async def _commit_creation(ctl: Controller, rec: dict[str, Any],
                           timeout_s: float = 10.0) -> None:
    """Commit a ``create_topic`` record unless one for the name is in flight
    (the image knows a topic only once its record is applied)."""
    creating = ctl.creating
    name = rec["name"]
    if name in creating:
        raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    creating.add(name)
    try:
        await _commit(ctl, rec, timeout_s)
    finally:
        creating.discard(name)


async def increase_settled(ctl: Controller, name: str) -> None:
    """Once no increase of ``name``'s partitions is in flight on this controller
    (each waits for its commit within its own timeout)."""
    while name in ctl.adding:
        await ctl.adding[name].wait()


async def _commit_increase(ctl: Controller, rec: dict[str, Any], timeout_s: float) -> None:
    """Commit an ``add_partitions`` record; another increase of the topic waits
    until this one is decided and is then validated against the image it left
    (a retry of a committed increase: "Topic already has N partition(s).", as
    Kafka's controller answers from its uncommitted state). Without the wait
    both were planned from the same count and opened the same partitions twice."""
    name = rec["name"]
    done = ctl.adding[name] = trio.Event()
    try:
        await _commit(ctl, rec, timeout_s)
    finally:
        del ctl.adding[name]
        done.set()


async def _commit(ctl: Controller, rec: dict[str, Any], timeout_s: float = 10.0) -> None:
    try:
        await ctl.rt.propose_metadata(rec, timeout_s)
    except NotLeaderError:
        raise TopicError(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE) from None
    except TimeoutError:
        raise TopicError(ErrorCode.request_timed_out,
                         "the metadata change was not committed in time") from None
    await _opened(ctl, trio.current_time() + timeout_s)


def accept_forwarded(ctl: Controller) -> None:
    """Serve the changes other brokers forward to this one while it is the
    controller (``PeerCalls.forward_to_controller``)."""
    ctl.rt.inbound[codec.ForwardRequest] = (
        lambda src, req: ctl.rt.spawn(_serve_forward, ctl, src, req))


async def _serve_forward(ctl: Controller, src: int, req: codec.ForwardRequest) -> None:
    code, message = ErrorCode.none, None
    log.info("metadata change forwarded by node %d: %s %s", src, req.intent.get("op"),
             req.intent.get("name"))
    try:
        await execute(ctl, req.intent)
    except TopicError as e:
        code, message = e.code, e.message
    except Exception:  # a bug: the forwarding broker's client gets an error, the controller lives
        log.exception("metadata change forwarded by node %d failed: %s", src, req.intent)
        code, message = ErrorCode.unknown_server_error, UNKNOWN_SERVER_ERROR_MESSAGE
    ctl.rt.send_internal(src, codec.ForwardReply(req.request_id, int(code), message))


def auto_create(ctl: Controller, name: str) -> None:
    """Metadata / FindCoordinator auto-creation, on any broker: the topic is
    created in the background — by this broker if it is the controller, else
    forwarded to it — and the client, told LEADER_NOT_AVAILABLE or
    COORDINATOR_NOT_AVAILABLE meanwhile, retries (as with Kafka). Internal
    topics are created this way too, on the first FindCoordinator for them."""
    cluster = ctl.rt
    if name in ctl.state.topics or name in ctl.auto_creating:
        return
    if cluster.spawn(_auto_create_task, ctl, name):
        ctl.auto_creating.add(name)


async def _auto_create_task(ctl: Controller, name: str) -> None:
    cluster = ctl.rt
    try:
        if cluster.is_controller:
            await execute(ctl, {"op": "auto_create", "name": name})
        else:
            code, message = await ctl.calls.forward_to_controller(
                {"op": "auto_create", "name": name})
            if code != ErrorCode.none:
                raise TopicError(code, message or code.name)
    except TopicError as e:
        log.info("auto-creating %s failed: %s", name, e.message)
    except Exception:  # a bug: the clients retry, the broker lives
        log.exception("auto-creating %s failed", name)
    finally:
        ctl.auto_creating.discard(name)


def _derived(ctl: Controller, name: str) -> tuple[int, dict[str, Any]]:
    """Partitions and configs of an auto-created topic: broker defaults, but
    ``X.retry`` and ``X.dlq`` of an existing topic X get X's partition count,
    and the retry topic ``kc.retry.of=X`` with X's retry settings
    (docs/extensions.md)."""
    for suffix in (RETRY_SUFFIX, DLQ_SUFFIX):
        base = ctl.state.topics.get(name.removesuffix(suffix)) if name.endswith(suffix) else None
        if base is not None and not base.internal:
            if suffix == DLQ_SUFFIX:
                return base.partitions, {}
            inherited = {k: base.configs[k] for k in RETRY_KEYS if k in base.configs}
            return base.partitions, {"kc.retry.of": base.name, **inherited}
    return -1, {}


async def _auto_create_record(ctl: Controller, name: str) -> dict[str, Any] | None:
    """On the controller: the record creating ``name`` with broker defaults, or
    an internal topic with its own settings (replication capped by the live
    brokers' machines, as for Kafka's ``offsets.topic.replication.factor``); None if it
    exists already."""
    await ctl.lifecycle.wait_first_registrations(timeout_s=3.0)
    if name in ctl.state.topics:
        return None
    if name not in INTERNAL_TOPICS:
        partitions, configs = _derived(ctl, name)
        return _create_record(ctl, name, partitions, -1, configs)
    prefix, configs = INTERNAL_TOPICS[name]
    live = ctl.lifecycle.live_machines() or 1
    replication = min(int(ctl.state.config[f"{prefix}.replication.factor"]), live)
    count = int(ctl.state.config[f"{prefix}.num.partitions"])
    configs = dict(configs)
    if f"{prefix}.segment.bytes" in BROKER_CONFIGS:
        configs["segment.bytes"] = str(ctl.state.config[f"{prefix}.segment.bytes"])
    return _create_record(ctl, name, count, replication, configs, internal=True)
