"""The filtered-view language: truth tables, error positions, a reference evaluator."""

from __future__ import annotations

import random
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompat.ext.view_filter import DEPTH_MAX, TEXT_CHARS_MAX, FilterError, parse

Headers = list[tuple[str, bytes | None]]
EU: Headers = [("region", b"eu")]
US: Headers = [("region", b"us")]
APAC: Headers = [("region", b"apac")]


def _h(**values: str | None) -> Headers:
    return [(k, None if v is None else v.encode()) for k, v in values.items()]


TRUTH: list[tuple[str, Headers, bool | None]] = [
    # strings: = and <> (and != as <>); NULL propagates
    ("region = 'eu'", EU, True), ("region = 'eu'", US, False),
    ("region = 'eu'", [], None), ("region = 'eu'", [("region", None)], None),
    ("region <> 'eu'", US, True), ("region != 'eu'", EU, False), ("region <> 'eu'", [], None),
    ("region = ''", [("region", b"")], True),
    # numbers: the header is read as a number; not a number is unknown, and so is its NOT
    ("amount > 100", _h(amount="150"), True), ("amount > 100", _h(amount="100"), False),
    ("amount > 100", _h(amount="abc"), None), ("NOT amount > 100", _h(amount="abc"), None),
    ("amount <> 100", _h(amount="abc"), None),
    ("amount >= 100.0", _h(amount="100"), True), ("amount = 100", _h(amount="100.0"), True),
    ("amount = 100", _h(amount="1e2"), True), ("amount = 100", _h(amount="+100"), True),
    ("amount = '100'", _h(amount="100.0"), False),  # a string literal compares strings
    ("amount < -5", _h(amount="-7.5"), True), ("amount > +5", _h(amount="6"), True),
    ("amount < - 5", _h(amount="-6"), True), ("amount < 0.5", _h(amount=".25"), True),
    ("amount = 5", _h(amount=" 5"), None), ("amount = 5", _h(amount="5_0"), None),
    ("amount = 5", _h(amount="٥"), None), ("amount > 1", _h(amount="9" * 200), None),
    ("amount <= 2.5E1", _h(amount="25"), True), ("amount = 0.1", _h(amount="0.1"), True),
    ("10 < amount", _h(amount="11"), True), ("10 < amount", _h(amount="9"), False),
    ("10 >= amount", _h(amount="10"), True),
    # BETWEEN includes its bounds
    ("amount BETWEEN 1 AND 10", _h(amount="1"), True),
    ("amount BETWEEN 1 AND 10", _h(amount="10"), True),
    ("amount BETWEEN 1 AND 10", _h(amount="10.5"), False),
    ("amount BETWEEN 1 AND 10", _h(amount="0"), False),
    ("amount BETWEEN 1 AND 10", _h(amount="x"), None), ("amount BETWEEN 1 AND 10", [], None),
    ("amount NOT BETWEEN 1 AND 10", _h(amount="11"), True),
    ("amount NOT BETWEEN 1 AND 10", _h(amount="5"), False),
    ("amount NOT BETWEEN 1 AND 10", [], None),
    ("amount BETWEEN -10 AND -1", _h(amount="-1"), True),
    ("amount BETWEEN 2 AND 2", _h(amount="2.0"), True),
    # IN is the OR of equalities
    ("region IN ('eu', 'us')", EU, True), ("region IN ('eu', 'us')", APAC, False),
    ("region IN ('eu', 'us')", [], None), ("region NOT IN ('eu', 'us')", APAC, True),
    ("region NOT IN ('eu', 'us')", EU, False), ("region NOT IN ('eu', 'us')", [], None),
    ("code IN (1, 2, 3)", _h(code="2"), True), ("code IN (1, 2, 3)", _h(code="2.0"), True),
    ("code IN (1, 2, 3)", _h(code="4"), False), ("code IN (1, 2, 3)", _h(code="x"), None),
    ("code IN (-1, 2.5)", _h(code="-1"), True), ("code NOT IN (1, 2)", _h(code="x"), None),
    ("code IN ('x', 2)", _h(code="x"), True), ("code IN ('x', 2)", _h(code="y"), None),
    ("code IN ('x', 2)", _h(code="3"), False),
    # IS [NOT] NULL: missing and null-valued headers are NULL, the empty string is not
    ("region IS NULL", [], True), ("region IS NULL", [("region", None)], True),
    ("region IS NULL", [("region", b"")], False), ("region IS NOT NULL", EU, True),
    ("region IS NOT NULL", [], False), ("NOT region IS NULL", EU, True),
    ("'x' IS NULL", [], False), ("NULL IS NULL", [], True),
    # TAGS is kc-tag, one tag per record; "TAGS" quoted is a header of that name
    ("TAGS IN ('a', 'b')", [("kc-tag", b"a")], True),
    ("TAGS IN ('a', 'b')", [("kc-tag", b"c")], False), ("TAGS IN ('a', 'b')", [], None),
    ("tags = 'a'", [("kc-tag", b"a")], True), ("TAGS = 'a'", [("kc-tag", b"a||b")], False),
    ('"TAGS" = \'a\'', [("TAGS", b"a")], True), ('"TAGS" = \'a\'', [("kc-tag", b"a")], None),
    # a repeated header reads its last value
    ("region = 'eu'", US + EU, True), ("region = 'eu'", EU + [("region", None)], None),
    # names
    ("kc.source-dc = 'x'", [("kc.source-dc", b"x")], True),
    ("$id = 'x'", [("$id", b"x")], True), ("Region = 'eu'", EU, None),
    ('"my header" = \'it\'\'s\'', [("my header", b"it's")], True),
    ('"a""b" = \'x\'', [('a"b', b"x")], True), ('"and" = \'x\'', [("and", b"x")], True),
    ("name = 'Zoë'", [("name", "Zoë".encode())], True),
    ("a = 'x'", [("a", b"\xff")], False), ("a = 1", [("a", b"\xff")], None),
    # precedence: NOT > AND > OR, parentheses override
    ("a = 1 OR b = 1 AND c = 1", _h(a="1", b="0", c="0"), True),
    ("(a = 1 OR b = 1) AND c = 1", _h(a="1", b="0", c="0"), False),
    ("NOT a = 1 AND b = 1", _h(a="0", b="1"), True),
    ("NOT (a = 1 AND b = 1)", _h(a="1", b="0"), True),
    ("NOT NOT a = 1", _h(a="1"), True), ("((a = 1))", _h(a="1"), True),
    ("a = 1 AND NOT b = 1 OR c = 1", _h(a="1", b="1", c="0"), False),
    # three-valued logic
    ("a = 1 AND b = 1", _h(a="0"), False), ("a = 1 AND b = 1", _h(a="1"), None),
    ("a = 1 OR b = 1", _h(a="1"), True), ("a = 1 OR b = 1", _h(a="0"), None),
    ("NOT (a = 1 OR b = 1)", _h(a="0"), None), ("b = 1 OR TRUE", [], True),
    ("b = 1 AND FALSE", [], False),
    # booleans
    ("TRUE", [], True), ("FALSE OR TRUE", [], True), ("NOT TRUE", [], False),
    ("flag = TRUE", _h(flag="True"), True), ("flag = TRUE", _h(flag="false"), False),
    ("flag = TRUE", _h(flag="yes"), None), ("flag <> FALSE", _h(flag="true"), True),
    ("FALSE = flag", _h(flag="FALSE"), True), ("TRUE = TRUE", [], True),
    # literals with literals, headers with headers
    ("1 = 1", [], True), ("'a' <> 'a'", [], False), ("1 < 2.5", [], True),
    ("a = b", _h(a="x", b="x"), True), ("a = b", _h(a="1", b="1.0"), False),
    ("a <> b", _h(a="x"), None), ("a < b", _h(a="1", b="1.5"), True),
    ("a >= b", _h(a="x", b="1"), None),
    # keywords in any case, comments
    ("region in ('eu') and amount between 1 and 5 Or x iS nOt NuLl", EU + _h(amount="3"), True),
    ("a = 1 -- the rest is a comment\n AND b = 2 /* and\n this */", _h(a="1", b="2"), True),
]


