"""Where each competitor lives; a child process imports only the file it needs."""

from __future__ import annotations

import importlib

from competitor import Competitor

# key -> the file that defines it, in the order tables list them
FILES = {
    "aiotb": "bench_aiotb",
    "aiotb-looptimer": "bench_aiotb",
    "aiotb-py": "bench_aiotb",
    "aiolimiter": "bench_aiolimiter",
    "asynciolimiter": "bench_asynciolimiter",
    "asyncio-throttle": "bench_asyncio_throttle",
    "pyrate": "bench_pyrate",
    "no-limiter": "bench_reference",
    "paced-floor": "bench_reference",
    "c-noop": "bench_reference",
    "c-bucket": "bench_reference",
    "c-noop-bound": "bench_reference",
    "c-bucket-bound": "bench_reference",
    "c-bucket-loop-bound": "bench_reference",
    "py-noop": "bench_reference",
    "empty-loop": "bench_reference",
}
ORDER = list(FILES)


def load(key: str) -> Competitor:
    """The competitor called key; ImportError when its library is not installed."""
    module = importlib.import_module(FILES[key])
    for competitor in module.COMPETITORS:
        if competitor.key == key:
            return competitor
    raise KeyError(key)


def available(keys: list[str]) -> tuple[dict[str, Competitor], dict[str, str]]:
    """The loadable competitors among keys, and why each of the others is not."""
    found: dict[str, Competitor] = {}
    missing: dict[str, str] = {}
    for key in keys:
        try:
            found[key] = load(key)
        except Exception as error:  # noqa: BLE001  (a missing or broken library leaves the others runnable)
            missing[key] = f"{type(error).__name__}: {error}"
    return found, missing
