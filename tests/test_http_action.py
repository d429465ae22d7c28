"""The ``http.request`` built-in action: classification, hints, idempotency, sync and async."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import sys
import tracemalloc
import zlib
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from doubles import detail, http_workflow
from servers import serve

from prana import (
    Completed,
    Failed,
    Registry,
    RetryAfter,
    RetryData,
    RetryPolicy,
    Suspend,
    WorkflowExecution,
    aexecute_workflow,
    execute_workflow,
    resume_workflow,
)
from prana.http import HTTPStatusError, register_http
from prana.testing import ManualClock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


def _execution(outcome: Suspend) -> WorkflowExecution:
    assert outcome.execution is not None
    return outcome.execution


def _mock(handler: Callable[[httpx.Request], httpx.Response]) -> Registry:
    registry = Registry()
    register_http(registry, transport=httpx.MockTransport(handler))
    return registry


def _loopback() -> Registry:
    """A registry whose application lets http.request reach this machine (a test server)."""
    registry = Registry()
    register_http(registry, allow_networks=["127.0.0.0/8"])
    return registry


def test_every_registry_has_http_request() -> None:
    """With httpx installed, a plain Registry() knows http.request."""
    assert "http.request" in Registry()


def test_importing_prana_does_not_import_httpx() -> None:
    """httpx is imported only when an http.request node runs, not by Registry()."""
    code = "import sys, prana; prana.Registry(); print('httpx' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_success_outputs_status_headers_and_json() -> None:
    """A 2xx JSON response completes with status, headers and the parsed JSON."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": 7}, headers={"X-Thing": "yes"})

    params = {"url": "https://api.test/items", "method": "post", "json": {"name": "a"}}
    outcome = execute_workflow(http_workflow(params), registry=_mock(handler))
    assert isinstance(outcome, Completed)
    assert outcome.output["status"] == 201
    assert outcome.output["json"] == {"id": 7}
    assert outcome.output["headers"]["x-thing"] == "yes"
    assert "text" not in outcome.output
    request = seen[0]
    assert request.method == "POST"
    assert json.loads(request.content) == {"name": "a"}
    key = outcome.execution.id + ":call:0"
    assert request.headers["idempotency-key"] == key


def test_text_body_and_text_output() -> None:
    """``body`` is sent as is; a non-JSON response becomes ``text``."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="got " + request.content.decode())

    params = {"url": "https://api.test/", "method": "PUT", "body": "plain"}
    outcome = execute_workflow(http_workflow(params), registry=_mock(handler))
    assert isinstance(outcome, Completed)
    assert outcome.output["text"] == "got plain"
    assert "json" not in outcome.output


def test_idempotency_key_can_be_switched_off_or_given() -> None:
    """``idempotency_key: false`` sends none; an explicit header wins over the default."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    registry = _mock(handler)
    execute_workflow(
        http_workflow({"url": "https://a.test/", "idempotency_key": False}), registry=registry
    )
    execute_workflow(
        http_workflow({"url": "https://a.test/", "headers": {"Idempotency-Key": "mine"}}),
        registry=registry,
    )
    execute_workflow(
        http_workflow({"url": "https://a.test/", "idempotency_key": "k1"}), registry=registry
    )
    assert "idempotency-key" not in seen[0].headers
    assert seen[1].headers["idempotency-key"] == "mine"
    assert seen[2].headers["idempotency-key"] == "k1"


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_retryable_statuses_retry(status: int) -> None:
    """408, 425, 429 and 5xx fail the attempt with a retryable HTTPStatusError."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text="busy")

    outcome = execute_workflow(http_workflow({"url": "https://a.test/x"}), registry=_mock(handler))
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "retry"
    assert isinstance(outcome.data, RetryData)
    error = outcome.data.original_error
    assert error.type == "HTTPStatusError"
    assert detail(error, "status") == status
    assert detail(error, "body") == "busy"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_other_client_errors_do_not_retry(status: int) -> None:
    """Any other 4xx is NonRetryable, recording the status and a body excerpt."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text="no  such\nthing " + "x" * 500)

    outcome = execute_workflow(http_workflow({"url": "https://a.test/x"}), registry=_mock(handler))
    assert isinstance(outcome, Failed)
    error = outcome.error
    assert error.code == "non_retryable"
    assert error.type == "HTTPStatusError"
    assert detail(error, "status") == status
    assert detail(error, "body").startswith("no such thing x")
    assert len(detail(error, "body")) == 200
    assert f"HTTP {status}" in error.message


