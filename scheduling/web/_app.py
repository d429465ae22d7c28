"""The ASGI app: webhook deliveries by resume token, and an operator's read-only view.

Routes (relative to where the app is mounted):

==========================================  ==========  ===================================
``POST /hooks/{token}``                     token       resume the one wait the token names
``GET  /api/executions``                    operator    JSON list, newest first, keyset pages
``GET  /api/executions/{id}``               operator    JSON view of one execution
``GET  /executions``                        operator    HTML list (``/`` redirects here)
``GET  /executions/{id}``                   operator    HTML timeline (``?fragment=1``: part)
``GET  /executions/{id}/events``            operator    SSE: ``execution`` events, ``end``
``GET|POST /login``                         -           operator token form (sets a cookie)
``GET  /assets/view.js``                    -           the pages' script (no inline script)
==========================================  ==========  ===================================

The operator credential is a bearer token (``Authorization: Bearer ...``, or the cookie
the login form sets: an expiry and an HMAC of it, keyed by the token). Failed sign-ins are
limited per client (429 past ``LOGIN_FAILURES``). With no token configured, operator routes
answer loopback clients only, and the app says so at startup.

An ``{id}`` is any id the store holds, ``/`` included: links write it quoted (``%2F``), and
the path after ``/executions/`` is read undecoded (``execution_path``), so only a literal
last segment ``events`` asks for the stream (an id ending in ``/events`` has its page).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import math
import os
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlencode

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from prana import ExecutionStatus, PranaError, RecordError, ResumeError
from scheduling._errors import (
    ExecutionNotFound,
    HookAlreadyDelivered,
    HookError,
    StoreError,
    WorkflowNotFound,
)
from scheduling._listing import read_page
from scheduling._records import unreadable_row
from scheduling.abc import UnreadableRow
from scheduling.web import _html
from scheduling.web._views import FINAL, execution_view, summary_view

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping

    from starlette.requests import Request
    from starlette.types import ASGIApp, Receive, Scope, Send

    from scheduling._runner import Runner

    Handler = Callable[[Request], Awaitable[Response]]
    ListArgs = tuple[str | None, str | None, int, str | None, str | None]
    """A list query's ``status``, ``workflow``, ``limit``, ``after`` and error ``code``."""

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

logger = logging.getLogger("scheduling.web")

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""The largest webhook body accepted (1 MiB); larger is 413."""
DEFAULT_MAX_BODY_SECONDS = 30.0
"""How long a webhook body (of a verified token) may take to arrive; longer is 408."""
MAX_DELIVERIES = 32
"""Webhook bodies (of verified tokens) read, parsed and delivered at once; past it, 503."""
MAX_PAGE = 200
"""The most rows one list request returns."""
HEARTBEAT_SECONDS = 15.0
"""An SSE comment is sent this often, so proxies keep an idle stream open."""
DEFAULT_MAX_STREAMS = 100
"""Event streams one app serves at once; past it ``/events`` answers 503."""
DEFAULT_MAX_STREAM_SECONDS = 3600.0
"""How long one event stream lasts (runner clock); then it ends and the client reconnects."""
COOKIE = "prana_operator"
SESSION_SECONDS = 12 * 3600
"""How long a login cookie is good for; after it the operator signs in again."""
LOGIN_FAILURES = 5
"""Failed sign-ins (login form or bearer token) a client may make per window..."""
LOGIN_WINDOW_SECONDS = 300.0
"""...after which its sign-ins are refused (429) until the window, from its first failure, ends."""
LOGIN_CLIENTS = 4096
"""The most clients whose failures are remembered (the oldest are forgotten first)."""
SECURITY_HEADERS = (
    (
        b"content-security-policy",
        (
            b"default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self'; "
            b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
"""Sent with every response: no inline or foreign script, no framing, no sniffing, and no
``Referer``, so a page's URL (an execution id, a ``next`` path) never leaves in one."""
NO_STORE = "no-store"
"""The ``Cache-Control`` of every answer of an operator route and of ``/login`` (but the
event stream's own ``no-cache``): what they show (executions' params, outputs, errors) is
for the operator's eyes, not a browser's history or a shared cache."""
TOKEN_ENV = "PRANA_WEB_TOKEN"  # noqa: S105 - the name of the variable, not a secret
MIN_TOKEN_CHARS = 16
TOKEN_ADVICE = (
    f"use a random operator token of at least {MIN_TOKEN_CHARS} characters, "
    'e.g. python -c "import secrets; print(secrets.token_urlsafe(32))"'
)


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def _no_execution(execution_id: str) -> JSONResponse:
    """404 for an id no execution has: the routes take a whole id, never a prefix.

    The CLI takes the 12 characters `prana list` prints; pasted here they named nothing
    and the answer did not say why. The view does not look prefixes up (a scan of the
    store per request).
    """
    return _error(
        404,
        f"no execution {execution_id!r}: give the whole execution id, not a prefix "
        "(the list at /executions links to each; prana list --json prints them)",
    )


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _names_loopback(request: Request) -> bool:
    """Whether the request addresses the app by a loopback name (its ``Host`` header).

    A browser sends the name it resolved: a page on another site that rebinds its own name
    to 127.0.0.1 (DNS rebinding) reaches a loopback-only app with that name, not this one.
    """
    host = request.headers.get("host")
    if host is None:
        return True  # not a browser: they always send one
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name[1:]
    else:
        name = name.rsplit(":", 1)[0]
    return name == "localhost" or name.endswith(".localhost") or _is_loopback(name)


