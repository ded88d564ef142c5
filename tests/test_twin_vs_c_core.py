"""The twin of the core against the C core itself: the same random operations replayed on
``aiotb._queue_py.Bucket`` and on ``tb_bucket`` (src/_tokenbucket/limits.c, rate.c, window.c and queue.c, compiled
here into a shared library and called through ctypes) must give the same results, bit for bit:
every instant, token count, id, grant order, statistic and each rate's "full again" word.
Skipped without a C compiler."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiotb import _limits_py
from aiotb._limits_py import NEVER, OK
from aiotb._queue_py import FIFO, GRANT, SKIP, SMALLEST_FIRST, STOP, Bucket

SOURCES = Path(__file__).resolve().parent.parent / "src" / "_tokenbucket"

SHIM = r"""
#include "queue.h"
#include <stdlib.h>

tb_bucket *shim_new(void) { return calloc(1, sizeof(tb_bucket)); }
void shim_free(tb_bucket *b) { tb_release(b); free(b); }
int64_t shim_state(const tb_bucket *b, uint32_t i) { return b->limits.state[i]; }
void shim_queue(const tb_bucket *b, uint64_t *waiting, double *sum, double *error, double *max_amount,
                int64_t *paused_until, int64_t *limited_until, double *limited_left, int64_t *grants_until,
                double *max_request)
{
    *waiting = b->waiting;
    *sum = b->queued_tokens;
    *error = b->queued_error;
    *max_amount = b->limits.max_amount;
    *paused_until = b->limits.paused_until;
    *limited_until = b->limits.limited_until;
    *limited_left = b->limits.limited_left;
    *grants_until = b->limits.grants_until;
    *max_request = b->limits.max_request;
}
void shim_window(const tb_bucket *b, int64_t *ats, double *amounts, uint32_t most, uint32_t *count, double *held,
                 uint64_t *holds)
{
    const tb_window *w = &b->limits.window;
    *count = w->log_count;
    for (uint32_t i = 0; i < w->log_count && i < most; i++) {
        ats[i] = w->log[(w->log_first + i) % w->log_capacity].at;
        amounts[i] = w->log[(w->log_first + i) % w->log_capacity].amount;
    }
    *held = w->held;
    *holds = w->holds;
}
void shim_stats(const tb_bucket *b, uint64_t counts[4], double sums[2], int64_t *wait_max)
{
    counts[0] = b->stats.granted;
    counts[1] = b->stats.waits;
    counts[2] = b->stats.cancelled;
    counts[3] = b->stats.timeouts;
    sums[0] = b->stats.granted_tokens;
    sums[1] = b->stats.wait_ns_total;
    *wait_max = b->stats.wait_ns_max;
}
"""

DECIDE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double)
ns_t, dbl, u32, vp = ctypes.c_int64, ctypes.c_double, ctypes.c_uint32, ctypes.c_void_p


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("core")
    (folder / "shim.c").write_text(SHIM)
    library = folder / "libcore.so"
    subprocess.run([compiler, "-std=c11", "-O1", "-fPIC", "-shared", "-DNDEBUG", f"-I{SOURCES}",
                    str(SOURCES / "limits.c"), str(SOURCES / "rate.c"), str(SOURCES / "window.c"), str(SOURCES / "queue.c"), str(folder / "shim.c"),
                    "-o", str(library), "-lm"], check=True)
    lib = ctypes.CDLL(str(library))
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "shim_new": (vp, []), "shim_free": (None, [vp]),
        "shim_state": (ns_t, [vp, u32]),
        "shim_queue": (None, [vp, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(dbl), ctypes.POINTER(dbl),
                              ctypes.POINTER(dbl), ctypes.POINTER(ns_t), ctypes.POINTER(ns_t), ctypes.POINTER(dbl),
                              ctypes.POINTER(ns_t), ctypes.POINTER(dbl)]),
        "shim_window": (None, [vp, ctypes.POINTER(ns_t), ctypes.POINTER(dbl), u32, ctypes.POINTER(u32),
                                ctypes.POINTER(dbl), ctypes.POINTER(ctypes.c_uint64)]),
        "shim_stats": (None, [vp, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(dbl), ctypes.POINTER(ns_t)]),
        "tb_init": (ctypes.c_int, [vp, dbl, dbl, dbl, ctypes.c_bool, ctypes.c_int]),
        "tb_init_window": (ctypes.c_int, [vp, ns_t, dbl, ctypes.c_bool, ctypes.c_int]),
        "tb_add_rate": (ctypes.c_int, [vp, dbl, dbl, dbl]),
        "tb_tokens": (dbl, [vp, ns_t]), "tb_can_take": (ctypes.c_bool, [vp, dbl, ns_t]),
        "tb_take": (ctypes.c_bool, [vp, dbl, ns_t]),
        "tb_enqueue": (ctypes.c_int, [vp, dbl, ns_t, ns_t, vp, vp, ctypes.POINTER(ctypes.c_uint64)]),
        "tb_withdraw": (vp, [vp, ctypes.c_uint64]), "tb_withdraw_head": (vp, [vp]),
        "tb_withdraw_first_of": (vp, [vp, vp]), "tb_first_due_of": (ns_t, [vp, vp, ns_t]),
        "tb_grant_due": (ns_t, [vp, ns_t, DECIDE, vp]), "tb_projected_grant": (ns_t, [vp, dbl, ns_t]),
        "tb_withdraw_stranded": (vp, [vp, ns_t, ctypes.POINTER(ctypes.c_bool)]),
        "tb_settle": (ctypes.c_int, [vp, dbl, dbl, ctypes.c_bool, ns_t]),
        "tb_refund": (None, [vp, dbl, ns_t]), "tb_reckon_late": (None, [vp, dbl, ns_t]), "tb_set_late_credit": (None, [vp, dbl]),
        "tb_hold": (None, [vp, dbl]), "tb_end_hold": (None, [vp, dbl, ns_t]),
        "tb_set_rate": (ctypes.c_int, [vp, u32, dbl, dbl, ns_t]), "tb_set_window": (ctypes.c_int, [vp, ns_t, dbl]),
        "tb_pause_until": (None, [vp, ns_t]), "tb_limit_until": (ctypes.c_bool, [vp, dbl, ns_t, ns_t, ns_t]),
        "tb_rebase": (None, [vp, ns_t, ns_t]),
        "tb_grant_until": (None, [vp, ns_t]), "tb_set_largest": (ctypes.c_int, [vp, dbl]),
        "tb_credit": (ctypes.c_int, [vp, dbl, ns_t]),
        "tb_as_good_as_new": (ctypes.c_bool, [vp, ns_t]), "tb_check": (ctypes.c_int, [vp]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


class Pair:
    """One bucket in C and its twin, driven together; every call returns both answers."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.c = lib.shim_new()
        self.py = Bucket()
        self.nrates = 0

    def close(self) -> None:
        self.lib.shim_free(self.c)

    def call(self, name: str, *args: Any) -> tuple[Any, Any]:
        return getattr(self.lib, "tb_" + name)(self.c, *args), getattr(self.py, name)(*args)

    def state(self) -> tuple[Any, Any]:
        """Everything both can tell about themselves, for comparison."""
        lib, c = self.lib, self.c
        rates = [lib.shim_state(c, i) for i in range(self.nrates)]
        waiting, total, error, most, paused = ctypes.c_uint64(), dbl(), dbl(), dbl(), ns_t()
        limited_until, limited_left, grants_until, max_request = ns_t(), dbl(), ns_t(), dbl()
        lib.shim_queue(c, ctypes.byref(waiting), ctypes.byref(total), ctypes.byref(error), ctypes.byref(most),
                       ctypes.byref(paused), ctypes.byref(limited_until), ctypes.byref(limited_left),
                       ctypes.byref(grants_until), ctypes.byref(max_request))
        counts, sums, wait_max = (ctypes.c_uint64 * 4)(), (dbl * 2)(), ns_t()
        lib.shim_stats(c, counts, sums, ctypes.byref(wait_max))
        in_c = (rates, waiting.value, total.value, error.value, most.value, paused.value, limited_until.value,
                limited_left.value, grants_until.value, max_request.value, list(counts),
                list(sums), wait_max.value, lib.tb_check(c))
        py, s = self.py, self.py.stats
        in_py = (list(py.limits.state), py.waiting, py.queued_tokens,
                 py.queued_error, py.limits.max_amount, py.limits.paused_until, py.limits.limited_until,
                 py.limits.limited_left, py.limits.grants_until, py.limits.max_request,
                 [s.granted, s.waits, s.cancelled, s.timeouts], [s.granted_tokens, s.wait_ns_total],
                 s.wait_ns_max, py.check())
        most, count, held, holds = 4096, u32(), dbl(), ctypes.c_uint64()
        ats, amounts = (ns_t * most)(), (dbl * most)()
        lib.shim_window(c, ats, amounts, most, ctypes.byref(count), ctypes.byref(held), ctypes.byref(holds))
        assert count.value <= most
        log_c = [(ats[i], amounts[i]) for i in range(count.value)]
        window = py.limits.window
        log_py = [(grant.at, grant.amount) for grant in window.log]
        return ((*in_c[:-1], log_c, held.value, holds.value, in_c[-1]),
                (*in_py[:-1], log_py, window.held, window.holds, in_py[-1]))


