"""BrokerMetrics on the request path and the admin HTTP routes, in process."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kcompat.broker import config
from kcompat.broker.admin_http import route
from kcompat.broker.broker import Broker
from kcompat.broker.metrics import BrokerMetrics
from kcompat.testing import running


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


def test_routes(tmp_path: Path) -> None:
    broker = Broker(config.load(None, {"log.dirs": str(tmp_path)}, {}))
    try:
        running.run(broker, lambda: running.create_topic(broker, "t", 2))
        status, _ctype, body = route(broker, "GET", "/health")
        assert status == 503 and json.loads(body)["ready"] is False  # not serving yet
        assert route(broker, "GET", "/health/live")[0] == 200
        broker.metrics.ready = True
        assert route(broker, "GET", "/health?verbose=1")[0] == 200
        status, _ctype, body = route(broker, "GET", "/metrics")
        assert status == 200
        assert b'kcompat_partition_log_end_offset{partition="1",topic="t"} 0.0' in body
        assert route(broker, "POST", "/metrics")[0] == 405
        assert route(broker, "GET", "/")[0] == 404
    finally:
        broker.close()
