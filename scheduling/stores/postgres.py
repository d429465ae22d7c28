"""The PostgreSQL store (psycopg 3): several runners, in several processes, share one database.

Every save is one statement in its own transaction: ``INSERT ... ON CONFLICT DO
NOTHING`` creates, ``UPDATE ... WHERE id = %s AND version = %s`` updates, and a row
count of zero means the save was refused. So the version check and the write are one
atomic step however many workers race.

Connections come from a ``psycopg_pool.ConnectionPool`` (opened on first use): a runner
fires resumes from scheduler threads, and a pool lets them talk to the server at the
same time where one shared connection would queue them behind a lock.

Errors: every driver error leaves a method as a one-line ``StoreError`` (the driver's
error is its ``__cause__``). A read whose connection the server ended (a restart, a
``pg_terminate_backend``) is retried once on a fresh connection; a write never is, since
it may have committed: it raises, and the caller reloads (the runner's next alarm does).

Claims (``claim_due``) spread due executions over workers without a job queue: a claim
is a lease, not a lock. See ``claim_due`` for the exact rules.

``on_save`` is a hook run inside the save's transaction, after the row is written and
before the commit: a job queue in the same database (``ProcrastinateScheduler``) arms the
execution's alarm there, so the state and its alarm commit together or not at all. The
``Runner`` installs it by itself when its scheduler can do that.

Groups (``scheduling.abc.GroupingStore``): a thread's saves and claims inside
``grouped()`` share one connection and one transaction, committed by ``commit_group``
without waiting for the disk by default (``_postgres_groups`` has the rules, and what a
server crash may cost).

Light claims (``scheduling.abc.ClaimingStore``): ``claim`` sets a row's status, due time
(the lease) and version without writing its record again; ``load`` reads such a row as its
record claimed (``as_claimed``).
"""

from __future__ import annotations

