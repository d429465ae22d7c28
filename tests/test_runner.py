"""The Runner end to end: executor + store + ManualScheduler, driven by a ManualClock.

The main flows run against every store (``store`` fixture in ``conftest.py``: memory,
memory with JSON, SQLite, PostgreSQL); restarts use a SQLite file shared by two runners.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import pytest
from doubles import T0, Flaky, Harness, flaky_node, sub_node, wait_node, webhook_node, workflow

from prana import (
    ActionContext,
    AttemptOutcome,
    Connection,
    EventType,
    ExecutionStatus,
    InvalidSettingsError,
    InvalidWorkflowError,
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
    StoreError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling._cli import main
from scheduling._console import node_lateness
from scheduling._runner import child_execution_id, is_settled
from scheduling.abc import ClockedScheduler, OnSave, TransactionalScheduler, TransactionalStore
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


# -- workflows ------------------------------------------------------------------------------


def retry_policy(attempts: int = 4, delay: float = 1) -> RetryPolicy:
    return RetryPolicy(max_attempts=attempts, backoff="constant", initial_delay=delay)


def flaky_workflow(attempts: int = 4, delay: float = 1, wid: str = "wf") -> Workflow:
    return workflow(flaky_node(attempts, delay=delay), wid=wid)


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
        assert h.flaky.attempts == [1, 2]
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
    assert h.flaky.attempts == [1]
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
    # What the other worker saved stays: the step's claim (the checkpoint, version + 1),
    # saved again by the racer (+ 2); the step's own outcome was dropped.
    assert stored.status is ExecutionStatus.RUNNING
    assert new_version == version + 2


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


class ArmSpy(ManualScheduler):
    """A ManualScheduler that records what the store held for each id when it was armed."""

    def __init__(self, clock: ManualClock, store: ExecutionStore) -> None:
        super().__init__(clock)
        self.store = store
        self.seen: list[tuple[str, datetime, datetime | None]] = []

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        stored, _ = self.store.load(execution_id)
        self.seen.append((execution_id, due_at, stored.due_at))
        super().schedule(execution_id, due_at)


def test_every_alarm_is_armed_after_its_outcome_is_saved(store: ExecutionStore) -> None:
    """Each alarm the runner arms is for a due time the store already holds (persist, then arm)."""
    clock = ManualClock(T0)
    flaky = Flaky(fails=2)
    registry = Registry()
    registry.register("test.flaky", flaky)
    spy = ArmSpy(clock, store)
    wf = workflow(
        flaky_node(), Node(key="t", type="wait.wait", params={"mode": "interval", "duration": 5})
    )
    with Runner(registry, store, spy, clock) as runner:
        eid = runner.start(wf)
        spy.advance(10)
        assert runner.get(eid).status is ExecutionStatus.COMPLETED
    assert len(spy.seen) == 3
    for execution_id, armed_for, stored_due in spy.seen:
        assert execution_id == eid
        assert stored_due == armed_for


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
    assert h.flaky.attempts == [1]
    assert len(h.store.list()) == 1


def test_start_with_an_existing_execution_id_is_refused_before_running() -> None:
    """Starting under an id already stored raises before the workflow runs."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        eid = runner.start(flaky_workflow(), execution_id="fixed")
        with pytest.raises(StaleVersionError, match="already exists"):
            runner.start(flaky_workflow(), execution_id=eid)
    assert h.flaky.attempts == [1]


def test_early_alarm_rearms_itself() -> None:
    """An alarm firing before the due time re-arms for the due time and resumes nothing."""
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        eid = runner.start(flaky_workflow(delay=10))
        h.scheduler.schedule(eid, T0 + timedelta(seconds=2))
        assert h.scheduler.advance(2) == [eid]
        assert h.flaky.attempts == [1]
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


class _SubclassTime(datetime):
    """A ``datetime`` subclass, as pendulum's clocks return."""


class _SubclassClock(ManualClock):
    """A manual clock whose readings are ``_SubclassTime``s."""

    def __call__(self) -> datetime:
        now = super().__call__()
        return _SubclassTime(
            now.year, now.month, now.day, now.hour, now.minute, now.second, tzinfo=now.tzinfo
        )


def test_a_clock_returning_a_datetime_subclass_runs_as_a_plain_one(tmp_path: Path) -> None:
    """A clock returning ``datetime`` subclasses runs, saves and reloads as plain readings
    of the same times do (the core reads such a clock as plain datetimes; the runner's
    leases kept the subclass, which the store's ``dumps`` could not write)."""

    def run(clock: ManualClock, name: str) -> WorkflowExecution:
        h = Harness(SQLiteStore(tmp_path / f"{name}.db"), fails=2, clock=clock)
        with h.runner as runner:
            eid = runner.start(flaky_workflow(), execution_id="e1")
            while h.scheduler.advance(1):
                pass
            return h.store.load(eid)[0]

    plain = run(ManualClock(T0), "plain")
    subclassed = run(_SubclassClock(T0), "subclass")
    assert plain.status is ExecutionStatus.COMPLETED
    assert subclassed == plain


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


class CountingStore(MemoryStore):
    """A MemoryStore (JSON) that counts definition loads and can run a hook on one load."""

    def __init__(self) -> None:
        super().__init__(serialize=True)
        self.definition_loads = 0
        self.on_load: Callable[[str], None] | None = None

    def load_workflow(self, workflow_id: str, version: int) -> Workflow:
        self.definition_loads += 1
        return super().load_workflow(workflow_id, version)

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        hook = self.on_load
        if hook is not None:
            hook(execution_id)
        return super().load(execution_id)


def test_definitions_are_loaded_once_per_runner() -> None:
    """A runner resuming many retries of one workflow loads its definition from the store once."""
    store = CountingStore()
    clock = ManualClock(T0)
    Harness(store, clock=clock, fails=3).runner.start(workflow(flaky_node(attempts=5)))
    fresh = Harness(store, clock=clock, fails=0)  # another process: nothing cached yet
    with fresh.runner as runner:
        fresh.scheduler.advance(1)
        (eid,) = [s.id for s in store.list()]
        assert runner.get(eid).status is ExecutionStatus.COMPLETED
    assert store.definition_loads == 1


