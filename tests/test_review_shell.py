"""A review of the shell (``scheduling/``) against DESIGN.md section 6 and docs/extending.md.

Some tests pin the bugs that review found (each fixed since; the test keeps it fixed), the
others check promises that had no test of their own. Time is driven by ``ManualClock`` and
``ManualScheduler``; nothing sleeps.
"""

from __future__ import annotations

import itertools
import sqlite3
import uuid
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from prana import (
    ActionContext,
    AttemptOutcome,
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    RecordError,
    Registry,
    ResumeError,
    RetryPolicy,
    Suspend,
    Workflow,
    WorkflowExecution,
)
from prana.testing import ManualClock
from scheduling import ExecutionNotFound, Runner, StaleVersionError
from scheduling._cli import main
from scheduling._runner import child_execution_id
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from scheduling.abc import ExecutionStore

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


# -- helpers --------------------------------------------------------------------------------


class Flaky:
    """Fails its first ``fails`` calls with ``ConnectionError``; records each call's attempt."""

    def __init__(self, fails: int = 0) -> None:
        self.fails = fails
        self.calls: list[int] = []
        self.hook: Callable[[ActionContext], object] | None = None

    def __call__(self, params: Any, ctx: ActionContext) -> Any:
        self.calls.append(ctx.attempt)
        hook, self.hook = self.hook, None
        if hook is not None:
            hook(ctx)
        if len(self.calls) <= self.fails:
            raise ConnectionError(f"down (call {len(self.calls)})")
        return {"ok": True, "attempt": ctx.attempt}


def chain(*nodes: Node, wid: str = "wf", version: int = 1) -> Workflow:
    """A trigger followed by ``nodes`` in a line."""
    keys = ["start", *(n.key for n in nodes)]
    return Workflow(
        id=wid,
        version=version,
        nodes=(Node(key="start", type="manual.trigger"), *nodes),
        connections=tuple(Connection(from_node=a, to_node=b) for a, b in itertools.pairwise(keys)),
    )


def flaky_node(attempts: int = 4, key: str = "r") -> Node:
    policy = RetryPolicy(max_attempts=attempts, backoff="constant", initial_delay=1)
    return Node(key=key, type="test.flaky", settings=NodeSettings(retry=policy))


def sub_node(child: str, mode: str, **params: Any) -> Node:
    return Node(
        key="sub",
        type="workflow.execute_workflow",
        params={"workflow_id": child, "mode": mode, **params},
    )


def webhook_node(**params: Any) -> Node:
    return Node(key="w", type="wait.wait", params={"mode": "webhook", **params})


class Rig:
    """A runner over ``store`` with a ManualScheduler on ``clock`` and ``test.flaky`` registered."""

    def __init__(
        self,
        store: ExecutionStore,
        clock: ManualClock | None = None,
        fails: int = 0,
        flaky: Flaky | None = None,
    ) -> None:
        self.clock = clock if clock is not None else ManualClock(T0)
        self.flaky = flaky if flaky is not None else Flaky(fails)
        self.registry = Registry()
        self.registry.register("test.flaky", self.flaky)
        self.registry.register("test.approval", _pause, _approve)
        self.store = store
        self.scheduler = ManualScheduler(self.clock)
        self.runner = Runner(self.registry, store, self.scheduler, self.clock)


def _pause(params: Any, ctx: ActionContext) -> Any:
    return Suspend("approval", {"node": ctx.node_key})


_APPROVE_HOOKS: list[Callable[[], object]] = []


def _approve(params: Any, ctx: ActionContext, data: Any) -> Any:
    while _APPROVE_HOOKS:
        _APPROVE_HOOKS.pop()()
    return data


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


class BrokenArm(ManualScheduler):
    """A ManualScheduler whose ``schedule`` fails: a crash between the save and the arm."""

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        raise RuntimeError("the process died before arming")


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


# -- persist, then arm ----------------------------------------------------------------------


