"""Limits that hold at the real server: python benchmarks/http_clients.py [--quick] [--out DIR].

Real HTTP clients (aiohttp and httpx) send requests through each limiter to a local server, run in
a process of its own (tests/http_server.py), that lets through at most 100 requests in any sliding
second, counted on arrival, answers 429 above it, and takes a processing time plus a random jitter
to answer: 5 ms plus 0-10 ms for every case, then 50 ms plus 0-100 ms (slow), and again 5 ms plus
0-10 ms with cold connections (what is granted in a run's first 150 ms sets out then, as connections
being opened hold it) for the cases with a block or a bare acquire around aiohttp. Each run starts
every request at once, as 600 tasks (a fresh server, a fresh client session and loop per run), and
repeats; medians are reported. Cases:
  * aiotb ``WindowLimiter(98, 1)``: ``async with limiter:`` around each request (aiohttp), the httpx
    transport (``aiotb.httpx.LimitedTransport``) and the aiohttp middleware
    (``aiotb.aiohttp.limiter_middleware``), each holding the slot until the response is read;
  * the same window with a bare ``await limiter.acquire()`` before each request: counted at the
    grant only, as before windows held their grants;
  * aiotb ``Limiter(90, 1, burst=5)``, a bucket, through the same three clients;
  * aiolimiter ``AsyncLimiter(98, 1)`` with ``async with`` around each request, on aiohttp and httpx.
Then a server that answers every request 429 with ``Retry-After: 1`` for its first 2 s: the httpx
transport and the aiohttp middleware, 200 requests each through ``WindowLimiter(98, 1)`` and through
``Limiter(90, 1, burst=5)``.

For each case: the 429s (a request answered 429 is not sent again), the most requests answered 200
in any second at the server, and the rate of the arrivals (429s included): the configured rate
times the time the limiter's own schedule would take on a server that answers at once, over the
time the arrivals took (up to the last arrival the schedule starts a window or a refill with). Writes http_clients/RESULTS.md beside
this file (--out to write elsewhere) and prints the same tables."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the suite's server, tests/http_server.py

from http_server import RateLimitedServer, busiest

import written

SERVER_LIMIT = 100  # requests in any sliding second, counted on arrival
TARGET_RATE_PCT = 97.0
SETTINGS = {  # the server's processing time and jitter (uniform) of each answer, and how long the client's
    # connections take to open: a request granted before then sets out then (cold connections), in seconds
    "fast": (0.005, 0.010, 0.0),
    "slow": (0.050, 0.100, 0.0),
    "cold": (0.005, 0.010, 0.150),
}
SETTING_RUNS = {"fast": "runs", "slow": "other_runs", "cold": "other_runs"}
PROFILES = {
    "full": {"requests": 600, "runs": 5, "other_runs": 3, "retry_requests": 200},
    "quick": {"requests": 300, "runs": 1, "other_runs": 1, "retry_requests": 100},
}


# ---- the server, in its own process ----

def serve(options: dict[str, Any]) -> None:
    """Runs the server until stdin closes; prints its URL first, then what arrived (JSON)."""

    async def main() -> None:
        async with RateLimitedServer(**options) as server:
            print(server.url, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            print(json.dumps([[a.at, a.status] for a in server.arrivals]), flush=True)

    asyncio.run(main())


class Server:
    """The server's process: ``with Server(...) as url:``; ``arrivals`` once the block has exited."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.arrivals: list[tuple[float, int]] = []

    def __enter__(self) -> str:
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", json.dumps(self.options)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def __exit__(self, *exc_info: object) -> None:
        out, _ = self.process.communicate(timeout=60)
        if exc_info[0] is None:
            self.arrivals = [(at, status) for at, status in json.loads(out)]


# ---- the clients ----

Send = Callable[[], Awaitable[int]]  # sends one request, returns its status


def aiohttp_session(url: str, middlewares: tuple[Any, ...] = ()) -> Any:
    import aiohttp

    return aiohttp.ClientSession(url, middlewares=middlewares,
                                 connector=aiohttp.TCPConnector(limit=SERVER_LIMIT),
                                 timeout=aiohttp.ClientTimeout(total=None))


