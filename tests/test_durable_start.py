"""The runner's durability: starts stored before any action runs, dead processes taken over.

A process "dies" here by an action raising ``Died`` (a ``BaseException``: nothing in the
runner or the core catches it, as nothing survives a ``kill -9``); its last checkpoint
stays in the store, ``running``, and another runner takes it up once its lease ended. The
real ``kill -9`` of a ``prana run`` is the last test.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from doubles import T0, Died, flaky_node, workflow
from processes import ACTIONS, Prana, wait_until

from prana import (
    ActionContext,
    AttemptOutcome,
    EventType,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    NodeStatus,
    Registry,
    dumps_workflow,
)
from prana.testing import ManualClock
from scheduling import Runner, StaleVersionError
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    from scheduling.abc import ExecutionStore

LEASE = 30.0


class Fragile:
    """An action that records each call and the stored record, and dies ``dies`` times."""

    def __init__(self, store: ExecutionStore, dies: int) -> None:
        self.store = store
        self.dies = dies
        self.calls: list[tuple[str, int]] = []
        self.seen: list[tuple[ExecutionStatus, int]] = []

    def __call__(self, params: Any, ctx: ActionContext) -> Any:
        self.calls.append((ctx.idempotency_key, ctx.attempt))
        stored, version = self.store.load(ctx.execution_id)
        self.seen.append((stored.status, version))
        if len(self.calls) <= self.dies:
            raise Died
        return {"attempt": ctx.attempt}


def runner(
    store: ExecutionStore, fragile: Fragile, clock: ManualClock, **options: Any
) -> Runner[ManualScheduler]:
    registry = Registry()
    registry.register("test.fragile", fragile)
    return Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE, **options)


def fragile_workflow() -> Any:
    return workflow(Node(key="a", type="test.fragile"))


def test_start_stores_the_execution_before_its_first_action_runs(sqlite_store: SQLiteStore) -> None:
    """Inside the first action the execution is already stored, running, with its lease."""
    fragile = Fragile(sqlite_store, dies=0)
    clock = ManualClock(T0)
    eid = runner(sqlite_store, fragile, clock).start(fragile_workflow())
    assert [status for status, _ in fragile.seen] == [ExecutionStatus.RUNNING]
    done = sqlite_store.load(eid)[0]
    assert done.status is ExecutionStatus.COMPLETED
    assert done.lease_expires_at is None


def test_a_start_that_died_in_its_first_action_is_taken_up_after_its_lease(
    sqlite_store: SQLiteStore,
) -> None:
    """kill -9 inside the first attempt of start: the next runner re-runs it, same key."""
    fragile = Fragile(sqlite_store, dies=1)
    clock = ManualClock(T0)
    with pytest.raises(Died):
        runner(sqlite_store, fragile, clock).start(fragile_workflow(), execution_id="e1")
    left, _ = sqlite_store.load("e1")
    assert left.status is ExecutionStatus.RUNNING
    assert left.due_at == left.lease_expires_at == T0 + timedelta(seconds=LEASE)
    assert sqlite_store.find_due(T0 + timedelta(seconds=LEASE)) == [("e1", left.due_at)]

    second = runner(sqlite_store, fragile, clock)
    with second:
        assert second.scheduler.advance(LEASE - 1) == []  # still its first process's
        assert second.scheduler.advance(1) == ["e1"]  # lease over: taken up
        done = second.get("e1")
    assert done.status is ExecutionStatus.COMPLETED
    record = done.node("a")
    assert record is not None
    assert [(a.number, a.outcome) for a in record.attempts] == [
        (1, AttemptOutcome.INTERRUPTED),
        (1, AttemptOutcome.COMPLETED),
    ]
    assert fragile.calls == [("e1:a:0", 1), ("e1:a:0", 1)]  # at least once, one key


def test_a_resume_that_died_is_taken_up_by_run_due(sqlite_store: SQLiteStore) -> None:
    """A retry whose process died mid-attempt is recovered by ``run_due`` past the lease."""
    clock = ManualClock(T0)
    calls: list[int] = []

    def flaky_then_dies(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("first attempt fails")
        if len(calls) == 2:
            raise Died
        return "done"

    registry = Registry()
    registry.register("test.flaky", flaky_then_dies)
    first = Runner(registry, sqlite_store, ManualScheduler(clock), lease_seconds=LEASE)
    eid = first.start(workflow(flaky_node()))
    clock.advance(1)
    with pytest.raises(Died):
        first.run_due()
    assert first.get(eid).status is ExecutionStatus.RUNNING
    clock.advance(LEASE)
    assert first.run_due() == [eid]
    done = first.get(eid)
    assert done.status is ExecutionStatus.COMPLETED
    record = done.node("r")
    assert record is not None
    assert [(a.number, a.outcome) for a in record.attempts] == [
        (1, AttemptOutcome.FAILED),
        (2, AttemptOutcome.INTERRUPTED),
        (2, AttemptOutcome.COMPLETED),
    ]


def test_a_poison_execution_fails_after_max_interruptions(sqlite_store: SQLiteStore) -> None:
    """An action that kills its process every time: interrupted twice, then failed."""
    fragile = Fragile(sqlite_store, dies=100)
    clock = ManualClock(T0)
    with pytest.raises(Died):
        runner(sqlite_store, fragile, clock, max_interruptions=2).start(
            fragile_workflow(), execution_id="poison"
        )
    events: list[Any] = []
    for _ in range(2):
        clock.advance(LEASE)
        recovering = runner(sqlite_store, fragile, clock, max_interruptions=2)
        try:
            recovering.run_due()
        except Died:
            events.append("died again")
    done = sqlite_store.load("poison")[0]
    assert events == ["died again"]
    assert done.status is ExecutionStatus.FAILED
    assert done.error is not None
    assert done.error.code == "interrupted"
    record = done.node("a")
    assert record is not None
    assert [(a.number, a.outcome) for a in record.attempts] == [
        (1, AttemptOutcome.INTERRUPTED),
        (1, AttemptOutcome.INTERRUPTED),
        (1, AttemptOutcome.FAILED),
    ]
    assert len(fragile.calls) == 2  # run twice, never a third time


def test_a_runner_that_loses_the_claim_never_runs_the_action(sqlite_store: SQLiteStore) -> None:
    """Two runners fire one due retry; the one whose claim is refused does not run the action."""
    clock = ManualClock(T0)
    calls: list[int] = []
    registry = Registry()
    other: list[Runner[ManualScheduler]] = []

    def flaky(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("first attempt fails")
        other[0].run_due()  # the other runner fires the same alarm while this one runs
        return "done"

    registry.register("test.flaky", flaky)
    a = Runner(registry, sqlite_store, ManualScheduler(clock), lease_seconds=LEASE)
    other.append(Runner(registry, sqlite_store, ManualScheduler(clock), lease_seconds=LEASE))
    eid = a.start(workflow(flaky_node()))
    clock.advance(1)
    assert a.run_due() == [eid]
    assert calls == [1, 2]
    assert a.get(eid).status is ExecutionStatus.COMPLETED


def test_cancelling_a_running_execution_drops_its_steps_outcome(
    sqlite_store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Cancel while a start's first action runs: the cancel is kept, the step's outcome is
    dropped, and ``start`` returns the id (with a warning) instead of StaleVersionError."""
    clock = ManualClock(T0)
    registry = Registry()
    holder: list[Runner[ManualScheduler]] = []

    def cancelled_meanwhile(params: Any, ctx: ActionContext) -> Any:
        holder[0].cancel(ctx.execution_id, "operator")
        return "done"

    registry.register("test.slow", cancelled_meanwhile)
    wf = workflow(
        Node(key="a", type="test.slow"),
        Node(key="b", type="data.set_data", params={"fields": {"b": 1}}),
    )
    holder.append(Runner(registry, sqlite_store, ManualScheduler(clock)))
    assert holder[0].start(wf, execution_id="c1") == "c1"  # the id, to look at, not an error
    assert "execution 'c1' was cancelled while its first step ran" in caplog.text
    done = sqlite_store.load("c1")[0]
    assert done.status is ExecutionStatus.CANCELLED
    record = done.node("a")
    assert record is not None
    assert record.status is NodeStatus.CANCELLED
    assert "b" not in done.node_executions


