"""``python -m kcompat`` and the ``kcompat`` script: the command (``kcompat.cli.main``)."""

import sys


def main() -> int:
    # kio registers hypothesis strategies for its types at import whenever
    # hypothesis is installed (it is a test dependency here, and ``make run``
    # installs the test extra): a fifth of a second of every broker's and
    # every CLI command's start, and 20 MiB of each broker's memory, for
    # strategies a process started as a command never uses. Such a process
    # runs as if it were absent.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from kcompat.cli.main import main as command

    return command()


if __name__ == "__main__":
    sys.exit(main())
