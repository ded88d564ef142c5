"""Chooses the engine: the C core, unless AIOTB_NO_EXTENSIONS is set, this is not
CPython, or the package was installed without building it."""

from __future__ import annotations

import importlib.util
import os
import platform
from types import ModuleType


def _choose() -> ModuleType:
    if os.environ.get("AIOTB_NO_EXTENSIONS", "") not in ("", "0") or platform.python_implementation() != "CPython":
        from . import _core_py
        return _core_py
    if importlib.util.find_spec("aiotb._tokenbucket") is None:  # installed with AIOTB_NO_EXTENSIONS=1
        from . import _core_py
        return _core_py
    from . import _tokenbucket  # built but broken: fail loudly, never fall back

    return _tokenbucket


core = _choose()
