"""Suite-wide set-up, for tests/ and compat_tests/ alike.

Tests stop CLI and broker processes with SIGINT (^C). A child inherits an
*ignored* SIGINT — Python then installs no handler and ^C does nothing — and
the test waits for ever. The suite's own process can have SIGINT ignored: a
non-interactive shell starts background jobs so (``make test &``, a CI
wrapper), and the full run under pytest-xdist found a worker with SIGINT
ignored by the time it reached ``test_cli`` (a share-group consumer never
stopped). Before each test, an ignored SIGINT is made ^C again.

Under ``--dist loadgroup`` (``make test``'s pytest-xdist workers) a module
is one unit of work, as under ``--dist loadfile`` (its module fixtures start
once; ``pytest_xdist_make_scheduler``), except that the modules sharing a costly
resource a worker would start for itself are one unit together (``SHARED``):
the session's reference Apache Kafka (a JVM of 768 MiB, started on first use)
runs on one worker only, and the Spark suites (a Spark JVM each, one Ivy
cache) run one after the other.

Every broker the suite starts is told not to warm its codec
(``KCOMPAT_KCOMPAT_CODEC_WARM=false``, which each broker subprocess inherits; an
embedded one, which inherits no ``KCOMPAT_*``, is told by its harness): the
warm-up loads every API version's classes in the background, about 2 s of
CPU per start, and the suite starts some 450 brokers that each use a few
versions — half the CPU of a broker's start, spent on two cores that the
tests' clients and brokers share. For the same reason the reference Apache
Kafka brokers the tests start compile with C1 only and collect with the
serial collector (``KAFKA_REFERENCE_JVM=quick``,
``compat_tests/java/kafka_reference``), as the suite's Java clients do: 40 %
less CPU for a start and a light load; the benchmarks keep the JVM's defaults.

pytest rewrites each test module's asserts as it imports it, and keeps the
rewritten code in ``__pycache__`` only if its process may write bytecode.
Where ``PYTHONDONTWRITEBYTECODE`` is set (this machine's environment sets
it), every pytest process, each xdist worker among them, rewrote all ~280
modules again: 10 of a collection's 15 CPU-seconds. The suite's own process
may write it (``sys.dont_write_bytecode`` off here; the processes it starts
keep the environment's setting), and ``make test`` collects once ahead
(``test-bytecode``) so the workers find it written.

When a test fails, the stderr tail of every broker process its fixtures hold
(a ``Broker``, a ``Deployment``, a ``Cluster``) is attached to its report.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

#: (fixture name or directory, unit): the modules that ask for the fixture (a
#: parameter of that name, or getfixturevalue, in their source) or live in the
#: directory are one unit
SHARED = (("kafka_reference", "kafka-reference"), ("compat_tests/spark/", "spark"))

os.environ.setdefault("KCOMPAT_KCOMPAT_CODEC_WARM", "false")  # see above
os.environ.setdefault("KAFKA_REFERENCE_JVM", "quick")  # see above
sys.dont_write_bytecode = False  # pytest keeps its rewritten test modules: see above


@pytest.fixture(autouse=True)
def _sigint_interrupts() -> Iterator[None]:
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


def _unit_of(rootpath: Path, module: str, cache: dict[str, str]) -> str:
    """The unit of work of a test module: its group in ``SHARED``, else itself."""
    if module not in cache:
        cache[module] = module
        try:
            source = (rootpath / module).read_text(encoding="utf-8")
        except OSError:
            source = ""
        for key, group in SHARED:
            if module.startswith(key) or re.search(rf"(?<![.\w]){key}[\"']?\s*[:,)]", source):
                cache[module] = group
                break
    return cache[module]


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown when xdist is not loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: a module is one unit, or its ``SHARED`` group. The
    groups are found here, in the controller, which sees node ids only (xdist
    3.8 moves ``xdist_group`` marks into node ids, which pytest 9.2 ignores)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    units: dict[str, str] = {}

    class ModulesAndGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of(config.rootpath, nodeid.split("::", 1)[0], units)

    return ModulesAndGroups(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    rep = outcome.get_result()
    if not (rep.failed and rep.when in ("setup", "call")):
        return
    from compat_tests._broker import brokers_in

    for b in brokers_in(list((getattr(item, "funcargs", None) or {}).values())):
        state = "running" if b.running else f"not running (last exit code {b.last_returncode})"
        rep.sections.append(
            (f"kcompat broker {b.bootstrap} [{state}] stderr tail ({b.log_path})", b.tail()))