def test_definition_reads_a_stored_definition_once_and_the_latest_version() -> None:
    """``runner.definition(id, version)`` returns what any runner stored (read from the store
    once), ``version=None`` the highest stored, and ``WorkflowNotFound`` for an unknown one."""
    store = CountingStore()
    Harness(store).runner.register_workflow(flaky_workflow(wid="defs"))
    v2 = attrs.evolve(flaky_workflow(wid="defs", attempts=2), version=2)
    Harness(store).runner.register_workflow(v2)
    runner = Harness(store).runner  # another process: nothing cached yet
    assert runner.definition("defs", 1) == flaky_workflow(wid="defs")
    assert runner.definition("defs", 1) is runner.definition("defs", 1)
    assert runner.definition("defs") == v2
    assert store.definition_loads == 2
    with pytest.raises(WorkflowNotFound, match="'nope'"):
        runner.definition("nope", 1)
    with pytest.raises(WorkflowNotFound, match="'nope'"):
        runner.definition("nope")
    with pytest.raises(InvalidSettingsError, match="version"):
        runner.definition("defs", 0)


def test_wait_returns_once_only_the_outside_can_move_the_execution() -> None:
    """``wait`` returns for completed, failed, cancelled, webhook and custom-kind executions."""
    h = Harness(MemoryStore(), fails=100)
    with h.runner as runner:
        completed = runner.start(
            workflow(Node(key="d", type="data.set_data", params={"value": 1}), wid="c")
        )
        webhook = runner.start(workflow(webhook_node(), wid="h"))
        custom = runner.start(workflow(Node(key="ok", type="test.approval"), wid="a"))
        failed = runner.start(workflow(flaky_node(attempts=1), wid="f"))
        cancelled = runner.start(workflow(flaky_node(), wid="x"))
        runner.cancel(cancelled)
        statuses = {
            eid: runner.wait(eid, timeout=0).status
            for eid in (completed, webhook, custom, failed, cancelled)
        }
    assert statuses == {
        completed: ExecutionStatus.COMPLETED,
        webhook: ExecutionStatus.SUSPENDED,
        custom: ExecutionStatus.SUSPENDED,
        failed: ExecutionStatus.FAILED,
        cancelled: ExecutionStatus.CANCELLED,
    }


def test_wait_times_out_on_timers_and_pending_sub_workflows() -> None:
    """``wait`` raises ``TimeoutError`` while a timer or a sub-workflow still runs on its own."""
    h = Harness(MemoryStore(), fails=100)
    h.runner.register_workflow(workflow(flaky_node(), wid="child"))
    with h.runner as runner:
        timer = runner.start(
            workflow(Node(key="t", type="wait.wait", params={"mode": "interval", "duration": 5}))
        )
        parent = runner.start(workflow(sub_node("child", "sync"), wid="parent"))
        for eid in (timer, parent):
            with pytest.raises(TimeoutError, match="still suspended"):
                runner.wait(eid, timeout=0)
        with pytest.raises(ExecutionNotFound):
            runner.wait("nope", timeout=0)


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
        assert h.flaky.attempts == []
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
    assert h.flaky.attempts == [1]


def test_a_versionless_child_runs_the_highest_version_even_with_gaps() -> None:
    """A sub-workflow without a version runs the highest stored one, whatever the numbering."""
    h = Harness(MemoryStore())
    v1 = workflow(Node(key="r", type="data.set_data", params={"value": "v1"}), wid="child")
    v3 = workflow(
        Node(key="r", type="data.set_data", params={"value": "v3"}), wid="child", version=3
    )
    h.store.save_workflow(v1)
    h.store.save_workflow(v3)
    with h.runner as runner:
        pid = runner.start(workflow(sub_node("child", "sync"), wid="parent"))
        sub = runner.get(pid).node("sub")
    assert sub is not None
    assert sub.output == "v3"


def test_wait_returns_when_a_parent_waits_on_a_child_that_waits_on_a_webhook() -> None:
    """A parent whose sync child waits for a webhook waits for the outside: ``wait`` returns."""
    h = Harness(MemoryStore())
    h.runner.register_workflow(workflow(webhook_node(), wid="child"))
    with h.runner as runner:
        pid = runner.start(workflow(sub_node("child", "sync"), wid="parent"))
        assert runner.wait(pid, timeout=0).status is ExecutionStatus.SUSPENDED


def test_nested_sub_workflows_report_up_two_levels() -> None:
    """A grandchild's retry completes it, then the child, then the top parent, all by alarms."""
    h = Harness(MemoryStore(serialize=True), fails=1)
    h.runner.register_workflow(workflow(flaky_node(), wid="grandchild"))
    h.runner.register_workflow(workflow(sub_node("grandchild", "sync"), wid="child"))
    with h.runner as runner:
        top = runner.start(workflow(sub_node("child", "async"), wid="top"))
        h.scheduler.advance(0)  # starts the async child, which runs its sync grandchild
        child_id = child_execution_id(runner.get(top))
        assert child_id is not None
        grandchild_id = child_execution_id(runner.get(child_id))
        assert grandchild_id is not None
        assert runner.get(grandchild_id).status is ExecutionStatus.SUSPENDED
        h.scheduler.advance(1)
        done = runner.get(top)
        statuses = [runner.get(i).status for i in (grandchild_id, child_id)]
    assert statuses == [ExecutionStatus.COMPLETED, ExecutionStatus.COMPLETED]
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 2}
    assert h.flaky.attempts == [1, 2]


def test_a_failed_async_child_fails_its_parent() -> None:
    """An async child that runs out of retries resumes its parent with the failure."""
    h = Harness(MemoryStore(), fails=100)
    h.runner.register_workflow(workflow(flaky_node(attempts=2), wid="child"))
    with h.runner as runner:
        pid = runner.start(workflow(sub_node("child", "async"), wid="parent"))
        h.scheduler.advance(5)
        done = runner.get(pid)
    assert done.status is ExecutionStatus.FAILED
    assert done.error is not None
    assert done.error.node_key == "sub"
    assert h.flaky.attempts == [1, 2]


