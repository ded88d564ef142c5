"""``Limiter(..., store=SharedMemoryStore(name))``: one quota for the processes of a host.

Real processes (spawned), real loops, real CLOCK_MONOTONIC: a shared segment cannot run on a virtual
clock. The bound is checked on the merged logs of every process's engine, exactly on the instants
the segment counted grants at, and within one reservation per process on the instants the grants
were made (see aiotb/_shared.py). Real time only bounds how long a run may take; rates are checked
loosely enough for a loaded machine. C engine only: the pure-Python engine has no shared store."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import aiotb
from aiotb import Limiter, SharedMemoryStore, StoreCorrupt, WindowLimiter
from aiotb import _tokenbucket  # noqa: F401  (a failing C import must fail these tests)
from aiotb._store_shm import JOIN_WAIT
from aiotb._tokenbucket import SHM_EFOREIGN, SHM_OK, Segment
from shm_workers import logged, take_until, try_until
from spawned import JOIN, SPAWN, excess, run_workers
from virtual_loop import VirtualClockLoop

# The run on the pure-Python engine (AIOTB_NO_EXTENSIONS=1) leaves the shared store out: it needs the C
# engine, as tests/test_bad_input.py checks in that run too.
pytestmark = pytest.mark.skipif(aiotb.IMPLEMENTATION != "c", reason="the pure-Python engine has no shared store")


# ---- the store ----

@pytest.mark.parametrize("bad, error", [(b"x", TypeError), (3, TypeError), ("", ValueError), ("a/b", ValueError),
                                        ("x" * 201, ValueError), ("a\0b", ValueError)])
def test_a_bad_name_is_refused(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="name"):
        SharedMemoryStore(bad)


@pytest.mark.parametrize("bad, error", [("0o600", TypeError), (True, TypeError), (-1, ValueError),
                                        (0o1000, ValueError)])
def test_a_bad_mode_is_refused(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="mode"):
        SharedMemoryStore("x", mode=bad)


def test_processes_must_agree_on_the_rates(name: str) -> None:
    Limiter(100, 1, burst=10, store=SharedMemoryStore(name))
    Limiter(100, 1, burst=10, store=SharedMemoryStore(name))  # the same: joins
    with pytest.raises(ValueError, match=r"rates \[100/s burst 10 initial 10\], not \[50/s burst 10 initial 10\]"):
        Limiter(50, 1, burst=10, store=SharedMemoryStore(name))


def test_a_foreign_object_is_store_corrupt(name: str) -> None:
    descriptor = os.open(f"/dev/shm/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(descriptor, b"not a limiter" * 100)
    os.close(descriptor)
    with pytest.raises(StoreCorrupt, match="not an aiotb limiter"):
        Limiter(100, 1, store=SharedMemoryStore(name))


def test_a_segment_of_another_layout_version_says_so(name: str) -> None:
    Limiter(100, 1, store=SharedMemoryStore(name))
    with open(f"/dev/shm/{name}", "r+b") as segment:  # the version after the magic: an older aiotb's (layout 1)
        segment.seek(8)
        segment.write((1).to_bytes(4, "little"))
    with pytest.raises(StoreCorrupt, match="another version of aiotb made"):
        Limiter(100, 1, store=SharedMemoryStore(name))


def test_a_segment_corrupted_in_use_grants_nothing(name: str) -> None:
    limiter = Limiter(100, 1, burst=10, store=SharedMemoryStore(name))
    assert limiter.try_acquire()
    with open(f"/dev/shm/{name}", "r+b") as segment:
        segment.write(b"\xff" * 4096)
    with pytest.raises(StoreCorrupt):
        limiter.try_acquire()
    with pytest.raises(StoreCorrupt):
        limiter.tokens


# ---- who may be joined ----

def test_an_object_wider_than_asked_is_refused(name: str) -> None:
    squatted = Segment(f"/{name}", 0o666)  # published with the very rates, readable and writable by all
    assert squatted.create([(1e7, 10.0, 10.0)]) == SHM_OK
    with pytest.raises(PermissionError, match=rf"mode 0o666, owned by uid {os.geteuid()}.*mode=0o666"):
        Limiter(100, 1, burst=10, store=SharedMemoryStore(name))
    assert squatted.tokens(Segment.now()) == 10  # nothing taken from it
    assert Limiter(100, 1, burst=10, store=SharedMemoryStore(name, mode=0o666)).try_acquire()  # asked: joins


@pytest.mark.skipif(os.geteuid() != 0, reason="giving an object to another user takes root")
def test_another_users_object_is_refused_unless_trusted(name: str) -> None:
    Limiter(100, 1, burst=10, store=SharedMemoryStore(name))
    os.chown(f"/dev/shm/{name}", 65534, 65534)  # as if nobody had created it first
    with pytest.raises(PermissionError, match=r"mode 0o600, owned by uid 65534.*trusted_uids=\(65534,\)"):
        Limiter(100, 1, burst=10, store=SharedMemoryStore(name))
    assert Limiter(100, 1, burst=10, store=SharedMemoryStore(name, trusted_uids=[65534])).try_acquire()


AS_NOBODY = """
import os, sys
from aiotb import Limiter, SharedMemoryStore
from aiotb._tokenbucket import Segment
name = sys.argv[1]
os.setgid(65534)
os.setuid(65534)
try:
    Segment("/" + name)
