"""The Runner end to end: executor + store + ManualScheduler, driven by a ManualClock.

The main flows run against every store (``store`` fixture in ``conftest.py``: memory,
memory with JSON, SQLite, PostgreSQL); restarts use a SQLite file shared by two runners.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from prana import (
    ActionContext,
    AttemptOutcome,
    Connection,
    Event,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    NodeSettings,
    Registry,
    ResumeError,
    RetryPolicy,
    Suspend,
    Workflow,
    WorkflowExecution,
    resume_workflow,
)
from prana.testing import ManualClock
from scheduling import (
    ConsoleView,
    ExecutionNotFound,
    ExecutionStore,
    Runner,
    StaleVersionError,
    WorkflowConflictError,
)
from scheduling._console import node_lateness
from scheduling._runner import child_execution_id, is_settled
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


# -- workflows and actions ------------------------------------------------------------------


class Flaky:
    """An action that fails its first ``fails`` calls with ConnectionError, counting calls."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls: list[int] = []

    def __call__(self, params: Any, ctx: ActionContext) -> Any:
        self.calls.append(ctx.attempt)
        if len(self.calls) <= self.fails:
            raise ConnectionError(f"down (call {len(self.calls)})")
        return {"ok": True, "attempt": ctx.attempt}


def retry_policy(attempts: int = 4, delay: float = 1) -> RetryPolicy:
    return RetryPolicy(max_attempts=attempts, backoff="constant", initial_delay=delay)


def workflow(
    *nodes: Node, wid: str = "wf", version: int = 1, edges: list[tuple[str, str]] | None = None
) -> Workflow:
    keys = ["start", *(n.key for n in nodes)]
    pairs = edges if edges is not None else list(itertools.pairwise(keys))
    return Workflow(
        id=wid,
        version=version,
        nodes=(Node(key="start", type="manual.trigger"), *nodes),
        connections=tuple(Connection(from_node=a, to_node=b) for a, b in pairs),
    )


def flaky_workflow(attempts: int = 4, delay: float = 1, wid: str = "wf") -> Workflow:
    node = Node(
        key="r", type="test.flaky", settings=NodeSettings(retry=retry_policy(attempts, delay))
    )
    return workflow(node, wid=wid)


def wait_node(**params: Any) -> Node:
    return Node(key="w", type="wait.wait", params=params)


def sub_node(child: str, mode: str) -> Node:
    return Node(
        key="sub", type="workflow.execute_workflow", params={"workflow_id": child, "mode": mode}
    )


class Harness:
    """A runner over ``store`` with a ManualScheduler, and the flaky action registered."""

    def __init__(self, store: ExecutionStore, fails: int = 0, clock: ManualClock | None = None):
        self.clock = clock if clock is not None else ManualClock(T0)
        self.flaky = Flaky(fails)
        self.registry = Registry()
        self.registry.register("test.flaky", self.flaky)
        self.store = store
        self.scheduler = ManualScheduler(self.clock)
        self.events: list[Event] = []
        self.runner = Runner(
            self.registry, store, self.scheduler, self.clock, observers=[self.events.append]
        )


# -- retries, timers, webhooks, cancel: every store -----------------------------------------


def test_retry_after_failures_completes(store: ExecutionStore) -> None:
    """A node failing twice is resumed by its alarms and completes on the third attempt."""
    h = Harness(store, fails=2)
    with h.runner as runner:
        eid = runner.start(flaky_workflow(), {"x": 1})
        first = runner.get(eid)
        assert first.status is ExecutionStatus.SUSPENDED
        assert h.scheduler.pending() == [(eid, T0 + timedelta(seconds=1))]
        h.scheduler.advance(1)
        assert runner.get(eid).status is ExecutionStatus.SUSPENDED
        assert h.flaky.calls == [1, 2]
        h.scheduler.advance(1)
        done = runner.get(eid)
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 3}
    run = done.node("r")
    assert run is not None
    assert [a.outcome for a in run.attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.FAILED,
        AttemptOutcome.COMPLETED,
    ]
    assert [lateness for _, lateness in node_lateness(run)] == [timedelta(0), timedelta(0)]
    assert h.scheduler.pending() == []


