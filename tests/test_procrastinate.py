"""``ProcrastinateScheduler``: the Scheduler protocol over procrastinate's PostgreSQL job queue.

Every test works in a schema and a queue of its own (procrastinate's tables are created in
the schema, never in ``public``), and the schema is dropped afterwards with every job in
it. Alarms are due at most 0.2 s ahead and workers poll every 0.05 s; the tests wait on
conditions with timeouts and never sleep.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from doubles import Flaky
from procrastinate import App, JobContext, PsycopgConnector
from procrastinate.jobs import Job
from procrastinate.testing import InMemoryConnector
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import PoolTimeout

from prana import (
    Connection,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    NodeSettings,
    Registry,
    Workflow,
)
from scheduling import Runner, StoreError
from scheduling.abc import BatchingScheduler, BulkScheduler, Scheduler
from scheduling.adapters._procrastinate_batch import TAKE as _TAKE
from scheduling.adapters.procrastinate import (
    TASK_NAME,
    ProcrastinateScheduler,
    SchedulerStateError,
    prana_resume,
)
from scheduling.stores.postgres import PostgresStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

pytestmark = pytest.mark.postgres

UTC = timezone.utc
TIMEOUT = 10.0  # seconds to wait for something that must happen; only reached on failure


def now() -> datetime:
    return datetime.now(UTC)


class Fired:
    """A fire callback recording every id it gets, shared by any number of workers."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.args: list[tuple[Any, ...]] = []
        self._cond = threading.Condition()

    def __call__(self, *args: Any) -> None:
        with self._cond:
            self.args.append(args)
            self.ids.append(args[0])
            self._cond.notify_all()

    def wait_for(self, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.ids) >= count, timeout=TIMEOUT)

    def wait_for_ids(self, ids: set[str], timeout: float = TIMEOUT) -> bool:
        """Wait until every id in ``ids`` fired (at least once)."""
        with self._cond:
            return self._cond.wait_for(lambda: ids <= set(self.ids), timeout=timeout)


class Env:
    """A schema and a queue of this test's own, and the schedulers made over them."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = f"prana_proc_{uuid.uuid4().hex[:12]}"
        self.queue = f"prana-test-{uuid.uuid4().hex[:12]}"
        self.schedulers: list[ProcrastinateScheduler] = []

    def scheduler(self, dsn: str | None = None, **options: Any) -> ProcrastinateScheduler:
        options.setdefault("poll_interval", 0.05)
        scheduler = ProcrastinateScheduler(
            dsn or self.dsn, queue=self.queue, schema=self.schema, **options
        )
        self.schedulers.append(scheduler)
        return scheduler

    def jobs(self, status: str | None = None) -> list[dict[str, Any]]:
        """This test's jobs, oldest first."""
        query = sql.SQL(
            "SELECT id, status::text AS status, args, lock, queueing_lock, scheduled_at, task_name "
            "FROM {}.procrastinate_jobs WHERE queue_name = %s "
            "AND (%s::text IS NULL OR status::text = %s) ORDER BY id"
        ).format(sql.Identifier(self.schema))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cursor = conn.cursor(row_factory=psycopg.rows.dict_row)
            return cursor.execute(query, (self.queue, status, status)).fetchall()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
        """Check ``predicate`` (each check is a query) every 20 ms until true or ``timeout``."""
        deadline = time.monotonic() + timeout
        pause = threading.Event()  # never set: its wait is the pause between checks
        while not predicate():
            if time.monotonic() > deadline:
                return False
            pause.wait(0.02)
        return True


@pytest.fixture
def env(postgres_dsn: str) -> Iterator[Env]:
    """A fresh schema and queue; afterwards every scheduler is shut down and the schema dropped."""
    env = Env(postgres_dsn)
    try:
        yield env
    finally:
        for scheduler in env.schedulers:
            scheduler.shutdown()
        # procrastinate's triggers name their tables unqualified: delete on its search_path
        options = f"-c search_path={env.schema}"
        with psycopg.connect(postgres_dsn, autocommit=True, options=options) as conn:
            table = sql.Identifier(env.schema, "procrastinate_jobs")
            exists = conn.execute(
                "SELECT to_regclass(%s)", (f"{env.schema}.procrastinate_jobs",)
            ).fetchone()
            if exists is not None and exists[0] is not None:
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE queue_name = %s").format(table), (env.queue,)
                )
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(env.schema))
            )


# -- the protocol ------------------------------------------------------------------------


def test_is_a_scheduler(env: Env) -> None:
    """The adapter satisfies the runtime-checkable ``Scheduler`` protocol."""
    assert isinstance(env.scheduler(), Scheduler)


def test_past_due_alarm_fires_with_only_the_id(env: Env) -> None:
    """An alarm already overdue fires promptly, calling fire with the execution id alone."""
    scheduler = env.scheduler()
    fired = Fired()
    scheduler.start(fired)
    scheduler.schedule("exec-1", now() - timedelta(hours=1))
    assert fired.wait_for(1)
    assert fired.args == [("exec-1",)]


def test_the_job_holds_only_the_id_and_both_locks(env: Env) -> None:
    """The queued job's only argument is the id; its lock and queueing lock name the execution."""
    scheduler = env.scheduler()
    due = now() + timedelta(hours=1)
    scheduler.schedule("exec-1", due)
    [job] = env.jobs()
    assert job["args"] == {"execution_id": "exec-1"}
    assert job["task_name"] == TASK_NAME
    assert job["lock"] == job["queueing_lock"] == scheduler.lock_key("exec-1")
    assert scheduler.lock_key("exec-1") == f"{env.queue}:exec-1"
    assert (job["status"], job["scheduled_at"]) == ("todo", due)


def test_schedule_replaces_with_a_later_time(env: Env) -> None:
    """Arming again for later leaves one queued job, due at the later time."""
    scheduler = env.scheduler()
    soon, later = now() + timedelta(seconds=30), now() + timedelta(hours=2)
    scheduler.schedule("exec-1", soon)
    scheduler.schedule("exec-1", later)
    assert [(job["status"], job["scheduled_at"]) for job in env.jobs()] == [("todo", later)]


