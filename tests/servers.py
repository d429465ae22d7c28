"""A real HTTP server on a loopback port, for tests: uvicorn in a thread, no sleeps."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any

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
