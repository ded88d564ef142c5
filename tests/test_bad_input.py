"""Bad input, table-driven: every public parameter and method, on both engines.

For each parameter the table gives, value by value, the exact exception type and a message
that names the parameter (and shows the value), or ``OK`` for values that are valid. A
rejected call must change nothing: the limiter's tokens, its queue and the schedule of the
waiter already queued are checked before and after, to the nanosecond on a virtual clock.

``tests/test_api.py`` has smaller tables for the same checks; these cover every parameter
with every kind of value (NaN, infinities, zero, negatives, bools, str, None, 1e308, 1e-308,
an int beyond any float, amounts above burst)."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from test_scenarios import ns

OK = "ok"
NAN, INF = math.nan, math.inf
BIG_INT = 10**400  # a real number no float can hold: it counts as an infinity
VALUES: dict[str, Any] = {
    "nan": NAN, "inf": INF, "-inf": -INF, "zero": 0, "-1": -1, "-0.5": -0.5, "True": True, "False": False,
    "str": "1", "None": None, "1e308": 1e308, "1e-308": 1e-308, "10**400": BIG_INT,
}
BIG_REPR = re.escape(repr(BIG_INT)[:40])


def positive(name: str) -> dict[str, Any]:
    """The outcomes for a parameter that must be a finite number > 0."""
    not_positive = (ValueError, rf"^{name} must be finite and > 0, got ")
    not_number = (TypeError, rf"^{name} must be a real number, got ")
    return {
        "nan": (ValueError, rf"^{name} must be finite and > 0, got nan$"),
        "inf": (ValueError, rf"^{name} must be finite and > 0, got inf$"),
        "-inf": (ValueError, rf"^{name} must be finite and > 0, got -inf$"),
        "zero": (ValueError, rf"^{name} must be finite and > 0, got 0$"),
        "-1": (ValueError, rf"^{name} must be finite and > 0, got -1$"),
        "-0.5": (ValueError, rf"^{name} must be finite and > 0, got -0.5$"),
        "True": (TypeError, rf"^{name} must be a real number, got True$"),
        "False": (TypeError, rf"^{name} must be a real number, got False$"),
        "str": (TypeError, rf"^{name} must be a real number, got '1'$"),
        "None": not_number,
        "10**400": (not_positive[0], not_positive[1] + BIG_REPR),
    }


# ---- constructors: Limiter(max_rate, time_period=60, *, burst=None, initial=None, fair=True) ----

LIMITER_ARGS = {"max_rate": 10, "time_period": 1, "burst": None, "initial": None, "fair": True}
CONSTRUCTOR_TABLE: dict[str, dict[str, Any]] = {
    "max_rate": positive("max_rate") | {
        "1e308": (ValueError, r"^burst must be at most 2\*\*50, so that an amount of 1 counts exactly, got 1e\+308$"),
        "1e-308": (ValueError, r"^max_rate / time_period is out of range: 1e-308 / 1$"),
    },
    "time_period": positive("time_period") | {  # None is no default, as for aiolimiter: 60 s is the default
        "1e308": (ValueError, r"^max_rate / time_period is out of range: 10 / 1e\+308$"),
        "1e-308": OK,  # 10 tokens per 1e-308 s: the bucket refills within a nanosecond
    },
    "burst": positive("burst") | {
        "None": OK,  # the default: max_rate
        "1e308": (ValueError, r"^burst 1e\+308 would take over 9 years to refill at 10 per 1 s$"),
        "1e-308": (ValueError, r"^burst must be >= 1, the default amount, got 1e-308$"),
    },
    "initial": {
        "nan": (ValueError, r"^initial must be between 0 and burst \(10\.0\), got nan$"),
        "inf": (ValueError, r"^initial must be between 0 and burst \(10\.0\), got inf$"),
        "-inf": (ValueError, r"^initial must be between 0 and burst \(10\.0\), got -inf$"),
        "zero": OK,
        "-1": (ValueError, r"^initial must be between 0 and burst \(10\.0\), got -1$"),
        "-0.5": (ValueError, r"^initial must be between 0 and burst \(10\.0\), got -0.5$"),
        "True": (TypeError, r"^initial must be a real number, got True$"),
        "False": (TypeError, r"^initial must be a real number, got False$"),
        "str": (TypeError, r"^initial must be a real number, got '1'$"),
        "None": OK,  # the default: burst
        "1e308": (ValueError, r"^initial must be between 0 and burst \(10\.0\), got 1e\+308$"),
        "1e-308": OK,
        "10**400": (ValueError, r"^initial must be between 0 and burst \(10\.0\), got " + BIG_REPR),
    },
    "fair": {key: (TypeError, rf"^fair must be a bool, got {re.escape(repr(value))}") for key, value in VALUES.items()
             if key not in ("True", "False")} | {"True": OK, "False": OK},
}
ASYNC_LIMITER_TABLE = {"max_rate": CONSTRUCTOR_TABLE["max_rate"], "time_period": CONSTRUCTOR_TABLE["time_period"]}


def table(tables: dict[str, dict[str, Any]]) -> list[Any]:
    cases = []
    for name, outcomes in tables.items():
        assert set(outcomes) == set(VALUES), f"{name}: the table must give every value an outcome"
        cases += [pytest.param(name, key, outcomes[key], id=f"{name}={key}") for key in VALUES]
    return cases


def check(call: Callable[[], Any], outcome: Any) -> Any:
    """Runs call; it must raise exactly outcome's type with a matching message, or return (OK)."""
    if outcome == OK:
        return call()
    error, pattern = outcome
    with pytest.raises(Exception) as caught:
        call()
    assert type(caught.value) is error, f"{type(caught.value).__name__}: {caught.value}"
    assert re.search(pattern, str(caught.value)), str(caught.value)
    return None