except PermissionError:
    print("denied", flush=True)
try:
    limiter = Limiter(100, 1, burst=10, store=SharedMemoryStore(name, mode=0o666, trusted_uids=[0]))
except PermissionError as error:
    print("PermissionError:", error)
else:
    print("joined" if limiter.try_acquire() else "nothing granted")
"""


def as_nobody(name: str, meanwhile: Any = None) -> list[str]:
    """What a limiter of nobody's on name says (meanwhile() run once it has met the object denied)."""
    child = subprocess.Popen([sys.executable, "-c", AS_NOBODY, name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None
    lines = [child.stdout.readline().strip()]
    if meanwhile is not None:
        meanwhile()
    out, err = child.communicate(timeout=JOIN)
    assert child.returncode == 0, err
    return lines + out.strip().splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="a process of another user takes root to start")
def test_a_joiner_waits_while_another_users_object_is_being_set_up(name: str) -> None:
    being_set_up = Segment(f"/{name}", 0o600)  # as its creator holds it before giving it its mode

    def set_up() -> None:
        time.sleep(0.3)  # the joiner is waiting by now (within its JOIN_WAIT of 2 s)
        os.chmod(f"/dev/shm/{name}", 0o666)
        assert being_set_up.create([(1e7, 10.0, 10.0)]) == SHM_OK

    assert as_nobody(name, set_up) == ["denied", "joined"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a process of another user takes root to start")
def test_another_users_object_never_opened_is_a_permission_error_naming_it(name: str) -> None:
    Segment(f"/{name}", 0o600).create([(1e7, 10.0, 10.0)])
    started = time.monotonic()
    said = as_nobody(name)
    assert said[0] == "denied" and said[1].startswith("PermissionError:"), said
    assert "may not open (mode 0o600, owned by uid 0)" in said[1]
    assert time.monotonic() - started < JOIN_WAIT + 10  # waited its window, then gave up


@pytest.mark.parametrize("bad, error", [(65534, TypeError), (["x"], TypeError), ([True], TypeError),
                                        ([-1], ValueError), ([2**32], ValueError)])
def test_bad_trusted_uids_are_refused(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="trusted_uids"):
        SharedMemoryStore("x", trusted_uids=bad)


def test_rates_a_segment_cannot_hold_are_refused_before_the_name_is_made(name: str) -> None:
    period = 2**56 / 1e9  # a full refill of 2**56 ns: in the engine's range, not in a segment's
    with pytest.raises(ValueError, match=r"refills in 2\*\*56 ns.*2\*\*55"):
        Limiter(1, period, store=SharedMemoryStore(name))
    assert not Path(f"/dev/shm/{name}").exists()
    started = time.monotonic()
    assert Limiter(1, 1, store=SharedMemoryStore(name)).try_acquire()  # the name is free: no wait
    assert time.monotonic() - started < JOIN_WAIT


def test_a_create_that_fails_leaves_no_name(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiotb import _store_shm

    monkeypatch.setattr(_store_shm, "_SEGMENT_SPAN", 2**58)  # past the Python check: the C refusal
    with pytest.raises(ValueError, match="cannot hold"):
        Limiter(1, 2**56 / 1e9, store=SharedMemoryStore(name))
    assert not Path(f"/dev/shm/{name}").exists()


def test_unlink_starts_afresh(name: str) -> None:
    limiter = Limiter(1, 60, burst=2, store=SharedMemoryStore(name))
    assert limiter.try_acquire(2)
    assert SharedMemoryStore.unlink(name) is True
    assert SharedMemoryStore.unlink(name) is False
    fresh = Limiter(1, 60, burst=2, store=SharedMemoryStore(name))
    assert fresh.try_acquire(2)
    assert not limiter.try_acquire()  # the old mapping goes on, on its own


def test_only_limiter_takes_a_store(name: str) -> None:
    with pytest.raises(TypeError, match="WindowLimiter|store"):
        WindowLimiter(10, 1, store=SharedMemoryStore(name))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"SharedMemoryStore\(name\) .* or RedisStore\(url, key\) .* got 'redis://\*\*\*@x'"):
        Limiter(10, 1, store="redis://user:password@x")  # type: ignore[arg-type]


def test_a_virtual_clock_is_refused(name: str) -> None:
    limiter = Limiter(10, 1, store=SharedMemoryStore(name))
    loop = VirtualClockLoop()
    try:
        with pytest.raises(RuntimeError, match="virtual or patched clock"):
            loop.run_until_complete(limiter.acquire())
    finally:
        loop.close()
    assert limiter.tokens == pytest.approx(10, abs=0.01)  # nothing taken


# ---- one process ----

def test_tokens_are_shared_by_limiters_on_one_store(name: str) -> None:
    a = Limiter(1, 60, burst=3, store=SharedMemoryStore(name))
    b = Limiter(1, 60, burst=3, store=SharedMemoryStore(name))
    assert a.try_acquire(2)
    assert not b.try_acquire(2)
    assert b.try_acquire(1)
    assert b.tokens < 0.01 and not a.has_capacity()


def test_waiters_are_granted_at_the_rate_in_order(name: str) -> None:
    limiter = Limiter(50, 1, burst=1, store=SharedMemoryStore(name))
    order: list[int] = []

    async def main() -> float:
        start = time.monotonic()

        async def task(i: int) -> None:
            async with limiter:
                order.append(i)

        await asyncio.gather(*(task(i) for i in range(11)))
        return time.monotonic() - start

    took = asyncio.run(main())
    assert order == list(range(11))
    assert 0.19 <= took < 10  # ten waits of 20 ms after the first token
    assert limiter.stats().granted == 11 and limiter.stats().waits == 10


def test_a_timeout_that_cannot_be_met_fails_at_once_taking_nothing(name: str) -> None:
    limiter = Limiter(1, 10, burst=2, store=SharedMemoryStore(name))

    async def main() -> None:
        assert limiter.try_acquire(2)
        before = limiter.tokens
        with pytest.raises(TimeoutError):
            await limiter.acquire(1, timeout=1)  # 10 s away
        assert limiter.tokens == pytest.approx(before, abs=0.01) and limiter.waiting == 0

    asyncio.run(main())
    assert limiter.stats().timeouts == 1


def test_a_cancelled_waiter_gives_its_reservation_back(name: str) -> None:
    limiter = Limiter(1, 10, burst=1, store=SharedMemoryStore(name))

    async def main() -> None:
        assert limiter.try_acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0.05)  # queued, its reservation taken
        assert limiter.tokens < 0.1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        # restored: the next reservation is where the cancelled one was, not 10 s after it
        fit = limiter._segment.fit_at(1.0, limiter._segment.now())
        assert fit - time.monotonic_ns() < 10.5e9
        assert limiter.waiting == 0

    asyncio.run(main())


def test_a_reservation_passes_to_the_next_waiter_of_the_process(name: str) -> None:
    limiter = Limiter(20, 1, burst=1, store=SharedMemoryStore(name))

    async def main() -> None:
        assert limiter.try_acquire()
        first = asyncio.ensure_future(limiter.acquire())
        second = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0.01)
        at = limiter._slot.at
        first.cancel()
        await asyncio.sleep(0)
        assert limiter._slot is not None and limiter._slot.at == at  # the same slot, now the second's
        await second

    asyncio.run(main())


