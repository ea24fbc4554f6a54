"""The ASGI app of the admin port: who may ask, and which endpoint answers.

Every request first passes ``_Auth``. A REST request (``/v3``) with HTTP
basic auth acts as the user it names once ``auth.BasicAuth`` has checked the
password as SASL would; without, it acts as ``User:ANONYMOUS`` — refused
(401, 40101) when the broker has SASL listeners, and otherwise held to the
operator's rule: with ``admin.token`` set every request must bear that token
(``Authorization: Bearer``), else 401. The operator's endpoints
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
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kcompat.broker.host.broker import Broker
from kcompat.broker.http import (
    console,
    ops,
    rest_acls,
    rest_admin,
    rest_ext,
    rest_groups,
    rest_overview,
    rest_read,
    rest_records,
    rest_shares,
)
from kcompat.broker.http.auth import BasicAuth
from kcompat.broker.http.calls import Caller
from kcompat.broker.http.rest import Ctx, RestError
from kcompat.broker.loop.loop_monitor import labelled

log = logging.getLogger("kcompat.http")

PREFIXES = ("/v3", "/kafka/v3")


class _Auth:
    """Who the request acts for (``scope["kcompat.caller"]``), or 401."""

    def __init__(self, app: ASGIApp, broker: Broker) -> None:
        self.app = app
        self.broker = broker
        self.basic = BasicAuth(broker)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _authorization(scope)
        client = scope.get("client") or ("", 0)
        path = scope["path"]
        rest = any(path.startswith(p + "/") or path == p for p in PREFIXES)
        if path == "/ui" or path.startswith("/ui/"):
            # the console's page and assets are static files a browser must load
            # before it can ask for credentials; every API call it makes is checked
            await self.app(scope, receive, send)
            return
        if rest and given.lower().startswith("basic "):
            principal = await self.basic.principal(given)
            if principal is None:
                await _refuse(scope, receive, send, 40101, "Authentication failed", "Basic")
                return
            scope["kcompat.caller"] = Caller(principal, client[0])
        elif rest and self.basic.required:
            await _refuse(scope, receive, send, 40101,
                          "Authentication required: HTTP basic auth with a SASL user", "Basic")
            return
        else:
            token = self.broker.config["admin.token"]
            if token and not _bears(given, token):
                await _refuse(scope, receive, send, 401, "admin.token required", "Bearer")
                return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, code: int, message: str,
                  scheme: str) -> None:
    answer = JSONResponse({"error_code": code, "message": message}, status_code=401,
                          headers={"WWW-Authenticate": f'{scheme} realm="kcompat"'})
    await answer(scope, receive, send)


def _authorization(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return str(value.decode("latin-1")).strip()
    return ""


def _bears(given: str, token: str) -> bool:
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                              token.encode())


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
    routes: list[BaseRoute] = list(ops.routes(broker))
    for prefix in PREFIXES:
        for path, handler, method in (rest_admin.routes() + rest_records.routes()
                                      + rest_groups.routes() + rest_read.routes()
                                      + rest_ext.routes() + rest_acls.routes()
                                      + rest_shares.routes() + rest_overview.routes()):
            routes.append(Route(prefix + path, _endpoint(broker, prefix, handler),
                                methods=[method]))
    routes += console.routes()  # /ui: the console's page and its assets
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    return _Auth(app, broker)
