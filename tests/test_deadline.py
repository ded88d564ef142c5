"""The deadline of a round trip (aiotb._deadline): one timer per loop, the semantics of asyncio.timeout."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

import pytest
from aiotb._deadline import Deadline

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]


def test_a_block_past_its_deadline_raises_timeout_at_it(vrun: Run[None]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            with Deadline(0.5) as deadline:
                await asyncio.sleep(10)
        assert deadline.expired
        assert loop.time() == pytest.approx(0.5, abs=1e-3)

    vrun(main())


def test_a_block_done_before_its_deadline_is_left_alone(vrun: Run[None]) -> None:
    async def main() -> None:
        with Deadline(0.5) as deadline:
            await asyncio.sleep(0.4)
        assert not deadline.expired
        await asyncio.sleep(1)  # the timer that was aimed at it cancels nothing once it fires
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    vrun(main())


def test_each_of_many_deadlines_fires_at_its_own_instant(vrun: Run[None]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ended: dict[int, float] = {}

        async def call(i: int) -> None:
            try:
                with Deadline(1.0 + (i * 7 % 10) / 10):  # deadlines out of order of arrival
                    await asyncio.sleep(2.0 if i % 2 else 0.5)  # the even ones end first
            except TimeoutError:
                ended[i] = loop.time()

        await asyncio.gather(*(call(i) for i in range(10)))
        assert sorted(ended) == [1, 3, 5, 7, 9]
        for i, at in ended.items():
            assert at == pytest.approx(1.0 + (i * 7 % 10) / 10, abs=1e-3)

    vrun(main())


def test_a_cancel_from_elsewhere_stays_a_cancel(vrun: Run[None]) -> None:
    async def main() -> None:
        async def call() -> None:
            with Deadline(1.0):
                await asyncio.sleep(10)

        task = asyncio.ensure_future(call())
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    vrun(main())


def test_a_cancel_from_elsewhere_at_the_deadline_stays_a_cancel(vrun: Run[None]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def call() -> None:
            with Deadline(1.0):
                await asyncio.sleep(10)

        task = asyncio.ensure_future(call())
        loop.call_at(1.0, task.cancel)  # due in the same pass as the deadline
        with pytest.raises(asyncio.CancelledError):
            await task

    vrun(main())


def test_an_outer_asyncio_timeout_is_not_taken_for_the_deadline(vrun: Run[None]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3) as outer:
                with Deadline(1.0) as inner:
                    await asyncio.sleep(10)
        assert outer.expired() and not inner.expired
        assert loop.time() == pytest.approx(0.3, abs=1e-3)

    vrun(main())


def test_a_deadline_never_entered_cancels_nothing(vrun: Run[None]) -> None:
    async def main() -> None:
        Deadline(0.5)
        await asyncio.sleep(1)  # would be cancelled at 0.5 if the deadline were watched from its making
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    vrun(main())


def test_a_deadline_counts_from_its_making(vrun: Run[None]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadline = Deadline(0.5)
        await asyncio.sleep(0.2)
        with pytest.raises(TimeoutError):
            with deadline:
                await asyncio.sleep(10)
        assert loop.time() == pytest.approx(0.5, abs=1e-3)

    vrun(main())


def test_a_deadline_needs_a_task() -> None:
    loop = asyncio.new_event_loop()
    try:
        def outside() -> None:
            with Deadline(1.0):
                pass

        loop.call_soon(outside)
        errors: list[BaseException] = []
        loop.set_exception_handler(lambda _, context: errors.append(context["exception"]))
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    finally:
        loop.close()