def test_every_alarm_is_armed_after_its_outcome_is_saved(store: ExecutionStore) -> None:
    """Each alarm the runner arms is for a due time the store already holds (persist, then arm)."""
    clock = ManualClock(T0)
    flaky = Flaky(fails=2)
    registry = Registry()
    registry.register("test.flaky", flaky)
    spy = ArmSpy(clock, store)
    wf = chain(
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


def test_a_crash_between_save_and_arm_loses_nothing(tmp_path: Path) -> None:
    """If arming fails after the save, a new runner over the store re-arms and finishes the run."""
    path = tmp_path / "crash.sqlite3"
    clock = ManualClock(T0)
    first = Rig(SQLiteStore(path), clock, fails=1)
    first.runner = Runner(first.registry, first.store, BrokenArm(clock), clock)
    with first.runner as runner, pytest.raises(RuntimeError, match="before arming"):
        runner.start(chain(flaky_node()))
    (summary,) = first.store.list()
    assert summary.status is ExecutionStatus.SUSPENDED
    assert summary.due_at == T0 + timedelta(seconds=1)
    first.store.close()
    second = Rig(SQLiteStore(path), clock)
    with second.runner as runner:
        assert second.scheduler.pending() == [(summary.id, T0 + timedelta(seconds=1))]
        second.scheduler.advance(1)
        done = runner.get(summary.id)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert (first.flaky.calls, second.flaky.calls) == ([1], [2])


# -- compare-and-set between two runners ----------------------------------------------------


def test_two_runners_firing_one_alarm_make_one_transition(
    shared_db: Callable[[], ExecutionStore],
) -> None:
    """Two runners fire the same alarm at once: the action may run twice, the record moves once."""
    clock = ManualClock(T0)
    a = Rig(shared_db(), clock, fails=1)
    b = Rig(shared_db(), clock, flaky=a.flaky)
    with a.runner as runner_a:
        eid = runner_a.start(chain(flaky_node()))
        with b.runner:
            # While runner A runs attempt 2, runner B fires the same (already due) alarm.
            a.flaky.hook = lambda ctx: b.scheduler.run_due()
            assert a.scheduler.advance(1) == [eid]
            done, version = a.store.load(eid)
    assert a.flaky.calls == [1, 2, 2]  # at-least-once: attempt 2 ran in both runners
    assert done.status is ExecutionStatus.COMPLETED
    assert version == 2  # one transition after the start: B's; A's save was refused
    run = done.node("r")
    assert run is not None
    assert [attempt.number for attempt in run.attempts] == [1, 2]


def test_a_resume_racing_a_cancel_does_nothing_after_it(
    shared_db: Callable[[], ExecutionStore],
) -> None:
    """A resume racing another runner's cancel is dropped; the node after it never runs."""
    clock = ManualClock(T0)
    a = Rig(shared_db(), clock, fails=1)
    b = Rig(shared_db(), clock)
    after = Node(key="after", type="data.set_data", params={"fields": {"after": True}})
    with a.runner as runner_a, b.runner as runner_b:
        eid = runner_a.start(chain(flaky_node(), after))
        a.flaky.hook = lambda ctx: runner_b.cancel(ctx.execution_id, "operator")
        a.scheduler.advance(60)
        done = runner_a.get(eid)
        assert a.scheduler.pending() == []
    assert done.status is ExecutionStatus.CANCELLED
    assert "after" not in done.node_executions
    assert a.flaky.calls == [1, 2]


def test_a_deliver_that_loses_to_a_cancel_raises(
    shared_db: Callable[[], ExecutionStore],
) -> None:
    """A ``deliver`` whose resume runs while another runner cancels raises and changes nothing."""
    clock = ManualClock(T0)
    a = Rig(shared_db(), clock)
    b = Rig(shared_db(), clock)
    with a.runner as runner_a, b.runner as runner_b:
        eid = runner_a.start(chain(Node(key="ok", type="test.approval")))
        _APPROVE_HOOKS.append(lambda: runner_b.cancel(eid))
        with pytest.raises(StaleVersionError):
            runner_a.deliver(eid, {"approved": True})
        assert runner_a.get(eid).status is ExecutionStatus.CANCELLED


def test_cancel_during_backoff_on_sqlite_removes_the_alarm(tmp_path: Path) -> None:
    """Cancelling in backoff: the action never runs again, the alarm is gone, even after restart."""
    path = tmp_path / "cancel.sqlite3"
    clock = ManualClock(T0)
    first = Rig(SQLiteStore(path), clock, fails=100)
    with first.runner as runner:
        eid = runner.start(chain(flaky_node()))
        runner.cancel(eid)
        assert first.scheduler.pending() == []
    assert list(first.store.alarms()) == []
    first.store.close()
    second = Rig(SQLiteStore(path), clock)
    with second.runner as runner:
        assert second.scheduler.advance(600) == []
        assert runner.get(eid).status is ExecutionStatus.CANCELLED
    second.store.close()
    assert (first.flaky.calls, second.flaky.calls) == ([1], [])


# -- webhooks -------------------------------------------------------------------------------


def test_deliver_after_the_expiry_alarm_fired_raises() -> None:
    """Once the expiry alarm applied ``on_error: continue``, a late ``deliver`` raises."""
    rig = Rig(MemoryStore())
    wait = webhook_node(timeout_hours=1)
    wait = Node(
        key="w", type="wait.wait", params=wait.params, settings=NodeSettings(on_error="continue")
    )
    with rig.runner as runner:
        eid = runner.start(chain(wait))
        rig.scheduler.advance(3600)
        done = runner.get(eid)
        with pytest.raises(ResumeError, match="completed"):
            runner.deliver(eid, {"late": True})
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output["code"] == "webhook_timeout"


def test_deliver_past_the_webhook_expiry_is_refused_even_before_the_alarm() -> None:
    """A webhook past ``expires_at`` is expired by the clock, not by whether its alarm ran yet."""
    rig = Rig(MemoryStore())
    with rig.runner as runner:
        eid = runner.start(chain(webhook_node(timeout_hours=1)))
        rig.clock.advance(7200)  # the runner was busy: the alarm has not fired yet
        with pytest.raises(ResumeError):
            runner.deliver(eid, {"late": True})
        assert runner.get(eid).status is not ExecutionStatus.COMPLETED


# -- definitions ----------------------------------------------------------------------------


def test_definitions_are_loaded_once_per_runner() -> None:
    """A runner resuming many retries of one workflow loads its definition from the store once."""
    store = CountingStore()
    clock = ManualClock(T0)
    Rig(store, clock, fails=3).runner.start(chain(flaky_node(attempts=5)))
    fresh = Rig(store, clock, fails=0)  # another process: nothing cached yet
    with fresh.runner as runner:
        fresh.scheduler.advance(1)
        (eid,) = [s.id for s in store.list()]
        assert runner.get(eid).status is ExecutionStatus.COMPLETED
    assert store.definition_loads == 1


def test_a_versionless_child_runs_the_highest_version_even_with_gaps() -> None:
    """A sub-workflow without a version runs the highest stored one, whatever the numbering."""
    rig = Rig(MemoryStore())
    v1 = chain(Node(key="r", type="data.set_data", params={"value": "v1"}), wid="child")
    v3 = chain(Node(key="r", type="data.set_data", params={"value": "v3"}), wid="child", version=3)
    rig.store.save_workflow(v1)
    rig.store.save_workflow(v3)
    with rig.runner as runner:
        pid = runner.start(chain(sub_node("child", "sync"), wid="parent"))
        sub = runner.get(pid).node("sub")
    assert sub is not None
    assert sub.output == "v3"


# -- wait -----------------------------------------------------------------------------------


def test_wait_returns_once_only_the_outside_can_move_the_execution() -> None:
    """``wait`` returns for completed, failed, cancelled, webhook and custom-kind executions."""
    rig = Rig(MemoryStore(), fails=100)
    with rig.runner as runner:
        completed = runner.start(
            chain(Node(key="d", type="data.set_data", params={"value": 1}), wid="c")
        )
        webhook = runner.start(chain(webhook_node(), wid="h"))
        custom = runner.start(chain(Node(key="ok", type="test.approval"), wid="a"))
        failed = runner.start(chain(flaky_node(attempts=1), wid="f"))
        cancelled = runner.start(chain(flaky_node(), wid="x"))
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
    rig = Rig(MemoryStore(), fails=100)
    rig.runner.register_workflow(chain(flaky_node(), wid="child"))
    with rig.runner as runner:
        timer = runner.start(
            chain(Node(key="t", type="wait.wait", params={"mode": "interval", "duration": 5}))
        )
        parent = runner.start(chain(sub_node("child", "sync"), wid="parent"))
        for eid in (timer, parent):
            with pytest.raises(TimeoutError, match="still suspended"):
                runner.wait(eid, timeout=0)
        with pytest.raises(ExecutionNotFound):
            runner.wait("nope", timeout=0)


def test_wait_returns_when_a_parent_waits_on_a_child_that_waits_on_a_webhook() -> None:
    """A parent whose sync child waits for a webhook waits for the outside: ``wait`` returns."""
    rig = Rig(MemoryStore())
    rig.runner.register_workflow(chain(webhook_node(), wid="child"))
    with rig.runner as runner:
        pid = runner.start(chain(sub_node("child", "sync"), wid="parent"))
        assert runner.wait(pid, timeout=0).status is ExecutionStatus.SUSPENDED


# -- lateness -------------------------------------------------------------------------------


def test_a_retry_due_while_down_fires_late_and_show_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A retry due while no runner was up fires on restart; its attempt has due_at < started_at."""
    path = tmp_path / "late.sqlite3"
    clock = ManualClock(T0)
    first = Rig(SQLiteStore(path), clock, fails=1)
    with first.runner as runner:
        eid = runner.start(chain(flaky_node()))
    first.store.close()
    clock.advance(90)
    second = Rig(SQLiteStore(path), clock)
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
    assert "(record version 2)" in out


# -- sub-workflows --------------------------------------------------------------------------


def test_nested_sub_workflows_report_up_two_levels() -> None:
    """A grandchild's retry completes it, then the child, then the top parent, all by alarms."""
    rig = Rig(MemoryStore(serialize=True), fails=1)
    rig.runner.register_workflow(chain(flaky_node(), wid="grandchild"))
    rig.runner.register_workflow(chain(sub_node("grandchild", "sync"), wid="child"))
    with rig.runner as runner:
        top = runner.start(chain(sub_node("child", "async"), wid="top"))
        rig.scheduler.advance(0)  # starts the async child, which runs its sync grandchild
        child_id = child_execution_id(runner.get(top))
        assert child_id is not None
        grandchild_id = child_execution_id(runner.get(child_id))
        assert grandchild_id is not None
        assert runner.get(grandchild_id).status is ExecutionStatus.SUSPENDED
        rig.scheduler.advance(1)
        done = runner.get(top)
        statuses = [runner.get(i).status for i in (grandchild_id, child_id)]
    assert statuses == [ExecutionStatus.COMPLETED, ExecutionStatus.COMPLETED]
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 2}
    assert rig.flaky.calls == [1, 2]


