"""kcat (Debian's, linking librdkafka 2.0.2) against a real kcompat broker.

Topics are created with confluent-kafka's AdminClient first; everything else is the
kcat binary in a subprocess. Tests on ``pbroker`` also run in a 3-broker cluster
at replication factor 1 or (those marked) 3 (conftest.py); the restarts stay on a
single node."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from .._broker import Broker
from .._deployment import SINGLE_AND_RF3, Deployment
from .._records import CODEC_IDS, TIMEOUT_S, Rec, base_timestamp, now_ms
from ..confluent._helpers import consume_all as confluent_consume_all
from ..confluent._helpers import create_topic, produce_recs

pytestmark = pytest.mark.timeout(120)

CLIENT = "kcat"
KCAT = shutil.which("kcat") or "/usr/bin/kcat"


@pytest.fixture(scope="module")
def kcat_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty HOME, so no ~/.config/kcat.conf changes what kcat does."""
    return tmp_path_factory.mktemp("kcat-home")


class Kcat:
    def __init__(self, bootstrap: str, home: Path) -> None:
        self.bootstrap = bootstrap
        self.env = {**os.environ, "HOME": str(home)}
        self.env.pop("KCAT_CONFIG", None)
        self.env.pop("KAFKACAT_CONFIG", None)

    def __call__(self, *args: str, stdin: bytes | None = None, timeout: float = TIMEOUT_S,
                 check: bool = True) -> subprocess.CompletedProcess[bytes]:
        if not os.path.exists(KCAT):
            pytest.fail("kcat is not installed (make tools installs Debian's kcat)")
        # client.id=kcat only labels kcat's requests in the broker log (LEDGER.md);
        # librdkafka's own default is "rdkafka", which confluent-kafka also uses.
        cmd = [KCAT, "-b", self.bootstrap, "-m", "15", "-X", "client.id=kcat", *args]
        try:
            cp = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout, env=self.env)
        except subprocess.TimeoutExpired as exc:
            err = (exc.stderr or b"").decode(errors="replace")[-2000:]
            out = (exc.stdout or b"").decode(errors="replace")[-1000:]
            raise AssertionError(
                f"{CLIENT}: `{' '.join(cmd)}` did not finish in {timeout}s\n"
                f"stdout tail: {out}\nstderr tail: {err}"
            ) from None
        if check and cp.returncode != 0:
            raise AssertionError(
                f"{CLIENT}: `{' '.join(cmd)}` exited {cp.returncode}\n"
                f"stdout: {cp.stdout.decode(errors='replace')[-2000:]}\n"
                f"stderr: {cp.stderr.decode(errors='replace')[-3000:]}"
            )
        return cp

    def produce(self, topic: str, lines: list[bytes], *extra: str) -> None:
        self("-P", "-t", topic, *extra, stdin=b"".join(line + b"\n" for line in lines))

    def consume(self, topic: str, fmt: str, *extra: str) -> list[str]:
        cp = self("-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt, *extra)
        return cp.stdout.decode().splitlines()


@pytest.fixture
def kcat(pbroker: Deployment, kcat_home: Path) -> Kcat:
    return Kcat(pbroker.bootstrap, kcat_home)


def parse_kspo(lines: list[str]) -> dict[int, list[tuple[str, str, int]]]:
    """Lines of '%k:%s:%p:%o' (value may contain ':', key may not) -> per partition."""
    out: dict[int, list[tuple[str, str, int]]] = {}
    for line in lines:
        key, rest = line.split(":", 1)
        value, part, off = rest.rsplit(":", 2)
        out.setdefault(int(part), []).append((key, value, int(off)))
    return out


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_metadata_list(kcat: Kcat, pbroker: Deployment, topic: str) -> None:
    create_topic(pbroker.bootstrap, topic, partitions=3, replication=pbroker.replication)
    out = kcat("-L").stdout.decode()
    assert f'topic "{topic}" with 3 partitions:' in out, f"{CLIENT} -L output:\n{out}"
    nodes = {}
    for b in pbroker.brokers:
        m = re.search(rf"broker (\d+) at {re.escape(b.host)}:{b.port}", out)
        assert m, f"{CLIENT}: -L lists no broker at {b.bootstrap}:\n{out}"
        nodes[m.group(1)] = b
    section = out.split(f'topic "{topic}"', 1)[1].split("topic \"", 1)[0]
    rows = re.findall(r"partition (\d+), leader (-?\d+), replicas: ([\d,]*), isrs: ([\d,]*)",
                      section)
    assert [int(p) for p, *_ in rows] == [0, 1, 2], f"{CLIENT}: -L partitions:\n{section}"
    for p, leader, replicas, isrs in rows:
        assert leader in nodes and len(replicas.split(",")) == pbroker.replication and \
            leader in replicas.split(",") and leader in isrs.split(","), (
                f"{CLIENT}: -L partition {p} (replication factor {pbroker.replication}): "
                f"leader {leader}, replicas {replicas}, isrs {isrs}:\n{section}")
    md = json.loads(kcat("-L", "-J", "-t", topic).stdout)
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2], f"{CLIENT}: -L -J {t}"


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_produce_keys_and_consume(kcat: Kcat, pbroker: Deployment, topic: str) -> None:
    create_topic(pbroker.bootstrap, topic, partitions=3, replication=pbroker.replication)
    sent: dict[int, list[tuple[str, str]]] = {}
    for p, n in ((0, 5), (1, 8), (2, 3)):
        rows = [(f"k{p}-{i}", f"v{p}-{i}") for i in range(n)]
        if p == 1:
            rows.append(("colon", "value:with:colons"))
        sent[p] = rows
        kcat.produce(topic, [f"{k}:{v}".encode() for k, v in rows], "-p", str(p), "-K:")
    got = parse_kspo(kcat.consume(topic, "%k:%s:%p:%o\\n"))
    assert sorted(got) == [0, 1, 2], f"{CLIENT}: consumed partitions {sorted(got)}"
    for p, rows in sent.items():
        assert got[p] == [(k, v, i) for i, (k, v) in enumerate(rows)], (
            f"{CLIENT}: partition {p} read back {got[p]}, sent {rows}"
        )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_headers_timestamps_and_json(kcat: Kcat, pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=1, replication=pbroker.replication)
    t0 = now_ms()
    kcat.produce(topic, [b"a:1", b"b:2", b"c:3"], "-p", "0", "-K:", "-H", "h1=v1", "-H", "h2=")
    t1 = now_ms()
    lines = kcat.consume(topic, "%h|%k|%s|%T|%o\\n")
    assert len(lines) == 3, f"{CLIENT}: read back {lines}"
    for i, line in enumerate(lines):
        h, k, v, ts, off = line.split("|")
        assert (h, k, v, int(off)) == ("h1=v1,h2=", "abc"[i], str(i + 1), i), f"{CLIENT}: {line!r}"
        assert t0 - 1000 <= int(ts) <= t1 + 1000, f"{CLIENT}: CreateTime {ts} not in [{t0}, {t1}]"
    # Same records through another client: byte-exact headers.
    seen = confluent_consume_all(bs, topic, [0], expect_end={0: 3}, client=f"{CLIENT}->confluent")
    assert [s.headers for s in seen] == [(("h1", b"v1"), ("h2", b""))] * 3
    envs = [json.loads(x) for x in kcat("-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J")
            .stdout.decode().splitlines()]
    assert [(e["key"], e["payload"], e["offset"], e["tstype"]) for e in envs] == [
        ("a", "1", 0, "create"), ("b", "2", 1, "create"), ("c", "3", 2, "create")], f"{CLIENT}: {envs}"


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codec(kcat: Kcat, pbroker: Deployment, topic: str, codec: str) -> None:
    create_topic(pbroker.bootstrap, topic, partitions=1, replication=pbroker.replication)
    rows = [(f"key-{i:04d}", f"{codec} value {i:04d} " + "abc" * 50) for i in range(300)]
    kcat.produce(topic, [f"{k}:{v}".encode() for k, v in rows], "-p", "0", "-K:", "-z", codec,
                 "-X", "linger.ms=20")
    got = parse_kspo(kcat.consume(topic, "%k:%s:%p:%o\\n"))
    assert got.get(0) == [(k, v, i) for i, (k, v) in enumerate(rows)], (
        f"{CLIENT} -z {codec}: read back {len(got.get(0, []))} records, "
        f"first {got.get(0, [])[:2]}"
    )
    stored = pbroker.stored_codecs(topic, 0)
    assert stored and set(stored) == {CODEC_IDS[codec]}, (
        f"{CLIENT}: batches on disk have codecs {sorted(set(stored))}, expected only {codec}"
    )


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_query_offsets_by_timestamp(kcat: Kcat, pbroker: Deployment, topic: str) -> None:
    bs = pbroker.bootstrap
    create_topic(bs, topic, partitions=2, replication=pbroker.replication)
    base = base_timestamp()
    recs = [Rec(0, f"k{i}".encode(), f"v{i}".encode(), (), base + i * 1000) for i in range(10)]
    produce_recs(Producer({"bootstrap.servers": bs}), topic, recs)

    def query(*specs: str) -> list[str]:
        args: list[str] = ["-Q"]
        for s in specs:
            args += ["-t", s]
        return kcat(*args).stdout.decode().splitlines()

    for ts, want in [(base - 5000, 0), (base, 0), (base + 2500, 3), (base + 9000, 9),
                     (base + 9001, -1)]:
        out = query(f"{topic}:0:{ts}")
        assert out == [f"{topic} [0] offset {want}"], (
            f"{CLIENT} -Q {topic}:0:base{ts - base:+d} printed {out}, expected offset {want}"
        )
    out = query(f"{topic}:0:{base + 2500}", f"{topic}:1:{base}")
    assert out == [f"{topic} [0] offset 3", f"{topic} [1] offset -1"], f"{CLIENT} -Q: {out}"
    # -o s@ts consumes from the first record at or after ts.
    lines = kcat("-C", "-t", topic, "-p", "0", "-o", f"s@{base + 2500}", "-e", "-q",
                 "-f", "%o:%T\\n").stdout.decode().splitlines()
    assert lines == [f"{i}:{base + i * 1000}" for i in range(3, 10)], f"{CLIENT} -o s@: {lines}"