def test_penalize_pauses_another_limiter_on_the_store(name: str) -> None:
    a = Limiter(100, 1, burst=5, store=SharedMemoryStore(name))
    b = Limiter(100, 1, burst=5, store=SharedMemoryStore(name))

    async def main() -> float:
        a.penalize(0.3)
        start = time.monotonic()
        await b.acquire()
        return time.monotonic() - start

    assert asyncio.run(main()) >= 0.29


def test_set_rate_is_seen_by_another_limiter_on_the_store(name: str) -> None:
    a = Limiter(1, 1, burst=1, initial=0, store=SharedMemoryStore(name))
    b = Limiter(1, 1, burst=1, initial=0, store=SharedMemoryStore(name))
    a.set_rate(1, 3600, burst=1)
    fit = b._segment.fit_at(1.0, b._segment.now())
    assert fit - time.monotonic_ns() > 3000e9  # an hour for a token now, not a second


def test_threads_block_on_the_shared_store(name: str) -> None:
    import threading

    limiter = Limiter(40, 1, burst=1, store=SharedMemoryStore(name))
    done: list[float] = []

    def worker() -> None:
        for _ in range(3):
            limiter.acquire_blocking()
            done.append(time.monotonic())

    threads = [threading.Thread(target=worker) for _ in range(3)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN)
    assert len(done) == 9 and max(done) - start >= 8 / 40 - 0.01


