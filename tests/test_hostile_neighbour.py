"""A hostile neighbour: a process of another user (made for the test with ``useradd``; where the test cannot
make one, this user with no ``trusted_uids``) that squats a shared limiter's name, rewrites its words,
truncates it or fights over it while a limiter uses it (tests/hostile_neighbour.c, built here from the
store's own headers).

The limiter runs in a child process (tests/hostile_workers.py), so that a signal that would kill it is seen
as its death and fails the test naming the signal; every child is waited for within a bound, then killed
and failed. What must hold, as docs/security.md says: a name another user made first is
refused with a PermissionError naming its owner and mode, and not joined; a writer the limiter trusts can
grant or withhold any tokens, and the limiter neither crashes nor hangs then; a neighbour that can only
withhold (compare-and-swap a rate later, as fast as it can) leaves the bound ``burst + rate * t`` over the
grants the limiter made, and every call returns within a bound (StoreCorrupt once fought over past
TB_SHM_TRIES retries); an object shrunk under the mapping is a SIGBUS at the next access, as documented.
C engine only."""

from __future__ import annotations

import json
import os
import pwd
import select
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import aiotb
from aiotb import SharedMemoryStore
from aiotb import _tokenbucket  # noqa: F401  (a failing C import must fail these tests)
from spawned import excess
from test_c_core import compiler

pytestmark = pytest.mark.skipif(aiotb.IMPLEMENTATION != "c", reason="the pure-Python engine has no shared store")

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "src" / "_tokenbucket"
WORKERS = Path(__file__).resolve().parent / "hostile_workers.py"
BOUND = 60.0  # s: the longest any child may take; past it the child is killed and the test fails
CALL_BOUND = 2.0  # s: the longest one call may take, fought over or not (TB_SHM_TRIES retries at most)
RATE, BURST = 10, 5
NS_PER_TOKEN = 1e9 / RATE


class Neighbour(NamedTuple):
    binary: Path
    uid: int
    gid: int
    other: bool  # a user other than the limiter's


@pytest.fixture(scope="module")
def neighbour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Neighbour]:
    """The neighbour's program, and the user it runs as: a new one (removed afterwards) where this process is
    root, else this process's own."""
    binary = tmp_path_factory.mktemp("neighbour") / "hostile_neighbour"
    build = subprocess.run([*compiler(), "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", f"-I{CORE}",
                            str(Path(__file__).with_name("hostile_neighbour.c")), str(CORE / "shm.c"),
                            str(CORE / "limits.c"), str(CORE / "rate.c"), str(CORE / "window.c"), "-o", str(binary), "-lm", "-lrt"],
                           capture_output=True, text=True)
    assert build.returncode == 0, f"compiling the neighbour failed:\n{build.stderr}"
    if os.geteuid() != 0:
        yield Neighbour(binary, os.geteuid(), os.getegid(), other=False)
        return
    user = f"aiotbn{uuid.uuid4().hex[:10]}"
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                          capture_output=True, text=True)
    assert made.returncode == 0, f"useradd failed: {made.stderr}"
    try:
        entry = pwd.getpwnam(user)
        yield Neighbour(binary, entry.pw_uid, entry.pw_gid, other=True)
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=True)


# ---- children: started, waited for within a bound, their deaths reported ----

