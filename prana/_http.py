"""``http.request``: the built-in HTTP action, on httpx (the ``http`` extra).

It is registered in every ``Registry()`` when httpx is installed (``prana._builtins``), and
this module and httpx are imported only when such a node runs, so the core does no I/O
(and pays no import) until then.

The action turns an HTTP exchange into prana's retry vocabulary, so a node needs no
status-code handling of its own:

- connection errors, timeouts, and the statuses 408, 425, 429 and 5xx fail the attempt
  with a retryable ``HTTPStatusError`` (or the httpx error itself);
- a ``Retry-After`` header (seconds or an HTTP-date) on such a response becomes a
  ``RetryAfter`` hint, which the policy still caps (``max_delay``, the hard ceiling);
- any other 4xx is ``NonRetryable``, recording the status and a short body excerpt;
- every attempt sends ``Idempotency-Key: <ctx.idempotency_key>`` (stable across retries of
  a node run) unless ``idempotency_key`` is ``false`` or a header of that name is given;
- each attempt has a total deadline, its ``timeout``: a server that answers a byte at a
  time, each read inside httpx's per-read timeout, is cut off there all the same;
- it connects to public addresses only, checked on every address the host resolves to and
  on the address connected to; redirects are not followed. The application, never the
  definition, may allow more (``register_http(registry, allow_private_hosts=True)`` or
  ``allow_networks=[...]``; see ``prana._egress``);
- the body is read streamed and counted as decoded (so a gzip bomb counts what it inflates
  to, a bounded step at a time, each layer of ``gzip, gzip`` too); a body in any other
  content coding (``br``, ``zstd``...) fails the node unread, never handed to a decoder that
  inflates whole chunks. Past ``max_response_bytes`` (1 MiB unless the params say,
  at most 64 MiB) the node fails at once, non-retryably, and an error status reads only
  what its excerpt needs.

Output: ``{"status": int, "headers": {...}, "json": ...}`` when the response is JSON,
``{"status", "headers", "text"}`` otherwise.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
import math
import socket
import sys
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prana._builtins import HTTP_EXTRA_NEEDED, HTTP_SPEC, http_available
from prana._egress import EgressPolicy
from prana._errors import NonRetryable, RetryAfter, rebuilt_exception

if TYPE_CHECKING:
    import httpx

    from prana._registry import ActionContext, Registry

__all__ = [
    "BODY_EXCERPT_CHARS",
    "DEFAULT_TIMEOUT_SECONDS",
    "HTTPRequestAction",
    "HTTPRetryAfter",
    "HTTPStatusError",
    "RETRYABLE_STATUSES",
    "http_available",
    "register_http",
]

RETRYABLE_STATUSES = frozenset({408, 425, 429})
"""Client-error statuses that say "try again later"; every 5xx retries too."""
DEFAULT_TIMEOUT_SECONDS = 30.0
"""The per-attempt timeout when the params give none (connect, read, write and pool)."""
BODY_EXCERPT_CHARS = 200
"""How much of an error response's body an error records."""
DEFAULT_MAX_RESPONSE_BYTES = 1 << 20
"""The largest response body (decoded) a node keeps when its params give no cap: 1 MiB."""
MAX_RESPONSE_BYTES_CEILING = 64 << 20
"""The highest ``max_response_bytes`` a definition may ask for (definitions are untrusted)."""
_ERROR_BODY_BYTES = 8192
"""How much of an error response is read: enough for its excerpt."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_PARAMS = frozenset(
    {"url", "method", "headers", "json", "body", "timeout", "idempotency_key", "max_response_bytes"}
)


class HTTPStatusError(Exception):
    """An HTTP response with an error status; ``details`` holds status, method, URL, body excerpt.

    Raised for retryable statuses (408, 425, 429, 5xx); other 4xx are wrapped in
    ``NonRetryable`` so the policy stops at once. The executor records ``details``.
    """

    def __init__(self, status: int, method: str, url: str, body: str) -> None:
        self.status = status
        self.details = {"status": status, "method": method, "url": url, "body": body}
        excerpt = f": {body}" if body else ""
        super().__init__(f"HTTP {status} from {method} {url}{excerpt}")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by state: ``__init__`` takes the status, method, URL and body, not ``args``."""
        return (rebuilt_exception, (type(self), self.args, dict(vars(self))))


