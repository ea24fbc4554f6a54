"""What every CLI module rests on: the one-line error and the client's identity.

``CliError`` and ``CLIENT_ID`` live below ``_common`` and ``_kio`` so that both
can use them and ``_common`` can still open ``_kio`` connections (a login
check) without the two modules importing each other.
"""

from __future__ import annotations

CLIENT_ID = "kcompat-cli"


class CliError(Exception):
    """A one-line, user-facing failure; ``exit_code`` 1 (runtime) or 2 (usage)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def parse_bootstrap(server: str) -> tuple[str, int]:
    """``--bootstrap-server HOST:PORT`` -> (host, port); anything else is a usage error."""
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CliError(f"--bootstrap-server takes HOST:PORT, got {server!r}", 2)
    return host, int(port)
