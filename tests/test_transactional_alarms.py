"""Transactional alarms: a ``PostgresStore`` save and its procrastinate job commit together.

Every test has a schema of its own holding both the store's tables and procrastinate's,
and a queue of its own; the schema is dropped afterwards with everything in it. Tests wait
on conditions with timeouts and never sleep.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from doubles import Flaky
from psycopg import sql

from prana import (
    Connection,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    NodeSettings,
    Registry,
    Workflow,
    WorkflowExecution,
    cancel_execution,
    execute_workflow,
)
from scheduling import Runner
from scheduling._errors import ExecutionNotFound
from scheduling.adapters.procrastinate import ProcrastinateScheduler
from scheduling.stores.postgres import PostgresStore

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

TIMEOUT = 10.0  # seconds to wait for something that must happen; only reached on failure


class CountingScheduler(ProcrastinateScheduler):
    """A ``ProcrastinateScheduler`` that counts the arming it does outside any save."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scheduled: list[str] = []
        self.cancelled: list[str] = []

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        self.scheduled.append(execution_id)
        super().schedule(execution_id, due_at)

    def cancel(self, execution_id: str) -> None:
        self.cancelled.append(execution_id)
        super().cancel(execution_id)


class Env:
    """A schema and queue of this test's own, with the stores and schedulers made over them."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = f"prana_tx_{uuid.uuid4().hex[:12]}"
        self.queue = f"prana-tx-{uuid.uuid4().hex[:12]}"
        self.stores: list[PostgresStore] = []
        self.schedulers: list[ProcrastinateScheduler] = []

    def scheduler(self) -> CountingScheduler:
        scheduler = CountingScheduler(
            self.dsn, queue=self.queue, schema=self.schema, poll_interval=0.05
        )
        self.schedulers.append(scheduler)
        return scheduler

    def store(self, **options: Any) -> PostgresStore:
        store = PostgresStore(self.dsn, schema=self.schema, **options)
        self.stores.append(store)
        return store

    def jobs(self) -> list[tuple[str, str, datetime]]:
        """This test's jobs as (execution id, status, scheduled_at), oldest first."""
        query = sql.SQL(
            "SELECT args->>'execution_id', status::text, scheduled_at"
            " FROM {}.procrastinate_jobs WHERE queue_name = %s ORDER BY id"
        ).format(sql.Identifier(self.schema))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(query, (self.queue,)).fetchall()
        return [(str(eid), str(status), at) for eid, status, at in rows]

    def rows(self) -> list[tuple[str, int]]:
        """The stored executions as (id, version), read on a connection of its own."""
        query = sql.SQL("SELECT id, version FROM {} ORDER BY seq").format(
            sql.Identifier(self.schema, "prana_executions")
        )
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return [(str(i), int(v)) for i, v in conn.execute(query).fetchall()]


@pytest.fixture
def env(postgres_dsn: str) -> Iterator[Env]:
    """A fresh schema and queue; afterwards everything is closed and the schema dropped."""
    env = Env(postgres_dsn)
    try:
        yield env
    finally:
        for scheduler in env.schedulers:
            scheduler.shutdown()
        for store in env.stores:
            store.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(env.schema))
            )


def flaky_workflow(delay_ms: int) -> Workflow:
    return Workflow(
        id=f"wf-{uuid.uuid4().hex[:8]}",
        nodes=(
            Node(key="start", type="manual.trigger"),
            Node(
                key="r",
                type="test.flaky",
                settings=NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=delay_ms),
            ),
        ),
        connections=(Connection(from_node="start", to_node="r"),),
    )


def suspended_on_retry(delay_ms: int = 60_000) -> WorkflowExecution:
    """A fresh execution suspended on a retry ``delay_ms`` from now."""
    registry = Registry()
    registry.register("test.flaky", Flaky(fails=1))
    outcome = execute_workflow(flaky_workflow(delay_ms), {"x": 1}, registry=registry)
    execution = outcome.execution
    assert execution is not None
    assert execution.due_at is not None
    return execution


def test_a_save_with_the_hook_commits_its_job_with_the_row(env: Env) -> None:
    """The job the hook defers appears with the row at commit, and neither is visible before."""
    scheduler = env.scheduler()
    scheduler.setup()
    seen_inside: list[tuple[list[tuple[str, int]], list[tuple[str, str, datetime]]]] = []

    def arm(conn: psycopg.Connection[Any], execution: WorkflowExecution) -> None:
        assert execution.due_at is not None
        scheduler.schedule_in(conn, execution.id, execution.due_at)
        seen_inside.append((env.rows(), env.jobs()))  # another connection, mid-transaction

    store = env.store(on_save=arm)
    execution = suspended_on_retry()
    assert store.save(execution, None) == 1
    assert seen_inside == [([], [])]
    assert env.rows() == [(execution.id, 1)]
    assert env.jobs() == [(execution.id, "todo", execution.due_at)]


