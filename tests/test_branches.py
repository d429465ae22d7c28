"""Branches side by side (DESIGN.md section 9): a pause holds only its own branch.

The tests marked ``xfail(strict=True)`` are the part of section 9 not built yet: async
branches overlapping under ``Workflow.max_concurrency`` (planned default 10: a fan-out of
a few calls overlaps fully, one of thousands does not open thousands of connections; 1
keeps today's order) and a stop cancelling the attempts in flight. ``strict`` makes the
first one that starts passing fail the suite, so whoever builds it removes its mark in
the same commit. docs/design/branches.md is the plan.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from doubles import T0, Flaky, webhook_node, workflow

from prana import (
    ActionContext,
    AttemptOutcome,
    Completed,
    ExecutionStatus,
    Failed,
    Node,
    NodeSettings,
    NonRetryable,
    Registry,
    ResumeError,
    RetryData,
    RetryPolicy,
    Suspend,
    Workflow,
    WorkflowExecution,
    aexecute_workflow,
    cancel_execution,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana._model import NodeStatus, OnError
from prana.testing import ManualClock

SECTION_9 = "issue 23: async branches do not overlap yet (DESIGN.md section 9)"
HOUR = timedelta(hours=1)

_resume: Any = resume_workflow
"""``resume_workflow``, called with section 9's ``node=`` keyword (typed once it exists)."""


def _ok(params: Any, ctx: ActionContext) -> Any:
    return ctx.node_key


def _fan_out(keys: list[str], failing: dict[str, float], **fields: Any) -> Workflow:
    """``start`` -> each of ``keys``; a key in ``failing`` retries once after that many s."""
    nodes = []
    for key in keys:
        if key in failing:
            delay = failing[key]
            policy = RetryPolicy(
                max_attempts=2, backoff="constant", initial_delay=delay, max_delay=delay
            )
            nodes.append(Node(key=key, type="test.flaky", settings=NodeSettings(retry=policy)))
        else:
            nodes.append(Node(key=key, type="test.ok"))
    return workflow(*nodes, edges=[("start", k) for k in keys], **fields)


def _registry(flaky: Flaky | None = None) -> Registry:
    registry = Registry()
    registry.register("test.ok", _ok)
    registry.register("test.flaky", flaky if flaky is not None else Flaky(fails=1))
    return registry


def _completed(execution: WorkflowExecution) -> set[str]:
    return {
        key
        for key, runs in execution.node_executions.items()
        if runs and runs[-1].status is NodeStatus.COMPLETED
    }


def _pauses(execution: WorkflowExecution) -> list[tuple[str, int, str, Any, datetime | None]]:
    """Every pending pause of ``execution`` as (node key, run index, kind, data, due time)."""
    pauses = getattr(execution, "pauses", None)
    assert pauses is not None, "the execution keeps no list of pauses"
    return [(p.node_key, p.run_index, p.kind, p.data, p.due_at) for p in pauses]


def _record(execution: WorkflowExecution) -> list[tuple[Any, ...]]:
    """The node runs in start order, times aside."""
    rows = [
        (r.execution_index, key, r.run_index, r.status, r.output, r.output_port)
        for key, runs in execution.node_executions.items()
        for r in runs
    ]
    return sorted(rows)


# -- (a) a retry parks only its own branch ----------------------------------------------------


def test_four_branches_run_before_the_fifth_s_retry_suspends() -> None:
    """Five independent branches, the first failing once under a 1-hour backoff: the other
    four complete before ``execute_workflow`` returns its ``Suspend(kind="retry")``."""
    keys = ["a", "b", "c", "d", "e"]
    clock = ManualClock(T0)
    outcome = execute_workflow(_fan_out(keys, {"a": 3600}), {}, registry=_registry(), clock=clock)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "retry"
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.resume_at == T0 + HOUR
    execution = outcome.execution
    assert _completed(execution) == {"start", "b", "c", "d", "e"}
    assert execution.due_at == T0 + HOUR
    assert _pauses(execution) == [("a", 0, "retry", outcome.data, T0 + HOUR)]


def test_pauses_are_ordered_by_due_time_then_node_key() -> None:
    """Three retries due at 1 h, 30 min, 30 min: the record lists them by due time, ties by
    key; the outcome describes the first; ``due_at`` is the earliest."""
    clock = ManualClock(T0)
    keys = ["a", "b", "c", "d"]
    failing = {"a": 3600.0, "c": 1800.0, "b": 1800.0}
    outcome = execute_workflow(
        _fan_out(keys, failing), {}, registry=_registry(Flaky(fails=3)), clock=clock
    )
    assert isinstance(outcome, Suspend)
    pauses = _pauses(outcome.execution)
    assert [(k, kind, due) for k, _, kind, _, due in pauses] == [
        ("b", "retry", T0 + HOUR / 2),
        ("c", "retry", T0 + HOUR / 2),
        ("a", "retry", T0 + HOUR),
    ]
    assert outcome.data == pauses[0][3]
    assert outcome.execution.due_at == T0 + HOUR / 2
    assert _completed(outcome.execution) == {"start", "d"}


