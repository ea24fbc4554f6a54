"""The ASGI app of the admin port: who may ask, and which endpoint answers.

Every request first passes ``_Auth``: with ``admin.token`` set it must bear
that token (``Authorization: Bearer``), else 401. The operator's endpoints
(``ops``) are at the root; the REST API (``rest_admin``, ``rest_records``) is
under ``/v3`` and, as Confluent Server serves it, ``/kafka/v3``. A REST
endpoint's ``RestError`` and any unexpected exception become REST Proxy's
error body (``{"error_code", "message"}``); the exception is logged, the
broker and the connection carry on.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kcompat.broker.host.broker import Broker
from kcompat.broker.http import ops, rest_admin, rest_groups, rest_records
from kcompat.broker.http.rest import Ctx, RestError
from kcompat.broker.loop.loop_monitor import labelled

log = logging.getLogger("kcompat.http")

PREFIXES = ("/v3", "/kafka/v3")


class _Auth:
    """401 unless the request bears ``admin.token`` (when one is set)."""

    def __init__(self, app: ASGIApp, broker: Broker) -> None:
        self.app = app
        self.broker = broker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = self.broker.config["admin.token"]
        if scope["type"] == "http" and token and not _bears(scope, token):
            answer = JSONResponse({"error_code": 401, "message": "admin.token required"},
                                  status_code=401,
                                  headers={"WWW-Authenticate": 'Bearer realm="kcompat"'})
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _bears(scope: Scope, token: str) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, given = value.decode("latin-1").strip().partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)
    return False


def _endpoint(broker: Broker, prefix: str, handler: Callable[[Ctx], Awaitable[Response]]
              ) -> Callable[[Request], Awaitable[Response]]:
    async def answer(request: Request) -> Response:
        c = Ctx(broker, request, prefix)
        try:
            c.check_cluster()
            with labelled("REST " + handler.__name__):
                return await handler(c)
        except RestError as e:
            return e.response()
        except Exception:  # a bug: answered as one, never a dropped connection
            log.exception("REST %s %s failed", request.method, request.url.path)
            return JSONResponse({"error_code": 500, "message": "Internal Server Error"},
                                status_code=500)
    return answer


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error_code": exc.status_code,
                         "message": f"HTTP {exc.status_code} {exc.detail}"},
                        status_code=exc.status_code, headers=exc.headers)


def build_app(broker: Broker) -> Any:
    routes = list(ops.routes(broker))
    for prefix in PREFIXES:
        for path, handler, method in (rest_admin.routes() + rest_records.routes()
                                      + rest_groups.routes()):
            routes.append(Route(prefix + path, _endpoint(broker, prefix, handler),
                                methods=[method]))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    return _Auth(app, broker)
