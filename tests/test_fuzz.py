"""The C core under its fuzz harness (tests/fuzz/fuzz_tokenbucket.c).

Two tests:

- the committed corpus (tests/fuzz/corpus/, including the inputs that once found bugs, named
  ``regress-*``) replayed by the harness built as a plain program with the system C compiler,
  under AddressSanitizer and UBSan: no libFuzzer needed;
- a libFuzzer run from that corpus (clang, ``-fsanitize=fuzzer,address,undefined``):
  200,000 executions in the fast profile, 10^7 (two workers of 5*10^6) in the long one.

A missing clang, or a clang without libFuzzer, fails the second test: ``./run test`` installs
clang when it can. Set ``AIOTB_NO_FUZZ=1`` to skip it explicitly where it cannot be had."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from profiles import LONG, size

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "src" / "_tokenbucket"
HARNESS = ROOT / "tests" / "fuzz" / "fuzz_tokenbucket.c"
SOURCES = [CORE / "queue.c", CORE / "limits.c"]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
FOUND = ROOT / "tests" / "fuzz" / "found"  # inputs a run found failing, kept past pytest's temporary folders
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
EXECUTIONS = size(200_000, 10_000_000)
WORKERS = 2 if LONG else 1


def _compile(command: list[str], output: Path, *flags: str) -> None:
    build = subprocess.run(
        [*command, "-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", *flags, f"-I{CORE}",
         str(HARNESS), *map(str, SOURCES), "-lm", "-o", str(output)],
        check=False, capture_output=True, text=True,
    )
    assert build.returncode == 0, f"compiling the fuzz harness failed:\n{build.stderr}"


def _clang() -> str | None:
    for name in (os.environ.get("AIOTB_CLANG", ""), "clang", "clang-16", "clang-15", "clang-14"):
        if name and shutil.which(name):
            return name
    return None


def test_corpus_replays_clean(tmp_path: Path) -> None:
    inputs = sorted(CORPUS.iterdir())
    assert len(inputs) >= 20 and any(path.name.startswith("regress-") for path in inputs)
    binary = tmp_path / "replay"
    _compile(shlex.split(os.environ.get("CC", "")) or ["cc"], binary, "-DFUZZ_REPLAY", *SANITIZE)
    run = subprocess.run([str(binary), *map(str, inputs)], check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-5000:]
    assert run.stdout.strip() == f"replayed {len(inputs)} inputs"


def test_libfuzzer_run(tmp_path: Path) -> None:
    if os.environ.get("AIOTB_NO_FUZZ", "") not in ("", "0"):
        pytest.skip("AIOTB_NO_FUZZ is set")
    clang = _clang()
    assert clang, "no clang to build the libFuzzer harness (apt-get install clang), or set AIOTB_NO_FUZZ=1"
    binary = tmp_path / "fuzz_tokenbucket"
    _compile([clang], binary, "-fsanitize=fuzzer", *SANITIZE)
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)  # libFuzzer adds what it finds to the first directory: not ours
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", LD_PRELOAD="")
    command = [str(binary), f"-runs={EXECUTIONS // WORKERS}", "-print_final_stats=1",
               f"-artifact_prefix={tmp_path}/", "-seed=1" if not LONG else "-seed=0", str(corpus)]
    if WORKERS > 1:
        command[1:1] = [f"-jobs={WORKERS}", f"-workers={WORKERS}"]
    run = subprocess.run(command, check=False, capture_output=True, text=True, timeout=6 * 3600, env=env, cwd=tmp_path)
    # with workers, each worker's final stats are in its fuzz-N.log and echoed on stderr: count the logs
    logs = "".join(path.read_text() for path in sorted(tmp_path.glob("fuzz-*.log")))
    output = run.stderr + logs
    crashes = sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(("crash-", "leak-", "timeout-")))
    if crashes:  # a long run's finding must outlive the run: keep the inputs, named in the failure
        FOUND.mkdir(exist_ok=True)
        for name in crashes:
            shutil.copyfile(tmp_path / name, FOUND / name)
    assert run.returncode == 0 and not crashes, (
        f"{crashes}, kept in {FOUND} (replay: the harness built with -DFUZZ_REPLAY, given the file)\n{output[-8000:]}")
    stats = re.findall(r"stat::number_of_executed_units: (\d+)", logs if WORKERS > 1 else run.stderr)
    assert len(stats) == WORKERS, output[-8000:]
    executed = sum(int(count) for count in stats)
    print(f"libFuzzer: {executed} executions, 0 crashes")  # the figure for the record, with -s
    assert executed >= EXECUTIONS
