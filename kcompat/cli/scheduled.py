"""``kcompat scheduled list|cancel TOPIC`` — the delayed records of a topic.

``list`` shows every record of TOPIC waiting for its due time (due time,
partition, the offset of its hole, key, ``kc-schedule-id``, and whether its
delivery has started), earliest first. ``cancel --id ID`` cancels every
pending record named ID the way any producer can: per record, a record with
header ``kc-cancel-schedule: ID`` to its partition (not stored itself).

Like any client, the command reads the schedule log ``__kc_schedule`` from
the beginning to its end and replays it with the broker's own state machine
(``ext.schedule_log``): what it shows is what the brokers hold as of that end.
"""

from __future__ import annotations

import argparse
import datetime
from functools import partial
from typing import Any

from kcompat.cli._common import (
    CliError,
    add_client_args,
    client_config,
    print_json,
    print_table,
    read_to_end,
)
from kcompat.ext.delay import CANCEL_SCHEDULE
from kcompat.ext.schedule import Pending
from kcompat.ext.schedule_log import SCHEDULE_TOPIC, ScheduleLog, read_op
from kcompat.wire.records import Record


def register(sub: Any) -> None:
    p = sub.add_parser("scheduled", help="list or cancel a topic's delayed records")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="records waiting for their due time")
    listing.add_argument("topic")
    add_client_args(listing)
    listing.set_defaults(func=cmd_list)
    cancel = verbs.add_parser("cancel", help="cancel the pending records named ID")
    cancel.add_argument("topic")
    cancel.add_argument("--id", required=True, help="their kc-schedule-id")
    add_client_args(cancel)
    cancel.set_defaults(func=cmd_cancel)


Row = tuple[Pending, bool, bytes | None]  # entry, delivery started?, key


def read_schedule(args: argparse.Namespace) -> list[Row]:
    """Every scheduled record of ``args.topic``, earliest due first."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_config(args), group_id=None)
    try:
        if not consumer.partitions_for_topic(args.topic):
            raise CliError(f"unknown topic {args.topic!r}")
        schedule = consumer.partitions_for_topic(SCHEDULE_TOPIC) or set()
        tps = [TopicPartition(SCHEDULE_TOPIC, p) for p in sorted(schedule)]
        starts = {tp.partition: int(o) for tp, o in consumer.beginning_offsets(tps).items()}
    finally:
        consumer.close(autocommit=False)
    logs: dict[int, ScheduleLog] = {}
    read: dict[int, list[Record]] = {}  # what a log that starts at a snapshot rereads
    keys: dict[tuple[int, int], bytes | None] = {}

    def reread(index: int, machine: ScheduleLog, start: int, end: int) -> None:
        for record in read.get(index, []):
            if start <= record.offset < end:
                machine.apply(record)

    def replay(r: Any) -> None:
        slog = logs.get(r.partition)
        if slog is None:  # a log that starts past 0 starts at a snapshot
            slog = logs[r.partition] = ScheduleLog(fresh_from=starts.get(r.partition) or None,
                                                   reread=partial(reread, r.partition))
        record = Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers or ()))
        if slog.fresh_from is not None:
            read.setdefault(r.partition, []).append(record)
        slog.apply(record)
        op = read_op(record)
        if op is None:  # a record an adds op names (its entry: its own offset)
            keys[(r.partition, r.offset)] = r.key
        elif op.get("op") in ("add", "move"):  # a copy names its entry
            keys[(r.partition, int(op.get("e", r.offset)))] = r.key

    read_to_end(args, SCHEDULE_TOPIC, replay, missing_ok=True)
    rows = [(p, moving, keys.get((index, p.entry))) for index, slog in logs.items()
            for p, moving in slog.listing()
            if p.target is not None and p.target[0] == args.topic]
    return sorted(rows, key=lambda r: (r[0].due_ms, r[0].target or ("", 0), r[0].offset))


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "backslashreplace")


def _due_text(due_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(due_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cmd_list(args: argparse.Namespace) -> int:
    rows = read_schedule(args)
    if args.json:
        print_json([{"due_ms": p.due_ms, "due": _due_text(p.due_ms),
                     "partition": p.target[1] if p.target else None, "offset": p.offset,
                     "key": _text(key), "id": p.schedule_id,
                     "state": "delivering" if moving else "pending"}
                    for p, moving, key in rows])
        return 0
    print_table(("DUE", "PARTITION", "HOLE", "KEY", "ID", "STATE"),
                [(_due_text(p.due_ms), p.target[1] if p.target else None, p.offset,
                  _text(key), p.schedule_id, "delivering" if moving else "pending")
                 for p, moving, key in rows])
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer

    partitions = [p.target[1] for p, moving, _key in read_schedule(args)
                  if not moving and p.target is not None and p.schedule_id == args.id]
    if not partitions:
        raise CliError(f"no pending delayed record of {args.topic!r} has "
                       f"kc-schedule-id {args.id!r}")
    producer = KafkaProducer(**client_config(args), acks="all")
    try:  # one cancellation per pending record: each takes the earliest of its partition
        for partition in partitions:
            producer.send(args.topic, value=b"", partition=partition,
                          headers=[(CANCEL_SCHEDULE, args.id.encode())]).get(
                              timeout=max(args.timeout_ms / 1000, 10))
    finally:
        producer.close()
    if args.json:
        print_json({"topic": args.topic, "id": args.id, "cancelled": len(partitions),
                    "partitions": sorted(set(partitions))})
    else:
        print(f"cancelled {len(partitions)} record(s) named {args.id!r} in partition(s) "
              f"{', '.join(map(str, sorted(set(partitions))))}")
    return 0