def test_a_long_action_keeps_its_lease(tmp_path: Path) -> None:
    """While an action runs past a third of the lease, its lease is renewed: nobody takes it."""
    store = SQLiteStore(tmp_path / "lease.db")
    registry = Registry()
    observed: list[Any] = []
    renewed = threading.Event()

    def long_action(params: Any, ctx: ActionContext) -> Any:
        first, version = store.load(ctx.execution_id)
        assert first.lease_expires_at is not None
        # Renewed twice: a new save with a later lease each time (real time, a bounded wait).
        assert wait_until(lambda: store.load(ctx.execution_id)[1] >= version + 2, timeout=30)
        later = store.load(ctx.execution_id)[0]
        assert later.lease_expires_at is not None
        observed.append(later.lease_expires_at > first.lease_expires_at)
        observed.append(bystander.run_due())  # another runner finds nothing to take up
        renewed.set()
        return "done"

    registry.register("test.long", long_action)
    bystander = Runner(registry, store, lease_seconds=0.6)  # the same (real) clock
    owner = Runner(registry, store, lease_seconds=0.6)
    try:
        eid = owner.start(workflow(Node(key="a", type="test.long")))
        assert renewed.is_set()
        assert observed == [True, []]
        assert owner.get(eid).status is ExecutionStatus.COMPLETED
    finally:
        store.close()