def test_a_failed_async_child_fails_its_parent() -> None:
    """An async child that runs out of retries resumes its parent with the failure."""
    rig = Rig(MemoryStore(), fails=100)
    rig.runner.register_workflow(chain(flaky_node(attempts=2), wid="child"))
    with rig.runner as runner:
        pid = runner.start(chain(sub_node("child", "async"), wid="parent"))
        rig.scheduler.advance(5)
        done = runner.get(pid)
    assert done.status is ExecutionStatus.FAILED
    assert done.error is not None
    assert done.error.node_key == "sub"
    assert rig.flaky.calls == [1, 2]


def test_restart_while_an_async_child_retries_finishes_both(tmp_path: Path) -> None:
    """A runner that stops while an async child waits on a retry: the next one finishes both."""
    path = tmp_path / "async.sqlite3"
    clock = ManualClock(T0)
    first = Rig(SQLiteStore(path), clock, fails=1)
    first.runner.register_workflow(chain(flaky_node(), wid="child"))
    after = Node(key="after", type="data.set_data", params={"fields": {"after": True}})
    with first.runner as runner:
        pid = runner.start(chain(sub_node("child", "async"), after, wid="parent"))
        first.scheduler.advance(0)
        cid = child_execution_id(runner.get(pid))
        assert cid is not None
        assert runner.get(cid).status is ExecutionStatus.SUSPENDED
    first.store.close()
    second = Rig(SQLiteStore(path), clock)
    with second.runner as runner:
        assert second.scheduler.pending() == [(cid, T0 + timedelta(seconds=1))]
        second.scheduler.advance(1)
        done = runner.get(pid)
    second.store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 2, "after": True}
    assert (first.flaky.calls, second.flaky.calls) == ([1], [2])


