"""librdkafka's own test suite, fetched and built once into the compat cache.

librdkafka's source tree with its ``tests/`` ships inside the npm package
``@confluentinc/kafka-javascript`` (``package/deps/librdkafka``). ``ensure_built``
runs ``npm pack`` of the pinned version, checks the tarball's sha512 against the
pinned npm ``dist.integrity`` (and against what the registry says now), unpacks the
librdkafka tree into ``$COMPAT_CACHE/librdkafka-<version>`` (``compat_tests.java._jvm
.cache_root``: ``~/.cache/kcompat`` by default, where the Java jars are kept) and
builds the library and ``tests/test-runner`` without SSL, SASL, curl, zstd and
syslog (``make -j2``, at a lower priority: the machine is shared). A ``.built``
stamp makes every later call free; a lock serializes concurrent callers.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from compat_tests.java._jvm import cache_root

NPM_PACKAGE = "@confluentinc/kafka-javascript"
NPM_VERSION = "1.10.1"
#: ``npm view @confluentinc/kafka-javascript@1.10.1 dist.integrity``
NPM_INTEGRITY = ("sha512-KVePUBn21EqCVP9mfxzEuM3SYJHHEF7X+iiC2e43QQgDSyEaksInmCGooT3w5q+"
                 "cNAdkSCrK71j0ICfqoSqZLw==")
#: the librdkafka that package vendors (its ``deps/librdkafka``)
LIBRDKAFKA_VERSION = "2.15.1"
CONFIGURE_FLAGS = ("--disable-ssl", "--disable-gssapi", "--disable-sasl", "--disable-curl",
                   "--disable-zstd", "--disable-syslog")


class BuildError(RuntimeError):
    """npm, the download check or the build failed (the message says which)."""


def tree_dir() -> Path:
    """``$RDKAFKA_SUITE_TREE`` (a librdkafka tree built by hand: used as it is),
    else the cache's."""
    given = os.environ.get("RDKAFKA_SUITE_TREE")
    return Path(given) if given else cache_root() / f"librdkafka-{LIBRDKAFKA_VERSION}"


def tests_dir(tree: Path | None = None) -> Path:
    return (tree or tree_dir()) / "tests"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(cache_root() / ".librdkafka.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _integrity(path: Path) -> str:
    digest = hashlib.sha512(path.read_bytes()).digest()
    return "sha512-" + base64.b64encode(digest).decode()


def _fetch(workdir: Path) -> Path:
    """``npm pack`` the pinned package into ``workdir``; its checked tarball."""
    spec = f"{NPM_PACKAGE}@{NPM_VERSION}"
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError("npm not found on PATH (apt-get install npm)")
    listed = subprocess.run([npm, "view", spec, "dist.integrity"], capture_output=True,
                            text=True, timeout=120)
    if listed.returncode == 0 and listed.stdout.strip() not in ("", NPM_INTEGRITY):
        raise BuildError(f"the registry lists {listed.stdout.strip()} for {spec}, "
                         f"pinned {NPM_INTEGRITY}")
    out = subprocess.run([npm, "pack", spec, "--pack-destination", str(workdir)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise BuildError(f"npm pack {spec} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    tarballs = list(workdir.glob("*.tgz"))
    if len(tarballs) != 1:
        raise BuildError(f"npm pack left {tarballs} in {workdir}")
    got = _integrity(tarballs[0])
    if got != NPM_INTEGRITY:
        raise BuildError(f"{tarballs[0].name}: {got}, pinned {NPM_INTEGRITY}")
    return tarballs[0]


def _unpack(tarball: Path, dest: Path) -> None:
    """Extract ``package/deps/librdkafka/*`` of the tarball into ``dest``."""
    prefix = "package/deps/librdkafka/"
    with tarfile.open(tarball) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(prefix) or not (m.isfile() or m.isdir()):
                continue
            m.name = m.name[len(prefix):]
            if m.name:
                members.append(m)
        if not members:
            raise BuildError(f"{tarball.name} holds no {prefix}")
        tar.extractall(dest, members=members, filter="data")


def _make(tree: Path, log: Path) -> None:
    steps = [["./configure", *CONFIGURE_FLAGS],
             ["nice", "-n", "10", "make", "-j2", "libs"],
             ["nice", "-n", "10", "make", "-j2", "-C", "tests", "build"]]
    with open(log, "ab") as out:
        for cmd in steps:
            t0 = time.monotonic()
            print(f"[rdkafka-suite] {' '.join(cmd)} (in {tree})", file=sys.stderr, flush=True)
            rc = subprocess.call(cmd, cwd=str(tree), stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
            if rc != 0:
                tail = log.read_text(errors="replace")[-4000:]
                raise BuildError(f"{' '.join(cmd)} failed with exit code {rc}:\n{tail}")
            print(f"[rdkafka-suite] done in {time.monotonic() - t0:.0f}s", file=sys.stderr,
                  flush=True)


def ensure_built() -> Path:
    """The built librdkafka tree (its ``tests/test-runner`` ready); fetched and built
    on the first call."""
    tree = tree_dir()
    if os.environ.get("RDKAFKA_SUITE_TREE"):
        if not (tests_dir(tree) / "test-runner").exists():
            raise BuildError(f"RDKAFKA_SUITE_TREE={tree} has no tests/test-runner")
        return tree
    stamp = tree / ".built"
    if stamp.exists():
        return tree
    with _locked():
        if stamp.exists():
            return tree
        if tree.exists():
            shutil.rmtree(tree)
        tree.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="rdkafka-npm-") as tmp:
            _unpack(_fetch(Path(tmp)), tree)
        _make(tree, tree / "build.log")
        if not (tests_dir(tree) / "test-runner").exists():
            raise BuildError(f"no tests/test-runner in {tree} (see build.log)")
        stamp.write_text(f"{NPM_PACKAGE}@{NPM_VERSION} {NPM_INTEGRITY}\n")
    return tree


if __name__ == "__main__":
    print(ensure_built())
