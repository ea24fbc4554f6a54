"""Every test under compat_tests/apps is an application run: marked ``apps`` so that
`make test` (20-minute budget) leaves it to `make test-apps`."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "compat_tests/apps/" in str(item.fspath):
            item.add_marker(pytest.mark.apps)
