"""The binding's error paths touch only what they set: the C extension built here from src/ with every
automatic variable filled with a byte pattern (``-ftrivial-auto-var-init=pattern``) instead of whatever the
stack held, so that a path that releases or reads a variable before setting it crashes every time rather than
when the stack happens to hold something other than zeros. Loaded in a child process under its own name.

``CC`` picks the compiler (default ``cc``); the pattern switch needs gcc 12 or clang 8."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import WANT_C

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "src" / "_tokenbucket"
SOURCES = ["_tokenbucketmodule.c", "limits.c", "rate.c", "window.c", "queue.c", "quota.c", "shm.c", "shm_grant.c", "shm_posix.c"]
pytestmark = pytest.mark.skipif(not WANT_C, reason="the pure-Python run was asked for (AIOTB_NO_EXTENSIONS)")

LOAD = """
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.ExtensionFileLoader("aiotb._tokenbucket", sys.argv[1])
spec = importlib.util.spec_from_file_location("aiotb._tokenbucket", sys.argv[1], loader=loader)
module = importlib.util.module_from_spec(spec)
loader.exec_module(module)
"""


@pytest.fixture(scope="module")
def patterned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extension built with every automatic variable patterned."""
    command = shlex.split(os.environ.get("CC", "")) or ["cc"]
    assert shutil.which(command[0]), f"no C compiler: {command[0]!r} not found (set CC)"
    binary = tmp_path_factory.mktemp("patterned") / "_tokenbucket.so"
    build = subprocess.run(
        [*command, "-shared", "-fPIC", "-std=c11", "-O0", "-g", "-ftrivial-auto-var-init=pattern",
         f"-I{sysconfig.get_paths()['include']}", *(str(CORE / name) for name in SOURCES), "-lm", "-lrt",
         "-o", str(binary)],
        check=False, capture_output=True, text=True,
    )
    assert build.returncode == 0, f"building the patterned extension failed:\n{build.stderr}"
    return binary


def run(binary: Path, body: str) -> subprocess.CompletedProcess[str]:
    """body run in a child after loading binary as ``module``."""
    env = {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"}  # no sanitizer runtime here
    return subprocess.run([sys.executable, "-c", LOAD + body, str(binary)], check=False, capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("rates", [
    '(("fast", 1.0, 1.0),)',                       # the first rate's parse fails before the core is set up
    "((-1.0, 1.0, 1.0),)",                          # tb_init refuses the first rate (SystemError: unchecked)
    '((1e9, 1.0, 1.0), ("fast", 1.0, 1.0))',      # a later rate's parse fails
])
def test_configure_that_fails_releases_only_what_it_set(patterned: Path, rates: str) -> None:
    child = run(patterned, f"""
bucket = module.Bucket.__new__(module.Bucket)
try:
    bucket._configure({rates}, None, True, False)
except (TypeError, SystemError) as error:
    print(type(error).__name__)
bucket._configure(((1e9, 2.0, 2.0),), None, True, False)  # still unconfigured: configures now
print("configured")
""")
    assert child.returncode == 0, f"the child died ({child.returncode}):\n{child.stderr[-3000:]}"
    assert child.stdout.split() in (["TypeError", "configured"], ["SystemError", "configured"]), child.stdout