def test_auto_create_on_produce(kcat: Kcat, topic: str) -> None:
    kcat.produce(topic, [b"k:auto"], "-K:")
    out = kcat("-L", "-t", topic).stdout.decode()
    assert f'topic "{topic}" with 1 partitions:' in out, f"{CLIENT}: auto-created topic:\n{out}"
    assert kcat.consume(topic, "%k=%s@%p:%o\\n") == ["k=auto@0:0"]


def test_null_versus_empty_keys_and_values(kcat: Kcat, pbroker: Deployment, topic: str) -> None:
    """-Z: an empty key or value is sent as NULL; without -Z it is sent empty."""
    create_topic(pbroker.bootstrap, topic, partitions=1, replication=pbroker.replication)
    kcat.produce(topic, [b":null-key", b"null-value:"], "-p", "0", "-K:", "-Z")
    kcat.produce(topic, [b":empty-key", b"empty-value:"], "-p", "0", "-K:")
    # %K / %S print -1 for NULL and 0 for empty (kcat's -Z on the consumer side would
    # print "NULL" for empty ones too, so the lengths are the check).
    lines = kcat.consume(topic, "%K|%S|%k|%s\\n")
    assert lines == [
        "-1|8||null-key", "10|-1|null-value|",
        "0|9||empty-key", "11|0|empty-value|",
    ], f"{CLIENT}: null/empty keys and values read back as {lines}"


