"""One limiter across event loops and threads: tasks on several loops in several threads, and threads
blocked in ``acquire_blocking``, share one queue. Real threads and real loops (stock asyncio and
uvloop): real time here only bounds how long a run may take, and the bounds are loose enough for a
loaded machine; the order of grants is read from the engine itself (a limiter that logs what it
queues and grants), not from when threads happened to run."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import _new_loop
from profiles import hypothesis_settings

JOIN = 60.0  # s: the longest any thread of these tests may take


def logging_limiter(lib: Any, *args: Any, **kwargs: Any) -> Any:
    """A Limiter that records, in the engine's own order, every waiter it queues and every grant."""

    class Logged(lib.Limiter):  # type: ignore[name-defined,misc]
        __slots__ = ("queued", "granted", "log_lock")

        def _enqueue(self, amount: float, timeout: float | None, handle: Any, owner: object) -> int:
            with self.log_lock:
                ident = super()._enqueue(amount, timeout, handle, owner)
                self.queued.append(handle)
            return ident

        def _grant_due(self, at: float | None, owner: object) -> Any:
            with self.log_lock:
                result = super()._grant_due(at, owner)
                self.granted.extend(result[0])
            return result

    limiter = Logged(*args, **kwargs)
    limiter.queued, limiter.granted, limiter.log_lock = [], [], threading.Lock()
    return limiter


def in_threads(*targets: Callable[[], Any]) -> list[Any]:
    """Runs each target in a thread of its own, started together; returns their results, re-raising
    the first error."""
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException] = []
    start = threading.Barrier(len(targets))

    def run(i: int, target: Callable[[], Any]) -> None:
        try:
            start.wait()
            results[i] = target()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN)
        assert not t.is_alive(), "a thread is stuck"
    if errors:
        raise errors[0]
    return results


def loop_job(kind: str, main: Callable[[], Any]) -> Callable[[], Any]:
    """A thread's job: runs main() on a fresh loop of kind and closes it."""
    def job() -> Any:
        loop = _new_loop(kind)
        try:
            return loop.run_until_complete(main())
        finally:
            loop.close()
    return job


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_loops_in_threads_share_one_fifo_queue(lib, kind):
    limiter = logging_limiter(lib, 200, 1, burst=1, initial=0)
    per_loop, loops = 40, 3

    async def tasks() -> int:
        async def one() -> None:
            async with limiter:
                pass
        await asyncio.gather(*(one() for _ in range(per_loop)))
        return per_loop

    started = time.monotonic()
    done = in_threads(*(loop_job(kind, tasks) for _ in range(loops)))
    elapsed = time.monotonic() - started
    total = per_loop * loops
    assert sum(done) == total
    assert limiter.granted == limiter.queued, "grants out of arrival order"
    # A token is back 5 ms after the limiter is made: the first task takes it at once, not queued, where the loops
    # take longer to start (a loaded machine, PYTHONASYNCIODEBUG). Every other task waits in the one queue.
    assert total - 1 <= len(limiter.granted) <= total and limiter.waiting == 0
    assert limiter.stats().granted == total
    assert elapsed >= (total - 1) / 200  # never faster than the rate
    assert len({f.get_loop() for f in limiter.granted}) == loops


def test_blocked_threads_and_tasks_share_the_queue(lib):
    limiter = logging_limiter(lib, 200, 1, burst=1, initial=0)

    async def tasks() -> int:
        async def one() -> None:
            await limiter.acquire()
        await asyncio.gather(*(one() for _ in range(30)))
        return 30

    def blocked() -> int:
        for _ in range(30):
            limiter.acquire_blocking()
        return 30

    def with_block() -> int:
        for _ in range(30):
            with limiter:
                pass
        return 30

    started = time.monotonic()
    done = in_threads(loop_job("asyncio", tasks), loop_job("uvloop", tasks), blocked, with_block)
    elapsed = time.monotonic() - started
    assert sum(done) == 120 and limiter.stats().granted == 120 and limiter.waiting == 0
    assert limiter.granted == limiter.queued, "grants out of arrival order"
    assert elapsed >= 119 / 200
    stats = limiter.stats()
    assert stats.waits == len(limiter.granted) and stats.cancelled == 0 and stats.timeouts == 0


