"""scheduling.web: resume tokens, POST /hooks/{token}, the operator API, pages and SSE."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
from datetime import timedelta
from html import unescape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import attrs
import httpx
import pytest
from doubles import T0, Flaky, webhook_node, workflow
from servers import serve

from prana import (
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    NonRetryable,
    Registry,
    RetryPolicy,
    Suspend,
    WebhookData,
    Workflow,
    dumps,
    execute_workflow,
)
from prana._hooks import SECRET_BYTES, parse_token
from prana.testing import ManualClock
from scheduling import HookAlreadyDelivered, HookConflict, HookGone, HookNotFound, Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore
from scheduling.web import create_app

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from scheduling.abc import ExecutionStore

OPERATOR = "an-operator-token-long-enough"


def approval(timeout_hours: float = 1) -> Workflow:
    """trigger -> flaky call (3 attempts, 5 s apart) -> webhook wait."""
    return Workflow(
        id="approval",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="test.flaky",
                settings=NodeSettings(
                    retry=RetryPolicy(max_attempts=3, backoff="constant", initial_delay=5)
                ),
            ),
            Node(
                key="approve",
                type="wait.wait",
                params={"mode": "webhook", "timeout_hours": timeout_hours},
            ),
        ],
        connections=[
            Connection(from_node="start", to_node="call"),
            Connection(from_node="call", to_node="approve"),
        ],
    )


def make_runner(store: ExecutionStore | None = None, fails: int = 0) -> Runner:
    clock = ManualClock()
    registry = Registry()
    registry.register("test.flaky", Flaky(fails))
    return Runner(
        registry=registry,
        store=store if store is not None else MemoryStore(serialize=True),
        scheduler=ManualScheduler(clock=clock),
    )


@pytest.fixture
def runner() -> Iterator[Runner]:
    with make_runner() as r:
        yield r


def waiting(runner: Runner, workflow: Workflow | None = None) -> tuple[str, str]:
    """Start the approval workflow until it waits; return its id and resume path."""
    execution_id = runner.start(workflow or approval(), {"n": 1})
    path = runner.hook_path(execution_id)
    assert path is not None
    return execution_id, path


# --- the token ------------------------------------------------------------------------------


def test_token_format_and_digest_only_in_the_record() -> None:
    """The outcome carries a URL-safe token of >= 128 random bits; the record only a digest."""
    workflow = Workflow(
        id="w",
        nodes=[
            Node(key="t", type="manual.trigger"),
            Node(key="w", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[Connection(from_node="t", to_node="w")],
    )
    outcome = execute_workflow(workflow)
    assert isinstance(outcome, Suspend)
    data = outcome.data
    assert isinstance(data, WebhookData)
    assert data.token is not None
    assert data.path == f"/hooks/{data.token}"
    parsed = parse_token(data.token)
    assert parsed is not None
    execution_id, secret = parsed
    assert execution_id == outcome.execution.id
    assert len(secret) * 6 >= 128
    assert len(secret) == -(-SECRET_BYTES * 8 // 6)
    assert set(data.token) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
    )
    assert data.token not in repr(data)
    stored = outcome.execution.suspension.data  # type: ignore[union-attr]
    assert isinstance(stored, WebhookData)
    assert stored.token is None
    assert stored.token_digest is not None
    text = dumps(outcome.execution)
    assert secret not in text
    assert stored.token_digest in text
    again = execute_workflow(workflow)
    assert isinstance(again, Suspend)
    assert isinstance(again.data, WebhookData)
    assert again.data.token != data.token


def test_old_webhook_records_still_load() -> None:
    """A stored webhook wait written before tokens (no digest) loads; it has no token."""
    from prana import loads

    workflow = Workflow(
        id="w",
        nodes=[
            Node(key="t", type="manual.trigger"),
            Node(key="w", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[Connection(from_node="t", to_node="w")],
    )
    outcome = execute_workflow(workflow)
    doc = json.loads(dumps(outcome.execution))
    doc["execution"]["suspension"]["data"] = {"expires_at": None}
    old = loads(json.dumps(doc))
    assert old.suspension is not None
    assert old.suspension.data == WebhookData(expires_at=None)


@pytest.mark.parametrize(
    "token", ["", "nodot", "!!!.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "YQ.short", "x" * 5000]
)
def test_malformed_tokens_parse_to_none(token: str) -> None:
    """Anything that is not a token is refused before the store is read."""
    assert parse_token(token) is None


def test_deliver_hook_resumes_once(runner: Runner) -> None:
    """The token resumes its wait once; the second use verifies against nothing (404)."""
    execution_id, path = waiting(runner)
    token = path.removeprefix("/hooks/")
    outcome = runner.deliver_hook(token, {"approved": True})
    assert outcome.execution is not None
    assert outcome.execution.status is ExecutionStatus.COMPLETED
    assert outcome.execution.output == {"approved": True}
    before = runner.store.load(execution_id)
    with pytest.raises(HookNotFound):
        runner.deliver_hook(token, {"approved": False})
    assert runner.store.load(execution_id) == before
    assert runner.hook_path(execution_id) is None


def test_a_repeated_delivery_answers_delivered_and_runs_nothing(runner: Runner) -> None:
    """A sender cut off mid-request retries: the same token with the same body, once it was
    applied, answers "already delivered" (``HookAlreadyDelivered``, 200) and changes nothing;
    another body, or the same body with another secret, is the 404 of an unknown token."""
    execution_id, path = waiting(runner)
    token = path.removeprefix("/hooks/")
    runner.deliver_hook(token, {"approved": True, "by": ["ann"]})
    before = runner.store.load(execution_id)
    with pytest.raises(HookAlreadyDelivered) as delivered:
        runner.deliver_hook(token, {"by": ["ann"], "approved": True})
    assert (delivered.value.status, delivered.value.execution_id) == (200, execution_id)
    assert delivered.value.execution_status is ExecutionStatus.COMPLETED
    head = token.rpartition(".")[0]
    for wrong_token, data in [
        (token, {"approved": False, "by": ["ann"]}),
        (token, None),
        (head + "." + "A" * 43, {"approved": True, "by": ["ann"]}),
    ]:
        with pytest.raises(HookNotFound, match="no webhook wait answers to this token"):
            runner.deliver_hook(wrong_token, data)
    assert runner.store.load(execution_id) == before


def test_a_repeated_delivery_over_http_on_sqlite_answers_delivered(tmp_path: Path) -> None:
    """Over HTTP on SQLite (the token is checked before the body is read, from the record's
    tail when it is large): the same body again answers "already delivered", another 404."""
    store = SQLiteStore(tmp_path / "hooks.sqlite3")
    with make_runner(store) as runner:
        execution_id, path = waiting(runner)
        app = create_app(runner, view=False)

        async def main() -> list[tuple[int, Any]]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                answers = []
                for body in ({"approved": True}, {"approved": True}, {"approved": False}):
                    answer = await client.post(path, json=body)
                    answers.append((answer.status_code, answer.json()))
                return answers

        first, again, other = asyncio.run(main())
        assert first == (200, {"ok": True, "execution_id": execution_id, "status": "completed"})
        assert again[0] == 200
        assert again[1]["already_delivered"] is True
        assert other == (404, {"error": "no webhook wait answers to this token"})
    store.close()


def test_wrong_secret_is_not_found_and_changes_nothing(runner: Runner) -> None:
    """A token with the right execution id but another secret is refused (404)."""
    execution_id, path = waiting(runner)
    token = path.removeprefix("/hooks/")
    head = token.rpartition(".")[0]
    before = runner.store.load(execution_id)
    with pytest.raises(HookNotFound):
        runner.deliver_hook(head + "." + "A" * 43, {"x": 1})
    with pytest.raises(HookNotFound):
        runner.deliver_hook("dW5rbm93bg." + "A" * 43, {"x": 1})  # no such execution
    assert runner.store.load(execution_id) == before


def test_digest_is_bound_to_the_node(runner: Runner) -> None:
    """A stored digest moved to another node's wait does not verify there."""
    from prana._hooks import token_digest, verify

    execution_id, path = waiting(runner)
    _, secret = parse_token(path.removeprefix("/hooks/"))  # type: ignore[misc]
    digest = token_digest(execution_id, "approve", secret)
    assert verify(digest, execution_id, "approve", secret)
    assert not verify(digest, execution_id, "other", secret)
    assert not verify(digest, "other-execution", "approve", secret)
    assert not verify(None, execution_id, "approve", secret)


