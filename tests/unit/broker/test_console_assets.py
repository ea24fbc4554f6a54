"""The console's files: index.html names its script and style sheet by their
content's hash, which are then cached as immutable; index.html itself is
revalidated with an ETag (``http.console``)."""

from __future__ import annotations

import re

import trio
from starlette.requests import Request
from starlette.responses import Response

from kcompat.broker.http import console


def _get(path: str, query: str = "", etag: str | None = None, name: str | None = None
         ) -> Response:
    headers = [(b"if-none-match", etag.encode())] if etag else []
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query.encode(),
             "headers": headers, "path_params": {"name": name} if name else {}}
    handler = console.asset if name else console.index
    return trio.run(handler, Request(scope))


def test_assets_are_named_by_hash_and_cached_while_the_page_revalidates() -> None:
    page = _get("/ui/")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-cache"
    named = dict(re.findall(rb'/ui/assets/(console\.(?:js|css))\?v=([0-9a-f]{16})', page.body))
    assert set(named) == {b"console.js", b"console.css"}
    for asset, digest in named.items():
        name = asset.decode()
        cached = _get(f"/ui/assets/{name}", f"v={digest.decode()}", name=name)
        assert cached.status_code == 200
        assert cached.headers["cache-control"] == "public, max-age=31536000, immutable"
        plain = _get(f"/ui/assets/{name}", name=name)
        stale = _get(f"/ui/assets/{name}", "v=0123456789abcdef", name=name)
        assert plain.body == stale.body == cached.body and len(cached.body) > 1000
        assert plain.headers["cache-control"] == stale.headers["cache-control"] == "no-cache"
    etag = page.headers["etag"]
    again = _get("/ui/", etag=etag)
    assert again.status_code == 304 and again.body == b"" and again.headers["etag"] == etag
    assert _get("/ui/", etag='"something-else"').status_code == 200
    assert _get("/ui/assets/x.py", name="x.py").status_code == 404
