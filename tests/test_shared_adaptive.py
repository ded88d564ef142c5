"""AdaptiveLimiter over a SharedMemoryStore: the rate is the segment's, for every process of the host. Two limiters,
each over a store of its own for one name (each maps the segment, as two processes do), cut the rate once per
round between them, a step or a cut computed from a rate that another one changed since is dropped, the bounds
hold, bad input changes nothing, and the HTTP adapter feeds it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

import aiotb
from aiotb import AdaptiveLimiter, SharedMemoryStore
from aiotb import _tokenbucket  # noqa: F401  (a failing C import must fail these tests)

pytestmark = pytest.mark.skipif(aiotb.IMPLEMENTATION != "c", reason="the pure-Python engine has no shared store")


def adaptive(name: str, *args: Any, **kwargs: Any) -> Any:
    return AdaptiveLimiter(*args, store=SharedMemoryStore(name), **kwargs)


def segment_rate(limiter: Any) -> float:
    """The segment's first rate, in tokens per second."""
    ns_per_token, _ = limiter._store_rates.live_rate(0)
    return float(1e9 / ns_per_token)


async def later() -> float:
    """The loop's time, a moment after every instant read before."""
    await asyncio.sleep(0.002)
    return asyncio.get_running_loop().time()


def test_two_limiters_cut_the_segments_rate_once_per_round(name: str) -> None:
    async def main() -> list[Any]:
        a = adaptive(name, 100, 1, min_rate=10)
        b = adaptive(name, 100, 1, min_rate=10)
        assert type(a).__name__ == "SharedAdaptiveLimiter" and isinstance(a, AdaptiveLimiter)
        seen: list[Any] = []
        before = await later()
        a.observe(429, sent_at=await later())  # a cut: 80
        seen.append((a.max_rate, a.cuts, segment_rate(a)))
        b.observe(429, sent_at=before)  # sent before a's cut, which b sees now: the same round; b reads 80
        seen.append((b.max_rate, b.cuts, segment_rate(b)))
        await b.aobserve(503, sent_at=await later())  # sent after the cut b has seen: 64
        seen.append((b.max_rate, b.cuts, segment_rate(b)))
        a.observe(429, sent_at=await later())  # sent before a reads b's cut: b's round, no cut; a reads 64
        seen.append((a.max_rate, a.cuts, segment_rate(a)))
        a.observe(429, sent_at=await later())  # after it: 51.2
        seen.append((a.max_rate, a.cuts, segment_rate(a)))
        return seen

    seen = asyncio.run(main())
    assert [cuts for _, cuts, _ in seen] == [1, 0, 1, 1, 2]
    assert [rate for rate, _, _ in seen] == pytest.approx([80, 80, 64, 64, 51.2])
    assert [rate for _, _, rate in seen] == pytest.approx([80, 80, 64, 64, 51.2])


def test_a_change_from_a_rate_another_limiter_changed_since_is_dropped(name: str) -> None:
    async def main() -> None:
        a = adaptive(name, 100, 1, min_rate=10)
        b = adaptive(name, 100, 1, min_rate=10)
        was = a._store_rates.live_rate(0)
        b.observe(429, sent_at=await later())  # 80, after a read 100
        assert not a._store_rates.change_rate(0, was, 1e9 / 50, was[1])  # a's change from 100: dropped
        assert segment_rate(a) == pytest.approx(80)
        assert a._change(was, 90) is False and segment_rate(a) == pytest.approx(80)
        assert a._store_rates.change_rate(0, a._store_rates.live_rate(0), 1e9 / 50, was[1])  # from 80: made
        assert segment_rate(b) == pytest.approx(50)

    asyncio.run(main())