def test_no_child_runs_for_a_parent_cancelled_just_before_the_child_starts() -> None:
    """A cancel landing between the parent's save and its child's start leaves no child running."""
    store = CountingStore()
    h = Harness(store, fails=100)
    h.runner.register_workflow(workflow(flaky_node(), wid="child"))

    def cancel_parent_first(execution_id: str) -> None:
        if ":sub:" in execution_id:  # the runner looks the child up, about to start it
            store.on_load = None
            h.runner.cancel(execution_id.split(":")[0], "operator")

    with h.runner as runner:
        store.on_load = cancel_parent_first
        pid = runner.start(workflow(sub_node("child", "sync"), wid="parent"))
        h.scheduler.advance(60)
        cid = child_execution_id(runner.get(pid)) or ""
        try:
            child_status: ExecutionStatus | None = runner.get(cid).status
        except ExecutionNotFound:
            child_status = None
    assert runner.get(pid).status is ExecutionStatus.CANCELLED
    assert child_status in (None, ExecutionStatus.CANCELLED)
    assert h.flaky.calls <= 1


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
    assert first.flaky.attempts == [1]
    assert second.flaky.attempts == [2]


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


class BrokenArm(ManualScheduler):
    """A ManualScheduler whose ``schedule`` fails: a crash between the save and the arm."""

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        raise RuntimeError("the process died before arming")


def test_a_crash_between_save_and_arm_loses_nothing(tmp_path: Path) -> None:
    """If arming fails after the save, a new runner over the store re-arms and finishes the run."""
    path = tmp_path / "crash.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), clock=clock, fails=1)
    first.runner = Runner(first.registry, first.store, BrokenArm(clock), clock)
    with first.runner as runner, pytest.raises(RuntimeError, match="before arming"):
        runner.start(workflow(flaky_node()))
    (summary,) = first.store.list()
    assert summary.status is ExecutionStatus.SUSPENDED
    assert summary.due_at == T0 + timedelta(seconds=1)
    first.store.close()
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        assert second.scheduler.pending() == [(summary.id, T0 + timedelta(seconds=1))]
        second.scheduler.advance(1)
        done = runner.get(summary.id)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert (first.flaky.attempts, second.flaky.attempts) == ([1], [2])


def test_cancel_during_backoff_on_sqlite_removes_the_alarm(tmp_path: Path) -> None:
    """Cancelling in backoff: the action never runs again, the alarm is gone, even after restart."""
    path = tmp_path / "cancel.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), clock=clock, fails=100)
    with first.runner as runner:
        eid = runner.start(workflow(flaky_node()))
        runner.cancel(eid)
        assert first.scheduler.pending() == []
    assert list(first.store.alarms()) == []
    first.store.close()
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        assert second.scheduler.advance(600) == []
        assert runner.get(eid).status is ExecutionStatus.CANCELLED
    second.store.close()
    assert (first.flaky.attempts, second.flaky.attempts) == ([1], [])


def test_a_retry_due_while_down_fires_late_and_show_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A retry due while no runner was up fires on restart; its attempt has due_at < started_at."""
    path = tmp_path / "late.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), clock=clock, fails=1)
    with first.runner as runner:
        eid = runner.start(workflow(flaky_node()))
    first.store.close()
    clock.advance(90)
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        assert second.scheduler.advance(0) == [eid]
        done = runner.get(eid)
    second.store.close()
    run = done.node("r")
    assert run is not None
    second_try = run.attempts[1]
    assert second_try.due_at == T0 + timedelta(seconds=1)
    assert second_try.started_at == T0 + timedelta(seconds=90)
    assert second_try.due_at < second_try.started_at
    assert main(["show", eid, "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"execution {eid}" in out
    assert "status    completed" in out
    assert "attempt 1: failed" in out
    assert "ConnectionError" in out
    assert "(retry in 1.0s)" in out
    assert "attempt 2: completed" in out
    assert "due +1.0s  late 1m29s" in out
    # a save before each action (trigger, r; then r's retry) and one per outcome
    assert "(record version 5)" in out


def test_restart_while_an_async_child_retries_finishes_both(tmp_path: Path) -> None:
    """A runner that stops while an async child waits on a retry: the next one finishes both."""
    path = tmp_path / "async.sqlite3"
    clock = ManualClock(T0)
    first = Harness(SQLiteStore(path), clock=clock, fails=1)
    first.runner.register_workflow(workflow(flaky_node(), wid="child"))
    after = Node(key="after", type="data.set_data", params={"fields": {"after": True}})
    with first.runner as runner:
        pid = runner.start(workflow(sub_node("child", "async"), after, wid="parent"))
        first.scheduler.advance(0)
        cid = child_execution_id(runner.get(pid))
        assert cid is not None
        assert runner.get(cid).status is ExecutionStatus.SUSPENDED
    first.store.close()
    second = Harness(SQLiteStore(path), clock=clock)
    with second.runner as runner:
        assert second.scheduler.pending() == [(cid, T0 + timedelta(seconds=1))]
        second.scheduler.advance(1)
        done = runner.get(pid)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 2, "after": True}
    assert (first.flaky.attempts, second.flaky.attempts) == ([1], [2])


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


def test_deliver_after_the_expiry_alarm_fired_raises() -> None:
    """Once the expiry alarm applied ``on_error: continue``, a late ``deliver`` raises."""
    h = Harness(MemoryStore())
    wait = webhook_node(timeout_hours=1)
    wait = Node(
        key="w", type="wait.wait", params=wait.params, settings=NodeSettings(on_error="continue")
    )
    with h.runner as runner:
        eid = runner.start(workflow(wait))
        h.scheduler.advance(3600)
        done = runner.get(eid)
        with pytest.raises(ResumeError, match="completed"):
            runner.deliver(eid, {"late": True})
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output["code"] == "webhook_timeout"


def test_deliver_past_the_webhook_expiry_is_refused_even_before_the_alarm() -> None:
    """A webhook past ``expires_at`` is expired by the clock, not by whether its alarm ran yet."""
    h = Harness(MemoryStore())
    with h.runner as runner:
        eid = runner.start(workflow(webhook_node(timeout_hours=1)))
        h.clock.advance(7200)  # the runner was busy: the alarm has not fired yet
        with pytest.raises(ResumeError):
            runner.deliver(eid, {"late": True})
        assert runner.get(eid).status is not ExecutionStatus.COMPLETED


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
    assert flaky.attempts == [1, 2, 3]


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


def test_sub_workflow_timeout_fails_the_parent_node_and_cancels_the_child() -> None:
    """A child still waiting at ``timeout_ms`` is cancelled; the parent's node fails (timeout)."""
    h = Harness(MemoryStore())
    h.runner.register_workflow(workflow(webhook_node(), wid="child"))
    with h.runner as runner:
        pid = runner.start(workflow(sub_node("child", "sync", timeout_ms=5000), wid="parent"))
        cid = child_execution_id(runner.get(pid))
        assert cid is not None
        assert h.scheduler.advance(5) == [pid]
        parent, child = runner.get(pid), runner.get(cid)
    assert parent.status is ExecutionStatus.FAILED
    assert child.status is ExecutionStatus.CANCELLED
    sub = parent.node("sub")
    assert sub is not None
    assert sub.attempts[-1].outcome is AttemptOutcome.FAILED