def httpx_client(url: str, transport: Any = None) -> Any:
    import httpx

    return httpx.AsyncClient(base_url=url, transport=transport, timeout=None,
                             limits=httpx.Limits(max_connections=SERVER_LIMIT))


async def send_all(count: int, send: Send) -> list[int]:
    return list(await asyncio.gather(*(send() for _ in range(count))))


async def run_case(client: str, make_limiter: Callable[[], Any], how: str, url: str, count: int,
                   cold: float) -> list[int]:
    """Sends count requests at once through a new limiter; how: "with" (a block around each
    request), "acquire" (a bare acquire before each) or "wrapped" (the client's integration). A
    request granted in the first cold seconds sets out only then ("with" and "acquire" only)."""
    limiter = make_limiter()
    if client == "aiohttp":
        from aiotb.aiohttp import limiter_middleware

        middlewares = (limiter_middleware(limiter, retries=0),) if how == "wrapped" else ()
        async with aiohttp_session(url, middlewares) as session:
            async def get() -> int:
                async with session.get("/") as response:
                    await response.read()
                    return int(response.status)

            return await send_all(count, limited(limiter, how, get, cold))
    from aiotb.httpx import LimitedTransport

    transport = LimitedTransport(limiter, retries=0) if how == "wrapped" else None
    async with httpx_client(url, transport) as http:
        async def fetch() -> int:
            return int((await http.get("/")).status_code)

        return await send_all(count, limited(limiter, how, fetch, cold))


def limited(limiter: Any, how: str, send: Send, cold: float) -> Send:
    if how == "wrapped":
        return send
    loop = asyncio.get_running_loop()
    warm_at = loop.time() + cold  # the connections are open

    async def set_out() -> int:
        if loop.time() < warm_at:
            await asyncio.sleep(warm_at - loop.time())
        return await send()

    async def with_block() -> int:
        async with limiter:
            return await set_out()

    async def after_acquire() -> int:
        await limiter.acquire()
        return await set_out()

    return with_block if how == "with" else after_acquire


# ---- the cases ----

def window() -> Any:
    from aiotb import WindowLimiter

    return WindowLimiter(98, 1)


def bucket() -> Any:
    from aiotb import Limiter

    return Limiter(90, 1, burst=5)


def aiolimiter_98() -> Any:
    from aiolimiter import AsyncLimiter

    return AsyncLimiter(98, 1)


# name: (limiter, its schedule (kind, rate, first allowance), client, how)
CASES: dict[str, tuple[Callable[[], Any], tuple[str, float, int], str, str]] = {
    "aiotb WindowLimiter(98, 1), aiohttp, async with": (window, ("window", 98, 98), "aiohttp", "with"),
    "aiotb WindowLimiter(98, 1), httpx transport": (window, ("window", 98, 98), "httpx", "wrapped"),
    "aiotb WindowLimiter(98, 1), aiohttp middleware": (window, ("window", 98, 98), "aiohttp", "wrapped"),
    "aiotb WindowLimiter(98, 1), aiohttp, bare acquire": (window, ("window", 98, 98), "aiohttp", "acquire"),
    "aiotb Limiter(90, 1, burst=5), aiohttp, async with": (bucket, ("bucket", 90, 5), "aiohttp", "with"),
    "aiotb Limiter(90, 1, burst=5), httpx transport": (bucket, ("bucket", 90, 5), "httpx", "wrapped"),
    "aiotb Limiter(90, 1, burst=5), aiohttp middleware": (bucket, ("bucket", 90, 5), "aiohttp", "wrapped"),
    "aiolimiter AsyncLimiter(98, 1), aiohttp, async with": (aiolimiter_98, ("bucket", 98, 98), "aiohttp", "with"),
    "aiolimiter AsyncLimiter(98, 1), httpx, async with": (aiolimiter_98, ("bucket", 98, 98), "httpx", "with"),
}
OTHER_CASES = ["aiotb WindowLimiter(98, 1), aiohttp, async with", "aiotb WindowLimiter(98, 1), aiohttp, bare acquire",
              "aiotb Limiter(90, 1, burst=5), aiohttp, async with",
              "aiolimiter AsyncLimiter(98, 1), aiohttp, async with"]
TARGETED = {name for name in CASES if name.startswith("aiotb") and "bare acquire" not in name}