def test_timer_wait_resumes_when_due(store: ExecutionStore) -> None:
    """A 5 s interval wait resumes at exactly 5 s, not before, and records no lateness."""
    h = Harness(store)
    wf = workflow(wait_node(mode="interval", duration=5, unit="seconds"))
    with h.runner as runner:
        eid = runner.start(wf, {"v": 1})
        h.scheduler.advance(4.9)
        assert runner.get(eid).status is ExecutionStatus.SUSPENDED
        h.scheduler.advance(0.1)
        done = runner.get(eid)
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"v": 1}
    run = done.node("w")
    assert run is not None
    assert node_lateness(run) == [(1, timedelta(0))]


def test_webhook_deliver_completes(store: ExecutionStore) -> None:
    """A webhook wait is settled for ``wait``, and ``deliver`` resumes it with the data."""
    h = Harness(store)
    wf = workflow(wait_node(mode="webhook", timeout_hours=None))
    with h.runner as runner:
        eid = runner.start(wf)
        waiting = runner.wait(eid, timeout=0)
        assert waiting.status is ExecutionStatus.SUSPENDED
        assert is_settled(waiting)
        outcome = runner.deliver(eid, {"approved": True})
        done = runner.wait(eid, timeout=0)
    assert outcome.execution is not None
    assert outcome.execution.status is ExecutionStatus.COMPLETED
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"approved": True}


def test_cancel_during_backoff_never_runs_again(store: ExecutionStore) -> None:
    """Cancelling while a retry waits disarms it: the action never runs again."""
    h = Harness(store, fails=100)
    with h.runner as runner:
        eid = runner.start(flaky_workflow())
        cancelled = runner.cancel(eid, "operator")
        h.scheduler.advance(100)
        stored = runner.get(eid)
        assert runner.cancel(eid) == stored
    assert cancelled.status is ExecutionStatus.CANCELLED
    assert stored.status is ExecutionStatus.CANCELLED
    assert stored.error is not None
    assert stored.error.message == "operator"
    assert h.flaky.calls == [1]
    assert h.scheduler.pending() == []


def test_stale_resume_on_fire_is_dropped(store: ExecutionStore) -> None:
    """A fired resume that loses the compare-and-set is dropped, not raised."""
    h = Harness(store)

    def racing(params: Any, ctx: ActionContext) -> Any:
        if ctx.attempt == 1:
            raise ConnectionError("first try fails")
        execution, version = store.load(ctx.execution_id)
        store.save(execution, version)  # another worker saves meanwhile
        return "done"

    h.registry.register("test.racing", racing)
    wf = workflow(Node(key="r", type="test.racing", settings=NodeSettings(retry=retry_policy())))
    with h.runner as runner:
        eid = runner.start(wf)
        _, version = store.load(eid)
        assert h.scheduler.advance(1) == [eid]
        stored, new_version = store.load(eid)
    assert stored.status is ExecutionStatus.SUSPENDED
    assert new_version == version + 1


def test_stale_deliver_raises(store: ExecutionStore) -> None:
    """A ``deliver`` that loses the compare-and-set raises ``StaleVersionError``."""
    h = Harness(store)

    def pause(params: Any, ctx: ActionContext) -> Any:
        return Suspend("approval", {"who": "ops"})

    def on_resume(params: Any, ctx: ActionContext, data: Any) -> Any:
        execution, version = store.load(ctx.execution_id)
        store.save(execution, version)
        return data

    h.registry.register("test.approval", pause, on_resume)
    wf = workflow(Node(key="a", type="test.approval"))
    with h.runner as runner:
        eid = runner.start(wf)
        with pytest.raises(StaleVersionError):
            runner.deliver(eid, {"ok": True})
        assert runner.get(eid).status is ExecutionStatus.SUSPENDED


# -- deliver, cancel and definition rules ---------------------------------------------------


def test_deliver_to_retry_timer_or_ended_execution_raises() -> None:
    """``deliver`` refuses retry and timer suspensions, ended executions and unknown ids."""
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        retrying = runner.start(flaky_workflow())
        timer = runner.start(
            workflow(wait_node(mode="interval", duration=1, unit="seconds"), wid="timer")
        )
        with pytest.raises(ResumeError, match="retry"):
            runner.deliver(retrying, {})
        with pytest.raises(ResumeError, match="timer"):
            runner.deliver(timer, {})
        h.scheduler.advance(1)
        with pytest.raises(ResumeError, match="completed"):
            runner.deliver(retrying, {})
        with pytest.raises(ExecutionNotFound):
            runner.deliver("nope", {})


