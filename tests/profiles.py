"""Test sizes: the fast profile (CI, ``./run test``) and the long one (``AIOTB_LONG=1``, ``./run long``).

The fast profile is derandomized: every run replays the same examples, so CI is reproducible.
The long profile draws fresh random examples from the seed given to pytest
(``--hypothesis-seed=N``; ``./run long`` passes one and prints it), so a failure can be replayed."""

from __future__ import annotations

import os
from typing import TypeVar

from hypothesis import HealthCheck, settings

LONG = os.environ.get("AIOTB_LONG", "") not in ("", "0")
T = TypeVar("T", int, float)


def size(fast: T, long: T) -> T:
    """fast in the fast profile, long in the long one."""
    return long if LONG else fast


def hypothesis_settings(fast: int, long: int, **options: object) -> settings:
    """Hypothesis settings for fast or long examples: no deadline (the machine is shared and noisy),
    no example database (runs do not depend on what earlier runs found)."""
    return settings(
        max_examples=size(fast, long),
        derandomize=not LONG,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                               HealthCheck.filter_too_much],
        **options,  # type: ignore[arg-type]
    )
