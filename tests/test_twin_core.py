"""Unit tests of the pure-Python twin of the core: ``aiotb._limits_py`` (limits.c) and
``aiotb._queue_py`` (queue.c), alone, with hand-computed instants in whole nanoseconds.
Every operation is followed by the invariant check, as in the C core's debug builds."""

from __future__ import annotations

import math
import random
from typing import Any, Iterator

import pytest

from aiotb import _limits_py
from aiotb._limits_py import EINVAL, ETOOLATE, NEVER, OK, TICKS_PER_NS, Ahead, Limits
from aiotb._queue_py import FIFO, GRANT, SKIP, SMALLEST_FIRST, STOP, Bucket

MS = 1_000_000  # ns: the refill of one token at 1000 tokens/s


@pytest.fixture(autouse=True)
def checked() -> Iterator[None]:
    """Every mutating operation checks the invariants, as a C debug build does."""
    saved, _limits_py.DEBUG_CHECKS = _limits_py.DEBUG_CHECKS, True
    yield
    _limits_py.DEBUG_CHECKS = saved


def one_rate(burst: float = 10, initial: float = 10, ns_per_token: float = MS) -> Limits:
    limits = Limits()
    assert limits.init(ns_per_token, burst, initial) == OK
    return limits


def ahead(*amounts: float) -> Ahead:
    return Ahead(math.fsum(amounts), len(amounts), iter(amounts))


def bucket(burst: float = 5, initial: float = 0, fair: bool = True, order: int = FIFO,
           ns_per_token: float = MS) -> Bucket:
    b = Bucket()
    assert b.init(ns_per_token, burst, initial, fair, order) == OK
    return b


def grant_all(handle: Any, amount: float) -> int:
    return GRANT


# ---- limits ----

@pytest.mark.parametrize("args", [(0, 1, 1), (MS, 0, 0), (MS, 2, 3), (MS, 1, -1), (math.inf, 1, 1),
                                  (math.nan, 1, 1), (2.0**61, 2, 0)])
def test_init_refuses_unusable_rates(args):
    assert Limits().init(*args) == EINVAL


def test_window_init_and_set_window_refuse_out_of_range():
    assert Limits().init_window(0, 5) == EINVAL
    assert Limits().init_window((1 << 58) + 1, 5) == EINVAL
    assert Limits().init_window(1000, 0.0) == EINVAL
    assert one_rate().set_window(1000, 5) == EINVAL  # no window to change


def test_anchor_gives_the_initial_tokens_and_fit_at_is_the_first_instant_that_fits():
    limits = one_rate(burst=10, initial=3)
    assert not limits.anchored and limits.plain
    assert limits.tokens(0) == 3.0
    assert limits.state[0] == 7 * MS * TICKS_PER_NS
    assert limits.fits(3, 0) and not limits.fits(3.5, 0)
    at = limits.fit_at(3.5, 0)
    assert at == 500_000
    assert limits.fits(3.5, at) and not limits.fits(3.5, at - 1)
    assert limits.fit_at(3, 0) == 0


def test_fit_at_agrees_with_fits_on_fractional_refill():
    rng = random.Random(7)
    for _ in range(300):
        limits = one_rate(burst=rng.uniform(1, 50), initial=0, ns_per_token=rng.uniform(0.3, 3e6))
        now = rng.randrange(-10**12, 10**12)
        limits.anchor(now)
        limits.take(rng.uniform(0, limits.max_amount), now, now)
        amount = rng.uniform(1e-3, limits.max_amount)
        at = limits.fit_at(amount, now)
        assert at >= now and limits.fits(amount, at)
        assert at == now or not limits.fits(amount, at - 1)


