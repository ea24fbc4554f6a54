"""Client quotas enforced: ``producer_byte_rate`` on Produce,
``consumer_byte_rate`` on Fetch, per user / client-id, as Kafka 4.4's
``ClientQuotaManager`` enforces them; and ``controller_mutation_rate`` on the
partitions CreateTopics, CreatePartitions and DeleteTopics create or delete,
as its ``ControllerMutationQuotaManager`` does (KIP-599, end of this module).

Theory of operation
-------------------
The values are the replicated ``MetadataImage.client_quotas``
(``controller.client_quotas``: AlterClientQuotas sets them); this module only
measures traffic against them and says how long a client must wait.

*Which quota.* A connection is a user (its principal's name, ``alice`` for
``User:alice``, ``ANONYMOUS`` unauthenticated) and a client id. The quota that
applies is the most specific entity holding the key, in Kafka's precedence:
``/users/u/clients/c``, ``/users/u/clients/<default>``, ``/users/u``,
``/users/<default>/clients/c``, ``/users/<default>/clients/<default>``,
``/users/<default>``, ``/clients/c``, ``/clients/<default>``. Where the quota
is found decides what the rate is kept for — its *metric tags*, Kafka's
sensor name: a user+client-id level (the four with both parts) keeps one rate
per (user, client id), a user level per user (all its clients together), a
client-id level per client id (all users together) — so ``/clients/<default>``
limits each client id on its own, ``/users/<default>`` each user on its own.
When only one kind of entity holds the key (Kafka's ``quotaTypesEnabled``
with a single bit) the tags are that kind's, quota or not. No entity with the
key at all: nothing is recorded and nothing throttled (``maybeRecord``).

*The rate* (Kafka's ``Rate`` over a ``WindowedSum``, ``SampledStat``): bytes
are added to the current sample; a sample is complete ``quota.window.size.seconds``
after it started and the next record starts a new one, up to
``quota.window.num`` + 1 samples kept in a ring. A sample whose last record is
``quota.window.num`` windows old is reset. The rate is the samples' sum over
the window size: now minus the start of the oldest sample, padded as if
``quota.window.num`` − 1 full windows had passed when fewer have (a new
client is measured as if it had been quiet for 10 s before: a first burst
of up to ``quota × (num − 1) × size`` bytes is not throttled), at least 1 ms.

*The throttle* (``QuotaUtils.throttleTime``): the bytes of a request are
recorded once it is served; if the rate O then exceeds the quota T over the
window W, the client waits X with O·W/(W+X) = T, so X = (O − T)/T × W,
rounded to the millisecond (Java's ``Math.round``) and cast to an int. No other
cap: Kafka bounds only request-time quotas by one window
(``ClientRequestQuotaManager``), not byte rates. The caller answers at once
with ``throttle_time_ms`` = X and mutes the connection for X — it reads no next
request until then (KIP-219; ``Session.mute_until``) — so the bytes already
taken are paid for by the *next* traffic. A Fetch over quota has its bytes
taken off again (``unrecord``: it answers empty, as Kafka does), and a Fetch
reads at most ``max_value_in_quota_window`` bytes (quota × (num − 1) × size),
more than which would be throttled even after a quiet window.

Rates of a (user, client id) not recorded for an hour are dropped (Kafka's
``INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS``). Pure: the clock is passed in
(milliseconds, any monotonic origin); the caller turns a throttle into a
mute deadline on its own clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcompat.broker.controller.client_quotas import CLIENT_ID, USER, Entity

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
MUTATION = "controller_mutation_rate"
THROTTLING_QUOTA_EXCEEDED = "The throttling quota has been exceeded."
INT_MAX = 2**31 - 1
SENSOR_EXPIRY_MS = 3600 * 1000
_SWEEP_EVERY_MS = 60 * 1000

Quotas = Mapping[Entity, Mapping[str, float]]
#: (user tag, client-id tag), "" for a part the rate is not kept by
Tags = tuple[str, str]


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def user_of(principal: str) -> str:
    """The user a quota names: the principal's name (``User:alice`` -> ``alice``)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


