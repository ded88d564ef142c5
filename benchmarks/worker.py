"""One measurement in a fresh process: python worker.py '<json spec>'.

Prints the result as one JSON object on the last line of stdout. A run that
did not finish within its limit is reported as such, then the process exits at
once instead of cancelling what is still waiting. A competitor that names an
environment runs only in a process started with it (the runner passes it)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import registry
import scenarios
from competitor import Competitor


def loop_factory(name: str):
    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    raise ValueError(f"unknown loop {name!r}")


def load(key: str) -> Competitor:
    """The competitor called key, checked against the environment this process was started with."""
    competitor = registry.load(key)
    wrong = {name: os.environ.get(name) for name, value in competitor.environment.items()
             if os.environ.get(name) != value}
    if wrong:
        raise RuntimeError(f"{key} needs {dict(competitor.environment)} in the environment this process starts "
                           f"with, before anything imports its library; found {wrong}")
    return competitor


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


async def measure(spec: dict[str, Any]) -> None:
    scenario = spec["scenario"]
    if scenario == "uncontended":
        competitors = [load(key) for key in spec["competitors"]]
        result = await scenarios.uncontended(competitors, spec["iterations"], spec["repetitions"],
                                             spec["budget_s"], spec["loop"], spec["together"])
    elif scenario == "wakeups":
        result = await scenarios.wakeups(**spec["params"])
    else:
        competitor = load(spec["competitor"])
        params = dict(spec["params"])
        result = await getattr(scenarios, scenario)(competitor, **params, limit_s=spec["limit_s"])
        result["environment"] = dict(competitor.environment)
    result["loop_class"] = f"{type(asyncio.get_running_loop()).__module__}.{type(asyncio.get_running_loop()).__name__}"
    emit(result)
    if not result.get("complete", True):
        os._exit(0)


def main() -> None:
    spec = json.loads(sys.argv[1])
    with asyncio.Runner(loop_factory=loop_factory(spec["loop"])) as runner:
        runner.run(measure(spec))


if __name__ == "__main__":
    main()