@pytest.mark.parametrize("name, key, outcome", table(CONSTRUCTOR_TABLE))
def test_limiter_constructor(lib, vrun, name, key, outcome):
    args = dict(LIMITER_ARGS, **{name: VALUES[key]})
    limiter = check(lambda: lib.Limiter(args.pop("max_rate"), args.pop("time_period"), **args), outcome)
    if limiter is not None:
        value = VALUES[key]
        attribute = {"max_rate": limiter.max_rate, "time_period": limiter.time_period, "burst": limiter.burst,
                     "fair": limiter.fair, "initial": None}[name]
        if name != "initial" and value is not None:
            assert attribute == value
        tokens = vrun(_tokens(limiter))
        expected = value if name == "initial" and value is not None else limiter.burst
        assert abs(tokens - expected) <= 1e-12 * limiter.burst


async def _tokens(limiter: Any) -> float:
    return limiter.tokens


@pytest.mark.parametrize("name, key, outcome", table(ASYNC_LIMITER_TABLE))
def test_async_limiter_constructor(lib, name, key, outcome):
    args = {"max_rate": 10, "time_period": 1, name: VALUES[key]}
    limiter = check(lambda: lib.AsyncLimiter(args["max_rate"], args["time_period"]), outcome)
    if limiter is not None:
        assert (limiter.max_rate, limiter.time_period) == (args["max_rate"], args["time_period"])
        assert limiter.burst == limiter.max_rate  # aiolimiter's capacity


@pytest.mark.parametrize("name, key, outcome", table(CONSTRUCTOR_TABLE))
def test_keyed_limiter_constructor_checks_its_options_at_once(lib, name, key, outcome):
    args = dict(LIMITER_ARGS, **{name: VALUES[key]})
    check(lambda: lib.KeyedLimiter(args.pop("max_rate"), args.pop("time_period"), **args), outcome)


NO_PERIOD = (TypeError, r"^time_period must be a real number, got None$")
RATES_IN_PLACE = (TypeError, r"^rates= takes the place of max_rate, time_period, burst and initial$")