def test_expired_wait_is_gone_and_fails_its_node(runner: Runner) -> None:
    """Past expires_at the token gets 410 and the wait fails with WebhookTimeout."""
    execution_id, path = waiting(runner)
    clock = runner.clock
    assert isinstance(clock, ManualClock)
    clock.advance(3601)  # past the hour, before any alarm fired
    with pytest.raises(HookGone, match="expired"):
        runner.deliver_hook(path.removeprefix("/hooks/"), {"late": True})
    execution = runner.get(execution_id)
    assert execution.status is ExecutionStatus.FAILED
    assert execution.error is not None
    assert execution.error.code == "webhook_timeout"


def test_cancelled_wait_is_gone(runner: Runner) -> None:
    """After a cancel the token gets 410."""
    execution_id, path = waiting(runner)
    runner.cancel(execution_id)
    with pytest.raises(HookGone):
        runner.deliver_hook(path.removeprefix("/hooks/"), None)


class RacingStore(MemoryStore):
    """A store where, just before the first delivery's save, another runner cancels."""

    def __init__(self) -> None:
        super().__init__(serialize=True)
        self.rival: Runner | None = None
        self.target: str | None = None

    def save(self, execution: Any, expected_version: int | None) -> int:
        rival, self.rival = self.rival, None
        if rival is not None and self.target is not None:
            rival.cancel(self.target, "the rival won")
        return super().save(execution, expected_version)


def test_delivery_racing_a_cancel_gets_conflict() -> None:
    """The cancel's compare-and-set wins; the delivery gets 409 and delivered nothing."""
    store = RacingStore()
    with make_runner(store) as first, make_runner(store) as second:
        execution_id, path = waiting(first)
        store.rival, store.target = second, execution_id
        with pytest.raises(HookConflict):
            first.deliver_hook(path.removeprefix("/hooks/"), {"approved": True})
        execution = first.get(execution_id)
        assert execution.status is ExecutionStatus.CANCELLED
        assert execution.node("approve").output is None  # type: ignore[union-attr]


class ExpiringStore(MemoryStore):
    """A store where, just before a delivery's save, the wait expires in another runner."""

    def __init__(self) -> None:
        super().__init__(serialize=True)
        self.rival: Runner | None = None
        self.target: str | None = None

    def save(self, execution: Any, expected_version: int | None) -> int:
        rival, self.rival = self.rival, None
        if rival is not None and self.target is not None:
            clock = rival.clock
            assert isinstance(clock, ManualClock)
            clock.advance(3601)  # past the wait's hour: the rival's alarm expires it
            rival.run_due()
        return super().save(execution, expected_version)


def test_delivery_racing_an_expiry_gets_conflict() -> None:
    """The expiry's compare-and-set wins; the delivery gets 409 and delivered nothing."""
    store = ExpiringStore()
    with make_runner(store) as first, make_runner(store) as second:
        execution_id, path = waiting(first)
        store.rival, store.target = second, execution_id
        with pytest.raises(HookConflict):
            first.deliver_hook(path.removeprefix("/hooks/"), {"approved": True})
        execution = first.get(execution_id)
        assert execution.status is ExecutionStatus.FAILED
        assert execution.error is not None
        assert execution.error.code == "webhook_timeout"


def test_path_known_after_retries_fired_by_the_scheduler() -> None:
    """A wait reached by a scheduler-fired retry still has its path in this runner."""
    with make_runner(fails=2) as runner:
        execution_id = runner.start(approval(), None)
        assert runner.hook_path(execution_id) is None
        scheduler = runner.scheduler
        assert isinstance(scheduler, ManualScheduler)
        scheduler.advance(5)
        scheduler.advance(5)
        path = runner.hook_path(execution_id)
        assert path is not None
        runner.deliver_hook(path.removeprefix("/hooks/"), {"ok": 1})
        assert runner.get(execution_id).status is ExecutionStatus.COMPLETED