def test_run_due_times_out_a_sub_workflow_past_its_deadline() -> None:
    """A cron-style ``run_due`` after the deadline times the waiting parent out."""
    h = Harness(MemoryStore())
    h.runner.register_workflow(workflow(webhook_node(), wid="child"))
    pid = h.runner.start(workflow(sub_node("child", "sync", timeout_ms=5000), wid="parent"))
    h.clock.advance(3600)
    h.runner.run_due()
    assert h.runner.get(pid).status is ExecutionStatus.FAILED


# -- two runners over one database --------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_db(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], ExecutionStore]]:
    """A factory of stores over one database: each call is another process's connection."""
    opened: list[Any] = []
    if request.param == "sqlite":
        path = tmp_path / "shared.sqlite3"

        def make() -> ExecutionStore:
            store = SQLiteStore(path)
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()
        return
    import psycopg
    from psycopg import sql

    from scheduling.stores.postgres import PostgresStore

    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = f"prana_review_{uuid.uuid4().hex[:12]}"

    def make_pg() -> ExecutionStore:
        store = PostgresStore(dsn, schema=schema)
        opened.append(store)
        return store

    try:
        yield make_pg
    finally:
        for store in opened:
            store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_two_runners_firing_one_alarm_make_one_transition(
    shared_db: Callable[[], ExecutionStore],
) -> None:
    """Two runners fire the same alarm at once: the second finds it claimed; it runs once."""
    clock = ManualClock(T0)
    a = Harness(shared_db(), clock=clock, fails=1)
    b = Harness(shared_db(), clock=clock, flaky=a.flaky)
    with a.runner as runner_a:
        eid = runner_a.start(workflow(flaky_node()))
        with b.runner:
            # While runner A runs attempt 2, runner B fires the same (already due) alarm.
            a.flaky.hook = lambda ctx: b.scheduler.run_due()
            assert a.scheduler.advance(1) == [eid]
            done, version = a.store.load(eid)
    assert a.flaky.attempts == [1, 2]  # A claimed the execution before attempt 2: B left it
    assert done.status is ExecutionStatus.COMPLETED
    assert version == 5  # the start (two claims, its outcome), then A's claim and outcome
    run = done.node("r")
    assert run is not None
    assert [attempt.number for attempt in run.attempts] == [1, 2]


def test_a_resume_racing_a_cancel_does_nothing_after_it(
    shared_db: Callable[[], ExecutionStore],
) -> None:
    """A resume racing another runner's cancel is dropped; the node after it never runs."""
    clock = ManualClock(T0)
    a = Harness(shared_db(), clock=clock, fails=1)
    b = Harness(shared_db(), clock=clock)
    after = Node(key="after", type="data.set_data", params={"fields": {"after": True}})
    with a.runner as runner_a, b.runner as runner_b:
        eid = runner_a.start(workflow(flaky_node(), after))
        a.flaky.hook = lambda ctx: runner_b.cancel(ctx.execution_id, "operator")
        a.scheduler.advance(60)
        done = runner_a.get(eid)
        assert a.scheduler.pending() == []
    assert done.status is ExecutionStatus.CANCELLED
    assert "after" not in done.node_executions
    assert a.flaky.attempts == [1, 2]


def test_a_deliver_that_loses_to_a_cancel_raises(
    shared_db: Callable[[], ExecutionStore],
) -> None:
    """A ``deliver`` whose resume runs while another runner cancels raises and changes nothing."""
    clock = ManualClock(T0)
    a = Harness(shared_db(), clock=clock)
    b = Harness(shared_db(), clock=clock)
    with a.runner as runner_a, b.runner as runner_b:
        eid = runner_a.start(workflow(Node(key="ok", type="test.approval")))
        a.approve_hooks.append(lambda: runner_b.cancel(eid))
        with pytest.raises(StaleVersionError):
            runner_a.deliver(eid, {"approved": True})
        assert runner_a.get(eid).status is ExecutionStatus.CANCELLED


# -- the transactional alarm seam (scheduling.abc), with doubles (no database) ---------------


class HookStore(MemoryStore):
    """A ``MemoryStore`` that is a ``TransactionalStore``: a ``dsn`` and an ``on_save`` slot.

    The hook runs before the row is stored; if it raises, nothing is stored (the
    all-or-nothing promise of ``PostgresStore.on_save``).
    """

    def __init__(self, *, fail_alarms: bool = False) -> None:
        super().__init__()
        self.dsn = "host=db dbname=prana"
        self.on_save: OnSave | None = None
        self.fail_alarms = fail_alarms

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        hook = self.on_save
        if hook is not None:
            hook(None, execution)
        return super().save(execution, expected_version)

    def alarms(self) -> Any:
        if self.fail_alarms:
            raise ConnectionError("database went away")
        return super().alarms()