# -- the rate (Kafka's Rate / SampledStat / WindowedSum) ---------------------------------


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


@dataclass(slots=True)
class Rate:
    """A sum of values per second over ``samples`` windows of ``window_ms``."""

    samples: int
    window_ms: int
    _ring: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._ring:
            self._ring.append(_Sample(now_ms, now_ms))
        return self._ring[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        # one sample more than the window count is kept (Kafka's SampledStat)
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._ring):
            self._ring.append(_Sample(now_ms, now_ms))
        else:
            self._ring[self._current].reset(now_ms)
        return self._ring[self._current]

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """Now minus the oldest sample's start, padded to ``samples`` − 1 full windows."""
        self._purge(now_ms)
        if not self._ring:
            self._ring.append(_Sample(now_ms, now_ms))
        oldest = min(self._ring, key=lambda s: s.start_ms)
        elapsed_ms = now_ms - oldest.start_ms
        full = elapsed_ms // self.window_ms
        if full < self.samples - 1:
            elapsed_ms += (self.samples - 1 - full) * self.window_ms
        return max(elapsed_ms, 1)

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        self._purge(now_ms)
        total = sum(s.value for s in self._ring)
        return total / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """(O − T)/T × W rounded as Java's ``Math.round``, as an int."""
    return min(math.floor((observed - bound) / bound * window_ms + 0.5), INT_MAX)


# -- which quota applies (Kafka's DefaultQuotaCallback) -----------------------------------


def _entity(user: str | None | bool, client: str | None | bool) -> Entity:
    """The image key of a level: a name, None for <default>, False for absent."""
    pairs: list[tuple[str, str | None]] = []
    if client is not False:
        pairs.append((CLIENT_ID, client if isinstance(client, str) else None))
    if user is not False:
        pairs.append((USER, user if isinstance(user, str) else None))
    return tuple(pairs)


def _value(quotas: Quotas, key: str, entity: Entity) -> float | None:
    values = quotas.get(entity)
    return None if values is None else values.get(key)


def _kinds(quotas: Quotas, key: str) -> set[str]:
    """Which kinds of entity hold ``key``: "user", "client-id", "both"."""
    kinds = set()
    for entity, values in quotas.items():
        types = {t for t, _ in entity}
        if key in values and types <= {USER, CLIENT_ID}:
            kinds.add("both" if len(types) == 2 else next(iter(types)))
    return kinds


def enabled(quotas: Quotas, key: str) -> bool:
    return bool(_kinds(quotas, key))


def metric_tags(quotas: Quotas, key: str, user: str, client_id: str) -> Tags:
    """What the rate is kept by (Kafka's ``quotaMetricTags``)."""
    kinds = _kinds(quotas, key)
    if kinds <= {CLIENT_ID}:
        return "", client_id
    if kinds == {USER}:
        return user, ""
    if kinds == {"both"}:
        return user, client_id
    for level_user, level_client, tags in (
            (user, client_id, (user, client_id)), (user, None, (user, client_id)),
            (user, False, (user, "")), (None, client_id, (user, client_id)),
            (None, None, (user, client_id)), (None, False, (user, ""))):
        if _value(quotas, key, _entity(level_user, level_client)) is not None:
            return tags
    return "", client_id


def quota_limit(quotas: Quotas, key: str, tags: Tags) -> float | None:
    """The quota of the rate kept by ``tags`` (Kafka's ``quotaLimit``), None: none."""
    user, client_id = tags
    levels: list[tuple[str | None | bool, str | None | bool]]
    if user and client_id:
        levels = [(user, client_id), (user, None), (None, client_id), (None, None)]
    elif user:
        levels = [(user, False), (None, False)]
    elif client_id:
        levels = [(False, client_id), (False, None)]
    else:
        return None
    for level_user, level_client in levels:
        found = _value(quotas, key, _entity(level_user, level_client))
        if found is not None:
            return found
    return None


