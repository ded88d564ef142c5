"""Pure-Python twin of ``src/_tokenbucket/limits.c``: the token arithmetic, with no queue and no clock.

Every function of limits.c has its namesake here (``tb_limits_fit_at(l, ...)`` is ``l.fit_at(...)``, a static
helper ``debt_in_range(f, ...)`` is ``_debt_in_range(f, ...)``; one rate's, of rate.h and rate.c, are
``_rate_py``'s) and takes the same steps: a rate's state F is an int of ticks (1/16 ns) where C has one int64
word, instants are ints where C has int64 nanoseconds, Python floats (C doubles) stand for doubles, C's casts
to int64 are ``int()`` (truncation) and its truncating ``/`` and ``%`` on ticks give the same ceiling as
``-(-t // 16)``, so both give bit-identical results. Where it differs: ints do not overflow (C's arithmetic is
undefined past int64, which the ranges of TB_MAX_SPAN exclude); the window is ``_window_py``'s, the twin of
window.c (C's projection answers NEVER when it cannot copy the window's log); a status is an int constant
(``OK``, ``EINVAL``, ...); the amounts ahead of a projection come from a Python iterator; ``check()`` runs
after each mutating operation only when ``DEBUG_CHECKS`` is set (C: debug builds)."""

from __future__ import annotations

import math
from typing import Iterator, NamedTuple

from ._rate_py import (MAX_SPAN, TICKS_PER_NS, Rate, at_tick, full_before, full_since, gcra_debt, gcra_take, ns_from,
                       positive, rate_balance, rate_fit_at, rate_fits, rate_holding, rate_ok, rate_tokens, ticks,
                       ticks_down)
from ._window_py import NEVER, Grant, Window

__all__ = ["OK", "EINVAL", "ENOMEM", "ETOOLATE", "NEVER", "NO_PAUSE", "MAX_SPAN", "MAX_RATES", "TICKS_PER_NS", "Rate",
           "Grant", "Window", "Limits", "Ahead"]

NO_PAUSE = -(1 << 63)  # INT64_MIN: paused_until of limits never paused
MAX_RATES = 4  # TB_MAX_RATES
OK, EINVAL, ENOMEM, ETOOLATE = 0, 1, 2, 3  # tb_status
HORIZON = MAX_SPAN  # ns: projections this far read NEVER, so F stays below 2^63 ticks
REPLAY_UP_TO = 64  # amounts ahead a one-rate projection replays exactly, rather than bound
DEBUG_CHECKS = False  # check() after every mutating operation, as C's debug builds (tests set it)


def _debug_check(limits: Limits) -> None:
    """Asserts limits.check() == 0 when DEBUG_CHECKS is set."""
    if DEBUG_CHECKS:
        broken = limits.check()
        assert broken == 0, f"tb_limits_check() returned {broken}"


class Ahead(NamedTuple):
    """tb_ahead: the amounts queued ahead of a projected grant, in the order they will be granted."""

    total: float  # their sum
    count: int  # type: ignore[assignment]  # how many there are (a field, where tuple has a method)
    amounts: Iterator[float]  # yields them one by one


def _settle_change(r: Rate, taken: float, used: float) -> int:
    """The ticks a rate's F moves by when a grant of taken cost used: the need of used less the need of taken, each
    rounded up as a grant's was; for taken past MAX_SPAN of need (above every burst), the difference's need (a
    debt) or its whole ticks (a refund, of which more than a span and a half fills any rate)."""
    was, is_ = taken * r.ns_per_token, used * r.ns_per_token
    if was <= float(MAX_SPAN):
        return ticks(is_) - ticks(was)
    return ticks(is_ - was) if is_ >= was else -ticks_down(min(was - is_, 1.5 * float(MAX_SPAN)))


def _debt_in_range(f: int, debt_ticks: int, now: int) -> bool:
    """Whether debt more ticks may be taken from the rate at F f at now: the rate then full at most MAX_SPAN
    after now."""
    owed = gcra_debt(f, now)
    return debt_ticks <= at_tick(MAX_SPAN) - (owed if owed > 0 else 0)