class InTransactionScheduler(ManualScheduler):
    """A ``ManualScheduler`` that is a ``TransactionalScheduler`` (arms in the store's save)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.outside: list[tuple[str, str]] = []
        self.inside: list[tuple[str, str]] = []
        self.setups = 0

    def same_database(self, dsn: str) -> bool:
        return dsn == "host=db dbname=prana"

    def setup(self) -> None:
        self.setups += 1

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        self.outside.append(("schedule", execution_id))
        super().schedule(execution_id, due_at)

    def cancel(self, execution_id: str) -> None:
        self.outside.append(("cancel", execution_id))
        super().cancel(execution_id)

    def schedule_in(self, conn: Any, execution_id: str, due_at: datetime) -> None:
        self.inside.append(("schedule", execution_id))
        super().schedule(execution_id, due_at)

    def cancel_in(self, conn: Any, execution_id: str) -> None:
        self.inside.append(("cancel", execution_id))
        super().cancel(execution_id)


def test_runner_arms_every_retry_inside_the_save_and_removes_the_hook_on_close() -> None:
    """With the hook installed every alarm change happens in a save; close() uninstalls it."""
    clock = ManualClock(T0)
    registry = Registry()
    flaky = Flaky(2)
    registry.register("test.flaky", flaky)
    store = HookStore()
    scheduler = InTransactionScheduler(clock)
    runner = Runner(store=store, scheduler=scheduler, registry=registry, clock=clock)
    with runner:
        assert store.on_save is not None
        execution_id = runner.start(workflow(flaky_node(attempts=3), wid="retry"))
        assert runner.get(execution_id).status is ExecutionStatus.SUSPENDED
        scheduler.advance(1)
        scheduler.advance(1)
        assert runner.get(execution_id).status is ExecutionStatus.COMPLETED
        assert scheduler.outside == []
        assert ("schedule", execution_id) in scheduler.inside
        assert scheduler.inside[-1] == ("cancel", execution_id)
    assert store.on_save is None
    assert flaky.calls == 3


def test_second_runner_over_a_hooked_store_arms_after_its_saves() -> None:
    """A runner finding the hook slot taken arms its own alarms after the save, as before."""
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", Flaky(1))
    store = HookStore()
    first = InTransactionScheduler(clock)
    second = InTransactionScheduler(clock)
    with Runner(store=store, scheduler=first, registry=registry, clock=clock):
        hook = store.on_save
        with Runner(store=store, scheduler=second, registry=registry, clock=clock) as runner:
            assert store.on_save is hook
            execution_id = runner.start(workflow(flaky_node(attempts=3), wid="retry"))
            assert ("schedule", execution_id) in second.outside
        assert store.on_save is hook  # the second runner leaves the first one's hook alone
    assert store.on_save is None


def test_a_failing_hook_stores_nothing_and_start_raises() -> None:
    """When arming inside the save fails, start() raises and no execution is stored."""
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", Flaky(5))
    store = HookStore()
    scheduler = InTransactionScheduler(clock)

    def broken(conn: Any, execution_id: str, due_at: datetime) -> None:
        raise ConnectionError("job queue unreachable")

    scheduler.schedule_in = broken  # type: ignore[method-assign]
    with Runner(store=store, scheduler=scheduler, registry=registry, clock=clock) as runner:
        with pytest.raises(ConnectionError):
            runner.start(workflow(flaky_node(attempts=3), wid="retry"), execution_id="e1")
        assert store.list(ExecutionStatus.SUSPENDED, limit=10) == []


def test_open_that_fails_leaves_no_hook_on_the_store() -> None:
    """A Runner.open() that raises leaves the store as it found it (no on_save hook)."""
    clock = ManualClock(T0)
    store = HookStore(fail_alarms=True)
    runner = Runner(store=store, scheduler=InTransactionScheduler(clock), clock=clock)
    with pytest.raises(ConnectionError), runner:
        pass
    assert store.on_save is None


# -- one step under every resume: load, check, resume, compare-and-set save, settle --------


class RacingStore(MemoryStore):
    """A MemoryStore where another runner moves ``race``'s executions on just before a save.

    The rival's transition re-saves the stored record (its version goes up), so the save
    in flight loses its compare-and-set, as it would against a second runner.
    """

    def __init__(self) -> None:
        super().__init__(serialize=True)
        self.race: set[str] = set()

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        self._rival(execution.id)
        return super().save(execution, expected_version)

    def claim(
        self, execution_id: str, expected_version: int, lease: datetime, claimed_at: datetime
    ) -> int:
        self._rival(execution_id)  # a light claim is a write too (ClaimingStore)
        return super().claim(execution_id, expected_version, lease, claimed_at)

    def _rival(self, execution_id: str) -> None:
        if execution_id in self.race:
            self.race.discard(execution_id)
            stored, version = self.load(execution_id)
            super().save(stored, version)


def paused_for(path: str, h: Harness) -> tuple[str, Callable[[], object]]:
    """An execution waiting on ``path`` (alarm, deliver, parent), and how to resume it."""
    runner = h.runner
    if path == "alarm":
        eid = runner.start(workflow(flaky_node()))
        return eid, lambda: h.scheduler.advance(1)
    if path == "deliver":
        eid = runner.start(workflow(webhook_node()))
        return eid, lambda: runner.deliver(eid, {"ok": True})
    runner.register_workflow(workflow(flaky_node(), wid="child"))
    eid = runner.start(workflow(sub_node("child", "sync"), wid="parent"))
    return eid, lambda: h.scheduler.advance(1)  # the child's retry completes it


RESUME_PATHS = ["alarm", "deliver", "parent"]


@pytest.mark.parametrize("path", RESUME_PATHS)
def test_every_resume_path_goes_through_the_one_step(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An alarm, a delivery and a child reporting to its parent each resume in ``Runner._step``."""

    stepped: list[str] = []
    step = Runner._step

    def spy(self: Runner[Any], execution_id: str, *args: Any, **kwargs: Any) -> Any:
        stepped.append(execution_id)
        return step(self, execution_id, *args, **kwargs)

    monkeypatch.setattr(Runner, "_step", spy)
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        eid, resume = paused_for(path, h)
        resume()
        assert runner.get(eid).status is ExecutionStatus.COMPLETED
    assert eid in stepped


