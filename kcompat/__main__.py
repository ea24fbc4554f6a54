"""``python -m kcompat``: the ``kcompat`` command (``kcompat.cli.main``)."""

import sys

# kio registers hypothesis strategies for its types at import whenever
# hypothesis is installed (it is a test dependency here): a fifth of a second
# of every broker's and every CLI command's start, for strategies a process
# started as a command never uses. Such a process runs as if it were absent.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from kcompat.cli.main import main  # noqa: E402

sys.exit(main())