def test_schedule_replaces_with_an_earlier_time(env: Env) -> None:
    """Arming again for earlier fires at the earlier time, once, with no job left behind."""
    scheduler = env.scheduler()
    scheduler.schedule("exec-1", now() + timedelta(hours=2))
    scheduler.schedule("exec-1", now() + timedelta(seconds=0.1))
    assert len(env.jobs("todo")) == 1
    fired = Fired()
    scheduler.start(fired)
    assert fired.wait_for(1)
    assert env.wait_until(lambda: env.jobs() == [])  # succeeded jobs are deleted
    assert fired.ids == ["exec-1"]


def test_cancel_removes_the_queued_job_and_ignores_unknown_ids(env: Env) -> None:
    """A cancelled alarm never fires; cancelling an unknown id is a no-op."""
    scheduler = env.scheduler()
    scheduler.schedule("cancelled", now() - timedelta(seconds=1))
    scheduler.cancel("cancelled")
    scheduler.cancel("never-armed")
    assert env.jobs() == []
    scheduler.schedule("kept", now() - timedelta(seconds=1))
    fired = Fired()
    scheduler.start(fired)
    assert fired.wait_for(1)
    assert fired.ids == ["kept"]


def test_several_ids_fire_each_once(env: Env) -> None:
    """Alarms of different executions are independent: each fires once."""
    scheduler = env.scheduler()
    fired = Fired()
    scheduler.start(fired)
    base = now()
    for index in range(5):
        scheduler.schedule(f"exec-{index}", base + timedelta(seconds=0.02 * index))
    assert fired.wait_for(5)
    assert sorted(fired.ids) == [f"exec-{index}" for index in range(5)]


def test_alarms_after_a_failing_one_still_fire(env: Env) -> None:
    """The scheduler conformance check (tests/test_schedulers.py) over procrastinate: a fire
    that raises never stops the worker; alarms armed before and after it still fire."""
    scheduler = env.scheduler()
    fired = Fired()

    def fire(execution_id: str) -> None:
        fired(execution_id)
        if execution_id.startswith("bad"):
            raise RuntimeError(f"boom {execution_id}")

    scheduler.start(fire)
    scheduler.schedule("bad-1", now())
    scheduler.schedule("good-1", now() + timedelta(seconds=0.05))
    assert fired.wait_for_ids({"bad-1", "good-1"})
    scheduler.schedule("bad-2", now())
    assert fired.wait_for_ids({"bad-2"})
    scheduler.schedule("good-2", now())
    assert fired.wait_for_ids({"good-2"})
    assert fired.ids[:4] == ["bad-1", "good-1", "bad-2", "good-2"]


def test_an_awaitable_returned_by_fire_is_run(env: Env) -> None:
    """A fire callback returning a coroutine has it run to completion in the job's thread."""
    scheduler = env.scheduler()
    fired = Fired()

    async def resume(execution_id: str) -> None:
        await asyncio.sleep(0)
        fired(execution_id)

    scheduler.start(resume)
    scheduler.schedule("exec-1", now())
    assert fired.wait_for(1)
    assert fired.ids == ["exec-1"]


def test_run_worker_serves_in_the_calling_thread(env: Env) -> None:
    """With ``run_in_thread=False`` alarms fire only while ``run_worker`` runs; shutdown ends it."""
    scheduler = env.scheduler(run_in_thread=False)
    fired = Fired()
    scheduler.start(fired)
    scheduler.schedule("exec-1", now())
    assert env.jobs("todo") != []  # nothing serves the queue yet
    worker = threading.Thread(target=scheduler.run_worker)
    worker.start()
    assert fired.wait_for(1)
    scheduler.shutdown()
    worker.join(TIMEOUT)
    assert not worker.is_alive()
    assert fired.ids == ["exec-1"]


def test_a_job_run_without_a_fire_callback_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """The task run by a worker that has no prana fire callback logs a warning and returns."""
    job = Job(queue="q", lock=None, queueing_lock=None, task_name=TASK_NAME)
    context = JobContext(
        app=App(connector=InMemoryConnector()),
        job=job,
        start_timestamp=0.0,
        abort_reason=lambda: None,
    )
    prana_resume(context, "exec-1")
    assert "exec-1" in caplog.text
    assert "without a prana fire callback" in caplog.text


def test_an_own_app_runs_the_worker(env: Env) -> None:
    """``app=`` runs the worker on the caller's App, with ``prana_resume`` registered on it."""
    conninfo = make_conninfo(env.dsn, options=f"-c search_path={env.schema}")
    app = App(connector=PsycopgConnector(conninfo=conninfo))
    scheduler = env.scheduler(app=app)
    assert TASK_NAME in app.tasks
    assert repr(scheduler) == f"ProcrastinateScheduler(queue={env.queue!r}, schema={env.schema!r})"
    assert env.scheduler(app=app).app is app  # registering twice is a no-op
    fired = Fired()
    scheduler.start(fired)
    scheduler.schedule("exec-1", now())
    assert fired.wait_for(1)


def test_naive_due_time_is_refused(env: Env) -> None:
    """A naive datetime raises ``InvalidSettingsError`` naming the call and the fix."""
    scheduler = env.scheduler()
    with pytest.raises(InvalidSettingsError, match="naive"):
        scheduler.schedule("exec-1", datetime(2030, 1, 1))  # noqa: DTZ001 - the point


def test_start_twice_is_refused_and_restart_works(env: Env) -> None:
    """``start`` twice raises ``SchedulerStateError``; after ``shutdown`` it starts again."""
    scheduler = env.scheduler()
    scheduler.start(Fired())
    with pytest.raises(SchedulerStateError, match="already started"):
        scheduler.start(Fired())
    scheduler.shutdown()
    fired = Fired()
    scheduler.start(fired)
    scheduler.schedule("exec-1", now())
    assert fired.wait_for(1)