class HTTPRetryAfter(RetryAfter):
    """A retryable status that came with ``Retry-After``: the hint plus the response's details.

    The header is read by ``RetryAfter`` itself (``from_header``'s rules: delta-seconds or
    an HTTP-date against ``now``); one that cannot be read is ignored and says why in
    ``details["retry_after_ignored"]``, beside the status, and the policy's delay applies.
    """

    def __init__(
        self, retry_after: object, error: HTTPStatusError, *, now: datetime | None = None
    ) -> None:
        self.status = error.status
        self.details = dict(error.details)
        shown = retry_after.strip()[:80] if isinstance(retry_after, str) else retry_after
        super().__init__(retry_after, f"{error} (Retry-After {shown})", now=now)


def register_http(
    registry: Registry,
    *,
    transport: Any = None,
    allow_private_hosts: bool = False,
    allow_networks: Iterable[Any] = (),
) -> None:
    """Register (or replace) ``http.request`` on ``registry``; httpx must be installed.

    ``transport`` (an httpx transport, e.g. ``httpx.MockTransport(handler)`` in tests) is
    handed to every client the action opens; ``None`` uses the network. By default the
    action reaches public addresses only; ``allow_networks`` (addresses or networks such
    as ``"10.1.0.0/16"``) opens those, ``allow_private_hosts=True`` lifts the rule. That
    choice is the application's: nothing in a workflow definition can make it. Without
    httpx it raises ``ModuleNotFoundError`` naming the ``http`` extra.
    """
    if not http_available():
        raise ModuleNotFoundError(HTTP_EXTRA_NEEDED, name="httpx")
    action = HTTPRequestAction(
        transport=transport,
        allow_private_hosts=allow_private_hosts,
        allow_networks=allow_networks,
    )
    registry.register("http.request", action, **HTTP_SPEC)


@functools.cache
def default_action() -> HTTPRequestAction:
    """The action ``Registry()`` registers: the network, public addresses only."""
    return HTTPRequestAction()


# --- params ---------------------------------------------------------------------------------


def _fail(param: str, fix: str) -> NonRetryable:
    return NonRetryable(f"http.request: params.{param}: {fix}")


def _build(params: Any, ctx: ActionContext) -> tuple[dict[str, Any], float, int]:
    """The keyword arguments of ``httpx.Client.request``, the timeout and the body cap."""
    if not isinstance(params, Mapping):
        raise _fail("", "params must be a mapping with at least 'url'")
    unknown = sorted(set(params) - _PARAMS)
    if unknown:
        raise _fail(unknown[0], f"unknown param; the params are {', '.join(sorted(_PARAMS))}")
    url = params.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise _fail("url", f"{url!r} is not an http:// or https:// URL")
    method = params.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise _fail("method", f"{method!r}; use one of {', '.join(sorted(METHODS))}")
    headers = params.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise _fail("headers", "use a mapping of header names to string values")
    headers = dict(headers)
    key = params.get("idempotency_key", True)
    if not isinstance(key, bool | str):
        raise _fail("idempotency_key", "use true (the default), false, or a string")
    if not any(k.lower() == "accept-encoding" for k in headers):
        headers["Accept-Encoding"] = ACCEPT_ENCODING
    if key is not False and not any(k.lower() == "idempotency-key" for k in headers):
        headers["Idempotency-Key"] = ctx.idempotency_key if key is True else key
    timeout = params.get("timeout", DEFAULT_TIMEOUT_SECONDS)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise _fail("timeout", f"{timeout!r}; use seconds as a number > 0")
    cap = params.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES)
    if (
        isinstance(cap, bool)
        or not isinstance(cap, int)
        or not 1 <= cap <= MAX_RESPONSE_BYTES_CEILING
    ):
        raise _fail(
            "max_response_bytes",
            f"{cap!r}; use a whole number of bytes from 1 to {MAX_RESPONSE_BYTES_CEILING}",
        )
    request: dict[str, Any] = {"method": method.upper(), "url": url, "headers": headers}
    if "json" in params and "body" in params:
        raise _fail("body", "give either json or body, not both")
    if "json" in params:
        request["json"] = params["json"]
    elif "body" in params:
        body = params["body"]
        if not isinstance(body, str):
            raise _fail("body", "use a string (or json for structured data)")
        request["content"] = body.encode()
    return request, float(timeout), cap


# --- the response ---------------------------------------------------------------------------


def _limit(status: int, cap: int) -> int:
    """How many decoded body bytes to read: the cap for a success, an excerpt's for an error."""
    return min(cap, _ERROR_BODY_BYTES) if status >= 400 else cap


