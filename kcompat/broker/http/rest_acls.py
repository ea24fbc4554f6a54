"""REST v3: ACLs — search, create (one or a batch), delete by filter.

Theory of operation
-------------------
Each endpoint is the request Kafka's admin client sends, handled as for one
(``calls``): DescribeAcls for the search, CreateAcls for one ACL or a batch,
DeleteAcls with one filter. The handlers need an authorizer
(``authorizer.class.name``; without, SECURITY_DISABLED: 400, 40002), read
the ACLs of this broker's metadata image and commit changes through the
controller, answering once this broker's image shows them — so what one
broker's REST API created it lists at once, another broker a moment later.

The enums travel by name (``TOPIC``, ``PREFIXED``, ``READ``, ``ALLOW``; any
case on the way in, upper case on the way out) with Kafka's codes
(``kcompat.security.acl``; ``USER`` and the token operations too). Query
filters default to ANY (enums) and null (strings, also when empty), as REST
Proxy's do; UNKNOWN is refused, as it refuses it. An ACL to create is
checked here first — no ANY, MATCH or UNKNOWN where a value is due, then
``acl.check_new``, the handler's own check — so a batch with one bad ACL
creates none (400) rather than the others. Kafka answers a creation or
deletion by a caller without ALTER on the cluster UNKNOWN_SERVER_ERROR with
no message (its broker loses the controller's refusal); that answer is told
apart by asking DescribeCluster for the caller's cluster operations, and is
403 (40301) when ALTER is not among them. An ACL's ``metadata.self`` is the
search URL that finds exactly it (no ``resource_name``: ACLs have no CRN);
lists are sorted by resource type, name, pattern type, principal, host,
operation and permission, as REST Proxy sorts them.
"""

from __future__ import annotations

import urllib.parse
from enum import IntEnum
from typing import Any

from kio.schema.errors import ErrorCode
from starlette.responses import JSONResponse, Response

from kcompat.broker.http.rest import Ctx, RestError, check, kafka_error, need
from kcompat.security import acl
from kcompat.wire import codec
from kcompat.wire import versions as v

VERSION = 3  # DescribeAcls, CreateAcls, DeleteAcls
#: the REST fields, in the order of ``acl.AclBinding``'s and ``acl.AclBindingFilter``'s
FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
          "permission")
_ENUMS: dict[str, type[IntEnum]] = {"resource_type": acl.ResourceType,
                                    "pattern_type": acl.PatternType,
                                    "operation": acl.Operation, "permission": acl.Permission}
#: what an ACL to create may not be (Kafka fails the whole request on the ANYs and MATCH)
_NOT_NEW: dict[str, set[Any]] = {
    "resource_type": {acl.ResourceType.UNKNOWN, acl.ResourceType.ANY},
    "pattern_type": {acl.PatternType.UNKNOWN, acl.PatternType.ANY, acl.PatternType.MATCH},
    "operation": {acl.Operation.UNKNOWN, acl.Operation.ANY},
    "permission": {acl.Permission.UNKNOWN, acl.Permission.ANY}}
_DELETE_REQUIRED = ("resource_type", "pattern_type", "operation", "permission")


def _enum(name: str, raw: str) -> Any:
    kind = _ENUMS[name]
    try:
        return kind[raw.upper()]
    except KeyError:
        raise RestError(400, f"{name} must be one of {', '.join(kind.__members__)}, "
                             f"not {raw!r}") from None


# -- filters and ACLs in ---------------------------------------------------------------------


def _filter(c: Ctx, required: tuple[str, ...] = ()) -> acl.AclBindingFilter:
    """The query's filter: enums ANY and strings null unless given."""
    query = c.request.query_params
    for name in required:
        if query.get(name) is None:
            raise RestError(400, f"query parameter {name} is required")
    values: dict[str, Any] = {}
    for name in FIELDS:
        raw = query.get(name)
        if name not in _ENUMS:
            values[name] = raw or None
            continue
        value = _ENUMS[name]["ANY"] if raw is None else _enum(name, raw)
        if value.name == "UNKNOWN":
            raise RestError(400, f"{name} cannot be UNKNOWN")
        values[name] = value
    return acl.AclBindingFilter(*(values[name] for name in FIELDS))


def _filter_fields(f: acl.AclBindingFilter) -> dict[str, Any]:
    """A filter as DescribeAcls and DeleteAcls' filters carry it."""
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal,
            "host_filter": f.host, "operation": int(f.operation),
            "permission_type": int(f.permission)}


def _new(doc: Any) -> acl.AclBinding:
    """A CreateAclRequestData: all seven fields, an ACL that can exist."""
    values: dict[str, Any] = {}
    for name in FIELDS:
        raw = need(doc, name, str)
        if name in _ENUMS:
            value = _enum(name, raw)
            if value in _NOT_NEW[name]:
                raise RestError(400, f"{name} cannot be {value.name}")
            values[name] = value
        else:
            values[name] = raw
    b = acl.AclBinding(*(values[name] for name in FIELDS))
    try:
        acl.check_new(b)
    except acl.AclError as e:
        raise kafka_error(e.code, e.message) from None
    return b