def test_shutdown_keeps_the_queued_jobs_for_the_next_worker(env: Env) -> None:
    """Alarms are in PostgreSQL: a worker's shutdown drops none, and the next worker fires them."""
    first = env.scheduler()
    first.start(Fired())
    first.schedule("exec-1", now() + timedelta(hours=1))
    first.shutdown()
    assert len(env.jobs("todo")) == 1
    second = env.scheduler()
    fired = Fired()
    second.start(fired)
    second.schedule("exec-1", now())  # the re-arm a starting runner makes
    assert fired.wait_for(1)
    assert fired.ids == ["exec-1"]


def test_bad_settings_are_refused(postgres_dsn: str) -> None:
    """Bad constructor values raise ``InvalidSettingsError`` naming the field."""
    with pytest.raises(InvalidSettingsError, match="dsn"):
        ProcrastinateScheduler(None)
    with pytest.raises(InvalidSettingsError, match="queue"):
        ProcrastinateScheduler(postgres_dsn, queue="")
    with pytest.raises(InvalidSettingsError, match="schema"):
        ProcrastinateScheduler(postgres_dsn, schema="bad name;")
    with pytest.raises(InvalidSettingsError, match="poll_interval"):
        ProcrastinateScheduler(postgres_dsn, poll_interval=0)
    with pytest.raises(InvalidSettingsError, match="concurrency"):
        ProcrastinateScheduler(postgres_dsn, concurrency=0)
    with pytest.raises(InvalidSettingsError, match="app"):
        ProcrastinateScheduler(postgres_dsn, app="not an app")  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match="fire"):
        ProcrastinateScheduler(postgres_dsn).start("not callable")  # type: ignore[arg-type]


def test_unreachable_database_fails_start_clearly(env: Env) -> None:
    """``start`` over a database that cannot be reached raises a one-line ``StoreError``."""
    scheduler = ProcrastinateScheduler(
        "postgresql://postgres@127.0.0.1:1/test", queue=env.queue, connect_timeout_seconds=0.3
    )
    with pytest.raises(StoreError, match=r"^procrastinate job queue: setup failed: ") as caught:
        scheduler.start(Fired())
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value.__cause__, PoolTimeout)
    with pytest.raises(StoreError):  # and it may be retried: the failed start left nothing
        scheduler.start(Fired())


def test_run_worker_needs_start_and_foreground_mode(env: Env) -> None:
    """``run_worker`` before ``start`` or on a threaded scheduler raises ``SchedulerStateError``."""
    foreground = env.scheduler(run_in_thread=False)
    with pytest.raises(SchedulerStateError, match="start"):
        foreground.run_worker()
    threaded = env.scheduler()
    threaded.start(Fired())
    with pytest.raises(SchedulerStateError, match="run_in_thread=False"):
        threaded.run_worker()


def test_setup_is_idempotent(env: Env) -> None:
    """``setup`` creates the schema and procrastinate's tables once, and again is a no-op."""
    scheduler = env.scheduler(auto_setup=False)
    scheduler.setup()
    scheduler.schedule("exec-1", now() + timedelta(hours=1))
    scheduler.setup()
    assert len(env.jobs()) == 1


# -- the caller's transaction ------------------------------------------------------------


def test_schedule_in_follows_the_callers_transaction(env: Env) -> None:
    """``schedule_in`` defers in the caller's transaction: rollback drops it, commit keeps it."""
    scheduler = env.scheduler()
    scheduler.setup()
    due = now() + timedelta(hours=1)
    with psycopg.connect(env.dsn) as conn:  # default search_path: public only
        with conn.transaction(force_rollback=True):
            scheduler.schedule_in(conn, "rolled-back", due)
            assert conn.execute("SHOW search_path").fetchone() != (env.schema,)
        assert env.jobs() == []
        with conn.transaction():
            scheduler.schedule_in(conn, "committed", due)
            scheduler.schedule_in(conn, "committed", due + timedelta(minutes=1))
            assert env.jobs() == []  # not visible before the commit
        conn.commit()
    [job] = env.jobs()
    assert (job["args"], job["scheduled_at"]) == (
        {"execution_id": "committed"},
        due + timedelta(minutes=1),
    )
    with psycopg.connect(env.dsn) as conn, conn.transaction():
        scheduler.cancel_in(conn, "committed")
    assert env.jobs() == []


# -- several workers ---------------------------------------------------------------------