_INFLATE_STEP = 64 * 1024
"""The most bytes one step of inflating a body may produce."""
_INFLATED = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
"""The content codings decoded here (``_Layer``), with their zlib ``wbits``; no other is
accepted: httpx's own decoders (and brotli's, zstandard's) inflate a whole chunk at once."""
ACCEPT_ENCODING = "gzip, deflate"
"""The ``Accept-Encoding`` sent unless the params give one: the codings in ``_INFLATED``."""
_MAX_CODINGS = 2
"""The most content codings a response may stack (``gzip, gzip``); each is bounded."""
_SLOW_CHARSETS = frozenset({"punycode", "idna"})
"""Charsets whose decoders are quadratic: a body declaring one is read as UTF-8."""


class _Layer:
    """One ``gzip`` or ``deflate`` layer, inflated at most ``_INFLATE_STEP`` bytes at a time.

    httpx inflates each network chunk whole, so 64 KiB of gzip may become 64 MiB before
    ``max_response_bytes`` is counted; with zlib's ``max_length`` the count sees every
    step, and reading stops at the cap.
    """

    def __init__(self, coding: str, request: httpx.Request) -> None:
        self.request = request
        self.deflate = coding == "deflate"  # zlib-wrapped, or raw if that fails at once
        self.zlib = zlib.decompressobj(_INFLATED[coding])
        self.started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The output of ``data`` in steps; ``b""`` drains what zlib still holds."""
        while True:
            try:
                out = self.zlib.decompress(data, _INFLATE_STEP)
            except zlib.error as exc:
                if self.deflate and not self.started:
                    self.deflate = False
                    self.zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                import httpx

                raise httpx.DecodingError(str(exc), request=self.request) from None
            self.started = True
            data = self.zlib.unconsumed_tail
            if out:
                yield out
            if not data and len(out) < _INFLATE_STEP:
                return


class _Decoder:
    """Every content coding of a body, undone layer by layer, each a bounded step at a time:
    ``gzip, gzip`` (a bomb inside a bomb) inflates no further than ``_take`` reads."""

    def __init__(self, layers: list[_Layer]) -> None:
        self.layers = layers

    def feed(self, raw: bytes, depth: int = 0) -> Iterator[bytes]:
        """The decoded output of ``raw`` (bytes of layer ``depth``'s input), in steps."""
        if depth == len(self.layers):
            yield raw
            return
        for out in self.layers[depth].feed(raw):
            yield from self.feed(out, depth + 1)

    def finish(self) -> Iterator[bytes]:
        """What the layers still hold at the end of the body, outermost first."""
        for depth, layer in enumerate(self.layers):
            for out in layer.feed(b""):
                yield from self.feed(out, depth + 1)


def _decoder(response: httpx.Response) -> _Decoder | str:
    """The body's ``_Decoder``, or the content coding it is in that prana does not decode
    (``br``, ``zstd``, ``compress``, an unknown name, or more than ``_MAX_CODINGS``)."""
    header: str = response.headers.get("content-encoding", "")
    codings = [c.strip().lower() for c in header.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    refused = [c for c in codings if c not in _INFLATED]
    if refused:
        return refused[0][:40]
    if len(codings) > _MAX_CODINGS:
        return ", ".join(codings)[:40]
    # applied in the order listed, so undone from the last
    return _Decoder([_Layer(c, response.request) for c in reversed(codings)])


def _decoded(response: httpx.Response, decoder: _Decoder) -> Iterator[bytes]:
    """The decoded body in bounded pieces, for ``_take``: the raw stream through ``decoder``,
    never httpx's decoders. A body a transport already read (a test's may) is given whole."""
    if response.is_stream_consumed:
        yield response.content
        return
    for raw in response.iter_raw():
        yield from decoder.feed(raw)
    yield from decoder.finish()


async def _adecoded(response: httpx.Response, decoder: _Decoder) -> AsyncIterator[bytes]:
    """``_decoded`` for an ``httpx.AsyncClient`` response."""
    if response.is_stream_consumed:
        yield response.content
        return
    async for raw in response.aiter_raw():
        for out in decoder.feed(raw):
            yield out
    for out in decoder.finish():
        yield out


def _text(response: httpx.Response, body: bytes) -> str:
    """``body`` as text in the response's charset (UTF-8 for a quadratic or unknown one)."""
    encoding = response.encoding or "utf-8"
    try:
        slow = codecs.lookup(encoding).name in _SLOW_CHARSETS
    except LookupError:
        slow = True
    return body.decode("utf-8" if slow else encoding, errors="replace")


def _take(chunks: Iterator[bytes], limit: int, guard: _Guard) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes from ``chunks``, and whether there was more."""
    body = bytearray()
    for chunk in chunks:
        guard.check()
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True
    return bytes(body), False


async def _atake(chunks: AsyncIterator[bytes], limit: int) -> tuple[bytes, bool]:
    """``_take`` for an async body."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True
    return bytes(body), False


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > BODY_EXCERPT_CHARS:
        text = text[: BODY_EXCERPT_CHARS - 1] + "…"
    return text


def _outcome(
    response: httpx.Response,
    body: bytes,
    over: bool,
    cap: int,
    ctx: ActionContext,
    decoder: _Decoder | str,
) -> dict[str, Any]:
    """The node's output for a success; raises the right retry signal for an error status.

    ``body`` is what was read of the decoded body (``_limit``), ``over`` whether there was
    more; ``decoder`` a content coding's name when the body was not read (``_decoder``).
    """
    status = response.status_code
    method, url = response.request.method, str(response.request.url)
    text = _text(response, body)
    if status >= 400:
        error = HTTPStatusError(status, method, url, _excerpt(text))
        if status in RETRYABLE_STATUSES or status >= 500:
            header = response.headers.get("retry-after")
            if header is not None:
                raise HTTPRetryAfter(header, error, now=ctx.now)
            raise error
        raise NonRetryable(error)
    if isinstance(decoder, str):
        raise NonRetryable(
            f"http.request: the response from {method} {url} is in Content-Encoding "
            f"{decoder!r}, which prana does not read: it inflates gzip and deflate only "
            f"(at most {_MAX_CODINGS} layers), a bounded step at a time; ask the server "
            f"for those (the action sends Accept-Encoding: {ACCEPT_ENCODING})"
        )
    if over:
        raise NonRetryable(
            f"http.request: the response body from {method} {url} is over "
            f"max_response_bytes={cap} (counted decoded); raise params.max_response_bytes "
            f"(at most {MAX_RESPONSE_BYTES_CEILING}) or ask the server for less"
        )
    output: dict[str, Any] = {"status": status, "headers": dict(response.headers)}
    content_type = response.headers.get("content-type", "")
    if body and ("json" in content_type.split(";")[0]):
        try:
            output["json"] = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser
            output["text"] = text
    else:
        output["text"] = text
    return output


# --- the action -----------------------------------------------------------------------------


class HTTPRequestAction:
    """The ``http.request`` action: one request per attempt, on a client opened for it.

    Params (templated like any): ``url`` (``http://`` or ``https://``, required),
    ``method`` (default ``GET``), ``headers`` (names to string values), ``json`` (a JSON
    body) or ``body`` (text), ``timeout`` (seconds per attempt in total, default 30) and
    ``idempotency_key`` (``true``, the default, sends ``Idempotency-Key:
    <ctx.idempotency_key>``; ``false`` sends none; a string is sent as given) and
    ``max_response_bytes`` (default 1 MiB, at most 64 MiB: a longer body, counted as
    decoded, fails the node without retry, naming the URL and the cap; a body is read in
    ``gzip`` or ``deflate``, up to two layers, and any other content coding fails the node
    unread, so ``Accept-Encoding: gzip, deflate`` is sent unless ``headers`` give one). Output:
    ``{"status", "headers", "json"}`` for a JSON response, ``{"status", "headers",
    "text"}`` otherwise. Connection errors, timeouts, 408, 425, 429 and 5xx retry under the
    node's policy (``Retry-After`` sets the next delay); any other 4xx fails at once, its
    status and a body excerpt in the error's ``details``. Public addresses only, unless
    the application passes ``allow_private_hosts``/``allow_networks`` (``prana._egress``).

    Sync under ``execute_workflow`` (or in a worker thread); inside a running event loop
    (``aexecute_workflow``) a call returns a coroutine that uses ``httpx.AsyncClient``.
    Transport errors and timeouts propagate as httpx's own exceptions, which the default
    classification retries.
    """

    __slots__ = ("egress", "transport")

    def __init__(
        self,
        *,
        transport: Any = None,
        allow_private_hosts: bool = False,
        allow_networks: Iterable[Any] = (),
    ) -> None:
        self.transport = transport
        self.egress = EgressPolicy(
            allow_private_hosts=allow_private_hosts, allow_networks=allow_networks
        )

    def __repr__(self) -> str:
        return f"HTTPRequestAction(transport={self.transport!r}, egress={self.egress!r})"

    def __call__(self, params: Any, ctx: ActionContext) -> Any:
        request, timeout, cap = _build(params, ctx)
        import httpx

        url = httpx.URL(request["url"])
        if url.scheme not in ("http", "https") or not url.host:
            raise _fail("url", f"{request['url']!r} is not an http:// or https:// URL")
        options: dict[str, Any] = {"timeout": httpx.Timeout(timeout), "follow_redirects": False}
        if self.transport is not None:
            options["transport"] = self.transport
        guard = _Guard(self.egress, url, timeout, request["method"])
        aio = sys.modules.get("asyncio")  # no asyncio imported: no loop is running
        if aio is not None and aio._get_running_loop() is not None:
            return _arequest(httpx, options, request, cap, ctx, guard, self.transport is None)
        self.egress.check_literal(url.host)
        if self.transport is None:
            try:
                self.egress.resolve(url.host, guard.port)
            except socket.gaierror as exc:
                raise httpx.ConnectError(f"{url.host}: {exc}") from None
        request["extensions"] = {"trace": guard.trace}
        timer = threading.Timer(guard.remaining(), guard.expire)
        timer.daemon = True
        timer.start()
        try:
            with httpx.Client(**options) as client, client.stream(**request) as response:
                limit = _limit(response.status_code, cap)
                decoder = _decoder(response)
                body, over = (
                    (b"", False)
                    if isinstance(decoder, str)
                    else _take(_decoded(response, decoder), limit, guard)
                )
        except httpx.HTTPError:
            if guard.expired:
                raise guard.timeout_error() from None
            raise
        finally:
            timer.cancel()
        return _outcome(response, body, over, cap, ctx, decoder)


class _Guard:
    """One attempt's egress check at connect time and its total deadline.

    httpx's timeouts bound each read, not the whole: a server sending a byte every few
    seconds keeps an attempt alive for ever. Async attempts run under ``wait_for``; a sync
    one has a timer that, at the deadline, shuts the socket down (waking the blocked read),
    and the body loop checks the deadline between chunks.
    """

    def __init__(self, egress: EgressPolicy, url: httpx.URL, timeout: float, method: str) -> None:
        self.egress = egress
        self.host = url.host
        self.raw_host = url.raw_host.decode("ascii").lower()
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.timeout = timeout
        self.described = f"{method} {url}"
        self.deadline = time.monotonic() + timeout
        self.expired = False
        self.connecting: str | None = None
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def timeout_error(self) -> Exception:
        import httpx

        return httpx.ReadTimeout(
            f"http.request: {self.described}: no complete response within the attempt's "
            f"timeout of {self.timeout:g}s (counted in total, not per read)"
        )

    def check(self) -> None:
        """Raise once the deadline has passed (between body chunks)."""
        if time.monotonic() >= self.deadline:
            self.expired = True
            raise self.timeout_error()

    def expire(self) -> None:
        """At the deadline (the timer's thread): wake the blocked read by shutting down."""
        with self.lock:
            self.expired = True
            sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing left to wake
                sock.shutdown(socket.SHUT_RDWR)

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's ``trace`` hook: check the address connected to; keep the socket."""
        if name == "connection.connect_tcp.started":
            self.connecting = str(info.get("host", "")).lower()
        elif name == "connection.connect_tcp.complete":
            stream = info["return_value"]
            if self.connecting == self.raw_host:
                self.egress.check_peer(self.host, stream)
            sock = stream.get_extra_info("socket")
            with self.lock:
                self.sock = sock
                late = self.expired
            if late:
                self.expire()

    async def atrace(self, name: str, info: dict[str, Any]) -> None:
        """``trace`` for ``httpx.AsyncClient`` (the deadline is ``wait_for``'s there)."""
        if name == "connection.connect_tcp.started":
            self.connecting = str(info.get("host", "")).lower()
        elif name == "connection.connect_tcp.complete" and self.connecting == self.raw_host:
            await self.egress.acheck_peer(self.host, info["return_value"])


async def _arequest(
    httpx_module: Any,
    options: dict[str, Any],
    request: dict[str, Any],
    cap: int,
    ctx: ActionContext,
    guard: _Guard,
    resolve: bool,
) -> dict[str, Any]:
    import asyncio

    async def attempt() -> dict[str, Any]:
        guard.egress.check_literal(guard.host)
        if resolve and not guard.egress.allow_private_hosts:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(guard.host, guard.port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise httpx_module.ConnectError(f"{guard.host}: {exc}") from None
            guard.egress.check_resolved(guard.host, infos)
        async with (
            httpx_module.AsyncClient(**options) as client,
            client.stream(**request, extensions={"trace": guard.atrace}) as response,
        ):
            limit = _limit(response.status_code, cap)
            decoder = _decoder(response)
            body, over = (
                (b"", False)
                if isinstance(decoder, str)
                else await _atake(_adecoded(response, decoder), limit)
            )
        return _outcome(response, body, over, cap, ctx, decoder)

    try:
        return await asyncio.wait_for(attempt(), guard.remaining())
    except asyncio.TimeoutError:
        raise guard.timeout_error() from None