class _Operator:
    """Checks the operator credential: a bearer token, or an unexpired login cookie.

    The cookie is ``<expiry, unix seconds>.<HMAC of it, keyed by the token>``: it never
    holds the token, and stops working at its expiry even if copied out of the browser.
    ``now`` is the runner's clock, as unix seconds.
    """

    def __init__(self, token: str | None, now: Callable[[], float]) -> None:
        self.token = token
        self.now = now

    def check_token(self, candidate: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            candidate.encode(), self.token.encode()
        )

    def _mac(self, expires: str) -> str:
        assert self.token is not None
        message = f"prana-operator-cookie:{expires}".encode()
        return hmac.new(self.token.encode(), message, hashlib.sha256).hexdigest()

    def new_cookie(self) -> str:
        expires = str(int(self.now()) + SESSION_SECONDS)
        return f"{expires}.{self._mac(expires)}"

    def cookie_ok(self, cookie: str | None) -> bool:
        if cookie is None or self.token is None:
            return False
        expires, _, mac = cookie.partition(".")
        if not _short_whole(expires) or int(expires) <= self.now():
            return False
        return hmac.compare_digest(mac.encode(), self._mac(expires).encode())

    def bearer(self, request: Request) -> str | None:
        """The bearer token the request presents, if any."""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return value.strip() if scheme.lower() == "bearer" else None

    def allowed(self, request: Request) -> bool:
        if self.token is None:
            client = request.client.host if request.client else None
            return _is_loopback(client) and _names_loopback(request)
        presented = self.bearer(request)
        if presented is not None and self.check_token(presented):
            return True
        return self.cookie_ok(request.cookies.get(COOKIE))


class _SignInLimiter:
    """Failed sign-ins per client: ``LOGIN_FAILURES`` per window, in bounded memory.

    A client past the limit is refused without its guess being checked until the window
    (``LOGIN_WINDOW_SECONDS`` from its first failure) ends; at most ``LOGIN_CLIENTS``
    clients are remembered, the least recently failing forgotten first.
    """

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.failures: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def _current(self, client: str) -> tuple[float, int] | None:
        entry = self.failures.get(client)
        if entry is not None and self.now() - entry[0] >= LOGIN_WINDOW_SECONDS:
            del self.failures[client]
            return None
        return entry

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again, or ``None`` when it may now."""
        entry = self._current(client)
        if entry is None or entry[1] < LOGIN_FAILURES:
            return None
        return max(1, math.ceil(entry[0] + LOGIN_WINDOW_SECONDS - self.now()))

    def failed(self, client: str) -> None:
        start, count = self._current(client) or (self.now(), 0)
        self.failures[client] = (start, count + 1)
        self.failures.move_to_end(client)
        while len(self.failures) > LOGIN_CLIENTS:
            self.failures.popitem(last=False)

    def refusal(self, client: str) -> Response | None:
        wait = self.retry_after(client)
        if wait is None:
            return None
        return _error(
            429,
            f"too many failed sign-ins from this address; try again in {wait} s",
            **{"Retry-After": str(wait)},
        )


_HOOK_PATH = re.compile(r"/hooks/[^/?#\s\"']+")
_REDACTED_PATH = "/hooks/[webhook-token]"
ACCESS_LOGGERS = ("uvicorn.access", "hypercorn.access", "gunicorn.access")
"""The servers' access loggers that ``create_app`` redacts resume tokens from."""