def test_cancel_of_completed_execution_raises() -> None:
    """A completed execution cannot be cancelled."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        eid = runner.start(flaky_workflow())
        with pytest.raises(ResumeError):
            runner.cancel(eid)
        assert runner.get(eid).status is ExecutionStatus.COMPLETED


def test_different_definition_same_version_refused_before_running() -> None:
    """A different definition under a stored id and version is refused before anything runs."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        runner.start(flaky_workflow())
        changed = workflow(Node(key="r", type="test.flaky", params={"changed": True}))
        with pytest.raises(WorkflowConflictError):
            runner.start(changed)
        other = Harness(h.store).runner  # a runner without the cached definition
        with pytest.raises(WorkflowConflictError):
            other.start(changed)
    assert h.flaky.calls == [1]
    assert len(h.store.list()) == 1


def test_start_with_an_existing_execution_id_is_refused_before_running() -> None:
    """Starting under an id already stored raises before the workflow runs."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        eid = runner.start(flaky_workflow(), execution_id="fixed")
        with pytest.raises(StaleVersionError, match="already exists"):
            runner.start(flaky_workflow(), execution_id=eid)
    assert h.flaky.calls == [1]


def test_early_alarm_rearms_itself() -> None:
    """An alarm firing before the due time re-arms for the due time and resumes nothing."""
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        eid = runner.start(flaky_workflow(delay=10))
        h.scheduler.schedule(eid, T0 + timedelta(seconds=2))
        assert h.scheduler.advance(2) == [eid]
        assert h.flaky.calls == [1]
        assert h.scheduler.pending() == [(eid, T0 + timedelta(seconds=10))]
        h.scheduler.advance(8)
        assert runner.get(eid).status is ExecutionStatus.COMPLETED


def test_alarm_for_finished_or_unknown_execution_does_nothing() -> None:
    """A duplicate alarm (at-least-once) for an ended or unknown execution changes nothing."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        eid = runner.start(flaky_workflow())
        _, version = h.store.load(eid)
        h.scheduler.schedule(eid, T0)
        h.scheduler.schedule("ghost", T0)
        assert sorted(h.scheduler.advance(0)) == sorted([eid, "ghost"])
        assert h.store.load(eid)[1] == version


def test_runner_refuses_a_clock_other_than_the_schedulers() -> None:
    """The runner, core and scheduler share one clock; a second one is refused."""
    clock = ManualClock(T0)
    with pytest.raises(InvalidSettingsError, match="same clock"):
        Runner(Registry(), MemoryStore(), ManualScheduler(clock), ManualClock(T0))
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock))
    assert runner.clock is clock


def test_wait_times_out_while_a_retry_is_pending() -> None:
    """``wait`` raises ``TimeoutError`` when the execution is still waiting on its own alarm."""
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        eid = runner.start(flaky_workflow())
        with pytest.raises(TimeoutError, match="suspended"):
            runner.wait(eid, timeout=0)


def test_run_due_and_rearm_due_pick_up_work_from_the_store() -> None:
    """``rearm_due`` arms what the store says is due; ``run_due`` resumes it in the caller."""
    h = Harness(MemoryStore(), fails=1)
    eid = h.runner.start(flaky_workflow())  # never opened: nothing armed in a live scheduler
    h.scheduler.shutdown()
    h.clock.advance(1)
    assert h.runner.rearm_due() == 1
    assert h.scheduler.pending() == [(eid, T0 + timedelta(seconds=1))]
    assert h.runner.run_due() == [eid]
    assert h.runner.get(eid).status is ExecutionStatus.COMPLETED
    assert h.runner.run_due() == []


def test_observers_and_console_view_see_every_retry() -> None:
    """The runner hands its observers to the core: the console view counts the retries."""
    view = ConsoleView(write=lambda _text: None)
    clock = ManualClock(T0)
    registry = Registry()
    flaky = Flaky(2)
    registry.register("test.flaky", flaky)
    scheduler = ManualScheduler(clock)
    with Runner(registry, MemoryStore(), scheduler, observers=[view]) as runner:
        runner.start(flaky_workflow())
        scheduler.advance(5)
    stats = view.stats()
    assert (stats.executions, stats.retry_attempts, stats.succeeded_after_retry) == (1, 2, 1)
    assert any(line.startswith("↻ r (attempt 2/4)") for line in view.lines)


def test_async_facade_runs_in_a_worker_thread() -> None:
    """``astart`` and ``await_execution`` work from async code."""
    h = Harness(MemoryStore())

    async def main() -> WorkflowExecution:
        eid = await h.runner.astart(flaky_workflow(), {"a": 1})
        return await h.runner.await_execution(eid, timeout=5)

    done = asyncio.run(main())
    assert done.status is ExecutionStatus.COMPLETED