def test_another_runner_over_the_same_store_accepts_the_token() -> None:
    """The token is checked against the stored digest: any runner over the store resumes."""
    store = MemoryStore(serialize=True)
    with make_runner(store) as first, make_runner(store) as second:
        execution_id, path = waiting(first)
        assert second.hook_path(execution_id) is None  # plaintext never left the first
        second.deliver_hook(path.removeprefix("/hooks/"), {"approved": True})
        assert first.get(execution_id).status is ExecutionStatus.COMPLETED


# --- POST /hooks/{token} over HTTP ------------------------------------------------------------


@pytest.fixture
def server(runner: Runner) -> Iterator[str]:
    with serve(create_app(runner, token=OPERATOR, max_body_bytes=1000)) as url:
        yield url


def test_http_hook_status_codes(runner: Runner, server: str) -> None:
    """200 once, then 404 (used); 404 unknown; 413 big; 415 not JSON; 422 bad JSON; one line."""
    execution_id, path = waiting(runner)
    with httpx.Client(base_url=server) as client:
        big = client.post(path, content=b"[" + b"1," * 600 + b"1]", headers=_json_type())
        assert big.status_code == 413
        form = client.post(path, content=b"a=1", headers={"content-type": "text/plain"})
        assert form.status_code == 415
        broken = client.post(path, content=b"{nope", headers=_json_type())
        assert broken.status_code == 422
        unknown = client.post("/hooks/" + "A" * 30 + "." + "B" * 43, json={})
        assert unknown.status_code == 404
        for response in (big, form, broken, unknown):
            error = response.json()["error"]
            assert isinstance(error, str)
            assert "\n" not in error
        assert runner.get(execution_id).status is ExecutionStatus.SUSPENDED
        ok = client.post(path, json={"approved": True})
        assert ok.status_code == 200
        assert ok.json() == {"ok": True, "execution_id": execution_id, "status": "completed"}
        again = client.post(path, content=b'{ "approved":true }', headers=_json_type())
        assert again.status_code == 200  # the same delivery (same JSON), cut off and retried
        assert again.json() == {
            "ok": True,
            "already_delivered": True,
            "execution_id": execution_id,
            "status": "completed",
        }
        other = client.post(path, json={"approved": False})
        assert other.status_code == 404
        assert other.json() == unknown.json()
    assert runner.get(execution_id).output == {"approved": True}


def test_http_hook_empty_body_resumes_with_null(runner: Runner, server: str) -> None:
    """A bare POST (no body) resumes with null, as ``curl -X POST URL`` sends it."""
    execution_id, path = waiting(runner)
    response = httpx.post(server + path)
    assert response.status_code == 200
    assert runner.get(execution_id).status is ExecutionStatus.COMPLETED


def test_http_hook_chunked_body_over_limit(runner: Runner, server: str) -> None:
    """A body without Content-Length is counted as it streams: over the limit is 413."""
    execution_id, path = waiting(runner)

    def chunks() -> Iterator[bytes]:
        for _ in range(20):
            yield b" " * 100

    response = httpx.post(server + path, content=chunks(), headers=_json_type())
    assert response.status_code == 413
    assert runner.get(execution_id).status is ExecutionStatus.SUSPENDED


def test_hook_needs_no_operator_token(runner: Runner, server: str) -> None:
    """The hook route answers without the operator token; the API does not."""
    _, path = waiting(runner)
    assert httpx.get(server + "/api/executions").status_code == 401
    assert httpx.post(server + path, json=1).status_code == 200


def _json_type() -> dict[str, str]:
    return {"content-type": "application/json"}


# --- the operator API -------------------------------------------------------------------------


def _auth() -> dict[str, str]:
    return {"authorization": f"Bearer {OPERATOR}"}


def test_api_list_filters_and_pages(runner: Runner, server: str) -> None:
    """Newest first, filtered by status and workflow, in keyset pages (``after``/``next_after``)."""
    ids = [runner.start(approval(), {"n": n}) for n in range(5)]
    other = Workflow(
        id="other",
        nodes=[Node(key="t", type="manual.trigger")],
        connections=[],
    )
    done = runner.start(other, None)
    newest_first = list(reversed(ids))
    with httpx.Client(base_url=server, headers=_auth()) as client:
        everything = client.get("/api/executions").json()
        assert [row["id"] for row in everything["items"]] == [done, *newest_first]
        assert everything["next_after"] is None
        page = client.get("/api/executions", params={"limit": 2, "after": done}).json()
        assert [row["id"] for row in page["items"]] == newest_first[:2]
        assert page["next_after"] == newest_first[1]
        runner.start(other, None)  # newer work does not shift the next page
        rest = client.get("/api/executions", params={"after": page["next_after"]}).json()
        assert [row["id"] for row in rest["items"]] == newest_first[2:]
        completed = client.get("/api/executions", params={"status": "completed"}).json()
        assert len(completed["items"]) == 2
        assert completed["items"][1]["id"] == done
        mine = client.get("/api/executions", params={"workflow": "approval", "limit": 3}).json()
        assert [row["id"] for row in mine["items"]] == newest_first[:3]
        assert mine["next_after"] == newest_first[2]
        assert client.get("/api/executions", params={"status": "nope"}).status_code == 400
        assert client.get("/api/executions", params={"limit": 0}).status_code == 400
        assert client.get("/api/executions", params={"limit": "x"}).status_code == 400
        gone = client.get("/api/executions", params={"after": "nope"})
        assert gone.status_code == 400
        assert "first page" in gone.json()["error"]
        html = client.get("/executions", params={"workflow": "approval", "limit": 3}).text
        assert f"after={newest_first[2]}" in html


