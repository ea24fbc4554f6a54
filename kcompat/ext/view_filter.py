"""The filter language of filtered views (``kc.view.filter``, docs/extensions.md).

Theory of operation
-------------------
``parse(text)`` compiles an expression once into a ``Filter``; the broker then
calls ``Filter.matches(record.headers)`` per record. Compiling builds a tree
of closures, so a record costs one pass over its headers (keeping only the
names in ``Filter.header_names``) and one call per predicate, not a re-walk
of a syntax tree. A syntax error raises ``FilterError(message, position)``
with a 0-based character position into ``text`` (the caller answers
INVALID_CONFIG naming ``kc.view.filter`` and the position).

The language is RocketMQ 5's SQL92 subset (``SelectorParser.jj``), over
record headers instead of message properties::

    expr      := and (OR and)*
    and       := not (AND not)*
    not       := NOT not | '(' expr ')' | predicate
    predicate := operand (= | <> | != | < | <= | > | >=) operand
               | header [NOT] IN '(' literal (',' literal)* ')'
               | header [NOT] BETWEEN number AND number
               | operand IS [NOT] NULL
               | TRUE | FALSE
    operand   := header | literal
    literal   := 'text' | [+|-] number | TRUE | FALSE | NULL

Decisions, RocketMQ's unless said otherwise:

* Keywords are case-insensitive; header names are case-sensitive (Kafka's).
  A bare header name is ``[A-Za-z_$][A-Za-z0-9_$.-]*`` (RocketMQ's, plus
  ``.`` and ``-``, common in Kafka header names; unambiguous as the language
  has no arithmetic) and not a keyword; ``"any name"`` (``""`` for a quote)
  names any header. ``TAGS`` (any case) is header ``kc-tag``, which holds ONE
  tag as RocketMQ's message does (``a||b`` is a subscription-side list, not a
  tag); ``"TAGS"`` quoted is a header called TAGS.
* A repeated header reads its LAST value (Kafka's ``Headers.lastHeader``); a
  missing header or a null value is NULL; values are decoded as UTF-8 (bytes
  that are not UTF-8 equal no literal and are no number).
* Three-valued logic as in SQL: a comparison with NULL is unknown, NOT
  unknown is unknown, ``FALSE AND unknown`` is false, ``TRUE OR unknown`` is
  true; a record matches only when the whole expression is TRUE.
* Against a number literal a header value is read as a number (the literal
  grammar with an optional sign, ≤ 100 characters; integers exact, decimals
  as doubles); a value that is no number makes the comparison unknown (in
  RocketMQ it is an evaluation error: the record does not match either way,
  nor does its NOT). ``IN`` is the OR of equalities; ``BETWEEN`` includes its
  bounds, which must be number literals with low ≤ high.
* Strings compare with ``=`` and ``<>`` only: ordering a string literal is a
  syntax error (RocketMQ: "cannot be compared"); ``h1 < h2`` reads both
  headers as numbers. ``h = TRUE`` reads the value as ``true``/``false``
  (any case). ``x = NULL`` is a syntax error (use IS NULL).
* ``!=`` is accepted as ``<>`` (a kcompat extension); ``IN`` lists may hold
  numbers (RocketMQ: strings only). NOT has the usual SQL precedence, binding
  looser than comparisons (``NOT a = 1`` is ``NOT (a = 1)``; the JMS grammar
  RocketMQ inherited reads it as ``(NOT a) = 1``). ``--`` and ``/* */``
  comments are skipped. ``CONTAINS`` and functions are not supported: any
  ``name(`` is "unknown function".
* Limits: 4096 characters, nesting (parentheses and NOT) 64 deep.

Pure: no I/O.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

TAG_HEADER = "kc-tag"
TEXT_CHARS_MAX = 4096
DEPTH_MAX = 64
NUMBER_CHARS_MAX = 100

Env = dict[str, str | None]
Predicate = Callable[[Env], bool | None]
Number = int | float
Literal = str | Number | bool | None
Compare = Callable[[Any, Any], bool]

KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "TRUE", "FALSE"})
_COMPARISONS: dict[str, Compare] = {
    "=": operator.eq, "<>": operator.ne, "!=": operator.ne,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>", "!=": "!="}
_ORDERING = frozenset({"<", "<=", ">", ">="})

_LEXEME = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n\r]*|/\*.*?\*/)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<number>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$.\-]*)
  | (?P<symbol><>|<=|>=|!=|[=<>(),+\-])
""", re.VERBOSE | re.DOTALL)
_WORD_TAIL = re.compile(r"[A-Za-z0-9_$.]*")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class FilterError(ValueError):
    """A filter expression the broker refuses (INVALID_CONFIG)."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at character {position})")
        self.message = message
        self.position = position  # 0-based, into the expression's text


@dataclass(frozen=True, slots=True, eq=False)
class Filter:
    """A compiled filter: ``matches`` is true when the expression is TRUE."""

    text: str
    header_names: frozenset[str]  # the headers it reads; others need no decoding
    _predicate: Predicate = field(repr=False)

    def evaluate(self, headers: Iterable[tuple[str, bytes | None]]) -> bool | None:
        """TRUE, FALSE or unknown (None) for one record's headers."""
        wanted = self.header_names
        env: Env = {}
        for name, value in headers:
            if name in wanted:  # the last value of a repeated header wins
                env[name] = None if value is None else value.decode("utf-8", "surrogateescape")
        return self._predicate(env)

    def matches(self, headers: Iterable[tuple[str, bytes | None]]) -> bool:
        return self.evaluate(headers) is True