def test_resume_resumes_every_pause_due_and_only_those() -> None:
    """Before anything is due a resume says when the first pause comes due; at 30 min the
    two retries due then run, the 1-hour one stays; at 1 h the execution completes."""
    clock = ManualClock(T0)
    wf = _fan_out(["a", "b", "c"], {"a": 3600.0, "b": 1800.0, "c": 1800.0})
    registry = _registry(Flaky(fails=3))
    first = execute_workflow(wf, {}, registry=registry, clock=clock)
    assert isinstance(first, Suspend)
    with pytest.raises(ResumeError, match=(T0 + HOUR / 2).isoformat()[:16]):
        resume_workflow(first.execution, None, workflow=wf, registry=registry, clock=clock)
    clock.set(T0 + HOUR / 2)
    second = resume_workflow(first.execution, None, workflow=wf, registry=registry, clock=clock)
    assert isinstance(second, Suspend)
    assert _completed(second.execution) == {"start", "b", "c"}
    assert [p[0] for p in _pauses(second.execution)] == ["a"]
    assert second.execution.due_at == T0 + HOUR
    clock.set(T0 + HOUR)
    third = resume_workflow(second.execution, None, workflow=wf, registry=registry, clock=clock)
    assert isinstance(third, Completed)
    assert _completed(third.execution) == {"start", "a", "b", "c"}
    assert _pauses(third.execution) == []


# -- (c) the sync driver never parks a ready branch behind a pause ----------------------------


def _wait_and_chain() -> Workflow:
    """``start`` -> ``w`` (a webhook wait) and ``start`` -> ``b`` -> ``c``."""
    return workflow(
        webhook_node(),
        Node(key="b", type="test.ok"),
        Node(key="c", type="test.ok"),
        edges=[("start", "w"), ("start", "b"), ("b", "c")],
    )


def test_a_webhook_wait_does_not_park_the_chain_beside_it() -> None:
    """The sync driver runs ``b`` and then ``c`` (made ready by ``b``) before it pauses."""
    outcome = execute_workflow(_wait_and_chain(), {}, registry=_registry(), clock=ManualClock(T0))
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "webhook"
    assert _completed(outcome.execution) == {"start", "b", "c"}
    assert [(k, kind) for k, _, kind, _, _ in _pauses(outcome.execution)] == [("w", "webhook")]


def test_several_webhook_waits_need_a_name_and_each_has_its_own_token() -> None:
    """Two waits: a resume naming none lists both; naming one resumes it alone."""
    wf = workflow(
        Node(key="w1", type="wait.wait", params={"mode": "webhook"}),
        Node(key="w2", type="wait.wait", params={"mode": "webhook"}),
        edges=[("start", "w1"), ("start", "w2")],
    )
    clock = ManualClock(T0)
    registry = _registry()
    outcome = execute_workflow(wf, {}, registry=registry, clock=clock)
    assert isinstance(outcome, Suspend)
    pauses = _pauses(outcome.execution)
    assert [p[0] for p in pauses] == ["w1", "w2"]
    digests = {p[3].token_digest for p in pauses}
    assert len(digests) == 2
    assert None not in digests
    with pytest.raises(ResumeError, match=r"w1.*w2"):
        resume_workflow(outcome.execution, {"x": 1}, workflow=wf, registry=registry, clock=clock)
    after = _resume(
        outcome.execution, {"x": 2}, node="w2", workflow=wf, registry=registry, clock=clock
    )
    assert isinstance(after, Suspend)
    assert after.execution.node("w2") is not None
    assert after.execution.node("w2").output == {"x": 2}
    assert [p[0] for p in _pauses(after.execution)] == ["w1"]


def test_a_node_after_the_paused_one_waits_for_it() -> None:
    """What depends on the paused node does not run: ``j`` after ``w`` stays unrun, today
    and under section 9."""
    wf = workflow(
        webhook_node(),
        Node(key="j", type="test.ok"),
        edges=[("start", "w"), ("w", "j")],
    )
    outcome = execute_workflow(wf, {}, registry=_registry(), clock=ManualClock(T0))
    assert isinstance(outcome, Suspend)
    assert "j" not in outcome.execution.node_executions


# -- failures, cancels and the stored record with several pauses ------------------------------


def _boom(params: Any, ctx: ActionContext) -> Any:
    raise NonRetryable("no")


