"""Re-entrancy and lifecycle, on both engines: callbacks that call back into the limiter during
a grant, exceptions in ``async with`` bodies, a limiter collected or a loop closed with waiters
pending, and KeyboardInterrupt while waiting. No crash, no leak, and the documented outcome:

- code run by a grant (a future's done-callback, even one called synchronously inside the
  limiter's dispatch) may call acquire, try_acquire, has_capacity or cancel other waiters; the
  dispatch goes on with the bucket as that code left it;
- an exception in an ``async with`` body propagates unchanged; the token stays spent;
- a limiter (and its waiters' tasks) left unreachable with waiters queued is collected; a
  loop closed with waiters queued leaves them queued until the limiter is next used on another
  loop, which drops them without granting them (they never took tokens);
- KeyboardInterrupt thrown into a waiting acquire withdraws it (or gives its tokens back if it
  was granted already); raised by a callback, it stops the loop with the waiters still queued
  and untouched; under ``asyncio.Runner`` (``asyncio.run``), SIGINT cancels the main task,
  whose wait is withdrawn, and then surfaces as KeyboardInterrupt;
- ``__aenter__`` and ``__aexit__``: C binds each once per limiter, at its first lookup, so an
  uncontended ``async with`` allocates nothing; the twin binds them at each lookup. A limiter
  used in ``async with`` is still collected once unreachable."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from test_scenarios import ns
from virtual_loop import VirtualClockLoop


class EagerFuture(asyncio.Future):  # type: ignore[type-arg]
    """A future that also runs hooks synchronously inside set_result: the most re-entrant loop
    a limiter can meet (its grant runs user code before its dispatch loop continues)."""

    hooks: list[Callable[[asyncio.Future], None]]  # type: ignore[type-arg]

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        for hook in self.hooks:
            hook(self)


class EagerLoop(VirtualClockLoop):
    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[Callable[[asyncio.Future], None]] = []  # type: ignore[type-arg]

    def create_future(self) -> asyncio.Future:  # type: ignore[type-arg]
        future = EagerFuture(loop=self)
        future.hooks = self.hooks
        return future


def run_checked(loop: asyncio.AbstractEventLoop, main: Any) -> Any:
    from conftest import _run_on

    return _run_on(loop, main)


# ---- re-entrancy ----

@pytest.mark.parametrize("fair", [True, False])
def test_grant_hook_calls_back_into_the_limiter(lib, fair):
    """Code run synchronously by each grant, inside the limiter's dispatch loop: it cancels the
    task just granted (its tokens come back: a second dispatch, at the same instant), tries to
    take tokens between two grants of that dispatch, queues a newcomer, and cancels a waiter
    granted in the same pass whose result is not set yet. Every grant must fit the bucket;
    nothing may be lost."""
    loop = EagerLoop()

    async def main() -> list[Any]:
        limiter = lib.Limiter(10, 1, burst=2, initial=0, fair=fair)  # a token every 100 ms
        log: list[Any] = []
        tasks: dict[str, asyncio.Task] = {}  # type: ignore[type-arg]

        async def waiter(name: str, amount: float) -> None:
            try:
                await limiter.acquire(amount)
                log.append((name, "granted", ns(loop.time())))
            except asyncio.CancelledError:
                log.append((name, "cancelled", ns(loop.time())))

        def hook(future: asyncio.Future) -> None:  # type: ignore[type-arg]
            grants = sum(1 for entry in log if entry[0] == "hook")
            log.append(("hook", grants, limiter.waiting, ns(loop.time())))
            if grants == 0:  # W0's grant: cancel W0 (a refund follows), queue a newcomer
                tasks["W0"].cancel()
                tasks["W3"] = asyncio.ensure_future(waiter("W3", 1))
            elif grants == 1:  # W1's grant, in the refund's dispatch: take between grants, cancel W2
                log.append(("hook try", limiter.try_acquire(0.5), limiter.tokens))
                tasks["W2"].cancel()

        loop.hooks.append(hook)
        for name, amount in (("W0", 2), ("W1", 1), ("W2", 1)):
            tasks[name] = asyncio.ensure_future(waiter(name, amount))
        await asyncio.sleep(0)
        while not all(task.done() for task in tasks.values()):
            await asyncio.gather(*tasks.values())
        log.append(("end", limiter.tokens, limiter.waiting, ns(loop.time())))
        return log

    t = ns(0.2)
    # One call to the engine decides a whole pass: W0's refund lets W1 and W2 be granted together,
    # so W1's hook sees them both granted; W2, cancelled by that hook before its result was set,
    # gives its token back at once, and W3 gets it: unfair, W3 takes it as it comes; fair, W3 came
    # after W1's grant, so it is granted through the queue and resumes after W1.
    expected = [
        ("hook", 0, 2, t),           # W0 granted its 2 tokens at 0.2 s, W1 and W2 still queued
        ("hook", 1, 0, t),           # W0 cancelled before it resumed: 2 tokens back, W1 and W2 granted
        ("hook try", False, 0.0),    # nothing left between the grants of that pass
        ("W0", "cancelled", t),
        *([("hook", 2, 0, t)] if fair else [("W3", "granted", t)]),  # W2's token, given back by its hook
        ("W1", "granted", t),
        ("W2", "cancelled", t),
        *([("W3", "granted", t)] if fair else []),
        ("end", 0.0, 0, t),
    ]
    assert run_checked(loop, main()) == expected


def test_done_callbacks_of_waiting_tasks_call_back_into_the_limiter(lib, vrun):
    """Task done-callbacks (the public way to hook a grant) acquire, try and cancel."""

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=1, initial=0)
        seen: list[Any] = []
        tasks = [asyncio.create_task(limiter.acquire()) for _ in range(4)]

        def on_done(task: asyncio.Task) -> None:  # type: ignore[type-arg]
            seen.append((ns(loop.time()), limiter.try_acquire(), limiter.waiting))
            if not tasks[-1].done():
                tasks[-1].cancel()
            tasks.append(asyncio.create_task(limiter.acquire()))

        tasks[0].add_done_callback(on_done)
        await asyncio.sleep(0.25)
        for task in tasks[1:]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        seen.append((limiter.waiting, limiter.tokens))
        return seen

    # at 0.1 s the first is granted; its callback finds the queue non-empty (fair: no try),
    # cancels the last waiter and queues a new one; at 0.2 s the second is granted.
    assert vrun(main()) == [(ns(0.1), False, 3), (0, 0.5)]


# ---- exceptions in async with bodies ----

@pytest.mark.parametrize("error", [ZeroDivisionError, KeyboardInterrupt, SystemExit, asyncio.CancelledError])
def test_exception_in_async_with_body_propagates_and_keeps_the_grant(lib, vrun, error):
    async def main() -> list[Any]:
        limiter = lib.Limiter(10, 1, burst=2, initial=1)  # the second entry waits 100 ms
        raised = error("from the body")
        results = []
        for _ in range(2):
            try:
                async with limiter:
                    raise raised
            except BaseException as caught:  # noqa: BLE001 - exactly what the body raised
                results.append(caught is raised)
        results += [limiter.tokens, limiter.waiting, ns(asyncio.get_running_loop().time())]
        return results

    assert vrun(main()) == [True, True, 0.0, 0, ns(0.1)]


def test_aexit_does_not_swallow(lib, vrun):
    async def main() -> object:
        limiter = lib.Limiter(10, 1)
        return await limiter.__aexit__(ValueError, ValueError("x"), None)

    assert not vrun(main())


# ---- a limiter collected, a loop closed, with waiters pending ----

def _abandon(lib: Any, loop: asyncio.AbstractEventLoop, waiters: int) -> weakref.ref:  # type: ignore[type-arg]
    """Queues waiters on a limiter on loop, then drops every reference the test holds."""
    limiter = lib.Limiter(1, 3600, initial=0)
    for _ in range(waiters):
        loop.create_task(limiter.acquire())
    loop.run_until_complete(asyncio.sleep(0))
    assert limiter.waiting == waiters
    return weakref.ref(limiter)


def test_limiter_collected_with_waiters_pending(lib):
    destroyed: list[str] = []
    loop = VirtualClockLoop()
    loop.set_exception_handler(lambda loop, context: destroyed.append(context["message"]))
    ref = _abandon(lib, loop, 50)
    assert ref() is not None  # the loop's timer and the waiting tasks keep it alive
    loop.close()
    del loop
    gc.collect()
    assert ref() is None, gc.get_referrers(ref())
    # its 50 tasks were never finished: asyncio says so as they go, and that is all it says
    assert destroyed and set(destroyed) == {"Task was destroyed but it is pending!"}


def test_loop_closed_with_waiters_pending(lib, vrun):
    limiter = lib.Limiter(10, 1, burst=1, initial=0)
    old = VirtualClockLoop()
    old.set_exception_handler(lambda loop, context: None)  # its tasks die pending
    tasks = [old.create_task(limiter.acquire()) for _ in range(5)]
    old.run_until_complete(asyncio.sleep(0))
    old.close()
    assert limiter.waiting == 5  # queued until the limiter is next used elsewhere

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        before = limiter.tokens
        await limiter.acquire()  # on the new loop: the dead waiters are dropped, not granted
        return [before, limiter.waiting, ns(loop.time()), limiter.tokens]

    # the new virtual clock starts at 0 too: the bucket's 0 tokens carry over (it is rebased)
    assert vrun(main()) == [0.0, 0, ns(0.1), 0.0]
    assert all(not task.done() for task in tasks)
    del tasks
    gc.collect()


# ---- __aenter__ and __aexit__ bound once per limiter (C, before 3.14) ----

BOUND_ONCE = sys.version_info < (3, 14)  # 3.14's `async with` binds neither method: keeping them bound costs there


@pytest.mark.parametrize("kind", ["Limiter", "AsyncLimiter", "WindowLimiter", "subclass"])
def test_bound_methods_are_kept_per_limiter(lib, kind):
    class Sub(lib.AsyncLimiter):
        pass

    make = {"Limiter": lambda: lib.Limiter(10, 3600), "AsyncLimiter": lambda: lib.AsyncLimiter(10, 3600),
            "WindowLimiter": lambda: lib.WindowLimiter(10, 3600), "subclass": lambda: Sub(10, 3600)}[kind]
    limiter, other = make(), make()
    enter, leave = limiter.__aenter__, limiter.__aexit__
    assert (enter.__self__, leave.__self__) == (limiter, limiter)
    assert (enter.__name__, leave.__name__) == ("__aenter__", "__aexit__")
    kept = lib.name == "c" and BOUND_ONCE
    assert (limiter.__aenter__ is enter, limiter.__aexit__ is leave) == ((kept,) * 2)
    assert other.__aenter__ is not enter
    # looked up on the class, the method is the engine's own (from 3.14, the C engine's plain method descriptor,
    # Limiter's), callable with the limiter
    assert type(limiter).__aenter__ is lib.Limiter.__aenter__
    if lib.name == "c" and not BOUND_ONCE:
        assert repr(type(limiter).__aenter__) == "<method '__aenter__' of 'Limiter' objects>"
    assert type(limiter).__aenter__.__name__ == "__aenter__"
    type(limiter).__aenter__(limiter)  # granted at once: READY
    assert limiter.tokens == pytest.approx(9, abs=0.01)


def test_bound_descriptor_refuses_another_class(lib):
    descriptor = lib.Limiter.__dict__.get("__aenter__")
    if lib.name == "python":
        assert descriptor is None  # inherited from the twin's Bucket: an ordinary function there
        return
    assert ("bound once per instance" in repr(descriptor)) == BOUND_ONCE
    with pytest.raises(TypeError, match="'__aenter__' for 'Limiter' objects doesn't apply to a 'object' object"):
        descriptor.__get__(object(), object)
    if BOUND_ONCE:  # each subclass has its own then; from 3.14 they share Limiter's descriptor
        with pytest.raises(TypeError, match="doesn't apply to a 'AsyncLimiter' object"):
            lib.WindowLimiter.__dict__["__aexit__"].__get__(lib.AsyncLimiter(10, 1), lib.AsyncLimiter)


def test_subclasses_keep_their_own_or_get_bound_ones(lib, vrun):
    entered: list[str] = []

    class Counting(lib.AsyncLimiter):  # overrides __aenter__ the way aiolimiter users do
        async def __aenter__(self) -> None:
            entered.append("counted")
            await super().__aenter__()

    class Plain(Counting):
        pass

    class Sub(lib.AsyncLimiter):
        pass

    async def main() -> list[float]:
        counting, plain, sub = Counting(10, 1), Plain(10, 1), Sub(10, 1)
        for limiter in (counting, plain, sub):
            async with limiter:
                pass
        return [counting.tokens, plain.tokens, sub.tokens]

    assert vrun(main()) == [9.0, 9.0, 9.0]
    assert entered == ["counted", "counted"]
    assert Counting.__aenter__ is not lib.AsyncLimiter.__aenter__
    assert (Sub.__dict__.get("__aenter__") is not None) == (lib.name == "c" and BOUND_ONCE)


def test_limiter_used_in_async_with_is_collected(lib, vrun):
    async def use() -> weakref.ref:  # type: ignore[type-arg]
        limiter = lib.Limiter(10, 1)
        async with limiter:
            pass
        return weakref.ref(limiter)

    ref = vrun(use())
    gc.collect()
    assert ref() is None


# ---- KeyboardInterrupt while waiting ----

def test_keyboard_interrupt_thrown_into_a_waiting_acquire(lib, vrun):
    async def main() -> list[Any]:
        limiter = lib.Limiter(10, 1, burst=2, initial=1)
        other = asyncio.create_task(limiter.acquire(2))  # queued first, granted at 0.1 s
        await asyncio.sleep(0)
        waiting = limiter.acquire(1).__await__()
        waiting.send(None)  # now queued behind the other
        state = [limiter.waiting, limiter.tokens]
        with pytest.raises(KeyboardInterrupt):
            waiting.throw(KeyboardInterrupt())
        state += [limiter.waiting, limiter.tokens]
        await other
        state.append(ns(asyncio.get_running_loop().time()))
        return state

    # withdrawn at once; the waiter ahead is granted on time and nothing is left to anyone else
    assert vrun(main()) == [2, 1.0, 1, 1.0, ns(0.1)]


def test_keyboard_interrupt_after_the_grant_gives_the_tokens_back(lib, vrun):
    async def main() -> list[Any]:
        limiter = lib.Limiter(10, 1, burst=2, initial=0)
        waiting = limiter.acquire(1).__await__()
        future = waiting.send(None)  # queued: granted at 0.1 s
        await asyncio.sleep(0.1)
        assert future.done()  # granted, but the awaiting code never resumed
        tokens_granted = limiter.tokens
        with pytest.raises(KeyboardInterrupt):
            waiting.throw(KeyboardInterrupt())
        return [tokens_granted, limiter.tokens, limiter.waiting]

    assert vrun(main()) == [0.0, 1.0, 0]


def test_keyboard_interrupt_from_a_callback_stops_the_loop_with_waiters_intact(lib):
    loop = VirtualClockLoop()
    limiter = lib.Limiter(10, 1, burst=1, initial=0)

    def interrupt() -> None:
        raise KeyboardInterrupt

    async def main() -> None:
        await asyncio.gather(*(limiter.acquire() for _ in range(3)))

    main_task = loop.create_task(main())
    loop.call_at(0.15, interrupt)
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(main_task)
    # one grant at 0.1 s went through; the other two are still queued, nothing was lost
    assert (limiter.waiting, ns(loop.time())) == (2, ns(0.15))
    assert loop.run_until_complete(_read_tokens(limiter)) == pytest.approx(0.5)
    main_task.cancel()  # the application's clean-up: cancel, let the loop finish them
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(main_task)
    loop.run_until_complete(asyncio.sleep(0))
    assert limiter.waiting == 0
    assert loop.run_until_complete(_read_tokens(limiter)) == pytest.approx(0.5)  # still at 0.15 s
    loop.close()


async def _read_tokens(limiter: Any) -> float:
    return limiter.tokens


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery")
def test_sigint_under_asyncio_runner_withdraws_the_wait(lib):
    # Runner turns SIGINT into a cancellation only over Python's default handler, which a process started with
    # SIGINT ignored (a background job, nohup) does not have: it is put in place here, as an interactive run has it
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        limiter = lib.Limiter(1, 3600, initial=0)
        with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
            async def main() -> None:
                asyncio.get_running_loop().call_later(5, signal.raise_signal, signal.SIGINT)
                await limiter.acquire()  # an hour away

            with pytest.raises(KeyboardInterrupt):
                runner.run(main())
            assert limiter.waiting == 0
            assert runner.run(_read_tokens(limiter)) == pytest.approx(5 / 3600)
    finally:
        signal.signal(signal.SIGINT, previous)
