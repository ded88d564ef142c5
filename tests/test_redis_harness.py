"""The Redis test harness itself, against a real redis-server: tests/redis_server.py starts, kills, restarts and
pauses it; tests/tcp_proxy.py delays, drops and refuses connections to it, on both loops.

By default, recent redis-py clients retry a command on a connection error (10 times, with a backoff, in
redis-py 8), which hides a dropped connection; the clients here do not retry, so each test sees what the
harness does. Timings are bounded from below only, by what the harness guarantees: a paused server answers
no sooner than it is resumed, and a proxied chunk reaches the other side no sooner than ``latency`` after
the proxy read it."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Awaitable, Callable, TypeVar

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis_server import PING, PONG, RedisServer, answers_ping
from tcp_proxy import TcpProxy

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
LATENCY = 0.02   # s, each way through the proxy
PAUSE = 0.3      # s


def no_retry_client(port: int) -> redis.asyncio.Redis:
    """A redis-py asyncio client of 127.0.0.1:port that reports every connection error instead of retrying."""
    return redis.asyncio.Redis(port=port, retry=Retry(NoBackoff(), 0), socket_timeout=5)


async def ping_over(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
    """Sends a PING on an open connection and returns the seconds until its PONG."""
    started = time.monotonic()
    writer.write(PING)
    assert await asyncio.wait_for(reader.readexactly(len(PONG)), 5) == PONG
    return time.monotonic() - started


def test_the_server_answers_and_keeps_what_is_written(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        assert client.ping() is True
        assert client.dbsize() == 0
        client.set("left-behind", "for the next test")
        assert client.get("left-behind") == b"for the next test"


def test_each_test_starts_on_an_empty_database(redis_url: str) -> None:
    # run after the test above, which leaves a key
    with redis.Redis.from_url(redis_url) as client:
        assert client.dbsize() == 0


def test_kill_closes_connections_and_restart_serves_the_same_port_again() -> None:
    with RedisServer() as server:
        port = server.port
        assert server.url == f"redis://127.0.0.1:{port}/0"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(PING)
            assert sock.recv(64) == PONG
            server.kill()
            try:
                assert sock.recv(64) == b""
            except ConnectionResetError:
                pass
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        server.restart()
        assert server.port == port
        assert answers_ping(port)
    assert not answers_ping(port)


def test_a_paused_server_answers_once_resumed(redis_server: RedisServer) -> None:
    with socket.create_connection(("127.0.0.1", redis_server.port), timeout=5) as sock:
        redis_server.pause()
        try:
            sock.sendall(PING)
            sock.settimeout(0.2)
            with pytest.raises(TimeoutError):
                sock.recv(64)
        finally:
            redis_server.resume()
        sock.settimeout(5)
        assert sock.recv(64) == PONG

        started = time.monotonic()
        redis_server.pause(PAUSE)
        sock.sendall(PING)
        assert sock.recv(64) == PONG
        assert time.monotonic() - started >= PAUSE


def test_the_proxy_forwards_and_delays_each_way(run: Run[float], redis_server: RedisServer) -> None:
    async def main() -> float:
        async with TcpProxy(redis_server.port) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            try:
                await ping_over(reader, writer)
                proxy.latency = LATENCY
                return await ping_over(reader, writer)
            finally:
                writer.close()
                await writer.wait_closed()

    assert run(main()) >= 2 * LATENCY  # the PING waits LATENCY on its way in, the PONG LATENCY on its way out


def test_dropped_connections_fail_the_next_command_only(run: Run[None], redis_server: RedisServer) -> None:
    async def main() -> None:
        async with TcpProxy(redis_server.port) as proxy:
            client = no_retry_client(proxy.port)
            try:
                assert await client.ping() is True
                proxy.drop_connections()
                with pytest.raises(redis.ConnectionError):
                    await client.ping()
                assert await client.ping() is True  # on a new connection
            finally:
                await client.aclose()

    run(main())


def test_a_refusing_proxy_fails_every_connection(run: Run[None], redis_server: RedisServer) -> None:
    async def main() -> None:
        async with TcpProxy(redis_server.port) as proxy:
            proxy.refuse = True
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            try:
                assert await asyncio.wait_for(reader.read(64), 5) == b""
            finally:
                writer.close()
                await writer.wait_closed()
            client = no_retry_client(proxy.port)
            try:
                with pytest.raises(redis.ConnectionError):
                    await client.ping()
                proxy.refuse = False
                assert await client.ping() is True
            finally:
                await client.aclose()

    run(main())
