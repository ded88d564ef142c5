"""What the tests of limiters shared by processes have in common: workers in spawned processes that
start together, and the bound checked over their merged grant logs."""

from __future__ import annotations

import multiprocessing
from typing import Any

SPAWN = multiprocessing.get_context("spawn")
JOIN = 60.0  # s: the longest a worker may take


def run_workers(target: Any, args_of: list[tuple[Any, ...]], during: Any = None) -> list[Any]:
    """Runs target(*args, ready, results) in spawned processes, which start together once all are ready
    (the barrier ready); during(processes) runs meanwhile, from that start. What each put on results."""
    results, ready = SPAWN.Queue(), SPAWN.Barrier(len(args_of) + 1)
    processes = [SPAWN.Process(target=target, args=(*args, ready, results)) for args in args_of]
    for p in processes:
        p.start()
    ready.wait(JOIN)
    if during is not None:
        during(processes)
    out = [results.get(timeout=JOIN) for _ in processes]
    for p in processes:
        p.join(JOIN)
        assert p.exitcode == 0
    return out


def excess(instants: list[int], ns_per_token: float, burst: float) -> float:
    """The most tokens by which any interval of the grants (one token each, int ns) exceeds burst + rate * t;
    computed on instants after the first, as a float of ns since 1970 is only good to 256 ns."""
    f, worst, first = -float("inf"), -float("inf"), min(instants)
    for t in sorted(t - first for t in instants):
        f = max(f, t) + ns_per_token
        worst = max(worst, (f - t) / ns_per_token - burst)
    return worst