# ---- every limit at once ----

def _all_fit(l: Limits, amount: float, t: int) -> bool:
    """Whether amount can be granted at t by every limit."""
    if t >= l.grants_until or t < l.paused_until or (t < l.limited_until and amount > l.limited_left):
        return False
    for r, f in zip(l.rates, l.state):
        if not rate_fits(r, f, ticks(amount * r.ns_per_token), t):
            return False
    return l.window.fits(amount, t)


def _all_fit_at(l: Limits, amount: float, t: int) -> int:
    """First instant >= t at which every limit grants amount: each fits from some instant on, so the latest."""
    if amount > l.max_amount:
        return NEVER
    if t < l.paused_until:
        t = l.paused_until
    if t < l.limited_until and amount > l.limited_left:
        t = l.limited_until
    for r, f in zip(l.rates, l.state):
        ready = rate_fit_at(r, f, ticks(amount * r.ns_per_token), t)
        if ready > t:
            t = ready
    opens = l.window.fit_at(amount, t)
    if opens > t:
        t = opens
    return t if t < l.grants_until else NEVER


def _take_all(l: Limits, amount: float, rates_at: int, now: int) -> None:
    """Grants amount: the rates as of rates_at (never after now), the window and a running limit at now."""
    for i, r in enumerate(l.rates):
        l.state[i] = gcra_take(l.state[i], ticks(amount * r.ns_per_token), rates_at)
    l.window.record(amount, now)
    if now < l.limited_until:
        l.limited_left = l.limited_left - amount if amount < l.limited_left else 0.0


def _most_grantable(l: Limits) -> float:
    """The largest amount any single grant may take."""
    most = l.window.limit if l.window.period else math.inf
    for r in l.rates:
        if r.burst < most:
            most = r.burst
    return most


def _most_requested(l: Limits) -> float:
    """The largest amount a request may ask for: the bursts' most, or the largest set apart from them."""
    return l.largest if l.largest > l.max_amount else l.max_amount


def _set_most(l: Limits) -> None:
    """Sets max_amount and max_request from the limits as they are now."""
    l.max_amount = _most_grantable(l)
    l.max_request = _most_requested(l)


def _change_rates(l: Limits, change: list[int], now: int) -> None:
    """Moves each rate's F by change ticks at now: more is taken as debt, fitting or not; less is given back,
    never fuller than full at now."""
    for i, step in enumerate(change):
        if step > 0:
            l.state[i] = gcra_take(l.state[i], step, now)
        else:
            l.state[i] += step
            if l.state[i] < full_since(now):
                l.state[i] = full_since(now)


def _late_credit_ns(l: Limits) -> int:
    """The late credit in nanoseconds: late_credit of a token of the fastest rate (none for a window)."""
    fastest = math.inf
    for r in l.rates:
        if r.ns_per_token < fastest:
            fastest = r.ns_per_token
    return int(l.late_credit * fastest) if l.rates else 0


def _simulated_grant(l: Limits, ahead: Ahead, amount: float, now: int) -> int:
    """Grant instant of amount behind the amounts ahead, found by granting them in order on a copy of the limits."""
    copy = Limits()
    copy.rates = l.rates  # parameters are only read
    copy.state = list(l.state)
    copy.window = l.window.copy()
    copy.paused_until = l.paused_until
    copy.limited_until, copy.limited_left = l.limited_until, l.limited_left
    copy.grants_until = l.grants_until
    copy.max_amount = l.max_amount
    t = now
    for following in ahead.amounts:
        if t >= HORIZON:
            break
        t = _all_fit_at(copy, following, t)
        if t < HORIZON:
            _take_all(copy, following, t, t)
    if t < HORIZON:
        t = _all_fit_at(copy, amount, t)
    return NEVER if t >= HORIZON else t