def test_async_fire_hands_the_step_to_a_thread() -> None:
    """Fired inside a running loop, the runner returns an awaitable that resumes in a thread."""
    h = Harness(MemoryStore(), fails=1)
    eid = h.runner.start(flaky_workflow())
    h.clock.advance(1)

    async def fire() -> None:
        result = h.runner._fire(eid)
        assert asyncio.iscoroutine(result)
        await result

    asyncio.run(fire())
    assert h.runner.get(eid).status is ExecutionStatus.COMPLETED


# -- sub-workflows ----------------------------------------------------------------------------


def child_workflow(fails_node: bool = False) -> Workflow:
    if fails_node:
        node = Node(
            key="r", type="test.flaky", settings=NodeSettings(retry=retry_policy(attempts=2))
        )
    else:
        node = Node(key="r", type="test.flaky", settings=NodeSettings(retry=retry_policy()))
    return workflow(node, wid="child")


def parent_workflow(mode: str) -> Workflow:
    after = Node(key="after", type="data.set_data", params={"fields": {"after": True}})
    return workflow(sub_node("child", mode), after, wid="parent")


def test_sync_sub_workflow_resumes_parent_when_child_completes(store: ExecutionStore) -> None:
    """A sync child runs inline; once it completes after a retry the parent gets its output."""
    h = Harness(store, fails=1)
    with h.runner as runner:
        runner.register_workflow(child_workflow())
        pid = runner.start(parent_workflow("sync"), {"p": 1})
        parent = runner.get(pid)
        assert parent.status is ExecutionStatus.SUSPENDED
        cid = child_execution_id(parent)
        assert cid is not None
        child = runner.get(cid)
        assert child.parent is not None
        assert child.parent.execution_id == pid
        assert child.status is ExecutionStatus.SUSPENDED
        h.scheduler.advance(1)
        done = runner.wait(pid, timeout=0)
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 2, "after": True}


def test_async_sub_workflow_starts_child_from_the_scheduler() -> None:
    """An async child is started by an alarm armed at now, not in the caller of ``start``."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        runner.register_workflow(child_workflow())
        pid = runner.start(parent_workflow("async"))
        parent = runner.get(pid)
        cid = child_execution_id(parent)
        assert cid is not None
        with pytest.raises(ExecutionNotFound):
            runner.get(cid)
        assert h.flaky.calls == []
        assert h.scheduler.advance(0) == [pid]
        assert runner.get(cid).status is ExecutionStatus.COMPLETED
        done = runner.get(pid)
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 1, "after": True}


def test_fire_and_forget_resumes_parent_at_once() -> None:
    """A fire-and-forget parent goes on at once with the child's id; the child runs on its own."""
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        runner.register_workflow(child_workflow())
        pid = runner.start(parent_workflow("fire_and_forget"))
        parent = runner.get(pid)
        assert parent.status is ExecutionStatus.COMPLETED
        cid = parent.output["execution_id"]
        assert runner.get(cid).status is ExecutionStatus.SUSPENDED
        h.scheduler.advance(1)
        assert runner.get(cid).status is ExecutionStatus.COMPLETED
        assert runner.get(pid) == parent


def test_failed_child_fails_the_parent_node() -> None:
    """A child that fails after its retries resumes the parent with its error; the parent fails."""
    h = Harness(MemoryStore(), fails=10)
    with h.runner as runner:
        runner.register_workflow(child_workflow(fails_node=True))
        pid = runner.start(parent_workflow("sync"))
        h.scheduler.advance(5)
        done = runner.get(pid)
    assert done.status is ExecutionStatus.FAILED
    assert done.error is not None
    assert done.error.node_key == "sub"
    assert "down" in done.error.message