@pytest.mark.parametrize(("text", "headers", "expected"), TRUTH)
def test_truth_table(text: str, headers: Headers, expected: bool | None) -> None:
    view = parse(text)
    assert view.evaluate(headers) is expected
    assert view.matches(headers) is (expected is True)


def test_the_views_of_the_issue_and_what_a_filter_tells() -> None:
    view = parse("region = 'eu' AND amount > 100")
    assert view.text == "region = 'eu' AND amount > 100"
    assert view.header_names == {"region", "amount"}
    records = [EU + _h(amount="150"), EU + _h(amount="50"), US + _h(amount="150"),
               _h(amount="150"), EU + _h(amount="lots"), EU + _h(amount="100.5")]
    assert [view.matches(r) for r in records] == [True, False, False, False, False, True]
    assert parse("TAGS IN ('a','b')").header_names == {"kc-tag"}
    assert parse("region IS NULL").matches([("other", b"x")])
    assert parse("TRUE").header_names == frozenset()


ERRORS: list[tuple[str, int, str]] = [
    ("", 0, "expected a header name or a literal, found end of input"),
    ("   ", 3, "expected a header name or a literal, found end of input"),
    ("a", 1, "expected an operator after header name a, found end of input"),
    ("5", 1, "expected an operator after number 5"),
    ("a = ", 4, "expected a header name or a literal, found end of input"),
    ("a = 1 b = 2", 6, "expected AND, OR or end of input, found header name b"),
    ("(a = 1", 6, "expected AND, OR or ')', found end of input"),
    ("a = 1)", 5, "expected AND, OR or end of input, found ')'"),
    ("upper(a) = 'X'", 0, "unknown function upper"),
    ("a = 1 AND len (b) > 2", 10, "unknown function len"),
    ("TAGS('a')", 0, "unknown function TAGS"),
    ("a = 'abc", 4, "unterminated string"),
    ("a = 'it''s", 8, "unterminated string"),  # 'it' is a string, then 's begins one
    ('"a = 1', 0, "unterminated quoted header name"),
    ("a = 1 /* x", 6, "unterminated comment"),
    ('"" = 1', 0, "empty header name"),
    ("a > 1x", 4, "bad number 1x"),
    ("a > 1.2.3", 4, "bad number 1.2.3"),
    ("a > 1e", 4, "bad number 1e"),
    ("a > 1e999", 4, "bad number 1e999"),
    ("a > " + "9" * 101, 4, "bad number"),
    ("a = NULL", 4, "NULL cannot be compared: use IS NULL or IS NOT NULL"),
    ("NULL <> a", 0, "NULL cannot be compared"),
    ("a < 'm'", 4, "string 'm' cannot be compared with '<' (only = and <>)"),
    ("'m' >= a", 0, "cannot be compared with '>='"),
    ("a >= TRUE", 5, "keyword TRUE cannot be compared with '>='"),
    ("1 = 'x'", 2, "cannot compare a number with a string"),
    ("TRUE = 1", 5, "cannot compare a boolean with a number"),
    ("a IN ()", 6, "expected a string or number literal, found ')'"),
    ("a IN ('x' 'y')", 10, "expected ',' or ')', found string 'y'"),
    ("a IN ('x', b)", 11, "expected a string or number literal, found header name b"),
    ("a IN ('x', NULL)", 11, "expected a string or number literal, found keyword NULL"),
    ("a IN 'x'", 5, "expected '(' after IN, found string 'x'"),
    ("5 IN (5)", 0, "IN needs a header name on its left, found number 5"),
    ("'a' BETWEEN 1 AND 2", 0, "BETWEEN needs a header name on its left"),
    ("a BETWEEN 5 AND 1", 10, "BETWEEN bounds reversed: 5 > 1"),
    ("a NOT BETWEEN 1.5 AND -1", 14, "BETWEEN bounds reversed"),
    ("a BETWEEN 'a' AND 'z'", 10, "expected a number as a bound of BETWEEN, found string 'a'"),
    ("a BETWEEN 1 AND b", 16, "expected a number as a bound of BETWEEN, found header name b"),
    ("a BETWEEN 1 OR 2", 12, "expected AND, found keyword OR"),
    ("a NOT LIKE 'x'", 6, "expected IN or BETWEEN after NOT, found header name LIKE"),
    ("a CONTAINS 'x'", 2, "expected an operator after header name a, found header name "
                          "CONTAINS"),
    ("a IS 5", 5, "expected NULL or NOT NULL, found number 5"),
    ("a IS NOT 5", 9, "expected NULL, found number 5"),
    ("a = - b", 6, "expected a number after '-', found header name b"),
    ("a == 1", 3, "expected a header name or a literal, found '='"),
    ("a = 1 && b = 2", 6, "unexpected character '&'"),
    ("a = 1 AND", 9, "expected a header name or a literal, found end of input"),
    ("AND = 1", 0, "expected a header name or a literal, found keyword AND"),
    ("NOT", 3, "expected a header name or a literal, found end of input"),
    ("a = 1 OR OR b = 1", 9, "found keyword OR"),
    ("a = 1;", 5, "unexpected character ';'"),
]


