"""DescribeAcls (key 29), versions 1-3 (v0, without pattern types, Kafka 4 no
longer serves).

Quirks, as Kafka 4.4 answers (measured against the reference broker): a
requester without DESCRIBE on the cluster gets CLUSTER_AUTHORIZATION_FAILED
("Request ... needs DESCRIBE permission.", Kafka's names its request's
connection there); no authorizer answers SECURITY_DISABLED "No Authorizer is
configured."; else the ACLs of this broker's metadata image the filter
matches (``acl.AclBindingFilter``: null and ANY match anything, MATCH the
patterns covering the named resource, an unknown code nothing), grouped by
resource pattern in the order the ACLs were created, with an empty message.

Not like Kafka: a code 0 (UNKNOWN) field makes Kafka's broker close the
connection while parsing; kcompat matches nothing for it, as for any
unknown code.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers._acls import NO_AUTHORIZER, binding_fields, binding_filter, may
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.security import acl

Pattern = tuple[acl.ResourceType, str, acl.PatternType]


def _denied(ctx: RequestContext) -> str:
    return (f"Request Request(api=DescribeAcls v{ctx.version}, listener={ctx.listener}, "
            f"principal={ctx.principal}, host={ctx.client_host}) needs DESCRIBE permission.")


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not may(ctx, acl.Operation.DESCRIBE):
        return ctx.response(throttle_time=NO_THROTTLE, resources=(),
                            error_code=ErrorCode.cluster_authorization_failed,
                            error_message=_denied(ctx))
    if ctx.broker.authorizer is None:
        return ctx.response(throttle_time=NO_THROTTLE, resources=(),
                            error_code=ErrorCode.security_disabled, error_message=NO_AUTHORIZER)
    grouped: dict[Pattern, list[acl.AclBinding]] = {}
    for b in ctx.state.metadata.image.acls.find(binding_filter(request)):
        grouped.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    resources = tuple(
        ctx.build("DescribeAclsResource", resource_type=int(rt), resource_name=name,
                  pattern_type=int(pt), acls=tuple(
                      ctx.build("AclDescription", **binding_fields(b)) for b in found))
        for (rt, name, pt), found in grouped.items())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message="",
                        resources=resources)