def test_missing_child_definition_fails_the_parent() -> None:
    """A sub-workflow whose definition is not stored fails the parent's node, naming it."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        pid = runner.start(parent_workflow("sync"))
        done = runner.get(pid)
    assert done.status is ExecutionStatus.FAILED
    assert done.error is not None
    assert "child" in done.error.message


def test_child_version_none_uses_the_highest_stored_version() -> None:
    """With no version given, the child runs the highest version stored."""
    h = Harness(MemoryStore())
    v2 = workflow(
        Node(key="r", type="data.set_data", params={"value": "v2"}), wid="child", version=2
    )
    h.store.save_workflow(child_workflow())
    h.store.save_workflow(v2)
    with h.runner as runner:
        pid = runner.start(parent_workflow("sync"))
        sub = runner.get(pid).node("sub")
    assert sub is not None
    assert sub.output == "v2"


def test_cancelling_a_parent_cancels_its_child() -> None:
    """Cancelling a parent waiting on a sync child cancels the child too."""
    h = Harness(MemoryStore(), fails=5)
    with h.runner as runner:
        runner.register_workflow(child_workflow())
        pid = runner.start(parent_workflow("sync"))
        cid = child_execution_id(runner.get(pid))
        assert cid is not None
        runner.cancel(pid)
        h.scheduler.advance(60)
        assert runner.get(cid).status is ExecutionStatus.CANCELLED
        assert runner.get(pid).status is ExecutionStatus.CANCELLED
    assert h.flaky.calls == [1]


# -- restarts ---------------------------------------------------------------------------------


def test_new_runner_rebuilds_alarms_and_completes(tmp_path: Path) -> None:
    """A new runner over the same SQLite file re-arms the alarms and finishes the work."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), fails=1, clock=clock)
    with first.runner as runner:
        eid = runner.start(flaky_workflow())
    first.store.close()
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        assert second.scheduler.pending() == [(eid, T0 + timedelta(seconds=1))]
        second.scheduler.advance(1)
        done = runner.get(eid)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert first.flaky.calls == [1]
    assert second.flaky.calls == [2]


def test_resume_due_while_runner_was_down_fires_late_and_records_lateness(tmp_path: Path) -> None:
    """A retry that fell due while no runner was up fires on restart, late, and is not dropped."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), fails=1, clock=clock)
    with first.runner as runner:
        eid = runner.start(flaky_workflow())
    first.store.close()
    clock.advance(30)
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        assert second.scheduler.advance(0) == [eid]
        done = runner.get(eid)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED
    run = done.node("r")
    assert run is not None
    assert node_lateness(run) == [(2, timedelta(seconds=29))]


def test_restart_reports_a_child_that_ended_while_no_runner_was_up(tmp_path: Path) -> None:
    """On open, a parent whose child ended without reporting back is resumed."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), fails=1, clock=clock)
    with first.runner as runner:
        runner.register_workflow(child_workflow())
        pid = runner.start(parent_workflow("sync"))
        cid = child_execution_id(runner.get(pid))
    assert cid is not None
    # The child is finished by hand, as if a process crashed before reporting to the parent.
    child, version = first.store.load(cid)
    clock.advance(1)
    finished = resume_workflow(
        child, workflow=child_workflow(), registry=first.registry, clock=clock
    )
    assert finished.execution is not None
    first.store.save(finished.execution, version)
    first.store.close()
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        done = runner.get(pid)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 2, "after": True}


def test_restart_starts_an_async_child_never_started(tmp_path: Path) -> None:
    """On open, an async parent whose child was never started gets it started."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), clock=clock)
    with first.runner as runner:
        runner.register_workflow(child_workflow())
        pid = runner.start(parent_workflow("async"))
    first.store.close()
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        done = runner.get(pid)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED


# -- webhook timeouts -------------------------------------------------------------------------


def test_webhook_expiry_fails_the_wait_node(store: ExecutionStore) -> None:
    """A webhook wait whose ``timeout_hours`` passes fails with a non-retryable WebhookTimeout."""
    h = Harness(store)
    wf = workflow(wait_node(mode="webhook", timeout_hours=1))
    with h.runner as runner:
        eid = runner.start(wf)
        assert h.scheduler.pending() == [(eid, T0 + timedelta(hours=1))]
        h.scheduler.advance(3600)
        done = runner.get(eid)
        with pytest.raises(ResumeError):
            runner.deliver(eid, {"late": True})
    assert done.status is ExecutionStatus.FAILED
    assert done.error is not None
    assert done.error.code == "webhook_timeout"


def test_webhook_expiry_applies_on_error() -> None:
    """An expired webhook wait with ``continue_error_output`` goes on along its error port."""
    h = Harness(MemoryStore())
    wait = Node(
        key="w",
        type="wait.wait",
        params={"mode": "webhook", "timeout_hours": 1},
        settings=NodeSettings(on_error="continue_error_output"),
    )
    handler = Node(key="h", type="data.set_data", params={"fields": {"handled": True}})
    wf = Workflow(
        id="expiring",
        nodes=(Node(key="start", type="manual.trigger"), wait, handler),
        connections=(
            Connection(from_node="start", to_node="w"),
            Connection(from_node="w", to_node="h", from_port="error"),
        ),
    )
    with h.runner as runner:
        eid = runner.start(wf)
        h.scheduler.advance(3600)
        done = runner.get(eid)
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output["code"] == "webhook_timeout"
    assert done.output["handled"] is True


def test_delivered_webhook_disarms_its_expiry() -> None:
    """Delivering before the expiry removes the expiry alarm."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        eid = runner.start(workflow(wait_node(mode="webhook", timeout_hours=1)))
        assert len(h.scheduler.pending()) == 1
        runner.deliver(eid, "hi")
        assert h.scheduler.pending() == []


