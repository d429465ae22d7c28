"""The HTTP face tried as an attacker: status oracles, login, headers, stream caps."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from servers import serve
from test_web import OPERATOR, make_runner, waiting

from prana import ExecutionStatus
from prana.testing import ManualClock
from scheduling import HookGone, HookNotFound
from scheduling.web import create_app
from scheduling.web._app import (
    LOGIN_CLIENTS,
    LOGIN_FAILURES,
    LOGIN_WINDOW_SECONDS,
    SESSION_SECONDS,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scheduling import Runner


@pytest.fixture
def runner() -> Iterator[Runner]:
    with make_runner() as r:
        yield r


def _forged(execution_id: str) -> str:
    """A well-formed token naming ``execution_id`` with a secret nobody was given."""
    import base64

    head = base64.urlsafe_b64encode(execution_id.encode()).rstrip(b"=").decode()
    return f"{head}.{'A' * 43}"


# --- no status oracle on POST /hooks/{token} -------------------------------------------------


def test_a_forged_token_gets_404_whatever_its_execution_is(runner: Runner) -> None:
    """Without the secret, a finished, a cancelled and a missing execution all answer 404."""
    done_id, done_path = waiting(runner)
    runner.deliver_hook(done_path.removeprefix("/hooks/"), {"approved": True})
    cancelled_id, _ = waiting(runner)
    runner.cancel(cancelled_id)
    waiting_id, _ = waiting(runner)
    for execution_id in (done_id, cancelled_id, waiting_id, "no-such-execution"):
        before = runner.store.load(execution_id) if execution_id != "no-such-execution" else None
        with pytest.raises(HookNotFound) as caught:
            runner.deliver_hook(_forged(execution_id), {"x": 1})
        assert str(caught.value) == "no webhook wait answers to this token"
        if before is not None:
            assert runner.store.load(execution_id) == before


def test_a_verified_token_of_a_cancelled_wait_is_gone(runner: Runner) -> None:
    """The real token of a wait cancelled while waiting gets 410: its secret verified."""
    execution_id, path = waiting(runner)
    runner.cancel(execution_id)
    with pytest.raises(HookGone):
        runner.deliver_hook(path.removeprefix("/hooks/"), None)


def test_http_statuses_leak_nothing_without_the_secret(runner: Runner) -> None:
    """Over HTTP, forged tokens for existing and missing executions get the same answer."""
    done_id, done_path = waiting(runner)
    with serve(create_app(runner, token=OPERATOR)) as url, httpx.Client(base_url=url) as client:
        assert client.post(done_path, json={"approved": True}).status_code == 200
        answers = {
            (r.status_code, r.text)
            for r in (
                client.post(f"/hooks/{_forged(done_id)}", json={}),
                client.post(f"/hooks/{_forged('missing')}", json={}),
            )
        }
        assert answers == {(404, '{"error":"no webhook wait answers to this token"}')}
        used = client.post(done_path, json={"approved": False})  # the secret, other data
        assert (used.status_code, used.text) == (
            404,
            '{"error":"no webhook wait answers to this token"}',
        )
        forged_repeat = client.post(f"/hooks/{_forged(done_id)}", json={"approved": True})
        assert forged_repeat.status_code == 404  # the data delivered, without the secret
    assert runner.get(done_id).status is ExecutionStatus.COMPLETED


# --- operator sign-in: rate limit, session cookie, security headers ---------------------------


def _asgi(app: Any, client: str = "198.51.100.1", scheme: str = "http") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(client, 4000))
    return httpx.AsyncClient(
        transport=transport, base_url=f"{scheme}://127.0.0.1:8000", follow_redirects=False
    )


def _clock(runner: Runner) -> ManualClock:
    clock = runner.clock
    assert isinstance(clock, ManualClock)
    return clock


def test_failed_sign_ins_are_limited_per_client(runner: Runner) -> None:
    """Past five failures a client gets 429 with Retry-After, even with the right token;
    another client is unaffected; the window's end lets it try again."""
    app = create_app(runner, token=OPERATOR)

    async def main() -> None:
        async with _asgi(app) as attacker, _asgi(app, "198.51.100.2") as operator:
            for _ in range(LOGIN_FAILURES):
                wrong = await attacker.post("/login", data={"token": "guess-" * 4})
                assert wrong.status_code == 401
            locked = await attacker.post("/login", data={"token": OPERATOR})
            assert locked.status_code == 429
            assert int(locked.headers["retry-after"]) == LOGIN_WINDOW_SECONDS
            assert "too many failed sign-ins" in locked.json()["error"]
            bearer = await attacker.get("/api/executions", headers=_bearer(OPERATOR))
            assert bearer.status_code == 429
            ok = await operator.post("/login", data={"token": OPERATOR})
            assert ok.status_code == 303
            _clock(runner).advance(LOGIN_WINDOW_SECONDS)
            again = await attacker.post("/login", data={"token": OPERATOR})
            assert again.status_code == 303

    asyncio.run(main())