def rate(schedule: tuple[str, float, int], arrivals: list[float]) -> float:
    """The configured rate times the time the limiter's schedule takes, on a server that answers at
    once, over the time the arrivals took: up to the last arrival that starts a window (a window)
    or the last (a bucket)."""
    kind, per_second, allowance = schedule
    if kind == "window":
        n = allowance * ((len(arrivals) - 1) // allowance) + 1
        ideal = (n - 1) // allowance / (per_second / allowance)
    else:
        n = len(arrivals)
        ideal = (n - allowance) / per_second
    took = arrivals[n - 1] - arrivals[0]
    return per_second * ideal / took if took > 0 else math.inf


def measure(name: str, setting: str, count: int, seed: int) -> dict[str, Any]:
    """One run of a case: the 429s, the busiest second at the server, the rate."""
    make, schedule, client, how = CASES[name]
    processing, jitter, cold = SETTINGS[setting]
    server = Server(max_requests=SERVER_LIMIT, window=1.0, processing=processing, jitter=jitter, seed=seed)
    with server as url:
        statuses = asyncio.run(run_case(client, make, how, url, count, cold))
    ok = sorted(at for at, status in server.arrivals if status == 200)
    return {"requests": count, "answered": len(statuses), "429": statuses.count(429),
            "server_429": sum(1 for _, status in server.arrivals if status == 429),
            "busiest": busiest(ok, 1.0), "rate": rate(schedule, sorted(at for at, _ in server.arrivals)),
            "configured": schedule[1]}


async def retry_case(client: str, make_limiter: Callable[[], Any], url: str, count: int) -> dict[str, Any]:
    """count requests through a new limiter and the client's integration against a server that
    answers 429 with Retry-After: 1 for its first 2 s: when each attempt was sent, and when each
    answer came back to the client, with its status."""
    limiter = make_limiter()
    sends: list[float] = []  # when an attempt left the limiter for the connection
    answers: list[tuple[float, int]] = []  # when a response came back to the client, its status

    if client == "aiohttp":
        from aiotb.aiohttp import limiter_middleware

        async def seen(request: Any, handler: Any) -> Any:  # after the limiter: every attempt
            sends.append(time.monotonic())
            response = await handler(request)
            answers.append((time.monotonic(), response.status))
            return response

        async with aiohttp_session(url, (limiter_middleware(limiter), seen)) as session:
            async def get() -> int:
                async with session.get("/") as response:
                    await response.read()
                    return int(response.status)

            statuses = await send_all(count, get)
    else:
        import httpx

        from aiotb.httpx import LimitedTransport

        class Seen(httpx.AsyncBaseTransport):
            def __init__(self) -> None:
                self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=SERVER_LIMIT))

            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                sends.append(time.monotonic())
                response = await self.inner.handle_async_request(request)
                answers.append((time.monotonic(), response.status_code))
                return response

            async def aclose(self) -> None:
                await self.inner.aclose()

        async with httpx_client(url, LimitedTransport(limiter, Seen())) as http:
            async def fetch() -> int:
                return int((await http.get("/")).status_code)

            statuses = await send_all(count, fetch)
    return {"statuses": statuses, "sends": sends, "answers": answers}


RETRY_LIMITERS = {"WindowLimiter(98, 1)": window, "Limiter(90, 1, burst=5)": bucket}


def measure_retry(client: str, limiter: str, count: int) -> dict[str, Any]:
    """The Retry-After run of one client: the final statuses; the pause, from each 429's return to
    the client until 1 s later (the union of those); attempts sent inside it; how long after its
    end sending resumed."""
    server = Server(max_requests=SERVER_LIMIT, window=1.0, processing=SETTINGS["fast"][0],
                    jitter=SETTINGS["fast"][1], throttle_for=2.0, throttle_retry_after="1")
    with server as url:
        got = asyncio.run(retry_case(client, RETRY_LIMITERS[limiter], url, count))
    pauses: list[list[float]] = []
    for back in sorted(at for at, status in got["answers"] if status == 429):
        if pauses and back <= pauses[-1][1]:
            pauses[-1][1] = max(pauses[-1][1], back + 1.0)
        else:
            pauses.append([back, back + 1.0])
    sends = sorted(got["sends"])
    inside = sum(1 for at in sends if any(start < at < end for start, end in pauses))
    resumed = [min((at for at in sends if at >= end), default=math.nan) - end for _, end in pauses]
    return {"requests": count, "all_200": got["statuses"].count(200),
            "429s": sum(1 for _, status in got["answers"] if status == 429), "attempts": len(sends),
            "pauses": [round(end - start, 3) for start, end in pauses], "sent_during_pause": inside,
            "resumed_after_ms": [round(gap * 1e3, 2) for gap in resumed]}


