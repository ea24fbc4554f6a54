# The kcompat_broker, kcompat_cluster and kcompat_topic fixtures come from kcompat's
# pytest plugin, loaded by pytest because kcompat is installed: nothing to import.
# This file only makes order_events importable, here and from kcompat's repository root.
import pytest


@pytest.fixture(scope="session")
def kcompat_config() -> dict[str, object]:
    """Broker settings for the session's kcompat broker: three partitions per new topic."""
    return {"num.partitions": 3}
