"""The authorizer's broker keys: how they load, build ``Broker.authorizer``'s
settings, and how DescribeConfigs lists them (as Kafka 4.4 does, measured in
compat_tests/java/test_acls_differential.py)."""

from __future__ import annotations

import pytest

from kcompat.broker.config import broker_config_entries
from kcompat.broker.config.broker_config import load
from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.host.broker import authorizer_of
from kcompat.security.acl import STANDARD_AUTHORIZER, AclStore


def test_no_authorizer_by_default() -> None:
    assert authorizer_of(load(None, {}, {}), AclStore()) is None


def test_standard_authorizer_with_its_settings() -> None:
    config = load(None, {"authorizer.class.name": STANDARD_AUTHORIZER,
                         "super.users": "User:admin; User:bob"},
                  {"KCOMPAT_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"})
    store = AclStore()
    authorizer = authorizer_of(config, store)
    assert authorizer is not None and authorizer.store is store
    assert authorizer.super_users == {"User:admin", "User:bob"}
    assert authorizer.allow_if_no_acl


def test_another_authorizer_class_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="authorizer.class.name.*StandardAuthorizer"):
        load(None, {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, {})


def _entries(flags: dict[str, str], asked: list[str] | None = None
             ) -> dict[str, broker_config_entries.Entry]:
    return {e.name: e for e in broker_config_entries.describe_broker(
        load(None, flags, {}), {}, 1, 9092, asked)}


def test_describe_configs_lists_the_authorizer_keys_as_kafka_does() -> None:
    flags = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
             "allow.everyone.if.no.acl.found": "true"}
    for asked in (None, list(flags)):
        entries = _entries(flags, asked)
        cls = entries["authorizer.class.name"]
        assert (cls.value, cls.source, cls.sensitive) == (STANDARD_AUTHORIZER, 4, False)
        for key in ("super.users", "allow.everyone.if.no.acl.found"):
            e = entries[key]  # a key KafkaConfig does not define: sensitive, null
            assert (e.value, e.source, e.sensitive, e.read_only, e.type_id, e.synonyms) == (
                None, 4, True, True, 0, ((key, None, 4),))
    unset = _entries({}, ["super.users", "allow.everyone.if.no.acl.found"])
    assert unset == {}
    assert "super.users" not in _entries({})


def test_secrets_are_described_without_their_values() -> None:
    """admin.token (kcompat's) and the listener passwords (Kafka's PASSWORD keys)
    are described as sensitive with no value, wherever they were set."""
    flags = {"admin.token": "t0ken-x1", "ssl.keystore.password": "pw-x2", "ssl.key.password": "kp-x3"}
    entries = _entries(flags)
    for key in flags:
        e = entries[key]
        assert (e.value, e.sensitive) == (None, True), key
        assert all(value is None for _, value, _ in e.synonyms), key
    assert not any(secret in repr(entries) for secret in flags.values())
