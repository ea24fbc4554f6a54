"""``kcompat dlq list|replay|purge TOPIC.dlq`` — dead letters (docs/extensions.md).

``list`` prints every dead letter still in the topic: partition, offset, key,
where it came from (``kc-dlq-original-*``), its attempts and last error.

``replay`` puts dead letters back into their topic (``--to``, default the
``kc-dlq-original-topic`` of each record, else TOPIC without ``.dlq``): same
key, value and timestamp, the broker's bookkeeping headers removed
(``ext.retry.replayable``), into the original partition when it is known.
Without ``--execute`` it is a dry run that shows what would be replayed.
``--where`` selects dead letters by their headers (and ``key``):
``NAME = 'text'`` or ``NAME != 'text'`` joined by ``AND``. Replaying does not
remove them; ``purge`` does (DeleteRecords up to the end of every partition).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from kcompat.cli._common import (
    CliError,
    add_client_args,
    admin_client,
    client_config,
    print_json,
    print_table,
    read_to_end,
)
from kcompat.ext.retry import (
    DLQ_ATTEMPTS,
    DLQ_ERROR,
    DLQ_ORIGINAL_OFFSET,
    DLQ_ORIGINAL_PARTITION,
    DLQ_ORIGINAL_TOPIC,
    DLQ_SUFFIX,
    replayable,
)

_CONDITION = re.compile(r"\s*([A-Za-z0-9_.\-]+)\s*(=|!=)\s*'((?:[^']|'')*)'\s*")


def register(sub: Any) -> None:
    p = sub.add_parser("dlq", help="list, replay or purge a dead-letter topic")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="the dead letters in a topic")
    listing.add_argument("topic")
    add_client_args(listing)
    listing.set_defaults(func=cmd_list)
    replay = verbs.add_parser("replay", help="put dead letters back (a dry run unless "
                                             "--execute)")
    replay.add_argument("topic")
    replay.add_argument("--to", help="the topic to replay into (default: where each came from)")
    replay.add_argument("--where", help="only these: NAME = 'text' [AND NAME != 'text' ...]")
    replay.add_argument("--execute", action="store_true", help="really produce them")
    add_client_args(replay)
    replay.set_defaults(func=cmd_replay)
    purge = verbs.add_parser("purge", help="delete every dead letter in a topic")
    purge.add_argument("topic")
    add_client_args(purge)
    purge.set_defaults(func=cmd_purge)


def parse_where(text: str) -> list[tuple[str, bool, str]]:
    """``a = 'x' AND b != 'y'`` -> [(a, True, x), (b, False, y)]; a usage error
    names the position where it stops making sense."""
    conditions = []
    pos = 0
    while True:
        m = _CONDITION.match(text, pos)
        if m is None:
            raise CliError(f"--where: expected NAME = 'text' or NAME != 'text' at position "
                           f"{pos + 1} of {text!r}", 2)
        conditions.append((m.group(1), m.group(2) == "=", m.group(3).replace("''", "'")))
        pos = m.end()
        if pos == len(text):
            return conditions
        joiner = re.compile(r"AND\b", re.IGNORECASE).match(text, pos)
        if joiner is None:
            raise CliError(f"--where: expected AND at position {pos + 1} of {text!r}", 2)
        pos = joiner.end()


def _matches(record: Any, conditions: list[tuple[str, bool, str]]) -> bool:
    headers = {k: v for k, v in record.headers or ()}
    for name, equal, text in conditions:
        raw = record.key if name == "key" else headers.get(name)
        value = None if raw is None else raw.decode("utf-8", "replace")
        if (value == text) != equal:
            return False
    return True


def read_all(args: argparse.Namespace) -> list[Any]:
    """Every record of ``args.topic``, by partition and offset."""
    out: list[Any] = []
    read_to_end(args, args.topic, out.append)
    return sorted(out, key=lambda r: (r.partition, r.offset))


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "backslashreplace")


def _row(record: Any) -> dict[str, Any]:
    h = {k: v for k, v in record.headers or ()}
    return {"partition": record.partition, "offset": record.offset, "key": _text(record.key),
            "original_topic": _text(h.get(DLQ_ORIGINAL_TOPIC)),
            "original_partition": _text(h.get(DLQ_ORIGINAL_PARTITION)),
            "original_offset": _text(h.get(DLQ_ORIGINAL_OFFSET)),
            "attempts": _text(h.get(DLQ_ATTEMPTS)), "error": _text(h.get(DLQ_ERROR))}


def _show(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(rows)
        return
    print_table(("PARTITION", "OFFSET", "KEY", "FROM", "ATTEMPTS", "ERROR"),
                [(r["partition"], r["offset"], r["key"],
                  f"{r['original_topic']}-{r['original_partition']}@{r['original_offset']}",
                  r["attempts"], r["error"]) for r in rows])


def cmd_list(args: argparse.Namespace) -> int:
    _show([_row(r) for r in read_all(args)], args.json)
    return 0


def _destination(args: argparse.Namespace, record: Any) -> tuple[str, int | None]:
    h = {k: v for k, v in record.headers or ()}
    topic = args.to or _text(h.get(DLQ_ORIGINAL_TOPIC)) or args.topic.removesuffix(DLQ_SUFFIX)
    if topic == args.topic:
        raise CliError(f"cannot replay {args.topic} into itself; name the topic with --to", 2)
    partition = _text(h.get(DLQ_ORIGINAL_PARTITION))
    keep = not args.to and partition is not None and partition.isdigit()
    return topic, int(partition) if keep and partition is not None else None


def cmd_replay(args: argparse.Namespace) -> int:
    conditions = parse_where(args.where) if args.where else []
    chosen = [r for r in read_all(args) if _matches(r, conditions)]
    plan = [(r, *_destination(args, r)) for r in chosen]
    rows = [{**_row(r), "to": topic, "to_partition": p} for r, topic, p in plan]
    if args.execute and plan:
        from kafka import KafkaProducer

        producer = KafkaProducer(**client_config(args), acks="all")
        try:
            futures = []
            for record, topic, partition in plan:
                known = producer.partitions_for(topic)
                if partition is not None and partition not in known:
                    partition = None
                futures.append(producer.send(
                    topic, key=record.key, value=record.value, partition=partition,
                    headers=list(replayable(tuple(record.headers or ()))),
                    timestamp_ms=record.timestamp))
            for future in futures:
                future.get(timeout=max(args.timeout_ms / 1000, 10))
        finally:
            producer.close()
    if args.json:
        print_json({"topic": args.topic, "executed": bool(args.execute), "records": rows})
    else:
        print_table(("PARTITION", "OFFSET", "KEY", "TO"),
                    [(r["partition"], r["offset"], r["key"],
                      r["to"] + ("" if r["to_partition"] is None else f"-{r['to_partition']}"))
                     for r in rows])
        verb = "replayed" if args.execute else "would replay (dry run; add --execute)"
        print(f"{verb} {len(rows)} record(s)")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_config(args), enable_auto_commit=False,
                             allow_auto_create_topics=False, group_id=None)
    try:
        parts = consumer.partitions_for_topic(args.topic)
        if not parts:
            raise CliError(f"unknown topic {args.topic!r}")
        tps = [TopicPartition(args.topic, p) for p in sorted(parts)]
        ends = consumer.end_offsets(tps)
        starts = consumer.beginning_offsets(tps)
    finally:
        consumer.close(autocommit=False)
    with admin_client(args) as admin:
        admin.delete_records({tp: ends[tp] for tp in tps})
    purged = sum(ends[tp] - starts[tp] for tp in tps)
    if args.json:
        print_json({"topic": args.topic, "purged_offsets": purged})
    else:
        print(f"purged {args.topic}: {purged} offset(s) deleted")
    return 0
