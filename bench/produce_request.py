"""One Produce request's broker CPU, through the whole request path in-process.

Not a test: it prints a report and, with ``--results``, appends it to
bench/RESULTS.md. Issue 35 item 2 asks where one partition's produce spends
its time; a run against a real client measures that too, but on this host
two identical runs of it differed by 2x in CPU per GiB (bench/RESULTS.md,
2026-12-04). This bench leaves out the client, the sockets and the other
processes, so a change to the request path shows as a change in one figure.

A broker (``Broker``, its log on the real disk in a temporary directory,
``kcompat.flush.mode=never``) runs in this process with one topic of one
partition. A connection task (``connection._serve``, the code a client's
connection runs) is fed Produce v9 frames over a Unix socket pair, at
most ``PIPELINE`` in flight as librdkafka sends them, each one batch of
``--records`` records of 1 KiB (63 by default: a 64 KiB ``batch.size``).
After ``WARM_REQUESTS`` uncounted requests, ``--requests`` are timed by
the process's CPU clock (the driver's side, framing the requests and reading
the answers, is a few percent of it). ``--rounds`` runs, each on a broker
started afresh; the report gives every round and the median.

    .venv/bin/python bench/produce_request.py                  # 5 rounds
    .venv/bin/python bench/produce_request.py --profile        # cProfile, top functions
    PYTHONPATH=<other tree> .venv/bin/python bench/produce_request.py   # A/B two trees
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import pstats
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import loadavg, machine, publish  # noqa: E402
from kcompat.broker.config import broker_config  # noqa: E402
from kcompat.broker.host.broker import Broker  # noqa: E402
from kcompat.broker.net.session import Session  # noqa: E402
from kcompat.broker.node.connection import _serve  # noqa: E402
from kcompat.testing import running  # noqa: E402
from kcompat.wire import codec  # noqa: E402
from kcompat.wire import versions as v  # noqa: E402
from kcompat.wire.framing import FrameReader  # noqa: E402
from kcompat.wire.records import encode_batch  # noqa: E402

VERSION = 9  # kafka-python's; the body differs little from librdkafka's v10
PIPELINE = 5  # requests in flight, as librdkafka's max.in.flight
WARM_REQUESTS = 500
TIMESTAMP = 1_790_000_000_000
DISTINCT_FRAMES = 64  # frames made up front (each with its own correlation id)


def _frame(cid: int, batch: bytes, acks: int) -> bytes:
    m = codec.request_module(v.PRODUCE, VERSION)
    request = m.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=30),
        topic_data=(m.TopicProduceData(name="t", partition_data=(
            m.PartitionProduceData(index=0, records=batch),)),))
    body = io.BytesIO()
    codec._writer(type(request))(body, request)
    frame = struct.pack(">hhih", v.PRODUCE, VERSION, cid, 1) + b"p" + b"\x00" + body.getvalue()
    return struct.pack(">i", len(frame)) + frame


def one_round(args: argparse.Namespace) -> tuple[float, Any]:
    """CPU-seconds of ``args.requests`` requests; the profile when asked."""
    batch = encode_batch([(None, b"x" * 1024, (), TIMESTAMP) for _ in range(args.records)])
    frames = [_frame(cid, batch, args.acks) for cid in range(1, DISTINCT_FRAMES + 1)]
    work = Path(tempfile.mkdtemp(prefix="kcompat-produce-request-"))
    broker = Broker(broker_config.load(None, {
        "log.dirs": str(work / "data"), "kcompat.flush.mode": "never",
        "log.segment.bytes": str(256 << 20)}, {}))
    out: dict[str, Any] = {}

    async def main() -> None:
        async with running.running(broker):
            await running.create_topic(broker, "t")
            a, b = trio.socket.socketpair()
            client, server = trio.SocketStream(a), trio.SocketStream(b)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_serve, server, broker,
                                   Session.open(broker.listeners[0], "/127.0.0.1"), ("bench", 1))
                reader = FrameReader(1 << 20)

                async def pump(n: int) -> None:
                    sent = answered = 0
                    while answered < n:
                        while sent < n and sent - answered < PIPELINE:
                            await client.send_all(frames[sent % len(frames)])
                            sent += 1
                        answered += len(reader.feed(await client.receive_some(1 << 16)))

                await pump(WARM_REQUESTS)
                profile = cProfile.Profile() if args.profile else None
                if profile is not None:
                    profile.enable()
                started = time.process_time()
                await pump(args.requests)
                out["cpu_s"] = time.process_time() - started
                if profile is not None:
                    profile.disable()
                    out["profile"] = profile
                await client.aclose()
                nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
    return out["cpu_s"], out.get("profile")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--records", type=int, default=63, help="1 KiB records per batch")
    ap.add_argument("--acks", type=int, default=1, choices=(0, 1, -1))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true",
                    help="one round under cProfile: the top functions by own time (slower)")
    ap.add_argument("--results", action="store_true", help="append the report to RESULTS.md")
    args = ap.parse_args()
    if args.profile:
        _cpu, profile = one_round(args)
        pstats.Stats(profile).sort_stats("tottime").print_stats(40)
        return
    load_before = loadavg()
    per_request = []
    for i in range(args.rounds):
        cpu_s, _ = one_round(args)
        per_request.append(cpu_s / args.requests * 1e6)
        print(f"round {i + 1}: {per_request[-1]:.0f} us of CPU per request", flush=True)
    median = statistics.median(per_request)
    batch_bytes = args.records * 1024
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "", f"## One Produce request's broker CPU, in-process (bench/produce_request.py) — {stamp}",
        "",
        f"`bench/produce_request.py --requests {args.requests} --records {args.records} "
        f"--acks {args.acks} --rounds {args.rounds}`: Produce v{VERSION}, one batch of "
        f"{args.records} x 1 KiB records per request, {PIPELINE} in flight, one partition, "
        "no fsync, through `connection._serve` over a Unix socket pair.", "",
        *(f"- {line}" for line in machine()),
        f"- load average before / after: {load_before} / {loadavg()}", "",
        "| round | " + " | ".join(str(i + 1) for i in range(args.rounds)) + " | median |",
        "|---|" + "---|" * (args.rounds + 1),
        "| us of CPU per request | " + " | ".join(f"{x:.0f}" for x in per_request)
        + f" | {median:.0f} |",
        "| CPU-s per GiB | " + " | ".join(f"{x / batch_bytes * 2**30 / 1e6:.2f}"
                                          for x in per_request)
        + f" | {median / batch_bytes * 2**30 / 1e6:.2f} |", "",
    ]
    publish(lines, append=args.results)


if __name__ == "__main__":
    main()