def test_api_list_finds_a_workflow_however_far_back_it_is() -> None:
    """The workflow filter runs in the store: an execution behind 10,000 newer ones of
    another workflow is still found, and the page is read without scanning them here."""
    store = MemoryStore()
    registry = Registry()
    registry.register("test.flaky", Flaky(0))
    rare = execute_workflow(approval(), None, registry=registry).execution
    assert rare is not None
    store.save(attrs.evolve(rare, id="rare"), None)
    busy = attrs.evolve(rare, workflow_id="busy")
    for n in range(10_001):
        store.save(attrs.evolve(busy, id=f"busy-{n}"), None)
    with make_runner(store) as runner, serve(create_app(runner, token=OPERATOR)) as url:
        found = httpx.get(
            f"{url}/api/executions", params={"workflow": "approval"}, headers=_auth()
        ).json()
    assert [row["id"] for row in found["items"]] == ["rare"]


def test_api_one_execution_with_attempts_and_schedule() -> None:
    """The view lists every attempt with delay, due time, lateness and the policy preview."""
    with make_runner(fails=1) as runner:
        execution_id = runner.start(approval(), None)
        scheduler = runner.scheduler
        assert isinstance(scheduler, ManualScheduler)
        scheduler.advance(7)  # the retry was due at +5 s; it fires at its due time
        with serve(create_app(runner, token=OPERATOR)) as url:
            view = httpx.get(f"{url}/api/executions/{execution_id}", headers=_auth()).json()
            missing = httpx.get(f"{url}/api/executions/nope", headers=_auth())
    assert missing.status_code == 404
    assert view["status"] == "suspended"
    assert view["waiting"] == {
        "kind": "webhook",
        "node_key": "approve",
        "due_at": view["waiting"]["due_at"],
    }
    call = next(n for n in view["nodes"] if n["node_key"] == "call")
    first, second = call["attempts"]
    assert first["outcome"] == "failed"
    assert first["error"]["type"] == "ConnectionError"
    assert first["error"]["traceback"].startswith("Traceback (most recent call last):\n")
    assert first["error"]["traceback"].endswith(", in __call__\nConnectionError: down")
    assert second["outcome"] == "completed"
    assert second["retry"] is True
    assert second["retry_delay_ms"] == 5000 or first["retry_delay_ms"] == 5000
    assert second["lateness_ms"] == 0
    assert second["due_at"] is not None
    preview = call["retry_policies"][0]
    assert [row["typical_delay_s"] for row in preview["rows"]] == [5.0, 5.0]
    assert "token" not in json.dumps(view)


def test_api_one_gives_a_claimed_executions_lease_as_its_due_time_as_the_list_does(
    tmp_path: Path,
) -> None:
    """A light claim (running, its suspended record kept): the detail's ``due_at`` is its
    lease end, as the list's row and ``lease_expires_at`` say (it had no ``due_at``)."""
    store = SQLiteStore(tmp_path / "claimed.db")
    with make_runner(store, fails=1) as runner:
        execution_id = runner.start(approval(), None)  # suspended on the call's retry
        loaded, version = store.load(execution_id)
        assert loaded.status is ExecutionStatus.SUSPENDED
        assert loaded.started_at is not None
        lease = loaded.started_at + timedelta(seconds=35)
        store.claim(execution_id, version, lease, loaded.started_at + timedelta(seconds=5))

        async def both() -> tuple[Any, Any]:
            async with _asgi(create_app(runner, token=OPERATOR)) as client:
                listed = await client.get("/api/executions", headers=_auth())
                one = await client.get(f"/api/executions/{execution_id}", headers=_auth())
                return listed.json(), one.json()

        listed, view = asyncio.run(both())
    [row] = listed["items"]
    assert (row["status"], view["status"]) == ("running", "running")
    assert view["resuming"] is not None
    assert row["due_at"] == view["due_at"] == view["lease_expires_at"] == lease.isoformat()


def test_operator_auth(runner: Runner, server: str) -> None:
    """Bearer token or the login cookie; a wrong token is refused; HTML redirects to login."""
    execution_id, _ = waiting(runner)
    with httpx.Client(base_url=server, follow_redirects=False) as client:
        assert client.get("/api/executions").status_code == 401
        wrong = client.get("/api/executions", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        page = client.get("/executions")
        assert page.status_code == 303
        assert page.headers["location"].startswith("/login")
        refused = client.post("/login", data={"token": "nope", "next": "/executions"})
        assert refused.status_code == 401
        login = client.post("/login", data={"token": OPERATOR, "next": "/executions"})
        assert login.status_code == 303
        assert login.headers["location"] == "/executions"
        cookie = login.cookies.get("prana_operator")
        assert cookie is not None
        assert OPERATOR not in cookie
        assert "httponly" in login.headers["set-cookie"].lower()
        listed = client.get("/executions")
        assert listed.status_code == 200
        assert execution_id in listed.text
        outside = client.post("/login", data={"token": OPERATOR, "next": "//evil.test/"})
        assert outside.headers["location"] == "/executions"


def test_without_a_token_only_loopback_clients(caplog: pytest.LogCaptureFixture) -> None:
    """No operator token: loopback clients read, others get 403; the start says so."""
    with make_runner() as runner:
        app = create_app(runner)
        with caplog.at_level("WARNING", logger="scheduling.web"), serve(app) as url:
            assert httpx.get(url + "/api/executions").status_code == 200
        assert any("loopback" in r.getMessage() for r in caplog.records)

        async def from_outside() -> int:
            transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 4000))
            async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
                return (await client.get("/api/executions")).status_code

        assert asyncio.run(from_outside()) == 403