# -- one quota type's rates ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    window_num: int = 11  # quota.window.num
    window_size_s: int = 1  # quota.window.size.seconds

    @classmethod
    def of(cls, config: Any, prefix: str = "") -> QuotaConfig:
        """From ``quota.window.*`` (``prefix="controller."``: the mutation quota's)."""
        return cls(int(config[f"{prefix}quota.window.num"]),
                   int(config[f"{prefix}quota.window.size.seconds"]))


class ClientQuotaManager:
    """The rates of one quota key (``PRODUCE`` or ``FETCH``) per metric tags."""

    def __init__(self, key: str, config: QuotaConfig = QuotaConfig(),
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.key = key
        self.config = config
        self.clock_ms = clock_ms
        self.rates: dict[Tags, tuple[Rate, int]] = {}  # tags -> (rate, last record ms)
        self._swept_ms = clock_ms()

    def _rate(self, tags: Tags, now_ms: int) -> Rate:
        if now_ms - self._swept_ms >= _SWEEP_EVERY_MS:
            self._swept_ms = now_ms
            self.rates = {t: (r, at) for t, (r, at) in self.rates.items()
                          if now_ms - at < SENSOR_EXPIRY_MS}
        found = self.rates.get(tags)
        rate = found[0] if found else Rate(self.config.window_num,
                                           self.config.window_size_s * 1000)
        self.rates[tags] = (rate, now_ms)
        return rate

    def record(self, quotas: Quotas, principal: str, client_id: str | None,
               value: float) -> int:
        """Record ``value`` bytes served; the throttle time in ms (0: within quota)."""
        if not enabled(quotas, self.key):
            return 0
        now_ms = self.clock_ms()
        tags = metric_tags(quotas, self.key, user_of(principal), client_id or "")
        rate = self._rate(tags, now_ms)
        rate.record(value, now_ms)
        bound = quota_limit(quotas, self.key, tags)
        if bound is None:
            return 0
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return throttle_time_ms(observed, bound, rate.window_size_ms(now_ms))

    def unrecord(self, quotas: Quotas, principal: str, client_id: str | None,
                 value: float) -> None:
        """Take back ``value`` just recorded (a throttled Fetch answers empty)."""
        self.record(quotas, principal, client_id, -value)

    def max_value_in_quota_window(self, quotas: Quotas, principal: str,
                                  client_id: str | None) -> float:
        """The most bytes one request may take without being throttled after a
        quiet window: quota × (num − 1) × size (infinite without a quota)."""
        if not enabled(quotas, self.key):
            return math.inf
        tags = metric_tags(quotas, self.key, user_of(principal), client_id or "")
        bound = quota_limit(quotas, self.key, tags)
        if bound is None:
            return math.inf
        return bound * (self.config.window_num - 1) * self.config.window_size_s


# -- controller mutations (KIP-599) ---------------------------------------------------------
#
# A mutation is a partition created or deleted: CreateTopics counts each topic's
# partitions, CreatePartitions the ones added, DeleteTopics the deleted topic's.
# The rate is a token bucket (Kafka's ``TokenBucket``): it starts full at
# quota × ``controller.quota.window.num`` × ``controller.quota.window.size.seconds``
# tokens, refills at the quota per second up to that, and each mutation takes
# one. *Strict* (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a
# topic is refused with THROTTLING_QUOTA_EXCEEDED while the bucket is below
# zero, and may take it below zero when it is not (the request that empties it
# goes through whole); the answer's throttle time is the time until the bucket
# is back at zero. *Permissive* (older versions): everything goes through and
# the answer carries that throttle. Kafka keeps one bucket per metric tags at
# its active controller; kcompat keeps them at the broker that received the
# request, as it checks the request's ACLs there.


@dataclass(slots=True)
class TokenBucket:
    """Tokens refilled at a rate per second up to a burst; full at first use."""

    tokens: float = 0.0
    last_ms: int | None = None

    def level(self, rate: float, burst: float, now_ms: int) -> float:
        if self.last_ms is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + rate * (now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms
        return self.tokens

    def take(self, value: float, rate: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.level(rate, burst, now_ms) - value)


class MutationQuota:
    """One request's mutation quota (Kafka's Strict- and
    PermissiveControllerMutationQuota): ``record`` the partitions of one topic."""

    def __init__(self, bucket: TokenBucket, rate: float, burst: float, strict: bool,
                 clock_ms: Callable[[], int]) -> None:
        self.bucket, self.rate, self.burst = bucket, rate, burst
        self.strict = strict
        self.clock_ms = clock_ms
        self._throttle_ms = 0
        self._throttled_at_ms = 0

    def _violated(self, now_ms: int) -> bool:
        tokens = self.bucket.level(self.rate, self.burst, now_ms)
        if tokens >= 0:
            return False
        self._throttle_ms = min(math.floor(-tokens / self.rate * 1000 + 0.5), INT_MAX)
        self._throttled_at_ms = now_ms
        return True

    def record(self, permits: int) -> bool:
        """Take ``permits``; False (nothing taken) if strict and the bucket is
        already below zero."""
        now_ms = self.clock_ms()
        if self.strict and self._violated(now_ms):
            return False
        self.bucket.take(permits, self.rate, self.burst, now_ms)
        if not self.strict:
            self._violated(now_ms)
        return True

    def throttle_time_ms(self) -> int:
        """The throttle last found, less the time since (the answer's throttle)."""
        return max(0, self._throttle_ms - (self.clock_ms() - self._throttled_at_ms))


class ControllerMutationQuotaManager:
    """The token buckets of ``controller_mutation_rate`` per metric tags."""

    def __init__(self, config: QuotaConfig = QuotaConfig(),
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.buckets: dict[Tags, tuple[TokenBucket, int]] = {}  # tags -> (bucket, last use)
        self._swept_ms = clock_ms()

    def quota_for(self, quotas: Quotas, principal: str, client_id: str | None,
                  strict: bool) -> MutationQuota | None:
        """This (principal, client id)'s quota for one request; None: no quota."""
        if not enabled(quotas, MUTATION):
            return None
        tags = metric_tags(quotas, MUTATION, user_of(principal), client_id or "")
        rate = quota_limit(quotas, MUTATION, tags)
        if rate is None or rate <= 0:
            return None
        now_ms = self.clock_ms()
        if now_ms - self._swept_ms >= _SWEEP_EVERY_MS:
            self._swept_ms = now_ms
            self.buckets = {t: (b, at) for t, (b, at) in self.buckets.items()
                            if now_ms - at < SENSOR_EXPIRY_MS}
        found = self.buckets.get(tags)
        bucket = found[0] if found else TokenBucket()
        self.buckets[tags] = (bucket, now_ms)
        burst = rate * self.config.window_num * self.config.window_size_s
        return MutationQuota(bucket, rate, burst, strict, self.clock_ms)


@dataclass(slots=True)
class ClientQuotas:
    """A broker's Produce and Fetch byte-rate quota managers and its controller
    mutation quota manager."""

    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    mutations: ControllerMutationQuotaManager = field(
        default_factory=ControllerMutationQuotaManager)

    @classmethod
    def of_config(cls, config: QuotaConfig,
                  clock_ms: Callable[[], int] = monotonic_ms,
                  mutations: QuotaConfig = QuotaConfig()) -> ClientQuotas:
        return cls(ClientQuotaManager(PRODUCE, config, clock_ms),
                   ClientQuotaManager(FETCH, config, clock_ms),
                   ControllerMutationQuotaManager(mutations, clock_ms))

