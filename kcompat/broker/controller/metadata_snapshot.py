"""Snapshots of the cluster metadata log (KRaft's ``.checkpoint`` files).

Theory of operation
-------------------
The metadata log only grows (topics, configs, broker registrations and
fencing). Every broker therefore snapshots its own applied state once
``metadata.log.max.record.bytes.between.snapshots`` bytes of records were
applied since the last one (``maybe_snapshot``): the whole image — cluster id,
topics with their replica assignments and Raft group ids, brokers, dynamic
broker configs, the
producer-id limit, group config overrides, client quotas, SCRAM credentials — as one JSON document at offset ``end`` (the next offset to
apply, an entry boundary below the high watermark), in a file named like
Kafka's, ``<end, 20 digits>-<term of the entry before end, 10 digits>.checkpoint``,
written atomically in the metadata log directory. Then the log prefix below
``end`` is dropped (``delete_records_before``) and the Raft core told
(``Raft.compact``).

``MetadataLogStorage`` is the Raft storage of the metadata group: its
``snapshot_id`` and ``snapshot`` are the newest checkpoint (the core sends it
with FetchSnapshot to a follower whose log ends below the leader's log start),
``install_snapshot`` writes a leader's checkpoint and empties the log at its
end. A crash between writing a checkpoint and dropping the prefix is finished
on open. ``apply_committed`` (``metadata_apply``) loads the checkpoint whenever
the next offset to apply lies below the log start — at start-up after a
compaction, or after installing a leader's snapshot — and rebuilds the image
and the local replicas from it (``metadata_apply.load_snapshot``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompat.broker.replication.storage import PartitionLogStorage
from kcompat.broker.storage.metadata import MetadataImage, Reassignment
from kcompat.log.files import atomic_write
from kcompat.log.store import FileStore
from kcompat.raft.types import Snapshot, SnapshotId

if TYPE_CHECKING:
    from kcompat.broker.replication.runtime import ClusterRuntime

log = logging.getLogger("kcompat.cluster")

SUFFIX = ".checkpoint"
KEEP = 2  # checkpoints kept (the newest is the one in use)


def checkpoint_name(sid: SnapshotId) -> str:
    return f"{sid.end:020d}-{sid.term:010d}{SUFFIX}"


def list_checkpoints(directory: Path, store: FileStore) -> list[tuple[SnapshotId, Path]]:
    """Checkpoints in ``directory``, oldest first."""
    found = []
    for name in store.names(directory):
        stem = name[: -len(SUFFIX)]
        end, _, term = stem.partition("-")
        if name.endswith(SUFFIX) and end.isdigit() and term.isdigit():
            found.append((SnapshotId(int(end), int(term)), directory / name))
    return sorted(found, key=lambda item: item[0].end)


class MetadataLogStorage(PartitionLogStorage):
    """``PartitionLogStorage`` whose snapshots are metadata checkpoints."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        newest = self._newest()
        if newest is not None and newest[0].end > self.plog.log_start_offset:
            self.plog.delete_records_before(min(newest[0].end, self.plog.log_end_offset))
            if self.plog.log_start_offset < newest[0].end:  # the log ended below it
                self.plog.reset_to(newest[0].end)

    def _newest(self) -> tuple[SnapshotId, Path] | None:
        found = list_checkpoints(Path(self.plog.directory), self.plog.store)
        return found[-1] if found else None

    def snapshot_id(self) -> SnapshotId:
        newest = self._newest()
        if newest is not None and newest[0].end == self.plog.log_start_offset:
            return newest[0]
        return super().snapshot_id()

    def snapshot(self) -> Snapshot:
        newest = self._newest()
        if newest is not None and newest[0].end == self.plog.log_start_offset:
            # the voter set in force there too (the storage tracks it)
            return Snapshot(newest[0], self.plog.store.read(newest[1]), self.start_voters())
        return super().snapshot()

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self._write(snapshot)
        super().install_snapshot(snapshot)
        log.info("installed the leader's metadata snapshot at offset %d (term %d)",
                 snapshot.id.end, snapshot.id.term)

    def compact(self, snapshot: Snapshot) -> None:
        self._write(snapshot)
        super().compact(snapshot)

    def _write(self, snapshot: Snapshot) -> None:
        directory = Path(self.plog.directory)
        store = self.plog.store
        atomic_write(directory / checkpoint_name(snapshot.id), snapshot.data, store)
        for sid, path in list_checkpoints(directory, store)[:-KEEP]:
            if sid.end < snapshot.id.end:
                store.remove(path)


def broker_entries(image: MetadataImage) -> list[dict[str, Any]]:
    """The registrations, each a ``register_broker`` record's fields (the
    loader applies them as such)."""
    return [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
             "incarnation": b.incarnation, "fenced": b.fenced,
             **({"controller_only": True} if b.controller_only else {}),
             **({"retired": True} if b.retired else {}),
             **({"endpoints": [list(e) for e in b.endpoints]} if b.endpoints else {}),
             **({"machine": b.machine} if b.machine else {})}
            for b in image.brokers.values()]


def encode(rt: ClusterRuntime) -> bytes:
    """The applied metadata image (with every replica assignment) as JSON."""
    image = rt.image
    topics = []
    for meta in image.topics.values():
        topics.append({
            "name": meta.name, "id": str(meta.topic_id), "partitions": meta.partitions,
            "configs": meta.configs, "internal": meta.internal,
            "assignments": [[gid, list(replicas)] for gid, replicas in
                            (rt.assignments[(meta.name, i)] for i in range(meta.partitions))],
        })
    brokers = broker_entries(image)
    doc = {"cluster_id": image.cluster_id, "producer_id_limit": image.producer_id_limit,
           "topics": topics, "brokers": brokers, "group_configs": image.group_configs,
           "broker_configs": image.broker_configs,
           "client_quotas": [[[list(p) for p in entity], values]
                             for entity, values in image.client_quotas.items()],
           "scram_credentials": [[mechanism, user, credential.to_json()]
                                 for mechanism, users in image.scram_credentials.items()
                                 for user, credential in users.items()],
           "acls": [b.to_list() for b in image.acls.bindings()],
           "reassignments": [[name, index, list(r.target), list(r.original), list(r.leaving)]
                             for (name, index), r in image.reassignments.items()]}
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[str, Any]:
    doc = json.loads(data)
    if not isinstance(doc, dict) or "topics" not in doc:
        raise ValueError("not a metadata checkpoint")
    return doc


def reassignments(doc: dict[str, Any]) -> dict[tuple[str, int], Reassignment]:
    """The reassignments in progress a checkpoint holds (older ones: none)."""
    return {(name, index): Reassignment(tuple(target), tuple(original), tuple(leaving))
            for name, index, target, original, leaving in doc.get("reassignments", [])}


def maybe_snapshot(rt: ClusterRuntime, applied_bytes: int) -> bool:
    """Snapshot and compact when enough was applied since the last one."""
    limit = rt.state.config["metadata.log.max.record.bytes.between.snapshots"]
    meta = rt.meta
    storage = meta.storage
    assert isinstance(storage, MetadataLogStorage)
    end = min(meta.applied, meta.raft.log.stable_end)  # both entry boundaries
    if applied_bytes < limit or end <= storage.plog.log_start_offset:
        return False
    term = meta.raft.log.term_at(end - 1)
    sid = SnapshotId(end, term)
    storage.compact(Snapshot(sid, encode(rt)))
    meta.raft.compact(sid)
    log.info("metadata snapshot at offset %d (term %d)", end, term)
    return True
