"""A scheduler for several worker processes sharing one PostgreSQL: procrastinate's job queue.

Each alarm is one procrastinate job of the task ``prana_resume`` whose only argument is the
execution id, deferred with ``schedule_at=due_at``, ``lock`` (jobs of one execution never
run at the same time, in any process) and ``queueing_lock`` (at most one queued alarm per
execution). Both locks are ``"<queue>:<execution_id>"``, so several prana deployments can
share one database under different queue names. Arming again replaces: the queued job of
the execution is deleted and a new one deferred, in one transaction that first takes a
transaction-level advisory lock on the lock key, so concurrent re-arms of one id (from any
process) queue up instead of racing; should a job with that queueing lock appear anyway
(deferred by other code), the ``AlreadyEnqueued`` is retried on the newer row.
A job already running is left alone: it fires, and the runner's compare-and-set makes a
stale fire a no-op.

Every worker runs one procrastinate worker (a background thread by default) that fetches
due jobs with ``FOR UPDATE SKIP LOCKED``, so a job is taken by one worker at a time. The
alarms live in PostgreSQL, so ``shutdown`` of one worker drops nothing: the others (or this
one, restarted) still fire them. A job that becomes due is found by polling
(``poll_interval``): procrastinate can notify workers when a job is deferred (``listen``),
never when a scheduled one comes due.

Crashes. A worker beats (procrastinate's heartbeat, every third of
``stalled_after_seconds``). A job left ``doing`` by a worker that stopped beating for
``stalled_after_seconds`` (killed, frozen, cut off) would hold its execution's ``lock``
forever; every live worker looks for such jobs as often as it beats and takes them up
again (``recover_stalled``): the job goes back to ``todo`` and fires again, or is dropped
when a newer alarm of its execution is queued. So an alarm fires at least once, and the
runner's compare-and-set makes each transition happen once. A worker whose database
connections fail (a restart, ``pg_terminate_backend``) logs one line and starts over with
backoff, up to 30 s between tries, until it is shut down. A worker frozen longer than
``stalled_after_seconds`` (its jobs taken up by the others) says so and registers again.

Transactions: ``schedule_in(conn, ...)`` defers on the caller's psycopg connection, inside
the caller's transaction, so a store can arm the alarm in the same transaction as the state
write (procrastinate's ``connection=`` argument of ``defer``). A ``Runner`` over a
``PostgresStore`` on the same database (``same_database``) does exactly that through the
store's ``on_save`` hook: each save and its alarm change commit together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import threading
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from procrastinate import App, JobContext, PsycopgConnector, SyncPsycopgConnector
from procrastinate.exceptions import AlreadyEnqueued, ConnectorException
from procrastinate.jobs import Job
from procrastinate.manager import JobManager
from procrastinate.schema import SchemaManager
from procrastinate.worker import Worker
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from prana import InvalidSettingsError
from scheduling._checks import check_schema_name
from scheduling._errors import StoreError
from scheduling.adapters._common import SchedulerStateError, require_aware
from scheduling.adapters._procrastinate_batch import (
    ARMED_MANY,
    FINISH,
    HAND_BACK,
    TAKE,
    execution_id_of,
    fire_many_logged,
    fire_one,
    prefetch_logged,
)
from scheduling.adapters._procrastinate_serve import (
    FIRE_KEY,
    FIRE_MANY_KEY,
    SCHEDULER_KEY,
    TASK_NAME,
    ServingMixin,
    broken,
    one_line,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from scheduling.abc import Fire, FireMany

__all__ = [
    "TASK_NAME",
    "ProcrastinateScheduler",
    "SchedulerStateError",
    "prana_resume",
]

logger = logging.getLogger(__name__)

_REPLACE_ATTEMPTS = 10
"""How often ``schedule`` retries when a concurrent re-arm of the same id wins the race."""

_SETUP_LOCK = 0x70_72_6F_63_72  # one advisory lock so concurrent setups do not race

_DELETE_QUEUED = "DELETE FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo'"

_ARMED = (
    "SELECT 1 FROM procrastinate_jobs WHERE queueing_lock = %(key)s AND ((status = 'todo'"
    " AND scheduled_at = %(due)s) OR (status = 'doing' AND scheduled_at >= %(due)s))"
)
"""The alarm is queued already for that due time, or one due then or later is firing."""

_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
"""Re-arms of one id wait for each other (until the transaction ends) instead of racing."""

_STALLED = (
    "SELECT job.id, job.queueing_lock FROM procrastinate_jobs AS job"
    " LEFT JOIN procrastinate_workers AS worker ON worker.id = job.worker_id"
    " WHERE job.status = 'doing' AND job.queue_name = %s AND job.task_name = %s"
    " AND (worker.id IS NULL OR worker.last_heartbeat < now() - make_interval(secs => %s))"
    " ORDER BY job.id"
)
"""Jobs ``doing`` whose worker is gone or silent (procrastinate's own stalled-job rule)."""

_RECOVERY_LOCK_WAIT = "1s"
_LOCK_KEY_BRIEFLY = (
    "SELECT set_config('lock_timeout', %s, true), pg_advisory_xact_lock(hashtextextended(%s, 0))"
)
"""Recovery's form of ``_LOCK_KEY``: it and the job's row lock wait ``_RECOVERY_LOCK_WAIT``
at most (locks held a moment, by a re-arm or procrastinate's own bookkeeping, are usual);
a job held longer is left for the next round rather than holding up every other one."""
_STILL_DOING = "SELECT 1 FROM procrastinate_jobs WHERE id = %s AND status = 'doing' FOR UPDATE"
_QUEUED = "SELECT 1 FROM {jobs} WHERE queueing_lock = %s AND status = 'todo'"
_RETRY_STALLED = (
    "UPDATE procrastinate_jobs SET status = 'todo', scheduled_at = now(),"
    " attempts = attempts + 1 WHERE id = %s AND status = 'doing'"
)
_DROP_STALLED = "DELETE FROM procrastinate_jobs WHERE id = %s AND status = 'doing'"
_PRUNE_WORKERS = (
    "DELETE FROM procrastinate_workers WHERE last_heartbeat < now() - make_interval(secs => %s)"
)

_T = TypeVar("_T")


def prana_resume(context: JobContext, execution_id: str) -> None:
    """The task of every alarm: call the worker's fire callback with the execution id.

    It runs in a thread of the worker; an awaitable returned by the callback is run to
    completion on a fresh event loop in that thread. A ``StoreError`` (the database went
    away) is logged in one line; any other error is logged by procrastinate and leaves the
    job ``failed``. Either way the execution stays due in the store, where a runner starting
    (or ``Runner.rearm_due``, which ``prana worker`` calls every ``--poll``) finds it.
    Started with ``start_batched``, the job fires its alarm with the other due ones in
    batches of up to the scheduler's ``batch`` alarms, each handed to ``fire_many``.
    """
    extra = context.additional_context
    fire: Fire | None = extra.get(FIRE_KEY)
    fire_many: FireMany | None = extra.get(FIRE_MANY_KEY)
    scheduler: ProcrastinateScheduler | None = extra.get(SCHEDULER_KEY)
    if scheduler is not None and fire_many is not None:
        scheduler._fire_batches(fire_many, execution_id, context.job.worker_id)
        return
    if scheduler is not None and fire is not None and scheduler.batch > 1:
        scheduler._fire_and_go_on(fire, execution_id, context.job.worker_id)
        return
    if fire is None:
        logger.warning(
            "the alarm of execution %r ran in a worker without a prana fire callback; dropped "
            "(a runner re-arms every due execution from its store when it starts)",
            execution_id,
        )
        return
    fire_one(fire, execution_id)


def _with_search_path(dsn: str, schema: str | None) -> str:
    """``dsn`` with ``search_path`` set to ``schema`` on every connection (when given)."""
    if schema is None:
        return dsn
    # Quoted, so a mixed-case schema keeps its case (the name is checked: no quotes, spaces).
    return _with_option(dsn, f'-c search_path="{schema}"')


def _with_option(dsn: str, extra: str) -> str:
    """``dsn`` with ``extra`` added to the server ``options`` of every connection."""
    options = conninfo_to_dict(dsn).get("options")
    return make_conninfo(dsn, options=f"{options} {extra}" if options else extra)


_ASYNC_COMMIT = "-c synchronous_commit=off"
"""The speed rule of the worker's own connections (``async_job_commits``).

Only the connections of the app the scheduler makes for its worker get it: they take
jobs, record their end and beat. Those rows are bookkeeping, never the truth: a commit
lost in a crash of the *server* brings a job back to ``todo`` (it fires again) or leaves
it ``doing`` under a worker that no longer beats (taken up as stalled, and fires again),
and the store's compare-and-set makes a repeated fire a no-op. Everything the truth
depends on stays synchronous: the store's saves, and the alarms deferred in their
transactions (``schedule_in``) or through the scheduler's own pool (``schedule``,
``cancel``). Without it each fired alarm waits for two extra disk flushes."""


def _checked_dsn(
    dsn: object, app: object, queue: object, schema: str | None, prefetch: object
) -> str:
    """``dsn``; a connection string, app, queue, schema or prefetch that cannot be is
    refused, by name."""
    if not isinstance(dsn, str) or not dsn:
        raise InvalidSettingsError(
            f"ProcrastinateScheduler(dsn={dsn!r}): pass a connection string such as "
            "'postgresql://user@host:5432/dbname' (also with app=: jobs are deferred "
            "through the scheduler's own connections)"
        )
    if app is not None and not isinstance(app, App):
        raise InvalidSettingsError(
            f"ProcrastinateScheduler(app={app!r}): pass a procrastinate.App, or None"
        )
    if not isinstance(queue, str) or not queue:
        raise InvalidSettingsError(
            f"ProcrastinateScheduler(queue={queue!r}): use a non-empty string"
        )
    if schema is not None:
        check_schema_name(schema, "ProcrastinateScheduler(schema)")
    if prefetch is not None and not callable(prefetch):
        raise InvalidSettingsError(
            f"ProcrastinateScheduler(prefetch={prefetch!r}): pass a callable taking a list "
            "of execution ids (PostgresStore.prefetch), or None"
        )
    return dsn


def _check_seconds(**seconds: object) -> None:
    for field, value in seconds.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InvalidSettingsError(
                f"ProcrastinateScheduler({field}={value!r}): use a number of seconds > 0"
            )


def _check_counts(**counts: object) -> None:
    for field, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidSettingsError(
                f"ProcrastinateScheduler({field}={count!r}): use a whole number >= 1"
            )


def _queued_statement(schema: str | None) -> str:
    """``_QUEUED`` naming the jobs table in ``schema`` (``None``: as the search path finds it)."""
    jobs = (
        sql.Identifier(schema, "procrastinate_jobs")
        if schema
        else sql.Identifier("procrastinate_jobs")
    )
    return sql.SQL(_QUEUED).format(jobs=jobs).as_string(None)


class ProcrastinateScheduler(ServingMixin):
    """The ``Scheduler`` protocol over a procrastinate job queue in PostgreSQL.

    ``dsn`` is the database (psycopg connection string). ``queue`` names the procrastinate
    queue of this deployment: every worker of one deployment uses the same name.
    ``schema`` keeps procrastinate's tables in that schema (set as the ``search_path`` of
    this scheduler's connections) instead of the connection's default, normally
    ``public``. ``setup()`` creates them if missing; with ``auto_setup=True`` (the
    default) the first call that needs them does it. Tables made by procrastinate's own
    CLI (``procrastinate schema --apply``) work the same; upgrades go through its
    migrations.

    ``app`` lets you run the worker on your own procrastinate ``App`` (its connector must
    reach the same database and schema); the task ``prana_resume`` is registered on it.
    By default the scheduler makes one over a ``PsycopgConnector``. Jobs are deferred and
    deleted through the scheduler's own small pool of connections to ``dsn`` (at most
    ``max_connections``), never through the app's connector, which belongs to the worker's
    event loop.

    Two ways to run the worker:

    - ``run_in_thread=True`` (the default): ``start(fire)`` runs a procrastinate worker in
      a background thread until ``shutdown()``. ``with runner:`` is then all a process
      needs; every process doing it is one more worker.
    - ``run_in_thread=False``: ``start(fire)`` only remembers ``fire``, and
      ``run_worker()`` runs the worker in the calling thread until SIGINT/SIGTERM (the
      ``prana worker`` process: ``with runner: scheduler.run_worker()``). A process that
      only starts or delivers executions (and so only defers jobs) never calls it.

    ``connect_timeout_seconds`` bounds the wait for a connection (``PoolTimeout`` after).
    ``listen=True`` also keeps procrastinate's LISTEN connection open, so a job deferred
    due now wakes a worker at once instead of at its next poll. It is off by default:
    alarms are mostly due later, found by polling anyway, and procrastinate 3.10 can
    leave that connection open at shutdown (a ``ResourceWarning``, seen in tests).
    ``poll_interval`` is how often (seconds) a worker looks for jobs that came due;
    ``concurrency`` how many alarms one worker fires at once (each in a thread);
    ``stalled_after_seconds`` how long a worker may stay silent before the others take up
    the jobs it was running (see the module: it beats three times in that span);
    ``async_job_commits`` (on by default) lets the worker's own bookkeeping (taking a job,
    recording its end, beating) commit without waiting for the disk: a crash of the
    server may then fire an alarm again, which the store's compare-and-set makes a no-op,
    and nothing the store says is ever lost (the store's saves, and alarms armed with them
    or through ``schedule``/``cancel``, still wait for the disk); ``batch``: a job fires
    its own alarm, then takes and fires due ones up to ``batch`` in all (so a burst of
    due alarms costs a few round trips per batch; 1: one per job); ``prefetch``, if
    given, is called with the ids of each batch handed to ``fire_many``, in the thread
    that fires it, just before, and with ``[]`` just after (``PostgresStore.prefetch``:
    the batch's rows in one query); ``worker_options`` go to procrastinate's ``Worker``
    (they win over ours).

    Errors reaching the database from this scheduler's own connections (``setup``,
    ``schedule``, ``cancel``) are one-line ``StoreError``s; ``schedule`` and ``cancel``
    run once more on a fresh connection when the server had ended theirs (both replace,
    so running again is harmless).

    With a ``PostgresStore`` on the same database, a ``Runner`` arms through
    ``schedule_in``/``cancel_in`` inside each save's transaction (the store's ``on_save``
    hook): an execution's state and its queued job commit together or not at all, so a
    crash between the two can no longer leave a saved retry without its alarm.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        app: App | None = None,
        queue: str = "prana",
        schema: str | None = None,
        auto_setup: bool = True,
        run_in_thread: bool = True,
        poll_interval: float = 1.0,
        concurrency: int = 1,
        listen: bool = False,
        max_connections: int = 4,
        connect_timeout_seconds: float = 10.0,
        shutdown_timeout: float = 30.0,
        stalled_after_seconds: float = 30.0,
        async_job_commits: bool = True,
        batch: int = 32,
        prefetch: Callable[[Sequence[str]], object] | None = None,
        worker_options: Mapping[str, Any] | None = None,
    ) -> None:
        dsn = _checked_dsn(dsn, app, queue, schema, prefetch)
        _check_seconds(
            poll_interval=poll_interval,
            connect_timeout_seconds=connect_timeout_seconds,
            shutdown_timeout=shutdown_timeout,
            stalled_after_seconds=stalled_after_seconds,
        )
        _check_counts(concurrency=concurrency, max_connections=max_connections, batch=batch)
        self.queue = queue
        self.schema = schema
        self.conninfo = _with_search_path(dsn, schema)
        self.auto_setup = auto_setup
        self.run_in_thread = run_in_thread
        self.poll_interval = float(poll_interval)
        self.concurrency = concurrency
        self.listen = listen
        self.max_connections = max_connections
        self.connect_timeout_seconds = float(connect_timeout_seconds)
        self.shutdown_timeout = float(shutdown_timeout)
        self.stalled_after_seconds = float(stalled_after_seconds)
        self.worker_options: dict[str, Any] = dict(worker_options or {})
        self.async_job_commits = bool(async_job_commits)
        self.batch = batch
        self.prefetch = prefetch
        self.app = app if app is not None else self._worker_app()
        if TASK_NAME not in self.app.tasks:
            self.app.task(name=TASK_NAME, pass_context=True, queue=queue)(prana_resume)
        # Deferring with connection= runs on that connection only: this connector is never
        # opened, it is procrastinate's query layer (and its AlreadyEnqueued mapping).
        self._jobs = JobManager(connector=SyncPsycopgConnector())
        self._queued_in = _queued_statement(schema)
        self._queued_own = _queued_statement(None)
        self.name = f"prana-{queue}-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._ready = False
        self._fire: Fire | None = None
        self._fire_many: FireMany | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: Worker | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = threading.Event()
        self._batch_held: set[int] = set()
        """The jobs a batch took and has not ended yet (``_procrastinate_batch``)."""
        self._taken: dict[str, tuple[int, int]] = {}
        """Jobs ``_fire_batches`` took and has not ended: execution id -> (job, worker)."""
        self.stopped_by: signal.Signals | None = None
        """The signal that stopped ``run_worker`` (``None``: ``shutdown()``, or not stopped)."""

    def __repr__(self) -> str:
        return f"ProcrastinateScheduler(queue={self.queue!r}, schema={self.schema!r})"

    def _worker_app(self) -> App:
        """The procrastinate app the worker runs on our connection string (with the
        asynchronous commits of its bookkeeping unless ``async_job_commits=False``)."""
        conninfo = self.conninfo
        if self.async_job_commits:
            conninfo = _with_option(conninfo, _ASYNC_COMMIT)
        return App(connector=PsycopgConnector(conninfo=conninfo))

    # -- keys and connections ----------------------------------------------------------

    def lock_key(self, execution_id: str) -> str:
        """The ``lock`` and ``queueing_lock`` of the jobs of ``execution_id``."""
        return f"{self.queue}:{execution_id}"

    def _run(self, what: str, body: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """``body`` on a connection of our pool; driver errors become one-line ``StoreError``s.

        ``body`` must be safe to run twice: when the server ended the connection (a
        restart, ``pg_terminate_backend``), it runs once more on a fresh one.
        """
        for attempt in (1, 2):
            conn: psycopg.Connection[Any] | None = None
            try:
                with self._connection() as conn:
                    return body(conn)
            except (psycopg.Error, ConnectorException) as exc:
                pool = self._pool
                if attempt == 1 and pool is not None and broken(exc, conn):
                    pool.check()
                    continue
                raise StoreError(
                    f"procrastinate job queue: {what} failed: {one_line(exc)}"
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            pool = self._pool
            if pool is None:
                pool = ConnectionPool(
                    self.conninfo,
                    min_size=1,
                    max_size=self.max_connections,
                    kwargs={"autocommit": True},
                    timeout=self.connect_timeout_seconds,
                    open=False,
                )
                try:
                    pool.open(wait=True, timeout=self.connect_timeout_seconds)
                except BaseException:
                    pool.close()
                    raise
                self._pool = pool
        with pool.connection() as conn:
            if self.auto_setup and not self._ready:
                self._setup(conn)
            yield conn

    def setup(self) -> None:
        """Create procrastinate's tables (and ``schema``) if they are missing; idempotent.

        Safe to run from several processes at once (an advisory lock serialises it). It
        never migrates tables an older procrastinate made: use its migrations for that.
        """
        self._run("setup", self._setup)

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_LOCK,))
            if self.schema is not None:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
            row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
            if row is None or row[0] is None:
                conn.execute(SchemaManager.get_schema())
        self._ready = True

    @contextlib.contextmanager
    def _on(self, conn: psycopg.Connection[Any], *, own: bool = False) -> Iterator[None]:
        """A savepoint (or transaction) on ``conn`` that sees our tables.

        ``own``: a connection of our pool, whose ``search_path`` is ours already.
        """
        with conn.transaction():
            if self.schema is None or own:
                yield
                return
            path = sql.Identifier(self.schema).as_string(conn)
            # One round trip: read the caller's path, then put ours first (left to right).
            row = conn.execute(
                "SELECT current_setting('search_path'), set_config('search_path',"
                " concat_ws(', ', %s::text, nullif(current_setting('search_path'), '')), true)",
                (path,),
            ).fetchone()
            previous = "" if row is None else str(row[0])
            yield
            conn.execute("SELECT set_config('search_path', %s, true)", (previous,))

    # -- the protocol ------------------------------------------------------------------

    def start(self, fire: Fire) -> None:
        """Remember ``fire``; with ``run_in_thread`` start the worker thread and wait for it.

        Raises what connecting raised if the worker cannot reach the database.
        """
        self._start(fire, None)

    def start_batched(self, fire: Fire, fire_many: FireMany) -> None:
        """``start``, handing alarms over in batches through ``fire_many`` (``BatchingScheduler``).

        A job then fires its own alarm together with the other due ones it takes, up to
        ``batch`` per call, and goes on with the next due ones until none is left: alarms
        due by the time they are taken, not only those of one instant (each id once per
        call, as ``fire`` would have had it).
        """
        if not callable(fire_many):
            raise InvalidSettingsError(
                f"ProcrastinateScheduler.start_batched(fire_many={fire_many!r}): pass a "
                "callable taking a list of ids"
            )
        self._start(fire, fire_many)

    def _start(self, fire: Fire, fire_many: FireMany | None) -> None:
        if not callable(fire):
            raise InvalidSettingsError(
                f"ProcrastinateScheduler.start(fire={fire!r}): pass a callable taking an id"
            )
        with self._lock:
            if self._fire is not None:
                raise SchedulerStateError(
                    "ProcrastinateScheduler.start: already started; call shutdown() first"
                )
            self._fire, self._fire_many = fire, fire_many
            self._stopping.clear()
        if self.auto_setup:
            try:
                self.setup()
            except BaseException:
                self._fire = self._fire_many = None
                raise
        if not self.run_in_thread:
            return
        ready = threading.Event()
        failure: list[BaseException] = []
        thread = threading.Thread(
            target=self._serve_in_thread,
            args=(fire, ready, failure),
            name=f"procrastinate worker {self.name}",
            daemon=True,
        )
        self._thread = thread
        thread.start()
        ready.wait()
        if failure:
            thread.join(self.shutdown_timeout)
            self._thread = None
            self._fire = self._fire_many = None
            raise failure[0]

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        """Arm (or re-arm) the one alarm of ``execution_id`` for ``due_at`` (aware).

        Deletes the queued job of the execution and defers a new one, in one transaction;
        when a queued job of the execution is already due at ``due_at``, it is left as it
        is (one read, no write: re-arming what the store says is due, as every worker does
        when it starts and every ``--poll``, costs no commit for alarms already queued).
        """
        require_aware(due_at, f"ProcrastinateScheduler.schedule({execution_id!r})")

        def arm(conn: psycopg.Connection[Any]) -> None:
            if conn.execute(_ARMED, {"key": self.lock_key(execution_id), "due": due_at}).fetchone():
                return
            self._replace(conn, execution_id, due_at, own=True)

        self._run(f"arming the alarm of {execution_id!r}", arm)

    def schedule_many(self, alarms: Sequence[tuple[str, datetime]]) -> None:
        """``schedule`` each alarm whose job is not queued (or firing) for it already.

        One query reads the jobs of all of them; only the missing ones are armed, each in
        its own transaction as ``schedule`` arms it (``scheduling.abc.BulkScheduler``).
        """
        for execution_id, due_at in self._missing_alarms(alarms):
            self.schedule(execution_id, due_at)

    def schedule_in(
        self, conn: psycopg.Connection[Any], execution_id: str, due_at: datetime
    ) -> None:
        """``schedule`` on the caller's connection, inside the caller's transaction.

        For a store that arms the alarm in the same transaction as the state write: call it
        between the ``UPDATE`` of the execution and the ``COMMIT``. If the caller rolls
        back, no job exists; if it commits, the job does. It runs in a savepoint, so a lost
        race with a concurrent re-arm is retried without aborting the caller's transaction.
        The per-id advisory lock it takes is held until the caller's transaction ends.
        ``conn`` must reach the database procrastinate's tables are in (the ``schema`` is
        put first on its ``search_path`` for the savepoint, and restored).

        The ``Runner`` uses it through ``PostgresStore.on_save`` when ``same_database``
        says the store is on this database; otherwise it arms after the save, and a crash
        between the two is covered by every worker re-arming all alarms from the store when
        it starts (and by ``Runner.rearm_due``).
        """
        require_aware(due_at, f"ProcrastinateScheduler.schedule_in({execution_id!r})")
        self._replace(conn, execution_id, due_at, own=False)

    def same_database(self, dsn: str) -> bool:
        """Whether ``dsn`` names this scheduler's database (same host, port and dbname).

        Conservative: two spellings of one server (``localhost``, ``127.0.0.1``) read as
        different, and the runner then arms after the save as with any other store.
        """
        try:
            theirs, ours = conninfo_to_dict(dsn), conninfo_to_dict(self.conninfo)
        except psycopg.Error:
            return False

        def where(params: Mapping[str, Any]) -> tuple[str, str, str]:
            return (
                str(params.get("host") or ""),
                str(params.get("port") or "5432"),
                str(params.get("dbname") or params.get("user") or ""),
            )

        return where(theirs) == where(ours)

    def _replace(
        self, conn: psycopg.Connection[Any], execution_id: str, due_at: datetime, *, own: bool
    ) -> None:
        key = self.lock_key(execution_id)
        job = Job(
            queue=self.queue,
            lock=key,
            queueing_lock=key,
            task_name=TASK_NAME,
            task_kwargs={"execution_id": execution_id},
            scheduled_at=due_at,
        )
        for attempt in range(1, _REPLACE_ATTEMPTS + 1):
            try:
                with self._on(conn, own=own):
                    conn.execute(_LOCK_KEY, (key,))
                    conn.execute(_DELETE_QUEUED, (key,))
                    self._jobs.defer_job(job, connection=conn)
            except AlreadyEnqueued:
                if attempt == _REPLACE_ATTEMPTS:
                    raise
                continue  # other code committed a job with our queueing lock: replace it
            except ConnectorException as exc:
                if own:  # _run decides (it may run us again on a fresh connection)
                    raise
                raise StoreError(
                    f"procrastinate job queue: arming the alarm of {execution_id!r} failed: "
                    f"{one_line(exc)}"
                ) from exc
            return

    def cancel(self, execution_id: str) -> None:
        """Delete the queued job of ``execution_id``; unknown ids are ignored.

        A job already running is not interrupted: it fires, and finds nothing to do.
        """
        key = self.lock_key(execution_id)

        def delete(conn: psycopg.Connection[Any]) -> None:
            with self._on(conn, own=True):
                conn.execute(_DELETE_QUEUED, (key,))

        self._run(f"cancelling the alarm of {execution_id!r}", delete)

    def cancel_in(self, conn: psycopg.Connection[Any], execution_id: str) -> None:
        """``cancel`` on the caller's connection, inside the caller's transaction.

        One read first (it needs no ``search_path``: our table by its full name, and no
        trigger): most executions that end have no job queued (the one firing them is
        ``doing``), and then nothing is written.
        """
        key = self.lock_key(execution_id)
        if conn.execute(self._queued_in, (key,)).fetchone() is None:
            return
        with self._on(conn):
            conn.execute(_DELETE_QUEUED, (key,))

    def recover_stalled(self) -> int:
        """Take up the jobs of this queue that workers gone silent left ``doing``; how many.

        A job whose worker has not beaten for ``stalled_after_seconds`` (or is gone from
        procrastinate's table) goes back to ``todo`` to fire again at once, or is dropped
        when a newer alarm of its execution is queued already. Each job is settled in its
        own transaction under its execution's advisory lock, so it never races a re-arm;
        a job whose locks another transaction holds longer than a moment is left for the
        next round. Workers that stopped beating are then pruned, as a starting
        procrastinate worker does. Every running worker calls this as often as it beats.
        """

        def recover(conn: psycopg.Connection[Any]) -> int:
            with self._on(conn, own=True):
                stalled = conn.execute(
                    _STALLED, (self.queue, TASK_NAME, self.stalled_after_seconds)
                ).fetchall()
            taken = self._take_up(conn, stalled)
            with self._on(conn, own=True):
                conn.execute(_PRUNE_WORKERS, (self.stalled_after_seconds,))
            return taken

        taken = self._run("recovering stalled jobs", recover)
        if taken:
            logger.warning(
                "took up %d alarm(s) that a silent worker left running (no heartbeat for "
                "%gs); they fire again",
                taken,
                self.stalled_after_seconds,
            )
        return taken

    def _take_up(self, conn: psycopg.Connection[Any], jobs: Sequence[Any]) -> int:
        """Put each ``(job id, queueing lock)`` back to ``todo``, or drop it when a newer
        alarm of its execution is queued; each under its execution's advisory lock."""
        taken = 0
        for job_id, key in jobs:
            try:
                with self._on(conn, own=True):
                    conn.execute(_LOCK_KEY_BRIEFLY, (_RECOVERY_LOCK_WAIT, key))
                    if conn.execute(_STILL_DOING, (job_id,)).fetchone() is None:
                        continue  # its worker finished it after all
                    queued = conn.execute(self._queued_own, (key,)).fetchone() is not None
                    conn.execute(_DROP_STALLED if queued else _RETRY_STALLED, (job_id,))
                    taken += 1
            except psycopg.errors.LockNotAvailable:
                continue  # held elsewhere: the next round takes it up
        return taken

    def shutdown(self) -> None:
        """Stop this process's worker and close connections; the queued jobs stay.

        The alarms are in PostgreSQL for every worker: other workers keep firing them, and
        this one does again after ``start``. Alarms running now finish first (up to
        ``shutdown_timeout`` seconds, then they are aborted).
        """
        self._stopping.set()
        with self._lock:
            loop = self._loop
        if loop is not None:  # our thread, or run_worker() elsewhere
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(self._stop_in_loop)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.shutdown_timeout + 5.0)
            if thread.is_alive():
                logger.warning("the procrastinate worker %s did not stop in time", self.name)
        self._thread = None
        with self._lock:
            self._fire = self._fire_many = None
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # -- firing the due jobs a job takes (see ``_procrastinate_batch``) --------------

    def _fire_and_go_on(self, fire: Fire, execution_id: str, worker_id: int | None) -> None:
        """Fire ``execution_id``, then due jobs taken one by one, up to ``self.batch`` in all."""
        fire_one(fire, execution_id)
        if worker_id is None:
            return
        done: int | None = None
        for _ in range(self.batch - 1):
            if self._stopping.is_set():
                break
            try:
                taken = self._finish_and_take([] if done is None else [done], worker_id, 1)
            except (psycopg.Error, ConnectorException) as error:
                self._give_up(f"could not take the next due job ({error})")
                return
            if not taken:
                return
            done, next_id = taken[0]
            if next_id is None:
                continue
            try:
                fire_one(fire, next_id)
            except BaseException:  # even a KeyboardInterrupt: the job is ended (re-armed later)
                logger.exception("the alarm of execution %r failed; it stays as stored", next_id)
        if done is not None:
            self._finish([done], worker_id)

    def _fire_batches(
        self,
        fire_many: FireMany,
        execution_id: str,
        worker_id: int | None,
    ) -> None:
        """Fire ``execution_id``, then the due jobs taken after it, ``self.batch`` at most per
        ``fire_many`` call, until none is due.

        The job's own alarm fires alone: more are taken only once this slot is free again,
        so a slot whose action runs long holds no other alarm (the other slots, here and in
        other workers, take them). One statement takes a whole batch, and one transaction
        ends it and takes the next: a burst costs a few round trips per batch, not per
        alarm. The runner resumes each batch in one call (``scheduling.abc.BatchingScheduler``)
        and hands back (``hand_back``) what a slow step holds up; the jobs taken are
        ``doing`` under this worker until their batch has fired, so a crash leaves them to
        ``recover_stalled``.
        """
        fire_many_logged(fire_many, [execution_id])
        if worker_id is None:
            return
        done: list[int] = []
        while not self._stopping.is_set():
            try:
                taken = self._finish_and_take(done, worker_id, self.batch)
            except (psycopg.Error, ConnectorException) as error:
                self._give_up(f"could not take the next due jobs ({error})")
                return
            done = [job_id for job_id, next_id in taken if next_id is None]
            ids = [next_id for _, next_id in taken if next_id is not None]
            if not ids:
                break  # ``done``: jobs naming no execution (or none), ended below
            with self._lock:
                for job_id, next_id in taken:
                    if next_id is not None:
                        self._taken[next_id] = (job_id, worker_id)
            prefetch = self.prefetch
            if prefetch is not None:
                prefetch_logged(prefetch, ids)
            try:
                fire_many_logged(fire_many, ids)
            finally:
                if prefetch is not None:
                    prefetch_logged(prefetch, [])
                with self._lock:  # a job handed back is no longer this batch's to end
                    for next_id in ids:
                        job = self._taken.pop(next_id, None)
                        if job is not None:
                            done.append(job[0])
            if not done:
                break
        if done:
            self._finish(done, worker_id)

    def hand_back(self, execution_ids: Sequence[str]) -> None:
        """Put the jobs of these alarms, taken by a batch that did not start them, back to
        ``todo``: a free slot of any worker takes them at its next look (``--fetch-poll``).
        """
        with self._lock:
            jobs = [self._taken.pop(eid) for eid in execution_ids if eid in self._taken]
        by_worker: dict[int, list[int]] = {}
        for job_id, worker_id in jobs:
            by_worker.setdefault(worker_id, []).append(job_id)
        try:
            with self._connection() as conn:
                for worker_id, job_ids in by_worker.items():
                    conn.execute(HAND_BACK, (job_ids, worker_id))
        except (psycopg.Error, ConnectorException) as error:
            self._give_up(f"could not hand back the jobs of a batch ({error})")
            return
        self._held([job_id for job_id, _ in jobs], held=False)

    def _finish(self, done: list[int], worker_id: int) -> None:
        """Delete the jobs ``done`` (their alarms fired); on failure, the worker starts over."""
        try:
            with self._connection() as conn:
                conn.execute(FINISH, (done, worker_id))
        except (psycopg.Error, ConnectorException) as error:
            self._give_up(f"could not record the end of a job ({error})")
        finally:
            self._held(done, held=False)

    def _held(self, job_ids: Sequence[int], *, held: bool) -> None:
        """Note that this worker's batches run ``job_ids`` (``held``) or have ended them: a
        job ``doing`` under a live worker that runs none of it is an orphan."""
        with self._lock:
            if held:
                self._batch_held.update(job_ids)
            else:
                self._batch_held.difference_update(job_ids)

    def _finish_and_take(
        self, done: list[int], worker_id: int, limit: int
    ) -> list[tuple[int, str | None]]:
        """Delete the jobs ``done`` and take up to ``limit`` due ones, in one transaction.

        A job taken whose arguments hold no execution id (written by hand or by another
        program) comes back with ``None``: logged, never fired, ended with the others (it
        raised a ``KeyError`` that failed the job taking it and stranded the rest ``doing``).
        """
        if limit < 1:
            if done:
                self._finish(done, worker_id)
            return []
        params = {"queue": self.queue, "task": TASK_NAME, "worker": worker_id, "limit": limit}
        try:
            with self._connection() as conn, conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = off")  # bookkeeping: see the module
                if done:
                    conn.execute(FINISH, (done, worker_id))
                rows = conn.execute(TAKE, params).fetchall()
        finally:
            self._held(done, held=False)
        taken = [(int(row[0]), execution_id_of(int(row[0]), row[1])) for row in rows]
        self._held([job_id for job_id, _ in taken], held=True)
        return taken

    def _give_up(self, trouble: str) -> None:
        """Stop the worker (it starts over): its ``doing`` jobs are then taken up as stalled."""
        with self._lock:
            worker, loop = self._worker, self._loop
        if worker is None or loop is None:
            return

        def stop() -> None:
            state = getattr(worker, "prana_state", None)
            if state is not None:
                state.trouble = f"{trouble}: the jobs fire again"
            worker.stop()  # type: ignore[no-untyped-call]

        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(stop)

    def _missing_alarms(self, alarms: Sequence[tuple[str, datetime]]) -> list[tuple[str, datetime]]:
        """The alarms with no job queued for their due time, nor firing for it or a later one."""
        wanted: dict[str, tuple[str, datetime]] = {}
        for execution_id, due_at in alarms:
            require_aware(due_at, f"ProcrastinateScheduler.schedule_many({execution_id!r})")
            wanted[self.lock_key(execution_id)] = (execution_id, due_at)
        if not wanted:
            return []

        def armed(conn: psycopg.Connection[Any]) -> list[Any]:
            return conn.execute(ARMED_MANY, (list(wanted),)).fetchall()

        for key, status, scheduled_at in self._run("reading the queued alarms", armed):
            alarm = wanted.get(key)
            if alarm is not None and (
                scheduled_at == alarm[1] or (status == "doing" and scheduled_at >= alarm[1])
            ):
                del wanted[key]
        return list(wanted.values())
