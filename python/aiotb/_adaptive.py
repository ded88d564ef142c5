"""AdaptiveLimiter: a rate found by trying, for a server that says nothing of its quota but "429".

The rule is additive increase, multiplicative decrease, as TCP finds a path's capacity. A 429 or 503 to a
request sent after the last cut multiplies the rate by ``decrease``; the other answers of that round (requests
sent before the cut) cut nothing more. The rate it was cut from is the last one known too high. Each period's
worth of other answers (as many tokens as the rate, of requests sent while the rate held them back) adds one
step: below the rate known too high, half the way to it (at least ``increase``), so that the rate spends
its time just under the quota; above it, ``increase``, doubled with each step, so that a quota that has risen
is found in a few periods (BIC's search, as TCP BIC grows a window). The rate stays within
``[min_rate, max_rate]``.

A server that counts over a window remembers the requests of the rate before a cut for as long as its
window: the requests sent after a cut still meet 429s in that time, and a cut per round would take the
rate far below the quota (measured: from 200/s to 7.5/s in the first second, against 40 per sliding second
and a 20 ms round trip). So a cut never goes below ``decrease`` times what the server served in the last
period (the tokens of the successes answered): what it has just allowed, it allows.

Over a RedisStore the rule runs in the key's script (``_redis_gcra.lua``, op ``adapt``), for every client of the
key at once: the rate is the key's; a cut comes only for a request sent after the last cut of any client (its
instant is kept with the rates, on the server's clock: a request's age is sent, not its instant); a growth step
only if no client cut since this one began to count its successes; the rate cut from and the next step above it
are the key's too. Each client counts its own successes toward a step (so the clients together step once per
period's worth of all their successes) and the tokens it was served in the last period, which it tells the script
with each cut or step it asks for: the floor of a cut is the sum of what the clients told in the last period (a
client that asked for nothing in that time counts nothing: the floor errs low). Over a SharedMemoryStore each
process applies the rule to the segment's rate by read, modify and write (``_shm_adaptive.py``)."""

from __future__ import annotations

import collections
import math
import threading
from typing import TYPE_CHECKING, ClassVar, NamedTuple, TypeAlias, cast, overload

from . import _params
from ._clock import loop_now
from ._limiter import Flavour, Limiter, StoreT

if TYPE_CHECKING:
    from ._store_redis import RedisStore
    from ._store_shm import SharedMemoryStore

    LocalAdaptive: TypeAlias = "AdaptiveLimiter[None] | AdaptiveLimiter[SharedMemoryStore]"  # observe answers at once

CONGESTED = frozenset({429, 503})  # Too Many Requests, Service Unavailable: the server's "slower"


class Settings(NamedTuple):
    """An AdaptiveLimiter's parameters, checked: the rate's bounds, the factor of a cut, the least step, the burst."""

    least: float
    most: float
    decrease: float
    increase: float
    burst: float


def settings(max_rate: object, time_period: object, min_rate: object, burst: float | None, decrease: object,
             increase: object) -> Settings:
    """The parameters of an AdaptiveLimiter, checked (TypeError/ValueError naming the parameter)."""
    most = _params.positive("max_rate", max_rate)
    least = _params.positive("min_rate", min_rate)
    if least > most:
        raise ValueError(f"min_rate must be at most max_rate ({max_rate!r}), got {min_rate!r}")
    cut = _params.real("decrease", decrease)
    if not 0 < cut < 1:
        raise ValueError(f"decrease must be above 0 and below 1, got {decrease!r}")
    step = most / 200 if increase is None else _params.positive("increase", increase)
    if not math.isfinite(step):
        raise ValueError(f"increase must be finite, got {increase!r}")
    size = max(1.0, least * _params.positive("time_period", time_period)) if burst is None else burst
    return Settings(least, most, cut, step, size)  # the burst as given: Limiter checks it


def observation(status: object, sent_at: object, amount: object) -> tuple[int, float, float]:
    """A response fed to the rule, checked: its status, the loop time its request was sent at, its tokens."""
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"status must be an int, got {status!r}")
    if not 100 <= status <= 599:
        raise ValueError(f"status must be an HTTP status, 100 to 599, got {status!r}")
    return status, _params.loop_time("sent_at", sent_at), _params.positive("amount", amount)