def test_acquire_blocking_takes_at_once_or_times_out_taking_nothing(lib):
    limiter = lib.Limiter(1, 3600, burst=2)
    limiter.acquire_blocking(2)
    assert limiter.tokens < 1e-3
    with pytest.raises(TimeoutError):
        limiter.acquire_blocking(1, timeout=60)
    assert limiter.waiting == 0 and limiter.stats().timeouts == 1 and limiter.stats().granted == 1
    with pytest.raises(ValueError, match="burst"):
        limiter.acquire_blocking(3)
    with pytest.raises(ValueError, match="timeout"):
        limiter.acquire_blocking(1, timeout=-1)
    with pytest.raises(TypeError):
        limiter.acquire_blocking("1")  # type: ignore[arg-type]
    assert limiter.waiting == 0 and limiter.stats().granted == 1


def test_acquire_blocking_waits_for_its_turn(lib):
    limiter = lib.Limiter(20, 1, burst=1, initial=0)
    started = time.monotonic()
    limiter.acquire_blocking()
    limiter.acquire_blocking()
    assert time.monotonic() - started >= 2 / 20 - 0.002  # CLOCK_MONOTONIC's reading, as the engine's
    assert limiter.stats().granted == 2 and limiter.stats().waits == 2


def test_async_limiter_blocks_as_aiolimiter_acquires(lib):
    limiter = lib.AsyncLimiter(20, 1)
    for _ in range(20):
        limiter.acquire_blocking()
    with limiter:
        pass
    assert limiter.stats().granted == 21
    limiter.acquire_blocking(1, timeout=1)  # its token comes 0.05 s on: granted, however late the thread wakes
    assert limiter.stats().granted == 22 and limiter.waiting == 0


def test_blocking_in_a_running_loop_is_refused(lib, run):
    limiter = lib.Limiter(10, 1)

    async def main() -> None:
        with pytest.raises(RuntimeError, match="await"):
            limiter.acquire_blocking()
        with pytest.raises(RuntimeError, match="async with"):
            with limiter:
                pass

    run(main())
    assert limiter.stats().granted == 0 and limiter.tokens == 10


