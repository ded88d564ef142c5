"""The benchmarks stay runnable: every module in benchmarks/ imports, no two import each other in a
circle, the reporting modules form a chain, and every competitor in the registry can be built and
take a token where its library is installed.

The imports run in one child process with benchmarks/ first on sys.path, as the runner has it,
so that the benchmarks' module names (results, tables, registry, ...) never meet the suite's. A
module or competitor may be skipped only for a missing library that the test extra does not
install; a missing aiotb module, benchmarks module or test-extra library is a failure."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import aiotb
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
if not (BENCHMARKS / "registry.py").is_file():
    pytest.skip("no benchmarks/ here (the sdist does not carry them)", allow_module_level=True)
MODULES = sorted(path.stem for path in BENCHMARKS.glob("*.py"))
REPORT_CHAIN = [{"results"}, {"targets"}, {"tables"}, {"plots", "results_md"}, {"report"}]  # bottom first


def _constant(module: str, name: str) -> Any:
    """The literal value that benchmarks/module.py assigns to name, read without importing it."""
    for node in ast.parse((BENCHMARKS / f"{module}.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == name
                                                for target in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{module}.{name}")


COMPETITOR_KEYS = list(_constant("registry", "FILES"))


def _test_extra() -> set[str]:
    """The distributions the test extra installs, their names normalized."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"]["test"] + project.get("dependencies", [])
    return {re.match(r"[\w.-]+", requirement)[0].lower().replace("_", "-") for requirement in requirements}


TEST_EXTRA = _test_extra()