def test_a_step_grows_the_segments_rate_and_a_cut_ends_the_count_toward_one(name: str) -> None:
    async def main() -> list[float]:
        a = adaptive(name, 100, 1, min_rate=10, burst=1)
        b = adaptive(name, 100, 1, min_rate=10, burst=1)
        seen = []
        a.observe(429, sent_at=await later())  # 80: known too high is 100
        await a.acquire()  # the burst taken: the rate holds the next requests back
        sent = await later()
        for count in range(1, 201):
            a.observe(200, sent_at=sent)
            if a.max_rate != 80:
                break
        seen += [count, a.max_rate, segment_rate(b)]  # a period's worth at 80: half way to 100
        for _ in range(45):  # a's count starts anew (90 needed); b cuts before it is reached
            a.observe(200, sent_at=sent)
        b.observe(200, sent_at=sent)  # b reads 90: lower than the 100 it saw last, a cut it sees now
        b.observe(429, sent_at=await later())  # sent after it: 72
        for count in range(1, 201):
            a.observe(200, sent_at=sent)
            if a.max_rate != 72:
                break
        seen += [count, a.max_rate]  # a read the cut at its next success, and counts from there: 72 more
        return seen

    seen = asyncio.run(main())
    assert seen[0] in (80, 81) and seen[3] in (72, 73), seen  # 1/rate summed rate times may fall short of 1
    assert [seen[1], seen[2], seen[4]] == pytest.approx([90, 90, 81])


def test_a_cut_seen_late_counts_from_when_it_is_seen(name: str) -> None:
    """b reads the segment's rate only with the responses fed to it: a cut by a that b has not read yet is, for b,
    as late as b's next read, and a 429 to a request b sent before that cuts nothing more."""
    async def main() -> tuple[float, int, float, int]:
        a = adaptive(name, 100, 1, min_rate=10)
        b = adaptive(name, 100, 1, min_rate=10)
        a.observe(429, sent_at=await later())  # 80
        sent = await later()  # after a's cut, before b reads it
        b.observe(429, sent_at=sent)
        first = (segment_rate(b), b.cuts)
        b.observe(429, sent_at=await later())
        return (*first, segment_rate(b), b.cuts)

    assert asyncio.run(main()) == (pytest.approx(80), 0, pytest.approx(64), 1)


def test_cuts_stop_at_min_rate(name: str) -> None:
    async def main() -> list[float]:
        a = adaptive(name, 100, 1, min_rate=50)
        rates = []
        for _ in range(4):
            a.observe(429, sent_at=await later())
            rates.append(segment_rate(a))
        return rates

    assert asyncio.run(main()) == pytest.approx([80, 64, 51.2, 50])


@pytest.mark.parametrize("status, sent_at, error", [(True, 0.0, TypeError), ("429", 0.0, TypeError),
                                                     (99, 0.0, ValueError), (429, float("nan"), ValueError)])
def test_bad_input_is_refused_naming_it_and_changes_nothing(name: str, status: Any, sent_at: float,
                                                           error: type[Exception]) -> None:
    async def main() -> None:
        a = adaptive(name, 100, 1, min_rate=10)
        with pytest.raises(error, match="status|sent_at"):
            a.observe(status, sent_at=sent_at)
        assert segment_rate(a) == 100 and a.cuts == 0

    asyncio.run(main())


def test_a_min_rate_the_segment_cannot_keep_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="min_rate must refill the burst within"):
        adaptive(name, 100, 1, min_rate=1e-9, burst=100)


def test_the_httpx_adapter_cuts_the_segments_rate_on_a_429(name: str) -> None:
    from aiotb.httpx import LimitedTransport

    async def main() -> tuple[float, int]:
        a = adaptive(name, 100, 1, min_rate=10)
        b = adaptive(name, 100, 1, min_rate=10)
        answers = httpx.MockTransport(lambda request: httpx.Response(429))
        async with httpx.AsyncClient(transport=LimitedTransport(a, transport=answers, retries=0)) as client:
            response = await client.get("http://api.test/")
        assert response.status_code == 429
        return segment_rate(b), a.cuts

    assert asyncio.run(main()) == (pytest.approx(80), 1)