@pytest.mark.parametrize("path", RESUME_PATHS)
def test_a_resume_that_loses_the_compare_and_set_changes_nothing(path: str) -> None:
    """On every path a lost save keeps the rival's record and arms nothing for its own state.

    ``deliver`` says so (``StaleVersionError``); an alarm or a parent's resume is dropped.
    """
    store = RacingStore()
    h = Harness(store, fails=1)
    with h.runner:
        eid, resume = paused_for(path, h)
        before, version = store.load(eid)
        armed = set(h.scheduler.pending())
        store.race.add(eid)
        if path == "deliver":
            with pytest.raises(StaleVersionError):
                resume()
        else:
            resume()
        after, after_version = store.load(eid)
        assert (after, after_version) == (before, version + 1)  # the rival's save only
        assert after.status is ExecutionStatus.SUSPENDED
        assert set(h.scheduler.pending()) <= armed  # nothing armed for the lost state


@pytest.mark.parametrize("path", RESUME_PATHS)
def test_no_resume_path_moves_a_cancelled_execution(path: str) -> None:
    """Once cancelled, an execution is left alone by its alarm and its child; deliver refuses."""
    h = Harness(MemoryStore(), fails=1)
    with h.runner as runner:
        eid, resume = paused_for(path, h)
        cancelled = runner.cancel(eid)
        if path == "deliver":
            with pytest.raises(ResumeError, match="cancelled"):
                resume()
        else:
            resume()
        assert runner.get(eid) == cancelled


def test_the_doubles_and_the_real_pair_are_the_abc_protocols() -> None:
    """PostgresStore and ProcrastinateScheduler (and the doubles) are the seam; others not."""
    from scheduling.adapters.procrastinate import ProcrastinateScheduler
    from scheduling.stores.postgres import PostgresStore

    dsn = "postgresql://postgres@127.0.0.1:1/prana?connect_timeout=1"  # never connected to
    store: TransactionalStore = PostgresStore(dsn)  # mypy checks the structure too
    scheduler: TransactionalScheduler = ProcrastinateScheduler(dsn)
    clock = ManualClock(T0)
    try:
        for transactional_store in (store, HookStore()):
            assert isinstance(transactional_store, TransactionalStore)
        for transactional in (scheduler, InTransactionScheduler(clock)):
            assert isinstance(transactional, TransactionalScheduler)
        assert scheduler.same_database(store.dsn)
        assert not isinstance(MemoryStore(), TransactionalStore)
        assert not isinstance(ManualScheduler(clock), TransactionalScheduler)
    finally:
        assert isinstance(store, PostgresStore)
        store.close()


class NoSetupScheduler(InTransactionScheduler):
    """Everything of the seam but ``setup``: not a ``TransactionalScheduler``."""

    setup = None  # type: ignore[assignment]


class NoDsnStore(HookStore):
    """An ``on_save`` slot but no ``dsn``: not a ``TransactionalStore``."""

    def __getattribute__(self, name: str) -> Any:
        if name == "dsn":
            raise AttributeError(name)
        return super().__getattribute__(name)


@pytest.mark.parametrize(
    ("store_type", "scheduler_type", "in_save"),
    [
        (HookStore, InTransactionScheduler, True),
        (NoDsnStore, InTransactionScheduler, False),
        (HookStore, NoSetupScheduler, False),
        (MemoryStore, InTransactionScheduler, False),
        (HookStore, ManualScheduler, False),
    ],
    ids=["both", "store-without-dsn", "scheduler-without-setup", "plain-store", "plain-scheduler"],
)
def test_the_runner_finds_the_seam_through_the_abc_protocols(
    store_type: type[MemoryStore], scheduler_type: type[ManualScheduler], in_save: bool
) -> None:
    """The hook goes in exactly when the store and the scheduler are the abc protocols."""
    clock = ManualClock(T0)
    store, scheduler = store_type(), scheduler_type(clock)
    assert in_save == (
        isinstance(store, TransactionalStore) and isinstance(scheduler, TransactionalScheduler)
    )
    with Runner(store=store, scheduler=scheduler, clock=clock):
        assert (getattr(store, "on_save", None) is not None) is in_save
        if in_save:
            assert isinstance(scheduler, InTransactionScheduler)
            assert scheduler.setups == 1  # the job tables first, then the hook
    assert getattr(store, "on_save", None) is None


def test_the_seam_needs_the_same_database() -> None:
    """A transactional pair on two databases arms after the save, as any other pair."""
    clock = ManualClock(T0)
    store, scheduler = HookStore(), InTransactionScheduler(clock)
    store.dsn = "host=elsewhere dbname=prana"
    registry = Registry()
    registry.register("test.flaky", Flaky(1))
    with Runner(registry, store, scheduler, clock) as runner:
        assert store.on_save is None
        eid = runner.start(workflow(flaky_node()))
    assert scheduler.inside == []
    assert scheduler.outside == [("schedule", eid)]


def test_the_runner_takes_a_clocked_schedulers_clock() -> None:
    """A ``ClockedScheduler``'s clock becomes the runner's; another clock is refused."""
    clock = ManualClock(T0)
    clocked: ClockedScheduler = ManualScheduler(clock)  # mypy checks the structure too
    assert isinstance(clocked, ClockedScheduler)
    runner = Runner(scheduler=ManualScheduler(clock))
    assert runner.clock is clock
    with pytest.raises(InvalidSettingsError, match="its own clock"):
        Runner(scheduler=ManualScheduler(clock), clock=ManualClock(T0))


