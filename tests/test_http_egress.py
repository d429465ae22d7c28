"""http.request tried as an attacker: where it may connect (SSRF) and how long it may take."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from doubles import http_workflow
from servers import serve
from starlette.applications import Starlette
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from prana import (
    Completed,
    Failed,
    InvalidSettingsError,
    Registry,
    RetryData,
    Suspend,
    aexecute_workflow,
    execute_workflow,
)
from prana.http import HTTPRequestAction, register_http

if TYPE_CHECKING:
    from collections.abc import Iterator

    from starlette.requests import Request


class Seen:
    """What the local server was asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []


@pytest.fixture(scope="module")
def local() -> Iterator[tuple[str, Seen]]:
    """A real server on 127.0.0.1 recording each request it gets."""
    seen = Seen()

    async def ok(request: Request) -> Response:
        seen.paths.append(request.url.path)
        return JSONResponse({"hello": "world"})

    async def hop(request: Request) -> Response:
        seen.paths.append(request.url.path)
        return RedirectResponse("/ok", status_code=302)

    app = Starlette(routes=[Route("/ok", ok), Route("/hop", hop)])
    with serve(app) as url:
        yield url, seen


def _allowing(**options: Any) -> Registry:
    registry = Registry()
    register_http(registry, **options)
    return registry


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.1.2.3",
        "[::1]",
        "169.254.169.254",
        "10.0.0.1",
        "192.168.1.1",
        "172.16.0.1",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "[::ffff:127.0.0.1]",
        "[fe80::1]",
        "[fc00::1]",
        "localhost",
        # IPv6 carrying an IPv4 address Python calls global: 6to4 (2002::/16) of
        # 127.0.0.1, 169.254.169.254 and 10.0.0.1, the 6to4 relay, NAT64, IPv4-compatible
        "[2002:7f00:1::]",
        "[2002:a9fe:a9fe::1]",
        "[2002:a00:1::]",
        "192.88.99.1",
        "[2002:c058:6301::]",
        "[64:ff9b::a9fe:a9fe]",
        "[64:ff9b:1::a00:1]",
        "[::127.0.0.1]",
    ],
)
def test_private_addresses_are_refused_by_default(host: str) -> None:
    """Loopback, link-local (cloud metadata), private, shared, multicast: no retry, no request."""
    outcome = execute_workflow(http_workflow({"url": f"http://{host}:9/latest/meta-data/"}))
    assert isinstance(outcome, Failed), outcome
    assert outcome.error.type == "NonRetryable"
    assert "public addresses only" in outcome.error.message
    assert "allow_private_hosts" in outcome.error.message
    attempts = outcome.execution.node("call").attempts  # type: ignore[union-attr]
    assert len(attempts) == 1


def test_async_refuses_the_same(local: tuple[str, Seen]) -> None:
    """The async path (aexecute_workflow) checks resolved addresses too; nothing is sent."""
    url, seen = local
    before = len(seen.paths)
    outcome = asyncio.run(
        aexecute_workflow(http_workflow({"url": url.replace("127.0.0.1", "localhost") + "/ok"}))
    )
    assert isinstance(outcome, Failed)
    assert "loopback address" in outcome.error.message
    assert len(seen.paths) == before


def test_the_address_connected_to_is_checked_too(local: tuple[str, Seen]) -> None:
    """With the name resolved by the transport (as after DNS rebinding), the peer is refused."""
    url, seen = local
    before = len(seen.paths)
    for run in (execute_workflow, lambda w, **kw: asyncio.run(aexecute_workflow(w, **kw))):
        registry = _allowing(
            transport=httpx.AsyncHTTPTransport()
            if run is not execute_workflow
            else httpx.HTTPTransport()
        )
        outcome = run(
            http_workflow({"url": url.replace("127.0.0.1", "localhost") + "/ok"}), registry=registry
        )
        assert isinstance(outcome, Failed), outcome
        assert "localhost (127.0.0.1) is a loopback address" in outcome.error.message
    assert len(seen.paths) == before  # refused before a byte of the request was sent


