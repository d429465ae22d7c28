"""The engine/driver protocol: what the generator yields, and what it is sent back."""

from __future__ import annotations

import math
import typing
from typing import Any

import pytest
from doubles import T0, workflow
from hypothesis import given, settings
from strategies import retry_policies

from prana import (
    ActionContext,
    Completed,
    Failed,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    execute_workflow,
)
from prana._decision import explain_retry, new_attempt_view
from prana._engine import Run, Step
from prana._entry import new_run
from prana._graph import compile_workflow
from prana.testing import ManualClock


def _double(params: Any, ctx: ActionContext) -> Any:
    return ctx.input["main"] * 2


def _engine() -> Any:
    registry = Registry()
    registry.register("test.double", _double)
    wf = workflow(Node(key="a", type="test.double"), Node(key="b", type="test.double"))
    return new_run(wf, 3, registry, ManualClock(T0), None, None, None, None).start()


def test_each_call_carries_its_own_continuation() -> None:
    """A yielded call is (fn, args, timeout, continuation), the continuation naming its node."""
    engine = _engine()
    calls = []
    call = next(engine)
    try:
        while True:
            calls.append(call)
            fn, args, timeout, _ = call
            assert timeout is None
            call = engine.send((True, fn(*args)))
    except StopIteration as stop:
        outcome = stop.value
    assert isinstance(outcome, Completed)
    assert outcome.output == 12
    nodes = [(c[3][0].key, c[3][1].key, c[3][2].node_key, c[3][3]) for c in calls]
    assert nodes == [
        ("start", "start", "start", False),
        ("a", "a", "a", False),
        ("b", "b", "b", False),
    ]


def test_a_failed_call_is_settled_by_its_continuation() -> None:
    """Sending (False, exception) fails the node the call's continuation names."""
    engine = _engine()
    fn, args, _, continuation = next(engine)
    assert continuation[0].key == "start"
    call = engine.send((True, fn(*args)))
    assert call[3][0].key == "a"
    try:
        engine.send((False, ConnectionError("down")))
    except StopIteration as stop:
        outcome = stop.value
    assert isinstance(outcome, Failed)
    assert (outcome.error.node_key, outcome.error.type) == ("a", "ConnectionError")


def test_the_engine_keeps_no_call_on_the_side() -> None:
    """The working copy has no slot for "the current call": the continuation is the call's."""
    assert "current" not in Run.__slots__


def test_step_is_a_real_union() -> None:
    """``Step`` names what a move can produce: a call, an outcome, or nothing."""
    members = set(typing.get_args(Step))
    assert {Completed, Suspend, Failed, type(None)} <= members
    assert any(typing.get_origin(m) is tuple for m in members)


# -- one retry decision ------------------------------------------------------------------


def _retry_run(policy: RetryPolicy) -> tuple[Suspend[Any, Any], Any]:
    """Run ``start -> n`` where ``n`` raises ``ConnectionError``; the outcome and the policies."""
    registry = Registry()
    registry.register("test.down", lambda params, ctx: (_ for _ in ()).throw(ConnectionError("x")))
    wf = workflow(Node(key="n", type="test.down", settings=NodeSettings(retry=policy)))
    outcome = execute_workflow(wf, 0, registry=registry, clock=ManualClock(T0))
    policies = compile_workflow(wf, registry).nodes["n"].policies
    return outcome, policies  # type: ignore[return-value]


@settings(max_examples=60, deadline=None)
@given(retry_policies(budget=False).filter(lambda p: (p.max_attempts or 2) > 1))
def test_the_engine_retries_as_the_one_decision_decides(policy: RetryPolicy) -> None:
    """The delay and attempts the engine puts in ``RetryData`` are ``explain_retry``'s, with
    and without jitter: no second decider answers for some policies."""
    outcome, policies = _retry_run(policy)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "retry"
    data = outcome.data
    view = new_attempt_view(
        1, data.original_error, ConnectionError("x"), None, 0.0, None, "-", "n", None, T0, 0
    )
    assert outcome.execution is not None
    seed = f"{outcome.execution.id}:n:0"
    decision = explain_retry(policies, view, seed=seed).decision
    assert decision is not None
    assert data.retry_delay_ms == math.floor(decision.delay_seconds * 1000)
    assert (data.attempt_number, data.max_attempts) == (2, decision.max_attempts)


@pytest.mark.parametrize("jitter", ["none", "full"])
def test_a_change_to_the_policys_delay_reaches_every_retry(
    monkeypatch: pytest.MonkeyPatch, jitter: str
) -> None:
    """A floor put on ``RetryPolicy._delay`` (a ``min_delay``, say) shows in every retry the
    engine schedules, jittered or not: the delay is computed in one place."""
    real = RetryPolicy._delay
    monkeypatch.setattr(RetryPolicy, "_delay", lambda self, n, seed: max(real(self, n, seed), 5.0))
    outcome, _ = _retry_run(RetryPolicy(initial_delay=1.0, jitter=jitter))
    assert isinstance(outcome, Suspend)
    assert outcome.data.retry_delay_ms == 5000