AMOUNTS = [1.0, 0.5, 2.0, 3.7, 1.07, 0.1, 4.0, 1 / 3]
NS_PER_TOKEN = [1e6, 1e9 / 3, 2.5, 1e9 / 7, 4096.0]
STEPS = [0, 1, 999, 250_000, 1_000_000, 3_333_333, 50_000_000]

configs = st.one_of(
    st.tuples(st.just("rates"), st.lists(st.tuples(st.sampled_from(NS_PER_TOKEN), st.sampled_from([1.0, 4.0, 10.0]),
                                                   st.sampled_from([0.0, 0.5, 1.0])), min_size=1, max_size=3)),
    st.tuples(st.just("window"), st.tuples(st.sampled_from([1000, 1_000_000, 7_777_777]),
                                           st.sampled_from([1.0, 4.0, 10.5]))),
)
operations = st.lists(st.tuples(
    st.sampled_from(["step", "take", "can_take", "tokens", "enqueue", "enqueue_deadline", "withdraw",
                     "withdraw_head", "withdraw_first_of", "first_due_of", "grant_due", "projected_grant", "withdraw_stranded", "refund", "settle", "reckon_late", "hold", "end_hold", "set_rate",
                     "set_window", "pause_until", "limit_until", "rebase", "late_credit", "as_good_as_new", "crowd",
                     "grant_until", "set_largest", "credit"]),
    st.integers(0, 2**16)), max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=configs, fair=st.booleans(), smallest_first=st.booleans(), ops=operations,
       start=st.sampled_from([0, 77_968_000_000_000, -5_000_000_000]))