def test_concurrent_rearms_leave_one_queued_job(env: Env) -> None:
    """Re-arming one id from two schedulers in four threads at once leaves exactly one job."""
    schedulers = [env.scheduler(), env.scheduler()]
    schedulers[0].setup()
    base = now() + timedelta(hours=1)
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def rearm(worker: int) -> None:
        go.wait(TIMEOUT)
        try:
            for step in range(15):
                schedulers[worker % 2].schedule("shared", base + timedelta(seconds=step))
        except Exception as error:  # noqa: BLE001 - the assert below reports it
            errors.append(error)

    threads = [threading.Thread(target=rearm, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert errors == []
    [job] = env.jobs()
    assert (job["status"], job["args"]) == ("todo", {"execution_id": "shared"})


def test_two_workers_fire_each_alarm_exactly_once(env: Env) -> None:
    """Two workers on one queue share the alarms: each fires once in total."""
    fired = Fired()
    first, second = env.scheduler(concurrency=2), env.scheduler(concurrency=2)
    first.start(fired)
    second.start(fired)
    ids = [f"exec-{index}" for index in range(20)]
    base = now()
    for index, execution_id in enumerate(ids):
        (first if index % 2 else second).schedule(
            execution_id, base + timedelta(seconds=0.01 * index)
        )
    assert fired.wait_for(len(ids))
    assert env.wait_until(lambda: env.jobs() == [])
    first.shutdown()
    second.shutdown()
    assert Counter(fired.ids) == dict.fromkeys(ids, 1)


# -- end to end with the runner ----------------------------------------------------------


def test_runner_over_postgres_completes_a_retried_execution(env: Env) -> None:
    """A Runner with a PostgresStore and this scheduler retries a flaky node until it completes."""
    registry = Registry()
    flaky = Flaky(fails=2)
    registry.register("test.flaky", flaky)
    workflow = Workflow(
        id=f"wf-{uuid.uuid4().hex[:8]}",
        nodes=(
            Node(key="start", type="manual.trigger"),
            Node(
                key="r",
                type="test.flaky",
                settings=NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=100),
            ),
        ),
        connections=(Connection(from_node="start", to_node="r"),),
    )
    store = PostgresStore(env.dsn, schema=env.schema)
    try:
        with Runner(registry, store=store, scheduler=env.scheduler()) as runner:
            eid = runner.start(workflow, {"x": 1})
            assert runner.get(eid).status is ExecutionStatus.SUSPENDED
            done = runner.wait(eid, timeout=TIMEOUT)
    finally:
        store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert done.output == {"ok": True, "attempt": 3}
    assert flaky.calls == 3
    assert env.jobs() == []


# -- crashes and lost connections ----------------------------------------------------------


def insert_doing_job(
    env: Env, execution_id: str, *, heartbeat_age_seconds: float = 0, worker: int | None = None
) -> int:
    """A job of ``execution_id`` left ``doing`` by a worker last heard of that long ago
    (or under ``worker``, an existing one)."""
    options = f"-c search_path={env.schema}"
    key = f"{env.queue}:{execution_id}"
    with psycopg.connect(env.dsn, autocommit=True, options=options) as conn:
        if worker is None:
            [worker] = conn.execute(
                "INSERT INTO procrastinate_workers (last_heartbeat)"
                " VALUES (now() - make_interval(secs => %s)) RETURNING id",
                (heartbeat_age_seconds,),
            ).fetchone() or (None,)
        [job] = conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, queueing_lock, args,"
            " status, scheduled_at, worker_id) VALUES (%s, %s, %s, %s, %s, 'doing', now(), %s)"
            " RETURNING id",
            (
                env.queue,
                TASK_NAME,
                key,
                key,
                psycopg.types.json.Jsonb({"execution_id": execution_id}),
                worker,
            ),
        ).fetchone() or (None,)
    return int(job)


def test_a_job_a_dead_worker_left_doing_fires_again(env: Env) -> None:
    """A worker killed mid-job leaves it ``doing``: a live worker retries it (it fires again)."""
    scheduler = env.scheduler()
    scheduler.setup()
    insert_doing_job(env, "exec-1", heartbeat_age_seconds=3600)
    fired = Fired()
    scheduler.start(fired)
    assert fired.wait_for(1)
    assert env.wait_until(lambda: env.jobs() == [])
    assert fired.ids == ["exec-1"]


def test_a_dead_workers_job_never_blocks_a_new_alarm_of_its_execution(env: Env) -> None:
    """The lock a dead worker's job held is freed: the execution's next alarm fires, once."""
    scheduler = env.scheduler()
    scheduler.setup()
    insert_doing_job(env, "exec-1", heartbeat_age_seconds=3600)
    scheduler.schedule("exec-1", now())
    fired = Fired()
    scheduler.start(fired)
    assert fired.wait_for(1)
    assert env.wait_until(lambda: env.jobs() == [])
    assert fired.ids == ["exec-1"]


def test_a_job_left_doing_under_a_live_worker_that_does_not_run_it_is_taken_up(
    env: Env,
) -> None:
    """A job ``doing`` under a worker that beats but does not run it no longer holds its
    execution: the execution's next alarm fires.

    A crash of the server can take back the commit that ended a job while the step's save
    survives (seen in the fault test: executions stuck for as long as the workers lived).
    """
    scheduler = env.scheduler(stalled_after_seconds=0.6)
    fired = Fired()
    scheduler.start(fired)
    assert env.wait_until(
        lambda: scheduler._worker is not None and scheduler._worker.worker_id is not None
    )
    assert scheduler._worker is not None
    live = scheduler._worker.worker_id
    insert_doing_job(env, "exec-1", worker=live)
    scheduler.schedule("exec-1", now())
    assert fired.wait_for_ids({"exec-1"})
    assert env.wait_until(lambda: env.jobs() == [])
    assert fired.ids == ["exec-1"]