def start_neighbour(neighbour: Neighbour, name: str, deed: str, *args: object) -> subprocess.Popen[str]:
    """The neighbour doing deed to name, once it has said it did its first write."""
    child = subprocess.Popen([str(neighbour.binary), str(neighbour.uid), str(neighbour.gid), "/" + name, deed,
                              *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    expect_line(child, "ready")
    return child


def start_limiter(role: str, env: dict[str, str] | None = None, **args: Any) -> subprocess.Popen[str]:
    """A child running hostile_workers.py's role with args (and env, if given, as its environment)."""
    return subprocess.Popen([sys.executable, str(WORKERS), role, json.dumps(args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def expect_line(child: subprocess.Popen[str], line: str) -> None:
    """Waits (within BOUND) for child's next line of output, which must be line."""
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], BOUND)
    said = child.stdout.readline().strip() if readable else None
    if said != line:
        ended(child)  # fails naming how it died, or what it said
        pytest.fail(f"{child.args!r} said {said!r}, not {line!r}")


def finished(child: subprocess.Popen[str], bound: float = BOUND) -> tuple[str, str]:
    """What child printed to stdout and stderr, once it ended within bound: one still running is killed and
    fails the test."""
    try:
        return child.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"{child.args!r} still ran after {bound} s (killed)\nstdout:\n{out}\nstderr:\n{err}")


def ended(child: subprocess.Popen[str], bound: float = BOUND) -> str:
    """What child printed, once it exited 0 within bound: a child still running is killed and fails the test,
    and so does one that died of a signal or failed."""
    out, err = finished(child, bound)
    if child.returncode < 0:
        pytest.fail(f"{child.args!r} died of {signal.Signals(-child.returncode).name}\nstderr:\n{err}")
    assert child.returncode == 0, f"{child.args!r} exited {child.returncode}\nstderr:\n{err}"
    return out


def limiter_said(child: subprocess.Popen[str]) -> Any:
    """The JSON line a limiter child printed last, once it exited 0 within BOUND."""
    return json.loads(ended(child).strip().splitlines()[-1])


def joined(name: str, **store: Any) -> Any:
    """What came of building a limiter of RATE/s, burst BURST over name in a child."""
    return limiter_said(start_limiter("join", name=name, rate=RATE, burst=BURST, **store))


def object_bytes(name: str) -> bytes:
    return Path(f"/dev/shm/{name}").read_bytes()


# ---- squatters ----

def test_a_name_squatted_0600_by_another_user_is_refused_naming_owner_and_mode(neighbour: Neighbour,
                                                                                name: str) -> None:
    if not neighbour.other:
        pytest.skip("another user takes root to make; this user's own object is its to join")
    ended(start_neighbour(neighbour, name, "squat", "600"))
    before = object_bytes(name)
    said = joined(name)
    assert said["outcome"] == "PermissionError", said
    assert f"mode 0o600, owned by uid {neighbour.uid}" in said["message"], said
    found = os.stat(f"/dev/shm/{name}")
    assert (found.st_uid, found.st_mode & 0o777) == (neighbour.uid, 0o600)  # the name is still the squatter's
    assert object_bytes(name) == before  # nothing written: not joined, not published over


def test_a_forged_segment_open_to_all_is_joined_only_when_its_owner_is_trusted(neighbour: Neighbour,
                                                                                name: str) -> None:
    # well formed, publishing the very rates the victim asks for, writable by every user
    ended(start_neighbour(neighbour, name, "squat", "666", NS_PER_TOKEN, float(BURST), float(BURST)))
    before = object_bytes(name)
    said = joined(name)  # the default mode, 0600
    assert said["outcome"] == "PermissionError", said
    assert f"mode 0o666, owned by uid {neighbour.uid}" in said["message"] and "mode=0o666" in said["message"], said
    if neighbour.other:
        said = joined(name, mode=0o666)  # the mode asked, its owner not trusted
        assert said["outcome"] == "PermissionError", said
        assert f"owned by uid {neighbour.uid}" in said["message"], said
        assert f"trusted_uids=({neighbour.uid},)" in said["message"], said
    assert object_bytes(name) == before  # refused: nothing taken from it, nothing anchored
    said = joined(name, mode=0o666, trusted=[neighbour.uid])  # the opt-in, by name
    assert said == {"outcome": "joined", "granted": True}
    assert object_bytes(name) != before  # now it took a token from the neighbour's segment


# ---- a writer the limiter trusts ----

def trusted_segment(neighbour: Neighbour, name: str) -> dict[str, Any]:
    """A segment of RATE/s, burst BURST that the neighbour created open to all, and the store options that
    join it."""
    ended(start_neighbour(neighbour, name, "squat", "666", NS_PER_TOKEN, float(BURST), float(BURST)))
    return {"name": name, "rate": RATE, "burst": BURST, "mode": 0o666, "trusted": [neighbour.uid]}


def test_a_trusted_writer_keeping_the_bucket_full_overgrants_without_a_crash_or_a_hang(neighbour: Neighbour,
                                                                                      name: str) -> None:
    store = trusted_segment(neighbour, name)
    limiter = start_limiter("use", **store, seconds=1.0, how="sync")
    expect_line(limiter, "ready")
    writer = start_neighbour(neighbour, name, "keep-full", 2.0)
    limiter.stdin.write("go\n")  # type: ignore[union-attr]
    limiter.stdin.flush()  # type: ignore[union-attr]
    said = limiter_said(limiter)
    ended(writer)
    assert said["longest_ns"] < CALL_BOUND * 1e9, said["longest_ns"]
    if said["corrupt"]:  # a call whose compare-and-swap the writer beat TB_SHM_TRIES times in a row
        assert "corrupt" in said["corrupt_message"], said["corrupt_message"]
    counted = said["counted"]
    # What docs/security.md says a trusted writer can do: grant any tokens. Over the second, the bound would allow
    # BURST + RATE; the limiter granted whatever the writer put back.
    assert len(counted) > 10 * (BURST + RATE), len(counted)
    assert excess(counted, NS_PER_TOKEN, BURST) > 10 * BURST


def test_a_trusted_writer_pausing_far_ahead_withholds_every_grant(neighbour: Neighbour, name: str) -> None:
    store = trusted_segment(neighbour, name)
    ended(start_neighbour(neighbour, name, "pause", 86400))
    said = limiter_said(start_limiter("paused", **store, timeout=30))
    assert said["try_acquire"] is False and said["tokens"] == 0 and said["has_capacity"] is False, said
    # a grant that cannot come within the timeout fails at once, taking nothing: not after waiting the timeout
    assert said["acquire"] == "TimeoutError" and said["acquire_s"] < 25, said


# ---- a neighbour with write access to a segment the limiter created ----

def test_an_object_truncated_under_a_running_limiter_is_sigbus_as_documented(neighbour: Neighbour,
                                                                             name: str) -> None:
    # AddressSanitizer, where the suite runs under it, reports a SIGBUS and aborts: the signal itself is the outcome
    env = dict(os.environ, ASAN_OPTIONS=":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "handle_sigbus=0"])))
    limiter = start_limiter("use", env, name=name, rate=RATE, burst=BURST, mode=0o666, seconds=30.0, how="sync")
    expect_line(limiter, "ready")  # it created the object, open to every user
    limiter.stdin.write("go\n")  # type: ignore[union-attr]
    limiter.stdin.flush()  # type: ignore[union-attr]
    ended(start_neighbour(neighbour, name, "truncate", 0))
    finished(limiter)  # within BOUND, or it is killed and the test fails
    # docs/security.md: whoever can write the object can shrink it under the mapping, "which makes the next access a
    # SIGBUS (as with any mapped file)". No check the library can make before each access closes that race.
    assert limiter.returncode == -signal.SIGBUS, limiter.returncode
    said = joined(name, mode=0o666)  # a new process meets the empty object: a clear error, after the join wait
    assert said["outcome"] == "StoreCorrupt" and "never published" in said["message"], said


def test_an_object_cut_within_its_page_is_store_corrupt(neighbour: Neighbour, name: str) -> None:
    limiter = start_limiter("use", name=name, rate=RATE, burst=BURST, mode=0o666, seconds=1.5, how="sync")
    expect_line(limiter, "ready")
    ended(start_neighbour(neighbour, name, "truncate", 64))  # the header's start stays; the rest reads as zeros
    limiter.stdin.write("go\n")  # type: ignore[union-attr]
    limiter.stdin.flush()  # type: ignore[union-attr]
    said = limiter_said(limiter)
    assert said["counted"] == [] and said["corrupt"] == said["calls"] > 0, said
    assert said["longest_ns"] < CALL_BOUND * 1e9, said["longest_ns"]


def test_two_processes_and_a_neighbour_fighting_over_the_words(neighbour: Neighbour, name: str) -> None:
    rate, burst = 1000, 20
    store = {"name": name, "rate": rate, "burst": burst, "mode": 0o666}
    limiters = [start_limiter("use", **store, seconds=1.0, how="sync")]
    expect_line(limiters[0], "ready")  # created by the first
    limiters.append(start_limiter("use", **store, seconds=1.0, how="async", tasks=3))
    expect_line(limiters[1], "ready")
    fighter = start_neighbour(neighbour, name, "fight", 1.5)
    try:
        for child in limiters:
            child.stdin.write("go\n")  # type: ignore[union-attr]
            child.stdin.flush()  # type: ignore[union-attr]
        said = [limiter_said(child) for child in limiters]
        fought = ended(fighter).split()
    finally:  # a child failed: the others end too, their pipes closed (else they are collected in a later test)
        for child in [*limiters, fighter]:
            if child.returncode is None:
                child.kill()
                child.communicate()
    assert fought[0] == "swaps" and int(fought[1]) > 0, fought  # it did move the words under the limiters
    assert said[0]["longest_ns"] < CALL_BOUND * 1e9, said[0]["longest_ns"]
    for log in said:
        assert log["calls"] > 0, log
        if log["corrupt"]:
            assert "corrupt" in log["corrupt_message"], log["corrupt_message"]
    counted = [t for log in said for t in log["counted"]]
    # the neighbour only ever made a rate hold less: the limiters' own grants keep the bound
    assert excess(counted, 1e9 / rate, burst) <= 1e-6
