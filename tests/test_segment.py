"""The shared segment's binding: aiotb._tokenbucket.Segment (src/_tokenbucket/binding/segment.h) over the
store of src/_tokenbucket/shm.h in a named POSIX shared-memory object (shm_posix.h).

Exact values at given instants (the store takes every instant from its caller), publication and joining
from other objects and other processes, foreign and corrupt objects (statuses and SegmentCorrupt, never a
crash), permissions, argument checking, and the bound kept by four processes taking from one segment on
the real clock. C engine only: the pure-Python engine has no Segment."""

from __future__ import annotations

import errno
import json
import mmap
import multiprocessing
import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from aiotb import _tokenbucket as tb  # eager: a broken build must fail these tests, never skip them

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Segment is Linux's")

SPAWN = multiprocessing.get_context("spawn")
JOIN = 60.0  # s: the longest a spawned process may take
SHM = Path("/dev/shm")
T = 10**9  # an instant, in ns: the store takes every instant from its caller
MS = 10**6
RATE = (1e6, 3.0, 3.0)  # a token per ms, burst 3, full at the first use
NEVER = 2**63 - 1
INT64_MIN = -(2**63)
# The layout of a segment (shm.h's tb_shm, version 2): the header (magic, version, size, nrates, ticks_per_ns:
# 24 bytes; four created rates of three doubles: 96), paused_until (8) and the limit (8), then four rates of 112
# bytes each.
RATES_OFFSET = 136
SEGMENT_SIZE = RATES_OFFSET + 4 * 112
RECORD_SIZE = 80  # tb_shm_reservation: at, nrates (and padding), four words before, four after


@pytest.fixture
def name() -> Iterator[str]:
    """A fresh name for a shared-memory object, removed afterwards."""
    object_name = f"/aiotb-segment-test-{uuid.uuid4().hex[:16]}"
    yield object_name
    tb.Segment.unlink(object_name)


def path_of(name: str) -> Path:
    return SHM / name.lstrip("/")


def created(name: str, rates: list[tuple[float, float, float]] | None = None) -> Any:
    """A Segment that created the object called name and published it with rates."""
    segment = tb.Segment(name)
    assert segment.created
    assert segment.create(rates or [RATE]) == tb.SHM_OK
    return segment


def overwrite(name: str, offset: int, data: bytes) -> None:
    """Writes data into the object called name at offset, through a mapping of it (as a process would)."""
    with open(path_of(name), "r+b") as file, mmap.mmap(file.fileno(), 0) as memory:
        memory[offset:offset + len(data)] = data


# ---- constants ----

def test_constants_are_the_stores() -> None:
    statuses = [tb.SHM_OK, tb.SHM_EINVAL, tb.SHM_ETOOLATE, tb.SHM_ENOTREADY, tb.SHM_EMISMATCH, tb.SHM_EFOREIGN,
                tb.SHM_EAGAIN]
    assert statuses == [0, 1, 3, 4, 5, 6, 7]  # shm.h: OK, EINVAL and ETOOLATE as limits.h's (its ENOMEM is 2)
    assert tb.NEVER == NEVER
    assert (tb.SHM_MAX_SPAN, tb.SHM_HORIZON) == (2**55, 2**56)
    assert issubclass(tb.SegmentCorrupt, RuntimeError)


# ---- creating, joining, names ----

def test_create_then_join_from_a_second_object(name: str) -> None:
    first = created(name)
    second = tb.Segment(name)
    assert not second.created
    assert second.join([RATE]) == tb.SHM_OK
    assert second.join((list(RATE),)) == tb.SHM_OK  # type: ignore[arg-type]  # any sequences
    assert second.created_rates() == (RATE,)
    assert second.take_now(2, T) == tb.SHM_OK
    assert first.tokens(T) == 1.0  # one segment
    assert first.check() == second.check() == 0
    assert first.create([RATE]) == tb.SHM_EFOREIGN  # published already
    assert path_of(name).stat().st_size == SEGMENT_SIZE


