"""The pure C core's own unit tests (tests/c/), compiled with the system C compiler and run:
test_limits.c holds the limits (limits.c over rate.c) alone; test_queue.c (the queue) and test_grant.c (its decisions)
the bucket (queue.c over limits.c); test_shm*.c the store in shared memory (shm.c, shm_grant.c, shm_posix.c):
its operations, every short sequence of them, threads and killed processes on one segment, a model check
of its protocol, and a hostile writer changing the segment before every access (no read past it, no retry
loop without end).

``CC`` picks the compiler (default ``cc``); ``AIOTB_SANITIZE=1`` builds them under
AddressSanitizer and UBSan. The threaded tests are also built and run under ThreadSanitizer, always.
A missing compiler, or one that cannot build or run ThreadSanitizer, fails the test rather than
skipping it: the project cannot be built without one, so a green run must mean the core was tested.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from profiles import size

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "src" / "_tokenbucket"
TESTS = ROOT / "tests" / "c"
STORE = [CORE / "shm.c", CORE / "shm_grant.c", CORE / "limits.c", CORE / "rate.c", CORE / "window.c"]
SOURCES = {
    "test_limits": [TESTS / "test_limits.c", CORE / "limits.c", CORE / "rate.c", CORE / "window.c"],
    "test_queue": [TESTS / "test_queue.c", CORE / "queue.c", CORE / "limits.c", CORE / "rate.c", CORE / "window.c"],
    "test_grant": [TESTS / "test_grant.c", CORE / "queue.c", CORE / "limits.c", CORE / "rate.c", CORE / "window.c"],
    "test_quota": [TESTS / "test_quota.c", CORE / "quota.c"],
    "test_shm": [TESTS / "test_shm.c", *STORE],
    "test_shm_sequences": [TESTS / "test_shm_sequences.c", *STORE],
    "test_shm_threads": [TESTS / "test_shm_threads.c", *STORE],
    "test_shm_processes": [TESTS / "test_shm_processes.c", *STORE, CORE / "shm_posix.c"],
    "test_shm_model": [TESTS / "test_shm_model.c", CORE / "limits.c", CORE / "rate.c", CORE / "window.c"],  # it includes the store with a step hook
    "test_shm_hostile": [TESTS / "test_shm_hostile.c", CORE / "limits.c", CORE / "rate.c", CORE / "window.c"],  # so does it, a hostile writer's
}
THREADED = ["test_shm_threads"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g", "-O1"]
THREAD_SANITIZE = ["-fsanitize=thread", "-g", "-O1"]
SUMMARY = re.compile(r"(\d+) passed, (\d+) failed")


def compiler() -> list[str]:
    """The C compiler command, from CC or ``cc``; fails the test when there is none."""
    command = shlex.split(os.environ.get("CC", "")) or ["cc"]
    assert shutil.which(command[0]), f"no C compiler: {command[0]!r} not found (set CC)"
    return command


@pytest.mark.parametrize("program", sorted(SOURCES))
def test_c_core_unit_tests(tmp_path: Path, program: str) -> None:
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-pthread"]
    if os.environ.get("AIOTB_SANITIZE") == "1":
        flags += SANITIZE  # the later -O1 wins: sanitizer reports stay readable
    if program == "test_shm_model":  # every schedule within one preemption (2 s), or two (the long profile, minutes)
        flags.append(f"-DPREEMPTIONS={size(1, 2)}")
    build_and_run(tmp_path, program, flags, os.environ)


@pytest.mark.parametrize("program", THREADED)
def test_c_core_under_thread_sanitizer(tmp_path: Path, program: str) -> None:
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", *THREAD_SANITIZE]
    # Not under a preloaded AddressSanitizer runtime (the sanitized run preloads one for Python): the two
    # runtimes cannot share a process.
    env = {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"}
    build_and_run(tmp_path, program, flags, {**env, "TSAN_OPTIONS": "halt_on_error=1"})


def build_and_run(tmp_path: Path, program: str, flags: list[str], env: Mapping[str, str]) -> None:
    """Compiles program's sources with flags and runs it: it must exit 0 after "N passed, 0 failed", N > 0."""
    binary = tmp_path / program
    build = subprocess.run(
        [*compiler(), *flags, f"-I{CORE}", f"-I{TESTS}", *map(str, SOURCES[program]), "-o", str(binary), "-lm"],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"compiling the C tests failed:\n{build.stderr}"

    # The timeout only turns a hang (a ready instant that never comes) into a failure.
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=900, env=env)
    report = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.returncode == 0, report
    lines = run.stdout.strip().splitlines()
    assert lines, report
    summary = SUMMARY.fullmatch(lines[-1])
    assert summary is not None, report
    assert int(summary[2]) == 0, report
    assert int(summary[1]) > 0, report
