"""Spawned worker processes of the benchmarks that run several processes (shared.py, redis_store.py):
the parent's end (Worker, crew, release, results_of) and the worker's (run_role). A worker says
"ready" once its limiter is built, and starts at the one instant the parent then sends to all."""

from __future__ import annotations

import time
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator

READY_TIMEOUT = 120.0  # s for every worker of a case to start and build its limiter
RESULT_SLACK = 60.0  # s a worker may take beyond its run to send its result
START_LEAD_NS = 300_000_000  # the start instant, this long after the last worker is ready

Role = Callable[[dict[str, Any], Any], Any]


class Worker:
    """A spawned process running target(spec, pipe) (a workers module's main) and the parent's end of
    its pipe."""

    def __init__(self, ctx: Any, spec: dict[str, Any], target: Callable[[dict[str, Any], Any], None]) -> None:
        self.spec = spec
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=target, args=(spec, child), daemon=True)
        self.process.start()
        child.close()

    def receive(self, timeout: float) -> Any:
        """The worker's next message; RuntimeError for its error or its death, TimeoutError."""
        if not self.conn.poll(timeout):
            raise TimeoutError(f"{self.spec['role']} worker {self.process.pid}: nothing within {timeout:.0f} s")
        try:
            message = self.conn.recv()
        except EOFError:
            self.process.join(5)
            raise RuntimeError(f"{self.spec['role']} worker {self.process.pid} died "
                               f"(exit code {self.process.exitcode})") from None
        if isinstance(message, dict) and "error" in message:
            raise RuntimeError(f"{self.spec['role']} worker {self.process.pid} failed:\n{message['error']}")
        return message

    def kill(self) -> None:
        """SIGKILL (which ends a stopped process too) if still running, and reap it."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.conn.close()


@contextmanager
def crew() -> Iterator[list[Worker]]:
    """The workers of a case: each killed and reaped when the case ends, however it ends."""
    workers: list[Worker] = []
    try:
        yield workers
    finally:
        for worker in workers:
            worker.kill()


def release(workers: list[Worker]) -> int:
    """Waits until every worker is ready, sends them one start instant, returns it."""
    for worker in workers:
        if worker.receive(READY_TIMEOUT) != "ready":
            raise RuntimeError(f"worker {worker.process.pid} did not say ready")
    start_ns = time.monotonic_ns() + START_LEAD_NS
    for worker in workers:
        worker.conn.send(start_ns)
    return start_ns


def results_of(workers: list[Worker], run_s: float) -> list[Any]:
    """Each worker's result, all within run_s and RESULT_SLACK from now."""
    deadline = time.monotonic() + run_s + RESULT_SLACK
    return [worker.receive(max(1.0, deadline - time.monotonic())) for worker in workers]


def run_role(roles: dict[str, Role], spec: dict[str, Any], conn: Any) -> None:
    """A worker process's body: runs spec's role, sends its result (or its error) on conn."""
    try:
        result = roles[spec["role"]](spec, conn)
    except BaseException:  # noqa: BLE001 - reported to the parent
        conn.send({"error": traceback.format_exc()})
    else:
        conn.send(result)
    finally:
        conn.close()
