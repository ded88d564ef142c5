"""The engine of an ``AdaptiveLimiter`` over a ``RedisStore``: the Redis limiter's queue and round trips, with
the rule of ``_adaptive.py`` run in the key's script for every client of the key."""

from __future__ import annotations

import math
import secrets

from ._adaptive import CONGESTED, AdaptiveLimiter, Rule, observation, settings
from ._core import Bucket
from ._limiter import serve
from ._redis_limiter import RedisLimiter, check_refill
from ._remote import on_its_loop
from ._store_redis import Adapted, AdaptRule, RedisStore

MOST_AGE_US = 2**52  # µs: the longest age the script reads (143 years): "before anything it remembers"


def _age_us(seconds: float) -> int:
    """A span in whole µs, rounded up, within what the script reads (an unknown start: the longest)."""
    return MOST_AGE_US if not seconds < MOST_AGE_US / 1e6 else max(0, math.ceil(seconds * 1e6))


class RedisAdaptiveLimiter(RedisLimiter, AdaptiveLimiter[RedisStore]):
    """``AdaptiveLimiter(..., store=RedisStore(redis, key))``: the rate and the rule's state are the key's, for
    every client of it; ``await limiter.aobserve(...)`` feeds the rule (one round trip for a cut or a growth
    step, none for the answers of a round already cut, nor for those that count toward a step). ``max_rate``
    is the rate as this limiter last heard it."""

    __slots__ = ()

    def __init__(self, max_rate: float, time_period: float = 1, *, min_rate: float, burst: float | None = None,
                 fair: bool = True, decrease: float = 0.8, increase: float | None = None,
                 store: RedisStore | None = None) -> None:
        if not isinstance(store, RedisStore):
            raise TypeError(f"store must be a RedisStore, got {store!r}")
        checked = settings(max_rate, time_period, min_rate, burst, decrease, increase)
        RedisLimiter.__init__(self, checked.most, time_period, burst=checked.burst, fair=fair, store=store)
        self._rule = Rule(checked, self.time_period)
        self._client = secrets.token_hex(8)  # its name among the key's clients, for what each was served
        check_refill(self.burst, self.time_period * 1e9 / checked.least)  # the slowest rate the rule may set

    def observe(self, status: int, *, sent_at: float, amount: float = 1) -> None:
        """Not here: the rule runs in Redis; ``await limiter.aobserve(status, sent_at=sent)``."""
        raise TypeError("observe() over a RedisStore runs the rule in Redis, one round trip: "
                        "await limiter.aobserve(status, sent_at=sent)")

    @on_its_loop
    async def aobserve(self, status: int, *, sent_at: float, amount: float = 1) -> None:
        """Feeds the rule of every client of the key with one response (see ``AdaptiveLimiter.observe``): a 429
        or 503 to a request sent after the last cut any client made cuts the key's rate (one round trip; none
        if this limiter knows of a cut after it); a success counts toward a step while this process's queue
        holds a waiter, and a period's worth of them asks for the step (one round trip), which comes unless a
        client cut since this limiter began to count."""
        code, sent, tokens = observation(status, sent_at, amount)
        rule, loop = self._rule, self._check_loop()
        now = loop.time()
        if code in CONGESTED:
            if sent <= rule.cut_at:  # a cut this limiter knows of came after it was sent: its round's
                return
            rules = self._adapt_rule()
            answer = await self._store_rates.adapt("cut", _age_us(now - sent), rules, rule.served_lately(now))
            if answer.acted:
                rule.cuts += 1
            self._heard(answer, loop.time())
        elif code < 500:
            rule.serve(tokens, now)
            if self.waiting and self.max_rate < rule.settings.most and rule.earn(tokens, self.max_rate):
                since, rule.earning_since = rule.earning_since, now
                answer = await self._store_rates.adapt("grow", _age_us(now - since), self._adapt_rule(),
                                                       rule.served_lately(now))
                self._heard(answer, loop.time())

    def _adapt_rule(self) -> AdaptRule:
        """The rule's parameters as the script takes them."""
        least, most, decrease, increase, _ = self._rule.settings
        return AdaptRule(least, most, decrease, increase, self.time_period * 1e9, self._client)

    def _heard(self, answer: Adapted, now: float) -> None:
        """Takes the key's rate and its last cut (µs before now, on the server's clock) as the script told them."""
        rule = self._rule
        if answer.since_cut_us is not None:
            cut_at = now - answer.since_cut_us / 1e6
            if cut_at > rule.cut_at:
                rule.cut_at = cut_at
            if cut_at > rule.earning_since:  # the successes counted before it grow nothing
                rule.earned, rule.earning_since = 0.0, cut_at
        ns_per_token = answer.ns_per_token
        if ns_per_token != self._rates[0].ns_per_token:
            _, spec, _ = self._changed_rate(self.time_period * 1e9 / ns_per_token, None, None, 0)
            Bucket._set_rate(self, 0, spec.ns_per_token, spec.burst)  # amounts are checked against it
            self._rates = [spec, *self._rates[1:]]


serve("RedisStore", "AdaptiveLimiter", RedisAdaptiveLimiter)
