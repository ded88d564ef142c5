"""The engine of an ``AdaptiveLimiter`` over a ``SharedMemoryStore``: the shared limiter's queue, with the rule of
``_adaptive.py`` applied to the segment's rate, which every process of the host shares.

Each change of the rate reads, modifies and writes the segment's rate (``SharedRates.change_rate``): a cut or a
step computed from the rate read is made only if no process changed the rate since; otherwise the other change
stands, and this one is dropped. What Redis's script keeps for every client of a key (the last cut, the rate cut
from, the step above it) each process keeps from what it reads of the rate, with every response fed to it: a
rate lower than the one it read last was cut, is known too high, and for this process the cut came when it read
it. So a 429 to a request sent before a cut this process has read cuts nothing more (one cut a round, as in
process and over Redis), nor does one to a request sent after the cut but before this process read it (the next
cut waits for the next round). The floor of a cut is what this process was served in the last period (the other
processes' successes unknown here: the floor errs low), and each process counts its own successes toward a step."""

from __future__ import annotations

from . import _params
from ._adaptive import CONGESTED, AdaptiveLimiter, Rule, observation, settings
from ._clock import loop_now
from ._core import Bucket
from ._limiter import serve
from ._shared import SharedLimiter
from ._store_shm import SharedMemoryStore
from ._tokenbucket import SHM_MAX_SPAN


class SharedAdaptiveLimiter(SharedLimiter, AdaptiveLimiter[SharedMemoryStore]):
    """``AdaptiveLimiter(..., store=SharedMemoryStore(name))``: the rate is the segment's, for every process of
    the host that uses the name; ``observe`` answers at once. ``max_rate`` is the rate as this limiter last read
    it."""

    __slots__ = ()

    def __init__(self, max_rate: float, time_period: float = 1, *, min_rate: float, burst: float | None = None,
                 fair: bool = True, decrease: float = 0.8, increase: float | None = None,
                 store: SharedMemoryStore | None = None) -> None:
        if not isinstance(store, SharedMemoryStore):
            raise TypeError(f"store must be a SharedMemoryStore, got {store!r}")
        checked = settings(max_rate, time_period, min_rate, burst, decrease, increase)
        slowest = _params.positive("time_period", time_period) * 1e9 / checked.least
        if checked.burst * slowest > SHM_MAX_SPAN:
            raise ValueError(f"min_rate must refill the burst within {SHM_MAX_SPAN / 86400e9:.0f} days in a "
                             f"SharedMemoryStore, got burst {checked.burst!r} at min_rate {min_rate!r}")
        SharedLimiter.__init__(self, checked.most, time_period, burst=checked.burst, fair=fair, store=store)
        self._rule = Rule(checked, self.time_period)
        self._hear(*self._store_rates.live_rate(0), now=None)

    def observe(self, status: int, *, sent_at: float, amount: float = 1) -> None:
        """Feeds the rule with one response (see ``AdaptiveLimiter.observe``), for every process of the store: a
        429 or 503 to a request sent after the last cut this process has seen cuts the segment's rate, unless
        another process changed it first; a period's worth of successes (while the rate held requests back)
        grows it likewise."""
        code, sent, tokens = observation(status, sent_at, amount)
        rule = self._rule
        with rule.lock:
            now = loop_now()
            was = self._store_rates.live_rate(0)
            self._hear(*was, now=now)
            rate = self.max_rate
            if code in CONGESTED:
                if sent > rule.cut_at:
                    cut = rule.cut(rate, now)
                    if cut < rate and not self._change(was, cut):
                        rule.cuts -= 1  # another process's change came first: this one cut nothing
            elif code < 500:
                rule.serve(tokens, now)
                if (self.waiting or self.tokens < tokens) and rate < rule.settings.most and rule.earn(tokens, rate):
                    self._change(was, rule.grown(rate))

    async def aobserve(self, status: int, *, sent_at: float, amount: float = 1) -> None:
        """``observe``, as a coroutine (it answers at once)."""
        self.observe(status, sent_at=sent_at, amount=amount)

    def _change(self, was: tuple[float, float], rate: float) -> bool:
        """The segment's rate from was (ns per token, burst) to rate per period, unless another process changed it
        since it was read (its change stands, and this one is dropped): whether it changed it."""
        _, spec, _ = self._changed_rate(rate, None, None, 0)
        if not self._store_rates.change_rate(0, was, spec.ns_per_token, spec.burst):
            return False
        self._hear(spec.ns_per_token, spec.burst, now=None)
        return True

    def _hear(self, ns_per_token: float, burst: float, *, now: float | None) -> None:
        """Takes the segment's rate as read: where it is lower than the one seen last, a cut this limiter did not
        make, seen at now (None: not one to count), which ends the round and its count toward a step."""
        seen = self._rates[0]
        if ns_per_token == seen.ns_per_token and burst == seen.burst:
            return
        rule = self._rule
        if now is not None and ns_per_token > seen.ns_per_token:
            rule.too_high, rule.probe = self.max_rate, rule.settings.increase
            rule.cut_at = max(rule.cut_at, now)
            rule.earned, rule.earning_since = 0.0, now
        _, spec, _ = self._changed_rate(self.time_period * 1e9 / ns_per_token, None, burst, 0)
        spec = spec._replace(ns_per_token=ns_per_token)  # exactly the segment's, whatever the division rounded
        Bucket._set_rate(self, 0, ns_per_token, burst)  # amounts are checked against it
        self._rates = [spec, *self._rates[1:]]


serve("SharedMemoryStore", "AdaptiveLimiter", SharedAdaptiveLimiter)
