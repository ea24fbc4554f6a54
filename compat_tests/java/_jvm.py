"""Maven-resolved classpaths, cached outside the repo, for the Java suites.

Two things are resolved from Maven Central with the machine's ``mvn`` (which keeps
its own cache in ``~/.m2``) and then kept in ``$COMPAT_CACHE`` (default
``~/.cache/kcompat``), keyed by a hash of the inputs so a change rebuilds:

* ``reference_classpath()``: every runtime jar of Apache Kafka (``kafka_2.13``) and
  ``kafka-tools`` — the reference broker and Kafka's perf/verifiable tools.
* ``clients_classpath()``: the small Maven project in ``compat_tests/java/clients``
  (our Java client programs, kafka-clients 4.x) built with ``mvn package`` plus its
  dependencies.
* ``project_classpath(dir, name)``: the same for any such project (an application
  under ``compat_tests/apps``, e.g. the Kafka Streams program).

``python -m compat_tests.java._jvm`` resolves both (``make java-deps`` runs it)
and writes the class-data archive of the clients' classpath.

A class-data archive (``class_archive``): a JVM that starts a Kafka client reads,
parses and verifies some 2,000 classes of kafka-clients, half of its CPU for a
short run (0.9 CPU-s of a 10-record produce). ``build_class_archive`` starts one
JVM that loads every class of the classpath (``ClassWarmup``) and writes them at
exit (``-XX:ArchiveClassesAtExit``, JDK 13+); the suite's client JVMs map it
(``-XX:SharedArchiveFile``: 0.45 CPU-s for the same produce). The JVM checks
the archive against its classpath and its own build and ignores one that does
not match (a warning on stderr), so a stale archive costs time, never a result.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCE_POM = HERE / "reference" / "pom.xml"
CLIENTS_DIR = HERE / "clients"

#: Apache Kafka version of the reference broker, its tools and our Java clients.
KAFKA_VERSION = os.environ.get("KAFKA_REFERENCE_VERSION", "4.4.0")


def cache_root() -> Path:
    root = Path(os.environ.get("COMPAT_CACHE", Path.home() / ".cache" / "kcompat"))
    root.mkdir(parents=True, exist_ok=True)
    return root


class JvmSetupError(RuntimeError):
    """Maven or Java is missing, or resolution failed (the message says which)."""


def java_bin() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JvmSetupError("java not found on PATH (make tools installs openjdk-17-jdk-headless)")
    return found


def mvn_bin() -> str:
    found = shutil.which("mvn")
    if not found:
        raise JvmSetupError("mvn not found on PATH (make tools installs maven)")
    return found


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialize resolution between concurrent processes (pytest workers, make)."""
    lock_path = cache_root() / f".{name}.lock"
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _digest(paths: list[Path], extra: str = "", root: Path = HERE) -> str:
    h = hashlib.sha256(extra.encode())
    for p in sorted(paths):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def _run_mvn(args: list[str], cwd: Path, log: Path) -> None:
    cmd = [mvn_bin(), "-B", "-q", *args]
    t0 = time.monotonic()
    print(f"[kcompat] resolving with: {' '.join(cmd)} (in {cwd})", file=sys.stderr, flush=True)
    with open(log, "wb") as out:
        rc = subprocess.call(cmd, cwd=str(cwd), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    if rc != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise JvmSetupError(f"{' '.join(cmd)} failed with exit code {rc}:\n{tail}")
    print(f"[kcompat] done in {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)


def copied_dependencies(name: str, version: str, key: str, project: Path,
                        required: tuple[str, ...], lock: str,
                        finish: Callable[[Path, Path], None] | None = None) -> Path:
    """``$COMPAT_CACHE/{name}-{version}-{key}/libs``: every runtime jar of the Maven
    project in ``project`` (``mvn dependency:copy-dependencies``), resolved once under
    the lock ``lock``. Each glob of ``required`` must match a jar there;
    ``finish(libs, build_dir)`` may add to the jars before they are published."""
    dest = cache_root() / f"{name}-{version}-{key}" / "libs"
    stamp = dest.parent / ".complete"
    if stamp.exists():
        return dest
    with _locked(lock):
        if stamp.exists():
            return dest
        tmp = dest.parent / "libs.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _run_mvn(
            ["dependency:copy-dependencies", f"-Dkafka.version={version}",
             "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"],
            project, dest.parent / "mvn.log",
        )
        for jar in required:
            if not list(tmp.glob(jar)):
                raise JvmSetupError(f"{jar} missing from {tmp}")
        if finish is not None:
            finish(tmp, dest.parent)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        stamp.write_text(version)
    return dest


def reference_libs(version: str = KAFKA_VERSION) -> Path:
    """Directory with every jar of Apache Kafka ``version`` + kafka-tools (resolved once)."""
    return copied_dependencies("kafka", version, _digest([REFERENCE_POM], version),
                               REFERENCE_POM.parent, (f"kafka_2.13-{version}.jar",),
                               lock="reference")


def log4j2_properties(loggers: dict[str, str]) -> str:
    """A log4j2 properties file for a Kafka JVM: WARN and up to stdout, and each
    logger of ``loggers`` (name -> level) at its own level."""
    lines = ["status = warn",
             "appender.out.type = Console",
             "appender.out.name = OUT",
             "appender.out.layout.type = PatternLayout",
             "appender.out.layout.pattern = [%d] %p %m (%c)%n",
             "rootLogger.level = WARN",
             "rootLogger.appenderRef.out.ref = OUT"]
    for i, (name, level) in enumerate(loggers.items()):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"


def reference_classpath(version: str = KAFKA_VERSION) -> str:
    return str(reference_libs(version) / "*")


def clients_classpath(version: str = KAFKA_VERSION) -> str:
    """Classpath of the built ``compat_tests/java/clients`` programs (built once)."""
    return project_classpath(CLIENTS_DIR, "java-clients", version)


def project_classpath(project: Path, name: str, version: str = KAFKA_VERSION) -> str:
    """Classpath of the Maven project in ``project`` (artifactId ``kcompat-{name}``),
    built once into ``$COMPAT_CACHE/{name}-{hash of its pom and sources}``."""
    sources = [project / "pom.xml", *sorted((project / "src").rglob("*.java"))]
    key = _digest(sources, version, root=project.parent)
    build = cache_root() / f"{name}-{key}"
    stamp = build / ".complete"
    jar = build / f"kcompat-{name}.jar"
    libs = build / "libs"
    if not stamp.exists():
        with _locked(name):
            if not stamp.exists():
                shutil.rmtree(build, ignore_errors=True)
                build.mkdir(parents=True)
                _run_mvn(
                    ["package", "dependency:copy-dependencies", f"-Dkafka.version={version}",
                     f"-Dkcompat.build.dir={build / 'target'}", "-DincludeScope=runtime",
                     f"-DoutputDirectory={libs}"],
                    project, build / "mvn.log",
                )
                built = list((build / "target").glob(f"kcompat-{name}*.jar"))
                if not built:
                    raise JvmSetupError(f"mvn package produced no jar in {build / 'target'}")
                shutil.copy(built[0], jar)
                stamp.write_text(version)
                for old in cache_root().glob(f"{name}-*"):  # earlier source versions
                    if old != build:
                        shutil.rmtree(old, ignore_errors=True)
    return os.pathsep.join([str(jar), str(libs / "*")])


#: a short-lived JVM's collector and compiler: the serial collector, C1 only (the
#: suite's clients and its reference Kafka, ``kafka_reference.jvm_flags``)
QUICK_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
#: the JVM options of a class-data archive's dump and of the JVMs that map it (the
#: suite's client JVMs: java/conftest.py ``java_cmd``); the JVM's own warnings (an
#: archive it cannot use among them) to stderr, not to the stdout a test parses
CLIENT_JVM_OPTIONS = (*QUICK_JVM, "-Xlog:disable", "-Xlog:all=warning:stderr")
#: the clients project's class that loads every class of its classpath
CLASS_WARMUP = "io.kcompat.compat.ClassWarmup"


def class_archive(classpath: str) -> Path:
    """Where the class-data archive of ``classpath`` is kept (it exists once built):
    beside the classpath's first entry (a project's build directory, removed with it),
    named by the classpath and the JVM that would map it."""
    java = os.path.realpath(java_bin())
    key = hashlib.sha256(f"{java}\n{classpath}".encode()).hexdigest()[:12]
    return Path(classpath.split(os.pathsep)[0]).parent / f"classes-{key}.jsa"


def build_class_archive(classpath: str, main: str = CLASS_WARMUP) -> Path | None:
    """The class-data archive of ``classpath``, written once (a few seconds) by a
    JVM running ``main``; None (and a line on stderr) if the JVM could not write it."""
    path = class_archive(classpath)
    if path.exists():
        return path
    with _locked("classes"):
        if path.exists():
            return path
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        cmd = [java_bin(), "-Xmx256m", *CLIENT_JVM_OPTIONS,
               f"-XX:ArchiveClassesAtExit={partial}", "-cp", classpath, main]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not partial.exists():
            print(f"[kcompat] no class-data archive ({' '.join(cmd)} exited "
                  f"{done.returncode}): {done.stderr[-500:]}", file=sys.stderr, flush=True)
            partial.unlink(missing_ok=True)
            return None
        os.replace(partial, path)
    return path


def main() -> None:
    t0 = time.monotonic()
    print("reference Kafka libs:", reference_libs())
    clients = clients_classpath()
    print("java clients classpath:", clients)
    print("java clients class-data archive:", build_class_archive(clients))
    print(f"java deps ready in {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    main()
