"""Costs known after the fact: ``settle``, ``asettle`` and ``Slot.settle`` on both engines (virtual time): less
given back, more taken as debt that delays later grants, on every rate, a window and a ``limit_until`` count;
bad input refused with the limiter left as it was."""

from __future__ import annotations

import asyncio
import math
import random
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar

import pytest
from test_scenarios import ns

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]


def state(limiter: Any) -> tuple[Any, ...]:
    """What a refused call must leave as it was: tokens, statistics, waiters (the clock stands still)."""
    return limiter.tokens, limiter.stats(), limiter._next_due()


@pytest.mark.parametrize("seed", range(12))
def test_the_amounts_known_at_each_grant_stay_within_burst_plus_rate_times_t(lib: SimpleNamespace, vrun: Run[Any],
                                                                             seed: int) -> None:
    """Estimated grants, settled later for less or more: at each grant, the tokens of every grant so far, counted
    as settled where they were settled by then and as estimated where not yet, are within burst + rate * t."""
    rng = random.Random(seed)
    rate, burst = rng.choice([(10.0, 10.0), (100.0, 5.0), (3.0, 20.0)])

    async def main() -> list[tuple[int, float]]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(rate, 1, burst=burst)
        estimates: list[float] = []  # of each grant, in order
        known: list[float] = []  # what each grant is known to cost now
        unsettled: list[int] = []
        checked: list[tuple[int, float]] = []
        for _ in range(150):
            choice = rng.random()
            if choice < 0.5:
                amount = rng.choice([1.0, 2.5, burst / 2, burst])
                await limiter.acquire(amount)
                estimates.append(amount)
                known.append(amount)
                unsettled.append(len(known) - 1)
                checked.append((ns(loop.time()), math.fsum(known)))
            elif choice < 0.85 and unsettled:
                grant = unsettled.pop(rng.randrange(len(unsettled)))
                used = rng.choice([0.0, estimates[grant] / 3, estimates[grant] * 2, burst * 1.5, rng.uniform(0, burst)])
                limiter.settle(estimates[grant], used)
                known[grant] = used
            else:
                await asyncio.sleep(rng.choice([0.0, 0.01, 0.3, 2.0]))
        return checked

    checked = vrun(main())
    assert len(checked) > 40
    for t, total in checked:
        assert total <= burst + rate * t / 1e9 + 1e-9, (t, total)


def test_debt_delays_the_next_waiter_by_exactly_the_debt_over_the_rate(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=10)  # a token every 0.1 s
        await limiter.acquire(10)
        waiter = asyncio.ensure_future(limiter.acquire(1))  # due at 0.1 s
        await asyncio.sleep(0.05)
        assert not waiter.done()
        limiter.settle(10, 15)  # 5 more than taken: 0.5 s of debt
        await waiter
        return ns(loop.time())

    assert vrun(main()) == ns(0.6)


def test_a_change_of_rate_keeps_the_debt_owed_at_the_new_rate(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    """set_rate after a debt (an AdaptiveLimiter's step, say) forgives none of it: 5 tokens owed at 10/s, 2.5 of
    them left at 0.25 s, paid at 5/s from then (0.5 s), then a token (0.2 s): granted at 0.95 s."""
    async def main() -> int:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=10)
        await limiter.acquire(10)
        limiter.settle(10, 15)  # 0.5 s of debt at 10/s
        await asyncio.sleep(0.25)
        limiter.set_rate(5)
        assert limiter.tokens == 0
        await limiter.acquire(1)  # the 2.5 owed, then 1 token: 0.7 s at 5/s
        return ns(loop.time())

    assert vrun(main()) == ns(0.95)