def _wait_beside_failure(on_error: OnError) -> Workflow:
    """``start`` -> ``a`` (a webhook wait, first by key) and ``start`` -> ``b`` (fails) ->
    ``c``; ``b``'s ``on_error`` as given."""
    return workflow(
        Node(key="a", type="wait.wait", params={"mode": "webhook"}),
        Node(key="b", type="test.boom", settings=NodeSettings(on_error=on_error)),
        Node(key="c", type="test.ok"),
        edges=[("start", "a"), ("start", "b"), ("b", "c")],
    )


def _boom_registry() -> Registry:
    registry = _registry()
    registry.register("test.boom", _boom)
    return registry


def test_a_stop_closes_the_other_pauses() -> None:
    """``b`` fails under ``stop_workflow`` while ``a`` waits: the execution fails and
    ``a``'s wait is closed ``cancelled``, no pause left."""
    outcome = execute_workflow(
        _wait_beside_failure("stop_workflow"), {}, registry=_boom_registry(), clock=ManualClock(T0)
    )
    assert isinstance(outcome, Failed)
    assert outcome.error.node_key == "b"
    a = outcome.execution.node("a")
    assert a is not None
    assert a.status is NodeStatus.CANCELLED
    assert a.attempts[-1].outcome is AttemptOutcome.CANCELLED
    assert _pauses(outcome.execution) == []


def test_continue_leaves_the_sibling_pause_waiting() -> None:
    """``b`` fails under ``continue``: it completes with an error output, ``c`` runs, and
    the execution still waits on ``a``."""
    outcome = execute_workflow(
        _wait_beside_failure("continue"), {}, registry=_boom_registry(), clock=ManualClock(T0)
    )
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "webhook"
    assert _completed(outcome.execution) == {"start", "b", "c"}
    assert [p[0] for p in _pauses(outcome.execution)] == ["a"]


def _two_waits() -> Workflow:
    return workflow(
        Node(key="w1", type="wait.wait", params={"mode": "webhook"}),
        Node(
            key="w2",
            type="wait.wait",
            params={"mode": "interval", "duration": 5, "unit": "minutes"},
        ),
        edges=[("start", "w1"), ("start", "w2")],
    )


def test_cancel_closes_every_pause() -> None:
    """A webhook wait and a timer: ``cancel_execution`` closes both node runs."""
    outcome = execute_workflow(_two_waits(), {}, registry=_registry(), clock=ManualClock(T0))
    assert isinstance(outcome, Suspend)
    assert len(_pauses(outcome.execution)) == 2
    cancelled = cancel_execution(outcome.execution, clock=ManualClock(T0))
    assert cancelled.status is ExecutionStatus.CANCELLED
    for key in ("w1", "w2"):
        record = cancelled.node(key)
        assert record is not None
        assert record.status is NodeStatus.CANCELLED
    assert _pauses(cancelled) == []


def test_several_pauses_survive_dumps_and_loads() -> None:
    """The pauses (a timer due in 5 minutes first, then the webhook wait, due when it
    expires in 24 hours) come back from ``loads(dumps(...))`` equal, typed data and due
    times included."""
    outcome = execute_workflow(_two_waits(), {}, registry=_registry(), clock=ManualClock(T0))
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "timer"
    execution = outcome.execution
    pauses = _pauses(execution)
    assert [(k, kind, due) for k, _, kind, _, due in pauses] == [
        ("w2", "timer", T0 + timedelta(minutes=5)),
        ("w1", "webhook", T0 + timedelta(hours=24)),
    ]
    again = loads(dumps(execution))
    assert again == execution
    assert _pauses(again) == pauses


def test_ninety_nine_branches_complete_before_the_hundredth_s_retry_suspends() -> None:
    """The bench's fan-out with one branch failing once under a 1-hour backoff, async: the
    other 99 complete before ``aexecute_workflow`` returns the ``Suspend``."""
    keys = [f"b{i:03d}" for i in range(100)]
    wf = _fan_out(keys, {"b042": 3600.0})
    outcome = asyncio.run(aexecute_workflow(wf, {}, registry=_registry(), clock=ManualClock(T0)))
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "retry"
    assert _completed(outcome.execution) == {"start", *keys} - {"b042"}
    assert [p[0] for p in _pauses(outcome.execution)] == ["b042"]


# -- (b) async branches overlap, bounded ------------------------------------------------------