def test_wrong_bearer_tokens_count_as_failed_sign_ins(runner: Runner) -> None:
    """Guessing through the Authorization header is limited the same way."""
    app = create_app(runner, token=OPERATOR)

    async def main() -> list[int]:
        async with _asgi(app) as client:
            return [
                (
                    await client.get("/api/executions", headers=_bearer(f"guess-{n:012d}"))
                ).status_code
                for n in range(LOGIN_FAILURES + 1)
            ]

    assert asyncio.run(main()) == [401] * LOGIN_FAILURES + [429]


def test_the_limiter_remembers_a_bounded_number_of_clients(runner: Runner) -> None:
    """Failures from many addresses keep at most LOGIN_CLIENTS entries."""
    app = create_app(runner, token=OPERATOR)
    limiter = app.state.sign_in_limiter
    for n in range(LOGIN_CLIENTS + 500):
        limiter.failed(f"client-{n}")
    assert len(limiter.failures) == LOGIN_CLIENTS
    assert "client-0" not in limiter.failures


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_session_cookie_expires_and_is_locked_down(runner: Runner, scheme: str) -> None:
    """HttpOnly, SameSite=Strict, a Max-Age, Secure over https; refused past its expiry."""
    app = create_app(runner, token=OPERATOR)

    async def main() -> None:
        async with _asgi(app, scheme=scheme) as client:
            login = await client.post("/login", data={"token": OPERATOR})
            assert login.status_code == 303
            cookie = login.headers["set-cookie"].lower()
            assert "httponly" in cookie
            assert "samesite=strict" in cookie
            assert f"max-age={SESSION_SECONDS}" in cookie
            assert ("secure" in cookie.split("; ")) is (scheme == "https")
            value = login.cookies["prana_operator"]
            assert OPERATOR not in value
            client.cookies.clear()

            async def with_cookie(cookie: str) -> int:
                headers = {"cookie": f"prana_operator={cookie}"}
                return (await client.get("/api/executions", headers=headers)).status_code

            assert await with_cookie(value) == 200
            later = value.replace(value.split(".")[0], str(10**12))
            assert await with_cookie(later) == 401  # the expiry is signed, not editable
            _clock(runner).advance(SESSION_SECONDS)
            assert await with_cookie(value) == 401

    asyncio.run(main())


def test_pages_carry_security_headers_and_no_inline_script(runner: Runner) -> None:
    """CSP without inline script, no framing, no sniffing, no Referer; the script is a file."""
    execution_id, _ = waiting(runner)
    app = create_app(runner, token=OPERATOR)

    async def main() -> None:
        async with _asgi(app) as client:
            for path in ("/login", "/executions", f"/executions/{execution_id}"):
                page = await client.get(path, headers=_bearer(OPERATOR))
                assert page.status_code == 200, path
                csp = page.headers["content-security-policy"]
                script_src = next(d for d in csp.split(";") if d.strip().startswith("script-src"))
                assert "'unsafe-inline'" not in script_src
                assert "frame-ancestors 'none'" in csp
                assert page.headers["x-frame-options"] == "DENY"
                assert page.headers["x-content-type-options"] == "nosniff"
                assert page.headers["referrer-policy"] == "no-referrer"
                assert re.findall(r"<script(?![^>]*\bsrc=)", page.text) == []
            script = await client.get("/assets/view.js")
            assert script.status_code == 200
            assert script.headers["content-type"].startswith("text/javascript")
            assert "EventSource" in script.text
            hook = await client.post("/hooks/nope", json={})
            assert hook.headers["referrer-policy"] == "no-referrer"

    asyncio.run(main())


