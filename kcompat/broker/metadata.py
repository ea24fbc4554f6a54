"""Cluster metadata (topics, configs, producer-id blocks) kept as a Kafka log.

Theory of operation
-------------------
DESIGN.md §1.1: every log is a partition log of RecordBatch v2. The metadata of
this (single-node) cluster lives in ``__cluster_metadata-0`` under the data
directory: each change is one record whose value is a small JSON document
(``create_topic``, ``delete_topic``, ``add_partitions``, ``alter_configs``,
``producer_ids``). At start the broker replays the log into ``MetadataImage``;
a change is applied to the image only after its record is appended and synced.
The replicated controller quorum (issue 6) will replace the local append with a
Raft commit of the same records.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.wire import batch as wbatch
from kcompat.wire.records import decode_batch, encode_batch

METADATA_DIR = "__cluster_metadata-0"
PRODUCER_ID_BLOCK = 1000


@dataclass
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, Any] = field(default_factory=dict)
    internal: bool = False


@dataclass
class BrokerInfo:
    """A broker registration (cluster mode): where clients reach it, which
    process (incarnation) registered, and whether the controller fenced it."""

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation: str
    fenced: bool = True


@dataclass
class MetadataImage:
    cluster_id: str = ""
    topics: dict[str, TopicMeta] = field(default_factory=dict)
    producer_id_limit: int = 0  # ids below this are handed out
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)  # cluster mode only

    def live_brokers(self) -> list[BrokerInfo]:
        """Registered, unfenced brokers, by node id."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def apply(self, rec: dict[str, Any]) -> None:
        kind = rec["type"]
        if kind == "cluster":
            self.cluster_id = rec["cluster_id"]
        elif kind == "create_topic":
            self.topics[rec["name"]] = TopicMeta(
                rec["name"], uuid.UUID(rec["id"]), rec["partitions"], dict(rec["configs"]),
                bool(rec.get("internal", False)),
            )
        elif kind == "delete_topic":
            self.topics.pop(rec["name"], None)
        elif kind == "add_partitions":
            self.topics[rec["name"]].partitions = rec["partitions"]
        elif kind == "alter_configs":
            self.topics[rec["name"]].configs = dict(rec["configs"])
        elif kind == "register_broker":
            self.brokers[rec["id"]] = BrokerInfo(rec["id"], rec["host"], rec["port"],
                                                 rec.get("rack"), rec["incarnation"],
                                                 bool(rec["fenced"]))
        elif kind in ("fence_broker", "unfence_broker"):
            broker = self.brokers.get(rec["id"])
            if broker is not None and broker.incarnation == rec["incarnation"]:
                broker.fenced = kind == "fence_broker"
        elif kind == "producer_ids":
            self.producer_id_limit = max(self.producer_id_limit, rec["limit"])


class MetadataStore:
    """Appends metadata records to the local metadata log and replays it."""

    def __init__(self, data_dir: Path, now_ms: int, replay: bool = True) -> None:
        self.log = PartitionLog.open(data_dir / METADATA_DIR, LogConfig(), now_ms)
        self.image = MetadataImage()
        if replay:  # cluster mode applies only committed records (kcompat.broker.cluster)
            self._replay()

    def _replay(self) -> None:
        start = self.log.log_start_offset
        for batch, header in self.log.batches(start, self.log.log_end_offset):
            if header.is_control:
                continue
            for record in decode_batch(batch):
                if record.value is not None and record.offset >= start:
                    self.image.apply(json.loads(record.value))

    def append(self, rec: dict[str, Any], now_ms: int) -> None:
        """Durably record ``rec`` and apply it to the image."""
        value = json.dumps(rec, separators=(",", ":")).encode()
        raw = encode_batch([(None, value, (), now_ms)])
        view = memoryview(raw)
        header = wbatch.validate(view)
        self.log.append(view, header, 0, now_ms)
        self.log.flush()
        self.image.apply(rec)

    def close(self) -> None:
        self.log.close(clean=True)
