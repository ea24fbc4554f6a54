"""BrokerMetrics on the request path and the admin HTTP routes, in process."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path

import pytest
import trio
from prometheus_client import generate_latest

from kcompat.broker.config import broker_config as config
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.metrics import BrokerMetrics
from kcompat.broker.http import ops
from kcompat.broker.http.app import build_app
from kcompat.testing import running


async def asgi(app: object, method: str, path: str, body: bytes = b"",
               headers: tuple[tuple[bytes, bytes], ...] = ()) -> tuple[int, str, bytes]:
    """One request through an ASGI app, in process: (status, content type, body)."""
    raw_path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": raw_path,
             "raw_path": raw_path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"test"), *headers], "client": ("127.0.0.1", 1),
             "server": ("test", 80)}
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    out: dict[str, object] = {"body": b""}

    async def receive() -> dict[str, object]:
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["type"] = dict(message["headers"]).get(b"content-type", b"").decode()
        else:
            out["body"] = out["body"] + message.get("body", b"")  # type: ignore[operator]

    await app(scope, receive, send)  # type: ignore[operator]
    return out["status"], out["type"], out["body"]  # type: ignore[return-value]


def frame(api_key: int, version: int) -> bytes:
    return struct.pack(">hhi", api_key, version, 1) + b"\x00\x00"


def sample(m: BrokerMetrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_requests_errors_and_bounded_labels() -> None:
    m = BrokerMetrics()
    with m.request(frame(0, 9)):
        pass
    with pytest.raises(RuntimeError), m.request(frame(0, 9)):
        raise RuntimeError("handler bug")
    for bogus in (frame(30000, 1), frame(30001, 2), b"\x00"):
        with m.request(bogus):
            pass
    with m.request(frame(0, 999)):
        pass
    assert sample(m, "kcompat_requests_total", api="Produce", version="9") == 2
    assert sample(m, "kcompat_request_errors_total", api="Produce", version="9") == 1
    assert sample(m, "kcompat_requests_total", api="Unknown", version="unsupported") == 3
    assert sample(m, "kcompat_requests_total", api="Produce", version="unsupported") == 1
    assert sample(m, "kcompat_request_latency_seconds_count", api="Produce") == 3


def test_inter_broker_frames_have_a_label_of_their_own() -> None:
    """A peer broker's Raft frames (API key 1000) are counted as such, one
    label whatever version their header carries, not as unknown requests."""
    m = BrokerMetrics()
    for version in (0, 7, 30000):
        with m.request(frame(1000, version)):
            pass
    assert sample(m, "kcompat_requests_total", api="InterBroker", version="0") == 3
    assert sample(m, "kcompat_requests_total", api="Unknown", version="unsupported") == 0


def test_routes(tmp_path: Path) -> None:
    broker = Broker(config.load(None, {"log.dirs": str(tmp_path)}, {}))
    try:
        running.run(broker, lambda: running.create_topic(broker, "t", 2))
        app = build_app(broker)

        def route(method: str, path: str) -> tuple[int, str, bytes]:
            return trio.run(asgi, app, method, path)

        status, _ctype, body = route("GET", "/health")
        assert status == 503 and json.loads(body)["ready"] is False  # not serving yet
        assert route("GET", "/health/live")[0] == 200
        broker.metrics.ready = True
        assert route("GET", "/health?verbose=1")[0] == 200
        status, _ctype, body = route("GET", "/metrics")
        assert status == 200
        assert b'kcompat_partition_log_end_offset{partition="1",topic="t"} 0.0' in body
        assert route("POST", "/metrics")[0] == 405
        status, ctype, body = route("GET", "/")
        assert status == 404 and ctype == "application/json"
        assert json.loads(body) == {"error_code": 404, "message": "HTTP 404 Not Found"}
        broker.config.values["admin.token"] = "s3cret"
        assert route("GET", "/health")[0] == 401
        assert route("GET", "/v3/clusters")[0] == 401
        # the console's page and assets load without it (a browser cannot send the
        # token before the page that asks for it); its API calls still need it
        status, ctype, page = route("GET", "/ui")
        assert status == 200 and ctype.startswith("text/html") and b"console.js" in page
        assert route("GET", "/ui/assets/console.js")[0] == 200
        assert route("GET", "/ui/assets/../ops.py")[0] == 404
        assert trio.run(asgi, app, "GET", "/health", b"",
                        ((b"authorization", b"Bearer s3cret"),))[0] == 200
    finally:
        broker.close()


def test_the_metrics_text_is_formatted_off_the_event_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape collects on the loop and formats in a worker thread (~100 ms
    with a few hundred topics); the text is what the registry gives."""
    broker = Broker(config.load(None, {"log.dirs": str(tmp_path)}, {}))
    formatted_in: list[int] = []

    def spy(registry: object) -> bytes:
        formatted_in.append(threading.get_ident())
        return generate_latest(registry)  # type: ignore[arg-type]

    monkeypatch.setattr(ops, "generate_latest", spy)
    try:
        running.run(broker, lambda: running.create_topic(broker, "t", 2))

        async def scrape() -> tuple[int, bytes, bytes]:
            status, _ctype, body = await asgi(build_app(broker), "GET", "/metrics")
            return status, body, generate_latest(broker.metrics.registry)

        status, body, direct = trio.run(scrape)
        assert status == 200
        assert formatted_in and threading.get_ident() not in formatted_in
        assert b'kcompat_partition_log_end_offset{partition="1",topic="t"} 0.0' in body

        def names(text: bytes) -> list[bytes]:
            return [line.split(b" ")[0] for line in text.splitlines()
                    if not line.startswith(b"#")]
        assert names(body) == names(direct)  # the series of a scrape made in one go
    finally:
        broker.close()


def test_per_partition_gauges_take_a_tuple_per_partition_on_the_loop() -> None:
    """A scrape's collection runs on the event loop: the per-partition gauges
    read each partition's figures into a tuple there and make their samples
    only when read — in the exposition's worker thread — in partition order,
    as ``GaugeMetricFamily`` would have (ten thousand partitions: ~70 ms held
    on the loop before, a few ms now)."""
    from types import SimpleNamespace

    from kcompat.broker.host.metrics import PartitionGauge, StateCollector

    def part(end: int) -> SimpleNamespace:
        return SimpleNamespace(log=SimpleNamespace(log_start_offset=1, log_end_offset=end,
                                                   size_bytes=10 * end),
                               high_watermark=end - 1, dedup=None)

    state = SimpleNamespace(partitions={("t", 10): part(7), ("b", 2): part(5), ("t", 9): part(3)})
    gauges = StateCollector(state, None)._partitions()  # type: ignore[arg-type]
    assert all(isinstance(g, PartitionGauge) and g._made is None for g in gauges)
    state.partitions[("t", 10)] = part(100)  # read at collection, not later
    by_name = {g.name: [(s.labels["topic"], s.labels["partition"], s.value) for s in g.samples]
               for g in gauges}
    assert by_name["kcompat_partition_log_end_offset"] == [("b", "2", 5), ("t", "9", 3),
                                                          ("t", "10", 7)]
    assert by_name["kcompat_partition_high_watermark"] == [("b", "2", 4), ("t", "9", 2),
                                                          ("t", "10", 6)]
    assert by_name["kcompat_partition_size_bytes"][2] == ("t", "10", 70)
    assert by_name["kcompat_partition_log_start_offset"][0] == ("b", "2", 1)
    text = generate_latest(SimpleNamespace(collect=lambda: gauges))  # type: ignore[arg-type]
    assert b'kcompat_partition_log_end_offset{partition="10",topic="t"} 7.0' in text
