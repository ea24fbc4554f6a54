"""``kcompat produce TOPIC`` — one record per input line, like kafka-console-producer.

Values come from stdin or ``--file`` (one per line, the newline stripped); a
record's key is ``--key`` or, with ``--key-separator SEP``, the part of the
line before the first SEP. ``--header k=v`` adds headers to every record.
acks=all uses the idempotent producer (kafka-python's default); acks 0 and 1
turn idempotence off, as Kafka requires. Producing a file shows a progress bar
on a terminal (``--progress`` forces it, e.g. in CI logs). The summary line —
or ``--json`` object — gives the offsets written per partition.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from kcompat.cli._common import (
    CliError,
    add_client_args,
    client_config,
    parse_pairs,
    print_json,
    stderr,
)

COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
PROGRESS_WIDTH = 30


def register(sub: Any) -> None:
    p = sub.add_parser("produce", help="produce records, one per line of stdin or a file")
    p.add_argument("topic")
    p.add_argument("--file", help="read values from FILE instead of stdin")
    p.add_argument("--key", help="key of every record")
    p.add_argument("--key-separator", metavar="SEP", help="each line is KEY<SEP>VALUE")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="header on every record (repeatable)")
    p.add_argument("--partition", type=int, help="write to this partition (default: by key)")
    p.add_argument("--compression", choices=COMPRESSION, default="none")
    p.add_argument("--acks", choices=("0", "1", "all"), default="all")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar while producing a file (default: on a terminal)")
    add_client_args(p)
    p.set_defaults(func=cmd_produce)


@dataclass
class Tally:
    """Outcome of the sends, filled in by kafka-python's callbacks."""

    sent: int = 0
    acked: int = 0
    value_bytes: int = 0
    offsets: dict[int, list[int]] = field(default_factory=dict)  # partition -> [first, last]
    first_error: str | None = None
    failed: int = 0

    def ok(self, metadata: Any) -> None:
        self.acked += 1
        if metadata.offset < 0:  # acks=0: the broker does not say
            return
        span = self.offsets.setdefault(metadata.partition, [metadata.offset, metadata.offset])
        span[0] = min(span[0], metadata.offset)
        span[1] = max(span[1], metadata.offset)

    def error(self, exc: BaseException) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"


class Progress:
    """A one-line bar on stderr, redrawn at most every 1% of the input."""

    def __init__(self, total_bytes: int, enabled: bool) -> None:
        self.total = max(total_bytes, 1)
        self.enabled = enabled
        self.shown = -1

    def update(self, done_bytes: int, records: int, final: bool = False) -> None:
        if not self.enabled:
            return
        percent = min(100, done_bytes * 100 // self.total)
        if percent == self.shown:
            if final:
                sys.stderr.write("\n")
            return
        self.shown = percent
        filled = PROGRESS_WIDTH * percent // 100
        bar = "#" * filled + "." * (PROGRESS_WIDTH - filled)
        sys.stderr.write(f"\r[{bar}] {percent:3d}% {records} records")
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _lines(stream: IO[bytes]) -> Iterator[tuple[bytes, int]]:
    """Each line without its newline, with the bytes read so far."""
    done = 0
    for line in stream:
        done += len(line)
        yield line.rstrip(b"\n").removesuffix(b"\r"), done


def _producer(args: argparse.Namespace) -> Any:
    from kafka import KafkaProducer

    acks: int | str = "all" if args.acks == "all" else int(args.acks)
    return KafkaProducer(
        **client_config(args), acks=acks, enable_idempotence=acks == "all",
        compression_type=None if args.compression == "none" else args.compression,
        linger_ms=5, max_block_ms=args.timeout_ms,
    )


def _check_partition(producer: Any, args: argparse.Namespace) -> None:
    import kafka.errors as ke

    try:
        partitions = producer.partitions_for(args.topic)
    except ke.KafkaTimeoutError:
        partitions = None
    if not partitions:
        raise CliError(f"unknown topic {args.topic!r} (and the broker did not create it)")
    if args.partition is not None and args.partition not in partitions:
        raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                       f"(it has {len(partitions)})")


def cmd_produce(args: argparse.Namespace) -> int:
    headers = [(k, v.encode()) for k, v in parse_pairs(args.header, "--header")]
    if args.file is not None:
        try:
            source: IO[bytes] = open(args.file, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            raise CliError(f"cannot read {args.file}: {e.strerror}") from None
        total = os.fstat(source.fileno()).st_size
        show = sys.stderr.isatty() if args.progress is None else args.progress
    else:
        source, total, show = sys.stdin.buffer, 0, bool(args.progress)
    tally = Tally()
    producer = _producer(args)
    try:
        _check_partition(producer, args)
        progress = Progress(total, show and args.file is not None)
        _send_all(producer, args, source, headers, tally, progress)
        producer.flush()
        progress.update(total, tally.sent, final=True)
    finally:
        producer.close()
        if args.file is not None:
            source.close()
    return _report(args, tally)


def _send_all(producer: Any, args: argparse.Namespace, source: IO[bytes],
              headers: list[tuple[str, bytes]], tally: Tally, progress: Progress) -> None:
    fixed_key = args.key.encode() if args.key is not None else None
    sep = args.key_separator.encode() if args.key_separator else None
    for line, done in _lines(source):
        key = fixed_key
        value = line
        if sep is not None:
            if sep not in line:
                raise CliError(f"line {tally.sent + 1} has no key separator {args.key_separator!r}")
            key, value = line.split(sep, 1)
        future = producer.send(args.topic, value=value, key=key, headers=headers or None,
                               partition=args.partition)
        future.add_callback(tally.ok)
        future.add_errback(tally.error)
        tally.sent += 1
        tally.value_bytes += len(value)
        progress.update(done, tally.sent)


def _report(args: argparse.Namespace, tally: Tally) -> int:
    if tally.failed:
        raise CliError(f"{tally.failed} of {tally.sent} records failed: {tally.first_error}")
    spans = {str(p): {"first_offset": a, "last_offset": b} for p, (a, b) in
             sorted(tally.offsets.items())}
    if args.json:
        print_json({"topic": args.topic, "records": tally.sent, "value_bytes": tally.value_bytes,
                    "partitions": spans})
        return 0
    where = ", ".join(f"partition {p} offsets {s['first_offset']}-{s['last_offset']}"
                      for p, s in spans.items())
    stderr(f"produced {tally.sent} records to {args.topic}" + (f" ({where})" if where else ""))
    return 0
