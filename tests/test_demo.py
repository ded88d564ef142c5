"""The demo (``python -m aiotb.demo``) prints only what happened in its run.

Each run goes through a limiter whose ``acquire`` the test watches: it notes every call and how
it ended, on the virtual clock. Every figure the demo prints is then checked against those notes,
in scenarios chosen so that each branch of the demo is taken: the big request in arrival order or
overtaken, the impatient request refused (at once, or once its timeout ran out) or granted."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest
from aiotb import demo
from virtual_loop import run_virtually

BIG_LINE = re.compile(r"the big request arrived (\d+)\w\w and was granted (\d+)\w\w of (\d+), at ([\d.]+) s; "
                      r"of the (\d+) granted before it, (\d+) arrived after it")
RATE_LINE = re.compile(r"([\d.]+) tokens granted at once, then ([\d.]+) more in ([\d.]+) s: ([\d.]+) tokens/s "
                       r"\(configured: [\d.]+/s\)")
AT_ONCE_LINE = re.compile(r"all ([\d.]+) tokens granted at once: none had to wait")


@dataclass
class Watch:
    """The limiter's calls as the test sees them."""

    hesitate: float = 0.0  # seconds an acquire with a timeout waits before it asks: a refusal that takes time
    calls: list[tuple[float, float | None, float]] = field(default_factory=list)  # (tokens, timeout, loop time)
    ends: list[tuple[int, str, float]] = field(default_factory=list)  # (call, "granted" | "timeout", loop time)

    def granted(self) -> list[tuple[int, float]]:
        """(call, loop time) of every grant, in grant order."""
        return [(call, when) for call, how, when in self.ends if how == "granted"]


def watched(cls: type, watch: Watch) -> type:
    """cls, with an acquire that notes each call and its end in watch."""

    class Watched(cls):  # type: ignore[misc,valid-type]
        def acquire(self, amount: float = 1, timeout: float | None = None) -> Any:
            waiting = super().acquire(amount) if timeout is None else super().acquire(amount, timeout)
            loop = asyncio.get_running_loop()
            call = len(watch.calls)
            watch.calls.append((amount, timeout, loop.time()))

            async def noted() -> None:
                if timeout is not None and watch.hesitate:
                    await asyncio.sleep(watch.hesitate)
                try:
                    await waiting
                except TimeoutError:
                    watch.ends.append((call, "timeout", loop.time()))
                    raise
                watch.ends.append((call, "granted", loop.time()))

            return noted()

    Watched.__name__ = Watched.__qualname__ = cls.__name__  # the demo prints the class's name
    return Watched


class Scenario(NamedTuple):
    kind: str  # the limiter class
    args: tuple[float, ...]
    kwargs: dict[str, float]
    before: int  # small requests before the big one
    after: int  # and after it
    big_at: str  # where the big one is granted: at its "arrival" place, or "last"
    impatient: str  # what becomes of the impatient request: "refused" or "granted"
    hesitate: float = 0.0


SCENARIOS = {
    "fifo": Scenario("Limiter", (20, 1), {"burst": 5}, 30, 29, "arrival", "refused"),
    "fifo-short": Scenario("Limiter", (20, 1), {"burst": 5}, 10, 5, "arrival", "refused"),
    "fifo-refused-late": Scenario("Limiter", (20, 1), {"burst": 5}, 30, 29, "arrival", "refused", hesitate=0.01),
    "fifo-fast": Scenario("Limiter", (1000, 1), {"burst": 5}, 30, 29, "arrival", "granted"),
    "smallest-first": Scenario("AsyncLimiter", (5, 0.25), {}, 30, 29, "last", "refused"),
    "smallest-first-short": Scenario("AsyncLimiter", (5, 0.25), {}, 10, 5, "last", "refused"),
    "roomy": Scenario("AsyncLimiter", (100, 1), {}, 30, 29, "arrival", "granted"),
}