def test_retry_after_seconds_becomes_the_delay() -> None:
    """``Retry-After: 7`` on a 429 makes the next delay 7 s."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "7"})

    outcome = execute_workflow(http_workflow({"url": "https://a.test/"}), registry=_mock(handler))
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.retry_delay_ms == 7000
    assert detail(outcome.data.original_error, "status") == 429


def test_retry_after_http_date_is_read_against_the_clock() -> None:
    """``Retry-After`` as an HTTP-date is the time from the injected clock's now."""
    clock = ManualClock(datetime(2031, 5, 1, 12, 0, tzinfo=timezone.utc))
    when = format_datetime(clock() + timedelta(seconds=42), usegmt=True)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": when})

    outcome = execute_workflow(
        http_workflow({"url": "https://a.test/"}), registry=_mock(handler), clock=clock
    )
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.retry_delay_ms == 42_000


@pytest.mark.parametrize(
    ("header", "delay_ms"),
    [("7", 7000), (" 12 ", 12_000), ("1.5", 1500), ("30s", 30_000)],
)
def test_retry_after_is_read_as_the_core_reads_it(header: str, delay_ms: int) -> None:
    """The action reads ``Retry-After`` with ``RetryAfter.from_header``: one parser for both."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": header})

    outcome = execute_workflow(http_workflow({"url": "https://a.test/"}), registry=_mock(handler))
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.retry_delay_ms == delay_ms
    now = datetime.now(timezone.utc)
    assert RetryAfter.from_header(header, now=now).hint_seconds(now) == delay_ms / 1000


def test_an_unreadable_retry_after_is_ignored_and_says_why() -> None:
    """A header that is no delay retries on the policy's delay; the error keeps the status
    and records why the hint was ignored, as any ``RetryAfter`` does."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "soon-ish"})

    outcome = execute_workflow(http_workflow({"url": "https://a.test/"}), registry=_mock(handler))
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.retry_delay_ms == 1000  # the policy's initial_delay
    error = outcome.data.original_error
    assert detail(error, "status") == 429
    assert "cannot read 'soon-ish'" in detail(error, "retry_after_ignored")
    assert error.message.startswith("HTTP 429 from GET https://a.test/")
    assert "retrying on the policy's own delay" in error.message


