"""ApiVersions (key 18), versions 0-4.

Quirks: the response header is always v0. A client newer than us (Java 4.4
sends v5) gets a v0-format body with UNSUPPORTED_VERSION and our table, then
retries at our maximum. No finalized features are advertised — in particular
not ``transaction.version`` (Transactions V2 stays off in Java clients).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.wire import codec
from kcompat.wire.versions import API_RANGES, API_VERSIONS


def _api_keys(module: Any) -> tuple[Any, ...]:
    return tuple(
        module.ApiVersion(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
        for r in API_RANGES.values()
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    return ctx.response(
        error_code=ErrorCode.none,
        api_keys=_api_keys(ctx.resp),
        throttle_time=NO_THROTTLE,
    )


def unsupported_version_response(correlation_id: int) -> bytes:
    module = codec.response_module(API_VERSIONS, 0)
    body = codec.build(
        codec.response_class(API_VERSIONS, 0),
        error_code=ErrorCode.unsupported_version,
        api_keys=_api_keys(module),
    )
    return codec.encode_response(API_VERSIONS, 0, correlation_id, body)