def test_create_app_checks_its_arguments(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short operator token or a bad limit is refused in one line, naming where the
    token came from (the argument or $PRANA_WEB_TOKEN)."""
    from prana import PranaError

    with pytest.raises(PranaError, match=r"^create_app\(token=\.\.\.\): .*at least 16"):
        create_app(runner, token="short")
    monkeypatch.setenv("PRANA_WEB_TOKEN", "short")
    with pytest.raises(PranaError, match=r"^\$PRANA_WEB_TOKEN: .*at least 16"):
        create_app(runner)
    monkeypatch.delenv("PRANA_WEB_TOKEN")
    with pytest.raises(PranaError, match="max_body_bytes"):
        create_app(runner, max_body_bytes=0)
    with pytest.raises(PranaError, match="poll_seconds"):
        create_app(runner, poll_seconds=0)


def test_token_from_the_environment(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """PRANA_WEB_TOKEN configures the operator token."""
    monkeypatch.setenv("PRANA_WEB_TOKEN", OPERATOR)
    with serve(create_app(runner)) as url:
        assert httpx.get(url + "/api/executions").status_code == 401
        assert httpx.get(url + "/api/executions", headers=_auth()).status_code == 200


def test_the_app_uses_only_the_runners_public_api() -> None:
    """``scheduling.web`` reads no private attribute of the runner (``runner._x``)."""
    import ast
    from pathlib import Path

    import scheduling.web

    private = [
        f"{path.name}:{node.lineno}: runner.{node.attr}"
        for path in sorted(Path(scheduling.web.__file__).parent.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "runner"
        and node.attr.startswith("_")
    ]
    assert private == []


def test_view_false_serves_only_hooks(runner: Runner) -> None:
    """view=False mounts only the hook route."""
    _, path = waiting(runner)
    with serve(create_app(runner, view=False)) as url:
        assert httpx.get(url + "/api/executions").status_code == 404
        assert httpx.post(url + path, json=True).status_code == 200


# --- pages and SSE ----------------------------------------------------------------------------


def test_pages_escape_and_show_the_timeline() -> None:
    """The execution page shows each attempt, ↻ for retries, and escapes record values."""
    with make_runner(fails=1) as runner:
        execution_id = runner.start(approval(), {"note": "<script>alert(1)</script>"})
        scheduler = runner.scheduler
        assert isinstance(scheduler, ManualScheduler)
        scheduler.advance(5)
        with serve(create_app(runner, token=OPERATOR)) as url:
            page = httpx.get(f"{url}/executions/{execution_id}", headers=_auth()).text
            fragment = httpx.get(
                f"{url}/executions/{execution_id}?fragment=1", headers=_auth()
            ).text
            listing = httpx.get(f"{url}/executions?status=suspended", headers=_auth()).text
            root = httpx.get(url + "/", headers=_auth(), follow_redirects=False)
    assert "<script>alert(1)</script>" not in page
    assert page.count('class="attempt"') == 4  # start, call x2, approve
    assert "↻" in page
    assert "<details class=traceback><summary>traceback of attempt 1</summary><pre>" in page
    assert "ConnectionError: down</pre></details>" in page
    assert "data-events=" in page
    assert fragment.startswith('<dl class="meta card" data-status="suspended"')
    assert execution_id in listing
    assert root.status_code == 303


def _events(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            assert name is not None
            yield name, json.loads(line.removeprefix("data: "))


def _next_execution(
    events: Iterator[tuple[str, Any]], wanted: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The next ``execution`` event whose view is ``wanted``; every event before it must be
    an ``execution`` too (an intermediate save), never ``end``."""
    for name, data in events:
        assert name == "execution", (name, data)
        if wanted(data):
            return data  # type: ignore[no-any-return]
    raise AssertionError("the stream ended first")


def test_sse_streams_each_change_then_ends() -> None:
    """The stream sends the execution now, again after a retry lands, then ``end``."""
    with make_runner(fails=1) as runner:
        execution_id = runner.start(approval(), None)
        scheduler = runner.scheduler
        assert isinstance(scheduler, ManualScheduler)
        app = create_app(runner, token=OPERATOR, poll_seconds=0.02)
        with (
            serve(app) as url,
            httpx.stream(
                "GET", f"{url}/executions/{execution_id}/events", headers=_auth(), timeout=10
            ) as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            events = _events(response)
            name, first = next(events)
            assert name == "execution"
            assert len(first["nodes"][1]["attempts"]) == 1
            scheduler.advance(5)  # the retry succeeds; the workflow waits on the webhook
            # The retry saves twice (its claim, then the wait); the stream may send both or
            # only the last, depending on when it reads: wait for the wait, in order.
            second = _next_execution(events, lambda view: view["waiting"] is not None
                                     and view["waiting"]["kind"] == "webhook")  # fmt: skip
            assert second["record_version"] > first["record_version"]
            assert len(second["nodes"][1]["attempts"]) == 2
            path = runner.hook_path(execution_id)
            assert path is not None
            httpx.post(url + path, json={"done": True})
            done = _next_execution(events, lambda view: view["status"] != "suspended")
            assert done["status"] == "completed"
            assert next(events) == ("end", {"status": "completed"})
        with serve(app) as url:
            missing = httpx.get(f"{url}/executions/nope/events", headers=_auth())
            assert missing.status_code == 404


def test_sse_wakes_on_the_runners_own_save_without_waiting_for_the_poll() -> None:
    """A save by the app's own runner reaches the stream at once: the poll (an hour here, for
    other processes' progress) is never waited out; the read timeout bounds the test."""
    with make_runner(fails=1) as runner:
        execution_id = runner.start(approval(), None)
        scheduler = runner.scheduler
        assert isinstance(scheduler, ManualScheduler)
        app = create_app(runner, token=OPERATOR, poll_seconds=3600)
        with (
            serve(app) as url,
            httpx.stream(
                "GET", f"{url}/executions/{execution_id}/events", headers=_auth(), timeout=5
            ) as response,
        ):
            events = _events(response)
            name, first = next(events)
            assert name == "execution"
            scheduler.advance(5)  # this runner resumes the retry and saves
            name, second = next(events)
            assert name == "execution"
            assert second["record_version"] > first["record_version"]
            runner.cancel(execution_id)
            assert [next(events)[0] for _ in range(2)] == ["execution", "end"]


def test_subscribe_calls_back_after_each_save_until_unsubscribed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``runner.subscribe`` hears every save of this runner; a listener that raises is logged."""
    with make_runner(fails=1) as runner, caplog.at_level("ERROR", logger="scheduling"):
        heard: list[str] = []
        unsubscribe = runner.subscribe(heard.append)

        def broken(execution_id: str) -> None:
            raise RuntimeError("listener bug")

        stop_broken = runner.subscribe(broken)
        execution_id = runner.start(approval(), None)
        scheduler = runner.scheduler
        assert isinstance(scheduler, ManualScheduler)
        scheduler.advance(5)
        assert heard == [execution_id, execution_id]
        assert [r.message.split(";")[0] for r in caplog.records] == [
            f"save listener {broken!r} raised on execution {execution_id!r}"
        ] * 2
        unsubscribe()
        stop_broken()
        unsubscribe()  # twice is harmless
        runner.cancel(execution_id)
        assert heard == [execution_id, execution_id]


# --- hostile callers ----------------------------------------------------------------------------


def _then_charge() -> tuple[Workflow, list[Any]]:
    """trigger -> webhook wait -> an action with a side effect (it counts its calls)."""
    calls: list[Any] = []
    workflow = Workflow(
        id="pay",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
            Node(key="charge", type="test.charge"),
        ],
        connections=[
            Connection(from_node="start", to_node="approve"),
            Connection(from_node="approve", to_node="charge"),
        ],
    )
    return workflow, calls


def _asgi(app: Any, client: tuple[str, int] = ("127.0.0.1", 4000)) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=client, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 300 + b"]" * 300,  # deeper than the record's serializer writes (orjson: 254)
        b'{"a":' * 201 + b"1" + b"}" * 201,
    ],
    ids=["deep list", "deep object"],
)
def test_a_body_the_record_cannot_hold_is_422_and_runs_nothing(body: bytes) -> None:
    """A body the store could not save is refused before the wait resumes: 422, the action
    after the wait never runs, the token still works. (It used to run the action, fail at
    the save with a 500 and leave the token valid: each repeat ran the action again.)"""
    workflow, calls = _then_charge()
    with make_runner() as runner:

        def charge(params: Any, ctx: Any) -> str:
            calls.append(1)
            return "ok"

        runner.registry.register("test.charge", charge)
        execution_id, path = waiting(runner, workflow)

        async def post_twice() -> list[httpx.Response]:
            async with _asgi(create_app(runner, token=OPERATOR)) as client:
                return [await client.post(path, content=body, headers=_json_type()) for _ in "ab"]

        for response in asyncio.run(post_twice()):
            assert response.status_code == 422
            error = response.json()["error"]
            assert "\n" not in error
            assert "resume data" in error
        assert calls == []
        assert runner.get(execution_id).status is ExecutionStatus.SUSPENDED
        runner.deliver_hook(path.removeprefix("/hooks/"), {"amount": 1})
        assert calls == [1]


@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:8000", "127.0.0.1.nip.io:8000", "[::2]:1"]
)
def test_without_a_token_a_foreign_host_name_is_refused(host: str) -> None:
    """DNS rebinding: a page on another site that points its name at 127.0.0.1 reaches a
    loopback-only app from the operator's own browser; its Host header gives it away."""
    with make_runner() as runner:
        app = create_app(runner)

        async def get() -> int:
            async with _asgi(app) as client:
                return (await client.get("/api/executions", headers={"host": host})).status_code

        assert asyncio.run(get()) == 403


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "app.localhost:80"]
)
def test_without_a_token_loopback_host_names_are_served(host: str) -> None:
    """The names a local operator types still work without a token."""
    with make_runner() as runner:
        app = create_app(runner)

        async def get() -> int:
            async with _asgi(app) as client:
                return (await client.get("/api/executions", headers={"host": host})).status_code

        assert asyncio.run(get()) == 200