# -- durability -------------------------------------------------------------------

N_DURABLE = 300


def _produce_acked(k: Kcat, topic: str, tag: str) -> dict[int, list[str]]:
    """kcat exits 0 only if every message got a successful delivery report."""
    sent: dict[int, list[str]] = {}
    for p in range(3):
        rows = [f"{tag}-{p}-{i:05d}" for i in range(N_DURABLE // 3)]
        k.produce(topic, [f"k:{r}".encode() for r in rows], "-p", str(p), "-K:",
                  "-X", "acks=all", "-X", "enable.idempotence=true")
        sent[p] = rows
    return sent


def test_sigterm_restart_keeps_acked_records(broker: Broker, kcat_home: Path, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    k = Kcat(broker.bootstrap, kcat_home)
    sent = _produce_acked(k, topic, "term")
    rc = broker.stop()
    assert rc == 0, f"broker exited with {rc} after SIGTERM, expected a clean exit (0)"
    broker.start()
    got = parse_kspo(k.consume(topic, "%k:%s:%p:%o\\n"))
    for p, rows in sent.items():
        assert got.get(p) == [("k", r, i) for i, r in enumerate(rows)], (
            f"{CLIENT}: partition {p} after SIGTERM+restart has {len(got.get(p, []))} of "
            f"{len(rows)} acknowledged records"
        )


def test_kill9_restart_keeps_acked_records(broker: Broker, kcat_home: Path, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    k = Kcat(broker.bootstrap, kcat_home)
    sent = _produce_acked(k, topic, "kill")
    broker.kill()
    broker.start()
    got = parse_kspo(k.consume(topic, "%k:%s:%p:%o\\n"))
    for p, rows in sent.items():
        assert got.get(p) == [("k", r, i) for i, r in enumerate(rows)], (
            f"{CLIENT}: partition {p} after kill -9+restart has {len(got.get(p, []))} of "
            f"{len(rows)} acknowledged records (each must appear exactly once, in order)"
        )
    # And it takes new writes after the recovered end.
    k.produce(topic, [b"k:after"], "-p", "0", "-K:")
    lines = k("-C", "-t", topic, "-p", "0", "-o", "-1", "-e", "-q", "-f", "%o:%s\\n").stdout.decode()
    assert lines.splitlines() == [f"{len(sent[0])}:after"], f"{CLIENT}: {lines!r}"