# -- ACLs out --------------------------------------------------------------------------------


def _key(b: acl.AclBinding) -> tuple[Any, ...]:
    return (b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation,
            b.permission)


def _fields(b: acl.AclBinding) -> dict[str, str]:
    return {"resource_type": b.resource_type.name, "resource_name": b.name,
            "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "permission": b.permission.name}


def _self(c: Ctx, b: acl.AclBinding) -> str:
    """The search URL that finds exactly ``b``."""
    return c.url("acls") + "?" + urllib.parse.urlencode(list(_fields(b).items()))


def _acl(c: Ctx, b: acl.AclBinding) -> dict[str, Any]:
    return {"kind": "KafkaAcl", "metadata": {"self": _self(c, b)}, "cluster_id": c.cluster_id,
            **_fields(b)}


def _binding(resource_type: int, name: str, pattern_type: int, entry: Any) -> acl.AclBinding:
    return acl.AclBinding(acl.resource_type(resource_type), name, acl.pattern_type(pattern_type),
                          entry.principal, entry.host, acl.operation(entry.operation),
                          acl.permission(entry.permission_type))


# -- Kafka's refusals ------------------------------------------------------------------------


def _refusal(code: int, message: str | None) -> bool:
    """Kafka's answer to a creation or deletion by a caller without ALTER."""
    return code == ErrorCode.unknown_server_error and message is None


async def _check_alter(c: Ctx) -> None:
    """403 unless the caller may ALTER the cluster (DescribeCluster's
    authorized operations: none without DESCRIBE, every one without an authorizer)."""
    answer = await c.call(v.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=True)
    if answer.error_code == ErrorCode.none and (
            answer.cluster_authorized_operations & (1 << acl.Operation.ALTER)):
        return
    raise RestError(403, f"{c.caller.principal} (host {c.caller.host or 'unknown'}) is not "
                         "authorized to ALTER the cluster, which creating and deleting ACLs "
                         "needs", 40301)


# -- endpoints -------------------------------------------------------------------------------


async def search_acls(c: Ctx) -> Response:
    f = _filter(c)
    answer = await c.call(v.DESCRIBE_ACLS, VERSION, **_filter_fields(f))
    check(answer.error_code, answer.error_message or None)
    found = [_binding(r.resource_type, r.resource_name, r.pattern_type, e)
             for r in answer.resources for e in r.acls]
    return c.listing("KafkaAclList", [_acl(c, b) for b in sorted(found, key=_key)])


async def _create(c: Ctx, bindings: list[acl.AclBinding]) -> None:
    if not bindings:
        return
    mod = codec.request_module(v.CREATE_ACLS, VERSION)
    answer = await c.call(v.CREATE_ACLS, VERSION, creations=tuple(mod.AclCreation(
        resource_type=int(b.resource_type), resource_name=b.name,
        resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
        operation=int(b.operation), permission_type=int(b.permission)) for b in bindings))
    failed = [(r, b) for r, b in zip(answer.results, bindings, strict=True)
              if r.error_code != ErrorCode.none]
    if any(_refusal(r.error_code, r.error_message) for r, _ in failed):
        await _check_alter(c)
    for r, b in failed:
        check(r.error_code, r.error_message, _self(c, b))


async def create_acl(c: Ctx) -> Response:
    b = _new(await c.body())
    await _create(c, [b])
    return Response(status_code=201, headers={"Location": _self(c, b)})


async def create_acls(c: Ctx) -> Response:
    bindings = []
    for i, item in enumerate(need(await c.body(), "data", list)):
        try:
            bindings.append(_new(item))
        except RestError as e:
            raise RestError(e.status, f"data[{i}]: {e.message}", e.code) from None
    await _create(c, bindings)
    return Response(status_code=201)


async def delete_acls(c: Ctx) -> Response:
    f = _filter(c, _DELETE_REQUIRED)
    mod = codec.request_module(v.DELETE_ACLS, VERSION)
    answer = await c.call(v.DELETE_ACLS, VERSION,
                          filters=(mod.DeleteAclsFilter(**_filter_fields(f)),))
    result = answer.filter_results[0]
    if _refusal(result.error_code, result.error_message):
        await _check_alter(c)
    check(result.error_code, result.error_message)
    deleted = []
    for m in result.matching_acls:
        check(m.error_code, m.error_message)
        deleted.append(_binding(m.resource_type, m.resource_name, m.pattern_type, m))
    return JSONResponse({"data": [_acl(c, b) for b in sorted(deleted, key=_key)]})


def routes() -> list[tuple[str, Any, str]]:
    """(path under ``/v3``, handler taking a ``Ctx``, method)."""
    acls = "/clusters/{cluster_id}/acls"
    return [(acls, search_acls, "GET"), (acls, create_acl, "POST"),
            (acls + ":batch", create_acls, "POST"), (acls, delete_acls, "DELETE")]
