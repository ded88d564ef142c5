"""The C engine's own reading of a server's rate-limit headers (``src/_tokenbucket/quota.c``, ``Bucket._obey``), the
HTTP adapters' fast path: for any headers it either limits the limiter exactly as ``follow``'s reading
(``aiotb._signals``) would, or changes nothing and leaves them to it (NotImplemented). The twin has no such path:
its ``_obey`` leaves every response to ``aiotb._signals``."""

from __future__ import annotations

import asyncio
from typing import Any

import aiotb
import pytest
from aiotb._limiter import LIMIT_SLACK
from aiotb._signals import QUOTAS, quota_left
from hypothesis import given
from hypothesis import strategies as st
from profiles import hypothesis_settings
from test_signals import HEADERS, cased
from virtual_loop import VirtualClockLoop

BURST = 1e15  # above every count the fast path reads (15 digits): a full limiter's tokens are the limit's left
C_ONLY = pytest.mark.skipif(aiotb.IMPLEMENTATION != "c", reason="the pure-Python run was asked for (AIOTB_NO_EXTENSIONS)")


def limiters_after(headers: Any, quota: str, in_flight: float) -> tuple[object, list[tuple[float, float]]]:
    """What _obey returned, and the tokens of two limiters at instants around the end of what the headers say: one
    given the headers through _obey, the other through follow's reading and limit_until (unless _obey left them)."""
    loop = VirtualClockLoop()
    try:
        async def main() -> tuple[object, list[tuple[float, float]]]:
            fast, slow = aiotb.Limiter(10**9, 1, burst=BURST), aiotb.Limiter(10**9, 1, burst=BURST)
            answer = fast._obey(QUOTAS.index(quota), LIMIT_SLACK, headers, in_flight)
            left = quota_left(headers, quota, in_flight)  # type: ignore[arg-type]
            if answer is not NotImplemented and left is not None:
                slow.limit_until(*left)
            instants = [0.0] if left is None else [0.0, left[1] - 1e-6, left[1], left[1] + 1e-6]
            seen = []
            for instant in instants:
                loop._now = instant
                seen.append((fast.tokens, slow.tokens))
            return answer, seen

        return loop.run_until_complete(main())
    finally:
        loop.close()


