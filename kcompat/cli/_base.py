"""What every CLI module rests on: the one-line error, the client's identity
and ``--bootstrap-server``'s address list (``parse_bootstrap``, ``unreachable``).

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


def parse_bootstrap(server: str) -> list[tuple[str, int]]:
    """``--bootstrap-server HOST:PORT[,HOST:PORT...]`` -> the addresses in the
    order given (Kafka's tools take such a list and use whichever broker
    answers); blanks between commas are skipped, anything else that is not
    HOST:PORT is a usage error."""
    addresses = []
    for item in (part.strip() for part in server.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise CliError(f"--bootstrap-server takes HOST:PORT[,HOST:PORT...], got {item!r}", 2)
        addresses.append((host, int(port)))
    if not addresses:
        raise CliError(f"--bootstrap-server takes HOST:PORT[,HOST:PORT...], got {server!r}", 2)
    return addresses


def unreachable(failures: list[tuple[str, str]]) -> CliError:
    """The error when no address of ``--bootstrap-server`` answered:
    ``failures`` is (address, why) for each one tried, in order."""
    if len(failures) == 1:
        address, why = failures[0]
        return CliError(f"cannot reach a broker at {address}{': ' + why if why else ''}")
    tried = "; ".join(f"{address}{': ' + why if why else ''}" for address, why in failures)
    return CliError(f"cannot reach a broker at any of {len(failures)} addresses ({tried})")
