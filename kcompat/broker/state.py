"""The broker's state: topics, their partitions and logs, producer ids.

Theory of operation
-------------------
``BrokerState`` owns everything a handler touches. Topic-level changes go
through the metadata log first (``MetadataStore.append``) and then to the
runtime objects, so a restart rebuilds exactly what was acknowledged. Partition
directories are ``<topic>-<partition>`` under the data directory; a deleted
topic's directories are renamed to ``*.<id>-delete`` at once (so a topic
re-created with the same name starts empty) and removed from disk afterwards.
Errors a client can cause come back as ``TopicError`` carrying the Kafka error
code; they never escape as broker exceptions.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.config import BrokerConfig
from kcompat.broker.configdef import ConfigError
from kcompat.broker.flusher import Flusher
from kcompat.broker.metadata import PRODUCER_ID_BLOCK, MetadataStore, TopicMeta
from kcompat.broker.metrics import BrokerMetrics
from kcompat.broker.partition import Partition
from kcompat.broker.topic_config import log_config, validate_overrides
from kcompat.log.partition_log import PartitionLog

if TYPE_CHECKING:
    from kcompat.broker.cluster.runtime import ClusterRuntime
    from kcompat.broker.groups import GroupService
    from kcompat.broker.transactions import TxnService

log = logging.getLogger("kcompat.broker")

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


class TopicError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise TopicError(ErrorCode.invalid_topic_exception, f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError(ErrorCode.invalid_topic_exception, "topic name is longer than 249 chars")
    if not _LEGAL_TOPIC.match(name):
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'",
        )


class BrokerState:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.advertised_port: int = config["port"]
        self.data_dir = config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._remove_deleted_dirs()
        self.flusher = Flusher()
        # Cluster mode (issue 6) only with controller.quorum.voters; see kcompat.broker.cluster.
        voters = config["controller.quorum.voters"]
        self.cluster: ClusterRuntime | None = None
        self.metadata = MetadataStore(self.data_dir, now_ms(), replay=not voters)
        if not self.metadata.image.cluster_id and not voters:
            cid = config["kcompat.cluster.id"] or _new_cluster_id()
            self.metadata.append({"type": "cluster", "cluster_id": cid}, now_ms())
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.data_arrived = trio.Event()
        self.groups: GroupService | None = None  # set by the runtime once started
        self.txns: TxnService | None = None
        self.metrics = BrokerMetrics(self)  # counters for /metrics (kcompat.broker.admin_http)
        self._next_producer_id = self.metadata.image.producer_id_limit
        for meta in self.metadata.image.topics.values():
            self._open_partitions(meta, range(meta.partitions))
        if voters:  # the runtime opens partitions as committed metadata arrives
            from kcompat.broker.cluster.runtime import ClusterRuntime

            self.cluster = ClusterRuntime(self, voters)

    @property
    def broker_count(self) -> int:
        # Cluster mode: every voter; cluster.admin.check_replication then
        # requires the replicas' brokers to be live.
        return 1 if self.cluster is None else len(self.cluster.voters)

    # -- lookups -------------------------------------------------------------
    @property
    def cluster_id(self) -> str:
        return self.metadata.image.cluster_id

    @property
    def topics(self) -> dict[str, TopicMeta]:
        return self.metadata.image.topics

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        for meta in self.topics.values():
            if meta.topic_id == topic_id:
                return meta
        return None

    @property
    def broker_defaults(self) -> dict[str, Any]:
        return self.config.explicit_values()

    # -- topic changes -------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, Any],
        validate_only: bool = False,
        internal: bool = False,
    ) -> TopicMeta:
        check_topic_name(name)
        if name in self.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        folded = name.replace(".", "_")
        for existing in self.topics:
            if existing.replace(".", "_") == folded:
                raise TopicError(ErrorCode.invalid_topic_exception,
                                 f"Topic '{name}' collides with existing topic: {existing}")
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
        if replication_factor > self.broker_count:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{self.broker_count}.",
            )
        try:
            overrides = validate_overrides(configs)
        except ConfigError as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None
        meta = TopicMeta(name, uuid.uuid4(), partitions, overrides, internal)
        if validate_only:
            return meta
        if self.cluster is not None:  # cluster mode creates through the controller only
            raise TopicError(ErrorCode.not_controller,
                             "cluster mode: topics are created by the controller")
        self.metadata.append(
            {"type": "create_topic", "name": name, "id": str(meta.topic_id),
             "partitions": partitions, "configs": overrides, "internal": internal},
            now_ms(),
        )
        self._open_partitions(self.topics[name], range(partitions))
        log.info("created topic %s with %d partitions", name, partitions)
        return self.topics[name]

    def auto_create(self, name: str) -> TopicMeta | None:
        """Create ``name`` with broker defaults if auto-creation is on. Cluster
        mode creates it in the background through the controller and raises
        LEADER_NOT_AVAILABLE meanwhile, as Kafka answers; clients retry."""
        if not self.config["auto.create.topics.enable"]:
            return None
        if self.cluster is not None:
            from kcompat.broker.cluster.admin import auto_create

            auto_create(self, name)
            raise TopicError(ErrorCode.leader_not_available,
                             f"Topic {name} is being created.")
        return self.create_topic(name, -1, -1, {})

    def delete_topic(self, name: str) -> None:
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        self.metadata.append({"type": "delete_topic", "name": name}, now_ms())
        for index in range(meta.partitions):
            part = self.partitions.pop((name, index), None)
            if part is not None:
                part.log.close(clean=True)
                part.notify_append()
                directory = self.data_dir / f"{name}-{index}"
                if directory.exists():
                    directory.rename(
                        self.data_dir / f"{name}-{index}.{meta.topic_id.hex}-delete"
                    )
        self._remove_deleted_dirs()
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        if total <= meta.partitions:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {meta.partitions} partitions, which is higher than or "
                f"equal to the requested {total}.",
            )
        if validate_only:
            return
        if self.cluster is not None:  # committed through the controller (cluster.admin)
            self.cluster.stage({"op": "add_partitions", "name": name, "total": total})
            return
        old = meta.partitions
        self.metadata.append({"type": "add_partitions", "name": name, "partitions": total}, now_ms())
        self._open_partitions(meta, range(old, total))

    def set_topic_configs(self, name: str, overrides: dict[str, Any], validate_only: bool) -> None:
        meta = self.topics.get(name)
        if meta is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        try:
            parsed = validate_overrides(overrides)
        except ConfigError as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None
        if validate_only:
            return
        if self.cluster is not None:  # committed through the controller (cluster.admin)
            self.cluster.stage({"op": "alter_configs", "name": name, "configs": parsed})
            return
        self.metadata.append({"type": "alter_configs", "name": name, "configs": parsed}, now_ms())
        new_config = log_config(parsed, self.broker_defaults)
        for index in range(meta.partitions):
            part = self.partitions.get((name, index))
            if part is not None:
                part.log.config = new_config

    # -- producer ids --------------------------------------------------------
    def allocate_producer_id(self) -> int:
        if self.cluster is not None:  # cluster mode: per-node durable blocks
            return self.cluster.allocate_producer_id()
        if self._next_producer_id >= self.metadata.image.producer_id_limit:
            limit = self._next_producer_id + PRODUCER_ID_BLOCK
            self.metadata.append({"type": "producer_ids", "limit": limit}, now_ms())
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    def _wake(self) -> None:
        self.data_arrived.set()
        self.data_arrived = trio.Event()

    # -- housekeeping --------------------------------------------------------
    def enforce_retention(self) -> int:
        now = now_ms()
        return sum(p.log.enforce_retention(now) for p in list(self.partitions.values()))

    def close(self) -> None:
        for part in self.partitions.values():
            part.log.close(clean=True)
        self.partitions.clear()
        self.metadata.close()

    def _open_partitions(self, meta: TopicMeta, indexes: range) -> None:
        cfg = log_config(meta.configs, self.broker_defaults)
        for index in indexes:
            directory = self.data_dir / f"{meta.name}-{index}"
            plog = PartitionLog.open(directory, cfg, now_ms())
            self.partitions[(meta.name, index)] = Partition(meta.name, index, plog, self._wake)

    def _remove_deleted_dirs(self) -> None:
        for path in self.data_dir.glob("*-delete"):
            shutil.rmtree(path, ignore_errors=True)


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def topic_dir(data_dir: Path, topic: str, index: int) -> Path:
    return data_dir / f"{topic}-{index}"