# ---- processes ----

@pytest.mark.parametrize("tasks", [1, 50])
def test_processes_share_one_bound(name: str, tasks: int) -> None:
    rate, burst, n = 400, 5, 4
    logs = run_workers(take_until, [(name, (rate, 1), {"burst": burst}, tasks, 1_000_000_000)] * n)
    counted = [t for _, c, _ in logs for t in c]
    made = [t for _, _, m in logs for t in m]
    assert all(len(c) > 0 for _, c, _ in logs)  # every process was granted
    assert excess(counted, 1e9 / rate, burst) <= 1e-6  # exact, where the segment counted them
    assert excess(made, 1e9 / rate, burst) <= n + 1e-6  # when made: one reservation per process late at most
    expected = burst + rate * (max(counted) - min(counted)) / 1e9
    assert 0.8 * expected <= len(counted) <= expected + 1e-6


def test_try_acquire_from_processes_keeps_the_bound(name: str) -> None:
    rate, burst, n = 10_000, 100, 4
    logs = run_workers(try_until, [(name, (rate, 1), {"burst": burst}, 500_000_000)] * n)
    counted = [t for _, c, _ in logs for t in c]
    assert excess(counted, 1e9 / rate, burst) <= 1e-6
    assert burst < len(counted) <= burst + rate * (max(counted) - min(counted)) / 1e9 + 1e-6


def test_a_stopped_process_releases_no_backlog(name: str) -> None:
    rate, burst, n = 200, 2, 3
    def stop_one(processes: list[Any]) -> None:
        time.sleep(0.5)
        os.kill(processes[0].pid, signal.SIGSTOP)
        time.sleep(0.15)
        os.kill(processes[0].pid, signal.SIGCONT)

    logs = run_workers(take_until, [(name, (rate, 1), {"burst": burst}, 20, 1_500_000_000)] * n, during=stop_one)
    made = [t for _, _, m in logs for t in m]
    assert excess([t for _, c, _ in logs for t in c], 1e9 / rate, burst) <= 1e-6
    assert excess(made, 1e9 / rate, burst) <= n + 1e-6


def test_a_killed_process_leaves_the_store_working(name: str) -> None:
    """Two processes after a third was killed mid-run get the rate, less what the victim held, as far as this
    machine keeps up: the same two processes on a store of their own, just before and just after, sustain what
    the machine can now (the lesser of the two runs); the survivors get 0.8 x that or the rate, whichever is
    less. (They got 177 grants in a second against 200 once, the machine loaded by other tests.)"""
    rate, burst = 200, 5
    Limiter(rate, 1, burst=burst, store=SharedMemoryStore(name))  # created here
    results, ready = SPAWN.Queue(), SPAWN.Barrier(2)
    victim = SPAWN.Process(target=take_until, args=(name, (rate, 1), {"burst": burst}, 20, 60 * 10**9, ready, results))
    victim.start()
    ready.wait(JOIN)
    time.sleep(0.3)
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(JOIN)

    def granted_per_second(store_name: str) -> tuple[list[int], float]:
        logs = run_workers(take_until, [(store_name, (rate, 1), {"burst": burst}, 20, 1_000_000_000)] * 2)
        counted = [t for _, c, _ in logs for t in c]
        return counted, len(counted) / ((max(counted) - min(counted)) / 1e9)

    def unharmed() -> float:
        fresh = f"{name}-alone"
        try:
            Limiter(rate, 1, burst=burst, store=SharedMemoryStore(fresh))
            return granted_per_second(fresh)[1]
        finally:
            SharedMemoryStore.unlink(fresh)

    before = unharmed()
    counted, survivors = granted_per_second(name)
    machine = min(before, unharmed())
    assert survivors >= min(0.8 * rate, 0.8 * machine), (survivors, machine)
    assert excess(counted, 1e9 / rate, burst) <= 1e-6


# ---- the rest of the API over the store ----

