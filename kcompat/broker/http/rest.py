"""What every REST v3 endpoint shares: errors, links, the body, the calls.

The shapes are Confluent REST Proxy v3's: a resource is ``{"kind":
"KafkaTopic", "metadata": {"self": url, "resource_name": "crn:///..."},
...}``, a list ``{"kind": "KafkaTopicList", "metadata": {"self": url,
"next": null}, "data": [...]}``, links to related resources ``{"related":
url}``, and an error ``{"error_code": N, "message": "..."}`` whose code is the
HTTP status, or that status times 100 plus a detail as REST Proxy numbers
them: 40002 a Kafka request refused as bad (a topic that exists, an invalid
config), 40301 not authorized, 40403 an unknown topic or partition, 50003 a
retriable Kafka error (no leader yet, a timeout).
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any

import trio
from kio.schema.errors import ErrorCode
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kcompat.broker.host.broker import Broker
from kcompat.broker.http import calls
from kcompat.broker.http.calls import Caller

BODY_BYTES_MAX = 16 << 20
#: a listing of more items is encoded in a worker thread as it is sent, not on the loop
THREADED_ITEMS = 500


class ThreadedJSON(JSONResponse):
    """A JSON answer encoded in a worker thread when it is sent: a listing of
    ten thousand topics takes tens of milliseconds to encode, which would
    hold the broker's event loop (issue 31: no step over 50 ms). The bytes
    are JSONResponse's."""

    def __init__(self, content: Any, status_code: int = 200) -> None:
        self._content = content
        super().__init__(None, status_code)

    def render(self, content: Any) -> bytes:
        return b"" if content is None else super().render(content)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.body = await trio.to_thread.run_sync(super().render, self._content)
        self.init_headers()
        await super().__call__(scope, receive, send)


class RestError(Exception):
    """An answer other than success: ``{"error_code", "message"}``."""

    def __init__(self, status: int, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code if code is not None else status
        self.message = message

    def response(self) -> JSONResponse:
        return JSONResponse({"error_code": self.code, "message": self.message},
                            status_code=self.status)


_AUTHORIZATION = {ErrorCode.topic_authorization_failed, ErrorCode.cluster_authorization_failed,
                  ErrorCode.group_authorization_failed,
                  ErrorCode.transactional_id_authorization_failed}
_NOT_FOUND = {ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id}
RETRIABLE = 50003  # the REST error code of a retriable Kafka error


def kafka_error(code: ErrorCode, message: str | None, what: str = "") -> RestError:
    """The REST error for a Kafka error code, with the broker's message."""
    text = message or f"{code.name.upper()}" + (f": {what}" if what else "")
    if code in _NOT_FOUND:
        return RestError(404, text, 40403)
    if code in _AUTHORIZATION:
        return RestError(403, text, 40301)
    if code in (ErrorCode.group_id_not_found,):
        return RestError(404, text, 404)
    if code.retriable:
        return RestError(500, text, RETRIABLE)
    if code in (ErrorCode.unknown_server_error,):
        return RestError(500, text, 50002)
    return RestError(400, text, 40002)


def check(code: int, message: str | None = None, what: str = "") -> None:
    """Raise the REST error of a Kafka error code (nothing for NONE)."""
    error = ErrorCode(code)
    if error != ErrorCode.none:
        raise kafka_error(error, message, what)


class Ctx:
    """One HTTP request's view: the broker, who asks, and the links' base."""

    def __init__(self, broker: Broker, request: Request, prefix: str = "/v3") -> None:
        self.broker = broker
        self.request = request
        self.caller: Caller = request.scope.get("kcompat.caller") or Caller(
            host=request.client.host if request.client else "")
        self.base = str(request.base_url).rstrip("/") + prefix
        self.cluster_id = broker.state.cluster_id
        self._root = f"{self.base}/clusters/{self.cluster_id}"
        self._crn_root = f"crn:///kafka={self.cluster_id}"

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])

    def int_param(self, name: str) -> int:
        raw = self.param(name)
        try:
            return int(raw)
        except ValueError:
            raise RestError(400, f"{name} must be an integer, not {raw!r}") from None

    def query_int(self, name: str, default: int | None = None) -> int | None:
        raw = self.request.query_params.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise RestError(400, f"query parameter {name} must be an integer, not {raw!r}"
                            ) from None

    def url(self, *parts: object) -> str:
        return "/".join([self._root, *map(str, parts)])

    def crn(self, *pairs: tuple[str, object]) -> str:
        return "/".join([self._crn_root, *(f"{k}={v}" for k, v in pairs)])

    def resource(self, kind: str, self_url: str, crn: str | None, **fields: Any
                 ) -> dict[str, Any]:
        return {"kind": kind, "metadata": {"self": self_url, "resource_name": crn}, **fields}

    def related(self, *parts: object) -> dict[str, str]:
        return {"related": self.url(*parts)}

    def listing(self, kind: str, data: list[dict[str, Any]]) -> JSONResponse:
        body = {"kind": kind, "metadata": {"self": str(self.request.url), "next": None},
                "data": data}
        return ThreadedJSON(body) if len(data) > THREADED_ITEMS else JSONResponse(body)

    def check_cluster(self) -> None:
        given = self.request.path_params.get("cluster_id")
        if given is not None and given != self.cluster_id:
            raise RestError(404, f"Cluster {given} cannot be found.")

    async def call(self, api_key: int, version: int, node: int = -1, size: int = 0,
                   **fields: Any) -> Any:
        try:
            return await calls.call(self.broker, self.caller, api_key, version, node, size,
                                    **fields)
        except calls.CallFailed as e:
            raise kafka_error(e.code, str(e)) from None

    async def raw_body(self) -> bytes:
        """The request's body, read no further than ``BODY_BYTES_MAX`` (413 past it)."""
        declared = self.request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > BODY_BYTES_MAX:
            raise RestError(413, f"the body is over {BODY_BYTES_MAX} bytes")
        chunks, size = [], 0
        async for chunk in self.request.stream():
            size += len(chunk)
            if size > BODY_BYTES_MAX:
                raise RestError(413, f"the body is over {BODY_BYTES_MAX} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def body(self) -> Any:
        raw = await self.raw_body()
        if not raw.strip():
            raise RestError(400, "a JSON body is required")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RestError(400, f"the body is not JSON: {e}") from None


def need(doc: Any, name: str, kind: type | tuple[type, ...], required: bool = True,
         default: Any = None) -> Any:
    """Field ``name`` of a JSON object, checked for its type (bool is no int)."""
    if not isinstance(doc, dict):
        raise RestError(400, "the body must be a JSON object")
    value = doc.get(name)
    if value is None:
        if required:
            raise RestError(400, f"{name} is required")
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise RestError(400, f"{name} must be {names}, not {json.dumps(value)}")
    return value


@functools.lru_cache(maxsize=4096)  # the records of a body or a page mostly share their ms
def iso_ms(ms: int) -> str:
    """Epoch milliseconds as REST Proxy writes a time: ISO 8601, UTC, ``Z``."""
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def no_content() -> Response:
    return Response(status_code=204)