PROBE = r"""
import asyncio, json, sys, traceback
sys.path.insert(0, sys.argv[1])
modules = json.loads(sys.argv[2])


def outcome(error):
    if isinstance(error, ModuleNotFoundError) and error.name:
        return {"status": "missing", "missing": error.name, "detail": repr(error)}
    return {"status": "error", "detail": "".join(traceback.format_exception(error))}


found = {}
defined = {}
for name in modules:
    try:
        module = __import__(name)
    except BaseException as error:
        found[name] = outcome(error)
        continue
    found[name] = {"status": "ok"}
    if name.startswith("bench_"):
        defined[name] = [competitor.key for competitor in module.COMPETITORS]


async def take_a_token(competitor, limiter):
    if competitor.empty_body:
        return
    if competitor.context_manager:
        async with limiter:
            pass
    else:
        await competitor.acquire(limiter)()
    if competitor.acquire_amount is not None:
        await competitor.acquire_amount(limiter)(2)


competitors = {}
import bench_reference
import registry

for key in registry.ORDER:
    try:
        competitor = registry.load(key)
        limiter = competitor.make(1000.0, 10.0)
        competitor.make(1000.0, None)
        asyncio.run(take_a_token(competitor, limiter))
    except BaseException as error:
        competitors[key] = outcome(error)
        continue
    package = sys.modules.get(type(limiter).__module__.partition(".")[0])
    competitors[key] = {"status": "ok", "engine": getattr(package, "IMPLEMENTATION", None)}

print(json.dumps({"modules": found, "defined": defined, "files": registry.FILES, "competitors": competitors,
                  "noop_keys": list(bench_reference.NOOP_KEYS)}))
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the child process saw: each module's import, and each competitor built and used once."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    noop = tmp_path_factory.mktemp("noop")
    built = subprocess.run([sys.executable, str(BENCHMARKS / "noop" / "build.py"), str(noop)], cwd=noop,
                           capture_output=True, text=True, check=False)
    if built.returncode == 0:
        env[_constant("bench_reference", "NOOP_DIR_ENV")] = str(noop)
    done = subprocess.run([sys.executable, "-c", PROBE, str(BENCHMARKS), json.dumps(MODULES)], cwd=noop, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    seen["noop_build"] = built.stdout + built.stderr
    seen["noop_built"] = built.returncode == 0
    return seen


def _judge(what: str, outcome: dict[str, str]) -> None:
    """Passes, skips for a library outside the test extra, or fails."""
    if outcome["status"] == "ok":
        return
    missing = outcome.get("missing", "").partition(".")[0]
    allowed = (outcome["status"] == "missing" and missing not in MODULES and missing != "aiotb"
               and missing.lower().replace("_", "-") not in TEST_EXTRA)
    if allowed:
        pytest.skip(f"{what}: {missing} is not installed (an optional benchmark peer)")
    pytest.fail(f"{what}: {outcome['detail']}")


def test_only_peers_outside_the_test_extra_may_be_missing():
    with pytest.raises(pytest.skip.Exception):
        _judge("plots", {"status": "missing", "missing": "matplotlib.pyplot", "detail": ""})
    for missing in ("aiolimiter", "uvloop", "aiotb._core_py", "results"):
        with pytest.raises(pytest.fail.Exception):
            _judge("x", {"status": "missing", "missing": missing, "detail": ""})
    with pytest.raises(pytest.fail.Exception):
        _judge("x", {"status": "error", "detail": "ImportError: cannot import name 'build'"})


# ---- the import graph ----

def imports_of(path: Path) -> set[str]:
    """The benchmarks modules that path imports, anywhere in it (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names & set(MODULES)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports in graph, as [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "open":
                return path[path.index(imported):] + [imported]
            if imported not in state and (cycle := visit(imported)):
                return cycle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


GRAPH = {module: imports_of(BENCHMARKS / f"{module}.py") for module in MODULES}


def test_no_benchmarks_module_imports_in_a_circle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_report_is_a_chain_from_results_to_report():
    level = {module: i for i, layer in enumerate(REPORT_CHAIN) for module in layer}
    assert set(level) <= set(MODULES)
    upward = [(module, imported) for module in level for imported in GRAPH[module]
              if imported in level and level[imported] >= level[module]]
    assert not upward, f"imports that go up the chain or across it: {upward}"


# ---- importing and building ----

@pytest.mark.parametrize("module", MODULES)
def test_benchmarks_module_imports(probe, module):
    _judge(f"import {module}", probe["modules"][module])


def test_every_competitor_file_is_registered(probe):
    registered = {(key, file) for key, file in probe["files"].items()}
    defined = {(key, file) for file, keys in probe["defined"].items() for key in keys}
    files = {module for module in MODULES if module.startswith("bench_")}
    assert defined <= registered
    assert {file for _, file in registered} <= files
    missing = {file for file in files if file not in probe["defined"]}
    for file in missing:  # a file that did not import is judged (and maybe skipped) by its import test
        assert probe["modules"][file]["status"] != "ok"


@pytest.mark.parametrize("key", COMPETITOR_KEYS)
def test_competitor_builds_and_takes_a_token(probe, key):
    outcome = probe["competitors"][key]
    if key in probe["noop_keys"] and not probe["noop_built"]:
        if "No module named 'setuptools'" in probe["noop_build"]:
            pytest.skip("setuptools, which builds noop/_noopcm.c, is not installed")
        pytest.fail(f"building noop/_noopcm.c failed: {probe['noop_build']}")
    _judge(key, outcome)
    if key == "aiotb":
        assert outcome["engine"] == aiotb.IMPLEMENTATION
    if key == "aiotb-py":
        assert outcome["engine"] == "python"


def test_the_competitors_tested_are_the_registry_s(probe):
    assert COMPETITOR_KEYS == list(probe["files"]) == list(probe["competitors"])


def test_the_benchmarks_replay_the_engine_s_late_credit():
    """The wake lateness replays each grant's booking with aiotb's late credit (benchmarks/scenarios.py,
    which the floors' children import without aiotb): the same value as the engines' (tests/test_timer.py
    ties the C engine's to the twin's)."""
    from aiotb._bucket_py import LATE_CREDIT_TOKENS

    assert _constant("scenarios", "LATE_CREDIT_TOKENS") == LATE_CREDIT_TOKENS


def test_the_redis_benchmark_s_logged_limiter_overrides_take_the_limiter_s_parameters():
    """redis_store_workers.LoggedLimiter hooks steps of RedisLimiter to log its grants: each override
    takes the parameters of the step it overrides, as a change of one would otherwise fail only mid-run."""
    import inspect

    from aiotb._redis_limiter import RedisLimiter

    tree = ast.parse((BENCHMARKS / "redis_store_workers.py").read_text())
    logged = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "LoggedLimiter")
    overrides = [node for node in logged.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.name != "__init__" and hasattr(RedisLimiter, node.name)]
    assert {node.name for node in overrides} >= {"_granted", "_retaken", "_count_grant"}
    for node in overrides:
        ours = [argument.arg for argument in node.args.args]
        theirs = list(inspect.signature(getattr(RedisLimiter, node.name)).parameters)
        assert len(ours) == len(theirs), f"LoggedLimiter.{node.name}{tuple(ours)} overrides {tuple(theirs)}"


def test_the_redis_benchmark_calls_no_refused_method_of_a_redis_limiter():
    """What the Redis benchmark times on ``aiotb_limiter(name)`` (a Limiter over a RedisStore) is a call that
    limiter serves: not one the table of stores refuses over Redis (``try_acquire``, say, whose refusal failed
    case 1 mid-run once the call became ``atry_acquire``)."""
    from aiotb._capabilities import REFUSED

    refused = {name.strip() for (feature, store), _ in REFUSED.items() if store == "RedisStore"
               for name in feature.split(",") if "/" not in name}
    tree = ast.parse((BENCHMARKS / "redis_store_workers.py").read_text())
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "aiotb_limiter"}
    assert called and "try_acquire" in refused
    assert not called & refused, called & refused

