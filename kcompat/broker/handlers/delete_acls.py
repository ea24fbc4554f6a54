"""DeleteAcls (key 31), versions 1-3 (v0, without pattern types, Kafka 4 no
longer serves).

Quirks, as Kafka 4.4 answers (measured against the reference broker): no
authorizer answers every filter SECURITY_DISABLED "No Authorizer is
configured."; a requester without ALTER on the cluster gets
UNKNOWN_SERVER_ERROR with a null message for every filter (as CreateAcls). A
filter with an unknown code is INVALID_REQUEST "Unknown patternFilter."
(resource or pattern type) or "Unknown entryFilter." (operation or
permission). Each other filter answers the ACLs of this broker's image it
matches — an ACL two filters match is listed by both — and all of them are
deleted together by one ``acls`` record (``controller.acls``); messages are
null. The answer comes once this broker's image no longer shows them.

Not like Kafka: a code 0 (UNKNOWN) field makes Kafka's broker close the
connection while parsing; kcompat answers it like any unknown code.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers._acls import (
    NO_AUTHORIZER,
    binding_fields,
    binding_filter,
    carry_out,
    may,
)
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError
from kcompat.security import acl

Result = tuple[ErrorCode, str | None, list[acl.AclBinding]]


async def _results(ctx: RequestContext, filters: list[acl.AclBindingFilter]) -> list[Result]:
    if ctx.broker.authorizer is None:
        return [(ErrorCode.security_disabled, NO_AUTHORIZER, [])] * len(filters)
    if not may(ctx, acl.Operation.ALTER):
        return [(ErrorCode.unknown_server_error, None, [])] * len(filters)
    store = ctx.state.metadata.image.acls
    results: list[Result] = []
    for f in filters:
        try:
            acl.check_filter(f)
        except acl.AclError as e:
            results.append((e.code, e.message, []))
            continue
        results.append((OK, None, store.find(f)))
    doomed = list(dict.fromkeys(b for _, _, found in results for b in found))
    if doomed:
        try:
            await carry_out(ctx, [], doomed)
        except TopicError as e:
            results = [(e.code, e.message, []) if code == OK else (code, message, [])
                       for code, message, _ in results]
    return results


async def handle(ctx: RequestContext, request: Any) -> Any:
    results = await _results(ctx, [binding_filter(f) for f in request.filters])
    return ctx.response(throttle_time=NO_THROTTLE, filter_results=tuple(
        ctx.build("DeleteAclsFilterResult", error_code=code, error_message=message,
                  matching_acls=tuple(
                      ctx.build("DeleteAclsMatchingAcl", error_code=OK, error_message=None,
                                resource_type=int(b.resource_type), resource_name=b.name,
                                pattern_type=int(b.pattern_type), **binding_fields(b))
                      for b in found))
        for code, message, found in results))