@pytest.mark.parametrize(("text", "position", "message"), ERRORS)
def test_bad_expressions_name_what_was_expected_and_where(text: str, position: int,
                                                          message: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse(text)
    assert caught.value.position == position
    assert message in caught.value.message
    assert str(caught.value).endswith(f"(at character {position})")


def test_length_and_depth_are_capped() -> None:
    longest = "a = 1" + " " * (TEXT_CHARS_MAX - 5)
    assert parse(longest).matches(_h(a="1"))
    with pytest.raises(FilterError) as caught:
        parse(longest + " ")
    assert caught.value.position == TEXT_CHARS_MAX and "longer than 4096" in str(caught.value)
    deepest = "(" * DEPTH_MAX + "a = 1" + ")" * DEPTH_MAX
    assert parse(deepest).matches(_h(a="1"))
    with pytest.raises(FilterError) as caught:
        parse("(" + deepest + ")")
    assert caught.value.position == DEPTH_MAX and "nested more than 64" in str(caught.value)
    assert parse("NOT " * DEPTH_MAX + "a = 1").matches(_h(a="1"))
    with pytest.raises(FilterError) as caught:
        parse("NOT " * (DEPTH_MAX + 1) + "a = 1")
    assert caught.value.position == 4 * DEPTH_MAX
    chain = " OR ".join(["a = 1"] * 400)  # long, but flat
    assert len(chain) < TEXT_CHARS_MAX and parse(chain).matches(_h(a="1"))


# -- a reference evaluator over a small grammar -------------------------------

NAMES = ("a", "b", "c")
VALUES = (None, "1", "01", "2.5", "-3", "10", "x", "abc", "")
NUMBERS = (-3, 0, 1, 2.5, 10, -0.5)
STRINGS = ("x", "abc", "1", "")
OPS = ("=", "<>", "<", "<=", ">", ">=")
FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}