@pytest.mark.parametrize("make, outcome", [
    (lambda lib: lib.Limiter(10, None), NO_PERIOD),
    (lambda lib: lib.Limiter(10, time_period=None, burst=5), NO_PERIOD),
    (lambda lib: lib.WindowLimiter(10, None), NO_PERIOD),
    (lambda lib: lib.KeyedLimiter(10, None), NO_PERIOD),
    (lambda lib: lib.Limiter(rates=[(10, None)]), (TypeError, r"^rates\[0\] time_period must be a real number, got None$")),
    (lambda lib: lib.Limiter(rates=[(10, 1)], time_period=None), RATES_IN_PLACE),
    (lambda lib: lib.Limiter(rates=[(10, 1)], time_period=2), RATES_IN_PLACE),
], ids=["Limiter", "Limiter-keyword", "WindowLimiter", "KeyedLimiter", "rates", "rates-and-None", "rates-and-2"])
def test_time_period_none_is_no_default(lib, make, outcome):
    check(lambda: make(lib), outcome)


def test_time_period_left_out_is_60_s(lib):
    assert lib.Limiter(10).time_period == lib.WindowLimiter(10).time_period == lib.AsyncLimiter(10).time_period == 60
    assert lib.Limiter(rates=[(10, 1), (100, 60)]).rates == ((10, 1, 10), (100, 60, 100))


@pytest.mark.parametrize("store", ["redis", "redis lease", "redis window", "shared memory"])
def test_time_period_none_is_no_default_over_a_store(lib, request, store):
    package = lib.package
    if store == "shared memory":
        if lib.name != "c":
            pytest.skip("a SharedMemoryStore needs the C engine (test_only_the_c_engine_shares_a_store)")
        import uuid

        shared = package.SharedMemoryStore(f"aiotb-test-{uuid.uuid4().hex[:16]}")
        try:
            check(lambda: lib.Limiter(10, None, store=shared), NO_PERIOD)
        finally:
            shared.unlink(shared.name)
        return
    url = request.getfixturevalue("redis_url")
    over = package.RedisStore(url, "k", lease=1.0 if store == "redis lease" else None)
    kind = lib.WindowLimiter if store == "redis window" else lib.Limiter
    check(lambda: kind(10, None, store=over), NO_PERIOD)


def test_constructors_reject_unknown_and_extra_arguments(lib):
    with pytest.raises(TypeError):
        lib.Limiter(10, 1, 5)  # burst is keyword-only
    with pytest.raises(TypeError):
        lib.Limiter(10, 1, rate=5)
    with pytest.raises(TypeError):
        lib.Limiter()
    with pytest.raises(TypeError):
        lib.AsyncLimiter(10, 1, burst=5)  # aiolimiter's signature: (max_rate, time_period=60)


# ---- methods: acquire(amount=1, timeout=None), try_acquire(amount=1), has_capacity(amount=1) ----

