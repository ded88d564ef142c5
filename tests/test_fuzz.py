"""The C core and the shared segment's reader under their fuzz harnesses (tests/fuzz/fuzz_tokenbucket.c, and
fuzz_segment.c: arbitrary bytes as a segment, a hostile writer between its accesses), each with its corpus
(tests/fuzz/corpus/, tests/fuzz/segment_corpus/).

Two tests per harness:

- the committed corpus (tests/fuzz/corpus/, including the inputs that once found bugs, named
  ``regress-*``) replayed by the harness built as a plain program with the system C compiler,
  under AddressSanitizer and UBSan: no libFuzzer needed;
- a libFuzzer run from that corpus (clang, ``-fsanitize=fuzzer,address,undefined``): two fuzzers
  side by side, one per core, each from its own copy of the corpus with its own seed (1 and 2 in the
  fast profile, random in the long one): 50,000 executions in all of the core's harness (each input
  runs a schedule of operations: about 700 a second on a 2-core machine) and 200,000 of the segment's in
  the fast profile, 10^7 of each in the long one.

A missing clang, or a clang without libFuzzer, fails the second test: ``./run test`` installs
clang when it can. Set ``AIOTB_NO_FUZZ=1`` to skip it explicitly where it cannot be had."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
from profiles import LONG, size

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "src" / "_tokenbucket"
FUZZ = ROOT / "tests" / "fuzz"
FOUND = FUZZ / "found"  # inputs a run found failing, kept past pytest's temporary folders
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
FUZZERS = 2  # side by side: the machine's two cores


class Harness(NamedTuple):
    source: Path
    sources: list[Path]   # the code under test it is linked with (the segment's includes the store)
    corpus: Path
    options: list[str]    # libFuzzer's, beyond the run's
    executions: int       # in all, by the fuzzers of a run


HARNESSES = {
    "core": Harness(FUZZ / "fuzz_tokenbucket.c", [CORE / "queue.c", CORE / "limits.c", CORE / "rate.c", CORE / "window.c"], FUZZ / "corpus", [],
                    size(50_000, 10_000_000)),
    # an input that takes 10 s is a retry loop without end
    "quota": Harness(FUZZ / "fuzz_quota.c", [CORE / "quota.c"], FUZZ / "quota_corpus", ["-max_len=4096"],
                     size(50_000, 10_000_000)),
    "segment": Harness(FUZZ / "fuzz_segment.c", [CORE / "limits.c", CORE / "rate.c", CORE / "window.c"], FUZZ / "segment_corpus",
                       ["-timeout=10", "-max_len=1400"], size(200_000, 10_000_000)),
}


def _compile(command: list[str], harness: Harness, output: Path, *flags: str) -> None:
    build = subprocess.run(
        [*command, "-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", *flags, f"-I{CORE}",
         str(harness.source), *map(str, harness.sources), "-lm", "-o", str(output)],
        check=False, capture_output=True, text=True,
    )
    assert build.returncode == 0, f"compiling the fuzz harness failed:\n{build.stderr}"


def _clang() -> str | None:
    for name in (os.environ.get("AIOTB_CLANG", ""), "clang", "clang-16", "clang-15", "clang-14"):
        if name and shutil.which(name):
            return name
    return None


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_corpus_replays_clean(tmp_path: Path, harness: str) -> None:
    inputs = sorted(HARNESSES[harness].corpus.iterdir())
    assert len(inputs) >= 20 and any(path.name.startswith("regress-") for path in inputs)
    binary = tmp_path / "replay"
    _compile(shlex.split(os.environ.get("CC", "")) or ["cc"], HARNESSES[harness], binary, "-DFUZZ_REPLAY",
             *SANITIZE)
    run = subprocess.run([str(binary), *map(str, inputs)], check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-5000:]
    assert run.stdout.strip() == f"replayed {len(inputs)} inputs"


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_libfuzzer_run(tmp_path: Path, harness: str) -> None:
    if os.environ.get("AIOTB_NO_FUZZ", "") not in ("", "0"):
        pytest.skip("AIOTB_NO_FUZZ is set")
    clang = _clang()
    assert clang, "no clang to build the libFuzzer harness (apt-get install clang), or set AIOTB_NO_FUZZ=1"
    binary = tmp_path / f"fuzz_{harness}"
    _compile([clang], HARNESSES[harness], binary, "-fsanitize=fuzzer", *SANITIZE)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", LD_PRELOAD="")
    fuzzers = []
    for number in range(1, FUZZERS + 1):
        place = tmp_path / f"fuzzer-{number}"
        corpus = place / "corpus"
        shutil.copytree(HARNESSES[harness].corpus, corpus)  # libFuzzer adds what it finds to the first directory
        command = [str(binary), f"-runs={HARNESSES[harness].executions // FUZZERS}", "-print_final_stats=1",
                   *HARNESSES[harness].options, f"-artifact_prefix={place}/", f"-seed={0 if LONG else number}",
                   str(corpus)]
        with open(place / "stderr", "w") as log:  # a file, not a pipe: a full pipe would stop its fuzzer
            fuzzers.append((place, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=env,
                                                    cwd=place)))
    for _, fuzzer in fuzzers:  # both end before either is judged: none is left running after a failure
        fuzzer.wait(timeout=6 * 3600)
    executed = 0
    for place, fuzzer in fuzzers:
        stderr = (place / "stderr").read_text(errors="replace")
        crashes = sorted(path.name for path in place.iterdir() if path.name.startswith(("crash-", "leak-", "timeout-")))
        if crashes:  # a long run's finding must outlive the run: keep the inputs, named in the failure
            FOUND.mkdir(exist_ok=True)
            for name in crashes:
                shutil.copyfile(place / name, FOUND / name)
        assert fuzzer.returncode == 0 and not crashes, (
            f"{crashes}, kept in {FOUND} (replay: the harness built with -DFUZZ_REPLAY, given the file)\n"
            f"{stderr[-8000:]}")
        stats = re.findall(r"stat::number_of_executed_units: (\d+)", stderr)
        assert len(stats) == 1, stderr[-8000:]
        executed += int(stats[0])
    print(f"libFuzzer, {harness}: {executed} executions by {FUZZERS} fuzzers, 0 crashes")  # the figure for the record, with -s
    assert executed >= HARNESSES[harness].executions
