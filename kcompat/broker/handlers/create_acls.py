"""CreateAcls (key 30), versions 1-3 (v0, without pattern types, Kafka 4 no
longer serves).

Quirks, as Kafka 4.4 answers (measured against the reference broker): no
authorizer (``authorizer.class.name`` unset) answers every creation
SECURITY_DISABLED "No Authorizer is configured."; a requester without ALTER
on the cluster gets UNKNOWN_SERVER_ERROR with a null message for every
creation (Kafka's broker forwards the request and loses its controller's
CLUSTER_AUTHORIZATION_FAILED on the way back); a creation with ANY where a
value is due (resource type, operation, permission) or a MATCH or ANY
pattern type fails the whole request the same way, nothing created. Each
other creation is checked (``acl.check_new``: INVALID_REQUEST with Kafka's
message — a CLUSTER resource not named ``kafka-cluster``, an empty name, an
unknown code, a principal without a colon, an empty host); the valid ones are
created together by one ``acls`` record (``controller.acls``), a binding that
exists already succeeding. Success carries an empty message, as Kafka's does.
The answer comes once this broker's image shows the new ACLs.

Not like Kafka: a code 0 (UNKNOWN) field makes Kafka's broker close the
connection while parsing; kcompat answers it like any unknown code
(INVALID_REQUEST "Invalid resourceType UNKNOWN"...).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers._acls import NO_AUTHORIZER, binding, carry_out, may
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError
from kcompat.security import acl

Result = tuple[ErrorCode, str | None]


async def _results(ctx: RequestContext, bindings: list[acl.AclBinding]) -> list[Result]:
    if ctx.broker.authorizer is None:
        return [(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(bindings)
    if not may(ctx, acl.Operation.ALTER) or any(map(acl.rejects_whole_request, bindings)):
        return [(ErrorCode.unknown_server_error, None)] * len(bindings)
    results: list[Result] = []
    valid = []
    for b in bindings:
        try:
            acl.check_new(b)
        except acl.AclError as e:
            results.append((e.code, e.message))
            continue
        results.append((OK, ""))
        valid.append(b)
    if valid:
        try:
            await carry_out(ctx, valid, [])
        except TopicError as e:
            results = [(e.code, e.message) if code == OK else (code, message)
                       for code, message in results]
    return results


async def handle(ctx: RequestContext, request: Any) -> Any:
    results = await _results(ctx, [binding(c) for c in request.creations])
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(
        ctx.build("AclCreationResult", error_code=code, error_message=message)
        for code, message in results))