def test_operator_answers_are_not_kept_by_caches(runner: Runner) -> None:
    """What the view and the API answer an operator (executions' params, outputs and errors)
    carried no ``Cache-Control``: a browser kept the pages (shown again from its history
    after the session ended, on a shared machine), and a shared cache could keep those a
    cookie signed in. Every answer of an operator route says ``no-store``, the refusals
    too; the script keeps its public caching, and the event stream its own ``no-cache``."""
    execution_id, _ = waiting(runner)
    app = create_app(runner, token=OPERATOR)

    async def main() -> None:
        async with _asgi(app) as client:
            login = await client.post("/login", data={"token": OPERATOR})
            cookie = {"cookie": f"prana_operator={login.cookies['prana_operator']}"}
            client.cookies.clear()
            for path in (
                "/",
                "/executions",
                f"/executions/{execution_id}",
                f"/executions/{execution_id}?fragment=1",
                "/api/executions",
                f"/api/executions/{execution_id}",
                "/api/executions/no-such-execution",
            ):
                for headers in (_bearer(OPERATOR), cookie, {}):
                    answer = await client.get(path, headers=headers)
                    assert answer.headers.get("cache-control") == "no-store", (path, headers)
            for path in ("/login", "/login?next=/executions"):
                assert (await client.get(path)).headers.get("cache-control") == "no-store"
            script = await client.get("/assets/view.js")
            assert script.headers["cache-control"].startswith("public")

    asyncio.run(main())


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# --- event streams: a cap per app and a lifetime each -----------------------------------------


def test_event_streams_are_capped_per_app(runner: Runner) -> None:
    """Past max_streams open streams, /events answers 503; a closed one frees its place."""
    execution_id, _ = waiting(runner)
    app = create_app(runner, token=OPERATOR, max_streams=2, poll_seconds=0.02)
    path = f"/executions/{execution_id}/events"
    with (
        serve(app) as url,
        httpx.Client(base_url=url, headers=_bearer(OPERATOR), timeout=10) as client,
        client.stream("GET", path) as first,
    ):
        assert first.status_code == 200
        with client.stream("GET", path) as second:
            assert second.status_code == 200
            assert app.state.event_streams.wait_for(2, 10)
            third = client.get(path)
            assert third.status_code == 503
            assert third.headers["retry-after"] == "5"
            assert "at most 2 event streams" in third.json()["error"]
        assert app.state.event_streams.wait_for(1, 10)  # the server saw the client leave
        with client.stream("GET", path) as again:
            assert again.status_code == 200


def test_an_event_stream_ends_at_its_lifetime(runner: Runner) -> None:
    """An idle stream on a waiting execution ends once max_stream_seconds have passed."""
    execution_id, _ = waiting(runner)
    app = create_app(runner, token=OPERATOR, max_stream_seconds=60, poll_seconds=0.02)
    with (
        serve(app) as url,
        httpx.stream(
            "GET",
            f"{url}/executions/{execution_id}/events",
            headers=_bearer(OPERATOR),
            timeout=10,
        ) as response,
    ):
        lines = response.iter_lines()
        assert next(lines) == "event: execution"
        _clock(runner).advance(60)
        rest = list(lines)  # ends: the read timeout bounds the test if it did not
        assert ": stream lifetime reached; reconnect" in rest
        assert not any(line.startswith("event: end") for line in rest)
    assert app.state.event_streams.wait_for(0, 10)


def test_create_app_checks_the_stream_limits(runner: Runner) -> None:
    """A bad cap or lifetime is refused in one line naming it."""
    from prana import PranaError

    with pytest.raises(PranaError, match="max_streams"):
        create_app(runner, max_streams=0)
    with pytest.raises(PranaError, match="max_stream_seconds"):
        create_app(runner, max_stream_seconds=0)


# --- sub-workflows: a child's webhook wait has its own token ----------------------------------