def test_reserve_decorator_and_slot_over_the_store(name: str) -> None:
    limiter = Limiter(50, 1, burst=1, store=SharedMemoryStore(name))
    calls: list[float] = []

    @limiter
    async def call() -> None:
        calls.append(time.monotonic())

    async def main() -> None:
        assert limiter.try_acquire()
        reservation = limiter.reserve()
        assert 0 < reservation.delay <= 0.03
        await reservation
        async with limiter.slot():
            calls.append(time.monotonic())
        await call()
        await limiter.acquire(1, timeout=1)

    start = time.monotonic()
    asyncio.run(main())
    assert len(calls) == 2 and time.monotonic() - start >= 4 / 50 - 0.005
    assert limiter.stats().granted == 5


def test_several_rates_are_checked_together(name: str) -> None:
    limiter = Limiter(rates=[(100, 1, 3), (4, 60, 4)], store=SharedMemoryStore(name))
    other = Limiter(rates=[(100, 1, 3), (4, 60, 4)], store=SharedMemoryStore(name))
    assert limiter.try_acquire(3)
    assert not other.try_acquire(2)  # the first rate is empty
    time.sleep(0.02)
    assert other.try_acquire(1)  # the second rate's last token
    time.sleep(0.02)
    assert not limiter.try_acquire(1)  # the first rate has one again, the second none for 15 s
    with pytest.raises(TimeoutError):
        asyncio.run(limiter.acquire(1, timeout=5))


def test_with_limiter_in_threads_and_loops_together(name: str) -> None:
    import threading

    limiter = Limiter(100, 1, burst=1, store=SharedMemoryStore(name))
    granted: list[str] = []

    def blocking() -> None:
        for _ in range(5):
            with limiter:
                granted.append("thread")

    async def tasks() -> None:
        async def one() -> None:
            async with limiter:
                granted.append("task")

        await asyncio.gather(*(one() for _ in range(5)))

    threads = [threading.Thread(target=blocking), threading.Thread(target=asyncio.run, args=(tasks(),))]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN)
    assert sorted(granted) == ["task"] * 5 + ["thread"] * 5
    assert time.monotonic() - start >= 9 / 100 - 0.005  # one grant per 10 ms, both kinds of owner together


def test_a_waiter_above_a_new_burst_fails(name: str) -> None:
    limiter = Limiter(1, 10, burst=3, store=SharedMemoryStore(name))

    async def main() -> None:
        assert limiter.try_acquire(3)
        first = asyncio.ensure_future(limiter.acquire(1))  # the head: it holds the reservation
        big = asyncio.ensure_future(limiter.acquire(3))  # queued behind it
        await asyncio.sleep(0.01)
        limiter.set_rate(1, 10, burst=2)
        with pytest.raises(ValueError, match="new burst"):
            await big
        assert limiter.waiting == 1
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)

    asyncio.run(main())


def test_try_acquire_on_a_virtual_clock_is_refused(name: str) -> None:
    limiter = Limiter(10, 1, store=SharedMemoryStore(name))

    async def main() -> None:
        with pytest.raises(RuntimeError, match="virtual or patched clock"):
            limiter.try_acquire()
        with pytest.raises(RuntimeError, match="virtual or patched clock"):
            async with limiter:
                pass

    loop = VirtualClockLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert limiter.try_acquire()  # outside that loop: CLOCK_MONOTONIC again


def test_keys_cannot_share_one_store(name: str) -> None:
    with pytest.raises(TypeError, match="KeyedLimiter takes no SharedMemoryStore"):
        aiotb.KeyedLimiter(5, 1, store=SharedMemoryStore(name))


def test_a_reservation_reached_late_is_not_used_as_it_stands(name: str) -> None:
    limiter = Limiter(10, 1, burst=1, store=SharedMemoryStore(name))

    async def main() -> float:
        assert limiter.try_acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        for _ in range(3):
            await asyncio.sleep(0)  # queued: its reservation is 100 ms away
        assert limiter._slot is not None
        time.sleep(0.3)  # the loop stalls past it by 200 ms, more than a token's time
        await waiter
        return limiter.tokens

    # Counted 200 ms before its use, the reserved token would come on top of the one the bucket refilled
    # meanwhile (1.0 left now); taken afresh instead, it leaves nothing (the stale one is lost).
    assert asyncio.run(main()) < 0.5


