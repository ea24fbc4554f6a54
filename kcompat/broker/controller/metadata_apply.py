"""Applying the committed metadata log to this broker (cluster mode).

Theory of operation
-------------------
Every broker applies the records of ``__cluster_metadata-0`` below the
metadata group's high watermark, in log order and only once (the controller
is the metadata group's state machine, fed by ``Group.feed``), so the
``MetadataImage`` and the set of local replicas are the same function of the
committed log on every broker. Besides updating the image, a record changes
this broker: ``create_topic`` / ``add_partitions`` open the partition logs and
Raft groups of the replicas assigned here (and remember every assignment, for
Metadata and routing), ``delete_topic`` closes them and renames their
directories for deletion, ``alter_configs`` swaps the logs' configuration,
``broker_configs`` (dynamic broker configs) this broker's effective config and
the configuration of every log whose topic follows a broker default.
Broker registrations and fencing only change the image (``liveness``). A
second ``create_topic`` for an existing name (two proposals racing) is
ignored, identically everywhere, and so is an ``add_partitions`` that is no
increase of the count the image has. Checkpoints (``metadata_snapshot``) replace
the prefix of the log: ``load_snapshot`` turns one into the same changes.

Opening a replica's log is blocking disk work — recovery lists, reads and
checks its files, rewrites its epoch checkpoint and syncs files and
directories; after a crash it scans the tail of its segments — and a broker
applies a record per topic the probe of a soak creates, every one of them
again at a restart. On the event loop one such open held it 150–600 ms when
the disk was busy (issue 31: no step over 50 ms). So the apply only records
the assignment and asks for the open (``rt.opening``); a worker thread opens
the log (a few at once; one directory at a time, in the order asked: a
namesake deleted and created again), and back on the loop the replica
is installed (its ``Partition`` and Raft group) if it is still wanted — a
topic deleted or a replica moved away meanwhile has its new log closed and
deleted instead. Until then this broker has no replica of the partition, as
when an open failed (``disk_faults`` retries those on the loop). A broker
answers CreateTopics once its own replicas are open (``admin._wait_topic``),
as before. A store whose I/O does not block (the simulator's) opens in the
apply itself, deterministic as the simulator needs.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from kcompat.broker.config.topic_config import log_config
from kcompat.broker.controller import metadata_snapshot
from kcompat.broker.replication.storage import PartitionLogStorage, now_ms
from kcompat.broker.storage.partition import Partition
from kcompat.log.partition_log import PartitionLog
from kcompat.security.acl import AclBinding
from kcompat.wire.batch import BatchHeader
from kcompat.wire.records import decode_batch

if TYPE_CHECKING:
    from kcompat.broker.replication.runtime import ClusterRuntime
    from kcompat.broker.storage.metadata import TopicMeta

log = logging.getLogger("kcompat.cluster")


def _open_partition(rt: ClusterRuntime, meta: TopicMeta, index: int, gid: int,
                    replicas: tuple[int, ...], voters: tuple[int, ...] | None = None) -> None:
    rt.assignments[(meta.name, index)] = (gid, replicas)
    rt.note_new_partition(gid)
    if rt.node_id not in replicas or gid in rt.groups:
        return
    _open_replica(rt, meta.name, index, gid, voters)


def _open_replica(rt: ClusterRuntime, name: str, index: int, gid: int,
                  voters: tuple[int, ...] | None) -> None:
    """Open this broker's replica of partition ``index`` of ``name`` — in a
    worker thread on a store whose I/O blocks (``_open_off_loop``), here
    otherwise (the simulator's) — unless it was deleted or moved away."""
    if not _wanted(rt, name, index, gid):
        return
    pending = rt.opening.get(gid)
    if pending is not None:  # asked again while it opens (a reassignment): its latest voters
        rt.opening[gid] = (name, voters)
        return
    if rt.state.flusher.threaded:
        rt.opening[gid] = (name, voters)
        if rt.spawn(_open_off_loop, rt, name, index, gid, rt.state.topics[name]):
            return
        del rt.opening[gid]  # the driver does not run yet
    _open_replica_now(rt, name, index, gid, voters)


def _wanted(rt: ClusterRuntime, name: str, index: int, gid: int) -> bool:
    """Partition ``index`` of ``name`` is still group ``gid`` with a replica
    here that is not open yet."""
    found = rt.assignments.get((name, index))
    return name in rt.state.topics and found is not None and found[0] == gid \
        and rt.node_id in found[1] and gid not in rt.groups


def _open_replica_now(rt: ClusterRuntime, name: str, index: int, gid: int,
                      voters: tuple[int, ...] | None) -> None:
    """``_open_replica`` on the event loop; a log that cannot be opened (a full
    disk, EIO) is tried again later (``disk_faults``), not a failed apply."""
    state = rt.state
    if not _wanted(rt, name, index, gid):
        return
    meta = state.topics[name]
    try:
        plog = PartitionLog.open(state.data_dir / f"{name}-{index}",
                                 log_config(meta.configs, state.broker_defaults), now_ms(),
                                 state.store)
    except OSError as e:
        rt.faults.open_failed(f"{name}-{index}", e,
                              partial(_open_replica_now, rt, name, index, gid, voters))
        return
    _install(rt, meta, index, gid, plog, voters)


async def _open_off_loop(rt: ClusterRuntime, name: str, index: int, gid: int,
                         meta: TopicMeta) -> None:
    """Open a replica's log in a worker thread: recovery reads, checks and
    rewrites files and syncs them (a slow fsync, or a CRC scan of a segment
    after a crash, held the loop for hundreds of ms), none of it touching
    the broker's state. ``OPENS_AT_ONCE`` open together (their syncs
    overlap); one directory opens at a time, in the order asked (a lock fair
    to its waiters), so a discarded log's directory is gone before a
    namesake opens its own. Back on the loop, the replica is installed if
    it is still wanted, else closed and deleted."""
    key = f"{name}-{index}"
    lock = rt.opening_dirs.setdefault(key, trio.Lock())
    try:
        async with lock:
            await _open_in_turn(rt, name, index, gid, meta)
    finally:
        if not lock.locked() and not lock.statistics().tasks_waiting \
                and rt.opening_dirs.get(key) is lock:
            del rt.opening_dirs[key]


async def _open_in_turn(rt: ClusterRuntime, name: str, index: int, gid: int,
                        meta: TopicMeta) -> None:
    state = rt.state
    if not _wanted(rt, name, index, gid) or state.topics.get(name) is not meta:
        rt.opening.pop(gid, None)  # deleted or moved away before its turn
        return
    directory = state.data_dir / f"{name}-{index}"
    try:
        plog = await trio.to_thread.run_sync(
            PartitionLog.open, directory, log_config(meta.configs, state.broker_defaults),
            now_ms(), state.store, limiter=rt.opening_limit)
    except OSError as e:
        _name, voters = rt.opening.pop(gid, (name, None))
        rt.faults.open_failed(f"{name}-{index}", e,
                              partial(_open_replica_now, rt, name, index, gid, voters))
        return
    _name, voters = rt.opening.pop(gid, (name, None))
    if _wanted(rt, name, index, gid) and state.topics.get(name) is meta:
        plog.config = log_config(meta.configs, state.broker_defaults)  # altered meanwhile
        _install(rt, meta, index, gid, plog, voters)
        return
    try:
        plog.close(clean=True)
    except OSError as e:
        log.warning("closing %s-%d, deleted while it opened: %s", name, index, e)
    if state.store.exists(directory):
        state.store.rename(directory, state.data_dir / f"{name}-{index}.{meta.topic_id.hex}-delete")
    state._remove_deleted_dirs()


def _install(rt: ClusterRuntime, meta: TopicMeta, index: int, gid: int, plog: PartitionLog,
             voters: tuple[int, ...] | None) -> None:
    """The opened log becomes this broker's replica: its partition and Raft group."""
    plog.defer_io = rt.state.flusher.defer  # its deletions' file work: off the loop
    part = Partition(meta.name, index, plog)
    rt.state.partitions[(meta.name, index)] = part
    storage = PartitionLogStorage(plog, rt.node_id, fresh_term=-1, journal=rt.journal, gid=gid)
    rt.new_group(gid, rt.assignments[(meta.name, index)][1], storage, part, voters)


def settle_replicas(rt: ClusterRuntime, name: str, index: int, replicas: tuple[int, ...],
                    voters: tuple[int, ...]) -> None:
    """A partition's replicas are now ``replicas`` (a reassignment started,
    was cancelled or finished): a broker newly among them opens its replica
    — a Raft observer while it is not among ``voters`` (the voters when no
    configuration entry says otherwise) — one still among them follows the
    change, one no longer among them closes its replica and deletes it."""
    meta = rt.state.topics.get(name)
    found = rt.assignments.get((name, index))
    if meta is None or found is None:
        return
    gid = found[0]
    group = rt.groups.get(gid)
    if rt.node_id not in replicas:
        rt.assignments[(name, index)] = (gid, replicas)
        if group is not None:
            _drop_replica(rt, meta, index, gid)
            rt.state._remove_deleted_dirs()
            log.info("moved %s-%d away from this broker (replicas %s)", name, index,
                     list(replicas))
    elif group is None:
        _open_partition(rt, meta, index, gid, replicas, voters)
        rt.forget_partition(gid)  # not a new partition: it has a leader already
        log.info("opened a replica of %s-%d to catch up (replicas %s)", name, index,
                 list(replicas))
    else:
        rt.assignments[(name, index)] = (gid, replicas)
        rt.set_replicas(group, replicas)
    for view in rt.image.views_of(name):
        _alias_view(rt, view)


def _drop_replica(rt: ClusterRuntime, meta: TopicMeta, index: int, gid: int | None) -> None:
    """Close this broker's replica of a partition and rename its directory for
    deletion (its topic deleted, or the replica moved elsewhere)."""
    group = rt.groups.pop(gid, None) if gid is not None else None
    if group is not None:
        group.removed = True
        group.notify()
    name = meta.name
    part = rt.state.partitions.pop((name, index), None)
    if part is not None:
        try:
            part.log.close(clean=True)
        except OSError as e:  # a full disk or EIO: its directory goes away all the same
            log.warning("closing %s-%d for deletion: %s", meta.name, index, e)
        part.notify_append()
        store, data_dir = rt.state.store, rt.state.data_dir
        directory = data_dir / f"{name}-{index}"
        if store.exists(directory):
            store.rename(directory, data_dir / f"{name}-{index}.{meta.topic_id.hex}-delete")


def _voters(rt: ClusterRuntime, name: str, index: int) -> tuple[int, ...] | None:
    """The voters of a partition opened from a checkpoint while it moves:
    its original replicas (None: its replicas)."""
    moving = rt.image.reassignments.get((name, index))
    return moving.original if moving is not None else None


def _alias_view(rt: ClusterRuntime, view: TopicMeta) -> None:
    """A view's partitions route to its source's (same group ids, leaders)."""
    assert view.view_of is not None
    for index in range(view.partitions):
        found = rt.assignments.get((view.view_of, index))
        if found is not None:
            rt.assignments[(view.name, index)] = found


def _drop_topic(rt: ClusterRuntime, name: str) -> None:
    meta = rt.state.topics.get(name)
    if meta is None:
        return
    if meta.view_of is not None:  # no partitions of its own
        for index in range(meta.partitions):
            rt.assignments.pop((name, index), None)
        log.info("deleted view %s of %s", name, meta.view_of)
        return
    for view in rt.image.views_of(name):
        _drop_topic(rt, view.name)
    for index in range(meta.partitions):
        found = rt.assignments.pop((name, index), None)
        if found is not None:
            rt.forget_partition(found[0])
        _drop_replica(rt, meta, index, found[0] if found is not None else None)
    rt.state._remove_deleted_dirs()
    for hook in rt.topic_deleted_hooks:
        hook(name)


def apply_batch(rt: ClusterRuntime, batch: memoryview, header: BatchHeader) -> None:
    """Apply one committed batch of the metadata log (fed in log order)."""
    if not header.is_control:
        for record in decode_batch(batch):
            if record.value is not None:
                _apply_record(rt, json.loads(record.value), record.offset)


def load_snapshot(rt: ClusterRuntime) -> None:
    """Make the image and the local replicas those of the checkpoint at the log
    start, through the same record handlers as the log: topics missing from it
    (or re-created under a new id) are deleted, new ones created, changed
    partition counts and configs applied; brokers, ids and group configs
    replaced (checkpoints older than group configs, client quotas or SCRAM
    credentials have none)."""
    storage = rt.meta.storage
    snapshot = storage.snapshot()
    doc = metadata_snapshot.decode(snapshot.data)
    image = rt.image
    image.reassignments = metadata_snapshot.reassignments(doc)
    wanted = {t["name"]: t for t in doc["topics"]}
    for name, meta in list(image.topics.items()):
        if name not in wanted or wanted[name]["id"] != str(meta.topic_id):
            _apply_record(rt, {"type": "delete_topic", "name": name})
    for name, t in wanted.items():
        if name not in image.topics:
            _apply_record(rt, {"type": "create_topic", **t})
            continue
        meta = image.topics[name]
        if t["partitions"] > meta.partitions:
            _apply_record(rt, {"type": "add_partitions", "name": name,
                               "partitions": t["partitions"],
                               "assignments": t["assignments"][meta.partitions:]})
        if t["configs"] != meta.configs:
            _apply_record(rt, {"type": "alter_configs", "name": name, "configs": t["configs"]})
        for index, (_gid, replicas) in enumerate(t["assignments"][:meta.partitions]):
            if meta.view_of is None and tuple(replicas) != rt.assignments[(name, index)][1]:
                settle_replicas(rt, name, index, tuple(replicas),
                                _voters(rt, name, index) or tuple(replicas))
    image.cluster_id = doc["cluster_id"] or image.cluster_id
    image.producer_id_limit = max(image.producer_id_limit, int(doc["producer_id_limit"]))
    image.group_configs = {g: dict(c) for g, c in doc.get("group_configs", {}).items()}
    image.client_quotas = {tuple((str(t), n) for t, n in entity): dict(values)
                           for entity, values in doc.get("client_quotas", [])}
    image.scram_credentials = {}
    image.apply({"type": "scram_credentials",
                 "ops": [[user, mechanism, credential]
                         for mechanism, user, credential in doc.get("scram_credentials", [])]})
    image.acls.replace(AclBinding.from_list(b) for b in doc.get("acls", []))
    if "broker_configs" in doc:  # checkpoints older than dynamic broker configs have none
        image.broker_configs = {n: dict(c) for n, c in doc["broker_configs"].items()}
        _apply_dynamic(rt)
    image.brokers.clear()
    for b in doc["brokers"]:
        image.apply({"type": "register_broker", **b})
    log.info("loaded the metadata snapshot at offset %d: %d topics, %d brokers",
             snapshot.id.end, len(image.topics), len(image.brokers))


def _apply_dynamic(rt: ClusterRuntime) -> None:
    """A level of dynamic broker configs changed: this broker's config follows,
    and so does every local log (a topic without its own value takes the new
    broker default at once)."""
    state = rt.state
    state.apply_dynamic_configs()
    for (name, _), part in state.partitions.items():
        meta = state.topics.get(name)
        if meta is not None:
            part.log.config = log_config(meta.configs, state.broker_defaults)


def _single_node_assignments(rt: ClusterRuntime, offset: int, first: int, count: int
                             ) -> list[list[Any]]:
    """Assignments for a topic record written by a single-node broker before
    it ran as a quorum of one (no ``assignments``): every partition on this
    broker, group ids made from the record offset as the controller does."""
    return [[(offset << 16) | (first + i), [rt.node_id]] for i in range(count)]


def _apply_record(rt: ClusterRuntime, rec: dict[str, Any], offset: int = 0) -> None:
    kind = rec.get("type")
    if kind == "create_topic" and "assignments" not in rec:
        rec["assignments"] = _single_node_assignments(rt, offset, 0, rec["partitions"])
    elif kind == "add_partitions" and "assignments" not in rec:
        old = rt.state.metadata.image.topics[rec["name"]].partitions
        rec["assignments"] = _single_node_assignments(rt, offset, old, rec["partitions"] - old)
    image = rt.state.metadata.image
    if kind == "create_topic" and rec["name"] in image.topics:
        log.warning("ignoring a second create_topic record for %s", rec["name"])
        return
    if kind == "add_partitions" and rec["partitions"] <= image.topics[rec["name"]].partitions:
        log.warning("ignoring an add_partitions record for %s to %d partitions: it has %d",
                    rec["name"], rec["partitions"], image.topics[rec["name"]].partitions)
        return  # planned from a count an earlier increase had passed already
    if kind == "delete_topic":
        _drop_topic(rt, rec["name"])
    image.apply(rec)
    if kind == "broker_configs":
        _apply_dynamic(rt)
    if kind == "create_topic" and image.topics[rec["name"]].view_of is not None:
        _alias_view(rt, image.topics[rec["name"]])
        log.info("created view %s of %s", rec["name"], image.topics[rec["name"]].view_of)
    elif kind == "create_topic":
        meta = image.topics[rec["name"]]
        for index, (gid, replicas) in enumerate(rec["assignments"]):
            _open_partition(rt, meta, index, gid, tuple(replicas),
                            _voters(rt, meta.name, index))
        log.info("created topic %s: %d partitions", meta.name, meta.partitions)
    elif kind == "add_partitions" and image.topics[rec["name"]].view_of is None:
        meta = image.topics[rec["name"]]
        for gid, replicas in rec["assignments"]:
            index = gid & 0xFFFF
            _open_partition(rt, meta, index, gid, tuple(replicas),
                            _voters(rt, meta.name, index))
        for view in image.views_of(meta.name):
            _alias_view(rt, view)
    elif kind == "reassign":
        moving = image.reassignments[(rec["name"], rec["index"])]
        settle_replicas(rt, rec["name"], rec["index"], moving.replicas, moving.original)
        log.info("reassigning %s-%d to %s (from %s)", rec["name"], rec["index"],
                 list(moving.target), list(moving.original))
    elif kind == "reassign_done":
        replicas = tuple(rec["replicas"])
        settle_replicas(rt, rec["name"], rec["index"], replicas, replicas)
        log.info("reassigned %s-%d to %s", rec["name"], rec["index"], list(replicas))
    elif kind == "alter_configs" and image.topics[rec["name"]].view_of is None:
        meta = image.topics[rec["name"]]
        cfg = log_config(meta.configs, rt.state.broker_defaults)
        for index in range(meta.partitions):
            part = rt.state.partitions.get((meta.name, index))
            if part is not None:
                part.log.config = cfg
