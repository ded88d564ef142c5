"""A limiter over a RedisStore on a Redis Cluster: three masters on 127.0.0.1, made by the test with
``redis-cli --cluster create``, and redis-py's asyncio cluster client. Both keys of a window (the hash
and its log) carry the quota's hash tag, so each script runs on one node; quotas of different names
land on different nodes."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from typing import Awaitable, Callable, Iterator, TypeVar

import aiotb
import pytest
from redis.asyncio import RedisCluster
from redis_server import RedisServer, free_port

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
FORM_WITHIN = 30.0  # s: the longest the cluster may take to agree on its slots


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[RedisServer]]:
    """Three cluster nodes of one cluster, every slot served."""
    nodes = [RedisServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-port", str(free_port()), "--cluster-node-timeout", "5000") for _ in range(3)]
    try:
        for node in nodes:
            node.start()
        cli = shutil.which("redis-cli")
        assert cli is not None, "redis-cli comes with redis-server: ./run test installs both"
        made = subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
                               "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True,
                              timeout=FORM_WITHIN)
        assert made.returncode == 0, made.stdout + made.stderr
        deadline = time.monotonic() + FORM_WITHIN
        while True:
            info = subprocess.run([cli, "-p", str(nodes[0].port), "cluster", "info"], capture_output=True,
                                  text=True, timeout=5).stdout
            if "cluster_state:ok" in info:
                break
            assert time.monotonic() < deadline, info
            time.sleep(0.1)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def test_limiters_over_a_cluster(run: Run[None], cluster: list[RedisServer]) -> None:
    async def main() -> None:
        client = RedisCluster(host="127.0.0.1", port=cluster[0].port)
        try:
            await client.flushall()  # every primary: the cluster is the module's
            await exercise(client)
        finally:
            await client.aclose()

    async def exercise(client: RedisCluster) -> None:
        names = [f"quota-{i}" for i in range(12)]
        limiters = [aiotb.Limiter(1, 3600, burst=2, store=aiotb.RedisStore(client, name)) for name in names]
        for limiter in limiters:
            assert await limiter.atry_acquire(2)
            assert not await limiter.atry_acquire(1)
        homes = {client.keyslot(limiter.store.redis_key) for limiter in limiters}
        nodes = {client.get_node_from_key(limiter.store.redis_key).port for limiter in limiters}
        assert len(homes) == len(names) and len(nodes) > 1  # the quotas are spread over the nodes

        window = aiotb.WindowLimiter(2, 3600, store=aiotb.RedisStore(client, "window"))
        assert client.keyslot(window.store.redis_key) == client.keyslot(window.store.redis_key + ":log")
        async with window:
            assert await window.atry_acquire(1)
            assert not await window.atry_acquire(1)

        keyed = aiotb.KeyedLimiter(1, 3600, store=aiotb.RedisStore(client, "per-user"))
        assert await keyed["alice"].atry_acquire() and await keyed["bob"].atry_acquire()
        assert not await keyed["alice"].atry_acquire()

        waiter = asyncio.ensure_future(limiters[0].acquire(1, timeout=0.5))
        with pytest.raises(TimeoutError):  # an hour away: refused at once, on the node that holds it
            await waiter
        await client.script_flush()  # every node forgets the scripts: the next call loads them again
        assert not await limiters[1].atry_acquire(1)
        assert await aiotb.Limiter(1, 3600, burst=2, store=aiotb.RedisStore(client, "fresh")).atry_acquire(2)

    run(main())