@pytest.mark.parametrize("batched", [False, True])
def test_jobs_the_live_worker_runs_are_not_orphans(
    env: Env, batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long alarms' jobs, ``doing`` under their live worker for many recovery rounds, are
    left alone: those procrastinate runs, and those a batch took beside its own."""
    scheduler = env.scheduler(stalled_after_seconds=0.3, concurrency=1, batch=4)
    rounds: list[int] = []
    own_doing = scheduler.own_doing

    def counted(worker_id: int) -> set[int]:
        rounds.append(worker_id)
        return own_doing(worker_id)

    monkeypatch.setattr(scheduler, "own_doing", counted)
    scheduler.setup()
    ids = {"exec-long-1", "exec-long-2"}
    if batched:  # the job's own alarm fires alone, quick; then its batch takes the long ones
        scheduler.schedule("exec-first", now())
    for execution_id in sorted(ids):
        scheduler.schedule(execution_id, now())
    started, gate = Fired(), threading.Event()
    held = held_until(gate, started)
    if batched:

        def held_batch(batch: Sequence[str]) -> None:
            if list(batch) == ["exec-first"]:
                return
            for execution_id in batch:
                started(execution_id)
            gate.wait(3 * TIMEOUT)

        scheduler.start_batched(held, held_batch)
    else:
        scheduler.start(held)
    try:
        assert started.wait_for_ids(ids if batched else {"exec-long-1"})
        seen = len(rounds)
        assert env.wait_until(lambda: len(rounds) >= seen + 4)  # an orphan goes within two
        doing = [row["status"] for row in env.jobs() if row["status"] == "doing"]
        assert len(doing) == (3 if batched else 1)  # batched: its own job and the two taken
        assert len(started.ids) == len(set(started.ids))
    finally:
        gate.set()


def test_a_live_workers_job_is_left_alone(env: Env) -> None:
    """A ``doing`` job whose worker still beats is not taken: alarms run one at a time."""
    scheduler = env.scheduler(stalled_after_seconds=60)
    scheduler.setup()
    job = insert_doing_job(env, "exec-1", heartbeat_age_seconds=0)
    dead = insert_doing_job(env, "exec-2", heartbeat_age_seconds=61)
    assert scheduler.recover_stalled() == 1
    assert [(row["id"], row["status"]) for row in env.jobs()] == [(job, "doing"), (dead, "todo")]


def test_recovery_goes_on_after_an_unexpected_error(
    env: Env, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery round that raises something other than ``StoreError`` is logged, not fatal.

    Recovery runs beside the worker as long as it lives: were one unexpected error to end
    it, a live worker would never again take up a dead worker's jobs, and their executions
    would stay running (seen once in the fault test, under load).
    """
    caplog.set_level(logging.INFO, logger="scheduling.adapters.procrastinate")
    scheduler = env.scheduler(stalled_after_seconds=0.3)
    scheduler.setup()
    rounds: list[int] = []
    recover = scheduler.recover_stalled

    def failing_once() -> int:
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("an unexpected failure")
        return recover()

    monkeypatch.setattr(scheduler, "recover_stalled", failing_once)
    insert_doing_job(env, "exec-1", heartbeat_age_seconds=3600)
    fired = Fired()
    scheduler.start(fired)
    assert fired.wait_for_ids({"exec-1"})
    assert len(rounds) >= 2
    assert "recovering stalled jobs failed" in caplog.text
    assert "an unexpected failure" in caplog.text


def held_until(gate: threading.Event, started: Fired) -> Callable[[str], None]:
    """A fire callback that records each alarm, then holds its job thread until ``gate``."""

    def fire(execution_id: str) -> None:
        started(execution_id)
        gate.wait(3 * TIMEOUT)  # past every wait of the test: only the test ends it

    return fire


def test_recovery_runs_while_every_job_thread_is_busy(env: Env) -> None:
    """Recovery has a thread of its own: alarms that hold every job thread never delay it.

    procrastinate runs a sync task in the event loop's default executor (a few threads);
    were recovery queued there too, long alarms would hold a dead worker's jobs, and so
    their executions, until one of them ended.
    """
    threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor
    busy = threads + 1
    scheduler = env.scheduler(stalled_after_seconds=0.3, concurrency=busy)
    scheduler.setup()
    for index in range(busy):
        scheduler.schedule(f"busy-{index}", now())
    started, gate = Fired(), threading.Event()
    fire = held_until(gate, started)
    scheduler.start(fire)
    try:
        assert started.wait_for(threads)  # every thread of the default executor is held
        dead = insert_doing_job(env, "exec-dead", heartbeat_age_seconds=3600)
        assert env.wait_until(
            lambda: any(row["id"] == dead and row["status"] != "doing" for row in env.jobs())
        )
    finally:
        gate.set()


def test_concurrency_is_how_many_alarms_run_at_once_beyond_the_default_threads(
    env: Env,
) -> None:
    """``concurrency`` above asyncio's default executor size still runs that many at once.

    procrastinate runs a sync job in the loop's default executor, of min(32, cores + 4)
    threads: the worker sizes it, or a larger ``concurrency`` would silently be that.
    """
    wanted = min(32, (os.cpu_count() or 1) + 4) + 3
    scheduler = env.scheduler(concurrency=wanted)
    scheduler.setup()
    for index in range(wanted):
        scheduler.schedule(f"slow-{index}", now())
    started, gate = Fired(), threading.Event()
    fire = held_until(gate, started)
    scheduler.start(fire)
    try:
        assert started.wait_for(wanted)
        assert not gate.is_set()  # every one of them began before any ended
    finally:
        gate.set()


def test_recovery_never_waits_long_on_an_execution_locked_elsewhere(env: Env) -> None:
    """A stalled job whose execution another transaction holds is left for the next round.

    Waiting on that lock for good would hold every other stalled job (and the pruning)
    behind a transaction recovery knows nothing of; it waits a moment (locks held that
    long are usual), then the next round, a beat later, takes it up.
    """
    # A wait would fail the round after 5 s (LockNotAvailable) instead of hanging the test.
    scheduler = env.scheduler(
        stalled_after_seconds=60, dsn=make_conninfo(env.dsn, options="-c lock_timeout=5000")
    )
    scheduler.setup()
    held = insert_doing_job(env, "exec-held", heartbeat_age_seconds=3600)
    free = insert_doing_job(env, "exec-free", heartbeat_age_seconds=3600)
    key = next(row["lock"] for row in env.jobs() if row["id"] == held)
    with psycopg.connect(env.dsn) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
        assert scheduler.recover_stalled() == 1
        assert {row["id"]: row["status"] for row in env.jobs()} == {held: "doing", free: "todo"}
        holder.rollback()
    assert scheduler.recover_stalled() == 1
    assert {row["id"]: row["status"] for row in env.jobs()} == {held: "todo", free: "todo"}


def test_the_worker_carries_on_after_its_connections_are_cut(env: Env) -> None:
    """Every connection of a running worker ended by the server: it reconnects and fires.

    An alarm running at the cut may fire twice (at least once: its end could not be
    recorded); none is lost. Reconnecting takes seconds (psycopg's pool backs off), so the
    waits here are longer.
    """
    reconnect = 3 * TIMEOUT
    name = f"prana-cut-{uuid.uuid4().hex[:10]}"
    scheduler = env.scheduler(dsn=make_conninfo(env.dsn, application_name=name))
    fired = Fired()
    scheduler.start(fired)
    other = env.scheduler()

    def cut() -> int:
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            return len(
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %s",
                    (name,),
                ).fetchall()
            )

    for round_ in range(2):
        assert env.wait_until(lambda: cut() > 0, reconnect)
        other.schedule(f"exec-{round_}", now())
        assert fired.wait_for_ids({f"exec-{round_}"}, reconnect)
    assert cut() > 0
    scheduler.schedule("own", now())  # its own connections were cut too
    assert fired.wait_for_ids({"own"}, reconnect)
    assert env.wait_until(lambda: env.jobs() == [], reconnect)