@pytest.mark.parametrize("second", ["loop", "thread"])
def test_a_waiter_leaving_on_one_loop_retimes_the_next_elsewhere(lib, second):
    """The head (10 tokens, due in 10 s) is cancelled on its loop: the waiter behind it, on another
    loop or in a blocked thread, is due in 1 s instead of 11 s, and is woken for it."""
    limiter = lib.Limiter(1, 1, burst=10, initial=0)
    head_queued, behind_queued = threading.Event(), threading.Event()
    waited: list[float] = []

    async def head() -> None:
        task = asyncio.ensure_future(limiter.acquire(10))
        while limiter.waiting < 1:
            await asyncio.sleep(0.001)
        head_queued.set()
        assert behind_queued.wait(JOIN)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    def timed(wait: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            assert head_queued.wait(JOIN)
            started = time.monotonic()
            wait()
            waited.append(time.monotonic() - started)
        return run

    async def behind_task() -> None:
        task = asyncio.ensure_future(limiter.acquire(1))
        while limiter.waiting < 2:
            await asyncio.sleep(0.001)
        behind_queued.set()
        await task

    def behind_thread() -> None:
        threading.Thread(target=lambda: (time.sleep(0.05), behind_queued.set())).start()
        limiter.acquire_blocking(1)

    waiter = timed(lambda: asyncio.run(behind_task())) if second == "loop" else timed(behind_thread)
    in_threads(loop_job("asyncio", head), waiter)
    assert 0.9 <= waited[0] < 6, waited  # due 1 s after the cancel, not 11 s
    assert limiter.waiting == 0 and limiter.stats().granted == 1 and limiter.stats().cancelled == 1


def test_waiters_of_a_loop_closed_meanwhile_are_dropped_and_the_others_go_on(lib):
    """A loop closes with a task still queued at the head; the waiter behind it, on another loop,
    is granted all the same, and the dropped grant is given back."""
    limiter = lib.Limiter(10, 1, burst=1, initial=0)
    dead = asyncio.new_event_loop()
    dead.create_task(limiter.acquire())
    dead.run_until_complete(asyncio.sleep(0))
    assert limiter.waiting == 1
    dead.close()  # its task never resumes

    def other() -> float:
        async def main() -> float:
            started = time.monotonic()
            await limiter.acquire()
            return time.monotonic() - started
        return asyncio.run(main())

    waited = in_threads(other)[0]
    assert waited < 5
    assert limiter.waiting == 0
    stats = limiter.stats()
    assert stats.granted == 1 and stats.cancelled == 1  # the closed loop's grant came back


class CrossThreadCountingLoop(asyncio.SelectorEventLoop):
    """Counts the callbacks other threads schedule on it: each is a wake-up across threads."""

    woken_from_elsewhere = 0

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        self.woken_from_elsewhere += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def queued_on_a_paused_loop(limiter: Any, loop: asyncio.AbstractEventLoop) -> asyncio.Task[None]:
    """A task of loop queued on limiter, its timer armed; loop then stops running, as if its thread
    were busy elsewhere."""
    task = loop.create_task(limiter.acquire())
    loop.run_until_complete(asyncio.sleep(0))
    assert limiter.waiting == 1 and not task.done()
    return task


@pytest.mark.parametrize("timer", ["due", "not due"])
def test_a_grant_made_elsewhere_wakes_its_loop_only_if_its_timer_is_not_due(lib, timer):
    """A blocked thread's pass grants a paused loop's waiter. If that loop's timer is due already,
    the timer's pass resolves it and nothing crosses threads; if not (here the rate went up, and
    the re-timing wake-up is pending), the loop is woken, once for both."""
    limiter = lib.Limiter(20, 1, burst=1, initial=0)  # a token every 50 ms
    loop = CrossThreadCountingLoop()
    try:
        task = queued_on_a_paused_loop(limiter, loop)
        if timer == "due":
            time.sleep(0.1)
        else:
            limiter.set_rate(1000)  # due at once: the loop is woken to re-time
            assert loop.woken_from_elsewhere == 1
        limiter.acquire_blocking()  # its pass grants the task's waiter first
        assert limiter.waiting == 0 and not task.done()
        assert loop.woken_from_elsewhere == (0 if timer == "due" else 1)
        loop.run_until_complete(asyncio.wait_for(task, JOIN))
    finally:
        loop.close()
    stats = limiter.stats()
    assert stats.granted == 2 and stats.cancelled == 0


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_grants_posted_to_a_loop_that_closed_come_back(lib, kind):
    limiter = lib.Limiter(20, 1, burst=1, initial=0)
    dead = _new_loop(kind)
    queued_on_a_paused_loop(limiter, dead)
    time.sleep(0.1)  # its timer is due: the grant below is posted without waking it
    limiter.acquire_blocking()
    assert limiter.waiting == 0 and limiter.stats().granted == 2
    dead.close()  # the posted grant is never resolved

    async def newcomer() -> None:
        await limiter.acquire()  # a new loop joins: the closed one is dropped

    asyncio.run(newcomer())
    stats = limiter.stats()
    assert stats.granted == 2 and stats.cancelled == 1  # the closed loop's grant came back


def test_a_grant_posted_during_the_loops_own_pass_is_resolved_by_it(lib):
    """Another owner's pass posts a grant to a loop while that loop is in its own pass, its timer
    due: the loop resolves it before it arms its timer again, instead of leaving it to a later one."""
    limiter_class = lib.Limiter
    interleaved: list[bool] = []

    class Interleaved(limiter_class):  # type: ignore[misc, valid-type]
        def _grant_due(self, at: float | None, owner: object) -> Any:
            if not interleaved and self.waiting == 2:  # the loop's pass, both queued: another owner's runs first
                interleaved.append(True)
                self._owners._grant_due_from(object())
            return super()._grant_due(at, owner)

    limiter = Interleaved(10, 1, burst=10, initial=0)
    loop = asyncio.new_event_loop()
    try:
        first = queued_on_a_paused_loop(limiter, loop)  # 1 token: due in 0.1 s
        time.sleep(0.2)  # its timer is due: the loop's next iteration runs its pass
        second = loop.create_task(limiter.acquire(5))  # due 0.4 s or more later: never within this test's pass
        loop.run_until_complete(asyncio.sleep(0))
        assert interleaved and first.done() and not second.done()
        loop.run_until_complete(asyncio.wait_for(second, JOIN))
    finally:
        loop.close()
    assert limiter.stats().granted == 2


def test_keyboard_interrupt_in_a_blocked_thread_leaves_the_queue(lib):
    limiter = lib.Limiter(1, 3600, burst=1, initial=0)
    main = threading.main_thread().ident
    assert threading.get_ident() == main, "signals reach the main thread only"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupter = threading.Timer(0.2, signal.pthread_kill, args=(main, signal.SIGINT))
    try:
        interrupter.start()
        with pytest.raises(KeyboardInterrupt):
            limiter.acquire_blocking()
    finally:
        interrupter.cancel()
        signal.signal(signal.SIGINT, previous)
    assert limiter.waiting == 0
    assert limiter.stats().cancelled == 1 and limiter.stats().granted == 0


def test_cancellations_racing_grants_lose_nothing(lib):
    """Tasks on two loops and blocked threads, a third of them cancelled or timed out at random
    instants: every grant is either used or given back, and none exceeds the bound."""
    limiter = lib.Limiter(400, 1, burst=4, initial=0)
    used = []
    lock = threading.Lock()

    def count() -> None:
        with lock:
            used.append(time.monotonic())

    async def tasks(seed: int) -> None:
        import random
        rng = random.Random(seed)

        async def one(i: int) -> None:
            await asyncio.sleep(rng.random() * 0.2)
            try:
                if i % 3 == 0:
                    await asyncio.wait_for(limiter.acquire(), rng.random() * 0.05)
                elif i % 3 == 1:
                    await limiter.acquire(timeout=rng.random() * 0.05)
                else:
                    await limiter.acquire()
            except (asyncio.TimeoutError, TimeoutError):
                return
            count()

        await asyncio.gather(*(one(i) for i in range(90)))

    def blocked(seed: int) -> None:
        import random
        rng = random.Random(seed)
        for i in range(30):
            try:
                limiter.acquire_blocking(timeout=rng.random() * 0.05 if i % 2 else None)
            except TimeoutError:
                continue
            count()

    started = time.monotonic()
    in_threads(loop_job("asyncio", lambda: tasks(1)), loop_job("uvloop", lambda: tasks(2)),
               lambda: blocked(3), lambda: blocked(4))
    elapsed = time.monotonic() - started
    stats = limiter.stats()
    assert limiter.waiting == 0
    assert stats.granted == len(used), "a grant was neither used nor given back"
    assert len(used) <= 4 + 400 * elapsed + 1
    assert stats.cancelled + stats.timeouts + stats.granted >= 240


settle_ops = st.lists(st.tuples(st.sampled_from(["try", "has", "blocking0", "tokens", "stats"]),
                                st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0])), min_size=1, max_size=25)


