"""What the HTTP API asks a broker that no Kafka request answers.

Each query reads what one broker holds — as the leader of schedule
partitions, of share-partitions, of partitions with a dedup window — and
answers in JSON values; ``calls.query`` asks it here or, in an envelope, of
another broker, and the REST endpoint puts the brokers' answers together.
None walks records: each reads counts the services keep, or a bounded head
(``limit``) of what is in flight.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kcompat.broker.ext.delays import pending_summary
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.metrics import dedup_totals

IN_FLIGHT_MAX = 500


async def scheduled(broker: Broker, args: dict[str, Any]) -> Any:
    return pending_summary(broker.delays, args.get("topic"))


async def shares(broker: Broker, args: dict[str, Any]) -> Any:
    """The share-partitions this broker serves (of group ``group``): start
    offset, records per state and the first runs in flight."""
    group = args.get("group")
    limit = min(int(args.get("limit", 100)), IN_FLIGHT_MAX)
    out = []
    for (name, topic, index), held in sorted(broker.shares.held.items()):
        if group is not None and name != group:
            continue
        machine = held.machine
        counts = machine.counts()
        out.append({
            "group_id": name, "topic_name": topic, "partition_id": index,
            "start_offset": machine.start_offset, "end_offset": machine.end_offset,
            "counts": {state.name.lower(): n for state, n in counts.items()},
            "in_flight": [{"first_offset": first, "last_offset": last,
                           "state": state.name, "delivery_count": count,
                           "member_id": member, "lock_deadline_ms": deadline}
                          for first, last, state, count, member, deadline
                          in machine.in_flight(limit)]})
    return out


async def dedup(broker: Broker, args: dict[str, Any]) -> Any:
    """Per topic, over the partitions this broker leads or led since it
    started: ids held in the window, duplicates dropped, ids evicted."""
    return {topic: [held, dropped, evicted]
            for topic, (dropped, evicted, held) in dedup_totals(broker.state).items()}


async def views(broker: Broker, args: dict[str, Any]) -> Any:
    """Per view, records of the source this broker's reads let through or took out."""
    reader = broker.state.views
    return {view: [reader.matched.get(view, 0), reader.filtered.get(view, 0)]
            for view in set(reader.matched) | set(reader.filtered)}


QUERIES: dict[str, Callable[[Broker, dict[str, Any]], Awaitable[Any]]] = {
    "scheduled": scheduled, "shares": shares, "dedup": dedup, "views": views,
}