def test_a_worker_the_others_took_for_dead_says_so_and_registers_again(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose row the others removed (it was silent past its lease) registers again.

    Deleting the row is what stalled-job recovery does to a worker frozen longer than
    ``stalled_after_seconds``; the worker learns it when it next takes a job.
    """
    caplog.set_level(logging.INFO, logger="scheduling.adapters.procrastinate")
    scheduler = env.scheduler(stalled_after_seconds=45)
    fired = Fired()
    scheduler.start(fired)
    workers = sql.SQL("SELECT id FROM {}").format(
        sql.Identifier(env.schema, "procrastinate_workers")
    )

    def registered() -> list[tuple[Any, ...]]:
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            return conn.execute(workers).fetchall()

    assert env.wait_until(lambda: len(registered()) == 1)
    (first,) = registered()
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE id = %s").format(
                sql.Identifier(env.schema, "procrastinate_workers")
            ),
            first,
        )
    scheduler.schedule("exec-1", now())
    assert fired.wait_for_ids({"exec-1"})
    again = registered()
    assert len(again) == 1
    assert again != [first]
    assert "silent longer than its lease (stalled_after_seconds, --lease) of 45 s" in caplog.text
    assert "took its alarms over; it registers again" in caplog.text
    assert "lost the database" not in caplog.text
    assert "foreign key" not in caplog.text


# -- speed rules (issue 11) ----------------------------------------------------------------


def test_arming_an_alarm_already_queued_for_that_time_writes_nothing(env: Env) -> None:
    """Re-arming for the same due time keeps the queued job; another time replaces it."""
    scheduler = env.scheduler()
    due = now() + timedelta(hours=1)
    scheduler.schedule("exec-1", due)
    [first] = env.jobs()
    scheduler.schedule("exec-1", due)
    assert [job["id"] for job in env.jobs()] == [first["id"]]  # the same row: no write
    later = due + timedelta(seconds=1)
    scheduler.schedule("exec-1", later)
    [replaced] = env.jobs()
    assert replaced["id"] != first["id"]
    assert replaced["scheduled_at"] == later


def test_only_the_workers_own_bookkeeping_commits_asynchronously(env: Env) -> None:
    """The worker's app connections run synchronous_commit=off; the scheduler's pool does not."""
    scheduler = env.scheduler()
    connector = scheduler.app.connector
    assert isinstance(connector, PsycopgConnector)

    async def worker_setting() -> str:
        async with scheduler.app.open_async():
            rows = await connector.execute_query_all_async("SHOW synchronous_commit")
        return str(rows[0]["synchronous_commit"])

    assert asyncio.run(worker_setting()) == "off"

    def own_setting(conn: psycopg.Connection[Any]) -> str:
        row = conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None
        return str(row[0])

    assert scheduler._run("reading a setting", own_setting) == "on"
    durable = env.scheduler(async_job_commits=False)
    assert durable.app.connector is not connector
    assert isinstance(durable.app.connector, PsycopgConnector)

    async def durable_setting() -> str:
        async with durable.app.open_async():
            rows = await durable.app.connector.execute_query_all_async("SHOW synchronous_commit")
        return str(rows[0]["synchronous_commit"])

    assert asyncio.run(durable_setting()) == "on"


# -- one job, several alarms (``batch``) ------------------------------------------------


def doing_counts(env: Env, fired: Fired, count: int, **options: Any) -> list[int]:
    """Arm ``count`` alarms due now, start one worker, and count jobs ``doing`` at each fire."""
    scheduler = env.scheduler(concurrency=1, **options)
    scheduler.setup()
    seen: list[int] = []

    def fire(execution_id: str) -> None:
        seen.append(len(env.jobs("doing")))
        fired(execution_id)

    for index in range(count):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=1))
    scheduler.start(fire)
    assert fired.wait_for(count)
    assert env.wait_until(lambda: env.jobs() == [])
    assert sorted(fired.ids) == [f"exec-{index}" for index in range(count)]
    return seen


def test_a_job_goes_on_firing_the_alarms_due_with_it(env: Env) -> None:
    """After its own alarm a job takes the next due job itself: its own stays ``doing``."""
    assert doing_counts(env, Fired(), 5, batch=10) == [1, 2, 2, 2, 2]


def test_a_job_fires_at_most_batch_alarms(env: Env) -> None:
    """``batch=2``: its own and one more, then procrastinate fetches the next job."""
    assert doing_counts(env, Fired(), 4, batch=2) == [1, 2, 1, 2]


def test_batch_one_fires_one_alarm_per_job(env: Env) -> None:
    assert doing_counts(env, Fired(), 3, batch=1) == [1, 1, 1]


def test_a_job_never_takes_one_whose_execution_is_firing_elsewhere(env: Env) -> None:
    """The ``lock`` holds for jobs taken too: a live worker's ``doing`` job keeps its twin."""
    scheduler = env.scheduler(concurrency=1, batch=10)
    scheduler.setup()
    insert_doing_job(env, "exec-1", heartbeat_age_seconds=0)
    [doing] = env.jobs()
    scheduler.schedule("exec-1", doing["scheduled_at"] + timedelta(microseconds=1))
    scheduler.schedule("exec-2", now() - timedelta(seconds=1))
    fired = Fired()
    scheduler.start(fired)
    assert fired.wait_for(1)
    assert env.wait_until(lambda: len(env.jobs()) == 2)  # exec-2's job ended
    assert fired.ids == ["exec-2"]
    assert [(job["args"], job["status"]) for job in env.jobs()] == [
        ({"execution_id": "exec-1"}, "doing"),
        ({"execution_id": "exec-1"}, "todo"),
    ]


def test_rearming_an_alarm_firing_now_for_its_due_time_writes_nothing(env: Env) -> None:
    """A job ``doing`` for that due time (or later) fires it: re-arming adds no twin."""
    scheduler = env.scheduler()
    scheduler.setup()
    insert_doing_job(env, "exec-1", heartbeat_age_seconds=0)
    [doing] = env.jobs()
    scheduler.schedule("exec-1", doing["scheduled_at"])
    scheduler.schedule("exec-1", doing["scheduled_at"] - timedelta(seconds=1))
    assert env.jobs() == [doing]
    later = doing["scheduled_at"] + timedelta(seconds=1)
    scheduler.schedule("exec-1", later)  # later than the firing job: an alarm of its own
    assert [(job["status"], job["scheduled_at"]) for job in env.jobs()] == [
        ("doing", doing["scheduled_at"]),
        ("todo", later),
    ]


def test_schedule_many_arms_only_what_is_missing(env: Env) -> None:
    """One read for all; an alarm queued (or firing) for its due time keeps its job."""
    scheduler = env.scheduler()
    assert isinstance(scheduler, BulkScheduler)
    due = now() + timedelta(hours=1)
    scheduler.schedule("queued", due)
    insert_doing_job(env, "firing", heartbeat_age_seconds=0)
    before = {job["id"]: job for job in env.jobs()}
    firing_due = next(j["scheduled_at"] for j in before.values() if j["status"] == "doing")
    scheduler.schedule_many(
        [("queued", due), ("firing", firing_due), ("missing", due), ("moved", due)]
    )
    scheduler.schedule_many([("moved", due + timedelta(seconds=1))])
    jobs = env.jobs()
    assert {job["id"] for job in jobs} >= set(before)  # nothing armed already was replaced
    assert sorted((job["args"]["execution_id"], job["scheduled_at"]) for job in jobs) == sorted(
        [
            ("queued", due),
            ("firing", firing_due),
            ("missing", due),
            ("moved", due + timedelta(seconds=1)),
        ]
    )


# -- batches handed to the runner (``start_batched``) ---------------------------------------


class Handed:
    """Records the batches ``fire_many`` gets, with the jobs ``doing`` while each fires."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.singles: list[str] = []
        self.batches: list[list[str]] = []
        self.doing: list[int] = []
        self._cond = threading.Condition()

    def fire(self, execution_id: str) -> None:
        with self._cond:
            self.singles.append(execution_id)
            self._cond.notify_all()

    def fire_many(self, ids: Sequence[str]) -> None:
        doing = len(self.env.jobs("doing"))
        with self._cond:
            self.batches.append(list(ids))
            self.doing.append(doing)
            self._cond.notify_all()

    def wait_for(self, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: sum(map(len, self.batches)) >= count, timeout=TIMEOUT
            )


def test_a_batching_scheduler(env: Env) -> None:
    assert isinstance(env.scheduler(), BatchingScheduler)


def test_started_batched_a_job_hands_the_due_alarms_over_batch_at_a_time(env: Env) -> None:
    """One job fires its own alarm alone, then takes the due jobs ``batch`` at a time, each
    batch in one ``fire_many`` call (taking more only once its slot is free again).

    Every job of a batch is ``doing`` under the worker while it fires (a crash leaves them
    to the stalled-job recovery), and all are deleted once fired.
    """
    scheduler = env.scheduler(concurrency=1, batch=3)
    scheduler.setup()
    for index in range(7):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=1))
    handed = Handed(env)
    scheduler.start_batched(handed.fire, handed.fire_many)
    assert handed.wait_for(7)
    assert env.wait_until(lambda: env.jobs() == [])
    assert handed.singles == []
    assert handed.batches == [
        ["exec-0"],
        ["exec-1", "exec-2", "exec-3"],
        ["exec-4", "exec-5", "exec-6"],
    ]
    assert handed.doing == [1, 1 + 3, 1 + 3]  # the job procrastinate fetched: doing to the end


def test_started_batched_an_alarm_alone_is_a_batch_of_one(env: Env) -> None:
    scheduler = env.scheduler(batch=1)
    handed = Handed(env)
    scheduler.start_batched(handed.fire, handed.fire_many)
    scheduler.schedule("exec-1", now())
    scheduler.schedule("exec-2", now())
    assert handed.wait_for(2)
    assert sorted(handed.batches) == [["exec-1"], ["exec-2"]]
    assert env.wait_until(lambda: env.jobs() == [])


def test_a_failing_batch_is_logged_and_the_next_ones_still_fire(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = env.scheduler(concurrency=1, batch=2)
    scheduler.setup()
    for index in range(4):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=1))
    handed = Handed(env)

    def fire_many(ids: Sequence[str]) -> None:
        handed.fire_many(ids)
        if "exec-1" in ids:
            raise RuntimeError("boom")

    scheduler.start_batched(handed.fire, fire_many)
    assert handed.wait_for(4)
    assert handed.batches == [["exec-0"], ["exec-1", "exec-2"], ["exec-3"]]
    assert env.wait_until(lambda: env.jobs() == [])
    assert "a batch of 2 alarms failed" in caplog.text


def test_start_batched_needs_a_callable(env: Env) -> None:
    with pytest.raises(InvalidSettingsError, match="fire_many="):
        env.scheduler().start_batched(lambda eid: None, "nope")  # type: ignore[arg-type]


def test_cancel_in_writes_only_when_a_job_is_queued(env: Env) -> None:
    """With nothing queued (the job firing the execution is ``doing``), one read, no write."""
    scheduler = env.scheduler()
    scheduler.setup()
    insert_doing_job(env, "exec-1", heartbeat_age_seconds=0)
    with psycopg.connect(env.dsn) as conn, conn.transaction():
        scheduler.cancel_in(conn, "exec-1")
        row = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
        assert row == (None,)  # nothing written: no transaction id was needed
    assert [job["status"] for job in env.jobs()] == ["doing"]
    scheduler.schedule("exec-1", now() + timedelta(hours=1))
    with psycopg.connect(env.dsn) as conn, conn.transaction():
        scheduler.cancel_in(conn, "exec-1")
    assert [job["status"] for job in env.jobs()] == ["doing"]


def test_a_batchs_disarm_deletes_a_job_another_worker_queued_meanwhile(env: Env) -> None:
    """While a batch fires an execution (its job ``doing``), another worker's re-arm may
    queue a job of it for a later due time (``missing_alarms`` keeps a ``doing`` job for
    its own due time or an earlier one: a claimed row's alarm is its lease end); the
    batch's disarm of that execution deletes the queued job, as any disarm does."""
    scheduler = env.scheduler(concurrency=1, batch=2)
    other = env.scheduler()
    scheduler.setup()
    scheduler.schedule("exec-0", now() - timedelta(seconds=1))
    fired = threading.Event()
    seen: list[list[str]] = []

    def fire_many(ids: Sequence[str]) -> None:
        assert list(ids) == ["exec-0"]
        other.schedule_many([("exec-0", now() + timedelta(hours=1))])  # the lease end, say
        seen.append([job["status"] for job in env.jobs()])
        with psycopg.connect(env.dsn) as conn:
            scheduler.cancel_in(conn, "exec-0")  # the step ended with no next alarm
        seen.append([job["status"] for job in env.jobs()])
        fired.set()

    scheduler.start_batched(lambda execution_id: None, fire_many)
    assert fired.wait(TIMEOUT)
    assert seen == [["doing", "todo"], ["doing"]]


def test_prefetch_is_called_with_each_batch_then_with_nothing(env: Env) -> None:
    """``prefetch`` sees each batch's ids just before ``fire_many``, and ``[]`` just after."""
    calls: list[list[str]] = []
    scheduler = env.scheduler(concurrency=1, batch=2, prefetch=lambda ids: calls.append(list(ids)))
    scheduler.setup()
    for index in range(3):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=1))
    handed = Handed(env)

    def fire_many(ids: Sequence[str]) -> None:
        calls.append(["fire", *ids])
        handed.fire_many(ids)

    scheduler.start_batched(handed.fire, fire_many)
    assert handed.wait_for(3)
    assert env.wait_until(lambda: env.jobs() == [])
    assert calls == [
        ["fire", "exec-0"],  # the job's own alarm, alone: nothing to prefetch
        ["exec-1", "exec-2"],
        ["fire", "exec-1", "exec-2"],
        [],
    ]
    with pytest.raises(InvalidSettingsError, match="prefetch="):
        env.scheduler(prefetch="rows")


