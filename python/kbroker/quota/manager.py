"""Which quota applies to a client, how fast it goes, and how long it must wait.

`ClientQuotaManager` is one kind of quota (Kafka's ClientQuotaManager per
QuotaType): the values set on entities, and a `Rate` per group of clients
sharing a quota. `QuotaManagers` holds the three kbroker enforces
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``) and
takes every user's and client's configs as they are read or changed.

Which quota applies to a (user, client id) pair follows Kafka's precedence,
the first entity that has a value for this kind of quota winning:

1. /config/users/<user>/clients/<client-id>
2. /config/users/<user>/clients/<default>
3. /config/users/<user>
4. /config/users/<default>/clients/<client-id>
5. /config/users/<default>/clients/<default>
6. /config/users/<default>
7. /config/clients/<client-id>
8. /config/clients/<default>

The entity that matched also says who shares the rate (Kafka's metric
tags): a user's quota (3, 6) is shared by all clients of that user, a client
id's (7, 8) by everyone using that client id, and the others (1, 2, 4, 5)
belong to the pair. A default is a quota *each* user or client gets, not one
they share. An empty client id has no client-id quota of its own.

With no quota of a kind set, `enabled` is false and callers skip the
manager entirely: the hot path pays one attribute read.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.quota.entity import DEFAULT, QuotaEntity, sanitize
from kbroker.quota.rate import Rate, throttle_time_ms

log = logging.getLogger(__name__)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# The quota keys of users and clients (Kafka's QuotaConfigs), and which are whole numbers.
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
LONG_QUOTA_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
# Those kbroker enforces.
ENFORCED_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

# A client's rate is forgotten after an hour without requests (Kafka's sensor expiry).
INACTIVE_EXPIRY_MS = 3600 * 1000
_SWEEP_INTERVAL_MS = 60 * 1000

Tags = tuple[str, str]  # (sanitized user or "", sanitized client id or "")


@dataclass
class _Tracked:
    rate: Rate
    last_ms: float


class ClientQuotaManager:
    """One kind of quota: its values by entity, and the rates of the clients it applies to."""

    def __init__(
        self,
        key: str,
        samples: int,
        window_s: int,
        max_throttle_ms: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self._clock = clock
        self._overrides: dict[QuotaEntity, float] = {}
        self._tags: dict[tuple[str, str], Tags] = {}
        # The quota of each group of clients sharing a rate (None: no quota).
        self._limits: dict[Tags, float | None] = {}
        self._rates: dict[Tags, _Tracked] = {}
        self._last_sweep = 0.0
        self.enabled = False

    # -- the values ------------------------------------------------------------------

    def set_quota(self, entity: QuotaEntity, value: float | None) -> None:
        """Sets (None: removes) the quota of `entity`."""
        if value is None:
            self._overrides.pop(entity, None)
        else:
            self._overrides[entity] = value
        self._tags.clear()
        self._limits.clear()
        self.enabled = bool(self._overrides)

    def overrides(self) -> Mapping[QuotaEntity, float]:
        return self._overrides

    def _metric_tags(self, user: str, client: str) -> Tags:
        """Who shares the rate of (user, client): see the module docstring."""
        o = self._overrides
        if QuotaEntity(user, client) in o or QuotaEntity(user, DEFAULT) in o:
            return user, client
        if QuotaEntity(user, None) in o:
            return user, ""
        if QuotaEntity(DEFAULT, client) in o or QuotaEntity(DEFAULT, DEFAULT) in o:
            return user, client
        if QuotaEntity(DEFAULT, None) in o:
            return user, ""
        return "", client

    def _limit(self, tags: Tags) -> float | None:
        try:
            return self._limits[tags]
        except KeyError:
            limit = self._limits[tags] = self._find_limit(tags)
            return limit

    def _find_limit(self, tags: Tags) -> float | None:
        user, client = tags
        o = self._overrides
        candidates: tuple[QuotaEntity, ...]
        if user and client:
            candidates = (
                QuotaEntity(user, client),
                QuotaEntity(user, DEFAULT),
                QuotaEntity(DEFAULT, client),
                QuotaEntity(DEFAULT, DEFAULT),
            )
        elif user:
            candidates = (QuotaEntity(user, None), QuotaEntity(DEFAULT, None))
        elif client:
            candidates = (QuotaEntity(None, client), QuotaEntity(None, DEFAULT))
        else:
            return None
        for entity in candidates:
            value = o.get(entity)
            if value is not None:
                return value
        return None

    def _tags_of(self, principal_name: str, client_id: str) -> Tags:
        key = (principal_name, client_id)
        tags = self._tags.get(key)
        if tags is None:
            tags = self._metric_tags(sanitize(principal_name), sanitize(client_id))
            self._tags[key] = tags
        return tags

    def quota(self, principal_name: str, client_id: str) -> float | None:
        """The quota that applies to the user `principal_name` with `client_id` (None: none)."""
        return self._limit(self._tags_of(principal_name, client_id))

    # -- the rates -------------------------------------------------------------------

    def _rate(self, tags: Tags, now_ms: float) -> Rate:
        tracked = self._rates.get(tags)
        if tracked is None:
            tracked = self._rates[tags] = _Tracked(Rate(self.samples, self.window_ms), now_ms)
        tracked.last_ms = now_ms
        if now_ms - self._last_sweep > _SWEEP_INTERVAL_MS:
            self._sweep(now_ms)
        return tracked.rate

    def _sweep(self, now_ms: float) -> None:
        self._last_sweep = now_ms
        idle = [
            t for t, tracked in self._rates.items() if now_ms - tracked.last_ms > INACTIVE_EXPIRY_MS
        ]
        for tags in idle:
            del self._rates[tags]
        if len(self._tags) > 100_000:
            self._tags.clear()
            self._limits.clear()

    def now_ms(self) -> float:
        return self._clock() * 1000.0

    def record(self, principal_name: str, client_id: str, value: float) -> int:
        """Records `value` for the client; the throttle time (ms) it has earned, 0 if none."""
        tags = self._tags_of(principal_name, client_id)
        now = self.now_ms()
        rate = self._rate(tags, now)
        rate.record(value, now)
        bound = self._limit(tags)
        if bound is None:
            return 0
        throttle = throttle_time_ms(rate, bound, now)
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return min(throttle, 2**31 - 1)

    def record_no_throttle(self, principal_name: str, client_id: str, value: float) -> None:
        """Records `value` without asking for a throttle time (counted at the next request)."""
        tags = self._tags_of(principal_name, client_id)
        now = self.now_ms()
        self._rate(tags, now).record(value, now)

    def unrecord(self, principal_name: str, client_id: str, value: float) -> None:
        """Takes back a value recorded for a request answered without it (a throttled fetch)."""
        self.record_no_throttle(principal_name, client_id, -value)

    def max_value_in_window(self, principal_name: str, client_id: str) -> float:
        """The most one request may take without being throttled for sure (Kafka caps a
        consumer's fetch size with it); infinite without a quota."""
        bound = self.quota(principal_name, client_id)
        if bound is None:
            return math.inf
        return bound * (self.samples - 1) * (self.window_ms / 1000)


class QuotaManagers:
    """The client quotas kbroker enforces, fed with users' and clients' configs."""

    def __init__(self, samples: int, window_s: int, clock: Callable[[], float] = time.monotonic):
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_s, clock=clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_s, clock=clock)
        # A request quota's throttle is at most one window (Kafka's ClientRequestQuotaManager).
        self.request = ClientQuotaManager(
            REQUEST_PERCENTAGE, samples, window_s, max_throttle_ms=window_s * 1000, clock=clock
        )
        self._by_key = {m.key: m for m in (self.produce, self.fetch, self.request)}

    # -- what the handlers ask ----------------------------------------------------------
    # Each takes the request's principal ("User:alice") and client id; callers check the
    # manager's `enabled` first, so that without quotas nothing is recorded at all.

    def produce_throttle_ms(self, principal: str, client_id: str, request_bytes: int) -> int:
        """Records a produce request's size; the throttle time it earns."""
        return self.produce.record(_user_name(principal), client_id, request_bytes)

    def fetch_max_bytes(self, principal: str, client_id: str, max_bytes: int) -> int:
        """A consumer's fetch size, capped at what its quota allows in one go."""
        cap = self.fetch.max_value_in_window(_user_name(principal), client_id)
        return max_bytes if cap >= max_bytes else max(int(cap), 0)

    def fetch_throttle_ms(self, principal: str, client_id: str, response_bytes: int) -> int:
        """Records a consumer's fetch response; the throttle time it earns. A throttled fetch
        is answered without data (Kafka's way), so its bytes are taken back."""
        user = _user_name(principal)
        throttle = self.fetch.record(user, client_id, response_bytes)
        if throttle > 0:
            self.fetch.unrecord(user, client_id, response_bytes)
        return throttle

    def request_throttle_ms(self, principal: str, client_id: str, handler_ns: int) -> int:
        """Records the time a request took (as a percentage of one second per second)."""
        return self.request.record(_user_name(principal), client_id, handler_ns * 1e-7)

    def update_entity(self, entity: QuotaEntity, configs: Mapping[str, str]) -> None:
        """Takes an entity's whole config set (as stored): its quotas replace those it had."""
        for key, manager in self._by_key.items():
            text = configs.get(key)
            value: float | None = None
            if text is not None:
                try:
                    value = parse_quota_value(key, text)
                except ValueError:
                    log.warning("ignoring %s=%r of %s: not a number", key, text, entity)
            if value != manager.overrides().get(entity):
                if value is None:
                    log.info("%s quota of %s removed", key, entity)
                else:
                    log.info("%s quota of %s is now %s", key, entity, value)
                manager.set_quota(entity, value)


def _user_name(principal: str) -> str:
    """The name of a principal ("User:alice" -> "alice"), the user its quotas are set on."""
    return principal.partition(":")[2]


def parse_quota_value(key: str, text: str) -> float:
    """A stored quota value as Kafka reads it (byte rates are whole numbers)."""
    if key in LONG_QUOTA_KEYS:
        number = int(text.strip())
        if not -(2**63) <= number < 2**63:
            raise ValueError(f"{text!r} is out of range")
        return float(number)
    value = float(text)
    if math.isnan(value):
        raise ValueError("not a number")
    return value
