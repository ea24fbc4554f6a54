"""kcompat.embedded and the pytest plugin, as another project uses them.

Each test starts its own brokers: what is checked is their start, what they
serve, their stop and the removal of their temporary data.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

import kcompat


def exited(bootstrap: kcompat.EmbeddedKafka) -> bool:
    return all(p.proc.poll() is not None for p in bootstrap._processes)


def test_one_broker_serves_kafka_python_and_is_gone_after(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("KCOMPAT_NUM_PARTITIONS", "7")  # the caller's env is not the broker's
    with kcompat.embedded(partitions=2) as bootstrap:
        assert isinstance(bootstrap, str) and bootstrap == bootstrap.bootstrap
        assert bootstrap.startswith("127.0.0.1:") and bootstrap.broker_count == 1
        assert bootstrap.data_dir.parent == tmp_path
        topic = bootstrap.create_topic("orders")
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        producer.send(topic, key=b"k", value=b"v", partition=1).get(timeout=10)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap)
        assert consumer.partitions_for_topic(topic) == {0, 1}
        tp = KafkaTopicPartition(topic, 1)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = consumer.poll(timeout_ms=5000, max_records=1)[tp]
        consumer.close()
        assert [(r.key, r.value) for r in records] == [(b"k", b"v")]
        assert bootstrap.list_topics() == {"orders"}
        bootstrap.delete_topic("orders")
    assert exited(bootstrap)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_setting_fails_the_start_with_the_brokers_words(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(kcompat.EmbeddedError, match="no.such.setting"):
        with kcompat.embedded(config={"no.such.setting": 1}):
            raise AssertionError("started")
    assert list(tmp_path.iterdir()) == []


def test_a_given_data_dir_is_kept_and_served_again(tmp_path: Path) -> None:
    with kcompat.embedded(data_dir=tmp_path) as bootstrap:
        bootstrap.create_topic("kept", partitions=3)
    assert exited(bootstrap)
    assert "kept-2" in {p.name for p in (tmp_path / "broker-1" / "data").iterdir()}
    with kcompat.embedded(data_dir=tmp_path) as again:
        assert again.list_topics() == {"kept"}


CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def kcompat_config():
    return {"num.partitions": 4}
"""

BROKER_TESTS = """
from kafka import KafkaProducer

def test_topic(kcompat_broker, kcompat_topic):
    open("broker_dir", "w").write(str(kcompat_broker.data_dir))
    assert kcompat_topic.startswith("test_topic-")
    producer = KafkaProducer(bootstrap_servers=kcompat_broker)
    assert producer.partitions_for(kcompat_topic) == {0, 1, 2, 3}
    producer.close()

def test_same_broker_other_topic(kcompat_broker, kcompat_topic):
    assert kcompat_topic in kcompat_broker.list_topics()
    assert len(kcompat_broker.list_topics()) == 2
"""

CLUSTER_TESTS = """
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

def test_three_brokers_replicate_a_topic(kcompat_cluster):
    open("cluster_dir", "w").write(str(kcompat_cluster.data_dir))
    assert len(kcompat_cluster.addresses) == 3
    assert kcompat_cluster == ",".join(kcompat_cluster.addresses)
    topic = kcompat_cluster.create_topic(partitions=2)
    md = AdminClient({"bootstrap.servers": kcompat_cluster}).list_topics(topic, timeout=10)
    assert {len(p.replicas) for p in md.topics[topic].partitions.values()} == {3}
    assert len(md.brokers) == 3
    producer = Producer({"bootstrap.servers": kcompat_cluster, "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": kcompat_cluster, "group.id": "g",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    values, at_end = [], set()
    while len(at_end) < 2:
        msg = consumer.poll(10)
        assert msg is not None
        if msg.error():
            at_end.add(msg.partition())
        else:
            values.append(int(msg.value()))
    consumer.close()
    assert sorted(values) == list(range(10))
"""


def test_the_pytest_plugin_serves_a_session_and_cleans_up(tmp_path: Path) -> None:
    """Another project's test session, with the fixtures and no import of
    kcompat: one broker shared by two tests, a 3-broker cluster that
    replicates (4 partitions per topic from the project's ``kcompat_config``);
    both data dirs are gone when the session is over."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = ignore::DeprecationWarning\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_broker.py").write_text(BROKER_TESTS)
    (tmp_path / "test_cluster.py").write_text(CLUSTER_TESTS)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout
    for name in ("broker_dir", "cluster_dir"):
        data_dir = Path((tmp_path / name).read_text())
        assert data_dir.name.startswith("kcompat-") and not data_dir.exists()


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for whoever adopted it to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_killed_test_run_leaves_no_broker_behind(tmp_path: Path) -> None:
    script = ("import kcompat, sys, time\n"
              "with kcompat.embedded() as b:\n"
              "    print(b._processes[0].proc.pid, b.data_dir, flush=True)\n"
              "    time.sleep(60)\n")
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    pid_text, data_dir = run.stdout.readline().split()
    run.kill()
    run.wait()
    deadline = time.monotonic() + 10
    while alive(int(pid_text)) and time.monotonic() < deadline:
        time.sleep(0.05)  # the broker drains on its SIGTERM
    assert not alive(int(pid_text))
    shutil.rmtree(data_dir)