@hypothesis_settings(fast=25, long=2_000)
@given(per_thread=st.lists(settle_ops, min_size=2, max_size=4), burst=st.sampled_from([4.0, 8.0, 16.0]))
def test_operations_from_several_threads_match_a_single_threaded_model(lib, per_thread, burst):
    """Random operations from several threads on a limiter that does not refill within the test:
    whatever order they ran in, a single-threaded bucket gives these answers. Every taken amount
    came out of the burst, the tokens left are the burst less them, and every refusal saw fewer
    tokens than it asked for (tokens only fall, so fewer than are left at the end)."""
    limiter = lib.Limiter(1, 10**7, burst=burst)
    outcomes: list[list[tuple[str, float, bool]]] = [[] for _ in per_thread]

    def thread(ops: list[tuple[str, float]], out: list[tuple[str, float, bool]]) -> Callable[[], None]:
        def run() -> None:
            for op, amount in ops:
                if amount > burst:
                    continue
                if op == "try":
                    out.append((op, amount, limiter.try_acquire(amount)))
                elif op == "blocking0":
                    try:
                        limiter.acquire_blocking(amount, timeout=0)
                        out.append((op, amount, True))
                    except TimeoutError:
                        out.append((op, amount, False))
                elif op == "has":
                    out.append((op, amount, limiter.has_capacity(amount)))
                elif op == "tokens":
                    assert -1e-9 <= limiter.tokens <= burst
                else:
                    stats = limiter.stats()
                    assert stats.granted_tokens <= burst and stats.waiting == 0
        return run

    in_threads(*(thread(ops, out) for ops, out in zip(per_thread, outcomes)))
    taken = [amount for out in outcomes for op, amount, ok in out if ok and op != "has"]
    refused = [amount for out in outcomes for op, amount, ok in out if not ok and op != "has"]
    left = limiter.tokens
    assert sum(taken) <= burst
    assert left == pytest.approx(burst - sum(taken), abs=1e-6)
    assert all(amount > left - 1e-6 for amount in refused)
    stats = limiter.stats()
    assert stats.granted == len(taken) and stats.granted_tokens == pytest.approx(sum(taken))
    assert stats.timeouts == sum(1 for out in outcomes for op, _, ok in out if op == "blocking0" and not ok)
    assert limiter.waiting == 0