def _insert_todo_job(env: Env, args: Any, key: str) -> int:
    """A due job of the queue's task with ``args`` as written by another program."""
    options = f"-c search_path={env.schema}"
    with psycopg.connect(env.dsn, autocommit=True, options=options) as conn:
        [job] = conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, queueing_lock, args,"
            " status, scheduled_at) VALUES (%s, %s, %s, %s, %s, 'todo', now() - interval '1 s')"
            " RETURNING id",
            (env.queue, TASK_NAME, key, key, psycopg.types.json.Jsonb(args)),
        ).fetchone() or (None,)
    return int(job)


@pytest.mark.parametrize(
    ("args", "first", "total"),
    [({}, 1, 5), ({"other": 1}, 1, 5), ({"execution_id": 5}, 1, 5), ([], 1, 5), ({}, 3, 3)],
)
def test_a_job_naming_no_execution_in_a_batch_is_dropped_and_the_rest_fire(
    env: Env, args: Any, first: int, total: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a KeyError took the batch's job down (its own alarm never fired) and left the
    other jobs taken ``doing`` under a worker still beating: never fired while it lived.
    ``first`` alarms are queued before the bad job, ``total`` in all (3 and 3: it is taken
    alone, by the batch after the first)."""
    scheduler = env.scheduler(concurrency=1, batch=3)
    scheduler.setup()
    for index in range(first):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=2))
    bad = _insert_todo_job(env, args, f"{env.queue}:bad")
    for index in range(first, total):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=1))
    handed = Handed(env)
    scheduler.start_batched(handed.fire, handed.fire_many)
    assert handed.wait_for(total)
    assert env.wait_until(lambda: env.jobs() == [])
    assert sorted(eid for batch in handed.batches for eid in batch) == [
        f"exec-{index}" for index in range(total)
    ]
    assert f"job {bad} of the queue names no execution" in caplog.text


def test_a_batch_raising_a_base_exception_leaves_no_job_doing(env: Env) -> None:
    """Was: an action's KeyboardInterrupt inside ``fire_many`` left the batch's jobs
    ``doing`` under a live worker (the alarms it had not fired were never re-armed: a job
    ``doing`` counts as armed) and its own job ``failed``. Now the batch is logged as
    failed, its jobs end, and the store's due executions are re-armed as for any failure."""
    scheduler = env.scheduler(concurrency=1, batch=3)
    scheduler.setup()
    for index in range(6):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=1))
    handed = Handed(env)

    def fire_many(ids: Sequence[str]) -> None:
        handed.fire_many(ids)
        if "exec-1" in ids:
            raise KeyboardInterrupt

    scheduler.start_batched(handed.fire, fire_many)
    assert handed.wait_for(6)
    assert env.wait_until(lambda: env.jobs() == [])
    assert handed.batches == [["exec-0"], ["exec-1", "exec-2", "exec-3"], ["exec-4", "exec-5"]]


def test_taking_due_jobs_reads_the_locks_firing_once_per_statement(env: Env) -> None:
    """The take's lock rule is one hashed set of the ``doing`` locks, not a lookup per candidate.

    On a jobs table never analyzed (a fresh schema, autovacuum off) a ``NOT EXISTS`` per
    candidate was planned as a scan of every ``doing`` entry of the lock index for each
    candidate: each take of a burst cost the candidates times the jobs in flight.
    """
    scheduler = env.scheduler()
    scheduler.setup()
    for index in range(40):
        scheduler.schedule(f"exec-{index}", now() - timedelta(seconds=1))
    params = {"queue": env.queue, "task": TASK_NAME, "worker": 1, "limit": 31}
    with psycopg.connect(env.dsn, autocommit=True, options=f"-c search_path={env.schema}") as conn:
        plan = "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + _TAKE, params))
    assert "NOT (hashed SubPlan" in plan, plan
