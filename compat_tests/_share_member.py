"""One share-group consumer (KIP-932) in its own process: confluent-kafka's ShareConsumer.

    python -m compat_tests._share_member BOOTSTRAP TOPIC GROUP OUT_FILE [options]

The member subscribes to TOPIC in share group GROUP with
``share.acknowledgement.mode=explicit``, decides ACCEPT, RELEASE or REJECT for
every record it gets (``--policy``) and appends to OUT_FILE, one ``os.write``
per line (a kill -9 never leaves half a line):

- ``D <ms> <partition> <offset> <delivery count> <A|R|X> <key> <value>`` for
  every delivery, before its acknowledgement leaves the process;
- ``--ack commit`` (default): after each poll batch ``commit_sync()`` sends the
  batch's acknowledgements in a ShareAcknowledge and appends
  ``C <ms before> <ms after> <partition>:<ok|error> ...``; the D lines since the
  previous C line of a partition marked ``ok`` are settled at the broker;
- ``--ack poll``: acknowledgements ride on the next poll's ShareFetch, and the
  acknowledgement-commit callback appends ``K <ms> <ok|error> <partition>:<offset>,...``.

Policies (the decision is also a function of the delivery count, so a record
released once is accepted when it comes back):

- ``modulo``: value ``i`` (a decimal number): ``i % 10 == 3`` RELEASE on its
  first delivery, ``i % 10 == 7`` REJECT, else ACCEPT;
- ``modulo-limit``: as ``modulo``, and ``i % 10 == 9`` RELEASE at every delivery
  (the broker archives it at the group's ``share.delivery.count.limit``); the
  same function as ``ShareMixed.decide`` on the Java side;
- ``random``: RELEASE with probability ``--release-rate`` while the delivery
  count is below 3 (``--seed``), else ACCEPT;
- ``release-n``: RELEASE the records with key ``--release-key`` while the
  delivery count is at most ``--release-times``, ACCEPT everything else.

``--stall-after N``: once it was handed N records, the member keeps the next
batch acquired without acknowledging anything and appends ``# stalled``; the test
then kills it -9 and the records come back when their acquisition locks expire.
SIGTERM makes it close the consumer (acknowledgements out, leave the group) and exit 0.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from typing import Any

STOP = False


def _on_term(signum: int, frame: Any) -> None:
    global STOP
    STOP = True


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Out:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, text: str) -> None:
        os.write(self.fd, (text + "\n").encode())


class Policy:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.rng = random.Random(a.seed)

    def decide(self, key: str, value: str, delivery_count: int) -> str:
        a = self.a
        if a.policy in ("modulo", "modulo-limit"):
            i = int(value)
            if i % 10 == 7:
                return "X"
            if i % 10 == 9 and a.policy == "modulo-limit":
                return "R"
            return "R" if i % 10 == 3 and delivery_count == 1 else "A"
        if a.policy == "random":
            return "R" if delivery_count < 3 and self.rng.random() < a.release_rate else "A"
        if key == a.release_key and delivery_count <= a.release_times:
            return "R"
        return "A"


def _text(b: bytes | None) -> str:
    return "-" if b is None else b.decode(errors="replace").replace(" ", "_")


def _on_commit(out: Out) -> Any:
    def cb(offsets: dict[Any, set[int]], exc: Any) -> None:
        parts = " ".join(f"{tp.partition}:{','.join(map(str, sorted(offs)))}"
                         for tp, offs in offsets.items())
        out.line(f"K {now_ms()} {'ok' if exc is None else 'error'} {parts}")
    return cb


def _commit(c: Any, out: Out) -> None:
    sent = now_ms()
    try:
        results = c.commit_sync(30)
    except Exception as exc:  # noqa: BLE001 - the test reads it from the log
        out.line(f"# commit-error {sent} {type(exc).__name__}: {exc}")
        return
    parts = " ".join(f"{tp.partition}:{'ok' if err is None else 'error'}"
                     for tp, err in results.items())
    out.line(f"C {sent} {now_ms()} {parts}")
    for tp, err in results.items():
        if err is not None:
            out.line(f"# ack-error {tp.partition} {err}")


def run(a: argparse.Namespace, out: Out) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    ack = {"A": AcknowledgeType.ACCEPT, "R": AcknowledgeType.RELEASE,
           "X": AcknowledgeType.REJECT}
    cfg: dict[str, Any] = {"bootstrap.servers": a.bootstrap, "group.id": a.group,
                           "share.acknowledgement.mode": "explicit"}
    if a.debug:
        cfg["debug"] = a.debug
    c = ShareConsumer(cfg)
    if a.ack == "poll":
        c.set_acknowledgement_commit_callback(_on_commit(out))
    policy, handed = Policy(a), 0
    c.subscribe([a.topic])
    try:
        while not STOP:
            msgs = c.poll(0.2)
            stall = a.stall_after is not None and handed >= a.stall_after and len(msgs) > 0
            for m in msgs:
                if m.error() is not None:
                    out.line(f"# consume-error {m.error()}")
                    continue
                key, value, dc = _text(m.key()), _text(m.value()), m.delivery_count() or 0
                decision = policy.decide(key, value, dc)
                out.line(f"D {now_ms()} {m.partition()} {m.offset()} {dc} {decision} {key} {value}")
                handed += 1
                if not stall:
                    c.acknowledge(m, ack[decision])
            if stall:
                out.line(f"# stalled {now_ms()}")
                while True:
                    time.sleep(1)
            if len(msgs) > 0 and a.ack == "commit":
                _commit(c, out)
    finally:
        c.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("out")
    ap.add_argument("--policy", choices=["modulo", "modulo-limit", "random", "release-n"], default="modulo")
    ap.add_argument("--ack", choices=["commit", "poll"], default="commit")
    ap.add_argument("--release-rate", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--release-key", default="")
    ap.add_argument("--release-times", type=int, default=3)
    ap.add_argument("--stall-after", type=int, default=None)
    ap.add_argument("--debug", default="")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    out = Out(a.out)
    out.line(f"# started {now_ms()} pid={os.getpid()}")
    run(a, out)
    out.line(f"# closed {now_ms()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