def parse(text: str) -> Filter:
    """Compile ``text`` (see the module) or raise ``FilterError``."""
    if len(text) > TEXT_CHARS_MAX:
        raise FilterError(f"expression longer than {TEXT_CHARS_MAX} characters", TEXT_CHARS_MAX)
    parser = _Parser(_tokenize(text))
    predicate = parser.parse_or()
    token = parser.peek()
    if token.kind != "end":
        raise _expected("AND, OR or end of input", token)
    return Filter(text, frozenset(parser.names), predicate)


# -- tokens -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # end, keyword, name, quoted, string, number, symbol
    source: str  # as written (a keyword upper-cased)
    position: int
    value: Literal = None  # a string's or number's value, a name's header

    def describe(self) -> str:
        if self.kind == "end":
            return "end of input"
        if self.kind in ("name", "quoted"):
            return f"header name {self.source}"
        if self.kind == "symbol":
            return f"'{self.source}'"
        return f"{self.kind} {self.source}"

    def is_symbol(self, *symbols: str) -> bool:
        return self.kind == "symbol" and self.source in symbols

    def is_keyword(self, *words: str) -> bool:
        return self.kind == "keyword" and self.source in words


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        match = _LEXEME.match(text, position)
        if match is None:
            raise _bad_character(text, position)
        kind, source, end = match.lastgroup or "", match.group(), match.end()
        if kind == "number":
            tokens.append(_number_token(text, source, position, end))
        elif kind == "name":
            word = source.upper()
            if word in KEYWORDS:
                tokens.append(_Token("keyword", word, position))
            else:
                header = TAG_HEADER if word == "TAGS" else source
                tokens.append(_Token("name", source, position, header))
        elif kind in ("string", "quoted"):
            quote = source[0]
            value = source[1:-1].replace(quote * 2, quote)
            if kind == "quoted" and not value:
                raise FilterError("empty header name", position)
            tokens.append(_Token(kind, source, position, value))
        elif kind == "symbol":
            tokens.append(_Token("symbol", source, position))
        position = end
    tokens.append(_Token("end", "", len(text)))
    return tokens


def _number_token(text: str, source: str, position: int, end: int) -> _Token:
    tail = _WORD_TAIL.match(text, end)
    if tail is not None and tail.end() > end:
        raise FilterError(f"bad number {text[position:tail.end()]}", position)
    value = _to_number(source)
    if value is None or value in (float("inf"), float("-inf")):
        raise FilterError(f"bad number {source}", position)
    return _Token("number", source, position, value)


def _bad_character(text: str, position: int) -> FilterError:
    char = text[position]
    if char == "'":
        return FilterError("unterminated string", position)
    if char == '"':
        return FilterError("unterminated quoted header name", position)
    if text.startswith("/*", position):
        return FilterError("unterminated comment", position)
    return FilterError(f"unexpected character {char!r}", position)


def _expected(what: str, token: _Token) -> FilterError:
    return FilterError(f"expected {what}, found {token.describe()}", token.position)


@functools.lru_cache(maxsize=4096)  # header values repeat: read each once
def _to_number(text: str) -> Number | None:
    """A header value or literal as a number, or None when it is not one."""
    if len(text) > NUMBER_CHARS_MAX or _NUMBER.fullmatch(text) is None:
        return None
    if "." in text or "e" in text or "E" in text:
        return float(text)
    return int(text)


# -- parser -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Operand:
    kind: str  # header, string, number, boolean, null
    value: Literal  # the header name for a header
    token: _Token