def test_the_application_may_allow_private_hosts(local: tuple[str, Seen]) -> None:
    """allow_private_hosts=True or a matching allow_networks entry reaches the local server."""
    url, _ = local
    for registry in (
        _allowing(allow_private_hosts=True),
        _allowing(allow_networks=["127.0.0.0/8"]),
        _allowing(allow_networks=["127.0.0.1"]),
    ):
        outcome = execute_workflow(http_workflow({"url": url + "/ok"}), registry=registry)
        assert isinstance(outcome, Completed), outcome
        assert outcome.output["json"] == {"hello": "world"}
    other = execute_workflow(
        http_workflow({"url": url + "/ok"}), registry=_allowing(allow_networks=["10.0.0.0/8"])
    )
    assert isinstance(other, Failed)


def test_a_definition_cannot_allow_itself_more() -> None:
    """The opt-in is not a param: a definition naming it fails, naming the params there are."""
    outcome = execute_workflow(
        http_workflow({"url": "http://127.0.0.1/", "allow_private_hosts": True})
    )
    assert isinstance(outcome, Failed)
    assert "params.allow_private_hosts: unknown param" in outcome.error.message


def test_bad_allow_networks_is_one_clear_error() -> None:
    """A network that is not one names itself and the expected form."""
    with pytest.raises(InvalidSettingsError, match=r"'10\.0\.0\.0/33' is not an address"):
        HTTPRequestAction(allow_networks=["10.0.0.0/33"])


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/", "gopher://127.0.0.1/", "//x/"]
)
def test_other_schemes_are_refused(url: str) -> None:
    """Only http:// and https:// URLs are fetched."""
    outcome = execute_workflow(
        http_workflow({"url": url}), registry=_allowing(allow_private_hosts=True)
    )
    assert isinstance(outcome, Failed)
    assert "params.url" in outcome.error.message


def test_redirects_are_not_followed(local: tuple[str, Seen]) -> None:
    """A 302 is the output: a public URL cannot bounce the worker to a private one."""
    url, seen = local
    outcome = execute_workflow(
        http_workflow({"url": url + "/hop"}), registry=_allowing(allow_private_hosts=True)
    )
    assert isinstance(outcome, Completed)
    assert outcome.output["status"] == 302
    assert outcome.output["headers"]["location"] == "/ok"
    assert seen.paths[-1] == "/hop"


# --- the total deadline of an attempt ---------------------------------------------------------


class Drip:
    """A raw TCP server that answers one byte at a time, each well inside the read timeout.

    ``in_headers`` drips the header block itself (what httpx reads before any body chunk);
    otherwise the headers come at once and the body drips. It drips at most ``total``
    bytes, and records how many it sent before the client hung up.
    """

    PACE_SECONDS = 0.02
    """Between two bytes: far inside the 1 s read timeout the attempts use."""

    def __init__(self, *, in_headers: bool, total: int = 400) -> None:
        self.in_headers = in_headers
        self.total = total
        self.sent = 0
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/slow"
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            if self.in_headers:
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                drip = b"X-Slow: " + b"a" * self.total
            else:
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {self.total}\r\n\r\n".encode())
                drip = b"b" * self.total
            with contextlib.suppress(OSError):  # the client hung up: what the test wants
                for byte in drip:
                    if self.stop.wait(self.PACE_SECONDS):  # the pace of a slow server
                        return
                    conn.sendall(bytes([byte]))
                    self.sent += 1
                conn.sendall(b"\r\n\r\n" if self.in_headers else b"")

    def __enter__(self) -> Drip:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.sock.close()


@pytest.mark.parametrize("in_headers", [True, False], ids=["headers", "body"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_slow_drip_cannot_outlive_the_attempts_timeout(in_headers: bool, mode: str) -> None:
    """A byte every 20 ms keeps each read alive, yet the attempt ends at its 1 s timeout."""
    registry = _allowing(allow_networks=["127.0.0.1"])
    with Drip(in_headers=in_headers) as drip:
        workflow = http_workflow({"url": drip.url, "timeout": 1})
        if mode == "sync":
            outcome = execute_workflow(workflow, registry=registry)
        else:
            outcome = asyncio.run(aexecute_workflow(workflow, registry=registry))
        assert isinstance(outcome, Suspend), outcome  # a timeout retries
        assert isinstance(outcome.data, RetryData)
        error = outcome.data.original_error
        assert error.type == "ReadTimeout"
        assert "timeout of 1s (counted in total, not per read)" in error.message
        assert drip.sent < drip.total  # cut off mid-drip, not after the whole answer
