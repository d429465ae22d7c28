"""Real servers for tests: HTTP (uvicorn in a thread) and PostgreSQL of a test's own; no sleeps."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from processes import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

START_TIMEOUT_SECONDS = 20.0


@contextlib.contextmanager
def serve(app: Any, *, log_level: str = "warning") -> Iterator[str]:
    """Serve the ASGI ``app`` on 127.0.0.1 (a free port); yield its base URL, then stop it.

    The socket is bound before the thread starts, and the server's own startup sets an
    event, so the URL is live when this yields; leaving waits for a clean shutdown.
    ``log_level="info"`` turns uvicorn's access log on (as ``uvicorn`` run by hand has it).
    """
    import uvicorn

    started = threading.Event()

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            started.set()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=2)
    server = _Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        if not started.wait(START_TIMEOUT_SECONDS):
            raise RuntimeError(f"the test server did not start within {START_TIMEOUT_SECONDS}s")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_SECONDS)
        sock.close()


PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
"""Where Debian keeps the server's programs (initdb, pg_ctl, postgres)."""


class PostgresServer:
    """A PostgreSQL server of a test's own: ``initdb`` in a temporary directory, on a free port.

    For fault tests that restart or crash the server; never the shared one. As root the
    server runs as the ``postgres`` user (initdb refuses root). ``restart`` is a fast
    shutdown and start; ``crash`` SIGKILLs the postmaster (by its pid) and starts it again
    once its backends are gone, so commits not yet written (``synchronous_commit=off``)
    are lost as in a real crash. ``stop`` ends it (teardown).
    """

    def __init__(self) -> None:
        found = sorted(glob.glob(PG_BIN_GLOB))
        if not found:
            raise RuntimeError(f"no PostgreSQL server programs under {PG_BIN_GLOB}")
        self.bin = Path(found[-1])
        # Its own directory under the system's temporary one: pytest's tmp_path sits in a
        # directory only root may enter, and the server runs as ``postgres``.
        self.base = Path(tempfile.mkdtemp(prefix="prana-pg-"))
        self.data = self.base / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        _subreaper(on=True)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self._as, str(self.bin / program), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.base}"
            " -c fsync=off -c max_connections=200"
        )
        log = str(self.base / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def restart(self) -> None:
        """A fast shutdown (every connection ended) and a start."""
        pid = self.postmaster_pid()
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        _wait_gone([pid])
        self.start()

    def crash(self) -> None:
        """SIGKILL the postmaster; start again once every process of the old server ended."""
        pid = self.postmaster_pid()
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        _wait_gone([pid, *children])
        self.start()

    def stop(self) -> None:
        import contextlib

        with contextlib.suppress(RuntimeError, OSError, ValueError):
            pid = self.postmaster_pid()
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            _wait_gone([pid])
        shutil.rmtree(self.base, ignore_errors=True)
        _subreaper(on=False)


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _subreaper(*, on: bool) -> None:
    """Have the server's processes, orphaned once ``pg_ctl`` exits, become this process's
    children (Linux ``PR_SET_CHILD_SUBREAPER``), so ``_wait_gone`` can reap them: this
    machine's init does not, and a zombie postmaster reads as running to the next one."""
    import ctypes

    pr_set_child_subreaper = 36
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_child_subreaper, int(on), 0, 0, 0)


def _wait_gone(pids: list[int]) -> None:
    """Wait until every process of ``pids`` ended; reap those that are our children."""

    def gone() -> bool:
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue  # ended and reaped
            if state != "Z":
                return False
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        return True

    if not wait_until(gone, timeout=START_TIMEOUT_SECONDS * 3):
        raise RuntimeError(f"the crashed server's processes {pids} did not end")
