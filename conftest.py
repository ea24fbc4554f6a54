"""Suite-wide set-up, for tests/ and compat_tests/ alike.

Tests stop CLI and broker processes with SIGINT (^C). A child inherits an
*ignored* SIGINT — Python then installs no handler and ^C does nothing — and
the test waits for ever. The suite's own process can have SIGINT ignored: a
non-interactive shell starts background jobs so (``make test &``, a CI
wrapper), and the full run under pytest-xdist found a worker with SIGINT
ignored by the time it reached ``test_cli`` (a share-group consumer never
stopped). Before each test, an ignored SIGINT is made ^C again.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _sigint_interrupts() -> Iterator[None]:
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
