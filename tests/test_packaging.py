"""What a user gets from ``pip install``: ``python -m build`` makes an sdist and a wheel that carry LICENSE, py.typed
and the stubs; the sdist installs in a fresh virtualenv with the C engine active and its own tests pass there;
without a C compiler the install falls back to the pure-Python engine and says so.

Slow (two builds, two virtualenvs, packages from PyPI): marked ``packaging`` and run once, in the first pass of
``./run test``. Every step is a subprocess with a time limit; a missing tool or file fails the test, never skips it.
The subprocesses get none of the AIOTB_* switches or sanitizer settings of the run around them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600  # seconds, for each subprocess: builds and installs fetch from PyPI
NOT_COPIED = {".git", "build", "dist", "site", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
JUNK = ("__pycache__", ".hypothesis", ".pytest_cache")  # never in a distribution
JUNK_SUFFIXES = (".pyc", ".pyo", ".so", ".o", ".a")
FALLBACK_WARNING = "WARNING: aiotb's C engine (aiotb._tokenbucket) was not built"


def run(command: list[str | Path], cwd: Path, **env: str) -> str:
    """Runs command with a clean environment plus env; returns its output, fails the test on a non-zero exit."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIOTB_", "ASAN_", "UBSAN_"))
             and k not in ("PYTHONASYNCIODEBUG", "PYTHONMALLOC", "LD_PRELOAD", "PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(list(map(str, command)), cwd=cwd, env={**clean, **env}, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(map(str, command))} exited {done.returncode}:\n{output[-6000:]}"
    return output


def is_junk(name: str) -> bool:
    return any(part in JUNK for part in name.split("/")) or name.endswith(JUNK_SUFFIXES)


def tree_files(folder: str) -> set[str]:
    """The files under folder (relative to the root) that a distribution should carry, as root-relative paths."""
    return {path.relative_to(ROOT).as_posix() for path in (ROOT / folder).rglob("*")
            if path.is_file() and not is_junk(path.relative_to(ROOT).as_posix())}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel ``python -m build`` makes from a copy of this tree (the wheel from the sdist)."""
    tmp = tmp_path_factory.mktemp("packaging")
    copy = tmp / "tree"
    shutil.copytree(ROOT, copy, ignore=ignored)  # __pycache__ and stray builds are copied: MANIFEST.in keeps them out
    run([sys.executable, "-m", "build", "--outdir", tmp / "dist", copy], cwd=tmp)
    sdists, wheels = list((tmp / "dist").glob("aiotb-*.tar.gz")), list((tmp / "dist").glob("aiotb-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted((tmp / "dist").iterdir())
    return sdists[0], wheels[0]


def ignored(folder: str, names: list[str]) -> list[str]:
    """What the copy of the tree leaves out: the checkout's own folders and builds, and of benchmarks/ all but the run
    the README's figures come from."""
    if Path(folder) == ROOT:
        return [name for name in names
                if name in NOT_COPIED or name.startswith(".venv") or name.endswith(".egg-info")]
    if Path(folder) == ROOT / "benchmarks":
        return [name for name in names if name != "RESULTS.md"]
    return []


def unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    (top,) = into.iterdir()
    return top


def fresh_venv(path: Path) -> Path:
    """A new virtualenv at path; returns its python."""
    run([sys.executable, "-m", "venv", path], cwd=path.parent)
    return path / "bin" / "python"


def test_sdist_and_wheel_carry_license_stubs_and_tests(dists: tuple[Path, Path]) -> None:
    sdist, wheel = dists
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        in_sdist = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    package = {f"python/aiotb/{path.name}" for path in (ROOT / "python" / "aiotb").glob("*.pyi")}
    assert package, "no stubs in python/aiotb"
    wanted = {"LICENSE", "README.md", "benchmarks/RESULTS.md", "pyproject.toml", "setup.py", "python/aiotb/py.typed",
              *package}
    wanted |= tree_files("tests") | {name for name in tree_files("src") if name.endswith((".c", ".h"))}
    assert {"tests/conftest.py", "tests/virtual_loop.py", "tests/profiles.py"} <= wanted
    assert any(name.startswith("tests/fuzz/corpus/") for name in wanted) and any(
        name.startswith("tests/c/") for name in wanted)
    assert sorted(wanted - in_sdist) == []
    assert sorted(name for name in in_sdist if is_junk(name)) == []

    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
        (license_file,) = [name for name in in_wheel if name.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(license_file) == (ROOT / "LICENSE").read_bytes()
        (metadata,) = [name for name in in_wheel if name.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode().split("\n\n")[0].splitlines()
    assert {"License-Expression: MIT", "License-File: LICENSE"} <= set(headers)
    assert f"Classifier: Programming Language :: Python :: 3.{sys.version_info.minor}" in headers
    assert {"aiotb/py.typed", *(name.removeprefix("python/") for name in package)} <= in_wheel
    assert any(name.startswith("aiotb/_tokenbucket.") and name.endswith(".so") for name in in_wheel)
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_sdist_installs_with_the_c_engine_and_its_tests_pass(dists: tuple[Path, Path], tmp_path: Path) -> None:
    sdist, _ = dists
    python = fresh_venv(tmp_path / "venv")
    # --no-cache-dir: a wheel cached from an earlier build of this sdist would skip the build under test
    run([python, "-m", "pip", "install", "--no-cache-dir", f"{sdist}[test]"], cwd=tmp_path)
    engine = run([python, "-c", "import aiotb; print(aiotb.IMPLEMENTATION, aiotb.__file__)"], cwd=tmp_path)
    implementation, location = engine.split()
    assert implementation == "c"
    assert Path(location).is_relative_to(tmp_path / "venv")

    source = unpack(sdist, tmp_path / "unpacked")
    # the API on both engines, the C core's own unit tests (src/ and tests/c from the sdist), the README's examples
    # and its benchmark figures (against benchmarks/RESULTS.md, in the sdist)
    report = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_api.py", "tests/test_c_core.py",
                  "tests/test_readme.py"], cwd=source)
    summary = report.strip().splitlines()[-1]
    assert " passed" in summary and not any(word in summary for word in ("failed", "error", "skipped")), report


def test_without_a_compiler_the_install_falls_back_to_the_twin_and_says_so(
        dists: tuple[Path, Path], tmp_path: Path) -> None:
    sdist, _ = dists
    python = fresh_venv(tmp_path / "venv")
    # -v: pip shows a build's output only when asked (or when the build fails)
    log = run([python, "-m", "pip", "install", "-v", "--no-cache-dir", sdist], cwd=tmp_path, CC="/nonexistent/cc")
    assert FALLBACK_WARNING in log
    warning = log[log.index(FALLBACK_WARNING):][:1000]
    assert "/nonexistent/cc" in warning  # why
    assert "pure-Python engine" in warning and "AIOTB_NO_EXTENSIONS=1" in warning

    check = (
        "import asyncio, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import aiotb\n"
        "assert aiotb.IMPLEMENTATION == 'python', aiotb.IMPLEMENTATION\n"
        "(warning,) = [w for w in caught if w.category is RuntimeWarning]\n"  # pip without -v hid the build's
        "assert 'not built' in str(warning.message) and 'AIOTB_NO_EXTENSIONS=1' in str(warning.message)\n"
        "async def main():\n"
        "    limiter = aiotb.Limiter(100, 1, burst=1)\n"  # 11 grants: 10 refills of 10 ms each
        "    loop = asyncio.get_running_loop()\n"
        "    start = loop.time()\n"
        "    for _ in range(11):\n"
        "        async with limiter:\n"
        "            pass\n"
        "    return loop.time() - start\n"
        "print(asyncio.run(main()))\n"
    )
    elapsed = float(run([python, "-c", check], cwd=tmp_path))
    assert 0.09 <= elapsed < 5, elapsed  # late timers may shorten the span by less than one token's time
    # chosen on purpose: no warning
    chosen = "import aiotb; print(aiotb.IMPLEMENTATION)"
    assert run([python, "-W", "error", "-c", chosen], cwd=tmp_path, AIOTB_NO_EXTENSIONS="1").strip() == "python"
