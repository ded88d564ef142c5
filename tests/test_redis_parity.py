"""The Redis script's GCRA (``_redis_gcra.lua``, run by a real redis-server) against the twin's
(``aiotb._limits_py.Limits``), on random streams of RedisStore calls at instants the test chooses.

Time is the test's: the store takes the client's clock (``_client_clock``), and that clock is a virtual
one in whole microseconds, moved forward at random. Each call runs, in one MULTI/EXEC, the script, then
HGETALL and PTTL of the hash, then PERSIST, so every step also compares the stored state (the epoch, each
rate's F, the pause, which calls write, the expiry the script asks) with the twin's. The script runs with
its PEXPIRE slowed a million times (``SLOW_EXPIRY``): the hash must not expire on the server's real clock,
which the virtual one does not follow.

The script counts in whole ns and the twin in ticks of 1/16 ns; both round a need, a burst and an initial
debt up. So:

- integer streams (every ns_per_token, burst, initial and amount an integer, set_rate's too): every need,
  burst and debt is a whole ns, and the script is the twin exactly: the same decisions, delays, instants,
  tokens (float equality) and F. The one rounding left is set_rate's, which converts a debt that need not be
  a whole ns: the script's F is then the twin's rounded up to the next ns, and the test takes that F on.
- float streams: F in the script exceeds the twin's by 0 to ``bound`` ns, tracked per rate: 15/16 at the
  start (the initial debt's rounding), 15/16 more per grant (its need's), less where the grant starts from
  a full rate, back to its old value when a cancel restores F, and for set_rate the carried bound scaled by
  the new ns_per_token over the old, plus 1. A fit instant then lies between the twin's (unrounded, per
  rate) minus 15/16 (the script's burst is rounded up too) and plus bound + 15/16; a decision may differ
  from the twin's only where that range straddles the wait, and the tokens are the twin's less at most
  bound / ns_per_token of a rate. The twin follows the script's decisions, so the streams stay side by side.

Cancel gives back exactly: each rate whose F is still what the reservation left is restored to what it was
before, if the epoch has not moved; the test keeps each reservation's F before and after and compares. The
hash is made by the first call that writes; until then each call sees a fresh state (initial tokens). An
instant stored 2^53 ns or more before the epoch (each move of the epoch takes a past F or pause further
back) is only checked to be in the past, where a double no longer holds every ns and nothing depends on it.

Streams are seeded (``random.Random(seed)``), 40 calls each: 120 integer, 120 float and 40 across moves of
the epoch, about 4 s in all; a failure names its seed, its rates and its last calls."""

from __future__ import annotations

import asyncio
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Awaitable, Callable, TypeVar

import aiotb
import pytest
import redis.asyncio
from aiotb import _store_redis
from aiotb._limits_py import NEVER, NO_PAUSE, OK, TICKS_PER_NS, Limits, Rate
from aiotb._rate_py import rate_holding, ticks
from aiotb._store_redis import MAX_PAUSE_NS as MOST_LIMIT_NS, RedisRates, RedisStore, definition, describe
from conftest import CLIENT_START_US as START_US, ClientClock

T = TypeVar("T")
RunOn = Callable[[asyncio.AbstractEventLoop, Awaitable[T]], T]
REBASE_AT = 1 << 50  # ns after the epoch from which the script moves its epoch to now
KEEP_BELOW = 1 << 51  # ns: no reservation ahead past this from now, so the script's instants stay below 2^53
ROUND = Fraction(15, 16)  # ns: by how much more rounding up to a whole ns can add than rounding up to a tick
NO_HASH, NO_EXPIRY = -2, -1  # PTTL's answers
SLOWED = 10**6  # the script's expiry, in ms of the server's clock, is SLOWED times what it asks
SLOW_EXPIRY = f"""local server = redis
local redis = setmetatable({{call = function(command, ...)
    if command == 'PEXPIRE' then
        local key, ms = ...
        return server.call('PEXPIRE', key, ms * {SLOWED})
    end
    return server.call(command, ...)
end}}, {{__index = server}})
"""  # put before the script: its calls of redis.call go through this, which slows PEXPIRE
STREAMS = 40  # per block of seeds
STEPS = 40  # calls per stream


SLOWED_SCRIPTS = {name: _store_redis.Script.of(SLOW_EXPIRY + script.text)
                  for name, script in _store_redis._CLIENT_CLOCK_SCRIPTS.items()}  # what the streams' stores send
FORMAT_PROBE = "local INT = string.format('%d', 2 ^ 53 + 2) == '9007199254740994' and '%d' or '%.0f'"
AS_ON_32_BITS = {name: _store_redis.Script.of(script.text.replace(FORMAT_PROBE, "local INT = '%.0f'"))
                 for name, script in SLOWED_SCRIPTS.items()}  # integers formatted as where Lua's '%d' has 32 bits


