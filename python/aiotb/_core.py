"""Chooses the engine: the C core, unless AIOTB_NO_EXTENSIONS is set, this is not CPython, or the
package was installed without building it. A C build that fails to import is an error, never a
silent fall back."""

from __future__ import annotations

import importlib.util
import os
import platform
from typing import TYPE_CHECKING


def _wants_twin() -> bool:
    if os.environ.get("AIOTB_NO_EXTENSIONS", "") not in ("", "0") or platform.python_implementation() != "CPython":
        return True
    return importlib.util.find_spec("aiotb._tokenbucket") is None  # installed without the C engine


if TYPE_CHECKING:
    from ._tokenbucket import IMPLEMENTATION, MAX_SPAN, READY, Bucket
elif _wants_twin():
    from ._bucket_py import IMPLEMENTATION, MAX_SPAN, READY, Bucket
else:
    from ._tokenbucket import IMPLEMENTATION, MAX_SPAN, READY, Bucket

__all__ = ["IMPLEMENTATION", "MAX_SPAN", "READY", "Bucket"]
