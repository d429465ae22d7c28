"""The engine/driver protocol: what the generator yields, and what it is sent back."""

from __future__ import annotations

import typing
from typing import Any

from doubles import T0, workflow

from prana import ActionContext, Completed, Failed, Node, Registry, Suspend
from prana._engine import Run, Step
from prana._entry import new_run
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
    # the built-in trigger is settled inline (Run.quick_trigger): no call for it
    assert nodes == [("a", "a", "a", False), ("b", "b", "b", False)]


def test_a_failed_call_is_settled_by_its_continuation() -> None:
    """Sending (False, exception) fails the node the call's continuation names."""
    engine = _engine()
    call = next(engine)  # the trigger was settled inline
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
