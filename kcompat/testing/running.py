"""A broker's state running in-process, for handler tests without sockets.

Theory of operation
-------------------
Every write of a broker goes through Raft, so even a test that calls handlers
directly needs the driver that moves Ready rounds forward. ``running(broker)``
starts what ``server.run_broker`` starts minus the listeners (the group-commit
flusher, the Multi-Raft driver, the group and transaction services) and
returns once the quorum of one has replayed its logs; leaving the block
cancels them. ``run(broker, fn, *args)`` is the synchronous
form for a test that makes one call per ``trio.run``; ``start`` starts the
flusher and the driver in a test's own nursery. ``create_topic`` and
``create_internal_topics`` go through the controller as CreateTopics and
FindCoordinator do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from kcompat.broker.controller import admin
from kcompat.broker.controller.internal_topics import INTERNAL_TOPICS
from kcompat.broker.host.broker import Broker
from kcompat.broker.storage.metadata import TopicMeta

T = TypeVar("T")


@asynccontextmanager
async def running(broker: Broker, services: bool = True) -> AsyncIterator[None]:
    """The broker's driver and flusher (and its services, unless told not to)
    running for the block, stopped after it."""
    async with trio.open_nursery() as nursery:
        await start(nursery, broker, internal_topics=False)
        if services:
            broker.start_services(nursery)
        yield
        nursery.cancel_scope.cancel()


async def start(nursery: trio.Nursery, broker: Broker, internal_topics: bool = True) -> None:
    """Start the flusher and the driver in ``nursery`` (the services are the
    caller's to start) and, unless told not to, create the internal topics."""
    nursery.start_soon(broker.state.flusher.run)
    await nursery.start(broker.cluster.run)
    await broker.controller.wait_started(timeout_s=30.0)
    if internal_topics:
        await create_internal_topics(broker)


def run(broker: Broker, fn: Callable[..., Awaitable[T]], *args: Any,
        services: bool = True) -> T:
    async def scenario() -> T:
        async with running(broker, services):
            return await fn(*args)
    return trio.run(scenario)


async def create_topic(broker: Broker, name: str, partitions: int = 1,
                       replication: int = 1, **configs: Any) -> TopicMeta:
    return await admin.create_topic(broker.controller, name, partitions, replication, configs)


async def create_internal_topics(broker: Broker) -> None:
    """``__consumer_offsets`` and ``__transaction_state``, as the first
    FindCoordinator for a group and a transactional id create them."""
    for name in INTERNAL_TOPICS:
        await admin.execute(broker.controller, {"op": "auto_create", "name": name})


def record_readies(group: Any) -> list[tuple[int, int, int]]:
    """From now on, each Ready ``group``'s Raft core makes: (its entries, the
    high watermark it reports, the one the runtime had published when it
    was made) — a Ready that reports a commit not yet published is a turn
    of the driver the producers below it waited for."""
    readies: list[tuple[int, int, int]] = []
    ready = group.raft.ready

    def recorded() -> Any:
        r = ready()
        readies.append((len(r.entries), r.high_watermark, group.hw))
        return r

    group.raft.ready = recorded
    return readies
