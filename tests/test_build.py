"""The build switches do what they say, so a green sanitizer or debug run means something.

With ``AIOTB_SANITIZE=1`` (the sanitizer job of ``./run test``) the C extension must be
instrumented and AddressSanitizer must be live in the process; with ``AIOTB_DEBUG_BUILD=1`` (the
debug job) the extension must carry the core's invariant assertion. In the other runs these
tests check that the release extension carries neither."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import WANT_C

SANITIZE = os.environ.get("AIOTB_SANITIZE", "") not in ("", "0")
DEBUG = os.environ.get("AIOTB_DEBUG_BUILD", "") not in ("", "0") or SANITIZE  # a sanitized build is a debug build
pytestmark = pytest.mark.skipif(not WANT_C, reason="the pure-Python run was asked for (AIOTB_NO_EXTENSIONS)")


def extension() -> bytes:
    from aiotb import _tokenbucket

    return Path(_tokenbucket.__file__).read_bytes()


def test_extension_is_instrumented_as_asked() -> None:
    assert (b"__asan_report_load" in extension()) == SANITIZE
    assert (b"tb_check(b) == 0" in extension()) == DEBUG  # the debug hook's assertion (tokenbucket.c)


@pytest.mark.skipif(not SANITIZE, reason="only the sanitizer job preloads AddressSanitizer")
def test_address_sanitizer_is_live() -> None:
    """A use after free in a child of this process (same LD_PRELOAD, same ASAN_OPTIONS) is caught.

    The child reports on its stderr, not in the run's report files, where this planted finding would count."""
    script = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.malloc.restype = ctypes.c_void_p\n"
        "block = libc.malloc(64)\n"
        "libc.free(ctypes.c_void_p(block))\n"
        "ctypes.memmove(ctypes.create_string_buffer(64), block, 64)\n"
    )
    options = ":".join(o for o in os.environ.get("ASAN_OPTIONS", "").split(":") if not o.startswith("log_path="))
    env = dict(os.environ, ASAN_OPTIONS=options)
    child = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120,
                           env=env)
    assert child.returncode != 0
    assert "heap-use-after-free" in child.stderr