# ---- the report ----

def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def tables(results: dict[str, Any]) -> str:
    lines = [f"Server: at most {SERVER_LIMIT} requests in any sliding second, counted on arrival; "
             f"{results['requests']} requests started at once per run. Target (aiotb): 0 × 429 in every run, "
             f"rate ≥ {TARGET_RATE_PCT:g} % of the configured one.", ""]
    for setting, runs_key in SETTING_RUNS.items():
        processing, jitter, cold = SETTINGS[setting]
        late = (f"; the client's connections open in {cold * 1e3:g} ms: what is granted before sets out then"
                if cold else "")
        lines += [f"### Server processing {processing * 1e3:g} ms + jitter 0–{jitter * 1e3:g} ms{late} "
                  f"({results[runs_key]} runs each)", "",
                  "| limiter, client | 429s per run | busiest second at the server | rate of arrivals /s (median) | "
                  "% of configured | target |", "|---|---|---|---|---|---|"]
        for name, runs in results["cases"][setting].items():
            configured = runs[0]["configured"]
            r = median_of(runs, "rate")
            percent = 100 * r / configured
            if name in TARGETED and setting == "fast":
                met = all(run["429"] == 0 for run in runs) and percent >= TARGET_RATE_PCT
                verdict = "met" if met else "MISSED"
            else:
                verdict = ""
            lines.append(f"| {name} | {', '.join(str(run['429']) for run in runs)} | "
                         f"{', '.join(str(run['busiest']) for run in runs)} | {r:.1f} | {percent:.1f} | {verdict} |")
        lines.append("")
    lines += ["### Retry-After: the server answers 429 with Retry-After: 1 for its first 2 s", "",
              "A pause runs from a 429's return to the client until 1 s later (overlapping ones merged); "
              "attempts are counted as they leave the limiter for the connection.", "",
              "| aiotb limiter, client | requests | answered 200 in the end | 429s | attempts | "
              "pauses (s) | attempts sent during a pause | sending resumed after the pause (ms) |",
              "|---|---|---|---|---|---|---|---|"]
    for case, run in results["retry"].items():
        lines.append(f"| {case} | {run['requests']} | {run['all_200']} | {run['429s']} | {run['attempts']} | "
                     f"{', '.join(f'{p:.3f}' for p in run['pauses'])} | {run['sent_during_pause']} | "
                     f"{', '.join(f'{g:.2f}' for g in run['resumed_after_ms'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = written.arguments(__doc__ or "", HERE / "http_clients")
    if args.serve is not None:
        serve(json.loads(args.serve))
        return
    profile = PROFILES["quick" if args.quick else "full"]
    results: dict[str, Any] = {"profile": "quick" if args.quick else "full", "requests": profile["requests"],
                               "runs": profile["runs"], "other_runs": profile["other_runs"],
                               "cases": {setting: {} for setting in SETTINGS}, "retry": {}}
    seed = 1
    for setting, runs_key in SETTING_RUNS.items():
        for name in list(CASES) if setting == "fast" else OTHER_CASES:
            done = []
            for _ in range(profile[runs_key]):
                done.append(measure(name, setting, profile["requests"], seed))
                seed += 1
                print(f"{setting} | {name}: {done[-1]}", file=sys.stderr, flush=True)
            results["cases"][setting][name] = done
    for limiter in RETRY_LIMITERS:
        for client in ("httpx transport", "aiohttp middleware"):
            case = f"{limiter}, {client}"
            results["retry"][case] = measure_retry(client.split()[0], limiter, profile["retry_requests"])
            print(f"retry | {case}: {results['retry'][case]}", file=sys.stderr, flush=True)
    written.write(args, __file__, "HTTP clients against a server that counts a sliding window", results,
                  tables(results))


if __name__ == "__main__":
    main()
