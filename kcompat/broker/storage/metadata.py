"""Cluster metadata (topics, configs, brokers) kept as a Kafka log.

Theory of operation
-------------------
docs/architecture.md, principle 1: every log is a partition log of RecordBatch v2. The metadata
lives in ``__cluster_metadata-0`` under the data directory: each change is one
record whose value is a small JSON document (``create_topic``,
``delete_topic``, ``add_partitions``, ``alter_configs``, ``group_configs`` (a
group's whole override set; empty removes the group), ``broker_configs``
(a level of dynamic broker configs, "" or a node id, as a whole set of raw
values; ``dynamic_config``), ``register_broker``,
``fence_broker``, ``unfence_broker``, ``unregister_broker`` (UnregisterBroker: the
registration stays, fenced and ``retired``, so the same process cannot
register again — a restart does), ``client_quotas`` (ops setting and
removing an entity's quota values, ``controller.client_quotas``), ``acls`` (the ACL bindings one CreateAcls
or DeleteAcls adds and removes, ``kcompat.security.acl``; the authorizer reads
``MetadataImage.acls``), ``scram_credentials`` (SCRAM credentials upserted
and deleted, ``controller.scram_credentials``), ``reassign`` (a
partition's replicas start moving: its target and original replicas) and
``reassign_done`` (they moved, ``controller.reassignment``); ``cluster`` and ``producer_ids`` only in
logs written by single-node brokers before they ran as a quorum of one). The
log is the metadata quorum's Raft log; ``MetadataImage.apply`` is called for
committed records only, in log order.

A filtered view (``kc.view.of``, docs/extensions.md) is a topic with no partitions
of its own: it has its source's partition count, follows its additions, and
is deleted with its source (the same ``delete_topic`` record).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.log.store import OS_STORE, FileStore
from kcompat.security.acl import AclBinding, AclStore
from kcompat.security.scram import ScramCredential

METADATA_DIR = "__cluster_metadata-0"
GONE_IDS = 10_000  # ids of deleted topics remembered (``MetadataImage.gone_topic``)


@dataclass
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, Any] = field(default_factory=dict)
    internal: bool = False

    @property
    def view_of(self) -> str | None:
        """The source topic when this topic is a filtered view, else None."""
        return self.configs.get("kc.view.of") or None


@dataclass
class BrokerInfo:
    """A broker registration: where clients reach it, which
    process (incarnation) registered, and whether the controller fenced it."""

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation: str
    fenced: bool = True
    controller_only: bool = False  # a controller (process.roles=controller): no partitions
    # unregistered (UnregisterBroker, ``kcompat cluster decommission``): fenced, left out
    # of every listing and placement; this incarnation never registers again
    retired: bool = False
    # every listener's advertised (name, host, port); empty: host and port only
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # the machine it runs on (``kcompat.machine.id``): the shards of one node
    # share it; empty: a machine of its own (``placement``)
    machine: str = ""

    @property
    def machine_id(self) -> str:
        return self.machine or str(self.node_id)

    def address(self, listener: str = "") -> tuple[str, int] | None:
        """Where a client on ``listener`` reaches this broker (None: it has no
        such listener); the inter-broker host and port without a name."""
        if not listener or not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None

    @property
    def hidden(self) -> bool:
        """Never listed to clients nor given replicas: a controller-only node
        or an unregistered broker."""
        return self.controller_only or self.retired


@dataclass(frozen=True)
class Reassignment:
    """A partition's replicas on the move (KIP-455): to ``target`` from
    ``original``, the replicas it had when the first of its reassignments
    started (a cancellation moves back to them). ``leaving``: every other
    replica that may still be a voter of its Raft group — the original ones
    outside the target, and those an earlier target of a reassignment this
    one replaced (or cancelled) added — which keep their copy until done."""

    target: tuple[int, ...]
    original: tuple[int, ...]
    leaving: tuple[int, ...]

    @property
    def replicas(self) -> tuple[int, ...]:
        """Kafka's replica list while it moves: the target, then the replicas
        being removed."""
        return self.target + self.leaving

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(n for n in self.target if n not in self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        return self.leaving


@dataclass
class MetadataImage:
    cluster_id: str = ""
    topics: dict[str, TopicMeta] = field(default_factory=dict)
    producer_id_limit: int = 0  # ids below this were handed out (older single-node logs)
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    # group id -> its group config overrides (group_config.py); a group need not exist
    group_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # dynamic broker configs: "" (cluster default) or a node id -> key -> raw value
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # client quota entity ((type, name or None), ...) -> its values (controller.client_quotas)
    client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = field(
        default_factory=dict)
    # the ACLs in force (CreateAcls / DeleteAcls), indexed for the authorizer
    acls: AclStore = field(default_factory=AclStore)
    # SCRAM credentials: mechanism -> user -> credential (controller.scram_credentials)
    scram_credentials: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    # partition reassignments in progress: (topic, index) -> (target, original replicas)
    reassignments: dict[tuple[str, int], Reassignment] = field(default_factory=dict)
    # moves on whenever a topic is created or deleted or gains partitions: what
    # is derived from the topics and their counts is rebuilt only then
    topics_version: int = 0
    # source topic -> the names of its filtered views, kept by ``apply`` (a
    # deletion or a partition move looks up its views without a walk of all topics)
    _views: dict[str, dict[str, None]] = field(default_factory=dict, repr=False,
                                               compare=False)
    # the ids of the last GONE_IDS topics deleted or re-created, and their names:
    # a consumer's heartbeat may still name partitions it holds by such an id
    # (``gone_topic``); not in snapshots (a restart forgets them)
    _gone: OrderedDict[uuid.UUID, str] = field(default_factory=OrderedDict, repr=False,
                                               compare=False)

    def gone_topic(self, topic_id: uuid.UUID) -> str | None:
        """The name of a topic deleted (or re-created) since it had this id."""
        return self._gone.get(topic_id)

    def _forget_topic(self, meta: TopicMeta) -> None:
        self._gone[meta.topic_id] = meta.name
        while len(self._gone) > GONE_IDS:
            self._gone.popitem(last=False)

    def views_of(self, source: str) -> list[TopicMeta]:
        """The filtered views of ``source``."""
        return [self.topics[name] for name in self._views.get(source, ())]

    def _index_view(self, meta: TopicMeta, add: bool) -> None:
        source = meta.view_of
        if source is None:
            return
        if add:
            self._views.setdefault(source, {})[meta.name] = None
            return
        names = self._views.get(source)
        if names is not None:
            names.pop(meta.name, None)
            if not names:
                del self._views[source]

    def live_brokers(self) -> list[BrokerInfo]:
        """Registered, unfenced brokers (controller-only nodes left out), by node id."""
        return [b for _, b in sorted(self.brokers.items())
                if not b.fenced and not b.controller_only]

    def broker_ids(self) -> set[int]:
        """Registered brokers, fenced or not: where replicas may be placed."""
        return {n for n, b in self.brokers.items() if not b.hidden}

    def apply(self, rec: dict[str, Any]) -> None:
        kind = rec["type"]
        if kind in ("create_topic", "delete_topic", "add_partitions"):
            self.topics_version += 1
        if kind == "cluster":
            self.cluster_id = rec["cluster_id"]
        elif kind == "create_topic":
            replaced = self.topics.get(rec["name"])
            if replaced is not None:
                self._index_view(replaced, add=False)
                self._forget_topic(replaced)
            meta = self.topics[rec["name"]] = TopicMeta(
                rec["name"], uuid.UUID(rec["id"]), rec["partitions"], dict(rec["configs"]),
                bool(rec.get("internal", False)),
            )
            self._index_view(meta, add=True)
        elif kind == "delete_topic":
            for view in self.views_of(rec["name"]):
                self._index_view(self.topics.pop(view.name), add=False)
                self._forget_topic(view)
            gone = self.topics.pop(rec["name"], None)
            if gone is not None:
                self._index_view(gone, add=False)
                self._forget_topic(gone)
            for key in [k for k in self.reassignments if k[0] == rec["name"]]:
                del self.reassignments[key]
        elif kind == "reassign":
            self.reassignments[(rec["name"], rec["index"])] = Reassignment(
                tuple(rec["target"]), tuple(rec["original"]), tuple(rec["leaving"]))
        elif kind == "reassign_done":
            self.reassignments.pop((rec["name"], rec["index"]), None)
        elif kind == "add_partitions":
            if self.topics[rec["name"]].view_of is None:  # a view follows its source
                self.topics[rec["name"]].partitions = rec["partitions"]
                for view in self.views_of(rec["name"]):
                    view.partitions = rec["partitions"]
        elif kind == "alter_configs":
            meta = self.topics[rec["name"]]
            self._index_view(meta, add=False)
            meta.configs = dict(rec["configs"])
            self._index_view(meta, add=True)
        elif kind == "group_configs":
            if rec["configs"]:
                self.group_configs[rec["name"]] = dict(rec["configs"])
            else:
                self.group_configs.pop(rec["name"], None)
        elif kind == "broker_configs":
            if rec["configs"]:
                self.broker_configs[rec["name"]] = dict(rec["configs"])
            else:
                self.broker_configs.pop(rec["name"], None)
        elif kind == "register_broker":
            self.brokers[rec["id"]] = BrokerInfo(rec["id"], rec["host"], rec["port"],
                                                 rec.get("rack"), rec["incarnation"],
                                                 bool(rec["fenced"]),
                                                 bool(rec.get("controller_only", False)),
                                                 bool(rec.get("retired", False)),
                                                 tuple((str(n), str(h), int(p)) for n, h, p
                                                       in rec.get("endpoints", ())),
                                                 str(rec.get("machine", "")))
        elif kind in ("fence_broker", "unfence_broker"):
            broker = self.brokers.get(rec["id"])
            if broker is not None and broker.incarnation == rec["incarnation"]:
                broker.fenced = kind == "fence_broker"
        elif kind == "unregister_broker":
            broker = self.brokers.get(rec["id"])
            if broker is not None and broker.incarnation == rec["incarnation"]:
                broker.fenced = broker.retired = True
        elif kind == "producer_ids":
            self.producer_id_limit = max(self.producer_id_limit, rec["limit"])
        elif kind == "client_quotas":
            entity = tuple((str(t), n) for t, n in rec["entity"])
            values = dict(self.client_quotas.get(entity, {}))
            for key, value, remove in rec["ops"]:
                if remove:
                    values.pop(key, None)
                else:
                    values[key] = float(value)
            if values:
                self.client_quotas[entity] = values
            else:
                self.client_quotas.pop(entity, None)
        elif kind == "scram_credentials":
            for user, mechanism, credential in rec["ops"]:  # null deletes
                users = self.scram_credentials.setdefault(mechanism, {})
                if credential is None:
                    users.pop(user, None)
                else:
                    users[user] = ScramCredential.from_json(credential)
                if not users:
                    del self.scram_credentials[mechanism]
        elif kind == "acls":
            for fields in rec.get("delete", ()):
                self.acls.remove(AclBinding.from_list(fields))
            for fields in rec.get("create", ()):
                self.acls.add(AclBinding.from_list(fields))


class MetadataStore:
    """The metadata log and the image built from it. The controller quorum
    (even a quorum of one) commits records to the log and every broker
    applies them to the image in log order (``controller.metadata_apply``)."""

    def __init__(self, data_dir: Path, now_ms: int, store: FileStore = OS_STORE) -> None:
        self.log = PartitionLog.open(data_dir / METADATA_DIR, LogConfig(), now_ms, store)
        self.image = MetadataImage()

    def close(self) -> None:
        self.log.close(clean=True)
