"""This broker's part in the metadata quorum (KRaft's QuorumController).

Theory of operation
-------------------
Every broker is a voter of the metadata quorum (a single broker is a quorum
of one); its leader is the controller. ``Controller`` is the replicated state
machine of the metadata group: the replication host feeds it every committed
batch of ``__cluster_metadata-0`` in log order (``metadata_apply``), or first
the checkpoint at the log start (``restore``), so the ``MetadataImage`` and
the local replicas are the same function of the committed log on every
broker. Every tick it drives registration and liveness (``lifecycle``) and
checkpoints the image once enough was applied (``metadata_snapshot``).

Topic changes are carried out on the controller only (``admin``, which also
serves the changes other brokers forward); ``creating`` and ``auto_creating``
keep one creation per topic name in flight, ``adding`` one partition increase.
"""

from __future__ import annotations

import logging

import trio

from kcompat.broker.controller import metadata_apply, metadata_snapshot
from kcompat.broker.controller.lifecycle import BrokerLifecycle
from kcompat.broker.controller.metadata_snapshot import MetadataLogStorage
from kcompat.broker.replication import codec
from kcompat.broker.replication.peer_calls import PeerCalls
from kcompat.broker.replication.runtime import ClusterRuntime
from kcompat.broker.storage.state import BrokerState
from kcompat.wire.batch import BatchHeader

log = logging.getLogger("kcompat.cluster")


class Controller:
    def __init__(self, state: BrokerState, rt: ClusterRuntime, calls: PeerCalls) -> None:
        self.state = state
        self.rt = rt
        self.calls = calls
        self.lifecycle = BrokerLifecycle(rt)
        self.creating: set[str] = set()  # create_topic records in flight (controller)
        self.auto_creating: set[str] = set()  # topics this broker is asking to create
        # add_partitions records in flight (controller): set once decided
        self.adding: dict[str, trio.Event] = {}
        self.applied_bytes = 0  # metadata applied since the last checkpoint
        rt.tick_hooks.append(self._tick)
        rt.inbound[codec.Heartbeat] = lambda _src, hb: self.lifecycle.on_heartbeat(hb)
        rt.start_metadata(MetadataLogStorage(state.metadata.log, rt.node_id), self)

    # -- the metadata log's state machine ---------------------------------------------

    def apply(self, index: int, batch: memoryview, header: BatchHeader) -> None:
        metadata_apply.apply_batch(self.rt, batch, header)
        self.applied_bytes += header.size

    def on_role(self, index: int, leading: bool) -> None:
        pass  # the controller acts on every tick (lifecycle) and on requests

    def restore(self, index: int, start: int) -> None:
        metadata_apply.load_snapshot(self.rt)
        self.applied_bytes = 0

    def _tick(self, ticks: int) -> None:
        self.lifecycle.heartbeat(ticks)
        self.lifecycle.expire_sessions()
        if metadata_snapshot.maybe_snapshot(self.rt, self.applied_bytes):
            self.applied_bytes = 0

    async def wait_started(self, timeout_s: float) -> None:
        """A quorum of one serves once it has replayed its log, registered and
        opened the logs of its replicas (bounded; they open in a worker thread:
        ``metadata_apply``), as a Kafka broker loads its logs before it serves;
        a cluster's broker answers at once (its peers may not be up yet) and
        holds Metadata answers until it has caught up."""
        if self.rt.alone:
            deadline = trio.current_time() + timeout_s
            self.lifecycle.heartbeat(self.rt.ticks)
            await self.lifecycle.wait_serving(timeout_s)
            while self.rt.opening and trio.current_time() < deadline:
                await trio.sleep(self.rt.tick_s)