def test_a_sub_workflows_webhook_wait_has_its_own_token() -> None:
    """The child's wait mints a token naming the child; the parent has none to hand out,
    and the child's token resumes the child (which then resumes its parent)."""
    from doubles import Harness, sub_node, webhook_node, workflow

    from prana._hooks import parse_token
    from scheduling.stores.memory import MemoryStore

    h = Harness(MemoryStore(serialize=True))
    h.runner.register_workflow(workflow(webhook_node(), wid="child"))
    with h.runner as runner:
        parent_id = runner.start(workflow(sub_node("child", "sync"), wid="parent"))
        parent = runner.get(parent_id)
        assert parent.suspension is not None
        assert parent.suspension.kind == "sub_workflow"
        children = [runner.get(row.id) for row in runner.store.list(None, limit=10)]
        (child_id,) = [
            c.id for c in children if c.parent is not None and c.parent.execution_id == parent_id
        ]
        assert runner.hook_path(parent_id) is None
        path = runner.hook_path(child_id)
        assert path is not None
        parsed = parse_token(path.removeprefix("/hooks/"))
        assert parsed is not None
        assert parsed[0] == child_id
        with pytest.raises(HookNotFound):  # the child's secret names nothing in the parent
            runner.deliver_hook(f"{_forged(parent_id).split('.')[0]}.{parsed[1]}", {"ok": 1})
        runner.deliver_hook(path.removeprefix("/hooks/"), {"ok": True})
        assert runner.get(child_id).status is ExecutionStatus.COMPLETED
        assert runner.get(parent_id).status is ExecutionStatus.COMPLETED


def test_the_api_names_the_record_version_as_the_cli_does(runner: Runner) -> None:
    """``record_version`` in the list, the one-execution view and the SSE id, like --json."""
    from scheduling._cli._json import summary_json

    execution_id, _ = waiting(runner)
    app = create_app(runner, token=OPERATOR)

    async def main() -> tuple[Any, Any]:
        async with _asgi(app) as client:
            listed = (await client.get("/api/executions", headers=_bearer(OPERATOR))).json()
            one = await client.get(f"/api/executions/{execution_id}", headers=_bearer(OPERATOR))
            return listed["items"][0], one.json()

    item, view = asyncio.run(main())
    _, stored = runner.store.load(execution_id)
    assert item["record_version"] == view["record_version"] == stored
    assert "version" not in item
    assert "version" not in view
    row = runner.store.list(None, limit=1)[0]
    assert "record_version" in summary_json(row)


# --- numbers in headers: read only when short ------------------------------------------------


@pytest.mark.parametrize("expires", ["1" * 5000, "9" * 20])
def test_a_cookie_expiry_of_many_digits_is_refused_not_a_crash(
    runner: Runner, expires: str
) -> None:
    """A login cookie's expiry past Python's 4,300-digit ``int()`` limit raised ValueError
    in the credential check: 500 and a traceback in the log for any client, signed in or
    not. Such a cookie was never issued: it is refused (401), as any forged one."""
    app = create_app(runner, token=OPERATOR)

    async def main() -> list[int]:
        async with _asgi(app) as client:
            headers = {"cookie": f"prana_operator={expires}.{'0' * 64}"}
            return [
                (await client.get("/api/executions", headers=headers)).status_code,
                (await client.get("/executions", headers=headers)).status_code,
            ]

    assert asyncio.run(main()) == [401, 303]


@pytest.mark.parametrize("declared", ["9" * 5000, "\u00b2"])
def test_a_content_length_no_whole_number_reads_is_answered_not_a_crash(
    runner: Runner, declared: str
) -> None:
    """A webhook's Content-Length of thousands of digits (Python's ``int()`` refuses past
    4,300) or a digit ``int()`` cannot read (``²``: ``str.isdigit`` holds) raised in the
    route, a 500, when a server passes the header on (uvicorn's h11 refuses both itself):
    many digits are over any body limit, 413; the other is no length, and the body is read
    as it comes."""
    _, path = waiting(runner)
    app = create_app(runner, token=OPERATOR)

    async def main() -> int:
        async with _asgi(app) as client:
            headers = {b"content-length": declared.encode("latin-1")}
            return (await client.post(path, headers=headers)).status_code

    status = asyncio.run(main())
    assert status == (413 if len(declared) > 1 else 200)