# -- data the record cannot hold --------------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


UNSTORABLE = {
    "65-bit int": {"amount": 2**64},
    "below int64": {"amount": -(2**63) - 1},
    "lone surrogate": {"name": "\ud800"},
    "surrogate key": {"\udc00": 1},
    "201 levels": _nested(201),
}
"""Values json_problem used to pass that the record's serializer (orjson) cannot write."""


def _charging(calls: list[str]) -> Registry:
    def charge(params: Any, ctx: ActionContext) -> str:
        calls.append(ctx.node_key)
        return "ok"

    registry = Registry()
    registry.register("test.charge", charge)
    return registry


def _pay(wait: bool) -> Workflow:
    """trigger [-> webhook wait] -> an action that records its calls."""
    nodes = [Node(key="start", type="manual.trigger"), Node(key="charge", type="test.charge")]
    keys = ["start", "charge"]
    if wait:
        nodes.insert(1, Node(key="approve", type="wait.wait", params={"mode": "webhook"}))
        keys.insert(1, "approve")
    return Workflow(
        id="pay",
        nodes=nodes,
        connections=[Connection(from_node=a, to_node=b) for a, b in itertools.pairwise(keys)],
    )


@pytest.mark.parametrize("value", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_input_the_record_cannot_hold_is_refused_before_any_action_runs(value: Any) -> None:
    """It used to run every action and then fail at the save, leaving nothing stored."""
    calls: list[str] = []
    store = MemoryStore(serialize=True)
    scheduler = ManualScheduler(clock=ManualClock())
    runner = Runner(registry=_charging(calls), store=store, scheduler=scheduler)
    with runner, pytest.raises(InvalidWorkflowError, match="workflow input"):
        runner.start(_pay(wait=False), value)
    assert calls == []
    assert store.list() == []


@pytest.mark.parametrize("value", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_resume_data_the_record_cannot_hold_is_refused_before_any_action_runs(value: Any) -> None:
    """It used to run the actions after the wait, then fail at the save with the wait still
    open: every repeat of the delivery ran them again."""
    calls: list[str] = []
    store = MemoryStore(serialize=True)
    scheduler = ManualScheduler(clock=ManualClock())
    with Runner(registry=_charging(calls), store=store, scheduler=scheduler) as runner:
        execution_id = runner.start(_pay(wait=True), None)
        with pytest.raises(ResumeError, match="resume data"):
            runner.deliver(execution_id, value)
        assert calls == []
        assert runner.get(execution_id).status is ExecutionStatus.SUSPENDED
        runner.deliver(execution_id, {"amount": 1})
        assert calls == ["charge"]


def test_an_alarm_this_runner_cannot_run_is_said_once_and_stays_suspended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A due execution whose actions this runner lacks is left suspended, said in one line.

    One ERROR per workflow version names the node types missing and the fix (``--actions``
    for ``prana worker``); the other alarms still fire, and a runner that has the actions
    finishes the execution later.
    """
    store = MemoryStore()
    harness = Harness(store, fails=2)  # each execution's first attempt fails
    needs = workflow(flaky_node(delay=1))
    first, second = harness.runner.start(needs), harness.runner.start(needs)
    timer = workflow(
        Node(key="t", type="wait.wait", params={"mode": "interval", "duration": 1}), wid="t"
    )
    builtin = harness.runner.start(timer)
    scheduler = ManualScheduler(harness.clock)
    with caplog.at_level("ERROR", logger="scheduling"), Runner(Registry(), store, scheduler):
        scheduler.advance(2)
        scheduler.advance(2)  # the first two fire again (re-armed): nothing more is said
        for eid in (first, second):
            scheduler.schedule(eid, harness.clock())
        scheduler.advance(1)
    said = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(said) == 1, [r.getMessage() for r in said]
    message = said[0].getMessage()
    assert "\n" not in message
    assert "'wf' v1" in message
    assert "'test.flaky'" in message
    assert "pass --actions" in message
    assert store.load(first)[0].status is ExecutionStatus.SUSPENDED
    assert store.load(second)[0].status is ExecutionStatus.SUSPENDED
    assert store.load(builtin)[0].status is ExecutionStatus.COMPLETED
    with harness.runner:
        harness.scheduler.advance(0)
    assert store.load(first)[0].status is ExecutionStatus.COMPLETED
    assert store.load(second)[0].status is ExecutionStatus.COMPLETED


# -- a process killed between a parent's save and its child's (issue 22, finding 3) -------------


class Killed(BaseException):
    """Stands for the process dying at a step boundary: nothing after it runs."""


def _killed(*args: object, **kwargs: object) -> NoReturn:
    raise Killed


def _strand(
    store: ExecutionStore,
    clock: ManualClock,
    mode: str,
    boundary: str,
    child: Node = Node(key="r", type="test.flaky"),  # noqa: B008 -- a frozen value
) -> str:
    """Start parent -> child in a runner that "dies" at ``boundary``; the parent's id.

    ``start``: after the parent's save, before its child starts (a sync child's start, an
    async child's alarm, armed in the dead process only). ``report``: after the child's
    final save, before the parent resumes.
    """
    doomed = Harness(store, clock=clock)
    doomed.runner.register_workflow(workflow(child, wid="child"))
    if boundary == "start" and mode == "sync":
        doomed.runner._run_child = _killed  # type: ignore[method-assign]
    if boundary == "report":
        doomed.runner._report_to_parent = _killed  # type: ignore[method-assign]
    try:
        pid = doomed.runner.start(parent_workflow(mode))
    except Killed:
        (pid,) = [row.id for row in store.list(ExecutionStatus.SUSPENDED) if row.due_at is None]
    parent = store.load(pid)[0]
    assert parent.status is ExecutionStatus.SUSPENDED
    assert parent.suspension is not None
    assert parent.suspension.kind == "sub_workflow"
    cid = child_execution_id(parent)
    assert cid is not None
    if boundary == "start":
        with pytest.raises(ExecutionNotFound):
            store.load(cid)
    else:
        assert store.load(cid)[0].status is ExecutionStatus.COMPLETED
    return pid


@pytest.mark.parametrize(
    ("mode", "boundary"), [("sync", "start"), ("async", "start"), ("sync", "report")]
)
def test_a_live_worker_repairs_a_stranded_parent_within_a_lease(
    mode: str, boundary: str, tmp_path: Path
) -> None:
    """A worker already running when another process died at a sub-workflow step boundary
    moves the stranded parent on within one lease, through what its loop calls every
    ``--poll`` (``rearm_due``); before, only a worker's restart did (``open``)."""
    clock = ManualClock(T0)
    store = SQLiteStore(tmp_path / "stranded.db")
    worker = Harness(store, clock=clock)
    with worker.runner as runner:
        pid = _strand(store, clock, mode, boundary)
        lease = runner.lease_seconds
        waited = 0.0
        while runner.get(pid).status is not ExecutionStatus.COMPLETED and waited <= lease:
            clock.advance(1)
            waited += 1
            runner.rearm_due()  # what the worker's loop calls every --poll
            worker.scheduler.advance(0)
        parent = runner.get(pid)
    store.close()
    assert parent.status is ExecutionStatus.COMPLETED, f"still stranded after {waited:g}s"
    assert waited <= lease
    assert parent.output == {"ok": True, "attempt": 1, "after": True}


@pytest.mark.parametrize(
    ("mode", "boundary"), [("sync", "start"), ("async", "start"), ("sync", "report")]
)
def test_worker_once_repairs_a_stranded_parent_and_counts_it(
    mode: str, boundary: str, tmp_path: Path
) -> None:
    """``run_due`` (``prana worker --once``) moves a stranded parent on and returns its id:
    it said "resumed 0" and left it stranded."""
    clock = ManualClock(T0)
    store = SQLiteStore(tmp_path / "once.db")
    pid = _strand(store, clock, mode, boundary)
    once = Harness(store, clock=clock)
    handled = once.runner.run_due()
    parent = once.runner.get(pid)
    store.close()
    assert pid in handled
    assert parent.status is ExecutionStatus.COMPLETED


def test_prana_worker_once_says_it_resumed_a_stranded_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana worker --once`` over a stranded parent moves it on and says "resumed 1"."""
    path = tmp_path / "once-cli.db"
    store = SQLiteStore(path)
    child = Node(key="r", type="data.set_data", params={"fields": {"ok": True}})
    pid = _strand(store, ManualClock(datetime.now(timezone.utc)), "sync", "report", child)
    store.close()
    assert main(["worker", "--once", "--db", str(path)]) == 0
    assert "resumed 1 due execution(s)" in capsys.readouterr().out
    store = SQLiteStore(path)
    parent = store.load(pid)[0]
    store.close()
    assert parent.status is ExecutionStatus.COMPLETED


# -- a save that fails after the action ran (issue 22, finding 6) -------------------------------


class BreakingStore(MemoryStore):
    """A ``MemoryStore`` whose saves fail (as on a full disk) while ``broken`` is set."""

    broken = False

    def save(self, execution: WorkflowExecution, expected_version: int | None = None) -> int:
        if self.broken:
            raise StoreError("database or disk is full")
        return super().save(execution, expected_version)


def test_an_outcome_whose_save_failed_is_stored_once_the_store_is_back() -> None:
    """The action ran and ended, then its save failed (disk full): the runner keeps the
    outcome and stores it when the store works again. Before, the record stayed
    ``running`` and, its lease over, the attempt was recorded ``interrupted`` ("the process
    running it stopped", though nothing stopped) and its action ran a second time."""
    store = BreakingStore()
    h = Harness(store, fails=1)
    with h.runner as runner:
        eid = runner.start(workflow(flaky_node()))

        def break_the_store(ctx: object) -> None:
            store.broken = True  # while attempt 2 runs: its final save fails

        h.flaky.hook = break_the_store
        h.scheduler.advance(1)  # the failure is logged (StoreHealth), not raised
        assert store.load(eid)[0].status is ExecutionStatus.RUNNING
        store.broken = False
        for _ in range(int(runner.lease_seconds) + 2):  # the worker's loop, every --poll
            h.clock.advance(1)
            runner.rearm_due()
            h.scheduler.advance(0)
        done = runner.get(eid)
    run = done.node("r")
    assert run is not None
    assert done.status is ExecutionStatus.COMPLETED
    assert [a.outcome for a in run.attempts] == [AttemptOutcome.FAILED, AttemptOutcome.COMPLETED]
    assert h.flaky.calls == 2  # the action ran once per attempt


class AnswerLostStore(MemoryStore):
    """A ``MemoryStore`` whose next save, once ``lose`` is set, is stored and then raises
    (a database connection lost after its ``COMMIT`` went through)."""

    lose = False

    def save(self, execution: WorkflowExecution, expected_version: int | None = None) -> int:
        version = super().save(execution, expected_version)
        if self.lose:
            self.lose = False
            raise StoreError("server closed the connection unexpectedly")
        return version


def test_an_outcome_stored_though_its_save_raised_is_settled_not_dropped() -> None:
    """A save that went through but raised (the connection lost after its commit) leaves
    the kept outcome's compare-and-set to find the very record it would write: it is
    settled (its events delivered), not dropped as if another runner had moved on."""
    store = AnswerLostStore()
    h = Harness(store, fails=1)
    with h.runner as runner:
        eid = runner.start(workflow(flaky_node()))

        def lose_the_answer(ctx: object) -> None:
            store.lose = True  # attempt 2's final save is stored, then raises

        h.flaky.hook = lose_the_answer
        h.scheduler.advance(1)
        for _ in range(3):
            h.clock.advance(1)
            runner.rearm_due()
            h.scheduler.advance(0)
        done = runner.get(eid)
    assert done.status is ExecutionStatus.COMPLETED
    assert h.flaky.calls == 2
    ends = [e for e in h.events if e.type is EventType.EXECUTION_COMPLETED]
    assert [e.execution_id for e in ends] == [eid]
