"""The lease script (python/aiotb/_redis_lease.lua) against a model of it in Python, on random streams of
calls from several holders, on the client's clock: every reply, the holders the key keeps, and the tokens each
free unit holds agree at every step, and the units are conserved (those held and those free are always all
of them). The model is the script's specification: what a holder gets (its max-min fair share of the units,
the fullest free units first, with their tokens), what a free unit holds (the fraction of its burst it came
back with, plus what it refilled since, at most its burst), what a lease not renewed in time gives back
(its units, empty at its end, and its debt to the key), and where debts go (a holder's kept with its lease, the
key's charged to the next holder left holding units)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

import aiotb
import pytest
from aiotb import _store_redis
from aiotb._store_redis import Lease, RedisLease
from conftest import ClientClock

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
STREAMS = 60
CALLS = 40  # per stream
HOLDERS = "abcd"


@dataclass
class Unit:
    since: int  # us: when it came back
    g: float  # the fraction of its burst it held then


@dataclass
class Holder:
    units: int
    want: int
    ends: int  # us: its lease's end
    owed: float = 0.0  # tokens it owes, as it last told


@dataclass
class LeaseModel:
    """What the script keeps under one key, and what each of its operations answers."""

    n: int
    span: int  # us
    rates: list[tuple[float, float, float]]  # (ns per token, burst, initial)
    exists: bool = False
    holders: dict[str, Holder] = field(default_factory=dict)
    free: list[Unit] = field(default_factory=list)
    pause: int | None = None
    owed: float = 0.0  # tokens owed to the key
    pending: float = 0.0  # what the key will owe once the call being made is stored

    @classmethod
    def of(cls, definition: str) -> LeaseModel:
        _, n, span, rates = definition.split(" ", 3)
        return cls(int(n), int(span), [tuple(map(float, rate.split(","))) for rate in rates.split(";")])  # type: ignore[misc]

    def unit_tokens(self, unit: Unit, now: int) -> float:
        """Tokens a free unit holds at now: the fewest over the rates, each at most a unit's burst."""
        return min(min(b / self.n, unit.g * (b / self.n) + (now - unit.since) * 1000 / (self.n * t))
                   for t, b, _ in self.rates)

    def _loaded(self, now: int) -> tuple[dict[str, Holder], list[Unit]]:
        """The holders whose lease runs at now, and the free units, with those of the leases that ended (whose
        debts the key takes)."""
        if not self.exists:
            g = min(1.0, *(i / b for _, b, i in self.rates))
            self.pending = 0.0
            return {}, [Unit(now, g) for _ in range(self.n)]
        holders = {i: Holder(h.units, h.want, h.ends, h.owed) for i, h in self.holders.items() if h.ends > now}
        free = [Unit(h.ends, 0.0) for h in self.holders.values() if h.ends <= now for _ in range(h.units)]
        self.pending = self.owed + sum(h.owed for h in self.holders.values() if h.ends <= now)
        return holders, free + [Unit(u.since, u.g) for u in self.free]

    def _stored(self, holders: dict[str, Holder], free: list[Unit]) -> None:
        self.exists, self.holders, self.free, self.owed = True, holders, free, self.pending
        if self.pause is None:
            self.pause = 0

    def _pause_left(self, now: int) -> int:
        return max(0, ((self.pause or 0) - now) * 1000)

    def _shares(self, holders: dict[str, Holder]) -> dict[str, int]:
        """A max-min fair split of the units over the holders' wants (the one holding more keeps more on a tie)."""
        order = sorted(holders.items(), key=lambda item: (item[1].want, item[1].units, item[0]))
        left, share = self.n, {}
        for j, (holder, h) in enumerate(order):
            share[holder] = min(h.want, left // (len(order) - j))
            left -= share[holder]
        return share

    def lease(self, now: int, holder: str, have: int, want: int, g: float, debt: float) -> Lease:
        holders, free = self._loaded(now)
        me = holders.get(holder)
        units = me.units if me else 0
        if have < units:
            free += [Unit(now, max(0.0, min(1.0, g))) for _ in range(units - have)]
            units = have
        if me is None:  # its debt went to the key as its lease lapsed (or it held none)
            debt = 0.0
        elif units == 0:  # its debt goes with its last unit
            self.pending, debt = self.pending + debt, 0.0
        holders[holder] = Holder(units, min(want, self.n), now + self.span, debt)
        share = self._shares(holders)[holder]
        tokens = 0.0
        if share > units and free:
            free.sort(key=lambda unit: self.unit_tokens(unit, now), reverse=True)
            taken = min(share - units, len(free))
            for unit in free[:taken]:
                tokens += self.unit_tokens(unit, now)
            del free[:taken]
            units += taken
        if units > 0 and self.pending > 0:  # charged the key's debt
            tokens, holders[holder].owed, self.pending = tokens - self.pending, debt + self.pending, 0.0
        holders[holder].units = units
        if units == 0 and want == 0:
            del holders[holder]
        self._stored(holders, free)
        return Lease(units, share, me is None, tokens, self._pause_left(now))

    def release(self, now: int, holder: str, g: float, debt: float) -> None:
        holders, free = self._loaded(now)
        if holder in holders or debt > 0:
            free += [Unit(now, max(0.0, min(1.0, g))) for _ in range(holders.pop(holder).units if holder in holders
                                                                      else 0)]
            self.pending += debt
            self._stored(holders, free)

    def owe(self, now: int, holder: str, debt: float) -> bool:
        holders, free = self._loaded(now)
        if holder in holders:
            holders[holder].owed = debt
        else:
            self.pending += debt
        self._stored(holders, free)
        return holder not in holders

    def pause_for(self, now: int, ns: int) -> int:
        holders, free = self._loaded(now)
        until = now + math.ceil(ns / 1000)
        if self.pause is None or until > self.pause:
            self.pause = until
        self._stored(holders, free)
        return self._pause_left(now)


def _definition(rng: random.Random) -> str:
    """Units, a span and one or two rates, full at first: a key that expires (every unit full again, no lease
    running) is then the same as a new one."""
    rates = []
    for _ in range(rng.choice((1, 1, 2))):
        burst = rng.choice((1.0, 4.0, 8.0, 10.0, 37.5))
        rates.append((rng.choice((1e6, 1e7, 2.5e7, 1e8, 1e9 / 3)), burst, burst))
    return _store_redis.lease_definition(rng.choice((1, 2, 3, 8, 16)), rng.choice((0.05, 0.3, 1.0)), rates)


async def _compare_kept(store: Any, model: LeaseModel, now: int, where: str) -> None:
    """The key's holders and free units against the model's; the units held and free are always all of them.
    A key gone has expired, which it may only once no lease runs, every unit is full and no pause is on:
    then it is the same as a new key, and so is the model's."""
    kept = await store.redis.hmget(store.redis_key, "H", "F", "o")
    if kept[0] is None and kept[1] is None:
        holders, free = model._loaded(now)
        assert not holders and (model.pause or 0) <= now, f"the key expired too soon {where}"
        assert all(model.unit_tokens(u, now) == min(b / model.n for _, b, _ in model.rates) for u in free), where
        model.exists, model.holders, model.free, model.pause, model.owed = False, {}, [], None, 0.0
        return
    holders = {}
    for word in kept[0].decode().split():
        holder, units, want, ends, owed = word.split(",")
        holders[holder] = Holder(int(units), int(want), int(ends), float(owed))
    free = [Unit(int(since), float(g)) for since, g in (word.split(",") for word in kept[1].decode().split())]
    assert sum(h.units for h in holders.values()) + len(free) == model.n, f"units not conserved {where}"
    assert {i: (h.units, h.want, h.ends) for i, h in holders.items()} == {
        i: (h.units, h.want, h.ends) for i, h in model.holders.items()}, where
    assert {i: h.owed for i, h in holders.items()} == pytest.approx({i: h.owed for i, h in model.holders.items()},
                                                                    rel=1e-12, abs=1e-12), where
    assert float(kept[2]) == pytest.approx(model.owed, rel=1e-12, abs=1e-12), where
    assert sorted(model.unit_tokens(u, now) for u in free) == pytest.approx(
        sorted(model.unit_tokens(u, now) for u in model.free), rel=1e-12, abs=1e-12), where


@pytest.mark.parametrize("seed", range(4))
def test_the_script_answers_as_its_model_on_random_calls(run: Run[None], redis_url: str,
                                                        client_clock: ClientClock, seed: int) -> None:

    async def main() -> None:
        rng = random.Random(seed)
        stores: list[Any] = []
        try:
            for stream in range(STREAMS // 4):
                definition = _definition(rng)
                store = aiotb.RedisStore(redis_url, f"model-{seed}-{stream}", lease=0.05, units=1)
                store._client_clock = True
                stores.append(store)
                model = LeaseModel.of(definition)
                for call in range(CALLS):
                    client_clock.us += rng.choice((0, rng.randrange(1, 5_000), rng.randrange(model.span),
                                            rng.randrange(3 * model.span)))
                    now, holder, where = client_clock.us, rng.choice(HOLDERS), f"(seed {seed}, {definition}, call {call})"
                    kind = rng.random()
                    if kind < 0.7:
                        held = model.holders[holder].units if holder in model.holders else 0
                        have, want = rng.randrange(held + 2), rng.randrange(model.n + 3)
                        g = rng.choice((0.0, 1.0, rng.uniform(-0.2, 1.2)))
                        debt = rng.choice((0.0, 0.0, rng.uniform(0.0, 5.0)))
                        lease = await RedisLease(store, definition).lease_units(holder, have, want, g, debt)
                        expected = model.lease(now, holder, have, want, g, debt)
                        assert lease._replace(tokens=0.0) == expected._replace(tokens=0.0), where
                        assert lease.tokens == pytest.approx(expected.tokens, rel=1e-12, abs=1e-12), where
                        least_burst = min(b for _, b, _ in model.rates) / model.n
                        assert lease.tokens <= lease.units * least_burst * (1 + 1e-12), where
                    elif kind < 0.8:
                        g, debt = rng.uniform(0.0, 1.0), rng.choice((0.0, rng.uniform(0.0, 5.0)))
                        await RedisLease(store, definition).release_units(holder, g, debt)
                        model.release(now, holder, g, debt)
                    elif kind < 0.9:
                        debt = rng.uniform(0.0, 5.0)
                        taken = await RedisLease(store, definition).owe(holder, debt)
                        assert taken == model.owe(now, holder, debt), where
                    else:
                        ns = rng.randrange(1, 2 * model.span * 1000)
                        assert await RedisLease(store, definition).pause(ns) == model.pause_for(now, ns), where
                    await _compare_kept(store, model, now, where)
        finally:  # closed whatever happened: a client left open fails the test on uvloop
            for store in stores:
                await store.redis.aclose()

    run(main())
