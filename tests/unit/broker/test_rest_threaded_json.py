"""A large REST listing is encoded in a worker thread as it is sent
(``http.rest.ThreadedJSON``), with the bytes and headers JSONResponse gives."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
from starlette.responses import JSONResponse

from kcompat.broker.http import rest


def _send(response: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    trio.run(response, {"type": "http"}, receive, send)
    return sent


def test_a_large_listing_is_encoded_off_the_loop_with_jsonresponses_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    content = {"kind": "KafkaTopicList", "data": [{"topic_name": f"t{i}", "é": i}
                                                  for i in range(rest.THREADED_ITEMS + 1)]}
    threads: list[str] = []
    render = JSONResponse.render

    def spy(self: JSONResponse, value: Any) -> bytes:
        threads.append(threading.current_thread().name)
        return render(self, value)

    monkeypatch.setattr(JSONResponse, "render", spy)
    start, body = _send(rest.ThreadedJSON(content))
    encoded_in = list(threads)
    expected = JSONResponse(content)
    assert body["body"] == expected.body
    assert sorted(start["headers"]) == sorted(expected.raw_headers)
    assert len(encoded_in) == 1 and encoded_in[0] != threading.main_thread().name


def test_listings_past_the_bound_are_threaded() -> None:
    class Ctx:
        request = type("R", (), {"url": "http://x/v3/t"})()
        listing = rest.Ctx.listing

    small = Ctx().listing("K", [{}] * rest.THREADED_ITEMS)
    large = Ctx().listing("K", [{}] * (rest.THREADED_ITEMS + 1))
    assert type(small) is JSONResponse and type(large) is rest.ThreadedJSON