def test_sub_workflow_timeout_fails_the_parent_node_and_cancels_the_child() -> None:
    """A child still waiting at ``timeout_ms`` is cancelled; the parent's node fails (timeout)."""
    rig = Rig(MemoryStore())
    rig.runner.register_workflow(chain(webhook_node(), wid="child"))
    with rig.runner as runner:
        pid = runner.start(chain(sub_node("child", "sync", timeout_ms=5000), wid="parent"))
        cid = child_execution_id(runner.get(pid))
        assert cid is not None
        assert rig.scheduler.advance(5) == [pid]
        parent, child = runner.get(pid), runner.get(cid)
    assert parent.status is ExecutionStatus.FAILED
    assert child.status is ExecutionStatus.CANCELLED
    sub = parent.node("sub")
    assert sub is not None
    assert sub.attempts[-1].outcome is AttemptOutcome.FAILED


def test_run_due_times_out_a_sub_workflow_past_its_deadline() -> None:
    """A cron-style ``run_due`` after the deadline times the waiting parent out."""
    rig = Rig(MemoryStore())
    rig.runner.register_workflow(chain(webhook_node(), wid="child"))
    pid = rig.runner.start(chain(sub_node("child", "sync", timeout_ms=5000), wid="parent"))
    rig.clock.advance(3600)
    rig.runner.run_due()
    assert rig.runner.get(pid).status is ExecutionStatus.FAILED


