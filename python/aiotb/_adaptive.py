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
period (the tokens of the successes answered): what it has just allowed, it allows."""

from __future__ import annotations

import collections
import math
import threading

from . import _params
from ._limiter import Limiter, _loop_now

CONGESTED = frozenset({429, 503})  # Too Many Requests, Service Unavailable: the server's "slower"


class AdaptiveLimiter(Limiter[None]):
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
    In this process only: over a store every client of the key would have to cut once per round
    between them, which the stores do not offer yet (``store=`` is a TypeError).
    ``limiter.max_rate`` and ``limiter.rate`` are the rate now; ``limiter.bounds`` is
    (min_rate, max_rate) as given."""

    __slots__ = ("_bounds", "_decrease", "_increase", "_earned", "_too_high", "_probe", "_cut_at", "_cuts", "_served",
                 "_served_tokens", "_rule")

    def __init__(self, max_rate: float, time_period: float = 1, *, min_rate: float, burst: float | None = None,
                 fair: bool = True, decrease: float = 0.8, increase: float | None = None) -> None:
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
        super().__init__(most, time_period, burst=size, fair=fair)
        self._bounds = (least, most)
        self._decrease = cut
        self._increase = step
        self._earned = 0.0  # the share of a period's worth of answers since the last step
        self._too_high = most  # the rate of the last cut: known too high (at first, the most)
        self._probe = step  # the next step above it
        self._cut_at = -math.inf  # loop time of the last cut
        self._cuts = 0
        self._served: collections.deque[tuple[float, float]] = collections.deque()  # (loop time, tokens) of the
        self._served_tokens = 0.0                                                    # successes of the last period
        self._rule = threading.Lock()  # loops in threads may share the limiter: each observation applied whole

    @property
    def bounds(self) -> tuple[float, float]:
        """(min_rate, max_rate), as given: the rate stays within them."""
        return self._bounds

    @property
    def cuts(self) -> int:
        """How many times a 429 or 503 has cut the rate (those at min_rate included)."""
        return self._cuts

    def observe(self, status: int, *, sent_at: float, amount: float = 1) -> None:
        """Feeds the rule with one response: its HTTP ``status``, the loop time its request was sent at
        (``sent_at``: once it had its grant), and the tokens it took (``amount``). A 429 or 503 cuts the
        rate, unless its request was sent before the last cut or at its instant (the same round: cut
        already); any other status under 500 grows it, if the rate held the request back.
        ``limiter.observe(response.status, sent_at=sent)``."""
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError(f"status must be an int, got {status!r}")
        if not 100 <= status <= 599:
            raise ValueError(f"status must be an HTTP status, 100 to 599, got {status!r}")
        sent = _params.loop_time("sent_at", sent_at)
        tokens = _params.positive("amount", amount)
        with self._rule:
            if status in CONGESTED:
                if sent > self._cut_at:
                    self._cut()
            elif status < 500:
                self._serve(tokens)
                if self.waiting or self.tokens < tokens:
                    self._grow(tokens)

    def _serve(self, tokens: float) -> None:
        """Counts a success of tokens, answered now, in the last period's (those older leave it now: it holds
        one period's)."""
        now = _loop_now()
        self._served_lately(now)
        self._served.append((now, tokens))
        self._served_tokens += tokens

    def _served_lately(self, now: float) -> float:
        """The tokens of the successes answered in the period before now."""
        since = now - self.time_period
        served = self._served
        while served and served[0][0] <= since:
            self._served_tokens -= served.popleft()[1]
        if not served:
            self._served_tokens = 0.0  # no rounding left over
        return self._served_tokens

    def _cut(self) -> None:
        """Multiplies the rate by decrease, not below decrease times what the server served in the last
        period, nor min_rate; the round ends now, and the rate cut from is known too high."""
        least, _ = self._bounds
        self._cut_at = _loop_now()
        self._cuts += 1
        self._earned = 0.0
        rate = self._too_high = self.max_rate
        self._probe = self._increase
        cut = max(least, self._decrease * rate, min(rate, self._decrease * self._served_lately(self._cut_at)))
        if cut < rate:
            self.set_rate(cut)

    def _grow(self, tokens: float) -> None:
        """Adds a step per period's worth (the rate's) of tokens answered: half the way to the rate known too
        high below it (at least increase), the probe above it (doubled at each step)."""
        _, most = self._bounds
        rate = self.max_rate
        if rate >= most:
            return
        self._earned += tokens / rate
        if self._earned < 1:
            return
        self._earned = 0.0
        if rate < self._too_high:
            step = max(self._increase, (self._too_high - rate) / 2)
        else:
            step = self._probe
            self._probe *= 2
        self.set_rate(min(most, rate + step))

    def __repr__(self) -> str:
        least, most = self._bounds
        return (f"<AdaptiveLimiter {self.max_rate:.6g}/{self.time_period:g}s within [{least:g}, {most:g}], "
                f"burst {self.burst:g}, {self._cuts} cuts>")