class Rule:
    """The rule's parameters and what one limiter counts of it: its successes toward a step, the tokens it served
    in the last period, its cuts, and (in process) the rule's whole state."""

    __slots__ = ("settings", "period", "earned", "earning_since", "too_high", "probe", "cut_at", "cuts", "served",
                 "served_tokens", "lock")

    def __init__(self, checked: Settings, period: float) -> None:
        self.settings = checked
        self.period = period  # time_period: the rates are per it
        self.earned = 0.0  # the share of a period's worth of answers since the last step
        self.earning_since = -math.inf  # loop time the share began to count (over a store: since news of a cut)
        self.too_high = checked.most  # the rate of the last cut: known too high (at first, the most)
        self.probe = checked.increase  # the next step above it
        self.cut_at = -math.inf  # loop time of the last cut (over a store: the last one this limiter knows of)
        self.cuts = 0
        self.served: collections.deque[tuple[float, float]] = collections.deque()  # (loop time, tokens) of the
        self.served_tokens = 0.0                                                    # successes of the last period
        self.lock = threading.Lock()  # loops in threads may share the limiter: each observation applied whole

    def serve(self, tokens: float, now: float) -> None:
        """Counts a success of tokens, answered now, in the last period's (those older leave it now: it holds
        one period's)."""
        self.served_lately(now)
        self.served.append((now, tokens))
        self.served_tokens += tokens

    def served_lately(self, now: float) -> float:
        """The tokens of the successes answered in the period before now."""
        since = now - self.period
        served = self.served
        while served and served[0][0] <= since:
            self.served_tokens -= served.popleft()[1]
        if not served:
            self.served_tokens = 0.0  # no rounding left over
        return self.served_tokens

    def earn(self, tokens: float, rate: float) -> bool:
        """Counts tokens answered toward a step at rate; whether a period's worth is reached (then counts anew)."""
        self.earned += tokens / rate
        if self.earned < 1:
            return False
        self.earned = 0.0
        return True

    def cut(self, rate: float, now: float) -> float:
        """The rate a cut at now takes rate to: decrease times it, not below decrease times what the server
        served in the last period, nor min_rate; the round ends now, and rate is known too high."""
        least, _, decrease, increase, _ = self.settings
        self.cut_at = self.earning_since = now
        self.cuts += 1
        self.earned = 0.0
        self.too_high, self.probe = rate, increase
        return max(least, decrease * rate, min(rate, decrease * self.served_lately(now)))

    def grown(self, rate: float) -> float:
        """The rate a step takes rate to: half the way to the rate known too high below it (at least increase),
        the probe above it (doubled at each step); never above max_rate."""
        if rate < self.too_high:
            step = max(self.settings.increase, (self.too_high - rate) / 2)
        else:
            step = self.probe
            self.probe *= 2
        return min(self.settings.most, rate + step)