def test_the_engine_says_what_its_rates_owe_now_and_ahead(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    """What a lease holder tells its key: 5 tokens owed at 10/s, 3 of them 0.2 s later, none from 0.5 s on."""
    async def main() -> None:
        limiter = lib.Limiter(10, 1, burst=10)
        assert limiter._owed(0) == 0
        await limiter.acquire(10)
        limiter.settle(10, 15)
        assert limiter._owed(0) == pytest.approx(5) and limiter._owed(0.2) == pytest.approx(3)
        assert limiter._owed(0.5) == 0 == limiter._owed(100)
        for ahead in (-1, math.nan, 2e6):
            with pytest.raises(ValueError, match="ahead must be from 0 to 1000000 s"):
                limiter._owed(ahead)

    vrun(main())


def test_a_timer_aimed_before_the_debt_fires_early_and_aims_again(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    """The engine takes the debt with no pass of the dispatcher after it: the timer armed for the waiter's old due
    time fires first, finds nothing due, and waits for the new one."""

    async def main() -> tuple[list[int], float]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=10)
        await limiter.acquire(10)
        instants: list[int] = []

        async def one() -> None:
            await limiter.acquire(1)
            instants.append(ns(loop.time()))

        tasks = [asyncio.ensure_future(one()) for _ in range(2)]
        await asyncio.sleep(0.05)
        limiter._settle_cost(10.0, 13.0, False)  # 0.3 s of debt, the timer left at 0.1 s
        await asyncio.sleep(0.1)  # past the old due time
        early = len(instants)
        await asyncio.gather(*tasks)
        return instants, early

    instants, early = vrun(main())
    assert early == 0
    assert instants == [ns(0.4), ns(0.5)]


def test_a_refund_lets_the_next_waiter_in_earlier_by_exactly_the_refund(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=10)
        await limiter.acquire(10)
        waiter = asyncio.ensure_future(limiter.acquire(10))  # due at 1.0 s
        await asyncio.sleep(0)
        limiter.settle(10, 7)  # 3 given back: 0.3 s sooner
        await waiter
        return ns(loop.time())

    assert vrun(main()) == ns(0.7)


def test_a_refund_never_fills_a_rate_beyond_its_burst(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> list[float]:
        limiter = lib.Limiter(10, 1, burst=10)
        await limiter.acquire(4)
        await asyncio.sleep(1)  # full again
        limiter.settle(4, 0)
        full = limiter.tokens
        await limiter.acquire(10)
        return [full, limiter.tokens]

    assert vrun(main()) == [10, 0]


def test_every_rate_takes_or_gives_back_the_difference(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[list[int], float]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(rates=[(10, 1, 10), (60, 60, 30)])  # 10/s of 10, 1/s of 30
        await limiter.acquire(10)
        limiter.settle(10, 14)  # the first owes 4 (0.4 s), the second holds 16
        instants = []
        for _ in range(2):
            await limiter.acquire(10)
            instants.append(ns(loop.time()))
        # the first: 1.4 s; the second then holds 6 + 1.4, and needs 2.6 s more for the next 10
        fresh = lib.Limiter(rates=[(10, 1, 10), (60, 60, 30)])
        await fresh.acquire(10)
        fresh.settle(10, 4)  # the first holds 6, the second 26
        return instants, fresh.tokens

    instants, tokens = vrun(main())
    assert instants == [ns(1.4), ns(4.0)]
    assert tokens == 6


def test_a_window_logs_the_debt_now_and_shrinks_the_grant_for_a_refund(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[list[float], list[int]]:
        loop = asyncio.get_running_loop()
        limiter = lib.WindowLimiter(10, 1)
        seen = []
        await limiter.acquire(10)
        limiter.settle(10, 4)  # the grant at 0 counts 4
        seen.append(limiter.tokens)
        await asyncio.sleep(0.5)
        await limiter.acquire(6)
        limiter.settle(6, 9)  # 3 more, logged at 0.5 s: 13 in the window
        seen.append(limiter.tokens)
        instants = []
        for amount in (1, 2):  # 1 once the 4 leave at 1 s; 2 more once the 6 and 3 leave at 1.5 s
            await limiter.acquire(amount)
            instants.append(ns(loop.time()))
        return seen, instants

    seen, instants = vrun(main())
    assert seen == [6, 0]
    assert instants == [ns(1.0), ns(1.5)]


def test_a_slot_settles_its_grant_and_a_window_holds_what_it_cost(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> list[Any]:
        limiter = lib.WindowLimiter(10, 1)
        seen: list[Any] = []
        async with limiter.slot(5) as slot:
            seen.append(slot.held)
            slot.settle(2)
            seen.append(limiter.tokens)
            await asyncio.sleep(0.5)
        seen.append(limiter.tokens)  # the 2 logged at the exit, 0.5 s
        await asyncio.sleep(0.99)
        seen.append(limiter.tokens)
        await asyncio.sleep(0.01)
        seen.append(limiter.tokens)
        bucket = lib.Limiter(10, 1, burst=10)
        async with bucket.slot(4) as slot:
            slot.settle(9)
        seen.append(bucket.tokens)
        async with limiter.slot(3) as slot:
            slot.settle(0)  # cost nothing: nothing logged at its exit
        seen.append(limiter.tokens)
        return seen

    assert vrun(main()) == [True, 8, 8, 8, 10, 1, 10]


def test_a_slot_is_settled_once_and_only_once_entered(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> list[str]:
        limiter = lib.Limiter(10, 1, burst=10)
        errors = []
        never = limiter.slot(2)
        before = state(limiter)
        with pytest.raises(RuntimeError, match="never entered") as caught:
            never.settle(1)
        errors.append(str(caught.value))
        assert state(limiter) == before
        async with limiter.slot(2) as slot:
            assert isinstance(slot, lib.package.Slot)
            slot.settle(1)
            before = state(limiter)
            with pytest.raises(RuntimeError, match="once only"):
                slot.settle(1)
            assert state(limiter) == before
        return errors

    assert vrun(main())


def test_a_limit_until_count_loses_the_debt_and_gains_no_refund(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> list[float]:
        limiter = lib.Limiter(100, 1, burst=10)
        limiter.limit_until(5, 10.0)
        seen = []
        await limiter.acquire(2)
        limiter.settle(2, 4)
        seen.append(limiter.tokens)  # 5 - 4
        limiter.settle(1, 3)  # 2 more than 1 left: none left
        seen.append(limiter.tokens)
        limiter.settle(4, 0)  # the rates get it back, the count does not
        seen.append(limiter.tokens)
        return seen

    assert vrun(main()) == [1, 0, 0]


def test_asettle_settles_in_process(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> float:
        limiter = lib.Limiter(10, 1, burst=10)
        await limiter.acquire(10)
        await limiter.asettle(10, 3)
        return float(limiter.tokens)

    assert vrun(main()) == 7


BAD = [
    ("taken", -1, 1, ValueError), ("taken", 0, 1, ValueError), ("taken", math.nan, 1, ValueError),
    ("taken", math.inf, 1, ValueError), ("taken", True, 1, TypeError), ("taken", "2", 1, TypeError),
    ("taken", 11, 1, ValueError),  # above the burst: no grant ever took it
    ("used", 2, -1, ValueError), ("used", 2, math.nan, ValueError), ("used", 2, math.inf, ValueError),
    ("used", 2, False, TypeError), ("used", 2, "1", TypeError), ("used", 2, None, TypeError),
    ("used", 2, 1e18, ValueError),  # a debt of more than the engine's 9 years
]


@pytest.mark.parametrize(("name", "taken", "used", "error"), BAD, ids=[f"{b[0]}={b[1 if b[0] == 'taken' else 2]!r}"
                                                                       for b in BAD])
def test_bad_input_is_refused_naming_it_and_changes_nothing(lib: SimpleNamespace, vrun: Run[Any], name: str,
                                                            taken: Any, used: Any, error: type[Exception]) -> None:
    async def main() -> None:
        limiter = lib.Limiter(1, 1, burst=10)  # a token a second: 1e18 of them is past the engine's range
        await limiter.acquire(2)
        waiter = asyncio.ensure_future(limiter.acquire(10))
        await asyncio.sleep(0)
        before = state(limiter)
        with pytest.raises(error, match=name) as caught:
            limiter.settle(taken, used)
        assert state(limiter) == before
        assert repr(taken if name == "taken" else used) in str(caught.value)
        async with limiter.slot(1) as slot:  # a slot's settle checks used the same way
            inside = state(limiter)
            if name == "used":
                with pytest.raises(error, match=name):
                    slot.settle(used)
                assert state(limiter) == inside
        waiter.cancel()

    vrun(main())


def test_debts_that_would_add_up_past_the_engine_range_are_refused(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> list[float]:
        limiter = lib.Limiter(1, 1, burst=10)
        await limiter.acquire(1)
        limiter.settle(1, 2e8)  # about 6.3 years of debt: within range
        before = state(limiter)
        with pytest.raises(ValueError, match="used is beyond the engine's range"):
            limiter.settle(1, 2e8)
        assert state(limiter) == before
        return [limiter.tokens, limiter.stats().granted_tokens]

    assert vrun(main()) == [0, 2e8]


def test_a_debt_fails_the_waiters_it_strands_past_their_timeout(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[str, int, int]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=10)
        await limiter.acquire(10)
        timed = asyncio.ensure_future(limiter.acquire(1, timeout=0.5))  # due at 0.1 s, within its timeout
        patient = asyncio.ensure_future(limiter.acquire(1))
        await asyncio.sleep(0)
        limiter.settle(10, 15)  # due at 0.6 s now: past the timeout
        with pytest.raises(TimeoutError) as failed:
            await timed
        when_failed = ns(loop.time())
        await patient
        return str(failed.value), when_failed, ns(loop.time())

    message, when_failed, granted = vrun(main())
    assert "within its timeout" in message and when_failed == 0
    assert granted == ns(0.6)  # the failed waiter's place given up: the next one is due after the debt alone


def test_on_a_real_loop_a_waiter_is_not_granted_before_its_debt_is_paid(lib: SimpleNamespace, run: Run[Any]) -> None:
    """The timer of a real loop (the precise one, for a bucket this fast) aimed before a debt the dispatcher was not
    told of fires early, and the waiter is granted only once the debt is refilled."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(100, 1, burst=1)  # a token every 10 ms
        await limiter.acquire()
        start = loop.time()
        waiter = asyncio.ensure_future(limiter.acquire())  # due 10 ms from the grant
        await asyncio.sleep(0)
        limiter._settle_cost(1.0, 4.0, False)  # 30 ms of debt, the timer left where it was
        await waiter
        return loop.time() - start

    assert run(main()) >= 0.04 - 0.001  # the clock read just after the grant: up to a ms of it passed before