def as_sent(headers: list[tuple[str, str | bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers as httpx's ``headers.raw`` and aiohttp's ``raw_headers`` give them: bytes."""
    return [(name.encode("utf-8"), value if isinstance(value, bytes) else value.encode("utf-8"))
            for name, value in headers]


# headers of the forms the fast path reads, well formed or nearly: names it reads (and some it leaves), padded and in
# either case; whole numbers around its 15 digits, decimals, Go durations, and near misses
NAMES = ["ratelimit-remaining", "ratelimit-reset", "x-ratelimit-remaining", "x-ratelimit-reset",
         "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", "x-ratelimit-remaining-tokens",
         "x-ratelimit-reset-tokens", "date", "content-type", "ratelimit", "anthropic-ratelimit-tokens-remaining"]
PADS = st.sampled_from(["", "", " ", "\t", "\x0b", "\x1c"])
WHOLE = st.one_of(st.integers(0, 10**6), st.integers(0, 10**17)).map(str)
DECIMAL = st.builds("{}.{}".format, st.integers(0, 10**9), st.integers(0, 10**8).map(str))
AMOUNTS = st.one_of(st.integers(0, 99).map(str), DECIMAL, st.sampled_from([".5", "5.", "."]))
GO = st.lists(st.builds("{}{}".format, AMOUNTS, st.sampled_from(["h", "m", "s", "ms", "us", "ns", "µs", "x"])),
              min_size=1, max_size=3).map("".join)
VALUES = st.builds("{}{}{}".format, PADS, st.one_of(WHOLE, DECIMAL, GO, st.sampled_from(["", "7, 8", "1e3", "-1"])),
                   PADS)
FIELDS = st.tuples(st.builds("{}{}{}".format, PADS, st.sampled_from(NAMES).flatmap(cased), PADS), VALUES)
STYLES = [("ratelimit-remaining", "ratelimit-reset"), ("x-ratelimit-remaining", "x-ratelimit-reset"),
          ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
          ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")]
TOLD = st.sampled_from(STYLES).flatmap(lambda names: st.tuples(  # a style's count and reset, well formed
    st.tuples(cased(names[0]), st.integers(0, 10**15).map(str)),
    st.tuples(cased(names[1]), st.one_of(st.integers(0, 10**6).map(str), DECIMAL, GO)))).map(list)
COMMON = st.builds(lambda told, others, at: others[:at] + told + others[at:], st.lists(TOLD, max_size=3).map(lambda lists: [f for told in lists for f in told]),
                   st.lists(FIELDS, max_size=6), st.integers(0, 6))


@C_ONLY
@hypothesis_settings(fast=400, long=20_000)
@given(st.one_of(HEADERS, COMMON, COMMON), st.sampled_from(QUOTAS), st.sampled_from([0.0, 1.0, 2.5]), st.booleans())
def test_the_fast_path_limits_as_follow_does_or_changes_nothing(headers, quota, in_flight, raw):
    answer, seen = limiters_after(as_sent(headers) if raw else headers, quota, in_flight)
    assert answer is None or answer is NotImplemented
    for fast, slow in seen:
        assert fast == slow if answer is None else fast == BURST  # left alone: no limit at all


FORMS = [  # (quota, headers): forms the fast path reads itself, and what limit follows
    ("requests", [(b"X-RateLimit-Limit", b"100"), (b"X-RateLimit-Remaining", b"7"), (b"X-RateLimit-Reset", b"30")]),
    ("requests", [(b"ratelimit-remaining", b" 12 "), (b"ratelimit-reset", b"2.5")]),
    ("requests", [(b"x-ratelimit-remaining-requests", b"59"), (b"x-ratelimit-reset-requests", b"1m0.5s")]),
    ("tokens", [(b"x-ratelimit-remaining-tokens", b"149984"), (b"x-ratelimit-reset-tokens", b"6ms")]),
    ("requests", [("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", "1"),
                  ("x-ratelimit-remaining-requests", "3"), ("x-ratelimit-reset-requests", "2s")]),  # the later reset
    ("requests", [(b"Content-Type", b"application/json")]),  # nothing told: nothing to follow
    ("requests", [(b"X-RateLimit-Remaining", b"7")]),  # no reset told: nothing to follow
]
LEFT = [  # forms left to aiotb._signals
    ("requests", [(b"RateLimit", b'"default";r=5;t=30'), (b"RateLimit-Policy", b'"default";q=100;w=60')]),
    ("requests", [(b"anthropic-ratelimit-requests-remaining", b"5"),
                  (b"anthropic-ratelimit-requests-reset", b"2026-11-29T12:00:00Z")]),
    ("requests", [(b"X-RateLimit-Remaining", b"7"), (b"X-RateLimit-Reset", b"1795950000")]),  # an epoch: Date
    ("requests", [(b"X-RateLimit-Remaining", b"7, 9"), (b"X-RateLimit-Reset", b"30")]),
    ("requests", [(b"X-RateLimit-Remaining", b"\xa07"), (b"X-RateLimit-Reset", b"30")]),
    ("tokens", [(b"x-ratelimit-remaining-tokens", b"5"), (b"x-ratelimit-reset-tokens", "6µs".encode())]),
    ("requests", [(b"X-RateLimit-Remaining", b"1234567890123456"), (b"X-RateLimit-Reset", b"30")]),  # 16 digits
]


@C_ONLY
@pytest.mark.parametrize(("quota", "headers"), FORMS + LEFT)
def test_the_common_forms_are_read_in_c_and_the_others_left_to_the_full_reader(quota: str, headers: Any) -> None:
    answer, seen = limiters_after(headers, quota, 0.0)
    assert answer is (NotImplemented if (quota, headers) in LEFT else None)
    for fast, slow in seen:
        assert fast == slow if answer is None else fast == BURST
    if (quota, headers) in FORMS[:5]:
        assert seen[0][0] < BURST  # limited


def test_the_twin_leaves_every_response_to_the_full_reader() -> None:
    from aiotb import _bucket_py

    class Twin(_bucket_py.Bucket):
        pass

    assert Twin._obey(Twin(), 0, LIMIT_SLACK, FORMS[0][1], 0.0) is NotImplemented


def test_the_adapters_take_the_fast_path_only_where_follow_would_limit_in_process() -> None:
    from aiotb import _http

    async def main() -> None:
        limiter = aiotb.Limiter(10, 1)
        assert _http.obeyer(limiter, None) is None
        obey = _http.obeyer(limiter, "requests")
        assert obey is not None
        if aiotb.IMPLEMENTATION == "c":
            assert obey(FORMS[0][1], 0.0) is None and limiter.tokens == 7
        else:
            assert obey(FORMS[0][1], 0.0) is NotImplemented and limiter.tokens == 10

        class Logged(aiotb.Limiter[None]):
            def limit_until(self, tokens: float, when: float) -> None:  # a subclass's own: obey must call it
                super().limit_until(tokens, when)

        assert _http.obeyer(Logged(10, 1), "requests") is None

    asyncio.run(main())
