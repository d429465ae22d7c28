"""Branches side by side (DESIGN.md section 9): a pause holds only its own branch.

The tests marked ``xfail(strict=True)`` are the contract of section 9 that main does not
meet yet (issue 23): each passes once the engine runs ready work before it pauses, keeps
every pending pause in the record and runs async branches side by side. ``strict`` makes
the first one that starts passing fail the suite, so whoever lands the engine removes its
mark in the same commit. The others hold today and must keep holding.

The record shape these tests name (``execution.pauses``, each pause ``node_key``,
``run_index``, ``kind``, ``data``, ``due_at``; ``resume_workflow(node=...)``;
``Workflow.max_concurrency``, default 10) is docs/concepts/branches.md's plan.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from doubles import T0, Flaky, webhook_node, workflow

from prana import (
    ActionContext,
    Completed,
    Node,
    NodeSettings,
    Registry,
    ResumeError,
    RetryData,
    RetryPolicy,
    Suspend,
    Workflow,
    WorkflowExecution,
    aexecute_workflow,
    execute_workflow,
    resume_workflow,
)
from prana._model import NodeStatus
from prana.testing import ManualClock

SECTION_9 = "issue 23: DESIGN.md section 9 (branches side by side) is not built yet"
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


@pytest.mark.xfail(strict=True, reason=SECTION_9)
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


@pytest.mark.xfail(strict=True, reason=SECTION_9)
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


@pytest.mark.xfail(strict=True, reason=SECTION_9)
def test_resume_resumes_every_pause_due_and_only_those() -> None:
    """At 30 min the two retries due then run; the 1-hour one stays; before its time a
    resume names it; at 1 h the execution completes."""
    clock = ManualClock(T0)
    wf = _fan_out(["a", "b", "c"], {"a": 3600.0, "b": 1800.0, "c": 1800.0})
    registry = _registry(Flaky(fails=3))
    first = execute_workflow(wf, {}, registry=registry, clock=clock)
    assert isinstance(first, Suspend)
    clock.set(T0 + HOUR / 2)
    second = resume_workflow(first.execution, None, workflow=wf, registry=registry, clock=clock)
    assert isinstance(second, Suspend)
    assert _completed(second.execution) == {"start", "b", "c"}
    assert [p[0] for p in _pauses(second.execution)] == ["a"]
    with pytest.raises(ResumeError, match=(T0 + HOUR).isoformat()[:16]):
        resume_workflow(second.execution, None, workflow=wf, registry=registry, clock=clock)
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


@pytest.mark.xfail(strict=True, reason=SECTION_9)
def test_a_webhook_wait_does_not_park_the_chain_beside_it() -> None:
    """The sync driver runs ``b`` and then ``c`` (made ready by ``b``) before it pauses."""
    outcome = execute_workflow(_wait_and_chain(), {}, registry=_registry(), clock=ManualClock(T0))
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "webhook"
    assert _completed(outcome.execution) == {"start", "b", "c"}
    assert [(k, kind) for k, _, kind, _, _ in _pauses(outcome.execution)] == [("w", "webhook")]


@pytest.mark.xfail(strict=True, reason=SECTION_9)
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
