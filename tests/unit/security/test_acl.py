"""The ACL authorizer's rules (Kafka's StandardAuthorizer) and the ACL filters."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kcompat.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    AclStore,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_filter,
    check_new,
    operation,
    parse_super_users,
    rejects_whole_request,
    resource_type,
)

T, G, C, TX = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, \
    ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
Op = Operation
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.5"


def acl(name: str, op: Operation = Op.READ, perm: Permission = ALLOW, principal: str = ALICE,
        rt: ResourceType = T, pt: PatternType = LIT, host: str = "*") -> AclBinding:
    return AclBinding(rt, name, pt, principal, host, op, perm)


def authorizer(*bindings: AclBinding, supers: tuple[str, ...] = (),
               allow_if_no_acl: bool = False) -> Authorizer:
    return Authorizer(AclStore(bindings), supers, allow_if_no_acl)


def can(a: Authorizer, op: Operation, name: str, principal: str = ALICE, host: str = HOST,
        rt: ResourceType = T) -> bool:
    return a.authorize(principal, host, op, rt, name)


def test_wire_codes_are_kafkas() -> None:
    assert (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
            ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN,
            ResourceType.USER) == (2, 3, 4, 5, 6, 7)
    assert (PatternType.ANY, PatternType.MATCH, LIT, PRE) == (1, 2, 3, 4)
    assert (Op.ANY, Op.ALL, Op.READ, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_TOKENS) == (1, 2, 3, 12, 14)
    assert (Permission.ANY, DENY, ALLOW) == (1, 2, 3)
    assert resource_type(99) == ResourceType.UNKNOWN and operation(99) == Op.UNKNOWN


def test_no_acl_denies_by_default() -> None:
    assert not can(authorizer(), Op.READ, "t")


def test_super_user_may_do_anything_even_when_denied() -> None:
    a = authorizer(acl("t", Op.ALL, DENY, principal=BOB), supers=(BOB,))
    assert can(a, Op.WRITE, "t", principal=BOB)
    assert not can(a, Op.WRITE, "t", principal=ALICE)


def test_super_users_parse_kafkas_format() -> None:
    assert parse_super_users("User:admin; User:bob;") == {"User:admin", "User:bob"}
    assert parse_super_users("") == frozenset()


def test_allow_grants_that_operation_only() -> None:
    a = authorizer(acl("t", Op.READ))
    assert can(a, Op.READ, "t")
    assert not can(a, Op.WRITE, "t")
    assert not can(a, Op.READ, "t", principal=BOB)
    assert not can(a, Op.READ, "other")


def test_deny_wins_over_allow() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.READ, DENY))
    assert not can(a, Op.READ, "t")


def test_deny_of_everyone_wins_over_allow_of_one() -> None:
    a = authorizer(acl("t", Op.READ), acl("*", Op.READ, DENY, principal="User:*"))
    assert not can(a, Op.READ, "t")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_allow_implies_describe(granted: Operation) -> None:
    assert can(authorizer(acl("t", granted)), Op.DESCRIBE, "t")


@pytest.mark.parametrize("granted", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                     Op.IDEMPOTENT_WRITE])
def test_other_operations_do_not_imply_describe(granted: Operation) -> None:
    assert not can(authorizer(acl("t", granted)), Op.DESCRIBE, "t")


def test_alter_configs_implies_describe_configs_only() -> None:
    a = authorizer(acl("t", Op.ALTER_CONFIGS))
    assert can(a, Op.DESCRIBE_CONFIGS, "t")
    assert not can(authorizer(acl("t", Op.ALTER)), Op.DESCRIBE_CONFIGS, "t")
    assert not can(authorizer(acl("t", Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS, "t")


def test_deny_implies_nothing() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY))
    assert can(a, Op.DESCRIBE, "t")  # DENY READ leaves DESCRIBE allowed
    assert not can(a, Op.READ, "t")


def test_all_covers_every_operation_both_ways() -> None:
    allow_all = authorizer(acl("t", Op.ALL))
    assert all(can(allow_all, op, "t") for op in (Op.READ, Op.WRITE, Op.ALTER_CONFIGS, Op.DELETE))
    deny_all = authorizer(acl("t", Op.ALL), acl("t", Op.ALL, DENY))
    assert not can(deny_all, Op.DESCRIBE, "t")


def test_wildcard_principal_matches_everyone() -> None:
    a = authorizer(acl("t", principal="User:*"))
    assert can(a, Op.READ, "t", principal=BOB)
    assert can(a, Op.READ, "t", principal="User:ANONYMOUS")


def test_host_must_match_unless_wildcard() -> None:
    a = authorizer(acl("t", host=HOST))
    assert can(a, Op.READ, "t", host=HOST)
    assert not can(a, Op.READ, "t", host="10.0.0.6")


def test_literal_star_names_every_resource_of_its_type() -> None:
    a = authorizer(acl("*", Op.WRITE))
    assert can(a, Op.WRITE, "anything")
    assert not can(a, Op.WRITE, "anything", rt=G)


def test_literal_is_exact() -> None:
    a = authorizer(acl("orders"))
    assert not can(a, Op.READ, "orders-eu")
    assert not can(a, Op.READ, "order")


def test_prefixed_covers_names_that_start_with_it() -> None:
    a = authorizer(acl("orders-", pt=PRE))
    assert can(a, Op.READ, "orders-eu")
    assert can(a, Op.READ, "orders-")
    assert not can(a, Op.READ, "orders")
    assert not can(a, Op.READ, "my-orders-eu")


def test_prefixed_deny_beats_literal_allow() -> None:
    a = authorizer(acl("orders-eu"), acl("orders", Op.READ, DENY, pt=PRE))
    assert not can(a, Op.READ, "orders-eu")


def test_resource_types_are_separate() -> None:
    a = authorizer(acl("x", Op.READ, rt=G))
    assert can(a, Op.READ, "x", rt=G)
    assert not can(a, Op.READ, "x", rt=T)


def test_allow_everyone_if_no_acl_found() -> None:
    a = authorizer(acl("guarded", principal=BOB), allow_if_no_acl=True)
    assert can(a, Op.WRITE, "open")  # no ACL covers it
    # an ACL covers it (for someone else): no longer open
    assert not can(a, Op.READ, "guarded")
    assert can(a, Op.READ, "guarded", principal=BOB)


def test_allow_everyone_counts_wildcard_and_prefixed_acls_as_found() -> None:
    a = authorizer(acl("*", Op.READ, principal=BOB), acl("g", Op.READ, principal=BOB, rt=G),
                   acl("p-", Op.READ, principal=BOB, pt=PRE, rt=TX), allow_if_no_acl=True)
    assert not can(a, Op.WRITE, "any-topic")  # the literal * covers every topic
    assert can(a, Op.WRITE, "g2", rt=G)  # no group ACL covers g2
    assert not can(a, Op.READ, "g", rt=G)
    assert not can(a, Op.WRITE, "p-1", rt=TX)  # the prefix covers p-1
    assert can(a, Op.WRITE, "q-1", rt=TX)


def test_authorized_operations_bitfield() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.ALTER_CONFIGS))
    ops = a.authorized_operations(ALICE, HOST, T, "t")
    assert ops == (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)  # READ DESCRIBE DESC/ALTER_CONFIGS


def test_authorized_operations_of_a_super_user_are_the_types_operations() -> None:
    a = authorizer(supers=(ALICE,))
    cluster = a.authorized_operations(ALICE, HOST, C, "kafka-cluster")
    assert cluster == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    assert a.authorized_operations(ALICE, HOST, G, "g") == sum(1 << op for op in (3, 6, 8, 10, 11))
    assert a.authorized_operations(BOB, HOST, TX, "tx") == 0


def test_store_add_remove_replace() -> None:
    store = AclStore()
    a = Authorizer(store)
    b = acl("t")
    store.add(b)
    store.add(b)
    assert len(store) == 1 and can(a, Op.READ, "t")
    store.remove(b)
    store.remove(b)
    assert len(store) == 0 and not can(a, Op.READ, "t")
    store.replace([acl("u"), acl("v")])
    assert [x.name for x in store.bindings()] == ["u", "v"] and can(a, Op.READ, "u")


def test_binding_list_round_trip() -> None:
    b = acl("p-", Op.WRITE, DENY, pt=PRE, host=HOST)
    assert AclBinding.from_list(b.to_list()) == b


def flt(rt: ResourceType = ResourceType.ANY, name: str | None = None,
        pt: PatternType = PatternType.ANY, principal: str | None = None, host: str | None = None,
        op: Operation = Op.ANY, perm: Permission = Permission.ANY) -> AclBindingFilter:
    return AclBindingFilter(rt, name, pt, principal, host, op, perm)


def test_filter_nulls_and_any_match_everything() -> None:
    assert flt().matches(acl("t", Op.WRITE, DENY, pt=PRE))


def test_filter_fields_each_restrict() -> None:
    b = acl("t", Op.WRITE, DENY, host=HOST)
    assert not flt(rt=G).matches(b)
    assert not flt(name="u").matches(b)
    assert not flt(pt=PRE).matches(b)
    assert not flt(principal=BOB).matches(b)
    assert not flt(host="*").matches(b)
    assert not flt(op=Op.READ).matches(b)
    assert not flt(perm=ALLOW).matches(b)
    assert flt(T, "t", LIT, ALICE, HOST, Op.WRITE, DENY).matches(b)


def test_filter_match_finds_what_covers_a_resource() -> None:
    store = AclStore([acl("orders-eu"), acl("orders-", pt=PRE), acl("*"), acl("orders"),
                      acl("o", pt=PRE, rt=G)])
    found = store.find(flt(T, "orders-eu", PatternType.MATCH))
    assert sorted(b.name for b in found) == ["*", "orders-", "orders-eu"]
    # ANY with a name: that exact name, any pattern type
    assert [b.name for b in store.find(flt(T, "orders-", PatternType.ANY))] == ["orders-"]


def test_check_new_refuses_as_kafka_does() -> None:
    def message(b: AclBinding) -> str | None:
        with pytest.raises(AclError) as e:
            check_new(b)
        assert e.value.code == ErrorCode.invalid_request
        return e.value.message

    assert message(acl("x", rt=C, op=Op.ALTER)) == (
        "The only valid name for the CLUSTER resource is kafka-cluster")
    assert message(acl("")) == "Invalid empty resource name"
    assert message(acl("t", rt=ResourceType.UNKNOWN)) == "Invalid resourceType UNKNOWN"
    assert message(acl("t", pt=PatternType.UNKNOWN)) == "Invalid patternType UNKNOWN"
    assert message(acl("t", Op.UNKNOWN)) == "Invalid operation UNKNOWN"
    assert message(acl("t", perm=Permission.UNKNOWN)) == "Invalid permissionType UNKNOWN"
    assert message(acl("t", principal="alice")).startswith("Could not parse principal from")
    assert message(acl("t", host="")) == "Host pattern cannot be null or empty"
    check_new(acl("kafka-cluster", Op.ALTER, rt=C))


def test_any_or_match_where_a_value_is_due_rejects_the_request() -> None:
    assert rejects_whole_request(acl("t", rt=ResourceType.ANY))
    assert rejects_whole_request(acl("t", pt=PatternType.MATCH))
    assert rejects_whole_request(acl("t", Op.ANY))
    assert rejects_whole_request(acl("t", perm=Permission.ANY))
    assert not rejects_whole_request(acl("t", rt=ResourceType.UNKNOWN))


def test_check_filter_refuses_unknown_fields() -> None:
    with pytest.raises(AclError, match="patternFilter"):
        check_filter(flt(pt=PatternType.UNKNOWN))
    with pytest.raises(AclError, match="entryFilter"):
        check_filter(flt(perm=Permission.UNKNOWN))
    check_filter(flt())


def test_prefixed_index_follows_adds_and_removes() -> None:
    ab, cd, abc = (acl("ab", pt=PRE), acl("cd", pt=PRE), acl("abc", pt=PRE, principal=BOB))
    store = AclStore([ab, cd, abc])
    a = Authorizer(store, allow_if_no_acl=True)
    store.remove(cd)  # "ab" has the same length: still found
    assert can(a, Op.READ, "ab-1") and not can(a, Op.READ, "ab-1", principal=BOB)
    assert can(a, Op.READ, "cd-1", principal=BOB)  # nothing covers it: allow.everyone
    store.remove(ab)
    assert not can(a, Op.READ, "abc-1")  # covered by "abc" (Bob's) only
    assert can(a, Op.READ, "ab-1")  # nothing covers it any more: allow.everyone
    store.remove(abc)
    assert can(a, Op.WRITE, "abc-1") and len(store) == 0


def test_every_prefix_length_is_looked_at() -> None:
    a = authorizer(acl("o", pt=PRE), acl("ord", Op.READ, DENY, pt=PRE),
                   acl("orders-eu-", Op.WRITE, pt=PRE))
    assert not can(a, Op.READ, "orders-eu-1")  # the 3-character prefix denies
    assert can(a, Op.WRITE, "orders-eu-1")  # the 10-character one allows
    assert can(a, Op.READ, "other")