def join_and_take(name: str, rates: list[tuple[float, float, float]], amount: float, now: int) -> None:
    """In a spawned process: joins the segment and takes amount at now."""
    segment = tb.Segment(name)
    assert not segment.created
    assert segment.join(rates) == tb.SHM_OK
    assert segment.take_now(amount, now) == tb.SHM_OK


def test_join_from_a_spawned_process(name: str) -> None:
    segment = created(name)
    child = SPAWN.Process(target=join_and_take, args=(name, [RATE], 2.0, T))
    child.start()
    child.join(JOIN)
    assert child.exitcode == 0
    assert segment.tokens(T) == 1.0
    assert segment.take_now(2, T) == tb.SHM_ETOOLATE


def test_join_with_other_rates_is_a_mismatch(name: str) -> None:
    rates = [RATE, (1e8, 10.0, 0.0)]
    segment = created(name, rates)
    other = tb.Segment(name)
    assert other.join([RATE]) == tb.SHM_EMISMATCH  # fewer rates
    assert other.join([RATE, (1e8, 10.0, 1.0)]) == tb.SHM_EMISMATCH  # another initial
    assert other.join([(1e8, 10.0, 0.0), RATE]) == tb.SHM_EMISMATCH  # another order
    assert other.created_rates() == segment.created_rates() == ((1e6, 3.0, 3.0), (1e8, 10.0, 0.0))
    assert other.join(rates) == tb.SHM_OK


def test_an_object_its_creator_never_published_is_not_ready(name: str) -> None:
    creator = tb.Segment(name)  # created and sized, then nothing: as if its creator had died there
    assert creator.created
    joiner = tb.Segment(name)
    assert joiner.join([RATE]) == tb.SHM_ENOTREADY
    with pytest.raises(ValueError, match="not published"):
        joiner.created_rates()
    with pytest.raises(tb.SegmentCorrupt):
        joiner.tokens(T)
    assert joiner.check() == 1
    assert creator.create([RATE]) == tb.SHM_OK  # a late creator publishes after all
    assert joiner.join([RATE]) == tb.SHM_OK