class _RedactHookPaths(logging.Filter):
    """Keep resume tokens out of the access log: ``/hooks/<token>`` is logged redacted.

    A delivery refused before it resumed anything (415, 422, 413) leaves its token valid,
    and whoever reads the log must not gain the power to resume the wait with it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        def clean(value: Any) -> Any:
            return _HOOK_PATH.sub(_REDACTED_PATH, value) if isinstance(value, str) else value

        if isinstance(record.args, tuple):
            record.args = tuple(clean(arg) for arg in record.args)
        elif isinstance(record.args, dict):  # gunicorn's access "atoms"
            record.args = {key: clean(arg) for key, arg in record.args.items()}
        record.msg = clean(record.msg)
        return True


def redact_access_log() -> None:
    """Add the redacting filter to the known servers' access loggers (once each).

    Done when the app is built, so it holds however it is served: alone, or mounted in a
    FastAPI/Starlette app under uvicorn (a mounted app's own lifespan never runs). A
    logging configuration applied later keeps it: ``dictConfig`` replaces handlers, not
    a logger's filters.
    """
    for name in ACCESS_LOGGERS:
        access = logging.getLogger(name)
        if not any(isinstance(f, _RedactHookPaths) for f in access.filters):
            access.addFilter(_RedactHookPaths())


class _Streams:
    """How many event streams are open, against the app's cap (read by tests' waits)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open = 0
        self.changed = threading.Condition()

    def take(self) -> bool:
        with self.changed:
            if self.open >= self.cap:
                return False
            self.open += 1
            return True

    def release(self) -> None:
        with self.changed:
            self.open -= 1
            self.changed.notify_all()

    def wait_for(self, count: int, timeout: float) -> bool:
        """Wait until exactly ``count`` streams are open; ``False`` if ``timeout`` passed."""
        with self.changed:
            return self.changed.wait_for(lambda: self.open == count, timeout)


class _CountedStream(StreamingResponse):
    """A streaming response that gives its place back however it ends (a disconnect
    before the first byte included, when the body's own ``finally`` never runs)."""

    def __init__(self, content: AsyncIterator[bytes], streams: _Streams, **options: Any) -> None:
        super().__init__(content, **options)
        self.streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.streams.release()


class _SecurityHeaders:
    """ASGI middleware adding ``SECURITY_HEADERS`` to every response of the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, sending)


class _Web:
    """What the app's handlers share, kept on ``app.state.web``: the runner and the settings.

    Handlers are module-level functions that read it from ``request.app.state`` (Starlette's
    way), so the routes of one app never close over another's runner.
    """

    __slots__ = (
        "deliveries",
        "max_body_bytes",
        "max_body_seconds",
        "max_stream_seconds",
        "max_streams",
        "open_runner",
        "operator",
        "poll_seconds",
        "runner",
        "sign_in",
        "streams",
        "view",
    )

    def __init__(
        self,
        runner: Runner,
        token: str | None,
        *,
        view: bool,
        max_body_bytes: int,
        max_body_seconds: float,
        poll_seconds: float,
        open_runner: bool,
        max_streams: int,
        max_stream_seconds: float,
    ) -> None:
        self.runner = runner
        self.view = view
        self.max_body_bytes = max_body_bytes
        self.max_body_seconds = max_body_seconds
        self.poll_seconds = poll_seconds
        self.open_runner = open_runner
        self.max_streams = max_streams
        self.max_stream_seconds = max_stream_seconds
        self.streams = _Streams(max_streams)
        self.operator = _Operator(token, self.unix_now)
        self.sign_in = _SignInLimiter(self.unix_now)
        self.deliveries = 0
        """Webhook bodies being read, parsed or delivered now (``MAX_DELIVERIES``)."""

    def unix_now(self) -> float:
        """The runner's clock as unix seconds (cookies, sign-in windows, stream lifetimes)."""
        return self.runner.clock().timestamp()


