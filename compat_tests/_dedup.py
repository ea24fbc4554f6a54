"""Deduplication windows (docs/extensions.md, issue 15) seen through real clients:
the helpers of ``test_dedup.py``.

* ``spec`` builds what a client sends (``_delayed.Spec``, the timestamp the
  producer's clock, as a client leaves it); ``produce`` (``_delayed``) sends
  specs with kafka-python or confluent-kafka in this process, ``JavaProducer``
  with one Java ``KafkaProducer`` (kafka-clients 4.x, default settings:
  idempotent, acks=all) in a JVM that stays up between sends, driven through
  its stdin (``compat_tests/java/clients/.../ScriptedProduce.java``), so the
  JVM start is paid once per module and a send lands when the test says.
* ``read_stored`` reads a topic from its log start with confluent-kafka up to
  the end offsets the test expects (``EndOffsets`` that include the holes the
  duplicates left) and says what a consumer sees: the stored records.
* ``AdminBroker`` is a single broker with its admin HTTP port enabled;
  ``Metrics`` reads its ``/metrics``.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._broker import Broker, free_port
from ._delayed import Sent, Spec, now_ms
from ._records import HW_WAIT_S, TIMEOUT_S, Header, Seen, norm_headers

DEDUP_ID = "kc-dedup-id"
WINDOW_MS = "kc.dedup.window.ms"
DEDUP_BY = "kc.dedup.by"
MAX_ENTRIES = "kc.dedup.max.entries"
DUPLICATES = "kcompat_dedup_duplicates_total"
EVICTIONS = "kcompat_dedup_evictions_total"
INVALID_RECORD = 87


def spec(partition: int, value: bytes, dedup_id: bytes | None = None, key: bytes | None = b"k",
         headers: Iterable[Header] = ()) -> Spec:
    """A record for ``partition``; ``dedup_id`` adds header ``kc-dedup-id``
    after ``headers``. CreateTime = now, as a producer stamps it."""
    extra: tuple[Header, ...] = ((DEDUP_ID, dedup_id),) if dedup_id is not None else ()
    return Spec(partition, key, value, (*headers, *extra), now_ms())


def acked_offsets(sent: Sequence[Sent], who: str) -> list[int]:
    """Every send succeeded: the acknowledged offsets, in send order."""
    failed = [(s.spec.value, str(s.error)) for s in sent if s.error is not None or s.offset is None]
    assert not failed, f"{who}: {len(failed)} of {len(sent)} sends failed: {failed[:5]}"
    return [s.offset for s in sent if s.offset is not None]


# -- Java ----------------------------------------------------------------------------------


class JavaProducer:
    """One ``ScriptedProduce`` JVM (one KafkaProducer) for the test module."""

    def __init__(self, bootstrap: str, workdir: Path, *config: str) -> None:
        from .java._jvm import clients_classpath
        from .java.conftest import PKG, java_cmd

        self.stderr_path = workdir / "java-producer.stderr.log"
        self.cmd = java_cmd(clients_classpath(), f"{PKG}.ScriptedProduce", bootstrap, *config)
        self._err = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._expect("ready", timeout_s=60.0)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _next(self, deadline: float) -> dict[str, Any]:
        import json

        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"Java producer: no answer in time\n{self.explain()}") from None
            if line is None:
                raise AssertionError(f"Java producer exited ({self.proc.poll()})\n{self.explain()}")
            line = line.strip()
            if line.startswith("{"):
                return dict(json.loads(line))

    def _expect(self, event: str, timeout_s: float) -> dict[str, Any]:
        got = self._next(time.monotonic() + timeout_s)
        assert got["event"] == event, f"Java producer: {got}, expected {event}\n{self.explain()}"
        return got

    def explain(self) -> str:
        tail = self.stderr_path.read_text(errors="replace")[-3000:] if self.stderr_path.exists() else ""
        return f"$ {' '.join(self.cmd)}\n--- stderr (tail) ---\n{tail}"

    def send(self, topic: str, specs: Sequence[Spec], timeout_s: float = 60.0) -> list[Sent]:
        """Send ``specs`` (in order), flush, and answer one ``Sent`` per spec; a
        failure's ``error`` is the program's description (``{"error": name,
        "code": n, "message": ...}``)."""
        def hx(b: bytes | None) -> str:
            return "-" if b is None else b.hex()

        assert self.proc.stdin is not None
        sent_at = now_ms()
        for s in specs:
            headers = ",".join(f"{k}:{hx(v)}" for k, v in s.headers)
            self.proc.stdin.write(f"send\t{topic}\t{s.partition}\t{hx(s.key)}\t{hx(s.value)}\t"
                                  f"{headers}\n")
        self.proc.stdin.write("flush\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        out = []
        for s in specs:
            e = self._next(deadline)
            assert e["event"] in ("acked", "failed"), f"Java producer: {e}\n{self.explain()}"
            if e["event"] == "acked":
                assert e["partition"] == s.partition, f"Java producer: {e} for {s}"
                out.append(Sent(s, int(e["offset"]), None, sent_at, int(e["acked_ms"])))
            else:
                out.append(Sent(s, None, e["error"], sent_at, int(e["acked_ms"])))
        flushed = self._next(deadline)
        assert flushed == {"event": "flushed", "n": len(specs)}, f"Java producer: {flushed}"
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.write("close\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._err.close()


# -- reading ------------------------------------------------------------------------------


def read_stored(bootstrap: str, topic: str, ends: dict[int, int], group: str | None = None,
                timeout_s: float = TIMEOUT_S) -> dict[int, list[Seen]]:
    """What a consumer sees of ``topic``, per partition, from the log start up to
    ``ends`` (the end offsets the acknowledgements imply). Waits (``HW_WAIT_S``)
    for the high watermarks to reach them, then checks they are exactly that:
    nothing was stored beyond what was acknowledged. With ``group``, the
    consumer commits ``ends`` in that group once it has read them."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap,
                  "group.id": group or f"dedup-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.wait.max.ms": 100, "socket.timeout.ms": int(TIMEOUT_S * 1000),
                  "log_level": 0})
    try:
        deadline = time.monotonic() + HW_WAIT_S
        while True:
            highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S,
                                                cached=False)[1] for p in ends}
            if highs == ends or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert highs == ends, (f"{topic}: high watermarks {highs}, expected {ends} from the "
                               f"acknowledged offsets")
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: dict[int, list[Seen]] = {p: [] for p in ends}
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ends):
            assert time.monotonic() < deadline, (
                f"{topic}: reading timed out; read {[(p, [s.offset for s in v]) for p, v in out.items()]}"
                f", end offsets {ends}")
            m = c.poll(0.2)
            if m is None:
                continue
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                    continue
                raise AssertionError(f"{topic}: consumer error {err}")
            _ts_type, ts = m.timestamp()
            out[m.partition()].append(Seen(m.partition(), m.offset(), m.key(), m.value(),
                                           norm_headers(m.headers()), ts))
        if group is not None:
            c.commit(offsets=[TopicPartition(topic, p, end) for p, end in ends.items()],
                     asynchronous=False)
        return out
    finally:
        c.close()


def values_at(seen: Sequence[Seen]) -> list[tuple[int, bytes | None]]:
    return [(s.offset, s.value) for s in seen]


# -- the admin port -----------------------------------------------------------------------


class AdminBroker(Broker):
    """A single broker with its admin HTTP port (``/metrics``) on a free port."""

    def __init__(self, workdir: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.admin_port = free_port()
        super().__init__(workdir, extra_args=("--set", f"admin.port={self.admin_port}",
                                              *extra_args))

    def metric(self, name: str, **labels: str) -> float:
        """The sample ``name{labels}`` of ``/metrics``; 0 if absent."""
        from prometheus_client.parser import text_string_to_metric_families

        url = f"http://127.0.0.1:{self.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read().decode()
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return float(s.value)
        return 0.0
