"""A broker's state running in-process, for handler tests without sockets.

Theory of operation
-------------------
Every write of a broker goes through Raft, so even a test that calls handlers
directly needs the driver that moves Ready rounds forward. ``running(state)``
starts what ``server.run_broker`` starts minus the listeners (the group-commit
flusher, the Multi-Raft driver, the group and transaction services when the
state has them) and returns once the quorum of one has replayed its logs;
leaving the block cancels them. ``run(state, fn, *args)`` is the synchronous
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
from kcompat.broker.metadata import TopicMeta
from kcompat.broker.state import BrokerState

T = TypeVar("T")


@asynccontextmanager
async def running(state: BrokerState) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(state.flusher.run)
        await nursery.start(state.cluster.run)
        if state.groups is not None:
            nursery.start_soon(state.groups.run)
        if state.txns is not None:
            nursery.start_soon(state.txns.run)
        yield
        nursery.cancel_scope.cancel()


async def start(nursery: trio.Nursery, state: BrokerState) -> None:
    """Start the flusher and the driver in ``nursery`` (the caller's services
    are its own to start) and create the internal topics."""
    nursery.start_soon(state.flusher.run)
    await nursery.start(state.cluster.run)
    await create_internal_topics(state)


def run(state: BrokerState, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    async def scenario() -> T:
        async with running(state):
            return await fn(*args)
    return trio.run(scenario)


async def create_topic(state: BrokerState, name: str, partitions: int = 1,
                       replication: int = 1, **configs: Any) -> TopicMeta:
    return await admin.create_topic(state, name, partitions, replication, configs)


async def create_internal_topics(state: BrokerState) -> None:
    """``__consumer_offsets`` and ``__transaction_state``, as the first
    FindCoordinator for a group and a transactional id create them."""
    from kcompat.broker.groups import OFFSETS_TOPIC
    from kcompat.broker.transactions import TXN_TOPIC

    for name in (OFFSETS_TOPIC, TXN_TOPIC):
        await admin.execute(state, {"op": "auto_create", "name": name})
