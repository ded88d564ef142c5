"""Pure-Python twin of ``src/_tokenbucket/window.c``: the core's strict sliding window, a log of grants,
oldest first, and the grants held while in use.

As in ``_limits_py`` (its only user), each function of window.c has its namesake: ``tb_window_fit_at(w, ...)``
is ``w.fit_at(...)``, a static helper ``forget(w, ...)`` is ``_forget(w, ...)``, and each takes the same steps,
so both give the same results. Where it differs: the log is a list that always grows (C merges a grant into
the newest when memory is short), so a copy needs no room made for it and never fails."""

from __future__ import annotations

import math

NEVER = (1 << 63) - 1  # TB_NEVER (limits.h): "no deadline"; _limits_py takes it from here


class Grant:
    """tb_grant: a logged grant of the window."""

    __slots__ = ("at", "amount")

    def __init__(self, at: int, amount: float) -> None:
        self.at = at  # when it was granted
        self.amount = amount


class Window:
    """tb_window: at most limit tokens granted in any [t, t + period); period 0: no window. A grant
    held while in use is inside every window until its hold ends, then logged as of that instant.
    ``Window(period, limit)`` is ``tb_window_init`` (the caller checks the parameters)."""

    __slots__ = ("period", "limit", "log", "held", "holds")

    def __init__(self, period: int = 0, limit: float = 0.0) -> None:
        self.period = period
        self.limit = limit
        self.log: list[Grant] = []  # grants that may still be inside a window, oldest first
        self.held = 0.0  # tokens of the grants held, inside every window until their holds end
        self.holds = 0  # how many grants are held: held is 0 exactly when none is

    def release(self) -> None:
        """Frees the log: the window is then empty."""
        self.log = []

    def copy(self) -> Window:
        """A copy owning a copy of the log."""
        twin = Window(self.period, self.limit)
        twin.log = [Grant(grant.at, grant.amount) for grant in self.log]
        twin.held, twin.holds = self.held, self.holds
        return twin

    def used(self, t: int) -> float:
        """Tokens of the grants inside the window that ends at t: the held ones, and those logged after t - period."""
        used = self.held
        for grant in self.log:
            if grant.at > t - self.period:
                used += grant.amount
        return used

    def fits(self, amount: float, t: int) -> bool:
        """Whether amount more fits in the window ending at t (always, for no window)."""
        return self.period == 0 or self.used(t) + amount <= self.limit

    def fit_at(self, amount: float, t: int) -> int:
        """First instant >= t at which amount more fits: when enough old grants have left the window, the held
        ones leaving at t + period should their holds end at t; NEVER for amount > limit."""
        if self.fits(amount, t):
            return t
        for grant in self.log:  # a grant leaves the window at its at + period
            leaves = grant.at + self.period
            if leaves > t and self.fits(amount, leaves):
                return leaves
        return t + self.period if amount <= self.limit else NEVER  # every logged grant is out by then

    def record(self, amount: float, t: int) -> None:
        """Logs a grant of amount at t (or at the newest grant's instant, if later)."""
        if self.period == 0:
            return
        _forget(self, t)
        if self.log and self.log[-1].at > t:
            t = self.log[-1].at  # keep the log in time order
        self.log.append(Grant(t, amount))

    def unrecord(self, amount: float) -> None:
        """Takes back a logged grant of amount: the oldest of that size, so the log errs on the strict side."""
        for i, grant in enumerate(self.log):
            if grant.amount == amount:
                _drop(self, i)
                return

    def hold(self, amount: float) -> None:
        """Holds a grant of amount just logged: its newest logged grants, up to amount, move to the held ones."""
        if self.period == 0:
            return
        self.held += amount
        self.holds += 1
        log = self.log
        while amount > 0 and log:
            newest = log[-1]
            if newest.amount > amount:
                newest.amount -= amount
                return
            amount -= newest.amount
            log.pop()

    def end_hold(self, amount: float, now: int) -> None:
        """Ends a hold of amount at now, logging it then; nothing if no grant is held."""
        if self.holds == 0:
            return
        self.holds -= 1
        self.held = 0.0 if self.holds == 0 or amount > self.held else self.held - amount
        if amount > 0:  # a hold settled at no cost logs nothing
            self.record(amount, now)

    def settle(self, taken: float, used: float, held: bool, now: int) -> None:
        """Changes the record of a grant of taken that cost used (Limits.settle): a held one's hold moves by
        used - taken; otherwise more is logged at now, less shrinks the oldest logged grant of taken."""
        if self.period == 0:
            return
        if held:
            self.held = 0.0 if used - taken < -self.held else self.held + (used - taken)
            return
        if used > taken:
            self.record(used - taken, now)
            return
        for i, grant in enumerate(self.log):
            if grant.amount != taken:
                continue
            if used > 0:
                grant.amount = used
            else:
                _drop(self, i)
            return

    def shift(self, shift: int) -> None:
        """Moves every logged grant by shift ns (a change of clock)."""
        for grant in self.log:
            grant.at += shift

    def ok(self) -> bool:
        """Whether every invariant of the window holds: its log in time order, amounts > 0, held tokens >= 0
        and 0 exactly when none is held."""
        if not self.held >= 0 or (self.holds == 0 and self.held != 0):
            return False
        log = self.log
        for i in range(1, len(log)):
            if log[i].at < log[i - 1].at or not (log[i].amount > 0 and math.isfinite(log[i].amount)):
                return False
        return True


def _forget(w: Window, now: int) -> None:
    """Drops the grants that no window ending at now or later can see."""
    log = w.log
    drop = 0
    while drop < len(log) and log[drop].at <= now - w.period:
        drop += 1
    del log[:drop]


def _drop(w: Window, i: int) -> None:
    """Removes the i-th oldest logged grant."""
    del w.log[i]
