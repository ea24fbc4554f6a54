"""AlterClientQuotas (key 49), versions 0-1.

Quirks: each entry's entity and ops are checked as Kafka 4.4 does
(``controller.client_quotas``: INVALID_REQUEST with Kafka's messages; an
``ip`` name must be an address or a host name that resolves, looked up
without blocking the event loop); an entity named by two entries of one
request, or a key named twice in one entry, is INVALID_REQUEST ("Ignoring
duplicate entity ...") and answered once — the entity's first entry is
carried out all the same, as Kafka's controller does. A valid entry is carried out by the
controller (forwarded from any broker, ``controller.admin``), which commits
one ``client_quotas`` record to the metadata log, so every broker sees it and
it survives restarts. ``validate_only`` changes nothing. The answer lists an
entity's types in Kafka's order (client-id, user, ip).

What the broker does with them (throttling byte rates and controller
mutations; ``request_percentage`` is stored only) is in ``net.quotas``.
Authorization (Kafka's controller): ALTER_CONFIGS on the cluster, else every
entry is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller import client_quotas as cq
from kcompat.broker.controller.admin import submit
from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError


async def _ip_resolves(name: str | None) -> bool:
    if name is None or cq.is_ip_literal(name):
        return True
    try:
        with trio.move_on_after(2.0):
            return bool(await trio.socket.getaddrinfo(name, None))
    except OSError:
        return False
    return False


async def _alter(ctx: RequestContext, entity: cq.Entity, ops: list[tuple[str, float, bool]],
                 validate_only: bool) -> tuple[ErrorCode, str | None]:
    try:
        cq.check_entity(entity, await _ip_resolves(dict(entity).get(cq.IP)))
        cq.check_ops(entity, ops)
        if not validate_only:
            await submit(ctx.controller, {"op": "alter_client_quotas", "name": str(entity),
                                          "entity": [list(p) for p in entity], "ops": ops})
    except cq.QuotaError as e:
        return e.code, e.message
    except TopicError as e:
        return e.code, e.message
    return OK, None


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not _authz.cluster(ctx, _authz.Op.ALTER_CONFIGS):  # every entry answers it
        code = ErrorCode.cluster_authorization_failed
        return ctx.response(throttle_time=NO_THROTTLE, entries=tuple(
            ctx.build("EntryData", error_code=code, error_message=_authz.MESSAGES[code],
                      entity=tuple(ctx.build("EntityData", entity_type=e.entity_type,
                                             entity_name=e.entity_name) for e in entry.entity))
            for entry in request.entries))
    results: dict[cq.Entity, tuple[ErrorCode, str | None]] = {}  # first-seen order
    for entry in request.entries:
        entity = cq.canonical((e.entity_type, e.entity_name) for e in entry.entity)
        ops = [(op.key, float(op.value), op.remove) for op in entry.ops]
        if entity in results or len({key for key, _, _ in ops}) != len(ops):
            # Kafka's controller: an entity met again (its first entry stays
            # done) or a key named twice is "ignored" with this message
            results[entity] = (ErrorCode.invalid_request,
                               f"Ignoring duplicate entity {cq.describe_entity(entity)}")
            continue
        results[entity] = await _alter(ctx, entity, ops, request.validate_only)
    out = tuple(
        ctx.build("EntryData", error_code=code, error_message=message,
                  entity=tuple(ctx.build("EntityData", entity_type=t, entity_name=n)
                               for t, n in entity))
        for entity, (code, message) in results.items())
    return ctx.response(throttle_time=NO_THROTTLE, entries=out)
