"""The HTTP face tried as an attacker: status oracles, login, headers, stream caps."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest
from servers import serve
from test_web import OPERATOR, make_runner, waiting

from prana import ExecutionStatus
from scheduling import HookGone, HookNotFound
from scheduling.web import create_app

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
        assert client.post(done_path, json={"approved": True}).status_code == 404
    assert runner.get(done_id).status is ExecutionStatus.COMPLETED
