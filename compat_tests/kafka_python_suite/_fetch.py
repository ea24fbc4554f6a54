"""kafka-python's own test suite, fetched once into the compat cache.

The suite ships in kafka-python's sdist on PyPI (``test/``), of the version the
project's environment runs (``PINNED``: version and sha256 of the sdist, checked
by pip with ``--require-hashes``). It is unpacked into
``$COMPAT_CACHE/kafka-python-<version>`` (``compat_tests.java._jvm.cache_root``).
The sdist leaves out two small files the suite imports: ``test/__init__.py``
(without it ``test`` is the standard library's package) and ``test/service.py``
(the process wrappers of the brokers it would spawn). kcompat runs the suite
against an external broker only, so ``SERVICE`` stands in for the second: the
external service it names and a spawned one that refuses to start.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from compat_tests.java._jvm import cache_root

PINNED = ("3.0.12", "4ccda3616b9aa5c353d74a97f2770d6cd1b950890d77ab0e8890e09a48eeed65")

SERVICE = '''"""kcompat's stand-in for kafka-python's test/service.py (not in its sdist):
the suite runs against an external broker only."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("kcompat runs kafka-python's suite against an external broker")
'''


def installed_version() -> str:
    import kafka

    return str(kafka.__version__)


def ensure_suite() -> Path:
    """The unpacked sdist (its root: ``kafka/`` and ``test/``), fetched if missing."""
    version, sha256 = PINNED
    if installed_version() != version:
        raise SystemExit(f"kafka-python {installed_version()} is installed; the suite pinned "
                         f"here is {version}: update PINNED (version and the sdist's sha256)")
    root = cache_root() / f"kafka-python-{version}"
    if not (root / "test" / "integration" / "conftest.py").is_file():
        with tempfile.TemporaryDirectory() as tmp:
            req = Path(tmp) / "req.txt"
            req.write_text(f"kafka-python=={version} --hash=sha256:{sha256}\n")
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--no-binary", ":all:", "--require-hashes", "-r", str(req),
                            "-d", tmp], check=True)
            [sdist] = Path(tmp).glob("kafka_python-*.tar.gz")
            with tarfile.open(sdist) as tar:
                tar.extractall(tmp, filter="data")
            unpacked = Path(tmp) / f"kafka_python-{version}"
            root.parent.mkdir(parents=True, exist_ok=True)
            unpacked.rename(root)
    (root / "test" / "__init__.py").touch()
    (root / "test" / "service.py").write_text(SERVICE)
    (root / "kafka-root").mkdir(exist_ok=True)  # KAFKA_ROOT: must exist, never used
    return root
