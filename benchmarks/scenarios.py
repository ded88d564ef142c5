"""The scenarios, written once against the Competitor interface.

Every function here runs inside one child process on an already running loop
and returns plain data; statistics that need numpy are computed after the
measured part, so numpy never shows in the CPU or RSS figures."""

from __future__ import annotations

import asyncio
import gc
import math
import random
import resource
import sys
import time
from array import array
from typing import Any

from competitor import Competitor

STEADY_AFTER = 0.5  # s after the first grant: waiters due later are "steady state"
WINDOW = 1.0  # s: the sliding window for the token-bucket bound
CURVE_POINTS = 800  # samples of the cumulative-grants curve kept for plots
QUANTILES = [q / 2 for q in range(201)] + [99.9]  # lateness percentiles kept for plots
LATE_CREDIT_TOKENS = 0.75  # a burst-1 grant taken late is booked up to this much of a token earlier (aiotb's rule)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


# ---- uncontended: `async with limiter:` with tokens always available ----

async def _time_async_with(limiter: Any, iterations: int) -> int:
    clock = time.thread_time_ns  # CPU time: a shared machine's preemptions do not count
    start = clock()
    for _ in range(iterations):
        async with limiter:
            pass
    return clock() - start


async def _time_await(acquire: Any, iterations: int) -> int:
    clock = time.thread_time_ns  # CPU time: a shared machine's preemptions do not count
    start = clock()
    for _ in range(iterations):
        await acquire()
    return clock() - start


async def _time_empty(iterations: int) -> int:
    clock = time.thread_time_ns  # CPU time: a shared machine's preemptions do not count
    start = clock()
    for _ in range(iterations):
        pass
    return clock() - start


async def _time_one(competitor: Competitor, limiter: Any, iterations: int) -> int:
    if competitor.empty_body:
        return await _time_empty(iterations)
    if competitor.context_manager:
        return await _time_async_with(limiter, iterations)
    return await _time_await(competitor.acquire(limiter), iterations)