AMOUNT_TABLE: dict[str, Any] = {
    "nan": (ValueError, r"^amount must be finite and > 0, got nan$"),
    "inf": (ValueError, r"^amount must not exceed burst \(10\.0\), got inf$"),
    "-inf": (ValueError, r"^amount must be finite and > 0, got -inf$"),
    "zero": (ValueError, r"^amount must be finite and > 0, got 0$"),
    "-1": (ValueError, r"^amount must be finite and > 0, got -1$"),
    "-0.5": (ValueError, r"^amount must be finite and > 0, got -0.5$"),
    "True": (TypeError, r"^amount must be a real number, got True$"),
    "False": (TypeError, r"^amount must be a real number, got False$"),
    "str": (TypeError, r"^amount must be a real number, got '1'$"),
    "None": (TypeError, r"^amount must be a real number, got None$"),
    "1e308": (ValueError, r"^amount must not exceed burst \(10\.0\), got 1e\+308$"),
    "1e-308": (ValueError, r"^amount must be at least burst / 2\*\*50 to be counted exactly, got 1e-308$"),
    "10**400": (ValueError, r"^amount must not exceed burst \(10\.0\), got " + BIG_REPR),
    "11": (ValueError, r"^amount must not exceed burst \(10\.0\), got 11$"),  # above burst
}
AMOUNTS = dict(VALUES, **{"11": 11})
# AsyncLimiter keeps aiolimiter 1.3.0's words for amounts above capacity (they do not name the
# parameter: aiolimiter's users match on them), and its has_capacity answers False there; in its
# acquire and has_capacity, as in aiolimiter's, the same words for amounts below 0, and 0 goes through.
CAPACITY = (ValueError, r"^Amount must be a number between 0 and the maximum capacity$")
ABOVE_CAPACITY = ("inf", "1e308", "10**400", "11")
BELOW_ZERO = ("nan", "-inf", "-1", "-0.5")
ASYNC_AMOUNT_TABLE = dict(AMOUNT_TABLE, **{key: CAPACITY for key in ABOVE_CAPACITY})
AIOLIMITER_AMOUNT_TABLE = dict(ASYNC_AMOUNT_TABLE, **{key: CAPACITY for key in BELOW_ZERO})

TIMEOUT_TABLE: dict[str, Any] = {
    "nan": (ValueError, r"^timeout must be None or >= 0, got nan$"),
    "inf": OK,  # no deadline
    "-inf": (ValueError, r"^timeout must be None or >= 0, got -inf$"),
    "zero": OK,  # now or never
    "-1": (ValueError, r"^timeout must be None or >= 0, got -1$"),
    "-0.5": (ValueError, r"^timeout must be None or >= 0, got -0.5$"),
    "True": (TypeError, r"^timeout must be a real number, got True$"),
    "False": (TypeError, r"^timeout must be a real number, got False$"),
    "str": (TypeError, r"^timeout must be a real number, got '1'$"),
    "None": OK,
    "1e308": OK,
    "1e-308": OK,
    "10**400": OK,
}


async def _unchanged_by(limiter: Any, bad_call: Callable[[], Any], outcome: Any) -> None:
    """With 5 tokens left at 10 per second and a waiter for 8 queued (granted at 0.3 s), makes
    the call at 0.1 s: the tokens and the queue must be as before, and the waiter still granted
    at exactly 0.3 s with nothing left over."""
    loop = asyncio.get_running_loop()
    granted_at: list[int] = []

    async def waiter() -> None:
        await limiter.acquire(8)
        granted_at.append(ns(loop.time()))

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0.1)
    before = (limiter.tokens, limiter.waiting)
    assert before == (6.0, 1)
    check(bad_call, outcome)
    assert (limiter.tokens, limiter.waiting) == before
    await task
    assert granted_at == [ns(0.3)]
    assert (limiter.tokens, limiter.waiting) == (0.0, 0)


def _limiter_with_five(lib: Any, kind: str) -> Any:
    if kind == "Limiter":
        return lib.Limiter(10, 1, initial=5)
    limiter = lib.AsyncLimiter(10, 1)  # starts full: take 5 at the first reading of the clock
    assert limiter.try_acquire(5)
    return limiter


def _amount_cases() -> list[Any]:
    cases = []
    for kind, outcomes in (("Limiter", AMOUNT_TABLE), ("AsyncLimiter", ASYNC_AMOUNT_TABLE)):
        for method in ("acquire", "try_acquire", "has_capacity"):
            for form in ("positional", "keyword"):
                for key in AMOUNTS:
                    aiolimiters = kind == "AsyncLimiter" and method != "try_acquire"  # in aiolimiter's API
                    outcome = AIOLIMITER_AMOUNT_TABLE[key] if aiolimiters else outcomes[key]
                    if aiolimiters and method == "has_capacity" and key in ABOVE_CAPACITY:
                        outcome = "False"
                    if aiolimiters and key == "zero":
                        outcome = "True" if method == "has_capacity" else "at once"
                    cases.append(pytest.param(kind, method, form, key, outcome, id=f"{kind}.{method}-{form}-{key}"))
    return cases


