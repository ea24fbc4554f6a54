"""What CreateAcls, DescribeAcls and DeleteAcls share: request fields read as
``kcompat.security.acl`` values (a code Kafka does not know is UNKNOWN), the
answers without an authorizer or permission, and the wait until this
broker's metadata image shows a committed change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from kcompat.broker.controller import acls as controller_acls
from kcompat.broker.controller.admin import submit
from kcompat.broker.host.context import RequestContext
from kcompat.security import acl

NO_AUTHORIZER = "No Authorizer is configured."
#: how long an answer waits for this broker's image to show a committed change
#: (the controller committed it; a follower applies it a moment later)
APPLY_WAIT_S = 5.0


def binding(c: Any) -> acl.AclBinding:
    """A CreateAcls creation."""
    return acl.AclBinding(acl.resource_type(c.resource_type), c.resource_name,
                          acl.pattern_type(c.resource_pattern_type), c.principal, c.host,
                          acl.operation(c.operation), acl.permission(c.permission_type))


def binding_filter(f: Any) -> acl.AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter (the same fields)."""
    return acl.AclBindingFilter(acl.resource_type(f.resource_type_filter),
                                f.resource_name_filter, acl.pattern_type(f.pattern_type_filter),
                                f.principal_filter, f.host_filter, acl.operation(f.operation),
                                acl.permission(f.permission_type))


def binding_fields(b: acl.AclBinding) -> dict[str, Any]:
    """A binding as DescribeAcls and DeleteAcls answer its entry."""
    return {"principal": b.principal, "host": b.host, "operation": int(b.operation),
            "permission_type": int(b.permission)}


def may(ctx: RequestContext, operation: acl.Operation) -> bool:
    """The requester may ``operation`` the cluster (ALTER to create and delete
    ACLs, DESCRIBE to describe them)."""
    return ctx.authorize(operation, acl.ResourceType.CLUSTER, acl.CLUSTER_NAME)


async def carry_out(ctx: RequestContext, create: list[acl.AclBinding],
                    delete: list[acl.AclBinding]) -> None:
    """Commit the change through the controller (``TopicError`` if it fails),
    then wait (bounded) until this broker's image shows it."""
    await submit(ctx.controller, controller_acls.intent(create, delete))
    store = ctx.state.metadata.image.acls
    await _until(ctx, lambda: all(b in store for b in create)
                 and not any(b in store for b in delete))


async def _until(ctx: RequestContext, done: Callable[[], bool]) -> None:
    with trio.move_on_after(APPLY_WAIT_S):
        while not done():
            await trio.sleep(ctx.cluster.tick_s)
