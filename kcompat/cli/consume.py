"""``kcompat consume TOPIC`` — print records as plain values or JSON lines.

Where to start: ``--from earliest`` (default), ``latest``, an offset ``N`` or
``@TIMESTAMP_MS`` (the first record at or after it; the end if none), applied
to every selected partition (``--partition``, default all). With ``--group G``
the command is a member of consumer group G: the group assigns partitions,
``--from earliest|latest`` only says where to start without a committed
offset, and the offsets of the printed records are committed on exit.

With ``--share-group G`` the command is a member of share group G (KIP-932,
``_share_consumer``): the group hands out records, each printed with its
delivery count, and ``--ack accept|release|reject`` (default accept) decides
every record's acknowledgement. Where a new share group starts is its config
``share.auto.offset.reset`` (Kafka's default: latest), not ``--from``.
Released records go back to the group when the command ends.

When to stop: after ``--count N`` (``--max-messages N``) records, or — without
``--follow`` — once every partition is read up to the end it had when reading
started (share group: once a fetch finds nothing to acquire). ``--follow``
keeps waiting for new records until ^C (or ``--count``).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import Any

from kcompat.cli._common import CliError, add_client_args, client_config
from kcompat.cli._rejoin import finish_pending_joins
from kcompat.cli._share_consumer import ACK_TYPES

POLL_MS = 200
COMMIT_WAIT_S = 30.0  # a commit refused while the group rebalances: made again after polls
SHARE_WAIT_MS = 500  # a ShareFetch waits this long for something to acquire
SHARE_BATCH_MAX = 500
IDLE_STOP_MS = 10_000  # without --follow: give up if positions stop moving this long


def register(sub: Any) -> None:
    p = sub.add_parser("consume", help="print records of a topic")
    p.add_argument("topic")
    p.add_argument("--from", dest="start", default=None,
                   metavar="earliest|latest|OFFSET|@TIMESTAMP_MS",
                   help="where to start (default earliest)")
    p.add_argument("--partition", type=int, action="append", metavar="N",
                   help="only this partition (repeatable; default all)")
    p.add_argument("--group", help="consume as a member of this consumer group")
    p.add_argument("--share-group", metavar="NAME",
                   help="consume as a member of this share group (KIP-932)")
    p.add_argument("--ack", choices=sorted(ACK_TYPES),
                   help="with --share-group: acknowledge every record so (default accept)")
    p.add_argument("--count", "--max-messages", dest="count", type=int, metavar="N",
                   help="stop after N records")
    p.add_argument("--follow", action="store_true", help="wait for new records until ^C")
    add_client_args(p)
    p.set_defaults(func=cmd_consume)


def parse_start(text: str) -> tuple[str, int]:
    """``earliest``/``latest``/``N``/``@TS`` -> (kind, value)."""
    if text in ("earliest", "latest"):
        return text, 0
    if text.startswith("@") and text[1:].isdigit():
        return "timestamp", int(text[1:])
    if text.isdigit():
        return "offset", int(text)
    raise CliError(f"--from takes earliest, latest, an OFFSET or @TIMESTAMP_MS, got {text!r}", 2)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "backslashreplace")


def render(record: Any, as_json: bool) -> str:
    """One output line; a share-group delivery also shows its delivery count."""
    count = getattr(record, "delivery_count", None)
    if not as_json:
        text = _text(record.value) or ""
        return text if count is None else f"{text}\tdelivery={count}"
    row = {
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "key": _text(record.key), "value": _text(record.value),
        "headers": [[k, _header_value(v)] for k, v in (record.headers or [])],
    }
    if count is not None:
        row["delivery_count"] = count
    return json.dumps(row)


def _header_value(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


def _consumer(args: argparse.Namespace, kind: str) -> Any:
    from kafka import KafkaConsumer

    return finish_pending_joins(KafkaConsumer(
        **client_config(args), group_id=args.group, enable_auto_commit=False,
        auto_offset_reset="latest" if kind == "latest" else "earliest",
        allow_auto_create_topics=False,
    ))


def _partitions(consumer: Any, args: argparse.Namespace) -> list[Any]:
    from kafka import TopicPartition

    known = consumer.partitions_for_topic(args.topic)
    if not known:
        raise CliError(f"unknown topic {args.topic!r}")
    wanted = sorted(known) if args.partition is None else args.partition
    missing = [p for p in wanted if p not in known]
    if missing:
        raise CliError(f"topic {args.topic!r} has no partition {missing[0]} "
                       f"(it has {len(known)})")
    return [TopicPartition(args.topic, p) for p in wanted]


def _seek(consumer: Any, tps: list[Any], kind: str, value: int) -> None:
    consumer.assign(tps)
    if kind == "earliest":
        consumer.seek_to_beginning(*tps)
    elif kind == "latest":
        consumer.seek_to_end(*tps)
    elif kind == "offset":
        for tp in tps:
            consumer.seek(tp, value)
    else:
        found = consumer.offsets_for_times({tp: value for tp in tps})
        ends = consumer.end_offsets(tps)
        for tp in tps:
            hit = found.get(tp)
            consumer.seek(tp, hit.offset if hit is not None else ends[tp])


def cmd_consume(args: argparse.Namespace) -> int:
    if args.count is not None and args.count <= 0:
        raise CliError("--count takes a positive number", 2)
    if args.share_group is not None:
        return _cmd_share(args)
    if args.ack is not None:
        raise CliError("--ack needs --share-group", 2)
    kind, value = parse_start(args.start or "earliest")
    if args.group and kind not in ("earliest", "latest"):
        raise CliError("with --group, --from takes earliest or latest "
                       "(use `kcompat groups reset-offsets` to move a group)", 2)
    consumer = _consumer(args, kind)
    try:
        tps = _partitions(consumer, args)
        if args.group:
            consumer.subscribe([args.topic])
        else:
            _seek(consumer, tps, kind, value)
        _loop(consumer, args)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close(autocommit=False)
    return 0


def _loop(consumer: Any, args: argparse.Namespace) -> None:
    from kafka.structs import OffsetAndMetadata

    printed = 0
    ends: dict[Any, int] = {}
    commits: dict[Any, Any] = {}
    last_progress = time.monotonic()
    try:
        while args.count is None or printed < args.count:
            batches = consumer.poll(timeout_ms=POLL_MS)
            for tp, records in sorted(batches.items()):
                for record in records:
                    if args.count is not None and printed >= args.count:
                        break
                    sys.stdout.write(render(record, args.json) + "\n")
                    printed += 1
                    commits[tp] = OffsetAndMetadata(record.offset + 1, "", -1)
            if batches:
                last_progress = time.monotonic()
                if args.follow:
                    sys.stdout.flush()
            elif not args.follow and _at_end(consumer, ends, last_progress):
                break
    finally:
        sys.stdout.flush()
        if args.group and commits:
            _commit(consumer, commits)


def _commit(consumer: Any, commits: dict[Any, Any]) -> None:
    """Commit the printed records' offsets. A commit refused because the
    group is rebalancing (the client is rejoining: REBALANCE_IN_PROGRESS, or
    CommitFailedError for the broker's REBALANCE_IN_PROGRESS between a join
    and its sync) is made again once polls have rejoined the group, as a Java
    consumer's caller does; for at most COMMIT_WAIT_S, however many polls the
    rejoin takes on a loaded machine."""
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    deadline = time.monotonic() + COMMIT_WAIT_S
    while True:
        try:
            consumer.commit(commits)
            return
        except (RebalanceInProgressError, CommitFailedError):
            if time.monotonic() >= deadline:
                raise
            consumer.poll(timeout_ms=POLL_MS, max_records=1)  # rejoins; nothing printed


def _at_end(consumer: Any, ends: dict[Any, int], last_progress: float) -> bool:
    """True once every assigned partition is read to the end it had when first seen."""
    assigned = consumer.assignment()
    if not assigned:
        return (time.monotonic() - last_progress) * 1000 > IDLE_STOP_MS
    new = [tp for tp in assigned if tp not in ends]
    if new:
        ends.update(consumer.end_offsets(new))
    if all(consumer.position(tp) >= ends[tp] for tp in assigned):
        return True
    return (time.monotonic() - last_progress) * 1000 > IDLE_STOP_MS


def _cmd_share(args: argparse.Namespace) -> int:
    from kcompat.cli._kio import Cluster
    from kcompat.cli._share_consumer import ShareConsumer

    for flag, given in (("--group", args.group), ("--partition", args.partition),
                        ("--from", args.start)):
        if given is not None:
            raise CliError(f"--share-group takes no {flag} (the share group assigns partitions; "
                           "its config share.auto.offset.reset says where it starts)", 2)
    client_config(args)  # validates --bootstrap-server
    cluster = Cluster.for_args(args, args.timeout_ms / 1000)
    try:
        consumer = ShareConsumer(cluster, args.share_group, args.topic, args.ack or "accept")
        try:
            _share_loop(consumer, args)
        except KeyboardInterrupt:
            pass
        finally:
            sys.stdout.flush()
            consumer.close()
    finally:
        cluster.close()
    return 0


def _share_loop(consumer: Any, args: argparse.Namespace) -> None:
    printed = 0
    last_progress = time.monotonic()
    while args.count is None or printed < args.count:
        consumer.heartbeat()
        if not consumer.assigned:
            if not args.follow and (time.monotonic() - last_progress) * 1000 > IDLE_STOP_MS:
                break
            time.sleep(POLL_MS / 1000)
            consumer.heartbeat(force=True)
            continue
        wanted = SHARE_BATCH_MAX if args.count is None else args.count - printed
        got = consumer.fetch(min(wanted, SHARE_BATCH_MAX), SHARE_WAIT_MS)
        for delivery in got[:wanted]:  # the rest go back to the group on close
            sys.stdout.write(render(delivery, args.json) + "\n")
            consumer.acknowledge(delivery)
            printed += 1
        if got:
            last_progress = time.monotonic()
            if args.follow:
                sys.stdout.flush()
        elif not args.follow:
            break