def test_a_corrupt_record_is_a_one_line_error_not_a_crash(tmp_path: Path) -> None:
    """A record the store holds but prana cannot read: the API, pages, SSE and the hook
    answer a JSON error in one line (the store's writer is trusted; its mistakes are loud)."""
    db = tmp_path / "prana.db"
    with make_runner(SQLiteStore(db)) as runner:
        execution_id, path = waiting(runner)
        with contextlib.closing(sqlite3.connect(db)) as connection, connection:
            connection.execute(
                "UPDATE prana_executions SET data = ? WHERE id = ?",
                ('{"schema_version": 1, "execution": {"id": 1}}', execution_id),
            )
        app = create_app(runner, token=OPERATOR)

        async def calls() -> list[httpx.Response]:
            async with _asgi(app) as client:
                client.headers.update(_auth())
                return [
                    await client.get(f"/api/executions/{execution_id}"),
                    await client.get(f"/executions/{execution_id}"),
                    await client.get(f"/executions/{execution_id}/events"),
                    await client.post(path, json={}),
                ]

        for response in asyncio.run(calls()):
            assert response.status_code == 500
            error = response.json()["error"]
            assert "\n" not in error


def test_a_cookie_that_is_not_ascii_is_refused_not_a_crash(runner: Runner) -> None:
    """``hmac.compare_digest`` raises on non-ASCII text; the cookie is compared as bytes."""
    app = create_app(runner, token=OPERATOR)

    async def get() -> int:
        async with _asgi(app) as client:
            headers = {b"cookie": "prana_operator=\u00e9t\u00e9".encode()}
            return (await client.get("/api/executions", headers=headers)).status_code

    assert asyncio.run(get()) == 401


def test_control_characters_in_ids_name_nothing(store: ExecutionStore) -> None:
    """A NUL in a token's execution id, a path id or a list cursor: 404/400 from every store
    (PostgreSQL refuses NUL in text, which used to be a 500 and a traceback per request, for
    anyone: the hook route needs no credential)."""
    import base64

    with make_runner(store) as runner:
        app = create_app(runner, token=OPERATOR)
        head = base64.urlsafe_b64encode(b"\x00abc").rstrip(b"=").decode()

        async def calls() -> list[int]:
            async with _asgi(app) as client:
                hook = await client.post(f"/hooks/{head}.{'A' * 43}", json={})
                client.headers.update(_auth())
                return [
                    hook.status_code,
                    (await client.get("/api/executions/%00")).status_code,
                    (await client.get("/executions/%00")).status_code,
                    (await client.get("/executions/%00/events")).status_code,
                    (await client.get("/api/executions?after=%00")).status_code,
                    (await client.get("/api/executions?workflow=%00")).status_code,
                ]

        assert asyncio.run(calls()) == [404, 404, 404, 404, 400, 400]