def test_set_rate_and_penalize_from_a_plain_thread_retime_the_waiters(lib):
    limiter = lib.Limiter(1, 60, burst=1, initial=0)  # the next token in 60 s

    async def main() -> float:
        started = time.monotonic()
        await limiter.acquire()
        return time.monotonic() - started

    def change() -> None:
        while limiter.waiting < 1:
            time.sleep(0.001)
        limiter.set_rate(50, 1)  # a token every 20 ms from now

    waited = in_threads(loop_job("asyncio", main), change)[0]
    assert waited < 10
    assert limiter.stats().granted == 1


def test_stats_count_every_loop_and_thread(lib):
    limiter = lib.Limiter(10_000, 1)

    async def tasks() -> None:
        for _ in range(100):
            async with limiter:
                pass

    def blocked() -> None:
        for _ in range(100):
            limiter.acquire_blocking()

    in_threads(loop_job("asyncio", tasks), loop_job("uvloop", tasks), blocked)
    assert limiter.stats().granted == 300


def test_a_virtual_clock_cannot_join_waiters_on_the_monotonic_clock(lib, vrun):
    limiter = lib.Limiter(1, 3600, burst=1, initial=0)
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(limiter.acquire())
        loop.run_until_complete(asyncio.sleep(0))
        assert limiter.waiting == 1

        async def main() -> None:
            with pytest.raises(RuntimeError, match="monotonic clock"):
                await limiter.acquire()

        vrun(main())
        assert limiter.waiting == 1
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    finally:
        loop.close()
    assert limiter.waiting == 0


def test_keyed_limiter_gives_each_key_one_limiter_across_threads(lib):
    """Threads hammer the same keys: each key's burst (2, no refill within the test) is granted twice
    in all, never once per thread, so no key ever got two limiters."""
    keyed = lib.KeyedLimiter(2, 10**7)
    keys = range(200)

    def hammer() -> dict[int, int]:
        got = dict.fromkeys(keys, 0)
        for _ in range(3):
            for key in keys:
                got[key] += keyed[key].try_acquire()
        return got

    results = in_threads(*(hammer for _ in range(4)))
    assert all(sum(r[key] for r in results) == 2 for key in keys)
    assert len(keyed) == len(keys)
