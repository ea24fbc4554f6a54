"""Kafka requests made by the HTTP API, handled in-process or by the right broker.

Theory of operation
-------------------
The REST API does not speak the Kafka protocol to itself: it builds the
request a Kafka client would send (a kio entity) and hands it to that API's
handler with a ``RequestContext`` naming the HTTP caller's principal — the
same validation, ACLs, quotas and extension headers as from any client, and
no encoding on the way. A request that another broker must handle (the
partition's leader, the group's coordinator) travels there in an envelope
over the authenticated peer link (``PeerCalls.envelope``), encoded with kio,
and is handled there the same way (``serve_envelope``). A handler never
answers ``Later`` here: that is for a client connection's long polls.

What the Kafka protocol has no request for — the delayed records a schedule
partition's leader holds, a share-partition's records in flight — is a
*query* (``queries``, JSON in and out) that
travels in the same envelope under an API key of kcompat's own
(``HTTP_QUERY``), asked of every broker that may hold part of the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.broker.http.queries import QUERIES
from kcompat.broker.net.zero_copy import with_bytes
from kcompat.security.principal import ANONYMOUS
from kcompat.wire import codec
from kcompat.wire.versions import FETCH

CLIENT_ID = "kcompat-http"
HTTP_QUERY = 1001  # an envelope's API key for the queries below (not a Kafka API)
ENVELOPE_TIMEOUT_S = 35.0  # above a produce's own 30 s request timeout


@dataclass(frozen=True)
class Caller:
    """Who an HTTP request acts for."""

    principal: str = ANONYMOUS
    host: str = ""


class CallFailed(Exception):
    """The broker that had to handle it could not be reached or failed."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def call(broker: Broker, caller: Caller, api_key: int, version: int, node: int = -1,
               size: int = 0, **fields: Any) -> Any:
    """The response to ``api_key`` v``version`` built from ``fields``, handled
    by broker ``node`` (-1 or this one: here). ``size``: the request's bytes
    as quotas count them (a produce's batches; elsewhere the encoded body)."""
    request = codec.build(codec.request_class(api_key, version), **fields)
    if node < 0 or node == broker.state.node_id:
        return await _local(broker, caller.principal, caller.host, api_key, version, request,
                            size)
    code, body = await broker.calls.envelope(node, caller.principal, caller.host, api_key,
                                             version, codec.encode_body(request),
                                             ENVELOPE_TIMEOUT_S)
    if code != ErrorCode.none:
        raise CallFailed(code, f"broker {node} did not handle the request: {code.name}")
    return codec.decode_body(codec.response_class(api_key, version), body)


async def query(broker: Broker, caller: Caller, node: int, name: str,
                args: dict[str, Any]) -> Any:
    """What broker ``node`` answers to query ``name`` (JSON values)."""
    if node < 0 or node == broker.state.node_id:
        return await QUERIES[name](broker, args)
    body = json.dumps({"query": name, "args": args}).encode()
    code, answer = await broker.calls.envelope(node, caller.principal, caller.host, HTTP_QUERY,
                                               0, body, ENVELOPE_TIMEOUT_S)
    if code != ErrorCode.none:
        raise CallFailed(code, f"broker {node} did not answer the query: {code.name}")
    return json.loads(answer)


async def _local(broker: Broker, principal: str, host: str, api_key: int, version: int,
                 request: Any, size: int) -> Any:
    listener = broker.listeners[0].name if broker.listeners else ""
    ctx = RequestContext(broker, api_key, version, 0, CLIENT_ID, host, principal, listener,
                         None, size)
    response = await HANDLERS[api_key](ctx, request)
    if api_key == FETCH and response is not None:
        response = with_bytes(response)
    return response


async def serve_envelope(broker: Broker, principal: str, host: str, api_key: int,
                         version: int, body: bytes) -> bytes:
    """Another broker's HTTP API asks this one to handle a request."""
    if api_key == HTTP_QUERY:
        doc = json.loads(body)
        return json.dumps(await QUERIES[doc["query"]](broker, doc["args"])).encode()
    request = codec.decode_body(codec.request_class(api_key, version), body)
    response = await _local(broker, principal, host, api_key, version, request, len(body))
    return codec.encode_body(response)