def test_retry_after_is_capped_by_the_policy() -> None:
    """A hint past ``max_delay`` is capped, as for any RetryAfter."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "3600"})

    policy = RetryPolicy(max_attempts=2, initial_delay=1, max_delay=10)
    outcome = execute_workflow(
        http_workflow({"url": "https://a.test/"}, retry=policy), registry=_mock(handler)
    )
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.retry_delay_ms == 10_000


def test_connection_errors_and_timeouts_retry() -> None:
    """A transport error or a timeout fails the attempt and retries."""
    errors = iter([httpx.ConnectError("refused"), httpx.ReadTimeout("slow")])

    def handler(request: httpx.Request) -> httpx.Response:
        error = next(errors, None)
        if error is not None:
            raise error
        return httpx.Response(200, json=True)

    clock = ManualClock()
    registry = _mock(handler)
    workflow = http_workflow({"url": "https://a.test/"})
    outcome = execute_workflow(workflow, registry=registry, clock=clock)
    types = []
    while isinstance(outcome, Suspend):
        assert isinstance(outcome.data, RetryData)
        types.append(outcome.data.original_error.type)
        clock.advance(outcome.data.retry_delay_ms / 1000)
        outcome = resume_workflow(
            _execution(outcome), workflow=workflow, registry=registry, clock=clock
        )
    assert types == ["ConnectError", "ReadTimeout"]
    assert isinstance(outcome, Completed)
    assert outcome.output["json"] is True
    run = outcome.execution.node("call")
    assert run is not None
    attempts = run.attempts
    assert [a.outcome.value for a in attempts] == ["failed", "failed", "completed"]


def test_same_idempotency_key_on_every_attempt() -> None:
    """Every retry of a node run sends the same Idempotency-Key."""
    keys: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["idempotency-key"])
        return httpx.Response(500) if len(keys) < 3 else httpx.Response(200)

    clock = ManualClock()
    registry = _mock(handler)
    workflow = http_workflow({"url": "https://a.test/"})
    outcome = execute_workflow(workflow, registry=registry, clock=clock)
    while isinstance(outcome, Suspend):
        clock.advance(60)
        outcome = resume_workflow(
            _execution(outcome), workflow=workflow, registry=registry, clock=clock
        )
    assert isinstance(outcome, Completed)
    assert len(keys) == 3
    assert len(set(keys)) == 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "url"),
        ({"url": "ftp://x"}, "url"),
        ({"url": "https://x", "method": "BREW"}, "method"),
        ({"url": "https://x", "headers": {"a": 1}}, "headers"),
        ({"url": "https://x", "timeout": 0}, "timeout"),
        ({"url": "https://x", "timeout": True}, "timeout"),
        ({"url": "https://x", "json": {}, "body": "b"}, "body"),
        ({"url": "https://x", "body": {"a": 1}}, "body"),
        ({"url": "https://x", "idempotency_key": 3}, "idempotency_key"),
        ({"url": "https://x", "verb": "GET"}, "verb"),
    ],
)
def test_bad_params_fail_once_naming_the_param(params: dict[str, Any], field: str) -> None:
    """Bad params are a non-retryable failure naming the param and the fix."""

    def handler(request: httpx.Request) -> httpx.Response:  # pragma: no cover - never called
        raise AssertionError("no request for bad params")

    outcome = execute_workflow(http_workflow(params), registry=_mock(handler))
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "non_retryable"
    assert f"params.{field}" in outcome.error.message


def test_async_run_uses_the_async_client() -> None:
    """Under aexecute_workflow the request goes through httpx.AsyncClient on the loop."""
    loops: list[object] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        loops.append(asyncio.get_running_loop())
        return httpx.Response(200, json={"async": True})

    async def main() -> Any:
        registry = Registry()
        register_http(registry, transport=httpx.MockTransport(handler))
        outcome = await aexecute_workflow(
            http_workflow({"url": "https://a.test/"}), registry=registry
        )
        return outcome, asyncio.get_running_loop()

    outcome, loop = asyncio.run(main())
    assert isinstance(outcome, Completed)
    assert outcome.output["json"] == {"async": True}
    assert loops == [loop]


# --- against a real server on a loopback port ----------------------------------------------


def _real_app() -> Any:
    """A small Starlette app that answers by path: /ok, /flaky, /limited, /missing, /echo."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    counts: dict[str, int] = {}

    async def ok(request: Request) -> Response:
        return JSONResponse({"hello": "world"})

    async def flaky(request: Request) -> Response:
        key = request.headers.get("idempotency-key", "")
        counts[key] = counts.get(key, 0) + 1
        if counts[key] < 3:
            return PlainTextResponse("try later", status_code=503)
        return JSONResponse({"calls": counts[key], "key": key})

    async def limited(request: Request) -> Response:
        return PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "5"})

    async def missing(request: Request) -> Response:
        return PlainTextResponse("not here", status_code=404)

    async def echo(request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"method": request.method, "body": body})

    return Starlette(
        routes=[
            Route("/ok", ok),
            Route("/flaky", flaky),
            Route("/limited", limited),
            Route("/missing", missing),
            Route("/echo", echo, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def real_server() -> Iterator[str]:
    """The app above, served by uvicorn on 127.0.0.1."""
    with serve(_real_app()) as url:
        yield url


def test_real_server_success_sync_and_async(real_server: str) -> None:
    """A real GET and POST over the loopback, sync and async."""
    workflow = http_workflow({"url": real_server + "/ok"})
    outcome = execute_workflow(workflow, registry=_loopback())
    assert isinstance(outcome, Completed)
    assert outcome.output["json"] == {"hello": "world"}
    posted = http_workflow({"url": real_server + "/echo", "method": "POST", "json": {"n": 1}})
    done = asyncio.run(aexecute_workflow(posted, registry=_loopback()))
    assert isinstance(done, Completed)
    assert done.output["json"] == {"method": "POST", "body": {"n": 1}}


def test_real_server_retries_until_success(real_server: str) -> None:
    """Two 503s then a 200: two retries, one idempotency key seen three times by the server."""
    clock = ManualClock()
    workflow = http_workflow({"url": real_server + "/flaky"})
    outcome = execute_workflow(workflow, clock=clock, registry=_loopback())
    while isinstance(outcome, Suspend):
        clock.advance(60)
        outcome = resume_workflow(
            _execution(outcome), workflow=workflow, clock=clock, registry=_loopback()
        )
    assert isinstance(outcome, Completed)
    assert outcome.output["json"]["calls"] == 3
    assert outcome.output["json"]["key"] == outcome.execution.id + ":call:0"


def test_real_server_retry_after_and_not_found(real_server: str) -> None:
    """A real 429 with Retry-After gives a 5 s hint; a real 404 fails without retry."""
    limited = execute_workflow(
        http_workflow({"url": real_server + "/limited"}), registry=_loopback()
    )
    assert isinstance(limited, Suspend)
    assert isinstance(limited.data, RetryData)
    assert limited.data.retry_delay_ms == 5000
    missing = execute_workflow(
        http_workflow({"url": real_server + "/missing"}), registry=_loopback()
    )
    assert isinstance(missing, Failed)
    assert detail(missing.error, "status") == 404
    assert detail(missing.error, "body") == "not here"


def test_real_connection_refused_retries() -> None:
    """Nothing listening on the port: a ConnectError, retried."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # bound then closed: nothing listens there now
    outcome = execute_workflow(
        http_workflow({"url": f"http://127.0.0.1:{port}/", "timeout": 5}), registry=_loopback()
    )
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.original_error.type == "ConnectError"


def test_http_status_error_message() -> None:
    """The error reads as one line: status, method, URL and the excerpt."""
    error = HTTPStatusError(503, "GET", "https://a.test/", "busy")
    assert str(error) == "HTTP 503 from GET https://a.test/: busy"


def test_a_huge_response_body_fails_the_node_instead_of_filling_memory() -> None:
    """The body is read streamed and counted after decoding: a gzip bomb (16 KiB on the
    wire, 16 MiB decoded) passes the 1 MiB cap and fails the node non-retryably, naming
    the URL and the cap, instead of landing in the output (and the record)."""
    bomb = gzip.compress(b"\0" * (16 * 2**20))

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-encoding": "gzip", "content-type": "text/plain"}
        return httpx.Response(200, content=bomb, headers=headers)

    outcome = execute_workflow(
        http_workflow({"url": "https://example.test/big"}, retry=None), registry=_mock(handler)
    )
    if not isinstance(outcome, Failed):  # (no assert: its message would print the body)
        pytest.fail(f"{type(outcome).__name__}: the whole body was kept in the output")
    assert "https://example.test/big" in outcome.error.message
    assert "max_response_bytes=1048576" in outcome.error.message
    assert outcome.error.code == "non_retryable"


def test_the_body_cap_is_a_param_with_a_ceiling() -> None:
    """``max_response_bytes`` sets the cap (a body of exactly the cap is kept, one byte more
    fails, sync and async alike); a definition cannot ask for more than 64 MiB."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="x" * 100)

    registry = _mock(handler)
    kept = execute_workflow(
        http_workflow({"url": "https://a.test/", "max_response_bytes": 100}), registry=registry
    )
    assert isinstance(kept, Completed)
    assert kept.output["text"] == "x" * 100
    small = http_workflow({"url": "https://a.test/", "max_response_bytes": 99}, retry=None)
    for outcome in (
        execute_workflow(small, registry=registry),
        asyncio.run(aexecute_workflow(small, registry=registry)),
    ):
        assert isinstance(outcome, Failed)
        assert "over max_response_bytes=99" in outcome.error.message
    refused = execute_workflow(
        http_workflow({"url": "https://a.test/", "max_response_bytes": 2**26 + 1}, retry=None),
        registry=registry,
    )
    assert isinstance(refused, Failed)
    assert "params.max_response_bytes" in refused.error.message


def test_an_error_status_reads_only_its_excerpt() -> None:
    """A 503 with a 16 MiB body still retries; only the first few KiB are read, for the
    200-character excerpt."""
    pulled = []

    def chunks() -> Iterator[bytes]:
        for _ in range(16 * 1024):
            pulled.append(1)
            yield b"busy " * 200 + b"\n" * 24  # 1 KiB

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, content=chunks())

    outcome = execute_workflow(http_workflow({"url": "https://a.test/"}), registry=_mock(handler))
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    error = outcome.data.original_error
    assert error.type == "HTTPStatusError"
    assert detail(error, "body").startswith("busy busy")
    assert len(detail(error, "body")) == 200
    assert len(pulled) <= 16  # KiB read of the 16 MiB


def _streamed(body: bytes, **headers: str) -> Callable[[httpx.Request], httpx.Response]:
    """A handler answering with ``body`` as a stream, as a network transport does (a
    ``content=`` response is read, and decoded, by httpx before the action sees it)."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))

    return handler


BOMB = gzip.compress(b"\0" * (64 * 2**20))
"""64 MiB of zeros in about 64 KiB of gzip: one network chunk."""


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_gzip_bomb_is_inflated_no_further_than_the_cap(mode: str) -> None:
    """The body is inflated a bounded step at a time: refusing a 64 MiB bomb under a
    1,000,000-byte cap allocates a few MiB (httpx inflated the whole chunk: 64 MiB)."""
    registry = _mock(_streamed(BOMB, **{"content-encoding": "gzip"}))
    params = {"url": "https://a.test/bomb", "max_response_bytes": 1_000_000}
    workflow = http_workflow(params, retry=None)
    tracemalloc.start()
    try:
        if mode == "sync":
            outcome = execute_workflow(workflow, registry=registry)
        else:
            outcome = asyncio.run(aexecute_workflow(workflow, registry=registry))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(outcome, Failed)
    assert "over max_response_bytes=1000000" in outcome.error.message
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB allocated"


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, no zlib header
        ("identity", lambda data: data),
    ],
    ids=["gzip", "zlib deflate", "raw deflate", "identity"],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_streamed_body_within_the_cap_is_decoded_as_before(
    encoding: str, encode: Callable[[bytes], bytes], mode: str
) -> None:
    """A body under the cap, compressed or not, becomes the output as it did."""
    body = json.dumps({"items": list(range(30_000))}).encode()  # several inflate steps
    handler = _streamed(
        encode(body), **{"content-encoding": encoding, "content-type": "application/json"}
    )
    workflow = http_workflow({"url": "https://a.test/", "max_response_bytes": len(body)})
    if mode == "sync":
        outcome = execute_workflow(workflow, registry=_mock(handler))
    else:
        outcome = asyncio.run(aexecute_workflow(workflow, registry=_mock(handler)))
    assert isinstance(outcome, Completed)
    assert outcome.output["json"] == {"items": list(range(30_000))}


def test_a_corrupt_gzip_body_is_a_decoding_error() -> None:
    """A body that is not the gzip it claims fails the attempt as httpx would (retryable)."""
    handler = _streamed(b"not gzip at all", **{"content-encoding": "gzip"})
    outcome = execute_workflow(
        http_workflow({"url": "https://a.test/"}, retry=None), registry=_mock(handler)
    )
    assert isinstance(outcome, Failed)
    assert outcome.error.type == "DecodingError"


def _encoded_app(body: bytes, encoding: str, status: int = 200) -> Any:
    """An app answering every GET with ``body`` under ``Content-Encoding: encoding``, and
    recording the ``Accept-Encoding`` each request sent."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    accepted: list[str | None] = []

    async def answer(request: Request) -> Response:
        accepted.append(request.headers.get("accept-encoding"))
        headers = {"content-encoding": encoding, "content-type": "text/plain"}
        return Response(body, status_code=status, headers=headers)

    app = Starlette(routes=[Route("/", answer)])
    app.state.accepted = accepted
    return app


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stacked_gzip_layers_are_each_inflated_no_further_than_the_cap(mode: str) -> None:
    """``Content-Encoding: gzip, gzip`` from a real server: a bomb inside a bomb (64 MiB of
    zeros in a few hundred bytes) under ``max_response_bytes=1024`` allocates a few MiB, as
    one gzip layer does (the second layer went to httpx's decoder, which inflated it whole:
    64 MiB here, 4 GiB from 3,400 bytes in the report)."""
    bomb = gzip.compress(gzip.compress(b"\0" * (64 * 2**20)))
    assert len(bomb) < 4096
    with serve(_encoded_app(bomb, "gzip, gzip")) as url:
        workflow = http_workflow({"url": url + "/", "max_response_bytes": 1024}, retry=None)
        tracemalloc.start()
        try:
            if mode == "sync":
                outcome = execute_workflow(workflow, registry=_loopback())
            else:
                outcome = asyncio.run(aexecute_workflow(workflow, registry=_loopback()))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert isinstance(outcome, Failed)
    assert "over max_response_bytes=1024" in outcome.error.message
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB allocated"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stacked_codings_within_the_cap_are_undone_in_order(mode: str) -> None:
    """``deflate, gzip`` (deflated, then gzipped) is undone from the last coding listed."""
    text = "stacked " * 20_000
    body = gzip.compress(zlib.compress(text.encode()))
    with serve(_encoded_app(body, "deflate, gzip")) as url:
        workflow = http_workflow({"url": url + "/", "max_response_bytes": len(text)}, retry=None)
        if mode == "sync":
            outcome = execute_workflow(workflow, registry=_loopback())
        else:
            outcome = asyncio.run(aexecute_workflow(workflow, registry=_loopback()))
    assert isinstance(outcome, Completed)
    assert outcome.output["text"] == text


class _BombDecoder:
    """Stands for a decoder httpx may pick when a library is installed (brotli's, zstandard's):
    they inflate a whole chunk at once. The action must never use it."""

    calls = 0

    def decode(self, data: bytes) -> bytes:
        _BombDecoder.calls += 1
        return b"\0" * (64 * 2**20)

    def flush(self) -> bytes:
        _BombDecoder.calls += 1
        return b""


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, br", "compress", "gzip, gzip, gzip"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_coding_prana_does_not_inflate_itself_fails_the_node_unread(
    encoding: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body in ``br`` (with brotli installed: 1,642 B became +2 GiB), ``zstd``, an unknown
    coding or more layers than allowed fails the node without retry, naming the coding and
    what is read, and no decoder of httpx's runs on it; the request asked for gzip/deflate."""
    import httpx._decoders

    monkeypatch.setattr(_BombDecoder, "calls", 0)
    for name in ("br", "zstd"):
        monkeypatch.setitem(httpx._decoders.SUPPORTED_DECODERS, name, _BombDecoder)
    app = _encoded_app(b"\x1b\xff\xff" * 500, encoding)
    with serve(app) as url:
        workflow = http_workflow({"url": url + "/"})
        if mode == "sync":
            outcome = execute_workflow(workflow, registry=_loopback())
        else:
            outcome = asyncio.run(aexecute_workflow(workflow, registry=_loopback()))
    assert _BombDecoder.calls == 0
    assert isinstance(outcome, Failed)
    assert "Content-Encoding" in outcome.error.message
    assert "gzip and deflate only" in outcome.error.message
    assert app.state.accepted == ["gzip, deflate"]


def test_an_error_status_in_an_unread_coding_still_retries() -> None:
    """A 503 whose body is in ``br`` keeps its status's meaning (retry), with no excerpt."""
    with serve(_encoded_app(b"\x1b\xff", "br", status=503)) as url:
        workflow = http_workflow({"url": url + "/"})
        outcome = execute_workflow(workflow, registry=_loopback())
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    error = outcome.data.original_error
    assert error.type == "HTTPStatusError"
    assert detail(error, "status") == 503
    assert detail(error, "body") == ""


def test_an_accept_encoding_given_in_the_params_is_sent_as_given() -> None:
    """The default ``Accept-Encoding: gzip, deflate`` yields to the params' own header."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    params = {"url": "https://a.test/", "headers": {"accept-encoding": "identity"}}
    execute_workflow(http_workflow(params), registry=_mock(handler))
    assert seen[0].headers["accept-encoding"] == "identity"


def test_a_body_in_a_quadratic_charset_is_read_as_utf8() -> None:
    """``charset=punycode`` (whose decoder is quadratic) is not used to decode the body."""
    handler = _streamed("é".encode() * 10, **{"content-type": "text/plain; charset=punycode"})
    outcome = execute_workflow(http_workflow({"url": "https://a.test/"}), registry=_mock(handler))
    assert isinstance(outcome, Completed)
    assert outcome.output["text"] == "é" * 10


def test_a_json_body_too_deep_for_the_parser_is_text() -> None:
    """A JSON body nested past Python's parser is kept as text, not a retried RecursionError."""
    deep = b"[" * 100_000 + b"]" * 100_000
    handler = _streamed(deep, **{"content-type": "application/json"})
    outcome = execute_workflow(
        http_workflow({"url": "https://a.test/", "max_response_bytes": len(deep)}, retry=None),
        registry=_mock(handler),
    )
    assert isinstance(outcome, Completed)
    assert outcome.output["text"].startswith("[[[")


def test_the_actions_reference_names_every_param() -> None:
    """docs/reference/actions.md is generated from the action's docstring: a user reading it
    learns every param the action accepts (it listed none)."""
    import inspect

    from prana._http import _PARAMS, HTTPRequestAction

    doc = inspect.getdoc(HTTPRequestAction) or ""
    assert {name for name in _PARAMS if f"``{name}``" not in doc} == set()