class Gates:
    """An async action whose every call waits for the test to open its node's gate."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.finished: list[str] = []
        self.running = 0
        self.peak = 0
        self.started_at_first_finish = -1

    def gate(self, key: str) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    async def __call__(self, params: Any, ctx: ActionContext) -> Any:
        self.started.append(ctx.node_key)
        self.running += 1
        self.peak = max(self.peak, self.running)
        await self.gate(ctx.node_key).wait()
        self.running -= 1
        if not self.finished:
            self.started_at_first_finish = len(self.started)
        self.finished.append(ctx.node_key)
        return ctx.node_key


async def _quiet(gates: Gates, task: asyncio.Task[Any]) -> None:
    """Yield to the loop until nothing new starts for 20 turns (no timed sleep)."""
    idle, seen = 0, -1
    while idle < 20 and not task.done():
        await asyncio.sleep(0)
        idle, seen = (idle + 1, seen) if len(gates.started) == seen else (0, len(gates.started))


async def _run_gated(wf: Workflow, order: list[str]) -> tuple[Gates, Any]:
    """Run ``wf`` async, opening the gates in ``order``, one at a time once all is quiet."""
    gates = Gates()
    registry = Registry()
    registry.register("test.gated", gates)
    task = asyncio.ensure_future(
        aexecute_workflow(wf, {}, registry=registry, clock=ManualClock(T0))
    )
    for key in order:
        await _quiet(gates, task)
        gates.gate(key).set()
    return gates, await task


def _gated_fan_out(n: int, **fields: Any) -> Workflow:
    keys = [f"n{i:02d}" for i in range(n)]
    nodes = [Node(key=k, type="test.gated") for k in keys]
    return workflow(*nodes, edges=[("start", k) for k in keys], **fields)


@pytest.mark.xfail(strict=True, reason=SECTION_9)
def test_ten_async_branches_all_start_before_any_finishes() -> None:
    """Under the default ``max_concurrency`` (10) ten branches overlap."""
    wf = _gated_fan_out(10)
    gates, outcome = asyncio.run(_run_gated(wf, sorted(n.key for n in wf.nodes[1:])))
    assert isinstance(outcome, Completed)
    assert gates.started_at_first_finish == 10
    assert gates.peak == 10


@pytest.mark.xfail(strict=True, reason=SECTION_9)
def test_max_concurrency_bounds_the_overlap() -> None:
    """``max_concurrency=3``: never more than three attempts run at once, and three do."""
    wf = _gated_fan_out(7, max_concurrency=3)
    keys = sorted(n.key for n in wf.nodes[1:])
    gates, outcome = asyncio.run(_run_gated(wf, keys))
    assert isinstance(outcome, Completed)
    assert gates.peak == 3
    assert gates.started_at_first_finish == 3


@pytest.mark.xfail(strict=True, reason=SECTION_9)
def test_max_concurrency_one_gives_the_sync_order() -> None:
    """``max_concurrency=1`` runs one node at a time, in the sync driver's order."""
    wf = _gated_fan_out(5, max_concurrency=1)
    keys = [n.key for n in wf.nodes[1:]]
    gates, outcome = asyncio.run(_run_gated(wf, keys[::-1] + keys))
    assert isinstance(outcome, Completed)
    assert gates.peak == 1
    sync = Registry()
    sync.register("test.gated", _ok)
    expected = execute_workflow(wf, {}, registry=sync, clock=ManualClock(T0))
    assert gates.started == [k for _, k, *_ in _record(expected.execution) if k != "start"]


def test_finishing_order_never_changes_the_record() -> None:
    """Branches finishing last-started-first give the sync driver's record, times aside:
    runs numbered in start order (today trivially, as nothing overlaps; under section 9
    because start order depends only on the graph and outcomes)."""
    wf = _gated_fan_out(6)
    keys = sorted(n.key for n in wf.nodes[1:])
    _, outcome = asyncio.run(_run_gated(wf, keys[::-1] + keys))
    sync = Registry()
    sync.register("test.gated", _ok)
    expected = execute_workflow(wf, {}, registry=sync, clock=ManualClock(T0))
    assert isinstance(outcome, Completed)
    assert _record(outcome.execution) == _record(expected.execution)


@pytest.mark.xfail(strict=True, reason=SECTION_9)
def test_a_stop_cancels_the_attempts_in_flight_and_awaits_them() -> None:
    """``n0`` fails under ``stop_workflow`` while ``n1``..``n3`` await their gates: each is
    cancelled (it sees ``CancelledError``) and recorded ``cancelled``."""
    nodes = [Node(key="n0", type="test.boom")] + [
        Node(key=f"n{i}", type="test.gated") for i in range(1, 4)
    ]
    wf = workflow(*nodes, edges=[("start", n.key) for n in nodes])
    seen: list[str] = []

    async def gated(params: Any, ctx: ActionContext) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append(ctx.node_key)
            raise
        return None

    registry = _boom_registry()
    registry.register("test.gated", gated)
    outcome = asyncio.run(aexecute_workflow(wf, {}, registry=registry, clock=ManualClock(T0)))
    assert isinstance(outcome, Failed)
    assert outcome.error.node_key == "n0"
    assert seen == ["n1", "n2", "n3"]
    for key in ("n1", "n2", "n3"):
        record = outcome.execution.node(key)
        assert record is not None
        assert record.status is NodeStatus.CANCELLED
        assert record.attempts[-1].outcome is AttemptOutcome.CANCELLED