class _Parser:
    """Recursive descent over the tokens, compiling as it goes."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0
        self.depth = 0
        self.names: set[str] = set()

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def take(self) -> _Token:
        token = self.peek()
        self.index += 1
        return token

    def parse_or(self) -> Predicate:
        parts = [self.parse_and()]
        while self.peek().is_keyword("OR"):
            self.take()
            parts.append(self.parse_and())
        return parts[0] if len(parts) == 1 else _connective(tuple(parts), True)

    def parse_and(self) -> Predicate:
        parts = [self.parse_not()]
        while self.peek().is_keyword("AND"):
            self.take()
            parts.append(self.parse_not())
        return parts[0] if len(parts) == 1 else _connective(tuple(parts), False)

    def parse_not(self) -> Predicate:
        token = self.peek()
        if token.is_keyword("NOT"):
            self._enter(self.take())
            inner = self.parse_not()
            self.depth -= 1
            return _negate(inner)
        if token.is_symbol("("):
            self._enter(self.take())
            inner = self.parse_or()
            if not self.peek().is_symbol(")"):
                raise _expected("AND, OR or ')'", self.peek())
            self.take()
            self.depth -= 1
            return inner
        return self.parse_predicate()

    def _enter(self, token: _Token) -> None:
        self.depth += 1
        if self.depth > DEPTH_MAX:
            raise FilterError(f"nested more than {DEPTH_MAX} deep", token.position)

    def parse_predicate(self) -> Predicate:
        left = self.parse_operand()
        token = self.peek()
        if token.kind == "symbol" and token.source in _COMPARISONS:
            self.take()
            return _comparison(token.source, token, left, self.parse_operand())
        negated = token.is_keyword("NOT")
        if negated:
            self.take()
            if not self.peek().is_keyword("IN", "BETWEEN"):
                raise _expected("IN or BETWEEN after NOT", self.peek())
        if self.peek().is_keyword("IN"):
            self.take()
            predicate = self.parse_in(left)
        elif self.peek().is_keyword("BETWEEN"):
            self.take()
            predicate = self.parse_between(left)
        elif token.is_keyword("IS"):
            return self.parse_is(left)
        elif left.kind == "boolean":
            return _constant(bool(left.value))
        else:
            raise _expected(f"an operator after {left.token.describe()}", token)
        return _negate(predicate) if negated else predicate

    def parse_operand(self) -> _Operand:
        token = self.take()
        if token.is_symbol("+", "-"):
            number = self.take()
            if number.kind != "number":
                raise _expected(f"a number after '{token.source}'", number)
            value = number.value if token.source == "+" else -_as_number(number.value)
            return _Operand("number", value, token)
        if token.kind in ("string", "number"):
            return _Operand(token.kind, token.value, token)
        if token.is_keyword("TRUE", "FALSE"):
            return _Operand("boolean", token.source == "TRUE", token)
        if token.is_keyword("NULL"):
            return _Operand("null", None, token)
        if token.kind in ("name", "quoted"):
            if token.kind == "name" and self.peek().is_symbol("("):
                raise FilterError(f"unknown function {token.source}", token.position)
            self.names.add(str(token.value))
            return _Operand("header", token.value, token)
        raise _expected("a header name or a literal", token)

    def parse_in(self, left: _Operand) -> Predicate:
        name = _header_of(left, "IN")
        if not self.peek().is_symbol("("):
            raise _expected("'(' after IN", self.peek())
        self.take()
        items: list[_Operand] = []
        while True:
            token = self.peek()
            if token.kind not in ("string", "number") and not token.is_symbol("+", "-"):
                raise _expected("a string or number literal", token)
            item = self.parse_operand()
            items.append(item)
            token = self.take()
            if token.is_symbol(")"):
                return _in_list(name, items)
            if not token.is_symbol(","):
                raise _expected("',' or ')'", token)

    def parse_between(self, left: _Operand) -> Predicate:
        name = _header_of(left, "BETWEEN")
        low = self.parse_operand()
        if not self.peek().is_keyword("AND"):
            raise _expected("AND", self.peek())
        self.take()
        high = self.parse_operand()
        for bound in (low, high):
            if bound.kind != "number":
                raise _expected("a number as a bound of BETWEEN", bound.token)
        low_value, high_value = _as_number(low.value), _as_number(high.value)
        if low_value > high_value:
            raise FilterError(f"BETWEEN bounds reversed: {low_value} > {high_value}",
                              low.token.position)
        return _between(name, low_value, high_value)

    def parse_is(self, left: _Operand) -> Predicate:
        self.take()
        negated = self.peek().is_keyword("NOT")
        if negated:
            self.take()
        if not self.peek().is_keyword("NULL"):
            raise _expected("NULL" if negated else "NULL or NOT NULL", self.peek())
        self.take()
        if left.kind != "header":
            return _constant((left.kind == "null") != negated)
        name = str(left.value)
        if negated:
            return lambda env: env.get(name) is not None
        return lambda env: env.get(name) is None


def _header_of(left: _Operand, keyword: str) -> str:
    if left.kind != "header":
        raise FilterError(f"{keyword} needs a header name on its left, found "
                          f"{left.token.describe()}", left.token.position)
    return str(left.value)


def _as_number(value: Literal) -> Number:
    assert isinstance(value, int | float) and not isinstance(value, bool)
    return value


# -- compiling predicates -----------------------------------------------------


def _comparison(symbol: str, token: _Token, left: _Operand, right: _Operand) -> Predicate:
    for side in (left, right):
        if side.kind == "null":
            raise FilterError("NULL cannot be compared: use IS NULL or IS NOT NULL",
                              side.token.position)
        if symbol in _ORDERING and side.kind in ("string", "boolean"):
            raise FilterError(f"{side.token.describe()} cannot be compared with "
                              f"'{symbol}' (only = and <>)", side.token.position)
    if left.kind != "header" and right.kind == "header":
        left, right, symbol = right, left, _FLIPPED[symbol]
    compare = _COMPARISONS[symbol]
    if left.kind != "header":
        if left.kind != right.kind:
            raise FilterError(f"cannot compare a {left.kind} with a {right.kind}",
                              token.position)
        return _constant(compare(left.value, right.value))
    name = str(left.value)
    if right.kind == "header":
        return _two_headers(name, str(right.value), symbol, compare)
    if right.kind == "number":
        return _header_vs_number(name, compare, _as_number(right.value))
    if right.kind == "boolean":
        return _header_vs_boolean(name, compare, bool(right.value))
    return _header_vs_string(name, compare, str(right.value))


def _header_vs_number(name: str, compare: Compare,
                      literal: Number) -> Predicate:
    def predicate(env: Env) -> bool | None:
        value = env.get(name)
        number = None if value is None else _to_number(value)
        return None if number is None else compare(number, literal)
    return predicate


def _header_vs_string(name: str, compare: Compare,
                      literal: str) -> Predicate:
    def predicate(env: Env) -> bool | None:
        value = env.get(name)
        return None if value is None else compare(value, literal)
    return predicate


def _header_vs_boolean(name: str, compare: Compare,
                       literal: bool) -> Predicate:
    def predicate(env: Env) -> bool | None:
        value = env.get(name)
        word = None if value is None else value.lower()
        if word not in ("true", "false"):
            return None
        return compare(word == "true", literal)
    return predicate


def _two_headers(left: str, right: str, symbol: str,
                 compare: Compare) -> Predicate:
    def predicate(env: Env) -> bool | None:
        a, b = env.get(left), env.get(right)
        if a is None or b is None:
            return None
        if symbol not in _ORDERING:
            return compare(a, b)
        x, y = _to_number(a), _to_number(b)
        return None if x is None or y is None else compare(x, y)
    return predicate


def _in_list(name: str, items: list[_Operand]) -> Predicate:
    strings = frozenset(str(i.value) for i in items if i.kind == "string")
    numbers = frozenset(_as_number(i.value) for i in items if i.kind == "number")

    def predicate(env: Env) -> bool | None:
        value = env.get(name)
        if value is None:
            return None
        if value in strings:
            return True
        if not numbers:
            return False
        number = _to_number(value)
        return None if number is None else number in numbers
    return predicate


def _between(name: str, low: Number, high: Number) -> Predicate:
    def predicate(env: Env) -> bool | None:
        value = env.get(name)
        number = None if value is None else _to_number(value)
        return None if number is None else low <= number <= high
    return predicate


def _constant(result: bool) -> Predicate:
    return lambda env: result


def _negate(inner: Predicate) -> Predicate:
    def predicate(env: Env) -> bool | None:
        result = inner(env)
        return None if result is None else not result
    return predicate


def _connective(parts: tuple[Predicate, ...], decisive: bool) -> Predicate:
    """AND (``decisive`` False) or OR (True) in SQL's three-valued logic: the
    first part answering ``decisive`` decides; else unknown if any part is."""
    def predicate(env: Env) -> bool | None:
        result: bool | None = not decisive
        for part in parts:
            answer = part(env)
            if answer is decisive:
                return decisive
            if answer is None:
                result = None
        return result
    return predicate