async def uncontended(competitors: list[Competitor], iterations: int, repetitions: int,
                      budget_s: float, loop_name: str, together: int) -> dict[str, Any]:
    """ns per iteration for each competitor, measured round-robin.

    A competitor whose calibration shows that `iterations` would take longer
    than budget_s runs fewer iterations (reported); each limiter is built once
    with a rate so high that its tokens never run out. The first `together`
    competitors always run back to back: the rotation moves them as one."""
    rate = 1e12
    limiters = {c.key: c.make(rate, None) for c in competitors}
    counts: dict[str, int] = {}
    for competitor in competitors:  # calibration, which is also the warm-up
        probe = 20_000
        ns = await _time_one(competitor, limiters[competitor.key], probe) / probe
        fits = int(budget_s * 1e9 / max(ns, 1e-3))
        counts[competitor.key] = iterations if fits >= iterations else max(10_000, fits // 10_000 * 10_000)
    samples: dict[str, list[float]] = {c.key: [] for c in competitors}
    for repetition in range(repetitions):
        block = competitors[:together]
        block = block[repetition % together:] + block[:repetition % together]
        units = [block] + [[c] for c in competitors[together:]]
        shift = repetition % len(units)  # rotate who goes first
        for competitor in [c for unit in units[shift:] + units[:shift] for c in unit]:
            gc.collect()
            await asyncio.sleep(0)
            n = counts[competitor.key]
            samples[competitor.key].append(await _time_one(competitor, limiters[competitor.key], n) / n)
        print(f"  uncontended {loop_name}: repetition {repetition + 1}/{repetitions} done", file=sys.stderr,
              flush=True)
    return {"iterations": counts, "ns": samples}


# ---- how often the loop can wake a sleeping task ----

async def wakeups(period_s: float, duration_s: float) -> dict[str, Any]:
    """Wake-ups per second, and CPU % of wall, of one task that sleeps period_s at a time.

    A bucket of burst 1 may grant about one token per wake-up of the loop (a second one in
    the same wake-up would exceed burst + rate * t by up to a token), so this bounds the rate
    any limiter that keeps the bound can reach by timers alone, without polling."""
    wakes = 0
    cpu_start, start = time.process_time(), time.monotonic()
    while (elapsed := time.monotonic() - start) < duration_s:
        await asyncio.sleep(period_s)
        wakes += 1
    return {"period_s": period_s, "wakes_per_s": wakes / elapsed,
            "cpu_pct": 100 * (time.process_time() - cpu_start) / elapsed, "complete": True}


# ---- releasing many waiters at once ----

class CollectorTimes:
    """A gc.callbacks hook: how long the cyclic garbage collector paused the program."""

    def __init__(self) -> None:
        self.started = 0.0
        self.pauses: list[float] = []
        self.full = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        self.pauses.append(time.perf_counter() - self.started)
        self.full += info["generation"] == 2

    def summary(self) -> dict[str, float]:
        return {"total_s": sum(self.pauses), "max_ms": 1e3 * max(self.pauses, default=0.0),
                "collections": len(self.pauses), "full": self.full}


async def release_waiters(competitor: Competitor, limiter: Any, n: int, *, amounts: list[int] | None = None,
                          cancel_at: dict[int, float] | None = None, limit_s: float) -> dict[str, Any]:
    """Starts n tasks parked on one asyncio.Event, sets it, and records when each is granted.

    Grant time is time.monotonic() when the task resumes after acquiring: the clock
    asyncio's loop.time() reads, at full resolution (uvloop's loop.time() is that
    clock cached per loop iteration and rounded to the millisecond). cancel_at maps
    a task index to seconds after the release at which that task is cancelled.
    Stops waiting limit_s after the release; unfinished tasks are reported."""
    loop = asyncio.get_running_loop()
    clock = time.monotonic
    nan = math.nan
    grants = array("d", [nan]) * n
    release = asyncio.Event()
    all_done = loop.create_future()
    pending = [n]

    def settle() -> None:
        pending[0] -= 1
        if not pending[0] and not all_done.done():
            all_done.set_result(None)

    if amounts is not None:
        assert competitor.acquire_amount is not None
        take = competitor.acquire_amount(limiter)

        async def waiter(i: int) -> None:
            try:
                await release.wait()
                await take(amounts[i])
                grants[i] = clock()
            finally:
                settle()
    elif competitor.context_manager:
        async def waiter(i: int) -> None:
            try:
                await release.wait()
                async with limiter:
                    grants[i] = clock()
            finally:
                settle()
    else:
        take_one = competitor.acquire(limiter)

        async def waiter(i: int) -> None:
            try:
                await release.wait()
                await take_one()
                grants[i] = clock()
            finally:
                settle()

    rss_base = peak_rss_mb()
    setup_start = clock()
    tasks = [loop.create_task(waiter(i)) for i in range(n)]
    await asyncio.sleep(0)  # every task runs once and parks on the event
    setup_s = clock() - setup_start

    collector = CollectorTimes()
    gc.callbacks.append(collector)
    cpu_start = time.process_time()
    released = clock()
    release.set()
    if cancel_at:
        for i, after in cancel_at.items():
            loop.call_at(loop.time() + after, tasks[i].cancel)
    await asyncio.wait([all_done], timeout=limit_s)
    finished = clock()
    cpu = time.process_time() - cpu_start
    gc.callbacks.remove(collector)
    rss_peak = peak_rss_mb()
    complete = all_done.done()
    if complete:
        tasks.clear()
    return {
        "complete": complete,
        "n": n,
        "grants": grants,
        "released": released,
        "wall": finished - released,
        "cpu": cpu,
        "setup_s": setup_s,
        "rss_base_mb": rss_base,
        "rss_peak_mb": rss_peak,
        "gc": collector.summary(),
        "_tasks": tasks,  # kept alive until the caller has reported; empty when all finished
    }


def _wake_lateness(granted: list[float], rate: float) -> Any:
    """How late each grant of a burst-1 run came after the instant the bucket allowed it: a bucket of burst 1
    at rate, replayed over the grants made, allows each one token interval after the instant the one
    before it was booked, and books a grant at that instant, or up to LATE_CREDIT_TOKENS of a token
    before the grant if it came later (so a late wake-up costs the rate only beyond that credit). The
    first grant is due when it came. Lost time shows in the achieved rate, not here."""
    import numpy as np

    interval, credit = 1 / rate, LATE_CREDIT_TOKENS / rate
    late = np.empty(len(granted))
    booked = granted[0] - interval
    for k, at in enumerate(granted):
        due = booked + interval
        late[k] = at - due
        booked = max(due, at - credit)
    return late


def _grant_stats(run: dict[str, Any], rate: float, burst: float) -> dict[str, Any]:
    """Rate, CPU, lateness against the unit-request bucket schedule, windows, memory."""
    import numpy as np

    granted = np.sort(np.frombuffer(run["grants"], dtype=float))
    granted = granted[~np.isnan(granted)]
    count = int(granted.size)
    out: dict[str, Any] = {
        "complete": run["complete"],
        "n": run["n"],
        "granted": count,
        "wall": run["wall"],
        "cpu": run["cpu"],
        "cpu_us_per_grant": run["cpu"] / count * 1e6 if count else None,
        "cpu_pct": 100 * run["cpu"] / run["wall"] if run["wall"] > 0 else None,
        "setup_s": run["setup_s"],
        "rss_peak_mb": run["rss_peak_mb"],
        "rss_growth_mb": run["rss_peak_mb"] - run["rss_base_mb"],
        "gc": run["gc"],
    }
    if count < 2:
        return out
    first = granted[0]
    span = granted[-1] - first
    paced = count - min(count, int(burst))  # grants after the initial burst
    achieved = paced / span if span > 0 and paced > 0 else None
    out["span"] = float(span)
    out["first_grant_after"] = float(first - run["released"])
    out["achieved_rate"] = achieved
    out["rate_error_pct"] = 100 * (achieved - rate) / rate if achieved else None

    k = np.arange(count)
    ideal = first + np.maximum(0, k - burst + 1) / rate
    lateness = granted - ideal
    steady = lateness[ideal - first >= STEADY_AFTER]
    paced_steady = granted[ideal - first >= STEADY_AFTER]
    if paced_steady.size > 1 and paced_steady[-1] > paced_steady[0]:  # the rate once the release is over
        steady_rate = (paced_steady.size - 1) / (paced_steady[-1] - paced_steady[0])
        out["steady_rate_error_pct"] = 100 * (steady_rate - rate) / rate
    out["lateness_ms"] = _summary(lateness)
    out["steady_lateness_ms"] = _summary(steady)
    out["lateness_quantiles_ms"] = (np.percentile(lateness, QUANTILES) * 1e3).tolist()
    out["steady_quantiles_ms"] = (np.percentile(steady, QUANTILES) * 1e3).tolist() if steady.size else None

    if burst == 1:
        wake = _wake_lateness(granted.tolist(), rate)
        out["wake_lateness_ms"] = _summary(wake)
        out["wake_quantiles_ms"] = (np.percentile(wake, QUANTILES) * 1e3).tolist()

    ends = np.searchsorted(granted, granted + WINDOW, side="left")  # window [t, t + WINDOW)
    in_window = ends - k
    bound = burst + rate * WINDOW
    out["max_in_window"] = int(in_window.max())
    out["window_bound"] = bound
    out["windows_over_bound"] = int((in_window > bound + 1e-9).sum())

    step = max(1, count // CURVE_POINTS)
    picks = np.unique(np.append(np.arange(0, count, step), count - 1))
    out["curve"] = [[float(granted[i] - first), int(i + 1)] for i in picks]
    return out


def _summary(values: Any) -> dict[str, float] | None:
    import numpy as np

    if not values.size:
        return None
    p50, p99 = np.percentile(values, [50, 99]) * 1e3
    return {"p50": float(p50), "p99": float(p99), "max": float(values.max() * 1e3), "count": int(values.size)}


# ---- the scenarios that run in one child process per repetition ----

async def contended(competitor: Competitor, n: int, rate: float, burst: float, limit_s: float) -> dict[str, Any]:
    """n waiters released together on Limiter(rate, 1, burst=burst), one token each."""
    limiter = competitor.make(rate, burst)
    run = await release_waiters(competitor, limiter, n, limit_s=limit_s)
    stats = _grant_stats(run, rate, burst)
    stats.update(rate=rate, burst=burst)
    return stats


async def classic(competitor: Competitor, n: int, rate: float, burst: float, limit_s: float) -> dict[str, Any]:
    """The README example: n requests at `rate`/s, all at once."""
    return await contended(competitor, n, rate, burst, limit_s)


async def mixed(competitor: Competitor, n: int, rate: float, burst: float, big: int, every: int,
                limit_s: float) -> dict[str, Any]:
    """acquire(1) and acquire(big) interleaved in arrival order: how long do the big ones wait?"""
    amounts = [big if i % every == every - 1 else 1 for i in range(n)]
    limiter = competitor.make(rate, burst)
    run = await release_waiters(competitor, limiter, n, amounts=amounts, limit_s=limit_s)
    return _mixed_stats(run, amounts, rate, burst, big)


def _mixed_stats(run: dict[str, Any], amounts: list[int], rate: float, burst: float, big: int) -> dict[str, Any]:
    import numpy as np

    grants = np.frombuffer(run["grants"], dtype=float) - run["released"]
    sizes = np.array(amounts)
    ideal = np.maximum(0, np.cumsum(sizes) - burst) / rate  # FIFO in arrival order
    is_big = sizes == big
    done = ~np.isnan(grants)
    out: dict[str, Any] = {
        "complete": run["complete"],
        "n": run["n"],
        "granted": int(done.sum()),
        "wall": run["wall"],
        "cpu": run["cpu"],
        "cpu_us_per_grant": run["cpu"] / max(1, int(done.sum())) * 1e6,
        "rss_peak_mb": run["rss_peak_mb"],
        "gc": run["gc"],
        "rate": rate,
        "burst": burst,
        "tokens": int(sizes.sum()),
        "ideal_span": float(np.sum(sizes) - burst) / rate,
    }
    for name, mask in (("big", is_big), ("small", ~is_big)):
        waited = grants[mask & done]
        out[f"{name}_wait_s"] = ({"p50": float(np.median(waited)), "p99": float(np.percentile(waited, 99)),
                                  "max": float(waited.max())} if waited.size else None)
        out[f"{name}_delay_vs_fifo_s"] = (float(np.median(grants[mask & done] - ideal[mask & done]))
                                          if waited.size else None)
    small_done = grants[~is_big & done]
    big_done = grants[is_big & done]
    out["big_after_last_small"] = int((big_done > small_done.max()).sum()) if small_done.size else None
    out["big_count"] = int(is_big.sum())
    return out


async def churn(competitor: Competitor, n: int, rate: float, burst: float, share: float, seed: int,
                limit_s: float) -> dict[str, Any]:
    """n waiters; a random `share` of those beyond the initial burst is cancelled while waiting.

    Waiter i (arrival order) expects its turn about (i - burst) / rate after the
    release; if chosen, it is cancelled at a uniform time in
    [0, (1 - share) * (i - burst) / rate), so that most are still waiting when
    cancelled (those granted first are counted as granted)."""
    first = min(n, int(burst))
    chooser = random.Random(seed)
    chosen = chooser.sample(range(first, n), round(share * (n - first)))
    cancel_at = {i: chooser.uniform(0, (1 - share) * (i - first) / rate) for i in chosen}
    limiter = competitor.make(rate, burst)
    run = await release_waiters(competitor, limiter, n, cancel_at=cancel_at, limit_s=limit_s)
    stats = _grant_stats(run, rate, burst)
    stats.update(rate=rate, burst=burst, cancelled=n - stats["granted"] if run["complete"] else None,
                 chosen=len(chosen))
    for heavy in ("curve", "lateness_quantiles_ms", "steady_quantiles_ms"):
        stats.pop(heavy, None)
    return stats