# --- /hooks checks the token before it reads or parses the body -----------------------------


class _CountingJSON:
    """Stands for orjson in the app module: counts the bodies it parses."""

    JSONDecodeError = __import__("orjson").JSONDecodeError
    parsed = 0

    @classmethod
    def loads(cls, data: bytes) -> Any:
        import orjson

        cls.parsed += 1
        return orjson.loads(data)

    dumps = staticmethod(__import__("orjson").dumps)


def test_a_body_is_read_and_parsed_only_for_a_token_that_verifies(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a token, or with a forged one, 1 MiB of ``[[],...]`` was read and parsed
    before the secret was checked (150 clients took ``prana serve`` to 2 GiB). Now the
    answer is 404 before the body is read: the stream is never pulled, nothing is parsed."""
    import scheduling.web._app as app_module

    monkeypatch.setattr(_CountingJSON, "parsed", 0)
    monkeypatch.setattr(app_module, "orjson", _CountingJSON)
    waiting_id, path = waiting(runner)
    body = b"[" + b"[]," * 300_000 + b"[]]"
    pulled: list[int] = []

    async def stream() -> Any:
        for start in range(0, len(body), 65536):
            pulled.append(start)
            yield body[start : start + 65536]

    app = create_app(runner, token=OPERATOR)

    async def main() -> list[int]:
        async with _asgi(app) as client:
            statuses = []
            for token in ("not-a-token", _forged(waiting_id), _forged("missing")):
                answer = await client.post(
                    f"/hooks/{token}",
                    content=stream(),
                    headers={"content-type": "application/json"},
                )
                statuses.append(answer.status_code)
            ok = await client.post(path, json={"approved": True})
            statuses.append(ok.status_code)
            return statuses

    assert asyncio.run(main()) == [404, 404, 404, 200]
    assert _CountingJSON.parsed == 1  # the verified delivery's body only
    assert pulled == []
    assert runner.get(waiting_id).status is ExecutionStatus.COMPLETED


def test_deliveries_past_the_cap_get_503_and_change_nothing(runner: Runner) -> None:
    """At most ``MAX_DELIVERIES`` verified bodies are read, parsed and delivered at once:
    past it the answer is 503 with Retry-After, and the wait stays as it was."""
    from scheduling.web._app import MAX_DELIVERIES

    waiting_id, path = waiting(runner)
    app = create_app(runner, token=OPERATOR)
    app.state.web.deliveries = MAX_DELIVERIES

    async def main() -> httpx.Response:
        async with _asgi(app) as client:
            return await client.post(path, json={"approved": True})

    answer = asyncio.run(main())
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert runner.get(waiting_id).status is ExecutionStatus.SUSPENDED
    app.state.web.deliveries = 0

    async def again() -> httpx.Response:
        async with _asgi(app) as client:
            return await client.post(path, json={"approved": True})

    assert asyncio.run(again()).status_code == 200


# --- a forged token costs no load of the record it names ------------------------------------


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            "sqlite",
            marks=pytest.mark.skipif(
                sys.version_info < (3, 11),
                reason="sqlite3's blobopen is Python 3.11+; on 3.10 the check loads the record "
                "(documented in docs/reference/web.md)",
            ),
        ),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_a_forged_token_is_refused_without_loading_the_record(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, kind: str, request: pytest.FixtureRequest
) -> None:
    """An unauthenticated ``POST /hooks/<forged token naming the id>`` forced the whole
    record to be loaded and parsed before the secret was checked (4 requests took
    ``prana serve`` from 38 MiB to 909 MiB on a 151 MB record). SQLite answers from the
    end of a large record's text: forged tokens naming it are refused with no load at
    all, whatever the record holds (a record of at most 64 KiB is loaded: it costs little,
    and tells a used token's repeated delivery); the real token still delivers."""
    from test_web import approval

    from prana import Connection as Edge
    from prana import Node as Step
    from prana import Workflow as Flow
    from scheduling.stores.sqlite import SQLiteStore

    store: Any = (
        SQLiteStore(tmp_path / "hooks.sqlite3")
        if kind == "sqlite"
        else request.getfixturevalue("postgres_store")
    )
    big = Flow(
        id="big",
        nodes=[
            Step(key="t", type="manual.trigger"),
            # outputs quoting a record's own tail text: the light read must not be fooled
            Step(
                key="decoy",
                type="data.set_data",
                params={
                    "value": {
                        "suspended_node": "decoy",
                        "suspension": {"kind": "webhook", "data": {"token_digest": "0" * 64}},
                        "pad": [[]] * 50_000,
                    }
                },
            ),
            Step(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Edge(from_node="t", to_node="decoy"),
            Edge(from_node="decoy", to_node="approve"),
        ],
    )
    with make_runner(store) as runner:
        waiting_id, path = waiting(runner, big)
        other_id, _ = waiting(runner, approval())
        loads: list[str] = []
        real_load = store.load

        def counting_load(execution_id: str) -> Any:
            loads.append(execution_id)
            return real_load(execution_id)

        monkeypatch.setattr(store, "load", counting_load)
        app = create_app(runner, token=OPERATOR)

        async def main() -> list[int]:
            async with _asgi(app) as client:
                statuses = []
                for token in (_forged(waiting_id), _forged(other_id), _forged("missing")):
                    answer = await client.post(f"/hooks/{token}", json={"x": 1})
                    statuses.append(answer.status_code)
                assert waiting_id not in loads
                assert set(loads) <= {other_id}
                ok = await client.post(path, json={"approved": True})
                statuses.append(ok.status_code)
                return statuses

        assert asyncio.run(main()) == [404, 404, 404, 200]
        assert runner.get(waiting_id).status is ExecutionStatus.COMPLETED
    if kind == "sqlite":
        store.close()


# --- sign-ins from another site neither count nor sign in ------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.test"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site", "origin": "https://sub.127.0.0.1:8000"},
        {"origin": "http://127.0.0.1:8001"},
    ],
)
def test_a_cross_site_sign_in_neither_counts_nor_signs_in(
    runner: Runner, headers: dict[str, str]
) -> None:
    """A page on another origin made the operator's browser send wrong sign-ins until the
    right token got 429. Cross-site attempts are refused (403) uncounted, right or wrong;
    the operator's own page then signs in."""
    app = create_app(runner, token=OPERATOR)

    async def main() -> None:
        async with _asgi(app) as browser:
            for _ in range(LOGIN_FAILURES + 2):
                wrong = await browser.post("/login", data={"token": "guess-" * 4}, headers=headers)
                assert wrong.status_code == 403
            right = await browser.post("/login", data={"token": OPERATOR}, headers=headers)
            assert right.status_code == 403
            assert "set-cookie" not in right.headers
            own = {"origin": "http://127.0.0.1:8000", "sec-fetch-site": "same-origin"}
            ok = await browser.post("/login", data={"token": OPERATOR}, headers=own)
            assert ok.status_code == 303

    asyncio.run(main())


def test_a_slow_webhook_body_is_cut_off_at_its_deadline(runner: Runner) -> None:
    """A body sent a byte at a time was never timed out: 300 such connections held
    ``prana serve``. Past ``max_body_seconds`` the answer is 408 and the wait is unchanged;
    the same token then delivers."""
    waiting_id, path = waiting(runner)
    app = create_app(runner, token=OPERATOR, max_body_seconds=0.05)
    never = asyncio.Event()

    async def dribble() -> Any:
        yield b'{"approved": '
        await never.wait()  # the rest never comes
        yield b"true}"

    async def main() -> tuple[httpx.Response, httpx.Response]:
        async with _asgi(app) as client:
            slow = await client.post(
                path, content=dribble(), headers={"content-type": "application/json"}
            )
            ok = await client.post(path, json={"approved": True})
            return slow, ok

    slow, ok = asyncio.run(main())
    assert slow.status_code == 408
    assert "did not arrive within 0.05s" in slow.json()["error"]
    assert ok.status_code == 200
    assert runner.get(waiting_id).status is ExecutionStatus.COMPLETED