class Observed(redis.asyncio.Redis):
    """A client whose scripts each run, in one transaction, with HGETALL, PTTL and PERSIST of their key after
    them; it keeps the last script's reply (its words), the hash and the expiry the script asked. The stores
    send the scripts with their PEXPIRE slowed SLOWED times (``SLOWED_SCRIPTS``): a full hash's 1 ms expiry
    passed on the server's real clock between calls of a stream, and once even between the script and the
    HGETALL after it in one MULTI/EXEC."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_reply = b""
        self.last_hash: dict[str, str] = {}
        self.last_ttl = NO_HASH  # ms, as the script asked

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] != "EVALSHA":
            return await super().execute_command(*args, **options)
        key = args[3]
        pipe = self.pipeline(transaction=True)
        pipe.execute_command(*args)
        pipe.hgetall(key)
        pipe.pttl(key)
        pipe.persist(key)
        self.last_reply, fields, ttl, _ = await pipe.execute()
        self.last_hash = {k.decode(): v.decode() for k, v in fields.items()}
        self.last_ttl = ttl if ttl < 0 else round(ttl / SLOWED)
        return self.last_reply


@dataclass
class Held:
    """A reservation the script made, as the test knows it."""

    record: bytes
    epoch: int  # us: the hash's epoch it was made under
    before: list[int]  # each rate's F in the twin before it, ticks
    after: list[int]  # and after it
    bound: list[Fraction]  # each rate's bound before it (float streams)
    script_after: list[int]  # each rate's F in the script after it, ns on the twin's clock
    changed: set[int] = field(default_factory=set)  # rates set_rate changed since: F may meet `after` by chance
    cancelled: bool = False


def ceil_ns(ticks: int) -> int:
    """The first whole ns at or after a tick."""
    return -(-ticks // TICKS_PER_NS)


def set_rate_keeping_debt(twin: Limits, index: int, ns_per_token: float, burst: float, now: int) -> None:
    """The twin's set_rate, where a rate can hold fewer than 0 tokens. The engine takes tokens at or before
    now, so its rates never do and set_rate holds at least 0; the script's reservations ahead can leave a rate
    owing more than its burst, and its set_rate keeps that debt, in tokens, in the new rate."""
    rate, f = twin.rates[index], twin.state[index]
    owed = f - now * TICKS_PER_NS
    held = rate.burst - float(owed) / TICKS_PER_NS / rate.ns_per_token if owed > 0 else rate.burst
    assert twin.set_rate(index, ns_per_token, burst, now) == OK
    if held < 0:
        twin.state[index] = rate_holding(twin.rates[index], held, now)


# ---- random rates and values ----

def integer_rate(rng: random.Random) -> tuple[float, float, float]:
    """(ns_per_token, burst, initial), all integers."""
    ns = rng.choice([1, 2, 3, 7, 999, 1000, 1001, 4096, 33_333, 1_000_000, 999_983, 10_000_000, 1_000_000_000,
                     rng.randint(1, 1000), rng.randint(1, 10**9)])
    burst = rng.choice([1, 1, 2, 3, 5, 10, 40, rng.randint(1, 100)])
    initial = rng.choice([0, burst, rng.randint(0, burst)])
    return float(ns), float(burst), float(initial)


def float_rate(rng: random.Random) -> tuple[float, float, float]:
    """(ns_per_token, burst, initial), any floats in range."""
    ns = rng.choice([10 ** rng.uniform(-0.3, 9.5), rng.randint(1, 10**6) + rng.choice([0.5, 1 / 3, 0.1]),
                     1e9 / rng.choice([3, 7, 30, 1000, 7919])])
    burst = rng.choice([rng.uniform(0.1, 3), rng.uniform(1, 100), float(rng.randint(1, 20)), 1.5])
    initial = rng.choice([0.0, burst, rng.uniform(0, burst)])
    return ns, burst, initial


def slow_rate(rng: random.Random) -> tuple[float, float, float]:
    """An integer rate whose burst takes longer than the epoch's span to refill: its F is still ahead when
    the epoch moves."""
    burst = rng.randint(1, 5)
    ns = rng.randint(-(-12 * 10**14 // burst), 20 * 10**14 // burst)
    return float(ns), float(burst), float(rng.randint(0, burst))


# ---- one stream ----

class Stream:
    """One random stream of calls on one store, with the twin beside it."""

    def __init__(self, rng: random.Random, rates: list[tuple[float, float, float]], exact: bool,
                 store: RedisStore, client: Observed, clock: ClientClock, seen: Counter[str]) -> None:
        self.rng, self.exact, self.store, self.client, self.clock, self.seen = rng, exact, store, client, clock, seen
        self.rates = rates
        self.definition = definition(rates)
        self.bound_rates = RedisRates(store, self.definition)
        self.origin = clock.us  # the twin's instant 0
        self.twin: Limits | None = None  # None while there is no hash
        self.bound: list[Fraction] = []  # per rate, ns: 0 <= F in the script - F in the twin <= bound
        self.epoch: int | None = None  # us: the hash's epoch
        self.script_f: list[int] = []  # each rate's F in the hash, ns on the twin's clock
        self.held: list[Held] = []
        self.log: list[tuple[Any, ...]] = []

    # -- the twin's side --

    def now(self) -> int:
        """Now on the twin's clock, ns."""
        return (self.clock.us - self.origin) * 1000

    def fresh(self, now: int) -> Limits:
        """The twin of a hash made at now."""
        twin = Limits()
        for rate in self.rates:
            assert twin.add_rate(*rate) == OK
        twin.anchor(now)
        return twin

    def candidate(self, now: int) -> tuple[Limits, list[Fraction]]:
        """The twin and its bounds for a call at now: the stream's, or a fresh one while there is no hash."""
        if self.twin is not None:
            return self.twin, self.bound
        return self.fresh(now), [ROUND] * len(self.rates)

    def epoch_now(self) -> int:
        """The epoch the script counts from in this call: the hash's, moved to now once now is far from it."""
        if self.epoch is None or (self.clock.us - self.epoch) * 1000 >= REBASE_AT:
            return self.clock.us
        return self.epoch

    def adopt(self, twin: Limits, bound: list[Fraction]) -> None:
        """The call wrote the hash: the twin is the stream's, and so is the epoch of the call."""
        if self.epoch is not None and self.epoch_now() != self.epoch:
            self.seen["epoch moved"] += 1
        self.twin, self.bound, self.epoch = twin, bound, self.epoch_now()

    def fit_range(self, twin: Limits, bound: list[Fraction], amount: float, now: int) -> tuple[int, int]:
        """Float streams: the earliest and latest instant the script may answer for amount at now."""
        start = max(now, twin.paused_until)
        if start < twin.limited_until and amount > twin.limited_left:
            start = twin.limited_until
        lo = hi = start
        for rate, f, carried in zip(twin.rates, twin.state, bound):
            ready = Fraction(f - (rate.burst_ticks - ticks(amount * rate.ns_per_token)), TICKS_PER_NS)
            lo = max(lo, math.ceil(ready - ROUND))
            hi = max(hi, math.floor(ready + carried + ROUND))
        return lo, hi

    # -- what the script stored --

    def check_stored(self, wrote: bool) -> None:
        """The hash, after a call that wrote it or not, against the twin."""
        client, now = self.client, self.now()
        if self.epoch is None:
            assert client.last_hash == {} and client.last_ttl == NO_HASH
            return
        twin, h = self.twin, client.last_hash
        assert twin is not None and h, f"no hash: {h}, {client.last_reply!r}, PTTL {client.last_ttl}"
        assert int(h["e"]) == self.epoch and h["d"] == self.definition and int(h["n"]) == len(self.rates)
        base = (self.epoch - self.origin) * 1000
        self.script_f = []
        for i, (rate, f, carried) in enumerate(zip(twin.rates, twin.state, self.bound), 1):
            assert float(h[f"t{i}"]) == rate.ns_per_token and float(h[f"b{i}"]) == rate.burst
            assert 0 <= int(h[f"k{i}"]) * TICKS_PER_NS - rate.burst_ticks < TICKS_PER_NS
            self.script_f.append(self.same_instant(f"rate {i}'s F", h[f"f{i}"], base, f,
                                                   Fraction(0) if self.exact else carried))
        if twin.paused_until == NO_PAUSE:
            assert "p" not in h
        else:
            self.same_instant("the pause", h["p"], base, twin.paused_until * TICKS_PER_NS, Fraction(0))
        if twin.limited_until == NO_PAUSE:
            assert "lu" not in h and "ll" not in h
        else:
            self.same_instant("the limit's end", h["lu"], base, twin.limited_until * TICKS_PER_NS, Fraction(0))
            assert float(h["ll"]) == twin.limited_left
        changed = any(rate.ns_per_token != ns_per_token or rate.burst != burst
                      for rate, (ns_per_token, burst, _) in zip(twin.rates, self.rates))
        assert h.get("c", "0") == ("1" if changed else "0")
        if not wrote or changed:  # rates that set_rate changed outlive a full bucket: the hash never expires
            assert client.last_ttl == NO_EXPIRY
            return
        last = max([now, *self.script_f] + [until for until in (twin.paused_until, twin.limited_until)
                                             if until != NO_PAUSE])
        assert client.last_ttl == max(1, -(-(last - now) // 10**6))  # ms: once every rate is full, pause and limit over

    def same_instant(self, what: str, stored: str, base: int, ticks: int, carried: Fraction) -> int:
        """An instant of the hash (stored: ns after the epoch) on the twin's clock, checked against the twin's
        (ticks): later by 0 to carried ns; or, if the twin's lies before the epoch (the epoch moved past it),
        exactly the epoch: the script keeps an instant past at the epoch it moves to, as good as now."""
        ns, now = base + int(stored), self.now()
        if ticks < base * TICKS_PER_NS:
            assert int(stored) == 0 and base <= now, f"{what}: {ns} ns in the script, {ticks} ticks in the twin"
            self.seen["a past instant kept at the epoch"] += 1
        else:
            assert 0 <= ns * TICKS_PER_NS - ticks <= carried * TICKS_PER_NS, (
                f"{what}: {ns} ns in the script, {ticks} ticks in the twin, at most {float(carried)} ns apart")
        return ns

    # -- the calls --

    async def reserve(self, amount: float, wait: int) -> None:
        """Reserves amount if it is granted within wait ns (-1: whenever), on both sides."""
        now = self.now()
        twin, bound = self.candidate(now)
        if amount > twin.max_amount:
            assert twin.fit_at(amount, now) == NEVER
            with pytest.raises(ValueError, match="must not exceed"):
                await self.bound_rates.reserve(amount, wait)
            self.seen["above a burst"] += 1
            self.check_stored(False)
            return
        at_twin = twin.fit_at(amount, now)
        reserved = await self.bound_rates.reserve(amount, wait)
        at = now + int(self.client.last_reply.split()[1])  # the script answers its delay also where it refuses
        if self.exact:
            assert at == at_twin
        else:
            lo, hi = self.fit_range(twin, bound, amount, now)
            assert lo <= at_twin <= hi and lo <= at <= hi
            if wait >= 0 and (at - now <= wait) != (at_twin - now <= wait):
                assert wait - (hi - at_twin) < at_twin - now <= wait + (at_twin - lo)
                self.seen["decisions differ"] += 1
            self.seen["delays differ"] += at != at_twin
        assert (reserved is not None) == (wait < 0 or at - now <= wait)
        if reserved is None:
            self.seen["refused"] += 1
            self.check_stored(False)
            return
        self.seen["granted" if wait < 0 or at - now < wait else "granted at the wait"] += 1
        assert reserved.delay == at - now and reserved.at == self.origin * 1000 + at
        before, bound_before, script_before = list(twin.state), list(bound), list(self.script_f)
        existed = self.epoch is not None
        if not self.exact:
            bound = [self.bound_after_grant(f, carried, at) for f, carried in zip(twin.state, bound)]
        twin.take(amount, at, at)
        self.adopt(twin, bound)
        self.check_stored(True)
        words = [int(word) for word in reserved.record.split()]  # epoch, then each rate's F before and after
        assert self.epoch is not None
        base = (self.epoch - self.origin) * 1000
        assert words[0] == self.epoch and [base + w for w in words[2::2]] == self.script_f
        if self.exact:
            for word, f in zip(words[1::2], before):
                self.same_instant("F before", str(word), base, f, Fraction(0))
        elif existed:
            assert [base + w for w in words[1::2]] == script_before
        self.held.append(Held(reserved.record, self.epoch, before, list(twin.state), bound_before,
                              list(self.script_f)))

    async def reserve_run(self, amount: float, wait: int, then: list[float]) -> None:
        """Exact streams: reserves amount as ``reserve`` does and, if it is due now, each amount of then in
        turn while that is due now too, in one call; the twin takes them one by one."""
        now = self.now()
        twin, bound = self.candidate(now)
        at = twin.fit_at(amount, now)
        head, more = await self.bound_rates.reserve_run(amount, wait, then)
        if wait >= 0 and at - now > wait:
            assert (head, more) == (None, [])
            self.seen["refused"] += 1
            self.check_stored(False)
            return
        assert head is not None and head.delay == at - now and head.at == self.origin * 1000 + at
        taken = []  # each grant's rates' F in the twin before it and after it
        for granted in [amount, *then]:
            if taken and (at != now or twin.fit_at(granted, now) != now):
                break
            before = list(twin.state)
            twin.take(granted, at, at)
            taken.append((before, list(twin.state)))
        assert len(more) == len(taken) - 1, f"{len(more)} more granted, the twin {len(taken) - 1}"
        self.seen["run granted more" if more else "run granted the first only"] += 1
        self.seen["run stopped short"] += len(taken) - 1 < len(then)
        self.adopt(twin, bound)
        self.check_stored(True)
        assert self.epoch is not None
        base = (self.epoch - self.origin) * 1000
        after = list(self.script_f)
        for (before, twin_after), reserved in reversed(list(zip(taken, [head, *more]))):
            words = [int(word) for word in reserved.record.split()]
            assert reserved.delay == at - now and reserved.at == head.at
            assert words[0] == self.epoch and [base + w for w in words[2::2]] == after
            for word, f in zip(words[1::2], before):
                self.same_instant("F before", str(word), base, f, Fraction(0))
            self.held.append(Held(reserved.record, self.epoch, before, twin_after, list(bound), after))
            after = [base + w for w in words[1::2]]

    @staticmethod
    def bound_after_grant(f: int, carried: Fraction, at: int) -> Fraction:
        """A rate's bound after a grant taken as of at, from its F in the twin before (ticks): the twin starts
        from at if full for a whole ns, else from F; the script from max(F, at); and each adds its need."""
        twin_f = Fraction(f, TICKS_PER_NS)
        if f <= (at - 1) * TICKS_PER_NS:
            start = max(twin_f + carried - at, Fraction(0))
        elif twin_f < at:
            start = max(carried, at - twin_f)
        else:
            start = carried
        return start + ROUND

    async def cancel(self, held: Held) -> None:
        """Gives a reservation back, on both sides, and reads the tokens after."""
        now = self.now()
        twin, bound = self.candidate(now)
        same_epoch = held.epoch == self.epoch_now()
        restores = []
        for i, f in enumerate(twin.state):
            script_rule = same_epoch and self.script_f[i] == held.script_after[i]
            twin_rule = same_epoch and f == held.after[i]
            if self.exact or i not in held.changed:
                assert script_rule == twin_rule
            restores.append(script_rule)
        restored = await self.bound_rates.cancel(held.record)
        assert restored == sum(restores)
        held.cancelled = True
        self.seen["cancel across the epoch" if not same_epoch else
                  "cancel restored all" if all(restores) else
                  "cancel restored some" if any(restores) else "cancel restored none"] += 1
        for i, restore in enumerate(restores):
            if restore:
                twin.state[i], bound[i] = held.before[i], held.bound[i]
        if restored:
            self.adopt(twin, bound)
        self.check_stored(restored > 0)
        await self.tokens()

    async def fit(self, amount: float) -> None:
        """The delay until amount fits."""
        now = self.now()
        twin, bound = self.candidate(now)
        if amount > twin.max_amount:
            assert twin.fit_at(amount, now) == NEVER
            with pytest.raises(ValueError, match="must not exceed"):
                await self.bound_rates.fit_delay(amount)
            self.check_stored(False)
            return
        at = now + await self.bound_rates.fit_delay(amount)
        if self.exact:
            assert at == twin.fit_at(amount, now)
        else:
            lo, hi = self.fit_range(twin, bound, amount, now)
            assert lo <= at <= hi
        self.check_stored(False)

    async def tokens(self) -> None:
        """The tokens held now."""
        now = self.now()
        twin, bound = self.candidate(now)
        tokens, expected = await self.bound_rates.tokens(), twin.tokens(now)
        if self.exact:
            assert tokens == expected
        else:
            # per rate, the script holds fewer by its extra debt, at most bound / ns_per_token; float
            # rounding is monotonic, so never more; the slack is that of a few roundings of what is held
            fewer = max(carried / Fraction(rate.ns_per_token) for rate, carried in zip(twin.rates, bound))
            largest = max(rate.burst + abs(f / TICKS_PER_NS - now) / rate.ns_per_token
                          for rate, f in zip(twin.rates, twin.state))
            assert tokens <= expected
            assert expected - tokens <= fewer + 4 * math.ulp(largest)
        self.seen["tokens 0" if tokens == 0 else "tokens"] += 1
        self.check_stored(False)

    async def set_rate(self, index: int, ns_per_token: float, burst: float) -> None:
        """Changes a rate, on both sides."""
        now = self.now()
        twin, bound = self.candidate(now)
        old, f = twin.rates[index], twin.state[index]
        if f > (now + old.burst_ns) * TICKS_PER_NS:
            self.seen["set_rate of a rate in debt"] += 1
        await self.bound_rates.set_rate(index, ns_per_token, burst)
        if not self.exact:
            # the tokens held differ by at most the carried bound's worth of the old rate, in time of the new
            owed = Fraction(f, TICKS_PER_NS) - now
            extra = (max(owed + bound[index], Fraction(0)) - max(owed, Fraction(0))) / Fraction(old.ns_per_token)
            noise = Fraction(1, 2**48) * (Fraction(burst) + Fraction(old.burst) + abs(owed) / Fraction(
                old.ns_per_token)) * Fraction(ns_per_token)  # a few roundings of each double in the conversion
            bound[index] = extra * Fraction(ns_per_token) + 1 + noise
        set_rate_keeping_debt(twin, index, ns_per_token, burst, now)
        if self.exact:  # the script's new F is the twin's rounded up to a whole ns; the stream takes it on
            rounded = ceil_ns(twin.state[index]) * TICKS_PER_NS
            self.seen["set_rate rounded up"] += rounded != twin.state[index]
            twin.state[index] = rounded
        for held in self.held:
            held.changed.add(index)
        self.adopt(twin, bound)
        self.check_stored(True)

    async def pause(self, span: int) -> None:
        """No grant for span ns, on both sides."""
        now = self.now()
        twin, bound = self.candidate(now)
        until = await self.bound_rates.pause(span)
        self.seen["pause moved" if now + span > twin.paused_until else "pause kept"] += 1
        twin.pause_until(now + span)
        assert until == twin.paused_until - now
        self.adopt(twin, bound)
        self.check_stored(True)

    async def limit(self, tokens: float, span: int, slack: int) -> None:
        """At most tokens more before span ns from now (slack as limit_until's), on both sides."""
        now = self.now()
        twin, bound = self.candidate(now)
        await self.bound_rates.limit(tokens, span, slack)
        before = (twin.limited_until, twin.limited_left)
        twin.limit_until(tokens, now + span, slack, now)
        after = (twin.limited_until, twin.limited_left)
        self.seen["limit set" if before[0] != after[0] and after[1] == tokens else
                  "limit tightened" if after != before else "limit kept"] += 1
        self.adopt(twin, bound)
        self.check_stored(True)

    # -- random calls --

    def scale(self) -> float:
        """A span of time that matters to one of the rates, ns."""
        rates = self.twin.rates if self.twin is not None else [Rate(*rate) for rate in self.rates]
        rate = self.rng.choice(rates)
        return rate.ns_per_token * self.rng.choice([0.1, 0.5, 1, 1, 2, rate.burst])

    def step(self) -> int:
        """How far the clock moves before the next call, us."""
        draw = self.rng.random()
        if draw < 0.2:
            return 0
        if draw < 0.35:
            return self.rng.randint(1, 3)
        return int(self.scale() * self.rng.uniform(0, 2)) // 1000

    def amount(self, most: float) -> float:
        """An amount to ask for, sometimes more than most (the smallest burst)."""
        draw = self.rng.random()
        if self.exact:
            whole = max(1, math.floor(most))
            if draw < 0.08:
                return float(whole + 1)
            return float(self.rng.choice([1, 1, 2, whole, self.rng.randint(1, whole)]))
        if draw < 0.08:
            return most * self.rng.uniform(1.0001, 2)
        return self.rng.choice([most, 1.0 if most >= 1 else most, self.rng.uniform(0.001, most),
                                self.rng.uniform(0.001, most)])

    def wait(self, twin: Limits, amount: float, now: int) -> int:
        """A most-wait for a reservation: now only, whenever, near the delay, or any span."""
        at = twin.fit_at(amount, now)
        if at == NEVER or at - now + amount * max(r.ns_per_token for r in twin.rates) > KEEP_BELOW:
            return 0
        return self.rng.choice([0, 0, -1, max(0, at - now + self.rng.choice([-1, 0, 1])),
                                int(self.scale() * self.rng.uniform(0, 3))])

    def new_rate(self, twin: Limits, index: int, now: int) -> tuple[float, float] | None:
        """New parameters for a rate of the stream, another rate of its kind, whose debt in time stays
        below KEEP_BELOW once converted (the tokens it holds are kept, and they can be far below 0:
        reservations ahead take from every rate at their instant); None if none is found."""
        rate, f = twin.rates[index], twin.state[index]
        held = rate.burst - max(0, f / TICKS_PER_NS - now) / rate.ns_per_token
        for _ in range(10):
            ns, burst, _ = (integer_rate if self.exact else float_rate)(self.rng)
            if (burst - min(held, burst)) * ns <= KEEP_BELOW:
                return ns, burst
        return None

    async def call(self) -> None:
        """One random call at the clock's next instant."""
        self.clock.us += self.step()
        now = self.now()
        twin, _ = self.candidate(now)
        draw = self.rng.random()
        open_ = [held for held in self.held if not held.cancelled]
        if draw < 0.4:
            amount = self.amount(twin.max_amount)
            wait = self.wait(twin, amount, now) if amount <= twin.max_amount else 0
            if self.exact and amount <= twin.max_amount and self.rng.random() < 0.4:
                then = [self.amount(twin.max_amount) for _ in range(self.rng.randint(1, 6))]
                self.log.append((self.clock.us, "reserve_run", amount, wait, then))
                await self.reserve_run(amount, wait, then)
                return
            self.log.append((self.clock.us, "reserve", amount, wait))
            await self.reserve(amount, wait)
        elif draw < 0.55 and open_:
            held = self.rng.choice(open_[-4:] if self.rng.random() < 0.7 else open_)
            self.log.append((self.clock.us, "cancel", held.record))
            await self.cancel(held)
        elif draw < 0.67:
            amount = self.amount(twin.max_amount)
            self.log.append((self.clock.us, "fit", amount))
            await self.fit(amount)
        elif draw < 0.82:
            self.log.append((self.clock.us, "tokens"))
            await self.tokens()
        elif draw < 0.92 and (changed := self.new_rate(twin, index := self.rng.randrange(len(self.rates)), now)):
            self.log.append((self.clock.us, "set_rate", index, *changed))
            await self.set_rate(index, *changed)
        elif draw < 0.94:
            span = int(self.scale() * self.rng.uniform(0, 3))
            self.log.append((self.clock.us, "pause", span))
            await self.pause(span)
        else:
            most = max(1, math.floor(twin.max_amount))
            tokens = float(self.rng.choice([0, 1, most, self.rng.randint(0, 2 * most)])) if self.exact else \
                self.rng.uniform(0, 2 * twin.max_amount)
            span = int(self.scale() * self.rng.uniform(0, 4))
            slack = self.rng.choice([0, span // 2, int(self.scale())])
            if twin.limited_until > now and self.rng.random() < 0.5:  # news of the running limit's window
                span, slack = max(0, twin.limited_until - now + self.rng.randint(-2, 2)), 2
            span, slack = min(span, MOST_LIMIT_NS), min(slack, MOST_LIMIT_NS)  # the client refuses any longer
            self.log.append((self.clock.us, "limit", tokens, span, slack))
            await self.limit(tokens, span, slack)


async def run_streams(url: str, seeds: range, make: Callable[[random.Random], list[tuple[float, float, float]]],
                      exact: bool, clock: ClientClock, seen: Counter[str],
                      between: Callable[[Stream], Awaitable[None]] | None = None,
                      scripts: dict[str, _store_redis.Script] = SLOWED_SCRIPTS) -> None:
    """Runs one stream per seed, each on its own key, and says which seed and calls a failure came after."""
    client = Observed.from_url(url)
    assert isinstance(client, Observed)
    try:
        for seed in seeds:
            rng = random.Random(seed)
            clock.us = START_US + rng.randrange(10**12)
            store = RedisStore(client, f"parity-{seed}")
            store._client_clock = True
            store._scripts = scripts
            stream = Stream(rng, make(rng), exact, store, client, clock, seen)
            try:
                for _ in range(STEPS):
                    await stream.call()
                    if between is not None:
                        await between(stream)
            except (AssertionError, LookupError) as error:
                raise AssertionError(f"seed {seed}, rates {stream.rates}, calls (us, ...): {stream.log[-8:]}: "
                                     f"{error}") from error
    finally:
        await client.aclose()


# ---- the streams ----

@pytest.mark.parametrize("first", range(0, 3 * STREAMS, STREAMS))
def test_integer_streams_are_exact(run_on: RunOn[None], redis_url: str, client_clock: ClientClock, first: int) -> None:
    seen: Counter[str] = Counter()
    rates = lambda rng: [integer_rate(rng) for _ in range(rng.randint(1, 4))]  # noqa: E731
    run_on(asyncio.new_event_loop(), run_streams(redis_url, range(first, first + STREAMS), rates, True, client_clock, seen))
    for event in ("granted", "granted at the wait", "refused", "above a burst", "cancel restored all",
                  "cancel restored none", "set_rate of a rate in debt", "set_rate rounded up", "pause moved",
                  "pause kept", "tokens", "tokens 0", "run granted more", "run granted the first only",
                  "run stopped short", "limit set", "limit tightened", "limit kept"):
        assert seen[event] > 0, f"no {event!r} in {dict(seen)}"


@pytest.mark.parametrize("first", range(1000, 1000 + 3 * STREAMS, STREAMS))
def test_float_streams_differ_only_by_rounding(run_on: RunOn[None], redis_url: str, client_clock: ClientClock,
                                               first: int) -> None:
    seen: Counter[str] = Counter()
    rates = lambda rng: [float_rate(rng) for _ in range(rng.randint(1, 4))]  # noqa: E731
    run_on(asyncio.new_event_loop(), run_streams(redis_url, range(first, first + STREAMS), rates, False, client_clock, seen))
    for event in ("granted", "granted at the wait", "refused", "cancel restored all", "delays differ",
                  "set_rate of a rate in debt", "tokens"):
        assert seen[event] > 0, f"no {event!r} in {dict(seen)}"


@pytest.mark.parametrize("scripts", ["as sent", "as on 32 bits"])
def test_the_epoch_moves_and_results_stay_exact(run_on: RunOn[None], redis_url: str, client_clock: ClientClock,
                                                scripts: str) -> None:
    """Also with the integers formatted as a server whose Lua's '%d' has 32 bits would (``%.0f``): the
    instants here are the largest of the streams."""
    assert all(FORMAT_PROBE in script.text for script in SLOWED_SCRIPTS.values())
    seen: Counter[str] = Counter()

    def rates(rng: random.Random) -> list[tuple[float, float, float]]:
        return [slow_rate(rng)] + [integer_rate(rng) for _ in range(rng.randint(0, 2))]

    async def near_the_move(stream: Stream) -> None:  # now and then, the clock jumps to just before it
        if stream.epoch is not None and stream.rng.random() < 0.1:
            stream.clock.us = max(stream.clock.us, stream.epoch + -(-REBASE_AT // 1000) - stream.rng.randint(1, 5))

    run_on(asyncio.new_event_loop(), run_streams(redis_url, range(2000, 2000 + STREAMS), rates, True, client_clock, seen,
                                                 near_the_move,
                                                 SLOWED_SCRIPTS if scripts == "as sent" else AS_ON_32_BITS))
    for event in ("epoch moved", "cancel across the epoch", "granted", "cancel restored all",
                  "a past instant kept at the epoch"):
        assert seen[event] > 0, f"no {event!r} in {dict(seen)}"


# ---- definitions and foreign keys ----

def store_of(url: str, key: str = "quota") -> RedisStore:
    """A store of url on the test's clock."""
    store = RedisStore(url, key)
    store._client_clock = True
    return store


def test_a_definition_mismatch_names_both_rate_sets(run_on: RunOn[None], redis_url: str,
                                                    client_clock: ClientClock) -> None:
    ours, theirs = definition([(1e6, 10.0, 10.0)]), definition([(1e6, 10.0, 10.0), (1e9, 100.0, 0.0)])

    async def main() -> None:
        store = store_of(redis_url)
        try:
            assert await RedisRates(store, ours).pause(10**12) == 10**12  # it expires in 1,000 s
            kept = await store.redis.hgetall(store.redis_key)
            for call in (lambda: RedisRates(store, theirs).reserve(1, -1), lambda: RedisRates(store, theirs).cancel(b"0 0 1"),
                         lambda: RedisRates(store, theirs).fit_delay(1), lambda: RedisRates(store, theirs).tokens(),
                         lambda: RedisRates(store, theirs).set_rate(0, 1e3, 1), lambda: RedisRates(store, theirs).pause(10)):
                with pytest.raises(ValueError) as raised:
                    await call()
                assert f"holds a limiter of {describe(ours)}, not {describe(theirs)}" in str(raised.value)
            assert await store.redis.hgetall(store.redis_key) == kept
        finally:
            await store.redis.aclose()

    run_on(asyncio.new_event_loop(), main())


@pytest.mark.parametrize("kind, value", [
    ("string", "not a hash"),
    ("list", ["a", "b"]),
    ("hash", {"owner": "someone else"}),
    ("hash", {"d": definition([(1e6, 10.0, 10.0)])}),  # ours, but cut short
    ("hash", {"d": "2024-05-01"}),  # a field d of someone else's
    ("hash", {"d": "0,1,1"}),
])
def test_a_key_of_something_else_is_corrupt(run_on: RunOn[None], redis_url: str, client_clock: ClientClock, kind: str,
                                            value: Any) -> None:
    ours = definition([(1e6, 10.0, 10.0)])

    async def main() -> None:
        store = store_of(redis_url)
        client = store.redis
        try:
            if kind == "string":
                await client.set(store.redis_key, value)
            elif kind == "list":
                await client.rpush(store.redis_key, *value)
            else:
                await client.hset(store.redis_key, mapping=value)
            dumped = await client.dump(store.redis_key)
            for call in (lambda: RedisRates(store, ours).reserve(1, -1), lambda: RedisRates(store, ours).cancel(b"0 0 1"),
                         lambda: RedisRates(store, ours).fit_delay(1), lambda: RedisRates(store, ours).tokens(),
                         lambda: RedisRates(store, ours).set_rate(0, 1e3, 1), lambda: RedisRates(store, ours).pause(10)):
                with pytest.raises(aiotb.StoreCorrupt, match=re.escape(store.redis_key)):
                    await call()
            assert await client.dump(store.redis_key) == dumped
        finally:
            await client.aclose()

    run_on(asyncio.new_event_loop(), main())
