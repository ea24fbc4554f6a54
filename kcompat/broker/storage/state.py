"""The broker's local state: the metadata image, the partitions and their logs.

Theory of operation
-------------------
``BrokerState`` is the bottom of the broker's layers: the config, the data
directory, the metadata store (log and image) and the partitions this broker
hosts, plus the validation of topic changes. It changes nothing by itself:
the controller applies committed metadata records to the image and opens or
closes partitions (``controller.metadata_apply``), so a restart rebuilds
exactly what was committed. Partition
directories are ``<topic>-<partition>`` under the data directory; a deleted
topic's directories are renamed to ``*.<id>-delete`` at once (so a topic
re-created with the same name starts empty) and removed from disk afterwards.
Errors a client can cause come back as ``TopicError`` carrying the Kafka error
code; they never escape as broker exceptions.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config import dynamic_config
from kcompat.broker.config.broker_config import BrokerConfig
from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.config.group_config import GroupConfigError
from kcompat.broker.config.group_config import validate_overrides as validate_group_overrides
from kcompat.broker.config.topic_config import VIEW_FILTER, VIEW_OF, validate_overrides
from kcompat.broker.storage import dedup_windows, hole_reads, views
from kcompat.broker.storage.flusher import Flusher
from kcompat.broker.storage.metadata import MetadataStore, TopicMeta
from kcompat.broker.storage.partition import Partition
from kcompat.log.store import OS_STORE, FileStore

log = logging.getLogger("kcompat.broker")

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


#: Kafka's message for UNKNOWN_SERVER_ERROR (it does not expose the exception's)
UNKNOWN_SERVER_ERROR_MESSAGE = ("The server experienced an unexpected error when processing "
                                "the request.")


class TopicError(Exception):
    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_topic_name(name: str) -> None:
    """INVALID_TOPIC_EXCEPTION with Kafka's messages (``Topic.validate``)."""
    problem = None
    if not name:
        problem = "the empty string is not allowed"
    elif name in (".", ".."):
        problem = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME:
        problem = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME}"
    elif not _LEGAL_TOPIC.match(name):
        problem = (f"'{name}' contains one or more characters other than ASCII alphanumerics, "
                   "'.', '_' and '-'")
    if problem is not None:
        raise TopicError(ErrorCode.invalid_topic_exception, f"Topic name is invalid: {problem}")


def check_replicas(broker_ids: Sequence[int], registered: Iterable[int],
                   replication: int | None = None) -> None:
    """A manual replica list: registered brokers, each once, as many as the
    other partitions of the request have (Kafka's messages)."""
    if not broker_ids:
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         "The manual partition assignment includes an empty replica list.")
    known = set(registered)
    previous = None
    for broker in sorted(broker_ids):
        if broker not in known:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered.",
            )
        if broker == previous:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {broker} more than once.",
            )
        previous = broker
    if replication is not None and len(broker_ids) != replication:
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(broker_ids)} "
            f"replica(s), but this is not consistent with previous partitions, which have "
            f"{replication} replica(s).",
        )


