"""The operator's endpoints: ``/metrics`` (Prometheus) and ``/health`` (JSON).

* ``/metrics`` — the broker's own ``CollectorRegistry`` in the Prometheus text
  format (partition and group gauges are computed during the scrape). The
  scrape collects on the event loop (collectors read the broker's state) and
  formats the text in a worker thread (``exposition``): with a few hundred
  topics formatting took ~100 ms, one step that held the loop every scrape;
* ``/health`` — ``{"live": true, "ready": ...}`` plus node and cluster ids;
  200 when ready, 503 while starting or draining. ``/health/live`` and
  ``/health/ready`` answer the two probes separately.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kcompat.broker.host.broker import Broker
from kcompat.broker.loop.offload import run_cpu


def health(broker: Broker) -> dict[str, Any]:
    state = broker.state
    return {"live": True, "ready": broker.metrics.ready, "node_id": state.node_id,
            "cluster_id": state.cluster_id}


async def exposition(registry: CollectorRegistry) -> bytes:
    """What ``generate_latest(registry)`` gives: its metrics collected here (the
    collectors read state the loop changes), their text made in a worker
    thread from what was collected (a frozen copy: pure formatting)."""
    collected = _Collected(list(registry.collect()))
    return await run_cpu(generate_latest, collected)


class _Collected:
    """Metrics already collected, as ``generate_latest`` takes a registry."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def routes(broker: Broker) -> list[Route]:
    async def metrics(_request: Request) -> Response:
        return Response(await exposition(broker.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    def probe(live_only: bool) -> Any:
        async def answer(_request: Request) -> Response:
            body = health(broker)
            ok = body["ready"] or live_only
            return Response(json.dumps(body) + "\n", status_code=200 if ok else 503,
                            media_type="application/json")
        return answer

    get = ["GET", "HEAD"]
    return [Route("/metrics", metrics, methods=get),
            Route("/health", probe(False), methods=get),
            Route("/health/ready", probe(False), methods=get),
            Route("/health/live", probe(True), methods=get)]
