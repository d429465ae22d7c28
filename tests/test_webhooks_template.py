"""``$webhooks.<node>``: hand a wait's resume path out before the wait, never recording it."""

from __future__ import annotations

from typing import Any

import pytest

from prana import (
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    WebhookData,
    Workflow,
    dumps,
    execute_workflow,
)
from prana._hooks import REDACTED, parse_token
from prana.testing import ManualClock
from scheduling import HookNotFound, Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore


def _notify_then_wait(fails: int = 0) -> tuple[Workflow, Registry, list[str]]:
    sent: list[str] = []
    calls = {"n": 0}
    registry = Registry()

    def send(params: Any, ctx: Any) -> Any:
        calls["n"] += 1
        sent.append(params["link"])
        if calls["n"] <= fails:
            raise ConnectionError("mail server down")
        return {"sent": params["link"]}

    registry.register("mail.send", send)
    workflow = Workflow(
        id="notify-then-wait",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="notify",
                type="mail.send",
                params={"link": "https://example.test/prana{{ $webhooks.approve }}"},
                settings=NodeSettings(retry=RetryPolicy(max_attempts=3, initial_delay=1)),
            ),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="notify"),
            Connection(from_node="notify", to_node="approve"),
        ],
    )
    return workflow, registry, sent


def test_the_path_reaches_the_action_and_the_wait_uses_its_token() -> None:
    """The action gets the real path; the later wait is resumed by that very token."""
    workflow, registry, sent = _notify_then_wait()
    outcome = execute_workflow(workflow, registry=registry)
    assert isinstance(outcome, Suspend)
    data = outcome.data
    assert isinstance(data, WebhookData)
    assert sent == [f"https://example.test/prana{data.path}"]
    assert outcome.execution is not None
    notify = outcome.execution.node("notify")
    assert notify is not None
    assert notify.params == {"link": f"https://example.test/prana/hooks/{REDACTED}"}
    assert notify.output == {"sent": f"https://example.test/prana/hooks/{REDACTED}"}
    assert data.token is not None
    _, secret = parse_token(data.token)  # type: ignore[misc]
    text = dumps(outcome.execution)
    assert secret not in text
    assert outcome.execution.state == {}  # the pending digest moved into the wait


def test_a_handed_out_token_resumes_after_a_reload_elsewhere() -> None:
    """Issued before a retry, the token still names the wait another runner reaches later."""
    workflow, registry, sent = _notify_then_wait(fails=1)
    store = MemoryStore(serialize=True)
    clock = ManualClock()
    with Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=clock)) as first:
        execution_id = first.start(workflow, None)
    assert len(sent) == 1
    assert first.get(execution_id).state  # the digest waits in the shared state
    clock.advance(1)
    with Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=clock)) as second:
        second.run_due()
        assert second.get(execution_id).status is ExecutionStatus.SUSPENDED
        # The retry rendered the params again: a fresh link, the first one is dead.
        assert len(sent) == 2
        assert sent[0] != sent[1]
        with pytest.raises(HookNotFound):
            second.deliver_hook(sent[0].rsplit("/hooks/", 1)[1], {"late": True})
        second.deliver_hook(sent[1].rsplit("/hooks/", 1)[1], {"approved": True})
        assert second.get(execution_id).status is ExecutionStatus.COMPLETED


def test_an_unknown_node_mints_nothing() -> None:
    """``$webhooks.nope`` names no node: no token is minted, nothing waits in the state."""
    workflow, registry, sent = _notify_then_wait()
    nodes = list(workflow.nodes)
    nodes[1] = Node(key="notify", type="mail.send", params={"link": "{{ $webhooks.nope }}"})
    broken = Workflow(id=workflow.id, nodes=nodes, connections=workflow.connections)
    outcome = execute_workflow(broken, registry=registry)
    assert outcome.execution is not None
    assert not any(key.startswith("__webhook__:") for key in outcome.execution.state)
    assert all(link is None for link in sent)