def test_a_hook_that_raises_stores_nothing_and_arms_nothing(env: Env) -> None:
    """A raising hook rolls back the row write and the job it deferred; ``save`` raises it."""
    scheduler = env.scheduler()
    scheduler.setup()
    calls: list[str] = []

    def arm_then_fail(conn: psycopg.Connection[Any], execution: WorkflowExecution) -> None:
        assert execution.due_at is not None
        scheduler.schedule_in(conn, execution.id, execution.due_at)
        calls.append(execution.id)
        if len(calls) > 1:
            raise RuntimeError("hook failed")

    store = env.store(on_save=arm_then_fail)
    first = suspended_on_retry()
    store.save(first, None)
    later = suspended_on_retry(delay_ms=30_000)
    with pytest.raises(RuntimeError, match="hook failed"):
        store.save(later, None)
    with pytest.raises(ExecutionNotFound):
        store.load(later.id)
    assert env.rows() == [(first.id, 1)]
    assert env.jobs() == [(first.id, "todo", first.due_at)]


def test_a_cancel_save_removes_the_queued_job_in_its_transaction(env: Env) -> None:
    """``cancel_in`` in the hook deletes the job only if the cancelled state commits."""
    scheduler = env.scheduler()
    scheduler.setup()
    fail = [False]

    def arm(conn: psycopg.Connection[Any], execution: WorkflowExecution) -> None:
        if execution.due_at is None:
            scheduler.cancel_in(conn, execution.id)
        else:
            scheduler.schedule_in(conn, execution.id, execution.due_at)
        if fail[0]:
            raise RuntimeError("hook failed")

    store = env.store(on_save=arm)
    execution = suspended_on_retry()
    store.save(execution, None)
    cancelled = cancel_execution(execution, "test")
    fail[0] = True
    with pytest.raises(RuntimeError):
        store.save(cancelled, 1)
    assert env.jobs() == [(execution.id, "todo", execution.due_at)]
    fail[0] = False
    assert store.save(cancelled, 1) == 2
    assert env.jobs() == []
    assert store.load(execution.id)[0].status is ExecutionStatus.CANCELLED


def test_runner_arms_a_retry_inside_its_saves_until_it_completes(env: Env) -> None:
    """With a PostgresStore and a ProcrastinateScheduler a retried execution completes,
    every alarm armed by its saves' hook and none by a later ``schedule``."""
    registry = Registry()
    flaky = Flaky(fails=2)
    registry.register("test.flaky", flaky)
    store = env.store()
    scheduler = env.scheduler()
    runner = Runner(registry, store=store, scheduler=scheduler)
    assert store.on_save is None
    with runner:
        assert store.on_save is not None
        eid = runner.start(flaky_workflow(100), {"x": 1})
        assert [job[0] for job in env.jobs()] == [eid]
        done = runner.wait(eid, timeout=TIMEOUT)
    assert store.on_save is None  # removed at close
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 3}
    assert flaky.calls == 3
    assert scheduler.scheduled == []
    assert env.jobs() == []


def test_runner_cancel_removes_the_queued_job_with_the_save(env: Env) -> None:
    """``Runner.cancel`` deletes the alarm in the cancel's own save, not by a later call."""
    registry = Registry()
    registry.register("test.flaky", Flaky(fails=1))
    store = env.store()
    scheduler = env.scheduler()
    with Runner(registry, store=store, scheduler=scheduler) as runner:
        eid = runner.start(flaky_workflow(60_000), {"x": 1})
        assert [(job[0], job[1]) for job in env.jobs()] == [(eid, "todo")]
        cancelled = runner.cancel(eid)
        assert cancelled.status is ExecutionStatus.CANCELLED
        assert env.jobs() == []
    assert scheduler.cancelled == []
    assert scheduler.scheduled == []


def test_runner_keeps_a_hook_it_did_not_install(env: Env) -> None:
    """A store whose ``on_save`` is taken keeps it; the runner then arms after each save."""
    registry = Registry()
    registry.register("test.flaky", Flaky(fails=1))
    seen: list[str] = []

    def mine(conn: psycopg.Connection[Any], execution: WorkflowExecution) -> None:
        seen.append(execution.id)

    store = env.store(on_save=mine)
    scheduler = env.scheduler()
    with Runner(registry, store=store, scheduler=scheduler) as runner:
        eid = runner.start(flaky_workflow(60_000), {"x": 1})
        assert store.on_save is mine
    assert store.on_save is mine
    assert seen == [eid] * 3  # every save: before each action (trigger, flaky), the outcome
    assert scheduler.scheduled == [eid]


def test_same_database_compares_host_port_and_dbname() -> None:
    """``same_database`` matches a dsn naming this scheduler's server and database only."""
    scheduler = ProcrastinateScheduler("postgresql://u@db.example:5432/app", schema="jobs")
    assert scheduler.same_database("postgresql://other@db.example/app?sslmode=require")
    assert not scheduler.same_database("postgresql://u@db.example:5432/elsewhere")
    assert not scheduler.same_database("postgresql://u@db2.example:5432/app")
    assert not scheduler.same_database("postgresql://u@db.example:5433/app")
    assert not scheduler.same_database("not a dsn ===")


def test_a_non_callable_on_save_is_refused() -> None:
    """``PostgresStore(on_save=...)`` must be a callable (or None)."""
    with pytest.raises(InvalidSettingsError, match="on_save"):
        PostgresStore("postgresql://u@localhost/db", on_save="arm")  # type: ignore[arg-type]