Ast = tuple[Any, ...]
literals = st.one_of(st.sampled_from(NUMBERS), st.sampled_from(STRINGS))
leaves = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(NAMES), st.sampled_from(OPS),
              st.sampled_from(NUMBERS)),
    st.tuples(st.just("cmp"), st.sampled_from(NAMES), st.sampled_from(("=", "<>")),
              st.sampled_from(STRINGS)),
    st.tuples(st.just("in"), st.sampled_from(NAMES), st.booleans(),
              st.lists(literals, min_size=1, max_size=3).map(tuple)),
    st.tuples(st.just("between"), st.sampled_from(NAMES), st.booleans(),
              st.lists(st.sampled_from(NUMBERS), min_size=2, max_size=2).map(sorted)),
    st.tuples(st.just("null"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("const"), st.booleans()),
)
expressions = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(st.just("not"), inner), st.tuples(st.just("and"), inner, inner),
    st.tuples(st.just("or"), inner, inner)), max_leaves=10)
records = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES)), max_size=5)


def _num(value: str) -> Decimal | None:
    return Decimal(value) if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value) else None


def _equal(value: str | None, literal: object) -> bool | None:
    if value is None:
        return None
    if isinstance(literal, str):
        return value == literal
    number = _num(value)
    return None if number is None else number == Decimal(str(literal))


