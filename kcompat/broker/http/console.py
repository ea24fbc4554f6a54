"""The web console: a single-page app served by the broker itself at ``/ui``.

Theory of operation
-------------------
The console is three static files shipped inside this package
(``console_assets/``: ``index.html``, ``console.js``, ``console.css``) — no
framework, no build step, no CDN, so it works on a machine with no network.
``/ui`` and ``/ui/`` answer ``index.html``; ``/ui/assets/{name}`` answers one
of the files by its plain name (no sub-directories, no listing, anything else
404). The files are read through ``importlib.resources`` so they are found
wherever the package is installed (a wheel, a zip, an editable checkout), once
per broker process (they ship with the package: a new version is a new
process).

Caching: ``index.html`` names the script and the style sheet with their
content's hash (``/ui/assets/console.js?v=<hash>``), and an asset asked for by
its current hash is answered as immutable for a year, so a browser loads them
once per version and a page loaded again costs one small revalidation of
``index.html`` (``no-cache`` with an ``ETag``: 304) before its API calls. An
asset asked for without the hash, or with another one, is answered
``no-cache``.

Everything the page shows comes from the HTTP API on the same origin
(``/v3``, ``/metrics``) with the same authentication: the page sends the
``Authorization`` header the user gave it (basic auth or a bearer token), so
the console can do nothing its user could not do with curl.
"""

from __future__ import annotations

import functools
import hashlib
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
#: index.html and an asset asked for without its current hash: always revalidate
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
#: an asset asked for by its current hash
IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable",
             "X-Content-Type-Options": "nosniff"}
VERSIONED = ("console.js", "console.css")  # the assets index.html names by hash


def _not_found(name: str) -> Response:
    return JSONResponse({"error_code": 404, "message": f"no console asset {name!r}"},
                        status_code=404)


@functools.lru_cache(maxsize=32)
def _read(name: str) -> tuple[bytes, str] | None:
    """The shipped file ``name`` and its content's hash, or None."""
    found = resources.files(__package__ or "kcompat.broker.http").joinpath(ASSETS, name)
    if not found.is_file():
        return None
    data = found.read_bytes()
    if name == "index.html":
        for asset in VERSIONED:
            shipped = _read(asset)
            if shipped is not None:
                ref = f"/ui/assets/{asset}".encode()
                data = data.replace(ref, ref + b"?v=" + shipped[1].encode())
    return data, hashlib.sha256(data).hexdigest()[:16]


def _asset(request: Request, name: str) -> Response:
    """The shipped file ``name`` (a plain file name of a known type), or 404."""
    suffix = name[name.rfind("."):] if "." in name else ""
    if not name or "/" in name or "\\" in name or name.startswith(".") \
            or suffix not in CONTENT_TYPES:
        return _not_found(name)
    found = _read(name)
    if found is None:
        return _not_found(name)
    data, digest = found
    if request.query_params.get("v") == digest:
        return Response(data, media_type=CONTENT_TYPES[suffix], headers=IMMUTABLE)
    etag = f'"{digest}"'
    headers = {**HEADERS, "ETag": etag}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=CONTENT_TYPES[suffix], headers=headers)


async def index(request: Request) -> Response:
    return _asset(request, "index.html")


async def asset(request: Request) -> Response:
    return _asset(request, str(request.path_params["name"]))


def routes() -> list[BaseRoute]:
    """The console's routes, to add to the admin port's app."""
    get = ["GET", "HEAD"]
    return [Route("/ui", index, methods=get),
            Route("/ui/", index, methods=get),
            Route("/ui/assets/{name:path}", asset, methods=get)]