@pytest.mark.parametrize(
    ("settings", "typical"),
    [
        ({"retry_on_failed": True, "max_retries": 2, "retry_delay_ms": 500}, [0.5, 0.5]),
        ({"retry": 3}, [1.0, 2.0]),  # NoETL's short form: 3 attempts
        ({"retry": "[retry: 2, backoff: 10s]"}, [10.0, 20.0]),  # Rappel's bracket
        ({"retry": {"max_attempts": 3, "backoff": "constant"}}, [1.0, 1.0]),  # the full form
    ],
)
def test_every_policy_form_gets_its_schedule_preview(
    settings: dict[str, Any], typical: list[float]
) -> None:
    """The simple and short forms show describe() and schedule() as the full form does."""
    from types import SimpleNamespace

    from prana import loads_workflow
    from scheduling.web._views import _schedule

    doc = {
        "id": "w",
        "nodes": [
            {"key": "t", "type": "manual.trigger"},
            {
                "key": "n",
                "type": "http.request",
                "params": {"url": "http://x"},
                "settings": settings,
            },
        ],
        "connections": [{"from_node": "t", "to_node": "n"}],
    }
    run = SimpleNamespace(node_key="n")
    (preview,) = _schedule(run, loads_workflow(json.dumps(doc)), Registry())  # type: ignore[arg-type]
    assert preview["policy"].endswith("attempts") or "attempts," in preview["policy"]
    assert [row["typical_delay_s"] for row in preview["rows"]] == typical


# --- the list: what failed, what waits ------------------------------------------------------


def _one_node(wid: str, action: str, retry: RetryPolicy | None = None) -> Workflow:
    return Workflow(
        id=wid,
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="work", type=action, settings=NodeSettings(retry=retry)),
        ],
        connections=[Connection(from_node="start", to_node="work")],
    )


def test_the_list_shows_what_failed_and_what_waits_and_filters_by_code() -> None:
    """A failed row says its node, error code and attempts; a suspended one what it waits on
    (a retry due at a time, a webhook with no due time); ``code`` keeps the failures with
    that error code. The same in the JSON API and the HTML page."""
    from doubles import raising

    registry = Registry()
    registry.register("test.flaky", Flaky(0))
    registry.register("test.boom", raising(KeyError("zip")))
    registry.register("test.refuse", raising(NonRetryable(ValueError("no"))))
    registry.register("test.down", raising(ConnectionError("down")))
    clock = ManualClock()
    retry = RetryPolicy(max_attempts=3, backoff="constant", initial_delay=5)
    with (
        Runner(
            registry=registry, store=MemoryStore(), scheduler=ManualScheduler(clock=clock)
        ) as runner,
        serve(create_app(runner, token=OPERATOR)) as url,
        httpx.Client(base_url=url, headers=_auth()) as client,
    ):
        webhook = runner.start(approval(), None)
        boom = runner.start(_one_node("boom", "test.boom"), None)
        refused = runner.start(_one_node("refuse", "test.refuse"), None)
        retrying = runner.start(_one_node("down", "test.down", retry), None)
        clock.advance(5)
        runner.run_due()  # down's second attempt fails: its third is due at +10 s
        items = {row["id"]: row for row in client.get("/api/executions").json()["items"]}
        by_code = client.get("/api/executions", params={"code": "non_retryable"}).json()
        html = client.get("/executions").text
        filtered_html = client.get("/executions", params={"code": "action_error"}).text
        wrong = client.get("/api/executions", params={"code": "x", "status": "completed"})
    assert items[webhook]["failure"] is None
    expires = items[webhook]["due_at"]  # the wait's timeout
    assert items[webhook]["waiting"] == {
        "kind": "webhook",
        "node_key": "approve",
        "due_at": expires,
    }
    assert items[retrying]["waiting"]["kind"] == "retry"
    assert items[retrying]["waiting"]["due_at"] == items[retrying]["due_at"] is not None
    assert items[boom]["failure"]["code"] == "action_error"
    assert items[refused]["waiting"] is None
    assert items[refused]["failure"] == {
        "node_key": "work",
        "code": "non_retryable",
        "type": "ValueError",
        "message": "no",
        "attempts": 1,
        "failed_at": items[refused]["failure"]["failed_at"],
    }
    assert [row["id"] for row in by_code["items"]] == [refused]
    assert wrong.status_code == 400
    assert "work · non_retryable · 1 attempt" in html
    assert (
        f'webhook at <code>approve</code>, until a delivery, expires <time datetime="{expires}"'
        in html
    )
    assert "retry at <code>work</code>, due <time" in html
    assert '<option value="non_retryable">' in html
    assert boom in filtered_html
    assert refused not in filtered_html
    assert '<option value="action_error" selected>' in filtered_html


# -- execution ids with URL syntax in them --------------------------------------------------------
# Execution ids with URL syntax in them (``?``, ``#``, ``%``) link to their own pages.