def _reference(e: Ast, env: dict[str, str | None]) -> bool | None:  # noqa: PLR0911
    kind = e[0]
    if kind == "const":
        return bool(e[1])
    if kind in ("not", "and", "or"):
        parts = [_reference(p, env) for p in e[1:]]
        if kind == "not":
            return None if parts[0] is None else not parts[0]
        decisive: bool = kind == "or"
        if decisive in parts:
            return decisive
        return None if None in parts else not decisive
    value = env.get(str(e[1]))
    if kind == "null":
        return (value is None) != bool(e[2])
    if kind == "in":
        found = [_equal(value, item) for item in e[3]]
        result = True if True in found else None if None in found else False
    elif kind == "between":
        low, high = e[3]
        number = None if value is None else _num(value)
        result = None if number is None else (
            Decimal(str(low)) <= number <= Decimal(str(high)))
    else:
        op, literal = e[2], e[3]
        if op in ("=", "<>"):
            result = _equal(value, literal)
            return result if result is None or op == "=" else not result
        number = None if value is None else _num(value)
        if number is None:
            return None
        d = Decimal(str(literal))
        return {"<": number < d, "<=": number <= d, ">": number > d, ">=": number >= d}[str(op)]
    return None if result is None else result != e[2]


def _lit(value: object) -> str:
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else str(value)


def _render(e: Ast, rng: random.Random) -> tuple[str, int]:
    """The text of ``e`` and its precedence (OR 1, AND 2, NOT 3, a predicate 4)."""
    def kw(word: str) -> str:
        return rng.choice((word, word.lower(), word.capitalize()))

    def child(sub: Ast, least: int) -> str:
        text, level = _render(sub, rng)
        return f"({text})" if level < least or rng.random() < 0.1 else text

    kind = e[0]
    if kind == "not":
        return f"{kw('NOT')} {child(e[1], 3)}", 3
    if kind in ("and", "or"):
        level = 2 if kind == "and" else 1
        return f"{child(e[1], level)} {kw(kind.upper())} {child(e[2], level + 1)}", level
    if kind == "const":
        return kw("TRUE" if e[1] else "FALSE"), 4
    name = str(e[1])
    if kind == "null":
        return f"{name} {kw('IS')} {kw('NOT') + ' ' if e[2] else ''}{kw('NULL')}", 4
    negated = kw("NOT") + " " if e[2] else ""
    if kind == "in":
        items = ", ".join(_lit(i) for i in e[3])
        return f"{name} {negated}{kw('IN')} ({items})", 4
    if kind == "between":
        low, high = e[3]
        return f"{name} {negated}{kw('BETWEEN')} {low} {kw('AND')} {high}", 4
    op, literal = str(e[2]), e[3]
    if rng.random() < 0.3:
        return f"{_lit(literal)} {FLIP[op]} {name}", 4
    return f"{name} {'!=' if op == '<>' and rng.random() < 0.5 else op} {_lit(literal)}", 4


@settings(max_examples=300, deadline=None)
@given(expressions, st.lists(records, min_size=1, max_size=4), st.integers(0, 2**32))
def test_agrees_with_a_reference_evaluator(e: Ast, batch: list[list[tuple[str, str | None]]],
                                           seed: int) -> None:
    text, _ = _render(e, random.Random(seed))
    view = parse(text)
    for record in batch:
        headers = [(k, None if v is None else v.encode()) for k, v in record]
        assert view.evaluate(headers) is _reference(e, dict(record)), (text, record)
