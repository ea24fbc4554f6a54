"""JAAS config strings and certificate principal mapping rules, as Kafka reads them."""

from __future__ import annotations

import pytest

from kcompat.security import jaas
from kcompat.security.ssl_principal import MappingError, map_dn, parse_rules, subject_dn


def test_plain_login_module_users_and_identity() -> None:
    entry = jaas.parse('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                       '  username="admin" password="admin-secret"\n'
                       '  user_admin="admin-secret" user_alice="a \\"quoted\\" pw" user_bob=bare;')
    assert entry.login_module == jaas.PLAIN_LOGIN_MODULE
    assert entry.flag == "required"
    assert entry.options["username"] == "admin"
    assert entry.users() == {"admin": "admin-secret", "alice": 'a "quoted" pw', "bob": "bare"}


@pytest.mark.parametrize("text,problem", [
    ("org.Foo required user_a=\"x\"", "must end with ';'"),
    ("org.Foo mandatory;", "invalid control flag"),
    ("org.Foo required user_a;", "key=value pairs"),
    ("org.Foo required; org.Bar required;", "exactly one login module"),
    ("required;", "expected"),
])
def test_bad_jaas_configs_are_refused(text: str, problem: str) -> None:
    with pytest.raises(jaas.JaasError, match=problem):
        jaas.parse(text)


def test_subject_rendered_as_rfc2253_most_specific_first() -> None:
    subject = ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),),
               (("organizationalUnitName", "eng"),), (("commonName", "alice"),))
    assert subject_dn(subject) == "CN=alice,OU=eng,O=Acme\\, Inc,C=DE"


def test_mapping_rules_first_match_wins_with_case_flags() -> None:
    rules = parse_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                        "RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, DEFAULT")
    assert map_dn(rules, "CN=kafka-svc,OU=ServiceUsers,O=Acme") == "kafka-svc"
    assert map_dn(rules, "CN=Alice,OU=ENG,O=Acme") == "alice@eng"
    assert map_dn(rules, "CN=solo") == "CN=solo"
    upper = parse_rules("RULE:^CN=([^,]+).*$/$1/U")
    assert map_dn(upper, "CN=bob,O=x") == "BOB"


def test_no_matching_rule_refuses_the_client() -> None:
    with pytest.raises(MappingError, match="No rules apply"):
        map_dn(parse_rules("RULE:^CN=admin$/admin/"), "CN=alice")


@pytest.mark.parametrize("text", ["", "RULE:nope", "RULE:^(/x/Q", "SOMETHING"])
def test_bad_rules_are_refused(text: str) -> None:
    with pytest.raises(MappingError):
        parse_rules(text)
