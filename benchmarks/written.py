"""A benchmark with a server of its own: its command line, the server in a process of its own (aiohttp, on
loopback), the medians it reports, and where its run goes (its raw results and its report, side by side in one
folder)."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")


def write(args: argparse.Namespace, script: str, title: str, results: dict[str, Any], report: str) -> None:
    """Prints report, and writes args.out/raw.json (results) and args.out/RESULTS.md: title, the command that wrote
    it (script, the benchmark's file, run as args say), then report."""
    print(report)
    out = args.out
    command = f"python benchmarks/{Path(script).name}{' --quick' if args.quick else ''}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "raw.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "RESULTS.md").write_text(f"# {title}\n\nWritten by `{command}`.\n\n{report}")


def arguments(doc: str, out: Path) -> argparse.Namespace:
    """The command line: --quick, --out (default out), and --serve (given to the server's own process: its options)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run: indicative only")
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    return parser.parse_args()


def begun(doc: str, out: Path, serve: Callable[[str], None],
          profiles: dict[str, dict[str, Any]]) -> tuple[argparse.Namespace, dict[str, Any]] | None:
    """The command line read (``arguments``): None once this is the server's own process and it has served;
    else the arguments and the results to fill, holding the profile's name and figures and the Python version."""
    args = arguments(doc, out)
    if args.serve is not None:
        serve(args.serve)
        return None
    return args, profiled(args, profiles)


def profiled(args: argparse.Namespace, profiles: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The results to fill for the profile args ask (--quick or not): its name and figures, and the Python version."""
    name = "quick" if args.quick else "full"
    return {"profile": name, **profiles[name], "python": sys.version.split()[0]}


def serve(handle: Callable[[Any], Awaitable[Any]], record: list[Any]) -> None:
    """Runs an aiohttp server of handle (GET /) on 127.0.0.1 until stdin closes: prints its URL first, then record
    (JSON), which handle fills."""
    from aiohttp import web

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/", handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        print(f"http://{host}:{port}/", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()
        print(json.dumps(record), flush=True)

    asyncio.run(main())


def against_server(script: str, option: str, client: Callable[[str], T]) -> tuple[T, Any]:
    """Starts script's server (``--serve option``) in a process of its own, runs client(url), and returns what
    client returned and the server's record."""
    server = subprocess.Popen([sys.executable, script, "--serve", option], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        result = client(server.stdout.readline().strip())
        out, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return result, json.loads(out)


def spread(values: list[float], form: str) -> str:
    """The median of values, formatted, and (least, most) after it if there is more than one."""
    shown = [format(v, form) for v in (statistics.median(values), min(values), max(values))]
    return shown[0] if len(values) == 1 else f"{shown[0]} ({shown[1]}, {shown[2]})"


async def send_until(stop: float, send: Callable[[], Awaitable[object]]) -> None:
    """Awaits send(), one call after the other, until time.monotonic() reaches stop (a call under way then is cut
    off)."""
    while time.monotonic() < stop:
        try:
            async with asyncio.timeout(max(0.0, stop - time.monotonic())):
                await send()
        except TimeoutError:
            return
