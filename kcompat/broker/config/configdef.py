"""Typed configuration definitions shared by broker and topic configs.

Theory of operation
-------------------
A ``ConfigDef`` names one Kafka config key: its type, default, allowed values
and (for topic keys) the broker key that supplies its default. ``parse`` turns
a user's value (string from a file, flag, env var or an AlterConfigs request)
into a typed value or raises ``ConfigError`` with a one-line message naming the
key and what it accepts (in Kafka's words, "Invalid value X for configuration
K: ...", for a key marked ``kafka_text``). Both the broker config and per-topic
configs use it, so an operator and a Kafka admin client get the same validation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

LONG_MAX = 9223372036854775807


class ConfigError(ValueError):
    def __init__(self, key: str, message: str, *, text: str | None = None) -> None:
        super().__init__(text if text is not None else f"{key}: {message}")
        self.key = key


def _kafka_error(key: str, raw: Any, problem: str) -> ConfigError:
    """A bad value as Kafka words it (its ConfigException)."""
    return ConfigError(key, problem, text=f"Invalid value {raw} for configuration {key}: {problem}")


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: str  # "short" | "int" | "long" | "string" | "password" | "boolean" | "double" | "list"
    default: Any
    choices: Sequence[str] | None = None
    minimum: float | None = None
    maximum: float | None = None
    broker_key: str | None = None  # topic keys: the broker key that sets the default
    sensitive: bool = False
    internal: bool = False  # Kafka's internal keys: settable, listed only when asked by name
    check: Callable[[Any], str | None] | None = None
    kafka_text: bool = False  # errors in Kafka's words (type and minimum)

    @property
    def secret(self) -> bool:
        """Never shown: a password (Kafka's PASSWORD type) or a sensitive key."""
        return self.sensitive or self.type == "password"

    def parse(self, raw: Any) -> Any:
        value = self._coerce(raw)
        if self.kafka_text and self.minimum is not None and value < self.minimum:
            raise _kafka_error(self.name, value, f"Value must be at least {self.minimum:.0f}")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [v for v in items if v not in self.choices]
            if bad:
                raise ConfigError(self.name, f"{bad[0]!r} is not one of {', '.join(self.choices)}")
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(self.name, f"{value} is below the minimum {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(self.name, f"{value} is above the maximum {self.maximum:g}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(self.name, problem)
        return value

    def _coerce(self, raw: Any) -> Any:
        t = self.type
        try:
            if t in ("short", "int", "long"):
                if isinstance(raw, bool):
                    raise ValueError
                value = int(str(raw).strip())
                limit = {"short": 2**15, "int": 2**31, "long": 2**63}[t]
                if not -limit <= value < limit:
                    raise ValueError
                return value
            if t == "double":
                return float(raw)
            if t == "boolean":
                if isinstance(raw, bool):
                    return raw
                s = str(raw).strip().lower()
                if s not in ("true", "false"):
                    raise ValueError
                return s == "true"
            if t == "list":
                if isinstance(raw, list | tuple):
                    return [str(x).strip() for x in raw]
                return [x.strip() for x in str(raw).split(",") if x.strip()]
            return str(raw)
        except ValueError:
            if self.kafka_text:
                raise _kafka_error(self.name, raw, f"Not a number of type {t.upper()}") from None
            raise ConfigError(self.name, f"{raw!r} is not a valid {t}") from None

    def render(self, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return ",".join(value)
        return str(value)