def run_demo(lib: Any, vrun: Any, capsys: pytest.CaptureFixture[str], scenario: Scenario) -> tuple[Watch, list[str]]:
    watch = Watch(hesitate=scenario.hesitate)
    limiter_class = watched(getattr(lib, scenario.kind), watch)
    vrun(demo.main(lambda: limiter_class(*scenario.args, **scenario.kwargs), before=scenario.before,
                   after=scenario.after))
    return watch, capsys.readouterr().out.splitlines()


def printed(lines: list[str], pattern: re.Pattern[str]) -> re.Match[str]:
    found = [m for m in map(pattern.fullmatch, lines) if m]
    assert len(found) == 1, lines
    return found[0]


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS)
def test_the_big_request_is_where_it_was_granted(lib, vrun, capsys, scenario):
    watch, lines = run_demo(lib, vrun, capsys, scenario)
    big = next(call for call, (tokens, _, _) in enumerate(watch.calls) if tokens == demo.BIG)
    order = [call for call, _ in watch.granted()]
    place = order.index(big)
    start = watch.calls[0][2]

    line = printed(lines, BIG_LINE)
    assert int(line[1]) == big + 1
    assert int(line[2]) == place + 1
    assert int(line[3]) == len(order)
    assert float(line[4]) == pytest.approx(watch.granted()[place][1] - start, abs=5e-4)
    assert int(line[5]) == place
    assert int(line[6]) == sum(call > big for call in order[:place])
    assert place == (big if scenario.big_at == "arrival" else scenario.before + scenario.after)


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS)
def test_the_rate_is_measured_after_the_first_burst(lib, vrun, capsys, scenario):
    watch, lines = run_demo(lib, vrun, capsys, scenario)
    start = watch.calls[0][2]
    grants = [(watch.calls[call][0], when - start) for call, when in watch.granted()]
    burst = [(tokens, when) for tokens, when in grants if when == 0.0]  # virtual time: no wait, no time
    paced = grants[len(burst):]
    if not paced:
        assert float(printed(lines, AT_ONCE_LINE)[1]) == sum(tokens for tokens, _ in burst)
        return
    line = printed(lines, RATE_LINE)
    tokens, span = sum(t for t, _ in paced), paced[-1][1]
    assert float(line[1]) == sum(t for t, _ in burst)
    assert float(line[2]) == tokens
    assert float(line[3]) == pytest.approx(span, abs=5e-4)
    assert float(line[4]) == pytest.approx(tokens / span, abs=5e-3)


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS)
def test_the_impatient_request_is_reported_as_it_ended(lib, vrun, capsys, scenario):
    watch, lines = run_demo(lib, vrun, capsys, scenario)
    requests = scenario.before + 1 + scenario.after
    assert len(watch.calls) == requests + 1
    _, _, asked = watch.calls[requests]
    seen, ended = next(("refused" if how == "timeout" else how, when)
                       for call, how, when in watch.ends if call == requests)
    waited = f"{(ended - asked) * 1e3:.3f} ms"
    expected = (f"acquire(1, timeout={demo.PATIENCE}): TimeoutError after {waited}" if seen == "refused"
                else f"the impatient request was granted after {waited}")
    assert lines[-1] == expected
    assert seen == scenario.impatient
    if seen == "refused":  # Limiter refuses at once (after the hesitation); AsyncLimiter waits its timeout out
        patience = demo.PATIENCE if scenario.kind == "AsyncLimiter" else scenario.hesitate
        assert ended - asked == pytest.approx(patience, abs=1e-6)


def test_the_command_line_runs_either_limiter(monkeypatch, capsys):
    monkeypatch.setattr(asyncio, "run", run_virtually)
    demo.cli([])
    fifo = capsys.readouterr().out
    demo.cli(["AsyncLimiter"])
    smallest_first = capsys.readouterr().out
    assert "Limiter: 20 tokens/s, burst 5, fair=True" in fifo
    assert "was granted 31st of 60, at 1.500 s" in fifo
    assert "TimeoutError after 0.000 ms" in fifo
    assert "AsyncLimiter: 20 tokens/s, burst 5, fair=False" in smallest_first
    assert "was granted 60th of 60, at 2.950 s" in smallest_first
    with pytest.raises(SystemExit):
        demo.cli(["WindowLimiter"])
