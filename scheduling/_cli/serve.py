"""``prana serve``: the web app (webhook route, operator view and API) over uvicorn."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

from scheduling._cli._common import (
    EXIT_OK,
    WORKER_POLL_SECONDS,
    CLIError,
    add_lease,
    add_logging,
    add_max_interruptions,
    check_max_interruptions,
    check_seconds,
    load_actions,
    make_runner,
    open_store,
    where,
)
from scheduling._cli.worker import rearm_until

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    import uvicorn

    from scheduling._cli._common import AddCommand

_NEEDS_WEB = "prana serve needs the web extra: pip install 'prana-workflows[web]'"


def register(add: AddCommand) -> None:
    """Add ``serve`` to the parser."""
    serve = add(
        "serve",
        "serve POST /hooks/{token}, the read-only view and the JSON API (and resume due work)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    serve.add_argument("--actions", help="module (or .py file) registering your actions")
    serve.add_argument(
        "--max-body",
        type=int,
        default=1 << 20,
        metavar="BYTES",
        help="largest webhook body accepted (default 1 MiB)",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="addresses of your reverse proxies (comma-separated) whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed; by default none are, from anyone",
    )
    add_lease(
        serve,
        "seconds an execution this process runs stays its own if the process dies (killed, "
        "cut off): then a worker takes it up (default 30; give it the workers' --lease)",
    )
    add_max_interruptions(serve)
    add_logging(serve, console=False)
    serve.set_defaults(handler=_cmd_serve)


MAX_CONNECTIONS = 200
"""Connections and requests ``prana serve`` handles at once; past it, uvicorn answers 503."""


def server_config(app: Any, args: argparse.Namespace) -> uvicorn.Config:
    """uvicorn's settings for ``prana serve``: no proxy headers believed unless
    ``--forwarded-allow-ips`` names the proxies (uvicorn believes loopback's by default:
    rotating ``X-Forwarded-For`` from the machine itself gave unlimited sign-in guesses, and
    a forged one locked a remote operator out), and at most ``MAX_CONNECTIONS`` at once."""
    import uvicorn

    forwarded: str | None = args.forwarded_allow_ips
    return uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        proxy_headers=forwarded is not None,
        forwarded_allow_ips=forwarded,
        limit_concurrency=MAX_CONNECTIONS,
        timeout_keep_alive=5,
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from scheduling.web import create_app
        from scheduling.web._app import MIN_TOKEN_CHARS, TOKEN_ADVICE, redact_access_log
    except ImportError:
        raise CLIError(_NEEDS_WEB) from None
    token = os.environ.get("PRANA_WEB_TOKEN") or None
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        # Checked before the store is opened, naming the variable the user actually set.
        raise CLIError(f"PRANA_WEB_TOKEN is {len(token)} characters: {TOKEN_ADVICE}")
    if token is None and not _is_loopback(args.host):
        raise CLIError(
            f"--host {args.host}: without an operator token the view and API answer loopback "
            "clients only; set PRANA_WEB_TOKEN to serve beyond this machine, or bind 127.0.0.1"
        )
    if not 0 <= args.port <= 65535:
        raise CLIError(f"--port {args.port}: use a port from 0 to 65535")
    check_seconds("--lease", args.lease)
    check_max_interruptions(args.max_interruptions)
    registry = load_actions(args.actions)
    store = open_store(args, must_exist=False)
    try:
        runner = make_runner(
            registry,
            store,
            None,
            recover=True,
            lease_seconds=args.lease,
            max_interruptions=args.max_interruptions,
        )
        app = create_app(runner, token=token, max_body_bytes=args.max_body)
        access = "operator token required" if token else "no operator token: loopback only"
        config = server_config(app, args)
        server = uvicorn.Server(config)
        # Like `prana worker`: work other processes left due without an alarm (a `prana run`
        # stopped in backoff, a dead process's lease) is re-armed every second.
        stop = threading.Event()
        with _sigterm_stops(server) as signalled:
            print(f"prana serve on http://{args.host}:{args.port} over {where(args)} ({access})")
            redact_access_log()  # again after uvicorn's logging config, whatever it did
            with runner:
                rearm = threading.Thread(
                    target=rearm_until,
                    args=(runner, stop, WORKER_POLL_SECONDS),
                    name="prana-rearm",
                    daemon=True,
                )
                rearm.start()
                try:
                    server.run()
                finally:
                    stop.set()
                    rearm.join(timeout=5)
    finally:
        store.close()
    if signalled:
        print(_STOPPED)
    return EXIT_OK


_STOPPED = "serve stopped (SIGTERM): suspended executions stay in the store for the next worker"


@contextlib.contextmanager
def _sigterm_stops(server: uvicorn.Server) -> Iterator[list[signal.Signals]]:
    """While inside, SIGTERM stops ``server`` gracefully and is recorded, never fatal.

    uvicorn stops on SIGTERM, then raises it again once it has put back the handler it
    found: Python's default one ended the process (exit -15) before the runner closed, so
    an alarm the runner was firing was cut off mid-action, where a worker finishes and
    saves it. The handler here is the one uvicorn finds and raises into; a SIGTERM before
    uvicorn installs its own (on the start-up line) stops the server as it starts.
    """
    signalled: list[signal.Signals] = []

    def on_sigterm(signum: int, frame: object) -> None:
        del frame
        signalled.append(signal.Signals(signum))
        server.should_exit = True

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield signalled
    finally:
        signal.signal(signal.SIGTERM, previous)