import builtins
import contextlib
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from prana import ExecutionStatus, InvalidSettingsError, WorkflowExecution, dumps
from scheduling._checks import check_schema_name
from scheduling._clock import StoreClock
from scheduling._errors import (
    ExecutionNotFound,
    StoreError,
    WorkflowConflictError,
)
from scheduling.abc import ExecutionSummary
from scheduling.stores._base import (
    LOADED_RECORD_BYTES,
    WAIT_TAIL_BYTES,
    BaseStore,
    conflict_message,
    webhook_wait_in_tail,
)
from scheduling.stores._migrations import (
    Migration,
    check_sequence,
    log_upgrade,
    pending,
    unversioned_error,
)
from scheduling.stores._postgres_groups import (
    BEGIN_ASYNC_GROUP,
    GroupsMixin,
    driver_error,
    one_line,
)
from scheduling.stores._sql import (
    ParsedCache,
    as_claimed,
    check_aware,
    check_claim,
    check_limit,
    check_list_args,
    check_save,
    check_status,
    check_tree_args,
    cursor_not_found,
    list_query,
    read_version,
    stale,
    summaries_from_rows,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["OnSave", "PostgresStore"]

OnSave: TypeAlias = Callable[[psycopg.Connection[Any], WorkflowExecution], None]
"""A hook run inside a save's transaction with its connection and the execution saved."""

# ``data`` is text, not jsonb: the store never looks inside it, and text skips the
# server's parse on every write and its re-render on every read.
POSTGRES_MIGRATIONS = (
    Migration(
        1,
        "executions (with due time, version and claim) and workflow definitions",
        """
CREATE TABLE IF NOT EXISTS {executions} (
    seq bigint GENERATED ALWAYS AS IDENTITY,
    id text PRIMARY KEY,
    workflow_id text NOT NULL,
    workflow_version integer NOT NULL,
    status text NOT NULL,
    due_at timestamptz,
    version bigint NOT NULL,
    updated_at timestamptz,
    claimed_by text,
    claimed_until timestamptz,
    data text NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS {seq_index} ON {executions} (seq);
CREATE INDEX IF NOT EXISTS {due_index} ON {executions} (due_at, seq) WHERE due_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS {status_index} ON {executions} (status, seq);
CREATE TABLE IF NOT EXISTS {workflows} (
    workflow_id text NOT NULL,
    version integer NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (workflow_id, version)
);
""",
    ),
    Migration(
        2,
        "schedules: definition and state (cursor, buffered slot, recent runs) as JSON",
        """
CREATE TABLE IF NOT EXISTS {schedules} (
    id text PRIMARY KEY,
    definition text NOT NULL,
    state text NOT NULL,
    version bigint NOT NULL
);
""",
    ),
)
"""The PostgreSQL schema, step by step: add a step at the end, never edit one (_migrations)."""
check_sequence(POSTGRES_MIGRATIONS)
SCHEMA_VERSION = POSTGRES_MIGRATIONS[-1].version
"""The schema version this code writes and reads."""

_SETUP_LOCK = 0x70_72_61_6E_61  # "prana": one advisory lock so concurrent setups do not race


DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0
_PROBE_FIRST_PAUSE_SECONDS = 0.1
_CLOCK_WAIT_SECONDS = 1.0
"""How long reading the server's time waits for a pooled connection (else: read later)."""


def _connect_timeout(seconds: Any, from_dsn: str | int | None) -> float:
    """The connect timeout: ``seconds`` if given, else the dsn's ``connect_timeout``, else 10."""
    if seconds is None:
        try:
            dsn_seconds = float(from_dsn) if from_dsn is not None else 0.0
        except ValueError:
            raise InvalidSettingsError(
                f"PostgresStore(dsn): connect_timeout={from_dsn!r} is not a number of seconds"
            ) from None
        if math.isfinite(dsn_seconds) and dsn_seconds > 0:
            return dsn_seconds
        return DEFAULT_CONNECT_TIMEOUT_SECONDS
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise InvalidSettingsError(
            f"PostgresStore(connect_timeout_seconds={seconds!r}): use seconds > 0, or None "
            "for the dsn's connect_timeout (else 10)"
        )
    return float(seconds)


_FIRST_READ = "'0001-01-02 00:00:00+00'::timestamptz"
_LAST_READ = "'9999-12-30 00:00:00+00'::timestamptz"


def _readable(column: str) -> sql.Composable:
    """SQL reading the time ``column`` as a Python datetime can hold it.

    PostgreSQL holds times no datetime can (``infinity``, ``-infinity``, years before 1 or
    after 9999: a row edited by hand), and psycopg refuses to read one, which failed the
    whole ``list``, ``find_due`` or ``alarms`` (no worker could start). Such a time reads
    as the first or last day a datetime holds (a day inside, whatever the session's time
    zone), as SQLite's columns do (``from_micros``); a ``NULL`` stays ``NULL``. The
    filters and the order still read the column itself.
    """
    return sql.SQL(
        "CASE WHEN {column} < {first} THEN {first} WHEN {column} > {last} THEN {last}"
        " ELSE {column} END"
    ).format(
        column=sql.Identifier(*column.split(".")),
        first=sql.SQL(_FIRST_READ),
        last=sql.SQL(_LAST_READ),
    )


def _utc(when: datetime | None) -> datetime | None:
    return None if when is None else when.astimezone(timezone.utc)


class PostgresStore(GroupsMixin, BaseStore):
    """Executions and definitions in PostgreSQL; tables are created on first use.

    ``schema`` puts the tables (``prana_executions``, ``prana_workflows``) in that schema,
    created if missing; ``None`` uses the connection's ``search_path`` (normally
    ``public``). ``max_connections`` caps the pool. ``connect_timeout_seconds`` bounds
    the first connect (default: the dsn's ``connect_timeout``, else 10 s); an unreachable
    server raises ``StoreError`` saying why. ``cache_size`` executions are
    remembered with the JSON text they were saved as, so loading one whose stored text is
    unchanged skips parsing it (``0`` parses every time); records are frozen values and
    must not be mutated, here as everywhere in prana.

    ``on_save`` (also an attribute, settable later) is called as ``on_save(conn,
    execution)`` inside every successful ``save``'s transaction, after the row write and
    before the commit. The invariant: the row change and whatever the hook writes on
    ``conn`` commit together; if the hook raises, the transaction rolls back, ``save``
    raises that error, and neither is stored. ``None`` (the default) keeps each save a
    single autocommitted statement.

    ``grouped()`` / ``commit_group()`` make it a ``GroupingStore`` (see the module; a
    failed save inside a group loses the whole group). Every commit waits for the disk by
    default (``group_commits="sync"``); ``group_commits="async"`` is an opt-in that lets a
    group's commits skip that wait (``BEGIN_ASYNC_GROUP`` says what a server crash may then
    cost); outside groups every commit waits either way.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        max_connections: int = 4,
        connect_timeout_seconds: float | None = None,
        cache_size: int = 1024,
        on_save: OnSave | None = None,
        upgrade: bool = True,
        group_commits: str = "sync",
    ) -> None:
        if on_save is not None and not callable(on_save):
            raise InvalidSettingsError(
                f"PostgresStore(on_save={on_save!r}): pass a callable taking (connection, "
                "execution), or None"
            )
        if not isinstance(dsn, str):
            raise InvalidSettingsError(
                f"PostgresStore(dsn={type(dsn).__name__}): use a connection string such as "
                "'postgresql://user@host:5432/dbname'"
            )
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            raise InvalidSettingsError(
                f"PostgresStore(dsn): not a valid connection string ({one_line(exc)}); use "
                "one such as 'postgresql://user@host:5432/dbname'"
            ) from None
        timeout = _connect_timeout(connect_timeout_seconds, params.get("connect_timeout"))
        if schema is not None:
            check_schema_name(schema, "PostgresStore(schema)")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise InvalidSettingsError(
                f"PostgresStore(max_connections={max_connections!r}): use a whole number >= 1"
            )
        check_limit(max_connections, "PostgresStore(max_connections)")
        self.dsn = dsn
        self.schema = schema
        self.upgrade = upgrade
        self.schema_version = 0
        """The database's schema version once set up (``SCHEMA_VERSION`` after any upgrade)."""
        self.upgraded_from: int | None = None
        """The version this store upgraded the database from when it set up, if it did."""
        self.max_connections = max_connections
        self.connect_timeout_seconds = timeout
        self._pool: ConnectionPool | None = None
        self._pool_lock = threading.Lock()
        self._ready = False
        super().__init__()
        self._parsed = ParsedCache(cache_size)
        self._q = _queries(schema)
        self.on_save: OnSave | None = on_save
        self._grouping = threading.local()
        """Per thread: ``depth`` of ``grouped()`` blocks, the group's ``conn``, ``broken``."""
        self.group_commits = group_commits
        self.clock = StoreClock(self._server_time, where="the PostgreSQL server")
        """The server's time (``scheduling.abc.TimedStore``): a ``Runner`` given no clock
        uses it, so every process judges leases and due times by one clock."""

    @property
    def group_commits(self) -> str:
        """``"sync"`` (default: every commit waits for the disk) or ``"async"`` (opt-in)."""
        return self._group_commits

    @group_commits.setter
    def group_commits(self, value: str) -> None:
        if value not in ("async", "sync"):
            raise InvalidSettingsError(
                f"PostgresStore(group_commits={value!r}): use 'sync' (every commit waits for "
                "the disk, the default) or 'async' (a batch's commits do not wait)"
            )
        self._group_commits = value
        self._begin_group = (
            BEGIN_ASYNC_GROUP
            if value == "async"
            else "BEGIN; SET LOCAL idle_in_transaction_session_timeout TO 0"
        )

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"

    # -- connections ------------------------------------------------------------------

    def _connections(self) -> ConnectionPool:
        pool = self._pool
        if pool is not None and self._ready:
            return pool
        with self._pool_lock:
            if self._pool is None:
                self._probe()
                pool = ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.max_connections,
                    kwargs={
                        "autocommit": True,
                        "connect_timeout": math.ceil(self.connect_timeout_seconds),
                    },
                    configure=_configure,
                    timeout=self.connect_timeout_seconds,
                    open=False,
                    name="prana-store",
                )
                try:
                    pool.open(wait=True, timeout=self.connect_timeout_seconds)
                except PoolTimeout:
                    pool.close()
                    raise StoreError(
                        f"cannot connect to PostgreSQL within {self.connect_timeout_seconds:g}s"
                        " (PostgresStore dsn); check that the server runs and the dsn is right"
                    ) from None
                self._group_slots = threading.BoundedSemaphore(max(1, self.max_connections - 1))
                self._pool = pool
            if not self._ready:
                try:
                    self._setup(self._pool)
                except psycopg.Error as exc:
                    raise driver_error(exc, "creating the tables") from exc
                self._ready = True
                self.clock.sync()
            return self._pool

    def _server_time(self) -> datetime | None:
        """The server's ``clock_timestamp()``; ``None`` while the pool is not open, or when
        the server cannot be asked now (the clock keeps its last reading)."""
        pool = self._pool
        if pool is None or not self._ready:
            return None
        try:
            with pool.connection(timeout=_CLOCK_WAIT_SECONDS) as conn:
                row = conn.execute("SELECT clock_timestamp()").fetchone()
        except (psycopg.Error, PoolTimeout):
            return None
        return None if row is None else cast("datetime", row[0])

    @contextlib.contextmanager
    def _connection(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; a driver error inside becomes a ``StoreError`` naming ``what``.

        Inside a group, the group's connection (a driver error then breaks the group).
        """
        if getattr(self._grouping, "depth", 0):
            conn = self._group_connection()
            try:
                yield conn
            except psycopg.Error as exc:
                self._break_group()
                raise driver_error(exc, what) from exc
            return
        pool = self._connections()
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise driver_error(exc, what) from exc

    def _read(self, what: str, query: str, params: Any, *, one: bool) -> Any:
        """Run a read-only ``query``: its first row (``one``) or all rows.

        A connection the server ended is retried once, after the pool has checked its
        idle connections (the server may have ended them all); any other driver error is a
        ``StoreError``.
        """
        if getattr(self._grouping, "depth", 0):
            with self._connection(what) as grouped:
                cursor = grouped.execute(query, params)
                return cursor.fetchone() if one else cursor.fetchall()
        pool = self._connections()
        for attempt in (1, 2):
            conn: psycopg.Connection[Any] | None = None
            try:
                with pool.connection() as conn:
                    cursor = conn.execute(query, params)
                    return cursor.fetchone() if one else cursor.fetchall()
            except psycopg.OperationalError as exc:
                if attempt == 1 and conn is not None and (conn.broken or conn.closed):
                    pool.check()
                    continue
                raise driver_error(exc, what) from exc
            except psycopg.Error as exc:
                raise driver_error(exc, what) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _probe(self) -> None:
        """Connect directly until one connection succeeds or the connect timeout passes.

        The pool would retry silently for its whole timeout, logging each failed attempt,
        and then say only that it timed out. Probing first waits just as long for a
        server that is starting up, and an unusable one fails in one line saying why
        (refused, unknown host, bad password).
        """
        deadline = time.monotonic() + self.connect_timeout_seconds
        pause = _PROBE_FIRST_PAUSE_SECONDS
        while True:
            remaining = deadline - time.monotonic()
            try:
                conn = psycopg.connect(self.dsn, connect_timeout=max(1, math.ceil(remaining)))
            except psycopg.Error as exc:
                if time.monotonic() + pause >= deadline:
                    raise StoreError(
                        f"cannot connect to PostgreSQL within {self.connect_timeout_seconds:g}s "
                        f"(PostgresStore dsn): {one_line(exc)}; check that the server runs "
                        "and the dsn is right"
                    ) from None
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
                continue
            conn.close()
            return

    def _setup(self, pool: ConnectionPool) -> None:
        with pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_LOCK,))
            if self.schema is not None:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
            self._migrate(conn)
        if self.upgraded_from is not None:  # said once committed
            where = f"PostgreSQL schema {self.schema or 'public'}"
            log_upgrade(where, self.upgraded_from, SCHEMA_VERSION)

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Bring the schema to ``SCHEMA_VERSION`` (in the caller's transaction) or refuse."""
        conn.execute(self._q["version_table"])
        current = conn.execute(self._q["schema_version"]).fetchone()[0]  # type: ignore[index]
        where = f"PostgreSQL schema {self.schema or 'public'}"
        if current is None:
            if conn.execute(self._q["executions_exist"]).fetchone()[0] is not None:  # type: ignore[index]
                raise unversioned_error(where)
            current = 0
        todo = pending(current, POSTGRES_MIGRATIONS, where=where, upgrade=self.upgrade)
        for migration in todo:
            conn.execute(self._q[f"migration_{migration.version}"])
            self._record(conn, migration)
        if todo and current > 0:
            self.upgraded_from = current
        self.schema_version = SCHEMA_VERSION

    def _record(self, conn: psycopg.Connection[Any], migration: Migration) -> None:
        conn.execute(self._q["record_migration"], (migration.version, migration.description))

    def stored_schema_version(self) -> int | None:
        """The database's schema version, read without creating or changing anything.

        ``None`` when the schema holds no prana tables; tables without a version table are
        refused (``unversioned_error``). ``prana db status`` uses it: a status is read-only.
        """
        self._probe()
        try:
            with psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=math.ceil(self.connect_timeout_seconds)
            ) as conn:
                version_table, executions = conn.execute(self._q["tables_exist"]).fetchone()  # type: ignore[misc]
                if version_table is not None:
                    row = conn.execute(self._q["schema_version"]).fetchone()
                    if row is not None and row[0] is not None:
                        return int(row[0])
        except psycopg.Error as exc:
            raise driver_error(exc, "reading the schema version") from exc
        if executions is not None:
            raise unversioned_error(f"PostgreSQL schema {self.schema or 'public'}")
        return None

    def setup(self) -> None:
        """Create the schema and tables if they do not exist (done on first use anyway)."""
        self._connections()

    def drop(self) -> None:
        """Drop this store's two tables and everything in them (for tests and teardown)."""
        with self._connection("dropping the tables") as conn:
            conn.execute(self._q["drop"])
        self._ready = False
        self._forget_workflows()
        self._parsed.clear()

    def close(self) -> None:
        """Close the pool's connections (idempotent); the next use opens a new pool."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
            self._ready = False
        if pool is not None:
            pool.close()

    # -- executions -------------------------------------------------------------------

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        """Store ``execution`` if ``expected_version`` is the stored one; return the new version.

        A successful save also ends any claim on the execution (its state moved on). With
        an ``on_save`` hook the write and the hook run in one transaction (see the class).
        """
        check_save(execution, expected_version)
        self._forget_prefetched(execution.id)
        data = dumps(execution)
        hook = self.on_save
        if getattr(self._grouping, "depth", 0):
            version = self._save_grouped(execution, expected_version, data, hook)
        else:
            with self._connection(f"save of execution {execution.id!r}") as conn:
                if hook is None:
                    version = self._write(conn, execution, expected_version, data)
                else:
                    with conn.transaction():
                        version = self._write(conn, execution, expected_version, data)
                        hook(conn, execution)
        self._parsed.put(execution.id, data, execution)
        return version

    def _write(
        self,
        conn: psycopg.Connection[Any],
        execution: WorkflowExecution,
        expected_version: int | None,
        data: str,
    ) -> int:
        """Insert or compare-and-set update the row; return the new version, or raise stale."""
        execution_id = execution.id
        if expected_version is None:
            cur = conn.execute(
                self._q["insert"],
                (
                    execution_id,
                    execution.workflow_id,
                    execution.workflow_version,
                    execution.status.value,
                    execution.due_at,
                    execution.updated_at,
                    data,
                ),
            )
            if cur.rowcount != 1:
                raise stale(execution_id, None, self._stored_version(conn, execution_id))
            return 1
        cur = conn.execute(
            self._q["update"],
            (
                execution.workflow_id,
                execution.workflow_version,
                execution.status.value,
                execution.due_at,
                execution.updated_at,
                data,
                execution_id,
                expected_version,
            ),
        )
        if cur.rowcount != 1:
            raise stale(execution_id, expected_version, self._stored_version(conn, execution_id))
        return expected_version + 1

    def claim(
        self,
        execution_id: str,
        expected_version: int,
        lease_expires_at: datetime,
        claimed_at: datetime,
    ) -> int:
        """Mark the stored execution running until ``lease_expires_at``, its record unchanged.

        ``scheduling.abc.ClaimingStore``: a compare-and-set on the version, like ``save``,
        that writes only the row's columns (no serialization, no ``data``). Inside a group it
        joins the group's transaction, as a save does. The ``on_save`` hook is not called: a
        claim arms nothing (its lease is the row's due time, read by ``find_due``).
        """
        check_claim(execution_id, expected_version, lease_expires_at, claimed_at)
        self._forget_prefetched(execution_id)
        params = (lease_expires_at, claimed_at, execution_id, expected_version)
        what = f"claim of execution {execution_id!r}"
        grouped = getattr(self._grouping, "depth", 0)
        if grouped:
            self._refuse_if_broken(what)
        with self._connection(what) as conn:
            if grouped:
                self._begin_if_idle(conn)
            if conn.execute(self._q["claim_columns"], params).rowcount != 1:
                raise stale(
                    execution_id,
                    expected_version,
                    self._stored_version(conn, execution_id),
                )
        return expected_version + 1

    def _forget_prefetched(self, execution_id: str) -> None:
        prefetched = getattr(self._grouping, "prefetched", None)
        if prefetched:
            prefetched.pop(execution_id, None)

    def _stored_version(self, conn: psycopg.Connection[Any], execution_id: str) -> int | None:
        row = conn.execute(self._q["version"], (execution_id,)).fetchone()
        return None if row is None else int(row[0])

    def prefetch(self, execution_ids: Sequence[str]) -> None:
        """Read the rows of ``execution_ids`` in one query, for this thread's next loads.

        For a batch of alarms about to be resumed one by one (``ProcrastinateScheduler``'s
        ``prefetch``): each row read here serves the thread's next ``load`` of its id, once,
        and a save or claim of the id drops it; a new call (``[]`` to end) drops what is
        left. A row may be older than the stored one by the time it serves, as with any
        read racing a writer: the step's compare-and-set refuses to build on it, so nothing
        stale is ever written (the alarm is dropped as one that lost the race).
        """
        local = self._grouping
        local.prefetched = None
        if not execution_ids:
            return
        rows = self._read("prefetch", self._q["load_many"], (list(execution_ids),), one=False)
        local.prefetched = {row[0]: row[1:] for row in rows}

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        """The execution and its version; ``ExecutionNotFound`` if there is none.

        A row this thread prefetched (``prefetch``) serves once, without a query.
        """
        prefetched = getattr(self._grouping, "prefetched", None)
        row = None if not prefetched else prefetched.pop(execution_id, None)
        if row is None:
            row = self._read(
                f"load of execution {execution_id!r}", self._q["load"], (execution_id,), one=True
            )
        if row is None:
            raise ExecutionNotFound(f"no execution {execution_id!r} is stored")
        execution = self._parsed.read(execution_id, row[0])
        if row[2] == "running" and execution.status is ExecutionStatus.SUSPENDED:
            execution = as_claimed(execution, _utc(row[3]), _utc(row[4]))  # ClaimingStore
        return execution, read_version(execution_id, row[1])

    def webhook_wait(self, execution_id: str) -> tuple[str, str | None] | None:
        """The stored record's ``(suspended node, token digest)``, read from the last 16 KiB
        of its text, cut by the server (``webhook_wait_in_tail``): the worker neither
        receives nor decodes the rest. ``None`` when that cannot tell, and for a record of
        at most ``LOADED_RECORD_BYTES``, which is loaded instead (it knows a used token's
        repeated delivery). ``ExecutionNotFound`` when there is no such row."""
        row = self._read(
            f"webhook wait of execution {execution_id!r}",
            self._q["webhook_wait"],
            (LOADED_RECORD_BYTES, WAIT_TAIL_BYTES, execution_id),
            one=True,
        )
        if row is None:
            raise ExecutionNotFound(f"no execution {execution_id!r} is stored")
        tail = row[0]
        return None if tail is None else webhook_wait_in_tail(tail.encode())

    def count_tree(self, root_id: str, most: int) -> int:
        """Executions with id ``root_id`` or starting ``root_id + ":"``, up to ``most``."""
        most = check_tree_args(root_id, most)
        escaped = root_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        row = self._read(
            f"count of the tree of {root_id!r}",
            self._q["count_tree"],
            (root_id, escaped + ":%", most),
            one=True,
        )
        return int(row[0])

    def find_due(self, now: datetime, limit: int = 100) -> Sequence[tuple[str, datetime]]:
        """Suspended executions due at or before ``now``, earliest first (ties: oldest first).

        Claims are ignored: this is a read, for a runner that owns the whole store.
        """
        check_aware(now, "find_due(now)")
        check_limit(limit)
        rows = self._read("find_due", self._q["find_due"], (now, limit), one=False)
        return [(eid, at.astimezone(timezone.utc)) for eid, at in rows]

    def alarms(self) -> Sequence[tuple[str, datetime]]:
        """Every suspended execution with a due time, earliest first."""
        rows = self._read("alarms", self._q["alarms"], None, one=False)
        return [(eid, at.astimezone(timezone.utc)) for eid, at in rows]

    def claim_due(
        self,
        now: datetime,
        limit: int = 100,
        *,
        worker: str,
        lease: timedelta = timedelta(seconds=60),
    ) -> list[str]:
        """Claim up to ``limit`` due executions for ``worker``; return their ids, earliest first.

        A claim is a lease: the row gets ``claimed_by = worker`` and ``claimed_until = now
        + lease``, and until then no other ``claim_due`` returns it (rows another worker is
        claiming at this very moment are skipped, ``FOR UPDATE SKIP LOCKED``, never waited
        for). The lease ends early when the execution is saved (its state moved on) or
        ``release``d; if the worker dies, it ends at ``claimed_until`` and another worker
        claims the execution again. A claim does not change the version: it only spreads
        work; the compare-and-set on save is what makes each transition happen once, so a
        worker whose lease ran out and a second claimant can both try, and one save wins.
        """
        check_aware(now, "claim_due(now)")
        check_limit(limit)
        if not isinstance(worker, str) or not worker:
            raise InvalidSettingsError(
                f"claim_due(worker={worker!r}): use a non-empty name, e.g. host and pid"
            )
        if not isinstance(lease, timedelta) or lease <= timedelta(0):
            raise InvalidSettingsError(
                f"claim_due(lease={lease!r}): use a positive timedelta, e.g. timedelta(seconds=60)"
            )
        with self._connection("claim_due") as conn:
            rows = conn.execute(
                self._q["claim"],
                {"now": now, "limit": limit, "worker": worker, "until": now + lease},
            ).fetchall()
        rows.sort(key=lambda row: (row[1], row[2]))
        return [row[0] for row in rows]

    def release(self, execution_id: str, *, worker: str) -> bool:
        """End ``worker``'s claim on ``execution_id``; ``False`` if it held none."""
        with self._connection(f"release of execution {execution_id!r}") as conn:
            cur = conn.execute(self._q["release"], (execution_id, worker))
        return cur.rowcount == 1

    def list(
        self,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        *,
        workflow_id: str | None = None,
        after: str | None = None,
    ) -> Sequence[ExecutionSummary]:
        """Executions, most recently created first, filtered and paged (see ``ExecutionStore``)."""
        wanted = check_status(status)
        check_limit(limit)
        check_list_args(workflow_id, after)
        q = self._q
        query, params = list_query(
            q["summary"], q["executions"], "%s", wanted, workflow_id, after, limit
        )
        rows = self._read("list", query, params, one=False)
        if (
            not rows
            and after is not None
            and self._read("list", q["version"], (after,), one=True) is None
        ):
            raise cursor_not_found(after)
        return summaries_from_rows(rows, _utc)

    # -- workflow definitions ---------------------------------------------------------

    def _insert_workflow(self, key: tuple[str, int], text: str) -> str | bytes | None:
        with self._connection(f"save of workflow {key[0]!r}") as conn:
            if conn.execute(self._q["insert_workflow"], (*key, text)).rowcount == 1:
                return None
            row = conn.execute(self._q["workflow"], key).fetchone()
        if row is None:  # taken, then gone: nothing to compare with
            raise WorkflowConflictError(conflict_message(*key))
        return cast("str | bytes", row[0])

    def _select_workflow(self, key: tuple[str, int]) -> str | bytes | None:
        row = self._read(
            f"load of workflow {key[0]!r} version {key[1]}", self._q["workflow"], key, one=True
        )
        return None if row is None else cast("str | bytes", row[0])

    def list_workflows(self) -> builtins.list[tuple[str, int]]:
        """Every stored definition's ``(workflow_id, version)``, sorted."""
        rows = self._read("list of workflows", self._q["list_workflows"], (), one=False)
        return [(str(w), int(v)) for w, v in rows]

    def latest_workflow_version(self, workflow_id: str) -> int | None:
        """The highest stored version of ``workflow_id``, or None."""
        row = self._read(
            f"latest version of workflow {workflow_id!r}",
            self._q["latest_workflow"],
            (workflow_id,),
            one=True,
        )
        version: int | None = row[0] if row is not None else None
        return version

    # -- schedules (scheduling._schedules: definitions and state as JSON text) ----------

    def _schedule_write(self, key: str, params: tuple[Any, ...], what: str) -> bool:
        with self._connection(what) as conn:
            return bool(conn.execute(self._q[key], params).rowcount)

    def schedule_insert(self, schedule_id: str, definition: str, state: str) -> bool:
        """Store a new schedule; ``False`` if one has this id."""
        return self._schedule_write(
            "schedule_insert", (schedule_id, definition, state), f"add of schedule {schedule_id!r}"
        )

    def schedule_define(self, schedule_id: str, definition: str) -> bool:
        """Replace a schedule's definition; ``False`` if there is none."""
        return self._schedule_write(
            "schedule_define", (definition, schedule_id), f"change of schedule {schedule_id!r}"
        )

    def schedule_row(self, schedule_id: str) -> tuple[str, str, int] | None:
        """A schedule's ``(definition, state, state version)``, or ``None``."""
        row = self._read(
            f"load of schedule {schedule_id!r}", self._q["schedule_row"], (schedule_id,), one=True
        )
        return None if row is None else (str(row[0]), str(row[1]), int(row[2]))

    def schedule_rows(self) -> builtins.list[tuple[str, str, str, int]]:
        """Every schedule's ``(id, definition, state, state version)``, by id."""
        rows = self._read("list of schedules", self._q["schedule_rows"], (), one=False)
        return [(str(i), str(d), str(s), int(v)) for i, d, s, v in rows]

    def schedule_advance(self, schedule_id: str, state: str, expected_version: int) -> bool:
        """Replace a schedule's state if its version is still ``expected_version``."""
        return self._schedule_write(
            "schedule_advance",
            (state, schedule_id, expected_version),
            f"advance of schedule {schedule_id!r}",
        )

    def schedule_delete(self, schedule_id: str) -> bool:
        """Forget a schedule (its executions stay); ``False`` if there was none."""
        return self._schedule_write(
            "schedule_delete", (schedule_id,), f"delete of schedule {schedule_id!r}"
        )


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Every pooled connection reads times back in UTC."""
    conn.execute("SET TIME ZONE 'UTC'")


def _queries(schema: str | None) -> dict[str, str]:
    """Every statement, with the table names quoted once (so each call is a plain string)."""

    def name(table: str) -> sql.Identifier:
        return sql.Identifier(schema, table) if schema is not None else sql.Identifier(table)

    names = {
        "executions": name("prana_executions"),
        "workflows": name("prana_workflows"),
        "schedules": name("prana_schedules"),
        "schema_version": name("prana_schema_version"),
        # to_regclass reads its text as SQL does: quoted, so a mixed-case schema keeps its case
        "executions_text": sql.Literal(name("prana_executions").as_string(None)),
        "schema_version_text": sql.Literal(name("prana_schema_version").as_string(None)),
        "seq_index": sql.Identifier("prana_executions_seq"),
        "due_index": sql.Identifier("prana_executions_due"),
        "status_index": sql.Identifier("prana_executions_status"),
        # The time columns as selected: see _readable.
        "due_at": _readable("due_at"),
        "updated_at": _readable("updated_at"),
        "e_due_at": _readable("e.due_at"),
    }
    summary = (
        "SELECT id, workflow_id, workflow_version, status, version, {due_at}, {updated_at}"
        " FROM {executions}"
    )
    text = {
        "version_table": "CREATE TABLE IF NOT EXISTS {schema_version} (version integer PRIMARY KEY,"
        " description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
        "schema_version": "SELECT MAX(version) FROM {schema_version}",
        "executions_exist": "SELECT to_regclass({executions_text})",
        "tables_exist": "SELECT to_regclass({schema_version_text}), to_regclass({executions_text})",
        "record_migration": "INSERT INTO {schema_version} (version, description) VALUES (%s, %s)",
        **{f"migration_{m.version}": m.sql for m in POSTGRES_MIGRATIONS},
        "drop": "DROP TABLE IF EXISTS {executions}, {workflows}, {schedules}, {schema_version}",
        "insert": "INSERT INTO {executions}"
        " (id, workflow_id, workflow_version, status, due_at, version, updated_at, data)"
        " VALUES (%s, %s, %s, %s, %s, 1, %s, %s) ON CONFLICT (id) DO NOTHING",
        "update": "UPDATE {executions} SET workflow_id = %s, workflow_version = %s,"
        " status = %s, due_at = %s, version = version + 1, updated_at = %s, data = %s,"
        " claimed_by = NULL, claimed_until = NULL"
        " WHERE id = %s AND version = %s",
        "version": "SELECT version FROM {executions} WHERE id = %s",
        "load": "SELECT data, version, status, {due_at}, {updated_at} FROM {executions}"
        " WHERE id = %s",
        # A light claim (``ClaimingStore``) sets the columns only; ``data`` stays the
        # suspended record it claims.
        "load_many": "SELECT id, data, version, status, {due_at}, {updated_at}"
        " FROM {executions} WHERE id = ANY(%s)",
        "claim_columns": "UPDATE {executions} SET status = 'running', due_at = %s,"
        " version = version + 1, updated_at = %s, claimed_by = NULL, claimed_until = NULL"
        " WHERE id = %s AND version = %s",
        # the tail is cut on the server: the worker never receives (or parses) the rest
        "webhook_wait": "SELECT CASE WHEN octet_length(data) > %s THEN right(data, %s) END"
        " FROM {executions} WHERE id = %s",
        "count_tree": "SELECT COUNT(*) FROM (SELECT 1 FROM {executions}"
        " WHERE id = %s OR id LIKE %s ESCAPE '\\' LIMIT %s) AS tree",
        "find_due": "SELECT id, {due_at} FROM {executions}"
        " WHERE due_at IS NOT NULL AND due_at <= %s ORDER BY due_at, seq LIMIT %s",
        "alarms": "SELECT id, {due_at} FROM {executions}"
        " WHERE due_at IS NOT NULL ORDER BY due_at, seq",
        "claim": "UPDATE {executions} AS e"
        " SET claimed_by = %(worker)s, claimed_until = %(until)s"
        " FROM (SELECT id FROM {executions}"
        "  WHERE due_at IS NOT NULL AND due_at <= %(now)s"
        "  AND (claimed_until IS NULL OR claimed_until <= %(now)s)"
        "  ORDER BY due_at, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS due"
        " WHERE e.id = due.id RETURNING e.id, {e_due_at}, e.seq",
        "release": "UPDATE {executions} SET claimed_by = NULL, claimed_until = NULL"
        " WHERE id = %s AND claimed_by = %s",
        "summary": summary,
        "executions": "{executions}",
        "workflow": "SELECT data FROM {workflows} WHERE workflow_id = %s AND version = %s",
        "latest_workflow": "SELECT MAX(version) FROM {workflows} WHERE workflow_id = %s",
        "list_workflows": "SELECT workflow_id, version FROM {workflows}"
        ' ORDER BY workflow_id COLLATE "C", version',
        "insert_workflow": "INSERT INTO {workflows} (workflow_id, version, data)"
        " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
        "schedule_insert": "INSERT INTO {schedules} (id, definition, state, version)"
        " VALUES (%s, %s, %s, 1) ON CONFLICT DO NOTHING",
        "schedule_define": "UPDATE {schedules} SET definition = %s WHERE id = %s",
        "schedule_row": "SELECT definition, state, version FROM {schedules} WHERE id = %s",
        "schedule_rows": "SELECT id, definition, state, version FROM {schedules}"
        ' ORDER BY id COLLATE "C"',
        "schedule_advance": "UPDATE {schedules} SET state = %s, version = version + 1"
        " WHERE id = %s AND version = %s",
        "schedule_delete": "DELETE FROM {schedules} WHERE id = %s",
    }
    return {key: sql.SQL(query).format(**names).as_string(None) for key, query in text.items()}