def test_no_child_runs_for_a_parent_cancelled_just_before_the_child_starts() -> None:
    """A cancel landing between the parent's save and its child's start leaves no child running."""
    store = CountingStore()
    rig = Rig(store, fails=100)
    rig.runner.register_workflow(chain(flaky_node(), wid="child"))

    def cancel_parent_first(execution_id: str) -> None:
        if ":sub:" in execution_id:  # the runner looks the child up, about to start it
            store.on_load = None
            rig.runner.cancel(execution_id.split(":")[0], "operator")

    with rig.runner as runner:
        store.on_load = cancel_parent_first
        pid = runner.start(chain(sub_node("child", "sync"), wid="parent"))
        rig.scheduler.advance(60)
        cid = child_execution_id(runner.get(pid)) or ""
        try:
            child_status: ExecutionStatus | None = runner.get(cid).status
        except ExecutionNotFound:
            child_status = None
    assert runner.get(pid).status is ExecutionStatus.CANCELLED
    assert child_status in (None, ExecutionStatus.CANCELLED)
    assert len(rig.flaky.calls) <= 1


# -- the command line -----------------------------------------------------------------------


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(code: int, err: str, message: str) -> None:
    assert code == 2
    assert err.startswith("prana: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_cli_mistakes_on_ids_limits_and_databases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown ids, a bad limit, a non-database file and an ended execution: one line, exit 2."""
    db = str(tmp_path / "cli.db")
    rig = Rig(SQLiteStore(db))
    done = rig.runner.start(chain(Node(key="d", type="data.set_data", params={"value": 1})))
    rig.store.close()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    cases = [
        (["cancel", "nope", "--db", db], "no execution 'nope' is stored"),
        (["list", "--limit", "0", "--db", db], "limit=0"),
        (["list", "--db", str(garbage)], str(garbage)),
        (["deliver", done, "--data", "1", "--db", db], "completed"),
        (["cancel", done, "--db", db], "completed"),
    ]
    for argv, message in cases:
        code, _, err = _cli(argv, capsys)
        _assert_one_line_error(code, err, message)


def test_cli_list_rows_carry_a_corrupt_status_as_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose status column is garbage makes ``list`` a one-line RecordError naming the id."""
    db = tmp_path / "corrupt.db"
    rig = Rig(SQLiteStore(db))
    eid = rig.runner.start(chain(webhook_node()))
    rig.store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE prana_executions SET status = 'zombie' WHERE id = ?", (eid,))
    conn.close()
    code, _, err = _cli(["list", "--db", str(db)], capsys)
    _assert_one_line_error(code, err, repr(eid))
    store = SQLiteStore(db)
    try:
        with pytest.raises(RecordError, match="zombie"):
            store.list()
    finally:
        store.close()


def test_cli_a_binary_workflow_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workflow file that is not UTF-8 text is refused in one line with exit code 2."""
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00\x01 not text")
    code, _, err = _cli(["run", str(path), "--db", str(tmp_path / "x.db")], capsys)
    _assert_one_line_error(code, err, "binary.json")


def test_cli_an_actions_module_whose_register_raises_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``--actions`` module whose ``register`` raises is reported in one line, exit code 2."""
    actions = tmp_path / "raising_actions.py"
    actions.write_text("def register(registry):\n    raise RuntimeError('boom')\n")
    wf = tmp_path / "wf.json"
    wf.write_text(
        '{"id": "w", "nodes": [{"key": "start", "type": "manual.trigger"}], "connections": []}'
    )
    code, _, err = _cli(
        ["run", str(wf), "--actions", str(actions), "--db", str(tmp_path / "x.db")], capsys
    )
    _assert_one_line_error(code, err, "boom")


def test_cli_cancel_of_a_child_succeeds_and_a_runner_moves_the_parent_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cancelling a child from the CLI (no --actions) succeeds; the next runner resumes its parent.

    The parent uses a custom action, so the CLI without ``--actions`` cannot resume it (every
    resume validates the action types); the cancel still stands, and a runner that has the
    actions reconciles the parent when it opens.
    """
    db = tmp_path / "child.db"
    rig = Rig(SQLiteStore(db))
    rig.runner.register_workflow(chain(webhook_node(), wid="child"))
    with rig.runner as runner:
        pid = runner.start(chain(sub_node("child", "sync"), flaky_node(), wid="parent"))
        cid = child_execution_id(runner.get(pid))
    assert cid is not None
    code, out, _ = _cli(["cancel", cid, "--db", str(db)], capsys)
    assert (code, out.strip()) == (0, f"execution {cid}: cancelled")
    assert rig.store.load(pid)[0].status is ExecutionStatus.SUSPENDED
    with rig.runner:
        parent = rig.store.load(pid)[0]
    rig.store.close()
    assert parent.status is ExecutionStatus.FAILED
    assert parent.error is not None
    assert parent.error.code == "sub_workflow_failed"


# -- stores ---------------------------------------------------------------------------------


def test_a_stale_save_keeps_the_due_time_and_status(store: ExecutionStore) -> None:
    """A refused save through a runner's record leaves version, status and alarm untouched."""
    rig = Rig(store, fails=1)
    eid = rig.runner.start(chain(flaky_node()))
    execution, version = store.load(eid)
    cancelled_elsewhere = rig.runner.cancel(eid)
    with pytest.raises(StaleVersionError):
        store.save(execution, version)
    stored, now_version = store.load(eid)
    assert now_version == version + 1
    assert stored.status is ExecutionStatus.CANCELLED
    assert stored == cancelled_elsewhere
    assert list(store.alarms()) == []
    assert list(store.find_due(T0 + timedelta(days=1))) == []


def test_a_corrupt_definition_raises_record_error_naming_it(tmp_path: Path) -> None:
    """A stored definition that cannot be read raises RecordError naming its id and version."""
    store = SQLiteStore(tmp_path / "defs.sqlite3")
    try:
        store.save_workflow(chain(webhook_node(), wid="d", version=7))
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE prana_workflows SET data = '{\"id\": 1}'")
        conn.close()
        fresh = SQLiteStore(store.path)
        try:
            with pytest.raises(RecordError, match="'d' version 7"):
                fresh.load_workflow("d", 7)
        finally:
            fresh.close()
    finally:
        store.close()