class AdaptiveLimiter(Limiter[StoreT]):
    """``AdaptiveLimiter(max_rate, time_period=1, *, min_rate)``: a ``Limiter`` whose rate is found by
    trying, for a server whose quota is unknown (or shared with clients this one does not see).

    It starts at ``max_rate`` tokens per ``time_period`` seconds. Each response is fed to ``observe``
    (the HTTP adapters of ``aiotb.httpx`` and ``aiotb.aiohttp`` feed it every response): a 429 or 503
    to a request sent after the last cut multiplies the rate by ``decrease`` (default 0.8), at most down
    to ``min_rate``; the other answers of that round (requests sent before the cut) cut nothing more.
    Each period's worth (as many tokens as the rate) of other responses under 500, to requests sent while
    the rate held them back (a waiter queued, or fewer tokens than the amount left), adds a step: half
    the way to the rate of the last cut while below it (at least ``increase``, default max_rate / 200),
    and above it ``increase``, doubled at each step, at most up to ``max_rate``. A 500 or
    another 5xx says nothing of the rate, and changes nothing. What the server's headers say is
    followed as by any Limiter (``follow``).

    ``burst`` (default: min_rate per time_period, at least 1) stays as given while the rate changes:
    a burst above what the server allows in its window would meet 429s of its own, after an idle while.
    With ``store=RedisStore(redis, key)`` the rule runs in Redis for every client of the key (the rate,
    the last cut and the search above it are the key's): ``await limiter.aobserve(...)``, one round trip
    for a cut or a step, none for the other answers; a success counts toward a step when this process's
    queue holds a waiter. With ``store=SharedMemoryStore(name)`` the rate is the segment's, for every process
    of the host: ``observe`` answers at once, and each cut or step is made only if no process changed the rate
    since it was read. A leased RedisStore keeps no such rule (TypeError, the table of stores says why).
    ``limiter.max_rate`` and ``limiter.rate`` are the rate now (over a store: as this limiter last read it);
    ``limiter.bounds`` is (min_rate, max_rate) as given."""

    _flavour: ClassVar[Flavour] = "AdaptiveLimiter"
    _rule: Rule

    @overload
    def __init__(self: AdaptiveLimiter[None], max_rate: float, time_period: float = 1, *, min_rate: float,
                 burst: float | None = None, fair: bool = True, decrease: float = 0.8, increase: float | None = None,
                 store: None = None) -> None: ...
    @overload
    def __init__(self: AdaptiveLimiter[SharedMemoryStore], max_rate: float, time_period: float = 1, *,
                 min_rate: float, burst: float | None = None, fair: bool = True, decrease: float = 0.8,
                 increase: float | None = None, store: SharedMemoryStore) -> None: ...
    @overload
    def __init__(self: AdaptiveLimiter[RedisStore], max_rate: float, time_period: float = 1, *, min_rate: float,
                 burst: float | None = None, fair: bool = True, decrease: float = 0.8, increase: float | None = None,
                 store: RedisStore) -> None: ...
    def __init__(self, max_rate: float, time_period: float = 1, *, min_rate: float, burst: float | None = None,
                 fair: bool = True, decrease: float = 0.8, increase: float | None = None,
                 store: RedisStore | SharedMemoryStore | None = None) -> None:
        if store is not None:  # a subclass that let store= through: its instance has no store behind it
            raise TypeError(f"store= works with AdaptiveLimiter itself, not {type(self).__name__}")
        checked = settings(max_rate, time_period, min_rate, burst, decrease, increase)
        self._setup(_params.limiter_rates(checked.most, time_period, checked.burst, None, None), None,
                    _params.flag("fair", fair), smallest_first=False)
        self._rule = Rule(checked, self.time_period)

    @property
    def bounds(self) -> tuple[float, float]:
        """(min_rate, max_rate), as given: the rate stays within them."""
        return self._rule.settings.least, self._rule.settings.most

    @property
    def cuts(self) -> int:
        """How many times a 429 or 503 fed to this limiter has cut the rate (those at min_rate included)."""
        return self._rule.cuts

    def observe(self: LocalAdaptive, status: int, *, sent_at: float, amount: float = 1) -> None:
        """Feeds the rule with one response: its HTTP ``status``, the loop time its request was sent at
        (``sent_at``: once it had its grant), and the tokens it took (``amount``). A 429 or 503 cuts the
        rate, unless its request was sent before the last cut or at its instant (the same round: cut
        already); any other status under 500 grows it, if the rate held the request back.
        ``limiter.observe(response.status, sent_at=sent)``."""
        code, sent, tokens = observation(status, sent_at, amount)
        rule = self._rule
        with rule.lock:
            if code in CONGESTED:
                if sent > rule.cut_at:
                    rate = self.max_rate
                    cut = rule.cut(rate, loop_now())
                    if cut < rate:
                        self.set_rate(cut)
            elif code < 500:
                rule.serve(tokens, loop_now())
                if (self.waiting or self.tokens < tokens) and self.max_rate < rule.settings.most and \
                        rule.earn(tokens, self.max_rate):
                    self.set_rate(rule.grown(self.max_rate))

    async def aobserve(self, status: int, *, sent_at: float, amount: float = 1) -> None:
        """``observe`` over any store: over a RedisStore, for every client of the key (one round trip for a
        cut or a growth step)."""
        AdaptiveLimiter.observe(cast("AdaptiveLimiter[None]", self), status, sent_at=sent_at, amount=amount)

    def __repr__(self) -> str:
        least, most = self.bounds
        return (f"<{type(self).__name__} {self.max_rate:.6g}/{self.time_period:g}s within [{least:g}, {most:g}], "
                f"burst {self.burst:g}, {self.cuts} cuts>")