# -- the real scheduler -----------------------------------------------------------------------


def test_real_apscheduler_completes_retries_and_wait_returns() -> None:
    """With APScheduler and real time, short retries complete and ``wait`` sees the end."""
    from scheduling.adapters.apscheduler import APSchedulerAdapter

    registry = Registry()
    flaky = Flaky(2)
    registry.register("test.flaky", flaky)
    with Runner(registry, MemoryStore(), APSchedulerAdapter()) as runner:
        eid = runner.start(flaky_workflow(delay=0.05))
        done = runner.wait(eid, timeout=30)
    assert done.status is ExecutionStatus.COMPLETED
    assert flaky.calls == [1, 2, 3]


# -- sub-workflow timeouts --------------------------------------------------------------------


def timed_parent(timeout_ms: int, on_error: str = "stop_workflow") -> Workflow:
    sub = Node(
        key="sub",
        type="workflow.execute_workflow",
        params={"workflow_id": "slow", "timeout_ms": timeout_ms},
        settings=NodeSettings(on_error=on_error),  # type: ignore[arg-type]
    )
    return workflow(sub, wid="parent")


def slow_child() -> Workflow:
    return workflow(
        Node(key="w", type="wait.wait", params={"mode": "webhook", "timeout_hours": None}),
        wid="slow",
    )


def test_sub_workflow_timeout_resumes_parent_and_cancels_child() -> None:
    """A child still running at the parent's timeout_ms is cancelled; the parent's node fails."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        runner.register_workflow(slow_child())
        pid = runner.start(timed_parent(2000))
        cid = child_execution_id(runner.get(pid))
        assert cid is not None
        assert runner.get(cid).status is ExecutionStatus.SUSPENDED
        assert h.scheduler.advance(1.9) == []
        assert h.scheduler.advance(0.1) == [pid]
        parent = runner.get(pid)
        child = runner.get(cid)
    assert parent.status is ExecutionStatus.FAILED
    assert parent.error is not None
    assert parent.error.code == "sub_workflow_failed"
    assert "did not end within 2000 ms" in parent.error.message
    assert child.status is ExecutionStatus.CANCELLED


def test_sub_workflow_timeout_can_route_to_the_error_port() -> None:
    """With continue_error_output the timed-out node completes on its error port."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        runner.register_workflow(slow_child())
        pid = runner.start(timed_parent(500, on_error="continue_error_output"))
        h.scheduler.advance(0.5)
        parent = runner.get(pid)
    assert parent.status is ExecutionStatus.COMPLETED
    record = parent.node_executions["sub"][0]
    assert record.output_port == "error"
    assert record.output["code"] == "sub_workflow_failed"


def test_child_that_ends_in_time_is_not_timed_out() -> None:
    """A child that completes before the deadline resumes the parent; the deadline is a no-op."""
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        runner.register_workflow(child_workflow())
        sub = Node(
            key="sub",
            type="workflow.execute_workflow",
            params={"workflow_id": "child", "timeout_ms": 5000},
        )
        pid = runner.start(workflow(sub, wid="parent"))
        h.scheduler.advance(1)  # the child's retry: it completes, the parent with it
        done = runner.get(pid)
        assert done.status is ExecutionStatus.COMPLETED
        h.scheduler.advance(10)  # the deadline fires on an ended parent and changes nothing
        assert runner.get(pid) == done


def test_sub_workflow_deadline_survives_a_restart(tmp_path: Path) -> None:
    """A new runner over the same store re-arms the parent's deadline and enforces it."""
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(tmp_path / "p.db"), clock=clock)
    with first.runner as runner:
        runner.register_workflow(slow_child())
        pid = runner.start(timed_parent(3000))
    first.store.close()
    second = Harness(SQLiteStore(tmp_path / "p.db"), clock=clock)
    with second.runner as runner:
        assert second.scheduler.advance(3) == [pid]
        assert runner.get(pid).status is ExecutionStatus.FAILED
    second.store.close()