class BrokerState:
    def __init__(self, config: BrokerConfig, store: FileStore = OS_STORE) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        # process.roles=controller: serves only the controller's APIs (wire.versions)
        self.controller_only = "broker" not in config["process.roles"]
        self.advertised_port: int = config["port"]
        # every listener's advertised (name, host, port) once bound (``server``)
        self.endpoints: tuple[tuple[str, str, int], ...] = ()
        self.data_dir = config.data_dir
        self.store = store  # every file of the data directory goes through it
        store.make_dirs(self.data_dir)
        self._remove_deleted_dirs()
        # (the simulator's store also says how slow its disk is now)
        self.flusher = Flusher(threaded=store.blocking,
                               delay_s=getattr(store, "sync_delay_s", None))
        # the controller applies committed metadata records (controller.metadata_apply)
        self.metadata = MetadataStore(self.data_dir, now_ms(), store)
        self.metadata.log.defer_io = self.flusher.defer  # its deletions' file work: off the loop
        # the cluster-level min.insync.replicas Kafka 4 writes when it formats a
        # cluster (ELR on); a committed broker_configs record for "" replaces it
        self.metadata.image.broker_configs[dynamic_config.CLUSTER] = {
            dynamic_config.MIN_ISR: str(config["min.insync.replicas"])}
        self.apply_dynamic_configs()
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._topic_ids: dict[uuid.UUID, str] = {}  # topic_by_id's map
        self.views = views.ViewReader()  # Fetch of filtered views
        self.hole_reads = hole_reads.HoleReads()  # Fetch answers over record-less batches
        # how many brokers (voters) the cluster has, set by the replication runtime;
        # controller.admin.check_replication then requires the replicas' to be live
        self.voter_count = 1

    # -- lookups -------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self.metadata.image.cluster_id

    @property
    def topics(self) -> dict[str, TopicMeta]:
        return self.metadata.image.topics

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def source_partition(self, topic: str, index: int) -> Partition | None:
        """The local partition a read of ``topic`` serves from: a view's source's."""
        meta = self.topics.get(topic)
        source = meta.view_of if meta is not None else None
        return self.partitions.get((source or topic, index))

    def gone_topic(self, topic_id: uuid.UUID) -> str | None:
        """The name a topic deleted or re-created since had under this id (the
        last ``metadata.GONE_IDS`` of them)."""
        return self.metadata.image.gone_topic(topic_id)

    def topic_by_id(self, topic_id: uuid.UUID | None) -> TopicMeta | None:
        """The topic with this id. Produce v13 and Fetch v13+ resolve every
        topic of every request by id, so an id -> name map is kept, checked
        against the image on each hit and rebuilt on a miss (a topic created,
        deleted or re-created since; an unknown id, an error answer, pays a scan)."""
        if topic_id is None:
            return None
        name = self._topic_ids.get(topic_id)
        meta = self.topics.get(name) if name is not None else None
        if meta is None or meta.topic_id != topic_id:
            self._topic_ids = {m.topic_id: m.name for m in self.topics.values()}
            name = self._topic_ids.get(topic_id)
            meta = self.topics.get(name) if name is not None else None
        return meta

    @property
    def group_configs(self) -> dict[str, dict[str, Any]]:
        """group id -> its group config overrides (typed); see
        ``group_config.effective_group_config`` for every key's value."""
        return self.metadata.image.group_configs

    @property
    def broker_defaults(self) -> dict[str, Any]:
        return self.config.explicit_values()

    # -- validation of topic changes (the controller commits them: controller.admin) --
    def validate_new_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, Any],
        internal: bool = False,
    ) -> TopicMeta:
        """The topic a CreateTopics would make (defaults filled in), or
        TopicError with Kafka's code; nothing is created here. Kafka 4.4's
        order: the name, whether it exists, the configs, then the counts."""
        check_topic_name(name)
        if name in self.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        folded = name.replace(".", "_")
        for existing in self.topics:
            if existing.replace(".", "_") == folded:
                raise TopicError(ErrorCode.invalid_topic_exception,
                                 f"Topic '{name}' collides with existing topic: {existing}")
        if VIEW_OF in configs or VIEW_FILTER in configs:
            return self._new_view(name, partitions, configs)
        try:  # before the counts, as Kafka 4.4's controller checks them
            overrides = validate_overrides(configs)
        except ConfigError as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if partitions <= 0:
            raise TopicError(ErrorCode.invalid_partitions, "Number of partitions must be positive.")
        if replication_factor <= 0:
            raise TopicError(
                ErrorCode.invalid_replication_factor, "Replication factor must be positive."
            )
        if replication_factor > self.voter_count:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{self.voter_count}.",
            )
        return TopicMeta(name, uuid.uuid4(), partitions, overrides, internal)

    def _new_view(self, name: str, partitions: int, configs: dict[str, Any]) -> TopicMeta:
        """A filtered view (``views``): it takes its source's partitions."""
        try:
            overrides = validate_overrides(configs)
        except ConfigError as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None
        count, problem = views.check_new_view(overrides, partitions, self.topics.get)
        if problem is not None:
            raise TopicError(*problem)
        return TopicMeta(name, uuid.uuid4(), count, overrides)

    def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        """Validate a CreatePartitions; the change for the controller. Kafka 4.4's
        answers: an unknown topic without a message, a count equal to the
        topic's (a client's retry of an increase that was carried out sees it
        too) or below it INVALID_PARTITIONS with its two messages."""
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, None)
        if meta.view_of is not None:
            raise TopicError(ErrorCode.invalid_request,
                             f"Topic '{name}' is a view of '{meta.view_of}': it has the "
                             f"partitions of its source; add partitions to '{meta.view_of}'")
        if total == meta.partitions:  # a retry of a change that was carried out, too
            raise TopicError(ErrorCode.invalid_partitions,
                             f"Topic already has {total} partition(s).")
        if total < meta.partitions:
            raise TopicError(ErrorCode.invalid_partitions,
                             f"The topic {name} currently has {meta.partitions} partition(s); "
                             f"{total} would not be an increase.")
        return {"op": "add_partitions", "name": name, "total": total}

    def set_topic_configs(self, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
        """Validate an AlterConfigs of a topic; the change for the controller."""
        try:  # the configs first, then the topic, as Kafka 4.4's controller checks them
            parsed = validate_overrides(overrides)
        except ConfigError as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        problem = views.check_altered(meta.configs, parsed, self.topics.get)
        if problem is not None:
            raise TopicError(*problem)
        return {"op": "alter_configs", "name": name, "configs": parsed}

    def set_group_configs(self, group_id: str, overrides: dict[str, Any]) -> dict[str, Any]:
        """Validate a group's whole new override set (IncrementalAlterConfigs /
        AlterConfigs of a GROUP); the change for the controller. The group
        need not exist, as in Kafka."""
        if not group_id:
            raise TopicError(ErrorCode.invalid_request, "Default group resources are not allowed.")
        try:
            parsed = validate_group_overrides(overrides, self.config)
        except GroupConfigError as e:
            raise TopicError(ErrorCode.invalid_config, e.message) from None
        return {"op": "alter_group_configs", "name": group_id, "configs": parsed}

    @property
    def broker_configs(self) -> dict[str, dict[str, str]]:
        """Dynamic broker configs: level ("" or a node id) -> key -> raw value."""
        return self.metadata.image.broker_configs

    def set_broker_configs(self, name: str, configs: dict[str, str],
                           here: bool = True) -> dict[str, Any]:
        """Validate a level's whole new set of dynamic broker configs (Alter /
        IncrementalAlterConfigs of a BROKER resource); the change for the
        controller. ``here``: the broker the request reached (name and value
        checks); the controller checks the cluster-level min.insync.replicas."""
        try:
            if here:
                dynamic_config.check_alter_name(name, self.node_id)
                dynamic_config.validate(name, configs,
                                        lambda key: dynamic_config.current(self.config, key))
            dynamic_config.check_cluster_min_isr(name, self.broker_configs.get(name, {}), configs)
        except dynamic_config.DynamicConfigError as e:
            raise TopicError(e.code, e.message) from None
        return {"op": "alter_broker_configs", "name": name, "configs": dict(configs)}

    def apply_dynamic_configs(self) -> None:
        """This broker's effective config after a dynamic level changed."""
        self.config.dynamic, self.config.dynamic_sources = dynamic_config.overlay(
            self.broker_configs, self.node_id)

    # -- housekeeping --------------------------------------------------------
    def enforce_retention(self) -> int:
        """Retention, and the expiry of idle dedup windows (``dedup_windows``)."""
        now = now_ms()
        parts = list(self.partitions.values())
        for part in parts:
            dedup_windows.expire_idle(part, now)
        return sum(p.log.enforce_retention(now, p.high_watermark) for p in parts)

    def close(self) -> None:
        for part in self.partitions.values():
            part.log.close(clean=True)
        self.partitions.clear()
        self.metadata.close()

    def _remove_deleted_dirs(self) -> None:
        for name in self.store.names(self.data_dir):
            if name.endswith("-delete"):
                self.store.remove_tree(self.data_dir / name)


def topic_dir(data_dir: Path, topic: str, index: int) -> Path:
    return data_dir / f"{topic}-{index}"