@pytest.mark.parametrize("suffix", ["#42", "?42", "%2342", " 42"])
def test_the_view_links_and_streams_an_id_with_url_syntax_to_its_own_page(suffix: str) -> None:
    """Was: the list linked ``order#42`` to ``/executions/order#42``, i.e. to execution
    ``order``, and its page fetched and streamed ``order``'s timeline in its place."""
    clock = ManualClock(T0)
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    wf = workflow(webhook_node())
    with runner, serve(create_app(runner, token=OPERATOR)) as url:
        other = runner.start(wf, execution_id="order")
        eid = runner.start(wf, execution_id=f"order{suffix}")
        runner.cancel(other)  # a page showing it in the other's place would say cancelled
        auth = {"authorization": f"Bearer {OPERATOR}"}
        listing = httpx.get(f"{url}/executions", headers=auth).text
        hrefs = re.findall(r'class="mono" href="([^"]*)"', listing)
        assert len(hrefs) == 2
        for href in hrefs:
            assert "#" not in href
            assert "?" not in href
        page_url = next(href for href in hrefs if href != "/executions/order")
        assert unquote(page_url.removeprefix("/executions/")) == eid
        page = httpx.get(f"{url}{page_url}", headers=auth)
        assert page.status_code == 200
        events = re.search(r'data-events="([^"]*)"', page.text)
        fragment = re.search(r'data-fragment="([^"]*)"', page.text)
        assert events is not None
        assert fragment is not None
        assert events.group(1) == f"{page_url}/events"
        assert fragment.group(1) == f"{page_url}?fragment=1"
        part = httpx.get(f"{url}{fragment.group(1)}", headers=auth).text
        assert 'data-status="suspended"' in part


@pytest.mark.parametrize("eid", ["a/b", "order/42/events", "/lead", "trail/", "x%2Fy/z"])
def test_an_id_with_a_slash_has_its_page_json_and_stream(eid: str) -> None:
    """Was: a ``/`` in an id (quoted ``%2F`` in every link) split the path, so the routes
    answered 404 (or, for an id ending in ``/events``, the stream of another id)."""
    from starlette.testclient import TestClient

    clock = ManualClock(T0)
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    wf = workflow(webhook_node())
    with runner, TestClient(create_app(runner, token=OPERATOR)) as client:
        runner.start(wf, execution_id=eid)
        decoy = eid.rsplit("/", 1)[0] or "decoy"
        if decoy != eid:
            runner.start(wf, execution_id=decoy)
            runner.cancel(decoy)  # shown in eid's place, a page would say cancelled
        client.headers["authorization"] = f"Bearer {OPERATOR}"
        listing = client.get("/executions").text
        hrefs = re.findall(r'class="mono" href="([^"]*)"', listing)
        page_url = next(h for h in hrefs if unquote(h.removeprefix("/executions/")) == eid)
        page = client.get(page_url)
        assert page.status_code == 200, page.text
        assert 'data-status="suspended"' in client.get(f"{page_url}?fragment=1").text
        api = client.get(f"/api/executions/{quote(eid, safe='')}")
        assert api.status_code == 200, api.text
        assert api.json()["id"] == eid
        assert api.json()["status"] == "suspended"
        runner.cancel(eid)  # the stream ends once the execution has
        with client.stream("GET", f"{page_url}/events") as stream:
            assert stream.status_code == 200
            body = "".join(stream.iter_text())
        assert '"cancelled"' in body
        assert eid in body


@pytest.mark.parametrize("eid", ["order/42/events", "x%2Fy"])
def test_signing_in_from_an_id_with_a_slash_returns_to_its_page(eid: str) -> None:
    """Was: the sign-in redirect kept the decoded path as ``next``, so after signing in the
    browser went to ``/executions/order/42/events``, the stream of ``order/42``, or to
    ``/executions/x%2Fy``, the page of ``x/y``: another execution's, not this one's."""
    from starlette.testclient import TestClient

    clock = ManualClock(T0)
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    wf = workflow(webhook_node())
    app = create_app(runner, token=OPERATOR)
    with runner, TestClient(app, follow_redirects=False) as client:
        runner.start(wf, execution_id=eid)
        for other in ("order/42", "x/y", "a"):
            runner.start(wf, execution_id=other)
            runner.cancel(other)  # shown in eid's place, a page would say cancelled
        page_url = f"/executions/{quote(eid, safe='')}"
        bounced = client.get(page_url)
        assert bounced.status_code == 303
        form = client.get(bounced.headers["location"]).text
        next_path = re.search(r'name="next" value="([^"]*)"', form)
        assert next_path is not None
        signed_in = client.post(
            "/login",
            content=f"token={OPERATOR}&next={quote(unescape(next_path.group(1)), safe='')}",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == page_url
        page = client.get(signed_in.headers["location"])
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert 'data-status="suspended"' in client.get(f"{page_url}?fragment=1").text


def test_the_execution_page_shows_values_collapsed_and_how_to_redrive() -> None:
    """The input, each run's params and output are collapsed with their size and shown
    pretty-printed, a large one cut with what is left; a failed execution says how to
    redrive it."""
    from doubles import raising

    registry = Registry()
    registry.register("test.big", lambda params, ctx: {"rows": ["x" * 100] * 500})
    registry.register("test.boom", raising(KeyError("zip")))
    wf = Workflow(
        id="values",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="big", type="test.big", params={"page": 1}),
            Node(key="boom", type="test.boom"),
        ],
        connections=[
            Connection(from_node="start", to_node="big"),
            Connection(from_node="big", to_node="boom"),
        ],
    )
    with (
        Runner(
            registry=registry, store=MemoryStore(), scheduler=ManualScheduler(clock=ManualClock())
        ) as runner,
        serve(create_app(runner, token=OPERATOR)) as url,
    ):
        execution_id = runner.start(wf, {"order": "<b>42</b>"})
        page = httpx.get(f"{url}/executions/{execution_id}", headers=_auth()).text
        view = httpx.get(f"{url}/api/executions/{execution_id}", headers=_auth()).json()
    assert view["input"] == {"order": "<b>42</b>"}
    assert "<summary>input <code>{&quot;order&quot;: &quot;&lt;b&gt;42&lt;/b&gt;&quot;}" in page
    assert "<pre>{\n  &quot;order&quot;: &quot;&lt;b&gt;42&lt;/b&gt;&quot;\n}</pre>" in page
    assert "<summary>params <code>{&quot;page&quot;: 1}</code>" in page
    big = page[page.index('data-node="big"') :]
    output = big[big.index("<summary>output") :]
    size = len(json.dumps({"rows": ["x" * 100] * 500}))
    assert f"({size:,} characters)</span></summary><pre>" in output
    assert "more characters not shown)</pre>" in output
    assert f"<code>prana redrive {execution_id}</code>" in page