class Limits:
    """tb_limits: up to MAX_RATES rates, an optional strict sliding window, a pause and an end of grants, all
    of which a grant must satisfy. Made empty; init() or init_window() sets it up."""

    __slots__ = ("rates", "state", "window", "paused_until", "limited_until", "limited_left", "grants_until",
                 "max_amount", "largest", "max_request", "anchored", "plain", "late_credit")

    def __init__(self) -> None:
        self.rates: list[Rate] = []  # every one must allow a grant (C: rates[] and nrates)
        self.state: list[int] = []  # F of each rate, in ticks, set at the first reading of the clock
        self.window = Window()
        self.paused_until = NO_PAUSE  # no grant before this instant
        self.limited_until = NO_PAUSE  # before this instant, grants take at most limited_left tokens in all
        self.limited_left = 0.0  # what they may still take (>= 0)
        self.grants_until = NEVER  # no grant at or after this instant (NEVER: none ends them)
        self.max_amount = 0.0  # the most any single grant may take: the smallest burst or window limit
        self.largest = 0.0  # the most a request may ask for apart from the bursts (0: the bursts alone)
        self.max_request = 0.0  # the most a request may ask for: max(largest, max_amount)
        self.anchored = False  # the first reading of the clock has set every F
        self.plain = False  # one rate, no window, never paused, limited or ended: take_now's short path applies
        self.late_credit = 0.0  # in time of one token of the fastest rate

    # ---- set-up ----

    def init(self, ns_per_token: float, burst: float, initial: float) -> int:
        """Sets up limits of one rate; OK, or EINVAL if a parameter is out of range."""
        if not rate_ok(ns_per_token, burst, initial):
            return EINVAL
        Limits.__init__(self)
        return self.add_rate(ns_per_token, burst, initial)

    def init_window(self, period: int, limit: float) -> int:
        """Sets up limits of a strict sliding window only; OK or EINVAL."""
        if period <= 0 or period > MAX_SPAN or not positive(limit):
            return EINVAL
        Limits.__init__(self)
        self.window = Window(period, limit)
        _set_most(self)
        _debug_check(self)
        return OK

    def add_rate(self, ns_per_token: float, burst: float, initial: float) -> int:
        """Adds a rate that every grant must also satisfy (before the first reading); OK or EINVAL."""
        if len(self.rates) == MAX_RATES or self.anchored or not rate_ok(ns_per_token, burst, initial):
            return EINVAL
        self.rates.append(Rate(ns_per_token, burst, initial))
        self.state.append(0)
        _set_most(self)
        self.plain = (len(self.rates) == 1 and self.window.period == 0 and self.paused_until == NO_PAUSE
                      and self.limited_until == NO_PAUSE and self.grants_until == NEVER)
        _debug_check(self)
        return OK

    def release(self) -> None:
        """Frees the window's log."""
        self.window.release()

    # ---- grants ----

    def anchor(self, now: int) -> None:
        """Takes now as the first reading of the clock, when there was none: each rate holds its initial tokens."""
        if self.anchored:
            return
        self.anchored = True
        for i, r in enumerate(self.rates):
            self.state[i] = rate_holding(r, r.initial, now)

    def tokens(self, now: int) -> float:
        """Tokens available at now (never negative, at most the smallest burst or window limit; 0 at or after
        the end of grants)."""
        self.anchor(now)
        if now < self.paused_until or now >= self.grants_until:
            return 0.0
        tokens = self.window.limit - self.window.used(now) if self.window.period else math.inf
        for r, f in zip(self.rates, self.state):
            held = rate_tokens(r, f, now)
            if held < tokens:
                tokens = held
        if now < self.limited_until and self.limited_left < tokens:
            tokens = self.limited_left
        return tokens if tokens > 0 else 0.0

    def owed(self, now: int, t: int) -> float:
        """The most tokens a rate would still owe at t >= now (a settled debt not yet refilled; 0 when none would)."""
        self.anchor(now)
        owed = 0.0
        for r, f in zip(self.rates, self.state):
            balance = rate_balance(r, f, t)
            if -balance > owed:
                owed = -balance
        return owed

    def fits(self, amount: float, now: int) -> bool:
        """Whether every limit grants amount at now (never at or after the end of grants)."""
        self.anchor(now)
        return _all_fit(self, amount, now)

    def fit_at(self, amount: float, t: int) -> int:
        """The first instant >= t at which every limit grants amount; NEVER for amount > max_amount or when that
        instant is at or after the end of grants."""
        self.anchor(t)
        return _all_fit_at(self, amount, t)

    def credited_at(self, amount: float, now: int) -> int:
        """The instant a grant of amount that fits at now is taken as of: the first instant it fitted,
        but not before late_credit (of a token of the fastest rate) before now."""
        self.anchor(now)
        ready = _all_fit_at(self, amount, now - _late_credit_ns(self))
        return ready if ready < now else now

    def take(self, amount: float, rates_at: int, now: int) -> None:
        """Grants amount, which must fit: the rates as of rates_at (<= now), the window at now."""
        self.anchor(now)
        _take_all(self, amount, rates_at, now)
        _debug_check(self)

    def take_now(self, amount: float, now: int) -> bool:
        """Grants amount at now if every limit allows it; returns whether it did."""
        self.anchor(now)
        if self.plain:  # the uncontended path of a plain limiter, kept short
            r = self.rates[0]
            need = r.token_ticks if amount == 1.0 else ticks(amount * r.ns_per_token)
            if not rate_fits(r, self.state[0], need, now):
                return False
            self.state[0] = gcra_take(self.state[0], need, now)
            _debug_check(self)
            return True
        if not _all_fit(self, amount, now):
            return False
        _take_all(self, amount, now, now)
        _debug_check(self)
        return True

    def refund(self, amount: float, now: int) -> None:
        """Gives back amount tokens granted earlier and never used."""
        self.anchor(now)
        for i, r in enumerate(self.rates):
            self.state[i] -= ticks_down(amount * r.ns_per_token)
            if self.state[i] < full_since(now):
                self.state[i] = full_since(now)
        self.window.unrecord(amount)
        _debug_check(self)

    def settle(self, taken: float, used: float, held: bool, now: int) -> int:
        """Settles a grant of taken tokens whose real cost, known only now, is used: each rate's F moves by the
        need of used less the need of taken, as if used had been taken at the grant (less: given back as a
        refund, never fuller than full at now; more: taken now as debt, fitting or not); the window's held
        grant, or its oldest logged grant of taken, changes likewise (more: the difference logged at now); a
        running limit loses the difference. OK, or EINVAL, changing nothing, for amounts out of range or a
        debt that would take a rate more than MAX_SPAN past now."""
        if not (0 < taken <= self.max_request) or not (used >= 0 and math.isfinite(used)) or (held and
                                                                                            self.window.holds == 0):
            return EINVAL
        self.anchor(now)
        change = []
        for r, f in zip(self.rates, self.state):
            step = _settle_change(r, taken, used)
            if step > 0 and not _debt_in_range(f, step, now):
                return EINVAL
            change.append(step)
        _change_rates(self, change, now)
        self.window.settle(taken, used, held, now)
        if used > taken and now < self.limited_until:
            self.limited_left = self.limited_left - (used - taken) if used - taken < self.limited_left else 0.0
        _debug_check(self)
        return OK

    def reckon_late(self, amount: float, now: int) -> None:
        """Grants of amount, taken earlier, are used only now: each rate keeps no more than it would hold had
        they been taken now (amount's need short of full: in debt for more than its burst), spending the
        refill they waited through that it could not have held beside them (the bound at the moment of use);
        the window is left as it is."""
        self.anchor(now)
        for i, r in enumerate(self.rates):
            taken_now = rate_holding(r, r.burst - amount, now)
            if self.state[i] < taken_now:
                self.state[i] = taken_now
        _debug_check(self)

    def hold(self, amount: float) -> None:
        """Holds a grant of amount just taken while it is in use: the window's newest logged grants, up
        to amount, count until its hold ends instead (a window only; stricter, never looser, should
        another grant be newer than it)."""
        self.window.hold(amount)
        _debug_check(self)

    def end_hold(self, amount: float, now: int) -> None:
        """Ends the hold of a grant of amount at now: it leaves the window at now + period (nothing if
        no grant is held)."""
        self.anchor(now)
        self.window.end_hold(amount, now)
        _debug_check(self)

    # ---- projection ----

    def projection(self, ahead: Ahead, amount: float, now: int) -> int:
        """The instant amount is granted behind the amounts ahead, granted in order as soon as each fits,
        if nothing else changes: exact, but with one rate and 64 or more amounts ahead a bound, never
        early and at most a tick per amount ahead late; NEVER if that is at 2^58 ns or later, at or after
        the end of grants, or above max_amount."""
        self.anchor(now)
        t = self._projected(ahead, amount, now)  # the grants ahead come first: in time if it is
        return t if t < self.grants_until else NEVER

    def _projected(self, ahead: Ahead, amount: float, now: int) -> int:
        """The projection's instant, as projection's but for the end of grants (C: static projected)."""
        if (len(self.rates) != 1 or self.window.period or self.paused_until > now or self.limited_until > now
                or self.max_request > self.max_amount or ahead.count < REPLAY_UP_TO):
            return _simulated_grant(self, ahead, amount, now)  # an amount above the burst never fits: not summed
        # one rate, a long queue: amount is granted once it and all before it fit in a bucket full at F;
        # each grant ahead rounds its need up by less than a tick: count ticks more, never early
        rate = self.rates[0]
        need = (ahead.total + amount) * rate.ns_per_token + float(ahead.count) / TICKS_PER_NS
        if not need < float(HORIZON):
            return NEVER
        need_ticks = ticks(need)
        if need_ticks <= rate.burst_ticks:
            t = rate_fit_at(rate, self.state[0], need_ticks, now)
            return t if t < HORIZON else NEVER
        full = at_tick(now) if full_before(self.state[0], now) else self.state[0]
        if not float(full) / TICKS_PER_NS + need < float(HORIZON):
            return NEVER  # a long queue at a slow rate
        t = ns_from(full + (need_ticks - rate.burst_ticks))  # max(F, now) + need - burst
        return t if t > now else now

    def full(self, now: int) -> bool:
        """Whether the limits are as good as new at now: every rate full, no grant inside the window
        ending at now, no pause or limit running after now (true before the first reading), and no end of
        grants set: an end, ahead or passed, is state a new limiter lacks (False while one is set, even
        before the first reading, as for a running pause)."""
        if self.grants_until != NEVER:
            return False
        if not self.anchored:
            return True
        if self.paused_until > now or self.limited_until > now or self.window.holds > 0 or (
                self.window.period and self.window.used(now) > 0):
            return False
        return all(gcra_debt(f, now) <= 0 for f in self.state)

    # ---- changes ----

    def set_late_credit(self, tokens: float) -> None:
        """Sets the late credit in time of one token of the fastest rate: values outside (0, 1) mean 0."""
        self.late_credit = tokens if 0 < tokens < 1 else 0.0

    def set_rate(self, index: int, ns_per_token: float, burst: float, now: int) -> int:
        """Changes rate index to a new refill and capacity as of now, keeping the tokens it holds
        (at most the new burst; a debt, owed at the new refill); OK, or EINVAL."""
        if not 0 <= index < len(self.rates) or not rate_ok(ns_per_token, burst, 0):
            return EINVAL
        self.anchor(now)
        tokens = rate_balance(self.rates[index], self.state[index], now)  # a settled debt is kept, in the new
        self.rates[index] = Rate(ns_per_token, burst)                      # rate's time
        self.state[index] = rate_holding(self.rates[index], tokens, now)
        _set_most(self)
        _debug_check(self)
        return OK

    def set_window(self, period: int, limit: float) -> int:
        """Changes the window's period and limit, keeping its log of grants; OK, or EINVAL (also for
        limits without a window)."""
        if self.window.period == 0 or period <= 0 or period > MAX_SPAN or not positive(limit):
            return EINVAL
        self.window.period = period
        self.window.limit = limit
        _set_most(self)
        _debug_check(self)
        return OK

    def pause_until(self, until: int) -> None:
        """No grant before until (a later call can only move it later)."""
        if until > self.paused_until:
            self.paused_until = until
            self.plain = False

    def limit_until(self, tokens: float, until: int, slack: int, now: int) -> bool:
        """Grants before until take at most tokens (>= 0) in all, on top of every other limit. A limit still
        running at now is replaced by one that ends more than slack after it, tightened by one that ends
        within slack of it (the fewer tokens, the later end), and kept by one that ends more than slack
        before it. One that ends at or before now changes nothing. Returns whether it set a limit or gave fewer
        tokens (a later end alone: False; a waiter timed for the earlier end is timed again when it comes)."""
        if until <= now:
            return False
        if self.limited_until > now:
            if until < self.limited_until - slack:
                return False
            if until <= self.limited_until + slack:
                fewer = tokens < self.limited_left
                if tokens < self.limited_left:
                    self.limited_left = tokens
                if until > self.limited_until:
                    self.limited_until = until
                _debug_check(self)
                return fewer
        self.limited_left = tokens
        self.limited_until = until
        self.plain = False
        _debug_check(self)
        return True

    def grant_until(self, until: int) -> None:
        """No grant at or after until (NEVER: no end, the default), earlier or later than before; once any end
        is set, the limits are never plain again."""
        self.grants_until = until
        if until != NEVER:
            self.plain = False

    def set_largest(self, amount: float) -> int:
        """Requests may ask for up to max(amount, the smallest burst or window limit): one above the bursts waits
        until a rate's burst grows to it; amount 0 leaves the bursts alone. OK, or EINVAL (changing nothing)
        unless amount is 0 or finite and > 0."""
        if amount != 0 and not positive(amount):
            return EINVAL
        self.largest = amount
        self.max_request = _most_requested(self)
        _debug_check(self)
        return OK

    def credit(self, tokens: float, now: int) -> int:
        """Credits tokens to every rate without a grant: above 0 given back as a refund is (never fuller than
        full at now); below 0 taken at now as a debt, fitting or not. The window, a running limit and the end
        of grants are untouched. OK, or EINVAL changing nothing for a NaN or infinite amount, for limits with
        a window, or for a debt that would leave a rate full again more than MAX_SPAN after now."""
        if not math.isfinite(tokens) or self.window.period:
            return EINVAL
        self.anchor(now)
        change = []
        for r, f in zip(self.rates, self.state):
            # a debt rounded up; a refund rounded down, and more than a span of it fills any rate
            ns = abs(tokens) * r.ns_per_token
            step = ticks(ns) if tokens < 0 else -ticks_down(min(ns, 1.5 * MAX_SPAN))
            if step > 0 and not _debt_in_range(f, step, now):
                return EINVAL
            change.append(step)
        _change_rates(self, change, now)
        _debug_check(self)
        return OK

    def rebase(self, then: int, now: int) -> None:
        """Moves the limits onto another clock, on which the old clock's then reads now."""
        if not self.anchored:
            return
        shift = now - then
        for i in range(len(self.state)):
            if self.state[i] < full_since(then):
                self.state[i] = full_since(then)
            self.state[i] += at_tick(shift)
        self.window.shift(shift)
        if self.paused_until != NO_PAUSE:
            self.paused_until += shift
        if self.limited_until != NO_PAUSE:
            self.limited_until += shift
        if self.grants_until != NEVER:
            self.grants_until += shift
        _debug_check(self)

    def check(self) -> int:
        """0 if every invariant of the limits holds, else the number of the broken one (1 or 10)."""
        if len(self.rates) > MAX_RATES or len(self.state) != len(self.rates) or (
                not self.rates and self.window.period == 0):
            return 1
        for r in self.rates:
            if (not positive(r.ns_per_token) or not positive(r.burst) or r.burst_ns != r.burst * r.ns_per_token
                    or r.burst_ticks != ticks(r.burst_ns) or r.token_ticks != ticks(r.ns_per_token)):
                return 1
        if (self.max_amount != _most_grantable(self) or not self.largest >= 0
                or self.max_request != _most_requested(self) or not self.limited_left >= 0):
            return 1
        return 0 if self.window.ok() else 10
