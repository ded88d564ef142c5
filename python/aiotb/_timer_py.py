"""Mirrors binding/timer.h: PreciseTimer, a Linux timerfd on CLOCK_MONOTONIC armed at absolute
instants, for an event loop to watch with add_reader. Built on ``os.timerfd_create`` (Python 3.13+
on Linux); where that is missing, ``AVAILABLE`` is False and the loop's own timer serves."""

from __future__ import annotations

import math
import os
import time

from typing import Any

from ._conversions_py import MAX_SECONDS, double

_os: Any = os  # its timerfd functions and constants are Python 3.13+ (type checkers may target 3.11)
AVAILABLE = hasattr(os, "timerfd_create")


class PreciseTimer:
    """A timerfd on CLOCK_MONOTONIC armed at absolute instants, for loop.add_reader."""

    __slots__ = ("_fd",)

    def __init__(self) -> None:
        self._fd: int = _os.timerfd_create(time.CLOCK_MONOTONIC, flags=_os.TFD_NONBLOCK | _os.TFD_CLOEXEC)

    def __del__(self) -> None:
        self.close()

    def _open_fd(self) -> int:
        if self._fd < 0:
            raise ValueError("the precise timer is closed")
        return self._fd

    def fileno(self) -> int:
        """The descriptor, for loop.add_reader."""
        return self._open_fd()

    def arm(self, at: float) -> None:
        """Fires at the first nanosecond of CLOCK_MONOTONIC that reads as at seconds (round half up,
        as the core reads a loop time) or later; at once if that has passed."""
        seconds = double(at)
        if not (math.isfinite(seconds) and abs(seconds) < MAX_SECONDS):
            raise ValueError(f"at must be a finite CLOCK_MONOTONIC time in seconds, not {at!r}")
        fd = self._open_fd()
        ns = math.floor(seconds * 1e9 + 0.5)
        _os.timerfd_settime_ns(fd, flags=_os.TFD_TIMER_ABSTIME, initial=max(ns, 1))  # 0 would disarm

    def disarm(self) -> None:
        """Stops the timer; it is not readable until armed and fired again."""
        _os.timerfd_settime_ns(self._open_fd(), initial=0)

    def expired(self) -> bool:
        """Whether the instant armed last has come; consumes the news."""
        try:
            os.read(self._open_fd(), 8)
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        """Closes the descriptor (again: nothing happens)."""
        fd: int = getattr(self, "_fd", -1)  # unset if the descriptor could not be created
        self._fd = -1
        if fd >= 0:
            os.close(fd)

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._fd < 0
