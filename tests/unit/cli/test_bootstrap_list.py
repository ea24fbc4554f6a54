"""``--bootstrap-server`` takes a comma-separated list, as Kafka's tools do
(issue 32): every client command reaches the brokers through one of three
paths — kafka-python (``client_config``: given the first address that
answers), one kio connection
(``Connection.for_args``) or kio connections by node (``Cluster.for_args``) —
and each uses whichever listed address answers, in the order given, with one
error naming every address when none does."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Iterator

import kafka.errors as ke
import pytest

from compat_tests._broker import free_port
from kcompat.cli._base import CliError, parse_bootstrap
from kcompat.cli._common import Parser, add_client_args, client_config, friendly
from kcompat.cli._kio import Cluster, Connection, connect_first


@pytest.fixture
def listening() -> Iterator[str]:
    """An address that accepts TCP connections (the kernel completes them: no
    Kafka needed to connect)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


# what kafka-python raises when no bootstrap address answered
_NO_BROKERS = getattr(ke, "NoBrokersAvailable", ke.KafkaTimeoutError)("bootstrap: no broker")


def _args(server: str) -> argparse.Namespace:
    p = Parser(prog="kcompat test")
    add_client_args(p)
    return p.parse_args(["--bootstrap-server", server, "--timeout-ms", "500"])


def test_parse_takes_a_list_in_order_and_skips_blanks() -> None:
    assert parse_bootstrap("127.0.0.1:1") == [("127.0.0.1", 1)]
    assert parse_bootstrap("a:1, b:2,,[::1]:3,") == [("a", 1), ("b", 2), ("[::1]", 3)]


@pytest.mark.parametrize("bad", ["nowhere", "a:1,nowhere", "a:1,b:", ":9092", ",", ""])
def test_parse_refuses_an_entry_that_is_not_host_port(bad: str) -> None:
    with pytest.raises(CliError) as e:
        parse_bootstrap(bad)
    assert e.value.exit_code == 2 and "HOST:PORT[,HOST:PORT...]" in str(e.value)


def test_connect_first_passes_an_unreachable_address_on(listening: str) -> None:
    dead = f"127.0.0.1:{free_port()}"
    conn = connect_first(f"{dead},{listening}", 1.0)
    try:
        assert conn.address == listening
    finally:
        conn.close()


def test_none_reachable_is_one_error_naming_each_address() -> None:
    first, second = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with pytest.raises(CliError) as e:
        connect_first(f"{first},{second}", 1.0)
    text = str(e.value)
    assert e.value.exit_code == 1 and "\n" not in text
    assert text.startswith("cannot reach a broker at any of 2 addresses (")
    assert f"{first}: " in text and f"{second}: " in text
    assert text.index(first) < text.index(second)
    # one address keeps the one-address wording
    with pytest.raises(CliError, match=f"^cannot reach a broker at {first}: "):
        connect_first(first, 1.0)


def test_connection_path_uses_the_list(listening: str) -> None:
    conn = Connection.for_args(_args(f"127.0.0.1:{free_port()},{listening}"), 1.0)
    try:
        assert conn.address == listening
    finally:
        conn.close()


def test_cluster_path_uses_the_list(listening: str) -> None:
    cluster = Cluster.for_args(_args(f"127.0.0.1:{free_port()},{listening}"), 1.0)
    try:
        assert cluster.bootstrap.address == listening
    finally:
        cluster.close()


def test_kafka_python_path_gets_the_first_address_that_answers(listening: str) -> None:
    """kafka-python picks a bootstrap address at random and backs off from a
    dead one: it is given the first listed address that accepts a
    connection, so a dead one before it costs one refused connect."""
    dead = f"127.0.0.1:{free_port()}"
    assert client_config(_args(f"{dead},{listening}"))["bootstrap_servers"] == listening
    assert client_config(_args(f"{listening},{dead}"))["bootstrap_servers"] == listening
    assert client_config(_args(listening))["bootstrap_servers"] == listening
    with pytest.raises(CliError) as none:
        client_config(_args(f"{dead},127.0.0.1:{free_port()}"))
    assert str(none.value).startswith("cannot reach a broker at any of 2 addresses (")
    assert f"{dead}: " in str(none.value)
    with pytest.raises(CliError) as e:
        client_config(_args(f"{listening},nowhere"))
    assert e.value.exit_code == 2
    # kafka-python found no broker: the error names every address given
    err = friendly(_NO_BROKERS, _args("127.0.0.1:1,127.0.0.1:2"))
    assert err is not None
    assert str(err) == "cannot reach a broker at any of 2 addresses (127.0.0.1:1; 127.0.0.1:2)"
    one = friendly(_NO_BROKERS, _args("127.0.0.1:1"))
    assert one is not None and str(one) == "cannot reach a broker at 127.0.0.1:1"
