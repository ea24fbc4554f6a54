"""Which nodes Metadata and DescribeCluster list (``BrokerLifecycle.broker_endpoints``).

A controller-only node never appears, even while it leads the metadata quorum
and its own registration has not committed yet: it was listed then as "the
controller", and librdkafka sent it a Metadata it does not serve ("Required
feature not supported by broker"). Kafka lists brokers only."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from kcompat.broker.controller.lifecycle import BrokerLifecycle

CONFIG = {"broker.session.timeout.ms": 9000, "broker.heartbeat.interval.ms": 2000,
          "kcompat.raft.tick.ms": 50}


@dataclass
class _Broker:
    node_id: int
    hidden: bool = False
    rack: str | None = None

    def address(self, _listener: str) -> tuple[str, int]:
        return ("127.0.0.1", 9000 + self.node_id)


def _lifecycle(registered: list[_Broker], controller: int) -> BrokerLifecycle:
    image = SimpleNamespace(brokers={b.node_id: b for b in registered},
                            live_brokers=lambda: [b for b in registered if not b.hidden])
    runtime = SimpleNamespace(state=SimpleNamespace(config=CONFIG), image=image,
                              voters={n: ("127.0.0.1", 9000 + n) for n in (1, 2, 3)},
                              controller_id=controller)
    return BrokerLifecycle(runtime)  # type: ignore[arg-type]


def test_an_unregistered_controller_only_leader_is_not_listed() -> None:
    lifecycle = _lifecycle([_Broker(1), _Broker(2)], controller=3)
    assert [n for n, *_ in lifecycle.broker_endpoints()] == [1, 2]


def test_a_leader_named_in_the_answer_is_listed_and_before_any_registration_every_voter() -> None:
    lifecycle = _lifecycle([_Broker(1)], controller=3)
    assert [n for n, *_ in lifecycle.broker_endpoints(leaders=(2,))] == [1, 2]
    assert [n for n, *_ in _lifecycle([], controller=3).broker_endpoints()] == [1, 2, 3]
