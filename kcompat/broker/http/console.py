"""The web console: a single-page app served by the broker itself at ``/ui``.

Theory of operation
-------------------
The console is three static files shipped inside this package
(``console_assets/``: ``index.html``, ``console.js``, ``console.css``) — no
framework, no build step, no CDN, so it works on a machine with no network.
``/ui`` and ``/ui/`` answer ``index.html``; ``/ui/assets/{name}`` answers one
of the files by its plain name (no sub-directories, no listing, anything else
404). The files are read through ``importlib.resources`` so they are found
wherever the package is installed (a wheel, a zip, an editable checkout), and
read on each request, which costs nothing next to the API calls the page makes.

Everything the page shows comes from the HTTP API on the same origin
(``/v3``, ``/metrics``) with the same authentication: the page sends the
``Authorization`` header the user gave it (basic auth or a bearer token), so
the console can do nothing its user could not do with curl.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

ASSETS = "console_assets"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
#: the page is small and changes with the broker's version: always revalidate
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def _not_found(name: str) -> Response:
    return JSONResponse({"error_code": 404, "message": f"no console asset {name!r}"},
                        status_code=404)


def _asset(name: str) -> Response:
    """The shipped file ``name`` (a plain file name of a known type), or 404."""
    suffix = name[name.rfind("."):] if "." in name else ""
    if not name or "/" in name or "\\" in name or name.startswith(".") \
            or suffix not in CONTENT_TYPES:
        return _not_found(name)
    found = resources.files(__package__ or "kcompat.broker.http").joinpath(ASSETS, name)
    if not found.is_file():
        return _not_found(name)
    return Response(found.read_bytes(), media_type=CONTENT_TYPES[suffix], headers=HEADERS)


async def index(_request: Request) -> Response:
    return _asset("index.html")


async def asset(request: Request) -> Response:
    return _asset(str(request.path_params["name"]))


def routes() -> list[BaseRoute]:
    """The console's routes, to add to the admin port's app."""
    get = ["GET", "HEAD"]
    return [Route("/ui", index, methods=get),
            Route("/ui/", index, methods=get),
            Route("/ui/assets/{name:path}", asset, methods=get)]