@pytest.mark.parametrize("kind, method, form, key, outcome", _amount_cases())
def test_bad_amount_changes_nothing(lib, vrun, request, kind, method, form, key, outcome):

    async def main() -> None:
        limiter = _limiter_with_five(lib, kind)
        value = AMOUNTS[key]
        call = getattr(limiter, method)

        def bad_call() -> Any:
            result = call(value) if form == "positional" else call(amount=value)
            if outcome in ("False", "True"):
                assert result is (outcome == "True")
            if outcome == "at once":  # done on its first step, taking nothing
                with pytest.raises(StopIteration):
                    result.send(None)
            return result

        await _unchanged_by(limiter, bad_call, OK if outcome in ("False", "True", "at once") else outcome)

    vrun(main())


def _timeout_cases() -> list[Any]:
    return [pytest.param(kind, key, outcomes[key], id=f"{kind}-{key}")
            for kind, outcomes in (("Limiter", TIMEOUT_TABLE), ("AsyncLimiter", TIMEOUT_TABLE))
            for key in VALUES]


@pytest.mark.parametrize("kind, key, outcome", _timeout_cases())
def test_bad_timeout_changes_nothing(lib, vrun, kind, key, outcome):
    async def main() -> None:
        limiter = _limiter_with_five(lib, kind)
        # acquire() checks its arguments when called: the bad call is the call, never awaited
        await _unchanged_by(limiter, lambda: limiter.acquire(1, timeout=VALUES[key]).close(), outcome)

    vrun(main())


@pytest.mark.parametrize("key", [key for key, outcome in TIMEOUT_TABLE.items() if outcome == OK])
def test_valid_timeouts_behind_a_waiter(lib, vrun, key):
    """The valid timeouts, used: behind the waiter granted at 0.3 s, one more token comes at
    0.4 s. A timeout shorter than that is refused at once and takes nothing; the others wait."""

    async def main() -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, initial=5)
        first = asyncio.create_task(limiter.acquire(8))
        await asyncio.sleep(0)
        try:
            await limiter.acquire(1, timeout=VALUES[key])
            outcome = "granted"
        except TimeoutError:
            outcome = "refused"
        at = ns(loop.time())
        await first
        return outcome, at

    expected = ("refused", 0) if key in ("zero", "1e-308") else ("granted", ns(0.4))
    assert vrun(main()) == expected


@pytest.mark.parametrize("kind", ["Limiter", "AsyncLimiter"])
def test_the_amount_is_checked_before_the_timeout(lib, kind):
    limiter = lib.Limiter(10, 1) if kind == "Limiter" else lib.AsyncLimiter(10, 1)
    error, message = AMOUNT_TABLE["nan"] if kind == "Limiter" else CAPACITY
    with pytest.raises(error, match=message):
        limiter.acquire(NAN, timeout="soon")


def test_methods_reject_extra_and_unknown_arguments(lib, vrun):
    async def main() -> tuple[float, int]:
        limiter = lib.Limiter(10, 1, initial=5)
        for call in (lambda: limiter.acquire(1, 1, 1), lambda: limiter.acquire(count=1),
                     lambda: limiter.acquire(1, amount=1), lambda: limiter.try_acquire(1, 1),
                     lambda: limiter.try_acquire(timeout=1), lambda: limiter.has_capacity(1, 1),
                     lambda: limiter.has_capacity(amounts=1)):
            with pytest.raises(TypeError):
                call()
        return limiter.tokens, limiter.waiting

    assert vrun(main()) == (5.0, 0)


