"""A real redis-server for the tests, started as a child process on 127.0.0.1 only.

``with RedisServer() as server:`` serves ``server.url`` on a free port until the block exits, with no
persistence (no RDB snapshots, no append-only file) and its working directory in a temporary folder. For
fault tests, ``kill()`` ends it at once (SIGKILL), ``restart()`` starts it again on the same port, and
``pause()`` / ``resume()`` freeze and thaw it (SIGSTOP / SIGCONT): a paused server keeps its connections
open and answers nothing. A missing ``redis-server`` is an error, never a skip: ``./run test`` installs it."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"
NOAUTH = b"-NOAUTH"  # a server with a password answers so before AUTH: it is up
START_WITHIN = 10.0   # s: a server that does not answer PING by then failed to start
STOP_WITHIN = 5.0     # s: after SIGTERM, the server is killed if it has not exited by then


def answers_ping(port: int, timeout: float = 1.0) -> bool:
    """Whether a server on 127.0.0.1:port answers a PING within timeout seconds: PONG, or NOAUTH from a server
    that asks for a password first."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(PING)
            reply = b""
            while not reply.endswith(b"\r\n") and (chunk := sock.recv(64)):
                reply += chunk
            return reply == PONG or reply.startswith(NOAUTH)
    except OSError:
        return False


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server child process on 127.0.0.1; see the module's docstring."""

    def __init__(self, *options: str) -> None:
        """options: more of redis-server's command line (a cluster node's, say)."""
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError("redis-server is not on PATH: the Redis tests need it (./run test installs it)")
        self.executable = executable
        self.options = options
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._resume_timer: threading.Timer | None = None

    @property
    def url(self) -> str:
        """The server's database 0, as redis-py's ``from_url`` takes it."""
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Starts the server on a free port; another one if that port is taken before the server binds it."""
        for _ in range(5):
            self.port = free_port()
            if self._spawn(START_WITHIN):
                return
        raise RuntimeError(f"redis-server found no free port in 5 tries:\n{self._output()}")

    def restart(self) -> None:
        """Starts the server again on the same port, after stopping it if it still runs; retries for up to
        START_WITHIN seconds while the port is still held (redis sets SO_REUSEADDR, but a process may hold it)."""
        self.stop()
        deadline = time.monotonic() + START_WITHIN
        while not self._spawn(START_WITHIN):
            if time.monotonic() >= deadline:
                raise RuntimeError(f"redis-server could not bind port {self.port} again:\n{self._output()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Ends the server: SIGTERM, then SIGKILL if it has not exited within STOP_WITHIN seconds."""
        process = self._end()
        if process is not None:
            process.terminate()
            process.send_signal(signal.SIGCONT)  # a paused server handles SIGTERM only once it runs again
            try:
                process.wait(STOP_WITHIN)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def kill(self) -> None:
        """Ends the server at once (SIGKILL), as a crash would; its port is free when this returns."""
        process = self._end()
        if process is not None:
            process.kill()
            process.wait()

    def pause(self, seconds: float | None = None) -> None:
        """Freezes the server (SIGSTOP); it runs again after ``seconds`` when given (a timer thread, so that the
        caller's loop keeps running meanwhile), else at ``resume()``."""
        process = self._running()
        self._cancel_resume()
        process.send_signal(signal.SIGSTOP)
        if seconds is not None:
            self._resume_timer = threading.Timer(seconds, process.send_signal, (signal.SIGCONT,))
            self._resume_timer.start()

    def resume(self) -> None:
        """Lets a paused server run again (SIGCONT) now."""
        self._cancel_resume()
        self._running().send_signal(signal.SIGCONT)

    def _spawn(self, within: float) -> bool:
        """Starts the process on self.port and waits until it answers PING: True; False if it exited because
        the port was taken. Raises RuntimeError, with the server's output, on any other failure."""
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="aiotb-redis-")
        folder = Path(self._folder.name)
        with open(folder / "output.log", "wb") as output:
            self._process = subprocess.Popen(
                [self.executable, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                 "--appendonly", "no", "--dir", str(folder), "--logfile", "", *self.options],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                if "Address already in use" in self._output():
                    return False
                raise RuntimeError(f"redis-server exited at start:\n{self._output()}")
            if answers_ping(self.port, timeout=0.5):
                return True
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(f"redis-server did not answer PING on port {self.port} within {within:.1f} s:\n"
                           f"{self._output()}")

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError("redis-server is not running")
        return self._process

    def _cancel_resume(self) -> None:
        if self._resume_timer is not None:
            self._resume_timer.cancel()
            self._resume_timer = None

    def _end(self) -> subprocess.Popen[bytes] | None:
        """Forgets the process and any pending resume, and returns the process if it still runs."""
        self._cancel_resume()
        process, self._process = self._process, None
        return process if process is not None and process.poll() is None else None

    def _output(self) -> str:
        """What the server wrote on its standard output and error at its last start."""
        if self._folder is None:
            return ""
        return (Path(self._folder.name) / "output.log").read_text(errors="replace")
