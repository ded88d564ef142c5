"""A client of a quota shared with someone else: ``python -m aiotb.demo api [SECONDS]``.

A local server counts a language model's API quota in fixed windows of one second: 20 requests and 2,000 tokens
in each. A request declares its tokens (the prompt and the most it lets the answer take: 50 to 250 here); the
server counts them when it admits the request and answers 429 when the request or its tokens do not fit what is
left. Every answer says what is left and when the window resets, OpenAI's way (``x-ratelimit-remaining-requests``,
``x-ratelimit-reset-requests: 350ms``, the same for tokens). Another client, which we do not see, takes its share
as each window opens: 4 requests of 100 tokens.

Our client has 8 tasks sending as fast as two limiters let them, ``Limiter(20, 1)`` for requests and
``Limiter(2000, 1)`` for tokens: the quota as documented. It runs twice, SECONDS (default 3) each: once counting
alone, once following every answer's headers (``limiter.follow``). Every figure printed is computed from the
server's record of what it admitted and refused in that run."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._limiter import Limiter

REQUESTS, TOKENS, WINDOW = 20, 2000, 1.0  # the server's quota per window (seconds)
WINDOW_NS = round(WINDOW * 1e9)
OTHER_REQUESTS, OTHER_TOKENS = 4, 100  # what the other client takes as each window opens
TASKS = 8
SMALLEST, LARGEST = 50, 250  # tokens a request of ours declares, drawn evenly


class Answer(NamedTuple):
    window: int
    ours: bool
    admitted: bool
    tokens: int
    informed: bool  # ours, sent once our client had an answer from this window: news it could act on


@dataclass
class QuotaServer:
    """A fixed-window quota of requests and tokens, shared with the other client; records every answer."""

    start: float
    answers: list[Answer] = field(default_factory=list)
    handlers: list[asyncio.Task[Any]] = field(default_factory=list)  # one per connection
    _window: int = -1
    _requests: int = 0
    _tokens: int = 0

    def window(self, now: float) -> int:
        return self._elapsed_ns(now) // WINDOW_NS

    def _elapsed_ns(self, now: float) -> int:
        return round((now - self.start) * 1e9)  # whole ns: a float a hair short of a window's edge is on it

    def _take(self, window: int, tokens: int, ours: bool, informed: bool) -> bool:
        admitted = self._requests < REQUESTS and self._tokens + tokens <= TOKENS
        if admitted:
            self._requests += 1
            self._tokens += tokens
        self.answers.append(Answer(window, ours, admitted, tokens if admitted else 0, informed))
        return admitted

    def admit(self, now: float, tokens: int, informed: bool) -> tuple[int, dict[str, str]]:
        """The status and rate-limit headers for a request of ours declaring ``tokens`` that arrives at ``now``."""
        window = self.window(now)
        if window != self._window:  # a new window: the other client's share goes first
            self._window, self._requests, self._tokens = window, 0, 0
            for _ in range(OTHER_REQUESTS):
                self._take(window, OTHER_TOKENS, False, False)
        admitted = self._take(window, tokens, True, informed)
        reset = f"{-(-((window + 1) * WINDOW_NS - self._elapsed_ns(now)) // 1_000_000)}ms"  # whole ms, rounded up
        return (200 if admitted else 429), {
            "x-ratelimit-limit-requests": str(REQUESTS), "x-ratelimit-remaining-requests": str(REQUESTS - self._requests),
            "x-ratelimit-reset-requests": reset, "x-ratelimit-limit-tokens": str(TOKENS),
            "x-ratelimit-remaining-tokens": str(TOKENS - self._tokens), "x-ratelimit-reset-tokens": reset,
            "x-window": str(window)}  # for the demo's count of what the client knew

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """HTTP/1.1 with keep-alive: each request's ``x-tokens`` and ``x-informed`` fields, no body."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is not None:
            self.handlers.append(task)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
                status, headers = self.admit(loop.time(), int(fields["x-tokens"]), fields["x-informed"] == "1")
                lines = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Too Many Requests'}", "content-length: 0"]
                lines += [f"{name}: {value}" for name, value in headers.items()]
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            await writer.wait_closed()


async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tokens: int,
               informed: bool) -> tuple[int, list[tuple[str, str]]]:
    """One request on a kept-alive connection: the answer's status and header fields."""
    writer.write(f"POST /v1/complete HTTP/1.1\r\nhost: 127.0.0.1\r\nx-tokens: {tokens}\r\n"
                 f"x-informed: {int(informed)}\r\ncontent-length: 0\r\n\r\n".encode("latin-1"))
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    pairs = [(name, value) for name, _, value in (line.partition(": ") for line in head[1:] if line)]
    return int(head[0].split()[1]), pairs


async def run(windows: int, follow: bool, seed: int = 1) -> list[Answer]:
    """Our client for ``windows`` windows; the server's record of every answer."""
    loop = asyncio.get_running_loop()
    server = QuotaServer(loop.time())
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    requests, tokens = Limiter(REQUESTS, WINDOW), Limiter(TOKENS, WINDOW)
    draw = random.Random(seed)
    flying = [0, 0]  # our requests sent and not yet answered, and their tokens
    heard: set[int] = set()  # the windows our client had an answer from

    async def task() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            cost = draw.randint(SMALLEST, LARGEST)
            await requests.acquire()
            await tokens.acquire(cost)
            if server.window(loop.time()) >= windows:
                break
            flying[0] += 1
            flying[1] += cost
            _, headers = await send(reader, writer, cost, server.window(loop.time()) in heard)
            flying[0] -= 1
            flying[1] -= cost
            heard.add(int(dict(headers)["x-window"]))
            if follow:
                requests.follow(headers, in_flight=flying[0])
                tokens.follow(headers, quota="tokens", in_flight=flying[1])
        writer.close()
        await writer.wait_closed()

    async with listening:
        await asyncio.gather(*(task() for _ in range(TASKS)))
        await asyncio.gather(*server.handlers)  # the server's end of each connection
    return server.answers


def report(label: str, answers: list[Answer], windows: int) -> str:
    """What our client got, from the server's record."""
    ours = [a for a in answers if a.ours]
    refused = [a for a in ours if not a.admitted]
    late = [a for a in refused if a.informed]
    served = sum(a.tokens for a in ours if a.admitted)
    seen = {a.window for a in answers}
    left = len(seen) * TOKENS - sum(a.tokens for a in answers if not a.ours)  # what the other client left us
    return (f"{label}: {len(ours) - len(refused)} answered, {len(refused)} refused with 429 ({len(late)} sent after "
            f"an answer from their window); {served / (windows * WINDOW):,.0f} tokens/s served, "
            f"{100 * served / left:.0f} % of the {left:,} tokens the other client left in {len(seen)} windows")


async def main(seconds: int = 3) -> list[list[Answer]]:
    """Both runs, printed; their records."""
    windows = round(seconds / WINDOW)
    print(f"server: {REQUESTS} requests and {TOKENS:,} tokens per {WINDOW:g} s window; another client takes "
          f"{OTHER_REQUESTS} requests of {OTHER_TOKENS} tokens as each window opens")
    print(f"ours: Limiter({REQUESTS}, {WINDOW:g}) for requests, Limiter({TOKENS}, {WINDOW:g}) for tokens, "
          f"{TASKS} tasks, {SMALLEST} to {LARGEST} tokens a request, {windows} windows a run")
    records = []
    for label, follow in (("counting alone", False), ("following the headers", True)):
        answers = await run(windows, follow)
        print(report(label, answers, windows))
        records.append(answers)
    return records
