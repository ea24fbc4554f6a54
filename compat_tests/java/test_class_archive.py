"""The suite's Java client JVMs map a class-data archive of the clients' classpath
(``compat_tests/java/_jvm.py``): kafka-clients' classes come from it, not from the
jar, which halves the CPU of a short client run."""

from __future__ import annotations

import subprocess

from compat_tests.java._jvm import class_archive
from compat_tests.java.conftest import PKG, java_cmd


def test_a_client_jvm_loads_kafka_clients_from_the_class_archive(clients_cp: str) -> None:
    cmd = java_cmd(clients_cp, f"{PKG}.ClassWarmup")
    assert f"-XX:SharedArchiveFile={class_archive(clients_cp)}" in cmd
    at = cmd.index("-cp")
    cmd[at:at] = ["-Xlog:class+load=info:stdout"]  # after the options' -Xlog:disable
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = {line.split()[1]: line for line in done.stdout.splitlines()
             if "source:" in line and len(line.split()) > 2}
    for cls in ("org.apache.kafka.clients.producer.KafkaProducer",
                "org.apache.kafka.clients.consumer.KafkaConsumer",
                "org.apache.kafka.common.requests.FetchResponse"):
        assert "source: shared objects file (top)" in lines[cls], lines.get(cls)