# ---- the decorator's amount and KeyedLimiter.acquire: the same checks, naming the same parameters ----

@pytest.mark.parametrize("key", list(AMOUNTS))
def test_decorator_amount_is_checked_when_decorating(lib, vrun, key):
    async def main() -> None:
        limiter = lib.Limiter(10, 1, initial=5)
        check(lambda: limiter.limit(amount=AMOUNTS[key]), AMOUNT_TABLE[key])
        assert (limiter.tokens, limiter.waiting) == (5.0, 0)

    vrun(main())


@pytest.mark.parametrize("key", list(AMOUNTS))
def test_keyed_acquire_amount(lib, vrun, key):
    async def main() -> None:
        keyed = lib.KeyedLimiter(10, 1, initial=5)
        check(lambda: keyed.acquire("user", AMOUNTS[key]), AMOUNT_TABLE[key])
        assert keyed["user"].tokens == 5.0 and keyed["user"].waiting == 0

    vrun(main())


# ---- extreme but valid parameters ----

def test_long_queue_at_a_slow_rate_still_refuses_a_timeout_it_cannot_meet(lib, vrun):
    """One token a year, 300 waiters: the 301st would be granted in about 300 years, beyond the
    range of int64 nanoseconds. A timeout of 1 s must be refused at once (the C core once
    overflowed there and queued the waiter with a promise it could not keep)."""

    async def main() -> tuple[str, int]:
        limiter = lib.Limiter(1, 365 * 86400)
        waiters = [asyncio.create_task(limiter.acquire()) for _ in range(301)]
        await asyncio.sleep(0)
        try:
            await asyncio.wait_for(limiter.acquire(1, timeout=1), 10)
            outcome = "granted"
        except TimeoutError:
            outcome = "refused" if limiter.waiting == 300 else "timed out by wait_for"
        waiting = limiter.waiting
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        return outcome, waiting

    assert vrun(main()) == ("refused", 300)


def test_default_amount_is_counted_or_refused(lib, vrun):
    try:
        limiter = lib.Limiter(2.0**60, 1)
    except ValueError as error:
        assert "burst" in str(error) or "max_rate" in str(error)
        return

    async def main() -> None:
        async with limiter:
            pass

    with pytest.raises(ValueError, match="amount"):
        vrun(main())


@pytest.mark.parametrize("call", ["async with", "acquire()", "try_acquire()", "has_capacity()"])
def test_a_default_amount_above_the_capacity_gets_the_limiters_own_error(lib, vrun, call):
    """AsyncLimiter(0.5, 1) holds half a token (Limiter refuses a burst below 1): a call that names no
    amount asks for 1 and is refused with aiolimiter's text, before any queueing, changing nothing;
    has_capacity() answers False, as aiolimiter's does."""
    limiter = lib.AsyncLimiter(0.5, 1)

    async def main() -> object:
        before = (limiter.tokens, limiter.waiting)
        try:
            if call == "async with":
                async with limiter:
                    pass
            elif call == "acquire()":
                await limiter.acquire()
            elif call == "try_acquire()":
                return limiter.try_acquire()
            else:
                return limiter.has_capacity()
        except ValueError as error:
            assert (limiter.tokens, limiter.waiting) == before
            return error
        return None

    outcome = vrun(main())
    if call == "has_capacity()":
        assert outcome is False
    else:
        assert isinstance(outcome, ValueError)
        assert str(outcome) == "Amount must be a number between 0 and the maximum capacity"


def test_only_the_c_engine_shares_a_store(lib):
    import uuid

    store = lib.package.SharedMemoryStore(f"aiotb-test-{uuid.uuid4().hex[:16]}")
    if lib.name == "c":
        try:
            assert lib.Limiter(10, 1, store=store).try_acquire()
        finally:
            assert store.unlink(store.name)
    else:
        with pytest.raises(RuntimeError, match="needs aiotb's C engine"):
            lib.Limiter(10, 1, store=store)