def test_an_object_not_sized_yet_is_busy(name: str) -> None:
    os.close(os.open(path_of(name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))  # as shm_open, before ftruncate
    with pytest.raises(BlockingIOError) as caught:
        tb.Segment(name)
    assert caught.value.errno == errno.EAGAIN and caught.value.filename == name


def test_unlink_says_whether_the_name_was_there(name: str) -> None:
    segment = created(name)
    assert tb.Segment.unlink(name) is True
    assert tb.Segment.unlink(name=name) is False
    assert segment.take_now(1, T) == tb.SHM_OK  # the mapping outlives the name
    fresh = tb.Segment(name)
    assert fresh.created  # the next open starts afresh


def test_bad_names_are_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        tb.Segment("/aiotb\0x")
    with pytest.raises(ValueError, match="NUL"):
        tb.Segment.unlink("/aiotb\0x")
    with pytest.raises(OSError) as caught:
        tb.Segment("/a/b")  # a name with a second slash is no shared-memory object's
    assert caught.value.errno == errno.EINVAL and caught.value.filename == "/a/b"


def test_a_created_object_gets_the_mode_exactly(name: str) -> None:
    shared = f"{name}-shared"
    try:
        tb.Segment(name)
        old_umask = os.umask(0o022)
        try:
            tb.Segment(shared, 0o666)  # the umask does not apply
        finally:
            os.umask(old_umask)
        assert stat.S_IMODE(path_of(name).stat().st_mode) == 0o600
        assert stat.S_IMODE(path_of(shared).stat().st_mode) == 0o666
        tb.Segment(name, 0o644)  # opened, not created: unchanged
        assert stat.S_IMODE(path_of(name).stat().st_mode) == 0o600
    finally:
        tb.Segment.unlink(shared)
    with pytest.raises(ValueError, match="mode"):
        tb.Segment(name, 0o1000)
    for bad in ("0o600", 384.0, True):
        with pytest.raises(TypeError, match="mode"):
            tb.Segment(name, bad)  # type: ignore[arg-type]


OPEN_AS_NOBODY = """
import os, sys
from aiotb._tokenbucket import SHM_OK, Segment
name, rate = sys.argv[1], (1e6, 3.0, 3.0)
os.setgid(65534)
os.setuid(65534)
try:
    segment = Segment(name)
except PermissionError as error:
    assert error.filename == name, error
    print("PermissionError")
else:
    print("joined" if segment.join([rate]) == SHM_OK and segment.take_now(1, 10**9) == SHM_OK else "failed")
"""


def open_as_another_user(name: str) -> str:
    """What opening name as another user gives: "PermissionError", or "joined" (and took a token)."""
    if os.geteuid() == 0:  # root opens anything: the attempt is made as nobody
        result = subprocess.run([sys.executable, "-c", OPEN_AS_NOBODY, name], capture_output=True, text=True,
                                timeout=JOIN, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()
    mode = stat.S_IMODE(path_of(name).stat().st_mode)  # not root: the owner, denied by mode 000 for a moment
    if mode & 0o006 == 0o006:
        return "joined" if tb.Segment(name).take_now(1, T) == tb.SHM_OK else "failed"
    os.chmod(path_of(name), 0)
    try:
        with pytest.raises(PermissionError) as caught:
            tb.Segment(name)
        assert caught.value.filename == name
        return "PermissionError"
    finally:
        os.chmod(path_of(name), mode)


def test_another_users_object_of_mode_600_is_refused(name: str) -> None:
    created(name)
    assert open_as_another_user(name) == "PermissionError"


def test_an_object_of_mode_666_is_shared_with_other_users(name: str) -> None:
    segment = tb.Segment(name, 0o666)
    assert segment.create([RATE]) == tb.SHM_OK
    assert open_as_another_user(name) == "joined"
    assert segment.tokens(T) == 2.0


# ---- foreign and corrupt objects ----

def assert_corrupt(segment: Any) -> None:
    """Every operation on segment reports a foreign or corrupt segment, as a status or SegmentCorrupt."""
    assert segment.create([RATE]) == tb.SHM_EFOREIGN
    assert segment.join([RATE]) == tb.SHM_EFOREIGN
    assert segment.reserve(1, T, NEVER) == (tb.SHM_EFOREIGN, 0, bytes(RECORD_SIZE))
    assert segment.take_now(1, T) == tb.SHM_EFOREIGN
    assert segment.set_rate(0, 1e6, 3, T) == tb.SHM_EFOREIGN
    assert segment.check() != 0
    for call in (lambda: segment.tokens(T), lambda: segment.fit_at(1, T),
                 lambda: segment.rate_params(0), segment.created_rates):
        with pytest.raises(tb.SegmentCorrupt, match="not aiotb's or is corrupt"):
            call()


def test_a_foreign_object_of_a_segments_size(name: str) -> None:
    tb.Segment(name)
    overwrite(name, 0, b"\xff" * SEGMENT_SIZE)
    segment = tb.Segment(name)
    assert_corrupt(segment)
    assert segment.cancel(bytes(RECORD_SIZE), T) == 0  # a record of no rates gives nothing back
    for call in (lambda: segment.pause_until(T), segment.paused_until):
        with pytest.raises(tb.SegmentCorrupt):
            call()


def test_a_foreign_object_shorter_than_a_segment(name: str) -> None:
    descriptor = os.open(path_of(name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.write(descriptor, b"aiotbshm" + b"\x01" * 8)  # the magic, then less than a header
    os.close(descriptor)
    segment = tb.Segment(name)
    assert not segment.created
    assert_corrupt(segment)
    assert segment.check() == 1
    for call in (lambda: segment.pause_until(T), segment.paused_until,
                 lambda: segment.cancel(bytes(RECORD_SIZE), T)):
        with pytest.raises(tb.SegmentCorrupt):
            call()
    assert path_of(name).stat().st_size == 16  # nothing was written past its end


def test_a_segment_corrupted_in_its_rates(name: str) -> None:
    segment = created(name)
    status, _, record = segment.reserve(1, T, NEVER)
    assert status == tb.SHM_OK
    overwrite(name, RATES_OFFSET, b"\xff" * (SEGMENT_SIZE - RATES_OFFSET))
    assert segment.check() in (2, 3, 4)
    assert_corrupt(segment)
    assert segment.cancel(record, T) == 0  # its words are not what the reservation left
    segment.pause_until(2 * T)  # the header is intact: the pause word is the segment's
    assert segment.paused_until() == 2 * T


# ---- grants at given instants ----

def test_take_now_fit_at_reserve_and_cancel_exactly(name: str) -> None:
    segment = created(name)
    assert segment.tokens(T) == 3.0  # full at the first use
    assert [segment.take_now(1, T) for _ in range(4)] == [tb.SHM_OK] * 3 + [tb.SHM_ETOOLATE]
    assert segment.tokens(T) == 0.0
    assert segment.fit_at(1, T) == T + MS
    assert segment.fit_at(2.5, T) == T + 5 * MS // 2
    assert segment.fit_at(3, T) == T + 3 * MS
    assert segment.fit_at(3.5, T) == NEVER  # over the burst
    assert segment.reserve(1, T, T + MS - 1)[0] == tb.SHM_ETOOLATE  # nothing taken
    status, at, record = segment.reserve(1, T, NEVER)
    assert (status, at, len(record)) == (tb.SHM_OK, T + MS, RECORD_SIZE)
    assert segment.fit_at(1, T) == T + 2 * MS
    assert segment.cancel(record, T + MS - 1) == 1  # the one rate given back
    assert segment.fit_at(1, T) == T + MS
    assert segment.cancel(record, T) == 0  # once only
    assert segment.take_now(1, T + MS) == tb.SHM_OK
    assert segment.take_now(1, T + MS) == tb.SHM_ETOOLATE


def test_a_cancel_gives_back_only_what_no_later_reservation_built_on(name: str) -> None:
    segment = created(name)
    assert segment.take_now(3, T) == tb.SHM_OK
    _, first_at, first = segment.reserve(1, T, NEVER)
    _, second_at, second = segment.reserve(1, T, NEVER)
    assert (first_at, second_at) == (T + MS, T + 2 * MS)
    assert segment.cancel(first, T) == 0  # the second built on it
    assert segment.cancel(second, T) == 1
    assert segment.cancel(first, T) == 1  # now the latest again
    _, at, late = segment.reserve(1, T, NEVER)
    assert segment.cancel(late, at) == 0  # at its grant instant: nothing comes back
    assert segment.cancel(segment.reserve(1, T, T)[2], T) == 0  # a refused reservation's record: no rates


def test_reserve_and_cancel_take_keywords(name: str) -> None:
    segment = created(name)
    status, at, record = segment.reserve(amount=1.0, now=T, deadline=NEVER)
    assert (status, at) == (tb.SHM_OK, T)
    assert segment.cancel(record=record, now=T - 1) == 1
    assert segment.take_now(now=T, amount=3) == tb.SHM_OK
    assert segment.fit_at(amount=1, now=T) == T + MS


def test_two_rates_grant_only_what_both_allow(name: str) -> None:
    segment = created(name, [RATE, (1e8, 10.0, 1.0)])  # also 10 per second, holding 1 at the first use
    assert segment.tokens(T) == 1.0  # the fewest over the rates
    assert segment.take_now(1, T) == tb.SHM_OK
    assert segment.take_now(1, T) == tb.SHM_ETOOLATE
    assert segment.fit_at(1, T) == T + 100 * MS  # the latest over the rates
    assert segment.tokens(T + 100 * MS) == 1.0
    assert segment.reserve(1, T, NEVER)[:2] == (tb.SHM_OK, T + 100 * MS)


def test_pause(name: str) -> None:
    segment = created(name)
    assert segment.paused_until() == INT64_MIN  # none
    segment.pause_until(2 * T)
    segment.pause_until(T)  # earlier: changes nothing
    assert segment.paused_until() == 2 * T
    assert segment.tokens(2 * T - 1) == 0.0
    assert segment.take_now(1, 2 * T - 1) == tb.SHM_ETOOLATE
    assert segment.fit_at(1, T) == 2 * T
    assert segment.reserve(1, T, 2 * T - 1)[0] == tb.SHM_ETOOLATE
    assert segment.reserve(1, T, NEVER)[:2] == (tb.SHM_OK, 2 * T)
    assert segment.tokens(2 * T) == 2.0


def test_set_rate_and_rate_params(name: str) -> None:
    segment = created(name)
    assert segment.take_now(3, T) == tb.SHM_OK
    assert segment.set_rate(0, 2e6, 5, T) == tb.SHM_OK
    assert segment.rate_params(0) == (2e6, 5.0, 3.0)  # initial: as created
    assert segment.created_rates() == (RATE,)
    assert tb.Segment(name).join([RATE]) == tb.SHM_OK  # joiners still give the rates it was created with
    assert segment.fit_at(1, T) == T + 2 * MS + 1  # the tokens it held (none), less a tick
    assert segment.set_rate(0, 2e6, 5, T) == tb.SHM_OK  # the live parameters: nothing to change
    assert segment.set_rate(1, 2e6, 5, T) == tb.SHM_EINVAL  # no such rate
    assert segment.set_rate(-1, 2e6, 5, T) == tb.SHM_EINVAL
    assert segment.set_rate(2**70, 2e6, 5, T) == tb.SHM_EINVAL
    assert segment.set_rate(0, -1.0, 5, T) == tb.SHM_EINVAL
    assert segment.set_rate(0, 2e6, float("nan"), T) == tb.SHM_EINVAL
    assert segment.set_rate(0, 2e6, 5, 2**58) == tb.SHM_EINVAL  # now out of the clock's range
    assert segment.rate_params(0) == (2e6, 5.0, 3.0)
    assert segment.check() == 0
    for index in (1, -1, 2**70):
        with pytest.raises(ValueError, match="index"):
            segment.rate_params(index)


def test_create_checks_the_rates(name: str) -> None:
    segment = tb.Segment(name)
    assert segment.create([(1e6, 0.0, 0.0)]) == tb.SHM_EINVAL  # no burst
    assert segment.create([(1e9, 2.0**26, 0.0)]) == tb.SHM_EINVAL  # a full refill over SHM_MAX_SPAN
    assert segment.create([(1e6, 3.0, 4.0)]) == tb.SHM_EINVAL  # initial over the burst
    for count in (0, 5):
        with pytest.raises(ValueError, match="1 to 4 rates"):
            segment.create([RATE] * count)
    assert segment.join([RATE]) == tb.SHM_ENOTREADY  # none of that published anything
    assert segment.create([RATE] * 4) == tb.SHM_OK


def test_values_out_of_range(name: str) -> None:
    segment = created(name)
    assert segment.take_now(0, T) == tb.SHM_EINVAL
    assert segment.take_now(4, T) == tb.SHM_EINVAL  # over the burst
    assert segment.reserve(float("inf"), T, NEVER)[0] == tb.SHM_EINVAL
    assert segment.reserve(1, -(2**58), NEVER)[0] == tb.SHM_EINVAL
    with pytest.raises(ValueError, match="now"):
        segment.tokens(2**58)
    with pytest.raises(ValueError, match="amount"):
        segment.fit_at(0, T)
    assert segment.take_now(4, T) == tb.SHM_EINVAL
    with pytest.raises(ValueError, match="now"):
        segment.tokens(2**63)  # not a 64-bit instant
    with pytest.raises(ValueError, match="deadline"):
        segment.reserve(1, T, 2**64)


# ---- the real clock ----

def test_now_is_clock_monotonic() -> None:
    before = time.monotonic_ns()
    now = tb.Segment.now()
    after = time.monotonic_ns()
    assert before <= now <= after


def take_many(name: str, rates: list[tuple[float, float, float]], takes: int, barrier: Any, results: Any) -> None:
    """In a spawned process: after the barrier, takes one token takes times as fast as it can; puts (granted,
    first instant, last instant) in results."""
    segment = tb.Segment(name)
    assert segment.join(rates) == tb.SHM_OK
    barrier.wait(JOIN)
    start = tb.Segment.now()
    granted = sum(segment.take_now(1.0, tb.Segment.now()) == tb.SHM_OK for _ in range(takes))
    results.put((granted, start, tb.Segment.now()))


def test_processes_taking_at_once_keep_the_bound(name: str) -> None:
    ns_per_token, burst = 1e5, 50.0  # 10,000 tokens a second
    rates = [(ns_per_token, burst, burst)]
    created(name, rates)
    processes, takes = 4, 20_000
    barrier, results = SPAWN.Barrier(processes), SPAWN.Queue()
    workers = [SPAWN.Process(target=take_many, args=(name, rates, takes, barrier, results)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    runs = [results.get(timeout=JOIN) for _ in workers]
    for worker in workers:
        worker.join(JOIN)
        assert worker.exitcode == 0
    span = max(end for _, _, end in runs) - min(start for _, start, _ in runs)
    total = sum(granted for granted, _, _ in runs)
    assert all(granted > 0 for granted, _, _ in runs), runs
    assert burst <= total <= burst + span / ns_per_token + 1, (total, span, runs)


# ---- arguments and lifetime ----

BAD_ARGUMENTS = [
    ("create", ("x",), "rates"),
    ("create", ([(1, 2)],), "rates"),
    ("join", ([("1", 2, 3)],), "ns_per_token"),
    ("join", ([(1, 2, None)],), "initial"),
    ("reserve", ("1", T, NEVER), "amount"),
    ("reserve", (1, 1.5, NEVER), "now"),
    ("reserve", (1, T, None), "deadline"),
    ("take_now", (True, T), "amount"),
    ("take_now", (1, True), "now"),
    ("cancel", (bytearray(RECORD_SIZE), T), "record"),
    ("cancel", (bytes(RECORD_SIZE), "x"), "now"),
    ("tokens", (float(T),), "now"),
    ("fit_at", (1, None), "now"),
    ("pause_until", (1.0,), "until"),
    ("set_rate", (0.0, 1e6, 3, T), "index"),
    ("set_rate", (0, 1e6, "3", T), "burst"),
    ("rate_params", ("0",), "index"),
]


@pytest.mark.parametrize("method, args, parameter", BAD_ARGUMENTS)
def test_arguments_of_the_wrong_type_are_named(name: str, method: str, args: tuple[Any, ...], parameter: str) -> None:
    segment = created(name)
    with pytest.raises(TypeError, match=parameter):
        getattr(segment, method)(*args)


def test_arguments_are_counted(name: str) -> None:
    segment = created(name)
    with pytest.raises(TypeError, match="missing argument 'deadline'"):
        segment.reserve(1, T)
    with pytest.raises(TypeError, match="takes at most 2 arguments"):
        segment.take_now(1, T, 2)
    with pytest.raises(TypeError, match="repeated keyword argument 'amount'"):
        segment.take_now(1, T, amount=2)
    with pytest.raises(TypeError, match="unexpected or repeated keyword argument 'when'"):
        segment.tokens(when=T)
    with pytest.raises(TypeError, match="name"):
        tb.Segment(b"/x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        tb.Segment.unlink(None)  # type: ignore[arg-type]


def test_a_record_must_be_a_reservations(name: str) -> None:
    segment = created(name)
    _, _, record = segment.reserve(1, T, NEVER)
    for bad in (record[:-1], record + b"\0", b""):
        with pytest.raises(ValueError, match="record"):
            segment.cancel(bad, T)
    five_rates = bytearray(record)
    five_rates[8:12] = (5).to_bytes(4, sys.byteorder)  # nrates, after the instant
    with pytest.raises(ValueError, match="5 rates"):
        segment.cancel(bytes(five_rates), T)
    two_rates = bytearray(record)
    two_rates[8:12] = (2).to_bytes(4, sys.byteorder)
    with pytest.raises(ValueError, match="the segment has 1"):
        segment.cancel(bytes(two_rates), T)
    assert segment.cancel(record, T - 1) == 1


CLOSED_CALLS = [
    ("create", ([RATE],)), ("join", ([RATE],)), ("created_rates", ()), ("reserve", (1, T, NEVER)),
    ("take_now", (1, T)), ("cancel", (bytes(RECORD_SIZE), T)), ("tokens", (T,)),
    ("fit_at", (1, T)), ("pause_until", (T,)), ("paused_until", ()), ("set_rate", (0, 1e6, 3, T)),
    ("rate_params", (0,)), ("check", ()),
]


def test_a_closed_segment_refuses_every_method(name: str) -> None:
    segment = created(name)
    segment.close()
    segment.close()  # again: nothing happens
    for method, args in CLOSED_CALLS:
        with pytest.raises(ValueError, match="the segment is closed"):
            getattr(segment, method)(*args)
    assert segment.created  # what happened stays known
    assert tb.Segment(name).join([RATE]) == tb.SHM_OK  # the object and its name stay
    with pytest.raises(AttributeError):
        segment.created = False


def test_segment_is_final() -> None:
    with pytest.raises(TypeError):
        type("Sub", (tb.Segment,), {})


LEAK_SCRIPT = """
import gc, json, sys
from aiotb._tokenbucket import NEVER, Segment, SegmentCorrupt
name, foreign, cycles = sys.argv[1], sys.argv[2], int(sys.argv[3])
rate, t = (1e6, 3.0, 3.0), 10**9


def maps():  # the shared-memory objects mapped
    with open("/proc/self/maps") as lines:
        return sum("/dev/shm/" in line for line in lines)


def cycle(count):
    for i in range(count):
        segment = Segment(name)
        assert segment.join([rate]) == 0 and segment.created_rates() == (rate,)
        status, at, record = segment.reserve(1.0, t, NEVER)
        segment.cancel(record, t)
        segment.take_now(1, t)
        segment.tokens(t), segment.fit_at(1, t), segment.rate_params(0), segment.check()
        for bad in (lambda: segment.tokens("x"), lambda: segment.fit_at(0, t), lambda: segment.cancel(b"", t)):
            try:
                bad()
            except (TypeError, ValueError):
                pass
        other = Segment(foreign)
        try:
            other.tokens(t)
        except SegmentCorrupt:
            pass
        if i % 2:
            segment.close()  # else the last reference unmaps it


def measure():
    gc.collect()
    return sys.getallocatedblocks(), maps()


cycle(cycles // 10)
before = measure()
cycle(cycles)
after = measure()
print(json.dumps({"blocks": after[0] - before[0], "maps": [before[1], after[1]]}))
"""


def test_no_leaks(name: str) -> None:
    """References, memory blocks and mappings stay flat over many segments opened, used, refused and dropped
    (the block count is 0 throughout when PYTHONMALLOC=malloc, as under AddressSanitizer)."""
    created(name)
    foreign = f"{name}-foreign"
    try:
        tb.Segment(foreign)
        overwrite(foreign, 0, b"\xff" * SEGMENT_SIZE)
        result = subprocess.run([sys.executable, "-c", LEAK_SCRIPT, name, foreign, "5000"], capture_output=True,
                                text=True, timeout=JOIN, check=False)
    finally:
        tb.Segment.unlink(foreign)
    assert result.returncode == 0, result.stderr
    growth = json.loads(result.stdout)
    assert growth["maps"] == [0, 0], growth  # every segment unmapped once closed or dropped
    assert growth["blocks"] < 100, growth
