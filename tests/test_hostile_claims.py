"""This session's speed paths tried as an attacker and an operator would (issue 11).

Light claims, batched alarms, unreadable-row listings and lazy runs: each test here failed
on the main of the time, and each names what it was.
"""

from __future__ import annotations

import sqlite3
import subprocess
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from doubles import T0, flaky_node, webhook_node, workflow
from processes import run_prana

from prana import ActionContext, ExecutionStatus, Node, RecordError, Registry
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

LEASE = 30.0


def prana(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``prana ARGV`` on the database ``tmp_path/prana.db``."""
    return run_prana(tmp_path, *argv, "--db", str(tmp_path / "prana.db"))


def edit(path: Path, sql: str, *args: Any) -> None:
    """Edit the database by hand, as an operator with write access might."""
    with sqlite3.connect(path) as conn:
        conn.execute(sql, args)
    conn.close()


def row(path: Path, execution_id: str) -> tuple[Any, ...]:
    """The stored row, every column."""
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT * FROM prana_executions WHERE id = ?", (execution_id,))
        result = tuple(found.fetchone())
    conn.close()
    return result


# -- light claims over hand-edited rows -----------------------------------------------------


def test_a_running_row_over_a_webhook_wait_is_unreadable_never_resumed(tmp_path: Path) -> None:
    """Was: a row whose status was edited to 'running' over a webhook wait read as a light
    claim, and recovery resumed the wait with no data: the webhook passed without a
    delivery and the next action ran. Now it is a RecordError naming the execution and its
    status, the worker leaves it as stored, and nothing runs."""
    path = tmp_path / "prana.db"
    clock = ManualClock(T0)
    ran: list[str] = []

    def after(params: Any, ctx: ActionContext) -> Any:
        ran.append(ctx.execution_id)
        return "ran"

    registry = Registry()
    registry.register("test.after", after)
    wf = workflow(webhook_node(), Node(key="a", type="test.after"))
    store = SQLiteStore(path)
    with Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE) as runner:
        eid = runner.start(wf)
    edit(path, "UPDATE prana_executions SET status = 'running', due_at = 0 WHERE id = ?", eid)
    before = row(path, eid)
    clock.advance(100)
    runner = Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE)
    assert runner.run_due() == []
    assert ran == []
    assert row(path, eid) == before
    with pytest.raises(RecordError, match=eid) as raised:
        store.load(eid)
    assert raised.value.problems[0].startswith("status: the row says 'running'")
    assert "'webhook' wait" in raised.value.problems[0]
    store.close()
    shown = prana(tmp_path, "show", eid)
    assert shown.returncode == 5
    assert "Traceback" not in shown.stderr
    assert shown.stderr.count("\n") == 1
    assert eid in shown.stderr
    assert "status:" in shown.stderr


def test_a_claimed_row_still_reads_running(tmp_path: Path) -> None:
    """The check above leaves real claims alone: a claimed retry reads running."""
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", lambda params, ctx: (_ for _ in ()).throw(OSError("x")))
    store = SQLiteStore(tmp_path / "prana.db")
    with Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE) as runner:
        eid = runner.start(workflow(flaky_node()))
    execution, version = store.load(eid)
    assert execution.status is ExecutionStatus.SUSPENDED
    store.claim(eid, version, clock() + timedelta(seconds=LEASE), clock())
    assert store.load(eid)[0].status is ExecutionStatus.RUNNING
    store.close()


def test_prana_cancel_without_actions_cancels_a_claimed_execution(tmp_path: Path) -> None:
    """Was: ``prana cancel ID`` (no --actions) of an execution whose retry a worker had
    claimed (running its attempt) failed with "unknown action type", exit 2, not naming the
    execution, where a suspended or checkpointed one cancels without actions. Now it is
    cancelled."""
    path = tmp_path / "prana.db"
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", lambda params, ctx: (_ for _ in ()).throw(OSError("x")))
    store = SQLiteStore(path)
    with Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE) as runner:
        eid = runner.start(workflow(flaky_node()))
    _, version = store.load(eid)
    store.claim(eid, version, clock() + timedelta(seconds=LEASE), clock())  # a worker's claim
    store.close()
    cancelled = prana(tmp_path, "cancel", eid)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled" in cancelled.stdout
    store = SQLiteStore(path)
    execution = store.load(eid)[0]
    assert execution.status is ExecutionStatus.CANCELLED
    record = execution.node("r")
    assert record is not None
    assert [a.outcome.value for a in record.attempts] == ["failed"]
    store.close()
