"""What every client command shares: connection flags, errors, tables and JSON.

Theory of operation
-------------------
Client commands talk to a broker through kafka-python, as any Kafka client
would. Every one takes ``--bootstrap-server HOST:PORT[,HOST:PORT...]``
(default 127.0.0.1:9092; a list as Kafka's own tools take, whichever broker
answers serves: the first listed address that accepts a connection, given to
kafka-python alone (``answering``), as ``_kio.connect_first`` takes it), ``--timeout-ms`` (how long to try
reaching the broker) and ``--json``. A failure the user can act on becomes a
``CliError``: one line on stderr, exit code 1 (2 for bad arguments) — never a
traceback. ``friendly`` turns kafka-python's exceptions into such lines.

Every client command also takes Kafka's client security (``_security``):
``--command-config FILE`` (a Kafka client properties file) and the flags
``--security-protocol``, ``--sasl-*``, ``--ssl-*`` over it. On a secured
listener ``client_config`` first logs in once over ``_kio``: kafka-python
retries a refused login or a failed TLS handshake until its bootstrap timeout
and then reports only the timeout, while this check names the cause (the
broker's SASL message, the TLS alert) at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kcompat.cli import _security
from kcompat.cli._base import CLIENT_ID as CLIENT_ID  # commands import these from here
from kcompat.cli._base import CliError as CliError
from kcompat.cli._base import parse_bootstrap, unreachable
from kcompat.cli._security import ClientSecurity

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_MS = 5000


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus the exit code 2)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_client_args(p: argparse.ArgumentParser, json_flag: bool = True) -> None:
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT[,...]",
                   help="brokers to connect to, comma-separated: whichever answers "
                   f"(default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=f"give up reaching the broker after MS (default {DEFAULT_TIMEOUT_MS})")
    if json_flag:
        p.add_argument("--json", action="store_true", help="machine-readable JSON output")
    _security.add_args(p)


def parse_pairs(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    """``["a=1", "b=2"]`` -> ``[("a", "1"), ("b", "2")]``; a missing ``=`` is a usage error."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} takes KEY=VALUE, got {item!r}", 2)
        out.append((key.strip(), value))
    return out


def client_security(args: argparse.Namespace) -> ClientSecurity:
    """``--command-config`` with the security flags over it."""
    return _security.of_args(args)


def client_config(args: argparse.Namespace) -> dict[str, Any]:
    """kafka-python's arguments; on a secured listener, after one login check."""
    server = args.bootstrap_server
    parse_bootstrap(server)  # a usage error before any connection
    security = client_security(args)
    if security.protocol != "PLAINTEXT" and not getattr(args, "_login_checked", False):
        from kcompat.cli._kio import connect_first

        conn = connect_first(server, args.timeout_ms / 1000, security)
        try:
            conn.check()
        finally:
            conn.close()
        args._login_checked = True
    server = answering(server, args.timeout_ms / 1000)
    quiet_client_logs()
    return {"bootstrap_servers": server, "client_id": CLIENT_ID,
            "bootstrap_timeout_ms": args.timeout_ms,
            "request_timeout_ms": max(args.timeout_ms, 10_000),
            **security.kafka_python_config()}


def answering(server: str, timeout_s: float) -> str:
    """The first address of ``server`` that accepts a TCP connection, tried
    in the order given (as ``_kio.connect_first``), for kafka-python to
    bootstrap from. Given the whole list, kafka-python picks one at random
    and backs off from an address that refused before trying another, so a
    dead address in the list now and then cost a command its whole
    ``--timeout-ms`` (a CI run: the dead one picked again and again, a busy
    broker answering late). None answering: one line naming each address and
    why. A single address is passed on as it is (kafka-python's error names
    it)."""
    addresses = parse_bootstrap(server)
    if len(addresses) == 1:
        return server  # kafka-python's own error names it
    failures: list[tuple[str, str]] = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as e:
            failures.append((f"{host}:{port}", str(e)))
            continue
        return f"{host}:{port}"
    raise unreachable(failures)


def quiet_client_logs() -> None:
    """kafka-python logs retries as warnings; the CLI reports failures itself."""
    kafka_log = logging.getLogger("kafka")
    if not kafka_log.handlers:
        kafka_log.addHandler(logging.NullHandler())
    kafka_log.propagate = False


@contextmanager
def admin_client(args: argparse.Namespace) -> Iterator[Any]:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(**client_config(args))
    try:
        yield client
    finally:
        client.close()


def friendly(exc: BaseException, args: argparse.Namespace | None) -> CliError | None:
    """A kafka-python exception as a one-line CliError, or None if it is not one."""
    import kafka.errors as ke

    server = getattr(args, "bootstrap_server", DEFAULT_BOOTSTRAP)
    no_brokers = getattr(ke, "NoBrokersAvailable", ke.KafkaTimeoutError)
    if isinstance(exc, no_brokers) or (
        isinstance(exc, ke.KafkaTimeoutError) and "bootstrap" in str(exc)
    ):
        return unreachable([(f"{host}:{port}", "") for host, port in parse_bootstrap(server)])
    if isinstance(exc, ke.KafkaConnectionError):
        return CliError(f"lost the connection to {server}: {exc}")
    if isinstance(exc, ke.BrokerResponseError):
        return CliError(error_text(type(exc)))
    if isinstance(exc, ke.KafkaError):
        return CliError(f"{type(exc).__name__}: {exc}")
    return None


def error_text(error: Any, detail: str | None = None) -> str:
    """``UnknownTopicOrPartitionError`` -> 'UNKNOWN_TOPIC_OR_PARTITION: <description>'."""
    text = f"{getattr(error, 'message', error)}"
    description = detail or getattr(error, "description", "")
    return f"{text}: {description}" if description else text


def check_code(code: int, message: str | None, what: str) -> None:
    """Raise a CliError for a non-zero Kafka error code in a response row."""
    if code:
        import kafka.errors as ke

        raise CliError(f"{what}: {error_text(ke.for_code(code), message)}")


READ_POLL_MS = 200
READ_LIMIT_S = 60.0


def read_to_end(args: argparse.Namespace, topic: str, on_record: Callable[[Any], None],
                missing_ok: bool = False) -> None:
    """Hand ``on_record`` every record of ``topic`` from its start to the end
    each partition had when reading began, partition by partition in offset
    order within each. An unknown topic is an error, or nothing if
    ``missing_ok``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_config(args), enable_auto_commit=False,
                             allow_auto_create_topics=False, group_id=None)
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            if missing_ok:
                return
            raise CliError(f"unknown topic {topic!r}")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + READ_LIMIT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise CliError(f"could not read {topic} to its end in {READ_LIMIT_S:g} s")
            for tp, records in consumer.poll(timeout_ms=READ_POLL_MS).items():
                for record in records:
                    if record.offset < ends[tp]:
                        on_record(record)
    finally:
        consumer.close(autocommit=False)


# -- output ---------------------------------------------------------------------
def print_json(value: Any) -> None:
    print(json.dumps(value, indent=None, sort_keys=False, default=str))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def stderr(message: str) -> None:
    print(message, file=sys.stderr)