def test_lease_and_interruption_settings_are_checked() -> None:
    """Bad ``lease_seconds`` or ``max_interruptions`` fail in one line naming the field."""
    with pytest.raises(InvalidSettingsError, match="lease_seconds=0"):
        Runner(lease_seconds=0)
    with pytest.raises(InvalidSettingsError, match="max_interruptions=0"):
        Runner(max_interruptions=0)


def test_recovery_is_an_event() -> None:
    """Taking a running execution up emits ``execution_recovered`` naming the attempt."""
    assert EventType.EXECUTION_RECOVERED.value == "execution_recovered"


# -- a real process killed inside the first attempt of `prana run` -------------------------


def test_prana_run_killed_in_its_first_attempt_is_finished_by_a_worker(tmp_path: Path) -> None:
    """kill -9 of ``prana run`` inside its first action: stored; a worker finishes it."""
    db = str(tmp_path / "prana.db")
    wf = workflow(
        Node(
            key="gate",
            type="fault.gate",
            params={"started": str(tmp_path / "started"), "release": str(tmp_path / "release")},
        )
    )
    path = tmp_path / "wf.json"
    path.write_text(dumps_workflow(wf))
    run = Prana(["run", str(path), "--db", db, "--actions", ACTIONS, "--lease", "1"], cwd=tmp_path)
    try:
        assert wait_until(lambda: (tmp_path / "started").exists()), run.stderr
        run.kill()
    finally:
        run.stop()
    store = SQLiteStore(db)
    try:
        [row] = store.list()
        assert row.status is ExecutionStatus.RUNNING
        (tmp_path / "release").touch()
        worker = Prana(["worker", "--db", db, "--actions", ACTIONS, "--poll", "0.05"], cwd=tmp_path)
        try:
            assert wait_until(lambda: store.load(row.id)[0].status is ExecutionStatus.COMPLETED)
        finally:
            worker.stop()
        done = store.load(row.id)[0]
    finally:
        store.close()
    record = done.node("gate")
    assert record is not None
    assert [(a.number, a.outcome) for a in record.attempts] == [
        (1, AttemptOutcome.INTERRUPTED),
        (1, AttemptOutcome.COMPLETED),
    ]
    assert json.loads(json.dumps(done.output)) == {"released": True}


def test_a_start_taken_over_during_its_first_action_returns_its_id(
    sqlite_store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Another runner takes the start over (its lease ended while the first action ran): the
    start returns the id with a warning, and the other runner's run is what is stored."""
    clock = ManualClock(T0)
    registry = Registry()
    other: list[Runner[ManualScheduler]] = []
    calls: list[int] = []

    def slow(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            clock.advance(LEASE + 1)  # this first attempt outlives its lease...
            assert other[0].run_due() == [ctx.execution_id]  # ...and is taken over
        return {"call": len(calls)}

    registry.register("test.slow", slow)
    first = Runner(registry, sqlite_store, ManualScheduler(clock), lease_seconds=LEASE)
    other.append(Runner(registry, sqlite_store, ManualScheduler(clock), lease_seconds=LEASE))
    assert first.start(workflow(Node(key="a", type="test.slow")), execution_id="t1") == "t1"
    assert "execution 't1' was taken over by another runner (now completed)" in caplog.text
    done = sqlite_store.load("t1")[0]
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"call": 2}


def test_a_duplicate_id_on_start_still_raises(sqlite_store: SQLiteStore) -> None:
    """A start whose id another start stored first is refused: nothing of it was stored."""
    registry = Registry()
    runner = Runner(registry, sqlite_store, ManualScheduler(ManualClock(T0)))
    runner.start(workflow(Node(key="a", type="data.set_data", params={"fields": {}})), None,
                 execution_id="d1")  # fmt: skip
    with pytest.raises(StaleVersionError, match="already exists"):
        runner.start(workflow(), None, execution_id="d1")
