"""ApiVersions (key 18), versions 0-5.

Quirks: the response header is always v0. A client newer than us gets a
v0-format body with UNSUPPORTED_VERSION and our table, then retries at our
maximum. No finalized features are advertised — in particular not
``transaction.version`` (Transactions V2 stays off in Java clients). A
controller-only node (``process.roles=controller``) lists only the APIs Kafka's
controller listener serves (``versions.CONTROLLER_APIS``), as Kafka's does.

v5 (KIP-1242, Java 4.4): a client that knows which cluster and node it means
to reach names both; if either is not this broker's, the answer is
REBOOTSTRAP_REQUIRED with no API list (the client starts over from its
bootstrap servers), and naming only one of the two is INVALID_REQUEST — as
Kafka 4.4 answers. The v5 request schema is ``kcompat.wire.kio_extra``'s.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.broker.host.context import RequestContext
from kcompat.wire import codec
from kcompat.wire.versions import API_VERSIONS, served


def _api_keys(module: Any, controller_only: bool) -> tuple[Any, ...]:
    return tuple(
        module.ApiVersion(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
        for r in served(controller_only).values()
    )


def _target_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """KIP-1242: the cluster and node the client asked for, if it named them."""
    cluster_id = getattr(request, "cluster_id", None)
    node_id = getattr(request, "node_id", -1)
    if cluster_id is None and node_id < 0:
        return None
    if cluster_id is None or node_id < 0:
        return ErrorCode.invalid_request
    if cluster_id != ctx.state.cluster_id or node_id != ctx.state.node_id:
        return ErrorCode.rebootstrap_required
    return None


async def handle(ctx: RequestContext, request: Any) -> Any:
    if (code := _target_error(ctx, request)) is not None:
        return ctx.response(error_code=code, api_keys=(), throttle_time=NO_THROTTLE)
    return ctx.response(
        error_code=ErrorCode.none,
        api_keys=_api_keys(ctx.resp, ctx.state.controller_only),
        throttle_time=NO_THROTTLE,
    )


def unsupported_version_response(correlation_id: int, controller_only: bool = False) -> bytes:
    module = codec.response_module(API_VERSIONS, 0)
    body = codec.build(
        codec.response_class(API_VERSIONS, 0),
        error_code=ErrorCode.unsupported_version,
        api_keys=_api_keys(module, controller_only),
    )
    return codec.encode_response(API_VERSIONS, 0, correlation_id, body)