def test_take_now_takes_only_what_fits():
    limits = one_rate(burst=2, initial=2)
    assert limits.take_now(1.5, 100)
    assert not limits.take_now(1, 100)
    assert limits.tokens(100) == 0.5
    assert limits.take_now(1, 100 + MS // 2)
    assert limits.tokens(100 + MS // 2) == 0.0


def test_a_rate_full_for_under_a_nanosecond_keeps_its_ticks():
    limits = one_rate(burst=1, initial=0, ns_per_token=2.5)  # F = 2.5 ns after the anchor at 0
    limits.anchor(0)
    assert limits.state[0] == 40
    limits.take(1, 3, 3)  # ready at 2.5, granted at 3: F moves from 2.5, not from 3
    assert limits.state[0] == 80


def test_needs_are_rounded_up_to_a_tick():
    limits = one_rate(burst=1, initial=1, ns_per_token=1 / 3)
    assert limits.rates[0].burst_ticks == 6  # 16/3 ticks, rounded up
    assert limits.take_now(0.5, 0) and limits.state[0] == 3  # 8/3 ticks: 3
    assert limits.take_now(0.5, 0) and limits.state[0] == 6
    assert not limits.take_now(0.1, 0)  # 1 tick more than the burst: refused
    assert limits.fit_at(0.5, 0) == 1  # 3 ticks later, the first whole nanosecond after them


def test_refund_gives_back_exactly_what_was_taken():
    limits = one_rate(burst=4, initial=4, ns_per_token=3e5 + 0.25)
    assert limits.take_now(2.75, 0)
    limits.refund(2.75, 0)
    assert limits.tokens(0) == 4.0 and limits.full(0)


def test_window_fit_at_is_when_a_grant_leaves_and_refund_unrecords_it():
    limits = Limits()
    assert limits.init_window(1000, 5) == OK
    limits.take(3, 0, 0)
    assert not limits.fits(3, 10)
    assert limits.fit_at(3, 10) == 1000  # the grant at 0 leaves the window (1000 - 1000, 1000]
    assert limits.fit_at(6, 10) == NEVER
    assert limits.tokens(999) == 2.0 and limits.tokens(1000) == 5.0
    limits.refund(3, 10)
    assert limits.fits(5, 10) and limits.full(10)


def test_a_held_grant_counts_until_a_period_after_its_hold_ends():
    limits = Limits()
    assert limits.init_window(1000, 5) == OK
    limits.take(2, 0, 0)
    limits.take(1, 10, 10)
    limits.hold(1)  # the newest grant, of 10
    assert [(g.at, g.amount) for g in limits.window.log] == [(0, 2)] and limits.window.held == 1
    assert limits.tokens(5000) == 4 and not limits.full(5000)
    assert limits.fit_at(5, 2000) == 3000  # should its hold end at 2000
    limits.end_hold(1, 2000)
    assert limits.tokens(2000) == 4 and limits.fit_at(5, 2000) == 3000 and limits.full(3000)
    limits.end_hold(1, 3000)  # none held: nothing
    limits.take(2, 4000, 4000)
    limits.take(1, 4001, 4001)
    limits.hold(2)  # the newest first, then part of the one before
    assert [(g.at, g.amount) for g in limits.window.log] == [(4000, 1)] and limits.check() == 0
    limits.hold(3)  # more than is logged: held all the same
    assert limits.window.log == [] and limits.window.held == 5 and limits.tokens(9000) == 0
    limits.end_hold(2, 9000)
    limits.end_hold(3, 10000)
    assert limits.tokens(10000) == 2 and limits.tokens(11000) == 5 and limits.check() == 0


def test_window_log_stays_in_time_order():
    limits = Limits()
    assert limits.init_window(1000, 5) == OK
    limits.take(1, 500, 500)
    limits.take(1, 400, 400)  # an earlier instant is logged at the newest one
    assert [grant.at for grant in limits.window.log] == [500, 500]
    assert limits.check() == 0


def test_pause_blocks_grants_until_its_instant_and_can_only_move_later():
    limits = one_rate()
    limits.pause_until(5 * MS)
    limits.pause_until(MS)
    assert limits.paused_until == 5 * MS and not limits.plain
    assert limits.tokens(0) == 0.0 and not limits.fits(1, 0) and not limits.full(0)
    assert limits.fit_at(1, 0) == 5 * MS
    assert not limits.take_now(1, 5 * MS - 1) and limits.take_now(1, 5 * MS)


def test_credited_at_reaches_back_at_most_the_late_credit():
    limits = one_rate(burst=1, initial=1)
    assert limits.take_now(1, 0)  # F = 1 ms: one token is ready at 1 ms
    assert limits.credited_at(1, 1_400_000) == 1_400_000  # no credit by default
    limits.set_late_credit(0.5)
    assert limits.credited_at(1, 1_400_000) == MS  # 0.4 ms late: as of its ready instant
    assert limits.credited_at(1, 1_600_000) == 1_100_000  # 0.6 ms late: 0.5 ms of credit
    limits.set_late_credit(1.0)  # values outside (0, 1) mean none
    assert limits.late_credit == 0.0


def test_set_rate_keeps_the_tokens_held_at_most_the_new_burst():
    limits = one_rate(burst=10, initial=6)
    assert limits.set_rate(0, 2 * MS, 4, 0) == OK
    assert limits.tokens(0) == 4.0 and limits.max_amount == 4
    assert limits.set_rate(0, 2 * MS, 8, 0) == OK
    assert limits.tokens(0) == 4.0 and limits.tokens(4 * MS) == 6.0
    assert limits.set_rate(1, MS, 1, 0) == EINVAL


def test_rebase_moves_every_instant():
    limits = one_rate(burst=2, initial=0)
    limits.anchor(100)
    limits.pause_until(300)
    before = (limits.state[0], limits.paused_until)
    limits.rebase(100, 10_100)
    assert (limits.state[0], limits.paused_until) == (before[0] + 10_000 * TICKS_PER_NS, before[1] + 10_000)


def test_rebase_forgets_how_long_a_rate_has_been_full():
    limits = one_rate(burst=2, initial=2)
    limits.anchor(0)
    limits.rebase(5 * MS, 1000)  # full since 0, 5 ms before the old clock's then: F is kept in range
    assert limits.state[0] == (1000 - 1) * TICKS_PER_NS and limits.full(1000)


def test_full_means_every_limit_as_good_as_new():
    limits = one_rate(burst=2, initial=2)
    assert limits.full(0)
    assert limits.take_now(0.5, 0)
    assert not limits.full(MS // 2 - 1) and limits.full(MS // 2)


def test_projection_one_rate_closed_form():
    limits = one_rate(burst=5, initial=5)
    assert limits.projection(ahead(2, 2), 1, 0) == 0  # all of it fits in the full bucket
    assert limits.projection(ahead(2, 2), 2, 0) == 1 * MS
    assert limits.projection(ahead(4, 4), 4, 0) == 7 * MS


def test_projection_behind_a_long_queue_is_a_bound_never_early():
    rng = random.Random(11)
    for _ in range(200):
        limits = one_rate(burst=rng.randrange(1, 20), initial=0, ns_per_token=rng.choice([1000, 4096, MS, 1e9 / 7]))
        now = rng.randrange(0, 10**9)
        limits.anchor(rng.randrange(0, now + 1))
        amounts = [rng.uniform(0.01, 1) for _ in range(rng.randrange(64, 100))]  # 64 on: the closed form
        amount = rng.uniform(0.01, 1)
        bound = limits.projection(ahead(*amounts), amount, now)
        exact = _limits_py._simulated_grant(limits, ahead(*amounts), amount, now)
        assert exact <= bound <= exact + len(amounts) // TICKS_PER_NS + 1, (amounts, amount, now)


def test_projection_with_a_window_grants_the_queue_in_order():
    limits = Limits()
    assert limits.init_window(1000, 5) == OK
    assert limits.projection(ahead(2), 3, 0) == 0
    assert limits.projection(ahead(3), 3, 0) == 1000
    assert limits.projection(ahead(3, 3), 3, 0) == 2000
    assert limits.window.log == []  # a projection changes nothing


def test_projection_with_several_rates_waits_for_the_slowest():
    limits = one_rate(burst=10, initial=10)
    assert limits.add_rate(100 * MS, 2, 2) == OK  # and at most 2 tokens per 200 ms
    assert limits.max_amount == 2
    assert limits.projection(ahead(1), 1, 0) == 0
    assert limits.projection(ahead(1, 1), 1, 0) == 100 * MS
    assert limits.projection(ahead(2, 2), 2, 0) == 400 * MS
    assert limits.state == [0, 0]  # unchanged


def test_projection_past_the_horizon_is_never():
    limits = one_rate(burst=2**20, initial=0, ns_per_token=2.0**38)  # a refill of 2^58 ns
    assert limits.projection(ahead(*[2**20] * 4), 2**20, 0) == NEVER


# ---- the queue ----

def test_ids_name_sequence_and_slot_and_slots_are_reused_last_freed_first():
    b = bucket()
    ids = [b.enqueue(1, 0, NEVER, name)[1] for name in "abc"]
    assert ids == [1 << 32 | 0, 2 << 32 | 1, 3 << 32 | 2]
    assert b.withdraw(ids[1]) == "b" and b.withdraw(ids[1]) is None
    assert b.enqueue(1, 0, NEVER, "d") == (OK, 4 << 32 | 1)
    assert b.withdraw(ids[0]) == "a" and b.withdraw(ids[2]) == "c" and b.withdraw(4 << 32 | 1) == "d"
    assert b.enqueue(1, 0, NEVER, "e") == (OK, 5 << 32 | 1)  # the slab of 16 is kept, its free list LIFO
    assert b.withdraw(2 << 32 | 1) is None and b.withdraw(0) is None and b.withdraw(5 << 32 | 99) is None


def test_the_slab_grows_by_doubling_and_is_dropped_once_empty():
    b = bucket()
    ids = [b.enqueue(0.1, 0, NEVER, i)[1] for i in range(17)]
    assert len(b.slots) == 32 and ids[16] & 0xFFFFFFFF == 16
    for ident in ids:
        b.withdraw(ident)
    assert b.slots == [] and b.waiting == 0
    assert b.enqueue(1, 0, NEVER, "x") == (OK, 18 << 32 | 0)


def test_fifo_grants_in_arrival_order_each_when_it_fits():
    b = bucket(burst=5, initial=0)
    for name, amount in [("a", 2), ("b", 1), ("c", 1)]:
        assert b.enqueue(amount, 0, NEVER, name)[0] == OK
    granted: list[Any] = []

    def decide(handle: Any, amount: float) -> int:
        granted.append(handle)
        return GRANT

    assert b.grant_due(0, decide) == 2 * MS and granted == []
    assert b.grant_due(2 * MS, decide) == 3 * MS and granted == ["a"]
    assert b.grant_due(10 * MS, decide) == NEVER and granted == ["a", "b", "c"]


def test_smallest_first_grants_small_amounts_first_and_equals_in_arrival_order():
    b = bucket(burst=10, initial=10, order=SMALLEST_FIRST)
    for name, amount in [("big", 3.5), ("one", 1), ("half", 0.5), ("one again", 1), ("big again", 3.5)]:
        assert b.enqueue(amount, 0, NEVER, name)[0] == OK
    order: list[Any] = []
    b.grant_due(100 * MS, lambda handle, amount: order.append(handle) or GRANT)
    assert order == ["half", "one", "one again", "big", "big again"]
    assert b.enqueue(1, 0, 5 * MS, "deadline")[0] == EINVAL  # deadlines need FIFO


def test_deadlines_refuse_a_late_grant_and_count_a_timeout():
    b = bucket(burst=5, initial=0)
    assert b.enqueue(1, 0, MS - 1, "late") == (ETOOLATE, 0)
    assert b.waiting == 0 and b.stats.timeouts == 1
    assert b.enqueue(1, 0, MS, "just in time")[0] == OK
    assert b.enqueue(1, 0, 2 * MS - 1, "behind it, late") == (ETOOLATE, 0)
    assert b.stats.timeouts == 2 and b.with_deadline == 1


def test_enqueue_refuses_amounts_that_could_never_be_granted():
    b = bucket(burst=5)
    for amount in (0, -1, math.inf, math.nan, 5.5):
        assert b.enqueue(amount, 0, NEVER, "x") == (EINVAL, 0)
    assert b.waiting == 0


def test_grant_due_verdicts_grant_skip_and_stop():
    b = bucket(burst=5, initial=5)
    for name in "abcd":
        b.enqueue(1, 0, NEVER, name)
    verdicts = {"a": GRANT, "b": SKIP, "c": STOP}
    asked: list[Any] = []

    def decide(handle: Any, amount: float) -> int:
        asked.append(handle)
        return verdicts[handle]

    assert b.grant_due(0, decide) == 0  # stopped at c: now
    assert asked == ["a", "b", "c"] and b.waiting == 2
    assert b.tokens(0) == 4.0  # b left without tokens
    assert b.stats.as_tuple() == (1, 1.0, 1, 0.0, 0, 1, 0)
    assert b.grant_due(0, lambda handle, amount: STOP) == 0 and b.waiting == 2  # a question changes nothing
    assert b.grant_due(0, grant_all) == NEVER and b.tokens(0) == 2.0


def test_grant_due_returns_when_the_new_head_fits():
    b = bucket(burst=5, initial=1)
    b.enqueue(1, 0, NEVER, "a")
    b.enqueue(3, 0, NEVER, "b")
    assert b.grant_due(0, grant_all) == 3 * MS  # b needs 3 tokens, a took the only one
    assert b.grant_due(3 * MS - 1, grant_all) == 3 * MS and b.waiting == 1


def test_late_credit_takes_a_late_grant_as_of_its_ready_instant():
    def next_after_late_grant(credit: float, granted_at: int) -> int:
        b = bucket(burst=1, initial=1)
        b.set_late_credit(credit)
        assert b.take(1, 0)  # the next token is ready at 1 ms
        b.enqueue(1, 0, NEVER, "late")
        b.enqueue(1, 0, NEVER, "next")
        return b.grant_due(granted_at, lambda handle, amount: GRANT if handle == "late" else STOP)

    assert next_after_late_grant(0.0, 1_400_000) == 2_400_000  # no credit: the delay is lost
    assert next_after_late_grant(0.5, 1_400_000) == 2 * MS  # within the credit: as if on time
    assert next_after_late_grant(0.5, 1_600_000) == 2_100_000  # beyond it: credit only


def test_wait_statistics_count_from_enqueue_to_grant():
    b = bucket(burst=5, initial=0)
    b.enqueue(1, 0, NEVER, "a")
    b.enqueue(1, MS // 2, NEVER, "b")
    b.grant_due(3 * MS, grant_all)
    granted, tokens, waits, total, longest, cancelled, timeouts = b.stats.as_tuple()
    assert (granted, tokens, waits, cancelled, timeouts) == (2, 2.0, 2, 0, 0)
    assert total == 3 * MS + 2.5 * MS and longest == 3 * MS


def test_refund_gives_tokens_back_and_takes_the_grant_out_of_the_statistics():
    b = bucket(burst=5, initial=5)
    assert b.take(2, 0)
    b.refund(2, 0)
    assert b.tokens(0) == 5.0
    assert b.stats.as_tuple() == (0, 0.0, 0, 0.0, 0, 1, 0)


def test_newcomers_queue_behind_waiters_when_fair_or_when_a_deadline_waits():
    fair = bucket(burst=5, initial=1)
    fair.enqueue(2, 0, NEVER, "a")
    assert not fair.can_take(1, 0) and not fair.take(1, 0)
    unfair = bucket(burst=5, initial=1, fair=False)
    unfair.enqueue(2, 0, NEVER, "a")
    assert unfair.can_take(1, 0) and unfair.take(1, 0)
    unfair.enqueue(1, 0, 10 * MS, "with a deadline")
    assert not unfair.can_take(0.001, 2 * MS)


def test_withdraw_stranded_fails_waiters_a_change_of_rate_leaves_behind():
    b = bucket(burst=5, initial=0)
    b.enqueue(4, 0, NEVER, "too big")
    b.enqueue(1, 0, NEVER, "fine")
    assert b.withdraw_stranded(0) is None
    assert b.set_rate(0, MS, 3, 0) == OK
    assert b.withdraw_stranded(0) == ("too big", True)
    assert b.withdraw_stranded(0) is None
    b.enqueue(1, 0, 3 * MS, "promised")  # behind "fine": granted at 2 ms
    assert b.set_rate(0, 10 * MS, 3, 0) == OK  # ten times slower: now at 20 ms
    assert b.withdraw_stranded(0) == ("promised", False)
    assert b.stats.cancelled == 2 and b.waiting == 1


def test_as_good_as_new_needs_no_waiter_and_full_limits():
    b = bucket(burst=2, initial=2)
    assert b.as_good_as_new(0)
    b.enqueue(1, 0, NEVER, "a")
    assert not b.as_good_as_new(0)
    b.grant_due(0, grant_all)
    assert b.waiting == 0 and not b.as_good_as_new(0)
    assert b.as_good_as_new(MS)


def test_rebase_moves_deadlines_and_enqueue_instants():
    b = bucket(burst=5, initial=0)
    b.enqueue(1, 100, 5 * MS, "a")
    b.rebase(100, 1_000_100)
    w = b.slots[b.head]
    assert w is not None and (w.enqueued_at, w.deadline) == (1_000_100, 6 * MS)
    assert b.grant_due(1_000_100, grant_all) == 2_000_100  # F moved with the clock


def test_queued_sum_stays_exact_through_a_busy_queue():
    b = bucket(ns_per_token=2.147483648, burst=2**30, initial=0)
    big, small = 0.9 * 2**30, 1.07
    for _ in range(200):
        ids = [b.enqueue(amount, 0, NEVER, amount)[1] for amount in (big, small, big / 3, small * 3)]
        b.withdraw(ids[0])
        b.withdraw(ids[2])
    assert b.queued_tokens + b.queued_error == math.fsum(w.amount for w in b.slots if w is not None)
    assert b.waiting == 400


def test_projected_grant_behind_the_queue_and_withdraw_head():
    b = bucket(burst=5, initial=5)
    b.enqueue(4, 0, NEVER, "a")
    b.enqueue(4, 0, NEVER, "b")
    assert b.projected_grant(4, 0) == 7 * MS
    assert b.withdraw_head() == "a" and b.stats.cancelled == 1
    assert b.projected_grant(4, 0) == 3 * MS


# ---- a lease's hooks: an end of grants, a largest amount, credits ----

def test_grant_until_refuses_grants_at_and_after_the_end_and_moves_either_way():
    limits = one_rate()
    limits.anchor(0)
    limits.grant_until(5 * MS)
    assert not limits.plain and not limits.full(0)
    assert limits.fits(1, 5 * MS - 1) and not limits.fits(1, 5 * MS) and limits.tokens(5 * MS) == 0.0
    assert limits.take_now(10, 0)
    assert limits.fit_at(4, 0) == 4 * MS and limits.fit_at(5, 0) == NEVER
    assert limits.projection(ahead(2), 2, 0) == 4 * MS and limits.projection(ahead(2), 3, 0) == NEVER
    assert limits.projection(ahead(*[0.0625] * 64), 1, 0) == NEVER  # a long queue's bound, past the end too
    limits.grant_until(20 * MS)
    assert limits.fit_at(5, 0) == 5 * MS
    limits.grant_until(-MS)
    assert not limits.fits(1, 10 * MS) and not limits.full(10 * MS)
    limits.grant_until(NEVER)
    assert not limits.plain and limits.full(10 * MS)
    limits.grant_until(30 * MS)
    limits.rebase(10 * MS, 100 * MS)
    assert limits.grants_until == 120 * MS


def test_a_waiter_past_the_end_waits_for_a_renewal():
    b = bucket(burst=5, initial=0)
    b.grant_until(3 * MS)
    assert b.enqueue(5, 0, NEVER, "after the end")[0] == OK
    assert b.grant_due(0, grant_all) == NEVER and b.projected_grant(1, 0) == NEVER
    assert b.enqueue(1, 0, 1000 * MS, "with a deadline") == (ETOOLATE, 0)
    b.grant_until(20 * MS)
    assert b.grant_due(0, grant_all) == 5 * MS and b.grant_due(5 * MS, grant_all) == NEVER and b.waiting == 0


def test_largest_lets_a_request_above_the_burst_wait_for_a_burst_to_grow():
    b = bucket(burst=2, initial=2)
    assert b.enqueue(3, 0, NEVER, "big") == (EINVAL, 0)
    assert b.set_largest(5) == OK and b.limits.max_request == 5 and b.limits.max_amount == 2
    assert not b.take(3, 0) and b.enqueue(6, 0, NEVER, "bigger") == (EINVAL, 0)
    assert b.enqueue(3, 0, NEVER, "big")[0] == OK
    assert b.grant_due(0, grant_all) == NEVER and b.withdraw_stranded(0) is None
    assert b.set_rate(0, MS, 4, 0) == OK
    assert b.grant_due(0, grant_all) == MS
    for bad in (-1.0, math.nan, math.inf):
        assert b.set_largest(bad) == EINVAL and b.limits.max_request == 5
    assert b.set_largest(0) == OK and b.limits.max_request == 4 and b.withdraw_stranded(0) is None
    assert b.set_rate(0, MS, 2, 0) == OK and b.withdraw_stranded(0) == ("big", True)  # the bursts alone: above


def test_credit_gives_and_takes_tokens_but_not_from_a_window():
    limits = one_rate(initial=4)
    assert limits.credit(3, 0) == OK and limits.tokens(0) == 7
    assert limits.credit(100, 0) == OK and limits.tokens(0) == 10 and limits.full(0)
    assert limits.credit(-15, 0) == OK and limits.tokens(0) == 0 and limits.owed(0, 0) == 5
    assert limits.fit_at(1, 0) == 6 * MS
    state = list(limits.state)
    for bad in (math.nan, math.inf, -math.inf, -1e300):
        assert limits.credit(bad, 0) == EINVAL and limits.state == state
    window = Limits()
    assert window.init_window(10**9, 5) == OK
    assert window.credit(1, 0) == EINVAL and window.credit(-1, 0) == EINVAL
