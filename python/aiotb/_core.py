"""Chooses the engine: the C core, unless AIOTB_NO_EXTENSIONS is set, this is not CPython, or the
package was installed without building it (then it says so once, with a RuntimeWarning: pip shows
the build's own warning only with -v). A C build that fails to import is an error, never a silent
fall back."""

from __future__ import annotations

import importlib.util
import os
import platform
import warnings
from typing import TYPE_CHECKING

NOT_BUILT = ("aiotb's C engine was not built when aiotb was installed (no C compiler?): aiotb runs on its "
             "pure-Python engine, the same limiter, slower. Reinstall with a C compiler and the Python headers "
             "for the C engine, or set AIOTB_NO_EXTENSIONS=1 to choose the pure-Python engine without this warning.")


def _wants_twin() -> bool:
    if os.environ.get("AIOTB_NO_EXTENSIONS", "") not in ("", "0") or platform.python_implementation() != "CPython":
        return True
    if importlib.util.find_spec("aiotb._tokenbucket") is None:  # installed without the C engine
        warnings.warn(NOT_BUILT, RuntimeWarning, stacklevel=2)
        return True
    return False


if TYPE_CHECKING:
    from ._tokenbucket import IMPLEMENTATION, MAX_SPAN, READY, Bucket
elif _wants_twin():
    from ._bucket_py import IMPLEMENTATION, MAX_SPAN, READY, Bucket
else:
    from ._tokenbucket import IMPLEMENTATION, MAX_SPAN, READY, Bucket

__all__ = ["IMPLEMENTATION", "MAX_SPAN", "READY", "Bucket"]