class FailingSegment:
    """A segment whose reserve answers corrupt (SHM_EFOREIGN) for the amounts in failing, as one fought over past
    its bound does; everything else is the real segment's. Each waiter of the test asks for an amount of its own,
    so a refusal names its waiter even when a waiter reached late reserves again."""

    def __init__(self, segment: Segment, failing: set[float]) -> None:
        self.segment, self.failing, self.amounts = segment, failing, list[float]()

    def reserve(self, amount: float, now: int, deadline: int) -> tuple[int, int, bytes]:
        self.amounts.append(amount)
        if amount in self.failing:
            return SHM_EFOREIGN, 0, b""
        return self.segment.reserve(amount, now, deadline)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.segment, attribute)


AMOUNTS = [1.0, 0.75, 0.5, 0.25]  # the four waiters', in their order of arrival


@pytest.mark.parametrize("failing", [{0}, {1}, {2}, {1, 2}])
def test_a_reservation_the_segment_refuses_fails_its_waiter_only(name: str, failing: set[int]) -> None:
    """A reserve that meets a corrupt segment fails that waiter with StoreCorrupt; the waiters granted in the same
    pass and those behind it are granted as usual. Before, its waiter was set aside and the pass raised: the
    grants it had made were lost and the waiters behind it had no timer, so their tasks waited forever."""
    limiter = Limiter(200, 1, burst=1, initial=0, store=SharedMemoryStore(name))  # a token every 5 ms
    rates = limiter._store_rates  # type: ignore[attr-defined]
    segment = FailingSegment(rates.segment, {AMOUNTS[i] for i in failing})
    rates._segment = segment  # the queue's reservations go through it

    async def main() -> list[str]:
        async def task(amount: float) -> str:
            try:
                await limiter.acquire(amount)
                return "granted"
            except StoreCorrupt as error:
                assert "corrupt" in str(error)
                return "StoreCorrupt"

        return await asyncio.wait_for(asyncio.gather(*(task(amount) for amount in AMOUNTS)), 10)

    outcomes = asyncio.run(main())
    assert outcomes == ["StoreCorrupt" if i in failing else "granted" for i in range(4)], outcomes
    assert limiter.waiting == 0
    # Every waiter reserved (in order of arrival, each first time), and a refused one only once: it failed there.
    assert list(dict.fromkeys(segment.amounts)) == AMOUNTS, segment.amounts
    assert all(segment.amounts.count(AMOUNTS[i]) == 1 for i in failing), segment.amounts


def test_settle_gives_back_and_takes_debt_for_every_process(name: str) -> None:
    """settle over a SharedMemoryStore: the difference back to each rate (never fuller than full) or taken now as
    debt, seen by a second limiter of the segment; 10 tokens an hour, so the test's own time refills nothing
    that counts (a token in 6 minutes)."""
    rates = [(10, 3600), (20, 3600, 12)]
    a, b = (Limiter(rates=rates, store=SharedMemoryStore(name)) for _ in range(2))

    async def main() -> list[float]:
        seen = []
        await a.acquire(5)
        a.settle(5, 2)  # 3 back to each rate
        seen.append(b.tokens)  # 10 - 2
        await b.acquire(4)
        await b.asettle(4, 7)  # 3 more, now
        seen.append(a.tokens)  # 8 - 7
        async with a.slot(1) as slot:
            await slot.asettle(11)  # 10 more: owed 10 past empty
        seen.append(b.tokens)
        seen.append(await b._store_rates.fit_delay(1) / 1e9)  # 11 tokens of the first rate: 11 × 360 s
        b.settle(1, 0)  # a refund reaches no fuller than full
        return seen

    seen = asyncio.run(main())
    assert seen[:3] == [pytest.approx(8, abs=0.01), pytest.approx(1, abs=0.01), 0.0]
    assert seen[3] == pytest.approx(11 * 360, abs=2)


@pytest.mark.parametrize("taken, used, error, words", [
    (0, 1, ValueError, "taken"), (11, 1, ValueError, "taken must not exceed burst"), ("x", 1, TypeError, "taken"),
    (1, -1, ValueError, "used"), (1, float("inf"), ValueError, "used"), (1, 1e30, ValueError, "2.28 years")])
def test_settle_refuses_bad_input_by_name_changing_nothing(name: str, taken: Any, used: Any,
                                                           error: type[Exception], words: str) -> None:
    limiter = Limiter(10, 3600, store=SharedMemoryStore(name))
    assert limiter.try_acquire(4)
    before = limiter.tokens
    with pytest.raises(error, match=words):
        limiter.settle(taken, used)
    assert limiter.tokens == pytest.approx(before, abs=0.01)