def _web(request: Request) -> _Web:
    web: _Web = request.app.state.web
    return web


def _checked_token(token: str | None) -> str | None:
    """The operator token: the one given, else ``$PRANA_WEB_TOKEN``; refused when short."""
    source = "create_app(token=...)"
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
        source = f"${TOKEN_ENV}"
    if token is not None and (not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS):
        raise PranaError(f"{source}: {TOKEN_ADVICE}")
    return token


def _check_whole(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PranaError(f"create_app({name}={value!r}): use a whole number >= 1")


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise PranaError(f"create_app({name}={value!r}): use seconds > 0")


def create_app(
    runner: Runner,
    *,
    token: str | None = None,
    view: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_body_seconds: float = DEFAULT_MAX_BODY_SECONDS,
    poll_seconds: float = 0.5,
    open_runner: bool = False,
    max_streams: int = DEFAULT_MAX_STREAMS,
    max_stream_seconds: float = DEFAULT_MAX_STREAM_SECONDS,
) -> Starlette:
    """The Starlette app for ``runner``: mount it in FastAPI/Starlette or serve it alone.

    ``token`` (default: ``$PRANA_WEB_TOKEN``) is the operator's bearer token for the view
    and the API; without one they answer loopback clients only. ``view=False`` serves only
    ``POST /hooks/{token}``; ``max_body_bytes`` and ``max_body_seconds`` bound a webhook
    body's size (413) and how long it may take to arrive (408). ``poll_seconds`` is how
    often an SSE stream re-reads the store for progress made by other processes; this
    runner's own saves wake it at once (``Runner.subscribe``). ``max_streams`` caps the
    event streams open at once (503 past it), ``max_stream_seconds`` each one's lifetime
    (it then ends, and an ``EventSource`` reconnects). ``open_runner=True`` opens the
    runner when the app starts and closes it when the app stops (``prana serve`` does this).
    """
    token = _checked_token(token)
    _check_whole("max_body_bytes", max_body_bytes)
    _check_seconds("poll_seconds", poll_seconds)
    _check_seconds("max_body_seconds", max_body_seconds)
    _check_whole("max_streams", max_streams)
    _check_seconds("max_stream_seconds", max_stream_seconds)
    redact_access_log()
    web = _Web(
        runner,
        token,
        view=view,
        max_body_bytes=max_body_bytes,
        max_body_seconds=max_body_seconds,
        poll_seconds=poll_seconds,
        open_runner=open_runner,
        max_streams=max_streams,
        max_stream_seconds=max_stream_seconds,
    )
    routes = [Route("/hooks/{token}", _hook, methods=["POST"])]
    if view:
        routes += _VIEW_ROUTES
        if token is not None:
            routes.append(Route("/login", _login, methods=["GET", "POST"]))
    app = Starlette(routes=routes, lifespan=_lifespan, middleware=[Middleware(_SecurityHeaders)])
    app.state.web = web
    app.state.runner = runner
    app.state.operator_token_configured = token is not None
    app.state.sign_in_limiter = web.sign_in
    app.state.event_streams = web.streams
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    web: _Web = app.state.web
    if web.view and web.operator.token is None:
        logger.warning(
            "no operator token (PRANA_WEB_TOKEN): the view and API answer loopback clients only"
        )
    if web.open_runner:
        await asyncio.to_thread(web.runner.open)
    try:
        yield
    finally:
        if web.open_runner:
            await asyncio.to_thread(web.runner.close)


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


# -- the webhook route --------------------------------------------------------------------


async def _body(request: Request, max_body_bytes: int) -> bytearray | None:
    """The request's body, or ``None`` once it is over ``max_body_bytes``."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body_bytes:
            return None
    return body


async def _hook(request: Request) -> Response:
    """Cheap checks first (the body's declared size), then the token against the wait its
    execution holds, and only then the body: a caller without the secret gets its 404
    before a byte of its body is read or parsed. At most ``MAX_DELIVERIES`` bodies are
    read, parsed and delivered at once (503 past it)."""
    web = _web(request)
    max_body_bytes = web.max_body_bytes
    resume_token = request.path_params["token"]
    declared = request.headers.get("content-length")
    if (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and (not _short_whole(declared) or int(declared) > max_body_bytes)
    ):
        return _error(413, f"the body is over the limit of {max_body_bytes} bytes")
    try:
        await asyncio.to_thread(web.runner.check_hook, resume_token)
    except HookError as exc:
        return _error(exc.status, str(exc))
    except (RecordError, StoreError):
        logger.exception("a webhook delivery could not read its execution")
        return _error(500, "the execution's stored record could not be read or written")
    if web.deliveries >= MAX_DELIVERIES:
        return _error(503, "too many deliveries at once; try again", **{"retry-after": "1"})
    web.deliveries += 1
    try:
        return await _deliver_body(request, web, resume_token)
    finally:
        web.deliveries -= 1


async def _deliver_body(request: Request, web: _Web, resume_token: str) -> Response:
    """Read (within ``max_body_seconds``), parse and deliver the body of a verified token."""
    max_body_bytes = web.max_body_bytes
    try:
        body = await asyncio.wait_for(_body(request, max_body_bytes), web.max_body_seconds)
    except asyncio.TimeoutError:
        return _error(408, f"the body did not arrive within {web.max_body_seconds:g}s")
    if body is None:
        return _error(413, f"the body is over the limit of {max_body_bytes} bytes")
    data: Any = None
    if body.strip():
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            return _error(
                415, f"send JSON with Content-Type: application/json (got {media or 'none'})"
            )
        try:
            data = orjson.loads(bytes(body))
        except orjson.JSONDecodeError as exc:
            return _error(422, f"the body is not valid JSON: {exc}")
    try:
        outcome = await asyncio.to_thread(web.runner.deliver_hook, resume_token, data)
    except HookAlreadyDelivered as exc:  # the sender's retry of a delivery that was applied
        return JSONResponse(
            {
                "ok": True,
                "already_delivered": True,
                "execution_id": exc.execution_id,
                "status": exc.execution_status.value,
            }
        )
    except HookError as exc:
        return _error(exc.status, str(exc))
    except ResumeError as exc:  # the data was refused before anything ran
        return _error(422, _first_line(exc))
    except (RecordError, StoreError):
        logger.exception("a webhook delivery could not read or write its execution")
        return _error(500, "the execution's stored record could not be read or written")
    execution = outcome.execution
    assert execution is not None
    return JSONResponse(
        {"ok": True, "execution_id": execution.id, "status": execution.status.value}
    )


# -- operator routes ----------------------------------------------------------------------


def _guarded(handler: Handler, *, html: bool) -> Handler:
    """``handler`` behind the operator credential; every answer says ``no-store``."""

    async def endpoint(request: Request) -> Response:
        response = await _checked(request, handler, html=html)
        response.headers.setdefault("cache-control", NO_STORE)
        return response

    return endpoint


async def _checked(request: Request, handler: Handler, *, html: bool) -> Response:
    web = _web(request)
    operator, limiter = web.operator, web.sign_in
    presented = operator.bearer(request) if operator.token is not None else None
    client = _client(request) or "-"
    if presented is not None:
        refused = limiter.refusal(client)
        if refused is not None:
            return refused
    if operator.allowed(request):
        return await handler(request)
    if presented is not None:
        limiter.failed(client)
    if operator.token is None:
        return _error(
            403,
            "no operator token is configured: loopback clients only, addressing the "
            "app as localhost or a loopback address",
        )
    if html:
        query = urlencode({"next": undecoded_path(request)})
        return RedirectResponse(f"{_root(request)}/login?{query}", status_code=303)
    return _error(
        401,
        "send the operator token: Authorization: Bearer <token>",
        **{"WWW-Authenticate": 'Bearer realm="prana"'},
    )


def _list_args(request: Request) -> ListArgs | Response:
    query = request.query_params
    status = query.get("status") or None
    if status is not None and status not in _html.STATUSES:
        return _error(400, f"status={status!r}: use one of {', '.join(_html.STATUSES)}")
    workflow = query.get("workflow") or None
    after = query.get("after") or None
    code = query.get("code") or None
    for name, value in (("workflow", workflow), ("after", after), ("code", code)):
        if value is not None and not value.isprintable():
            return _error(400, f"{name}={value!r}: control characters name nothing")
    if code is not None and status not in (None, "failed"):
        return _error(400, f"code={code!r}: only failed executions have an error code")
    try:
        limit = int(query.get("limit", "50"))
    except ValueError:
        return _error(400, "limit is a whole number")
    if not 1 <= limit <= MAX_PAGE:
        return _error(400, f"use 1 <= limit <= {MAX_PAGE}")
    return status, workflow, limit, after, code


def _list_rows(
    runner: Runner,
    status: str | None,
    workflow: str | None,
    limit: int,
    after: str | None,
    code: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page (``scheduling._listing.read_page``, as ``prana list``) and the cursor of
    the next (``None``: the last)."""
    wanted = ExecutionStatus(status) if status else None
    page = read_page(runner.store, wanted, limit=limit, workflow=workflow, after=after, code=code)
    for problem in page.problems:
        logger.warning("listed as unreadable: %s", problem)
    items = [
        unreadable_row(row, failure=None, waiting=None)
        if isinstance(row, UnreadableRow)
        else summary_view(row, page.failures.get(row.id), page.waiting.get(row.id))
        for row in page.rows
    ]
    return items, page.next_after


async def _page_or_400(
    request: Request,
) -> tuple[ListArgs, list[dict[str, Any]], str | None] | Response:
    """The list query's arguments, its page and the next cursor, or the refusal."""
    args = _list_args(request)
    if isinstance(args, Response):
        return args
    after = args[3]
    try:
        items, next_after = await asyncio.to_thread(_list_rows, _web(request).runner, *args)
    except ExecutionNotFound:
        return _error(400, f"after={after!r} names no execution; start from the first page")
    except StoreError as exc:
        return _error(500, _first_line(exc))
    return args, items, next_after


def _load_view(runner: Runner, execution_id: str) -> dict[str, Any]:
    execution, version = runner.store.load(execution_id)
    try:
        workflow = runner.definition(execution.workflow_id, execution.workflow_version)
    except WorkflowNotFound:
        workflow = None
    return execution_view(execution, version, workflow, runner.registry)


async def _view_or_404(request: Request) -> dict[str, Any] | Response:
    execution_id = request.path_params["execution_id"]
    if not execution_id.isprintable():  # PostgreSQL refuses a NUL: it names nothing
        return _no_execution(execution_id)
    try:
        return await asyncio.to_thread(_load_view, _web(request).runner, execution_id)
    except ExecutionNotFound:
        return _no_execution(execution_id)
    except (RecordError, StoreError) as exc:
        return _error(500, f"execution {execution_id!r}: {_first_line(exc)}")


async def _api_list(request: Request) -> Response:
    found = await _page_or_400(request)
    if isinstance(found, Response):
        return found
    (_, _, limit, after, _), items, next_after = found
    return JSONResponse({"items": items, "limit": limit, "after": after, "next_after": next_after})


async def _api_one(request: Request) -> Response:
    found = await _view_or_404(request)
    return found if isinstance(found, Response) else JSONResponse(found)


async def _page_list(request: Request) -> Response:
    found = await _page_or_400(request)
    if isinstance(found, Response):
        return found
    (status, workflow, limit, after, code), items, next_after = found
    return HTMLResponse(
        _html.list_page(
            items,
            root=_root(request),
            status=status,
            workflow=workflow,
            code=code,
            limit=limit,
            after=after,
            next_after=next_after,
        )
    )


async def _page_one(request: Request) -> Response:
    found = await _view_or_404(request)
    if isinstance(found, Response):
        return found
    if request.query_params.get("fragment"):
        return HTMLResponse(_html.execution_fragment(found))
    return HTMLResponse(_html.execution_page(found, root=_root(request)))


async def _events(request: Request) -> Response:
    web = _web(request)
    execution_id = request.path_params["execution_id"]
    if not execution_id.isprintable():
        return _no_execution(execution_id)
    try:
        first = await asyncio.to_thread(_load_view, web.runner, execution_id)
    except ExecutionNotFound:
        return _no_execution(execution_id)
    except (RecordError, StoreError) as exc:
        return _error(500, f"execution {execution_id!r}: {_first_line(exc)}")
    if not web.streams.take():
        return _error(
            503,
            f"this app serves at most {web.max_streams} event streams at once; try again later",
            **{"Retry-After": "5"},
        )
    return _CountedStream(
        _stream(request, web, execution_id, first),
        web.streams,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(
    request: Request, web: _Web, execution_id: str, first: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The events of one execution: its view at each new version, then ``end`` once final."""
    ends_at = web.unix_now() + web.max_stream_seconds
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def heard(saved_id: str) -> None:  # in the runner's saving thread
        if saved_id == execution_id:
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                loop.call_soon_threadsafe(changed.set)

    unsubscribe = web.runner.subscribe(heard)
    try:
        view = first
        sent = request.headers.get("last-event-id")
        quiet_since = loop.time()
        while True:
            version = str(view["record_version"])
            if version != sent:
                sent = version
                quiet_since = loop.time()
                yield _sse("execution", view, version)
            if view["status"] in FINAL:
                yield _sse("end", {"status": view["status"]}, version)
                return
            # Woken at once by this runner's saves; the poll finds other processes'.
            heartbeat_at = quiet_since + HEARTBEAT_SECONDS
            pause = min(web.poll_seconds, max(0.0, heartbeat_at - loop.time()))
            with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError from 3.11
                await asyncio.wait_for(changed.wait(), pause)
            changed.clear()
            if loop.time() >= heartbeat_at:
                quiet_since = loop.time()
                yield b": keep-alive\n\n"
            if await request.is_disconnected():
                return
            if web.unix_now() >= ends_at:  # bounded: an idle client cannot hold it for ever
                yield b": stream lifetime reached; reconnect\n\n"
                return
            try:
                view = await asyncio.to_thread(_load_view, web.runner, execution_id)
            except (RecordError, StoreError):  # gone, or the store failed: end
                return
    finally:
        unsubscribe()


async def _script(request: Request) -> Response:
    del request
    return Response(
        _html.SCRIPT,
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=3600"},
    )


async def _home(request: Request) -> Response:
    return RedirectResponse(f"{_root(request)}/executions", status_code=303)


def _cross_site(request: Request) -> bool:
    """Whether a sign-in came from a page of another site: the browser says so in
    ``Sec-Fetch-Site`` (which no page can set), or, from a browser too old to send it, an
    ``Origin`` that is not this host. A page elsewhere made an operator's browser send
    wrong sign-ins until the operator was locked out; such an attempt neither counts nor
    signs in. A client that sends neither (curl), or ``Origin: null`` (the view's
    ``no-referrer`` policy), passes."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin", "null").lower()
    host = request.headers.get("host", "").lower()
    return origin != "null" and origin not in (f"http://{host}", f"https://{host}")


async def _login(request: Request) -> Response:
    response = await _signing_in(request)
    response.headers.setdefault("cache-control", NO_STORE)
    return response


async def _signing_in(request: Request) -> Response:
    web = _web(request)
    next_path = request.query_params.get("next", "")
    if request.method == "GET":
        return HTMLResponse(
            _html.login_page(root=_root(request), next_path=next_path, failed=False)
        )
    if _cross_site(request):
        return _error(403, "sign in from the view's own login page (a cross-site sign-in)")
    client = _client(request) or "-"
    refused = web.sign_in.refusal(client)
    if refused is not None:
        return refused
    raw = await request.body()
    if len(raw) > 4096:
        return _error(413, "the login form is over 4096 bytes")
    form = parse_qs(raw.decode("utf-8", "replace"))
    candidate = (form.get("token") or [""])[0]
    next_path = (form.get("next") or [""])[0]
    if not next_path.startswith("/") or next_path.startswith("//"):
        next_path = f"{_root(request)}/executions"
    if not web.operator.check_token(candidate):
        web.sign_in.failed(client)
        logger.warning("operator login refused", extra={"client": _client(request)})
        return HTMLResponse(
            _html.login_page(root=_root(request), next_path=next_path, failed=True),
            status_code=401,
        )
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(
        COOKIE,
        web.operator.new_cookie(),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=_root(request) or "/",
    )
    return response


_GUARDED_PAGE = _guarded(_page_one, html=True)
_GUARDED_JSON = _guarded(_api_one, html=False)
_GUARDED_EVENTS = _guarded(_events, html=False)


async def _one_execution(request: Request) -> Response:
    execution_id, stream = execution_path(request)
    request.path_params["execution_id"] = execution_id
    return await (_GUARDED_EVENTS if stream else _GUARDED_PAGE)(request)


async def _one_execution_json(request: Request) -> Response:
    request.path_params["execution_id"] = execution_path(request, "/api/executions/")[0]
    return await _GUARDED_JSON(request)


async def _metrics(request: Request) -> Response:
    """The Prometheus text exposition (``scheduling.metrics``): the store's counts, and the
    runner's ``MetricsObserver``'s when it has one; 404 without ``prometheus_client``."""
    try:
        from scheduling.metrics import MetricsObserver, metrics_text
    except ImportError:
        return _error(404, "metrics need prometheus_client: pip install 'prana-workflows[metrics]'")
    runner = _web(request).runner
    observer = next((o for o in runner.observers if isinstance(o, MetricsObserver)), None)
    try:
        body = await asyncio.to_thread(metrics_text, runner.store, observer)
    except StoreError as exc:
        return _error(500, _first_line(exc))
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


_VIEW_ROUTES = [
    Route("/", _guarded(_home, html=True)),
    Route("/metrics", _guarded(_metrics, html=False)),
    Route("/assets/view.js", _script),
    Route("/api/executions", _guarded(_api_list, html=False)),
    Route("/api/executions/{rest:path}", _one_execution_json),
    Route("/executions", _guarded(_page_list, html=True)),
    Route("/executions/{rest:path}", _one_execution),
]
"""The operator's view and API (``create_app(view=True)``)."""


MAX_DIGITS = 18
"""The most digits a number read from a header (a cookie's expiry, a Content-Length) may
have: ``int()`` refuses text past 4,300 digits with a ``ValueError`` (a 500), and no expiry
this app signs or body it accepts needs more than 18."""


def _short_whole(text: str) -> bool:
    """Whether ``text`` is a whole number of ASCII digits, at most ``MAX_DIGITS`` of them
    (``str.isdigit`` alone also holds for ``²``, which ``int()`` cannot read)."""
    return 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def _sse(event: str, data: Any, event_id: str) -> bytes:
    """One Server-Sent Event: its name, id, and JSON data on one line."""
    return b"event: %s\nid: %s\ndata: %s\n\n" % (
        event.encode(),
        event_id.encode(),
        orjson.dumps(data),
    )


def undecoded_path(request: Request) -> str:
    """The request's path as the client wrote it (``%2F`` kept, so an id holding ``/`` names
    itself again), the app's root included: where to return after signing in.

    Read from the ASGI ``raw_path`` as ``execution_path`` reads the id; the decoded path
    when the server gives none (or one that is not ASCII).
    """
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes) and raw.isascii() and raw.startswith(b"/"):
        path = raw.decode("ascii")
        root = quote(str(request.scope.get("root_path", "")), safe="/").rstrip("/")
        return path if path.startswith(root + "/") else root + path  # a proxy may strip it
    return request.url.path


def execution_path(request: Request, base: str = "/executions/") -> tuple[str, bool]:
    """The execution id a ``{base}{rest}`` path names, and whether it asks for the stream
    (a last segment ``events``, under ``/executions/`` only).

    Read from the undecoded path (ASGI ``raw_path``) when the server gives one: a ``%2F`` is
    part of the id, a literal ``/`` separates, so an id ending in ``/events`` (quoted
    ``%2Fevents``) is a page. Without it, the decoded path: a last ``/events`` is the stream.
    """
    rest: str = request.path_params["rest"]
    streams = base == "/executions/"
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        path = raw.decode("latin-1")
        root = quote(str(request.scope.get("root_path", "")), safe="/")
        for prefix in (root + base, base):  # a proxy may have stripped the root
            if path.startswith(prefix):
                segments = path[len(prefix) :].split("/")
                if streams and len(segments) > 1 and segments[-1] == "events":
                    return unquote("/".join(segments[:-1])), True
                return unquote("/".join(segments)), False
    if streams and rest.endswith("/events"):
        return rest.removesuffix("/events"), True
    return rest, False