def test_the_twin_gives_the_c_cores_answers(core, config, fair, smallest_first, ops, start):
    pair = Pair(core)
    order = SMALLEST_FIRST if smallest_first else FIFO
    try:
        kind, spec = config
        if kind == "window":
            assert pair.call("init_window", spec[0], spec[1], fair, order) == (OK, OK)
        else:
            for i, (ns_per_token, burst, fill) in enumerate(spec):
                if i == 0:
                    assert pair.call("init", ns_per_token, burst, burst * fill, fair, order) == (OK, OK)
                else:
                    assert pair.call("add_rate", ns_per_token, burst, burst * fill) == (OK, OK)
            pair.nrates = len(spec)
        replay(pair, ops, start, order)
    finally:
        pair.close()


def owner(handle: int) -> int:
    """Who times a waiter: one of three owners (1 to 3), as several loops and threads share a queue."""
    return handle % 3 + 1


def replay(pair: Pair, ops: list[tuple[str, int]], now: int, order: int) -> None:
    ids: list[int] = []
    granted: list[float] = []  # amounts granted and not refunded, so a refund never wraps C's counts
    held: list[float] = []  # amounts held and not yet ended
    handles = 0
    for op, x in ops:
        amount = AMOUNTS[x % len(AMOUNTS)]
        if op == "step":
            now += STEPS[x % len(STEPS)]
        elif op in ("take", "can_take"):
            c, py = pair.call(op, amount, now)
            assert c == py, op
            if op == "take" and c:
                granted.append(amount)
        elif op in ("tokens", "projected_grant"):
            c, py = pair.call(op, now) if op == "tokens" else pair.call(op, amount, now)
            assert c == py, op
        elif op == "crowd":  # 64 waiters and more: a one-rate projection bounds rather than replays
            for i in range(64 + x % 8):
                handles += 1
                ident = ctypes.c_uint64()
                small = AMOUNTS[(x + i) % len(AMOUNTS)] / 8
                status = pair.lib.tb_enqueue(pair.c, small, now, NEVER, handles, owner(handles), ctypes.byref(ident))
                assert (status, ident.value) == pair.py.enqueue(small, now, NEVER, handles, owner(handles)), op
                ids.append(ident.value)
            assert pair.call("projected_grant", amount, now)[0] == pair.py.projected_grant(amount, now), op
            deadline = now + STEPS[x % len(STEPS)] * 100
            handles += 1
            ident = ctypes.c_uint64()
            status = pair.lib.tb_enqueue(pair.c, amount, now, deadline, handles, owner(handles), ctypes.byref(ident))
            assert (status, ident.value if status == OK else 0) == pair.py.enqueue(amount, now, deadline, handles,
                                                                                   owner(handles)), op
        elif op in ("enqueue", "enqueue_deadline"):
            handles += 1
            deadline = now + STEPS[x % len(STEPS)] * 3 if op == "enqueue_deadline" and order == FIFO else NEVER
            ident = ctypes.c_uint64()
            status = pair.lib.tb_enqueue(pair.c, amount, now, deadline, handles, owner(handles), ctypes.byref(ident))
            py_status, py_ident = pair.py.enqueue(amount, now, deadline, handles, owner(handles))
            assert (status, ident.value if status == OK else 0) == (py_status, py_ident), op
            if status == OK:
                ids.append(py_ident)
        elif op == "withdraw":
            ident = ids[x % len(ids)] if ids and x % 5 else x << 32 | x % 20
            c, py = pair.call("withdraw", ident)
            assert c == py, op
        elif op == "withdraw_head":
            c, py = pair.call(op)
            assert c == py, op
        elif op == "withdraw_first_of":  # owner 0 has no waiters
            c, py = pair.call(op, x % 4)
            assert c == py, op
        elif op == "first_due_of":
            c, py = pair.call(op, x % 4, now)
            assert c == py, op
        elif op == "grant_due":
            asked_c: list[tuple[int, float]] = []
            asked_py: list[tuple[int, float]] = []

            def verdict(handle: int) -> int:
                return SKIP if handle % 5 == x % 5 else STOP if handle % 7 == x % 7 else GRANT

            def decide_c(ctx: Any, handle: int, amount: float) -> int:
                asked_c.append((handle, amount))
                return verdict(handle)

            def decide_py(handle: Any, amount: float) -> int:
                asked_py.append((handle, amount))
                return verdict(handle)

            at = now + (x % 3) * 500_000
            c_next = pair.lib.tb_grant_due(pair.c, at, DECIDE(decide_c), None)
            py_next = pair.py.grant_due(at, decide_py)
            assert (c_next, asked_c) == (py_next, asked_py), op
        elif op == "withdraw_stranded":
            never = ctypes.c_bool()
            c = pair.lib.tb_withdraw_stranded(pair.c, now, ctypes.byref(never))
            py = pair.py.withdraw_stranded(now)
            assert (None if c is None else (c, never.value)) == py, op
        elif op == "refund" and granted:
            back = granted.pop(x % len(granted))
            pair.call("refund", back, now)
        elif op == "settle":  # a grant's real cost: less, the same, more, beyond range (of a grant not seen: amount)
            used = [0.0, 0.25, amount, amount * 3, 40.0, 1e300][x % 6]
            from_held = bool(held) and (x // 6 % 2 == 1 or not granted)
            pool = held if from_held else granted
            i = x % len(pool) if pool else -1
            taken = (pool[i] if pool else amount) * (100 if x // 12 % 9 == 0 else 1)  # now and then above any grant
            c, py = pair.call("settle", taken, used, from_held, now)
            assert c == py, op
            if c == OK and pool:
                if from_held:
                    held[i] = used  # what its hold ends with
                else:
                    granted.pop(i)
                    if used > 0:
                        granted.append(used)
        elif op == "reckon_late":
            pair.call("reckon_late", amount * (1 + x % 3), now)
        elif op == "hold" and granted:
            amount = granted.pop()
            pair.call("hold", amount)
            held.append(amount)
        elif op == "end_hold":  # also with nothing held: nothing happens
            pair.call("end_hold", held.pop(x % len(held)) if held else amount, now)
        elif op == "set_rate" and pair.nrates:
            index = x % pair.nrates
            c, py = pair.call("set_rate", index, NS_PER_TOKEN[x % len(NS_PER_TOKEN)], [1.0, 4.0, 10.0][x % 3], now)
            assert c == py, op
        elif op == "set_window":
            c, py = pair.call("set_window", [1000, 1_000_000, 7_777_777][x % 3], [1.0, 4.0, 10.5][x % 3])
            assert c == py, op
        elif op == "pause_until":
            pair.call("pause_until", now + STEPS[x % len(STEPS)])
        elif op == "limit_until":  # the server's quota: tokens left until a reset, news of this window or others
            c, py = pair.call("limit_until", [0.0, 1.0, 2.5, 7.0][x % 4], now + STEPS[x % len(STEPS)],
                              STEPS[x // 7 % len(STEPS)], now)
            assert c == py, op
        elif op == "rebase":
            shift = (x - 2**15) * 1_000_003
            pair.call("rebase", now, now + shift)
            now += shift
        elif op == "late_credit":
            pair.call("set_late_credit", [0.0, 0.5, 0.99, 1.0][x % 4])
        elif op == "as_good_as_new":
            c, py = pair.call(op, now)
            assert c == py, op
        elif op == "grant_until":  # a lease renewed, lapsed (an instant past), or ended for good (NEVER)
            pair.call("grant_until", NEVER if x % 5 == 0 else now + (x % 3 - 1) * STEPS[x % len(STEPS)])
        elif op == "set_largest":  # 0: the bursts alone; above them: waits for a burst; out of range: EINVAL
            c, py = pair.call("set_largest", [0.0, 2.0, 5.0, 12.0, -1.0, float("nan")][x % 6])
            assert c == py, op
        elif op == "credit":  # a refund, a debt, beyond range, not finite
            c, py = pair.call("credit", [amount, -amount, -amount * 7, 1e300, -1e300, float("inf")][x % 6], now)
            assert c == py, op
        in_c, in_py = pair.state()
        assert in_c == in_py, op
        assert in_c[-1] == 0, "tb_check() failed"


def test_the_comparison_sees_a_difference(core, monkeypatch):
    """The differential check is able to fail: a twin that forgets the late credit is caught."""
    monkeypatch.setattr(_limits_py, "_late_credit_ns", lambda limits: 0)
    pair = Pair(core)
    try:
        assert pair.call("init", 1e6, 1.0, 1.0, True, FIFO) == (OK, OK)
        pair.nrates = 1
        with pytest.raises(AssertionError):
            replay(pair, [("late_credit", 1), ("take", 0), ("enqueue", 0), ("enqueue", 0), ("step", 4),
                          ("grant_due", 4)], 0, FIFO)
    finally:
        pair.close()


SETTLING = ["take", "take", "step", "settle", "settle", "enqueue", "grant_due", "hold", "end_hold", "tokens",
            "limit_until", "refund", "projected_grant"]


@pytest.mark.parametrize("seed", range(40))
def test_the_twin_settles_as_the_c_core_does(core, seed):
    """Many settlements among grants, holds and waiters, on one rate, two rates or a window: the same answers and
    the same state after each (the random operations above settle only now and then)."""
    import random

    rng = random.Random(seed)
    pair = Pair(core)
    try:
        kind = seed % 3
        if kind == 2:
            assert pair.call("init_window", 1_000_000, 10.5, True, FIFO) == (OK, OK)
        else:
            assert pair.call("init", 1e6, 10.0, 10.0, True, FIFO) == (OK, OK)
            if kind == 1:
                assert pair.call("add_rate", 1e9 / 7, 4.0, 2.0) == (OK, OK)
            pair.nrates = kind + 1
        ops = [(rng.choice(SETTLING), rng.randrange(2**16)) for _ in range(200)]
        replay(pair, ops, [0, 77_968_000_000_000, -5_000_000_000][seed % 3], FIFO)
    finally:
        pair.close()


LEASING = ["take", "step", "step", "enqueue", "enqueue_deadline", "crowd", "grant_due", "projected_grant",
           "withdraw_stranded", "tokens", "set_rate", "grant_until", "set_largest", "set_largest", "credit", "credit",
           "as_good_as_new", "rebase"]


@pytest.mark.parametrize("seed", range(40))
def test_the_twin_keeps_a_lease_as_the_c_core_does(core, seed):
    """An end of grants moved about, a largest amount above the bursts, credits and debts, among waiters (long
    queues too) on one rate or two: the same answers and the same state after each."""
    import random

    rng = random.Random(seed)
    pair = Pair(core)
    try:
        assert pair.call("init", 1e6, 1.0, 1.0, True, FIFO) == (OK, OK)
        if seed % 2:
            assert pair.call("add_rate", 1e9 / 7, 4.0, 2.0) == (OK, OK)
        pair.nrates = 1 + seed % 2
        ops = [(rng.choice(LEASING), rng.randrange(2**16)) for _ in range(200)]
        replay(pair, ops, [0, 77_968_000_000_000, -5_000_000_000][seed % 3], FIFO)
    finally:
        pair.close()


@pytest.mark.parametrize("seed", range(24))
def test_the_twin_settles_grants_above_the_bursts_as_the_c_core_does(core, seed):
    """A lease's share of a key: bursts of a few tokens, slow enough that a grant of the key's largest amount needs
    more than MAX_SPAN (up to 1,024 times a burst's need), settled less, the same or more, with grants, credits
    and time passing between: the same answers and the same state after each, every F within range."""
    import random

    rng = random.Random(seed)
    pair = Pair(core)
    try:
        burst = [1.0, 3.0, 16.0][seed % 3]
        ns_per_token = float(_limits_py.MAX_SPAN) / burst / [1, 2, 64][seed // 3 % 3]  # a burst's need near a span
        assert pair.call("init", ns_per_token, burst, burst, True, FIFO) == (OK, OK)
        if seed % 2:
            assert pair.call("add_rate", ns_per_token / 3, burst * 2, burst) == (OK, OK)
        pair.nrates = 1 + seed % 2
        largest = burst * 1024
        assert pair.call("set_largest", largest) == (OK, OK)
        now, above = [0, 77_968_000_000_000, -5_000_000_000][seed % 3], 0
        for _ in range(150):
            op = rng.choice(["settle", "settle", "settle", "take", "credit", "step"])
            if op == "settle":
                taken = rng.choice([burst / 2, burst, burst * 1.5, largest / 3, largest, largest * 1.01, 1e300])
                used = rng.choice([0.0, taken / 2, taken, taken + burst / 4, taken * 2, taken + 1e-9, 1e300])
                c, py = pair.call("settle", taken, used, False, now)
                assert c == py, (taken, used)
                above += c == OK and taken > burst
            elif op == "take":
                c, py = pair.call("take", rng.choice([0.5, 1.0, burst]), now)
                assert c == py
            elif op == "credit":
                c, py = pair.call("credit", rng.choice([burst, -burst, largest, -largest]), now)
                assert c == py
            else:
                now += rng.choice([1, 1_000_000_000, 2**50 // 7])  # 150 steps stay within the clock's range
            in_c, in_py = pair.state()
            assert in_c == in_py, op
            assert in_c[-1] == 0, "tb_check() failed"
        assert above, "no grant above the bursts was settled: the test did not reach the clamp"
    finally:
        pair.close()
