"""Chooses the engine: the C core, unless AIOTB_NO_EXTENSIONS is set, this is not CPython, or the
package was installed without building it (then it says so once, with a RuntimeWarning: pip shows
the build's own warning only with -v). A C build that fails to import is an error, never a silent
fall back.

It picks the precise timer the same way: the C one with the C engine, else the twin's (Python 3.13+);
None where Linux's timerfd is missing, or when AIOTB_PRECISE_TIMER=0 asks for the loop's timer only."""

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
    from ._tokenbucket import PreciseTimer  # the twin's has the same interface
elif _wants_twin():
    from ._bucket_py import IMPLEMENTATION, MAX_SPAN, READY, Bucket
    from ._timer_py import AVAILABLE, PreciseTimer

    if not AVAILABLE:
        PreciseTimer = None
else:
    from . import _tokenbucket
    from ._tokenbucket import IMPLEMENTATION, MAX_SPAN, READY, Bucket

    PreciseTimer = getattr(_tokenbucket, "PreciseTimer", None)  # Linux only

PRECISE_TIMER: type[PreciseTimer] | None = (
    None if os.environ.get("AIOTB_PRECISE_TIMER", "") == "0" else PreciseTimer)

__all__ = ["IMPLEMENTATION", "MAX_SPAN", "READY", "Bucket", "PRECISE_TIMER"]
