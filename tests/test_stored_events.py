"""A runner's observers see a step's events only once the state they lead to is stored.

The core emits events as it computes a step; the runner holds them and hands them on when
the step's next save is stored (its claim before an action call, its final save, or its
group's commit in a batch). A step whose save is lost (a cancel or another runner won the
compare-and-set) did not happen: its held events are dropped, so nobody reads "completed"
for an execution the store keeps cancelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from doubles import T0, Flaky, Harness, flaky_node, workflow

from prana import Event, ExecutionStatus, Registry, WorkflowExecution
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    from scheduling.abc import ExecutionStore


def seen(events: list[Event]) -> list[tuple[str, str | None, int | None]]:
    return [(e.name, e.node_key, e.attempt) for e in events]


def test_a_resume_that_loses_to_a_cancel_reports_no_outcome(tmp_path: Path) -> None:
    """Another runner cancels while attempt 2 runs: its completion is never reported."""
    path = tmp_path / "shared.sqlite3"
    clock = ManualClock(T0)
    a = Harness(SQLiteStore(path), clock=clock, fails=1)
    b = Harness(SQLiteStore(path), clock=clock)
    with a.runner as runner_a, b.runner as runner_b:
        eid = runner_a.start(workflow(flaky_node()))
        a.events.clear()
        a.flaky.hook = lambda ctx: runner_b.cancel(ctx.execution_id, "operator")
        a.scheduler.advance(60)
        assert runner_a.get(eid).status is ExecutionStatus.CANCELLED
    assert a.flaky.attempts == [1, 2]
    # the claim before attempt 2 was stored: its start is reported; nothing after it is
    assert seen(a.events) == [("execution_resumed", "r", None), ("node_started", "r", 2)]
    assert [e.name for e in b.events] == ["execution_cancelled"]


def test_a_start_that_loses_to_a_cancel_reports_no_outcome(tmp_path: Path) -> None:
    """A start cancelled by another runner during its first action reports no completion."""
    path = tmp_path / "shared.sqlite3"
    clock = ManualClock(T0)
    a = Harness(SQLiteStore(path), clock=clock)
    b = Harness(SQLiteStore(path), clock=clock)
    with a.runner as runner_a, b.runner as runner_b:
        a.flaky.hook = lambda ctx: runner_b.cancel(ctx.execution_id, "operator")
        eid = runner_a.start(workflow(flaky_node()))
        assert runner_a.get(eid).status is ExecutionStatus.CANCELLED
    # the trigger's run was stored with the claim before the action; nothing after it
    assert seen(a.events) == [
        ("execution_started", None, None),
        ("node_started", "start", 1),
        ("node_completed", "start", 1),
        ("node_started", "r", 1),
    ]


class WatchingObserver:
    """Records, for each event, the status another connection reads for its execution."""

    def __init__(self, watch: ExecutionStore) -> None:
        self.watch = watch
        self.seen: list[tuple[str, str]] = []

    def __call__(self, event: Event) -> None:
        execution, _ = self.watch.load(event.execution_id)
        self.seen.append((event.name, execution.status.value))


@pytest.mark.parametrize("batches", [False, True], ids=["one-by-one", "batched"])
def test_every_outcome_is_stored_when_observers_see_it(tmp_path: Path, batches: bool) -> None:
    """An observer reading the store (another connection) finds each outcome already there."""
    path = tmp_path / "watched.sqlite3"
    store = SQLiteStore(path)
    watch = SQLiteStore(path, cache_size=0)
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", Flaky(2))  # the first two calls fail
    observer = WatchingObserver(watch)
    scheduler = ManualScheduler(clock, batches=batches)
    try:
        with Runner(registry, store, scheduler, observers=[observer]) as runner:
            wf = workflow(flaky_node(attempts=3, delay=5))
            ids = [runner.start(wf), runner.start(wf)]  # both due at T0 + 5 s: one batch
            scheduler.advance(10)
            assert {runner.get(eid).status for eid in ids} == {ExecutionStatus.COMPLETED}
    finally:
        store.close()
        watch.close()
    expected = {
        "execution_started": "running",
        "node_started": "running",
        "node_retry_scheduled": "suspended",
        "execution_suspended": "suspended",
        "execution_resumed": "running",
        "node_completed": {"running", "completed"},
        "execution_completed": "completed",
    }
    for name, status in observer.seen:
        want = expected[name]
        assert status in want if isinstance(want, set) else status == want, (name, status)
    assert [name for name, _ in observer.seen].count("execution_completed") == 2


class LosesFirstCancel(MemoryStore):
    """A ``MemoryStore`` where another process saves the record just before the first
    cancelled save of it, so that save loses its compare-and-set."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        if execution.status is ExecutionStatus.CANCELLED and not self.raced:
            self.raced = True
            current, version = self.load(execution.id)
            super().save(current, version)  # the other process's save
        return super().save(execution, expected_version)


def test_a_cancel_that_loses_its_compare_and_set_once_reports_one_cancel() -> None:
    """A cancel saved again after losing its compare-and-set is reported once, once stored."""
    store = LosesFirstCancel()
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", Flaky(1))
    observed: list[tuple[str, ExecutionStatus]] = []

    def observer(event: Event) -> None:
        observed.append((event.name, store.load(event.execution_id)[0].status))

    with Runner(registry, store, ManualScheduler(clock), observers=[observer]) as runner:
        eid = runner.start(workflow(flaky_node()))
        observed.clear()
        runner.cancel(eid, "operator")
    assert store.raced
    assert observed == [("execution_cancelled", ExecutionStatus.CANCELLED)]
