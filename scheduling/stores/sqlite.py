"""The embedded default store: one SQLite file (stdlib ``sqlite3``), WAL journal.

Durability: ``synchronous="NORMAL"`` (the default) with WAL survives a crash of the
process, not a power loss or an OS crash, which may lose the last commits (never corrupt
the file). ``synchronous="FULL"`` syncs every commit and survives those too, at the cost
of one fsync per save.

Concurrency: one connection, shared by every thread behind a lock (the runner's
scheduler fires from a background thread, and ``":memory:"`` is one database per
connection, so per-thread connections would not see each other's data there). Each save
is a single statement, ``UPDATE ... WHERE id = ? AND version = ?``, so the version check
and the write are one atomic step, also between processes sharing the file; reads that
must agree with a following write (``save_workflow``) run under ``BEGIN IMMEDIATE``.

Groups (``scheduling.abc.GroupingStore``): inside ``grouped()`` a thread's saves run in one
``BEGIN IMMEDIATE`` transaction, opened by the first of them and committed by
``commit_group`` or the end of the block. The thread keeps the store's lock from that first
save to the commit (its connection is everyone's), so no other thread's statement joins
or sees the open transaction, and other processes wait for the file's write lock.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from prana import ExecutionStatus, InvalidSettingsError, WorkflowExecution, dumps
from scheduling._errors import (
    ExecutionNotFound,
    StoreError,
)
from scheduling.abc import ExecutionSummary
from scheduling.stores._base import (
    LOADED_RECORD_BYTES,
    WAIT_TAIL_BYTES,
    BaseStore,
    webhook_wait_in_tail,
)
from scheduling.stores._migrations import (
    Migration,
    SchemaBehindError,
    SchemaTooNewError,
    check_sequence,
    log_upgrade,
    pending,
    unversioned_error,
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
    from_micros,
    list_query,
    read_version,
    stale,
    summaries_from_rows,
    to_micros,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import TracebackType

__all__ = ["SQLiteStore"]

SYNCHRONOUS_MODES = ("NORMAL", "FULL", "EXTRA")
WAL_SIZE_LIMIT_BYTES = 8 << 20
"""The WAL file is cut back to this size at each checkpoint (``journal_size_limit``): twice
what the automatic checkpoint lets it reach (1,000 pages of 4 KiB), so a WAL a long reader
made grow gives its disk back, and one that never grew past it is never cut."""

# Times are whole microseconds since the epoch (UTC): exact, and they sort as time does.
# ``seq`` (the rowid) is creation order: ``list`` is newest first by it, ties in due
# time go oldest first. There is no index on ``status``: keeping one costs every save
# about a fifth of its SQL time, and ``list(status)`` walks the rowid backwards, stopping
# at ``limit`` matches. Nor on ``workflow_id``, for ``list(workflow_id=...)``: measured,
# it cost each insert about a quarter of its SQL time (10 us of 40), while a walk that
# finds a rare workflow among 100,000 executions of 5 KB takes about 60 ms (an operator's
# query; ``data`` lives in overflow pages the walk never reads).
SQLITE_MIGRATIONS = (
    Migration(
        1,
        "executions (with due time, version and lease) and workflow definitions",
        """
CREATE TABLE IF NOT EXISTS prana_executions (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    workflow_id TEXT NOT NULL,
    workflow_version INTEGER NOT NULL,
    status TEXT NOT NULL,
    due_at INTEGER,
    version INTEGER NOT NULL,
    updated_at INTEGER,
    data TEXT NOT NULL,
    lease_at INTEGER
);
CREATE INDEX IF NOT EXISTS prana_executions_due
    ON prana_executions (due_at, seq) WHERE due_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS prana_workflows (
    workflow_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (workflow_id, version)
);
""",
    ),
    Migration(
        2,
        "schedules: definition and state (cursor, buffered slot, recent runs) as JSON",
        """
CREATE TABLE IF NOT EXISTS prana_schedules (
    id TEXT PRIMARY KEY,
    definition TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL
);
""",
    ),
)
"""The SQLite schema, step by step: add a step at the end, never edit one (see _migrations)."""
check_sequence(SQLITE_MIGRATIONS)
SCHEMA_VERSION = SQLITE_MIGRATIONS[-1].version
"""The schema version this code writes and reads."""

_INSERT = (
    "INSERT INTO prana_executions"
    " (id, workflow_id, workflow_version, status, due_at, version, updated_at, data)"
    " VALUES (?, ?, ?, ?, ?, 1, ?, ?)"
)
_UPDATE = (
    "UPDATE prana_executions SET workflow_id = ?, workflow_version = ?, status = ?,"
    " due_at = ?, lease_at = NULL, version = version + 1, updated_at = ?, data = ?"
    " WHERE id = ? AND version = ?"
)
# ``_UPDATE`` for a record with no due time (one that ended, or waits for a delivery): the
# sqlite3 module binds a ``None`` parameter through its adapter lookup (two failed
# attribute lookups, about 2,300 instructions of a save), a literal ``NULL`` costs nothing;
# the row written is the same (``tests/test_shell_fast_paths.py``).
_UPDATE_UNDUE = _UPDATE.replace(" due_at = ?,", " due_at = NULL,")
# A claim (``scheduling.abc.ClaimingStore``) sets the columns only; ``data`` stays the
# suspended record it claims. The rule of the claimed row:
#
#     Its lease is ``lease_at``; its ``due_at`` stays the due time it was claimed at, which
#     is never after the lease. A row's alarm is ``lease_at`` while it is claimed (status
#     ``running``, ``lease_at`` set), else ``due_at`` (``_ALARM_AT``).
#
# So a claim writes the row alone, not the due-time index (``prana_executions_due``): two
# of the three pages a claim's commit wrote before, when its lease moved ``due_at``. A claim
# that cannot keep the rule (no due time, or one after the lease: a row edited by hand)
# moves ``due_at`` to the lease as well (``_CLAIM_MOVING``). Every claimed row thus has
# ``due_at <= lease_at``, so an alarm at or before ``now`` has ``due_at <= now`` and the
# index walk of ``find_due`` finds every claim whose lease ended. A save clears ``lease_at``.
# A ``running`` row without ``lease_at`` (edited by hand) has ``due_at`` as its lease.
_CLAIM = (
    "UPDATE prana_executions SET status = 'running', lease_at = ?, version = version + 1,"
    " updated_at = ? WHERE id = ? AND version = ? AND due_at <= ?"
)
_CLAIM_MOVING = (
    "UPDATE prana_executions SET status = 'running', lease_at = ?, due_at = ?,"
    " version = version + 1, updated_at = ? WHERE id = ? AND version = ?"
)
_ALARM_AT = "CASE WHEN lease_at IS NOT NULL AND status = 'running' THEN lease_at ELSE due_at END"
_VERSION = "SELECT version FROM prana_executions WHERE id = ?"
_LOAD = (
    "SELECT data, version, status, due_at, updated_at, lease_at FROM prana_executions WHERE id = ?"
)
_SEQ = "SELECT seq FROM prana_executions WHERE id = ?"
# A range of the id's (binary) index: every id starting "<root>:" sorts from it to "<root>;".
_COUNT_TREE = (
    "SELECT COUNT(*) FROM (SELECT 1 FROM prana_executions"
    " WHERE id = ? OR (id >= ? AND id < ?) LIMIT ?)"
)
# Ordered by the index: a claim whose lease ended comes at the due time it was claimed at.
# (``_ALARM_AT`` is this module's constant text; values go in as parameters.)
# A time column holding text (a hand or a tool wrote it) reads as the first datetime
# (``from_micros``), so such a row is due at once; but SQLite orders text after every number,
# so ``due_at <= ?`` never holds for it: ``_FIND_DUE_TEXT`` takes those rows after the others,
# by their own range of the index (``due_at >= ''``: text and blobs, in the usual store none
# at all), and both read a text alarm time (a lease) as due (``_DUE``). After, not first: such
# a row's record decides when it is due, and rows whose records are not due yet must not fill
# every page ahead of rows due by their time.
_DUE = f"({_ALARM_AT} <= ? OR {_ALARM_AT} >= '')"
_FIND_DUE = (
    f"SELECT id, {_ALARM_AT} FROM prana_executions"  # noqa: S608
    f" WHERE due_at IS NOT NULL AND due_at <= ? AND {_DUE}"
    " ORDER BY due_at, seq LIMIT ?"
)
_FIND_DUE_TEXT = (
    f"SELECT id, {_ALARM_AT} FROM prana_executions"  # noqa: S608
    f" WHERE due_at IS NOT NULL AND due_at >= '' AND {_DUE}"
    " ORDER BY due_at, seq LIMIT ?"
)
_ALARMS = (
    f"SELECT id, {_ALARM_AT} FROM prana_executions"  # noqa: S608
    " WHERE due_at IS NOT NULL ORDER BY due_at, seq"
)
_SUMMARY = (
    f"SELECT id, workflow_id, workflow_version, status, version, {_ALARM_AT},"  # noqa: S608
    " updated_at FROM prana_executions"
)
_WORKFLOW = "SELECT data FROM prana_workflows WHERE workflow_id = ? AND version = ?"
_INSERT_WORKFLOW = "INSERT INTO prana_workflows (workflow_id, version, data) VALUES (?, ?, ?)"


def _claim_row(
    conn: sqlite3.Connection, execution_id: str, expected_version: int, lease: int, at: int
) -> bool:
    """A light claim of one row by compare-and-set (``claim``); whether it held.

    ``_CLAIM`` leaves the due time alone; a row with no due time at or before the lease
    (or a stale one) gets ``_CLAIM_MOVING``, which moves it to the lease.
    """
    changed = conn.execute(_CLAIM, (lease, at, execution_id, expected_version, lease))
    if changed.rowcount != 1:  # stale, or no due time at or before the lease
        changed = conn.execute(_CLAIM_MOVING, (lease, lease, at, execution_id, expected_version))
    return changed.rowcount == 1


class _Grouping(threading.local):
    """Per thread: ``depth``, how many ``grouped()`` blocks the thread is inside.

    Speed rule: the default is a class attribute, so ``claim`` and ``save`` read it on a
    thread that never grouped without raising: ``getattr(local, "depth", 0)`` there makes
    and discards an ``AttributeError`` (~2,000 instructions, twice per resume step).
    """

    depth = 0


class _Guard:
    """The store's lock; leaving it turns any ``sqlite3.Error`` raised inside into a ``StoreError``.

    Every statement runs under the lock, so this one place keeps raw driver errors (a
    closed store, a lock held too long by another process, a full disk) from escaping.
    The hot methods (``load``, ``claim``, ``save``, ``commit_group``: several per resume)
    write the same rule out by hand, ``lock.acquire()``, then ``try``, ``except
    sqlite3.Error`` raising ``_driver_error``, ``finally`` release, because entering and
    leaving this guard is two Python calls each time (about 2,400 instructions of a
    ~425,000-instruction resume, per use); ``tests/test_shell_fast_paths.py`` checks that
    each still raises a ``StoreError`` for a driver error.
    """

    __slots__ = ("_store", "lock")

    def __init__(self, store: SQLiteStore) -> None:
        self.lock = threading.RLock()
        self._store = store

    def __enter__(self) -> None:
        self.lock.acquire()

    def hold(self) -> None:
        """Take the lock once more: an open group keeps it until its commit."""
        self.lock.acquire()

    def release(self) -> None:
        """Give back the hold of an open group."""
        self.lock.release()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.lock.release()
        if isinstance(exc, sqlite3.Error):
            raise self._store._driver_error(exc) from exc


_STATUS_TEXT = {status: status.value for status in ExecutionStatus}
"""A status's column text (``.value`` of an enum member is a Python-level property)."""


def _is_utc(when: object) -> bool:
    """Whether ``when`` is a ``datetime`` in ``timezone.utc``: an aware one, checked cheaply."""
    return when.__class__ is datetime and when.tzinfo is timezone.utc


def _micros_or_none(when: datetime | None) -> int | None:
    return None if when is None else to_micros(when)


def _time_or_none(micros: int | None) -> datetime | None:
    return None if micros is None else from_micros(micros)


def _create_private(where: Path) -> None:
    """Create a new database file readable by its owner only (0600): it holds every
    execution's input, params and outputs. SQLite gives its ``-wal`` and ``-shm`` files the
    same mode; an existing file keeps the mode it has."""
    try:
        os.close(os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(
            f"{where}: cannot create the database: {exc}; check the path and its permissions"
        ) from exc


def _stored_version(conn: sqlite3.Connection) -> int | None:
    """The schema version the database records, read without a write lock (``None``: none)."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'prana_schema_version'"
    ).fetchone()
    if found is None:
        return None
    row = conn.execute("SELECT MAX(version) FROM prana_schema_version").fetchone()
    return None if row[0] is None else int(row[0])


class SQLiteStore(BaseStore):
    """Executions and definitions in one SQLite database file (``":memory:"`` works).

    ``synchronous`` is ``"NORMAL"`` (survives a process crash) or ``"FULL"`` (survives a
    power loss too); ``busy_timeout_ms`` is how long a write waits for another process
    holding the file's write lock before ``sqlite3.OperationalError``. ``cache_size``
    executions are remembered with the JSON text they were saved as, so loading one whose
    stored text is unchanged skips parsing it (``0`` parses every time); records are frozen
    values and must not be mutated, here as everywhere in prana.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 5000,
        cache_size: int = 1024,
        upgrade: bool = True,
    ) -> None:
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in SYNCHRONOUS_MODES:
            raise InvalidSettingsError(
                f"SQLiteStore(synchronous={synchronous!r}): use one of "
                f"{', '.join(SYNCHRONOUS_MODES)} (NORMAL survives a process crash, FULL a "
                "power loss too)"
            )
        if (
            isinstance(busy_timeout_ms, bool)
            or not isinstance(busy_timeout_ms, int)
            or busy_timeout_ms < 0
        ):
            raise InvalidSettingsError(
                f"SQLiteStore(busy_timeout_ms={busy_timeout_ms!r}): use whole milliseconds >= 0"
            )
        self.path = _check_path(path)
        self.synchronous = mode
        self.busy_timeout_ms = busy_timeout_ms
        self.upgrade = upgrade
        self.schema_version = 0
        """The database's schema version once open (``SCHEMA_VERSION`` after any upgrade)."""
        self.upgraded_from: int | None = None
        """The version this store upgraded the database from when it opened, if it did."""
        self._closed = False
        self._lock = _Guard(self)
        self._mutex = self._lock.lock
        """The lock ``_lock`` guards with (``load``, ``claim`` and ``save`` take it directly)."""
        self._grouping = _Grouping()
        self._group_owner: int | None = None
        """The thread whose group transaction is open (it holds the lock), if any."""
        super().__init__()
        self._parsed = ParsedCache(cache_size)
        self._conn = self._connect()

    def _connect(self) -> sqlite3.Connection:
        """Open the file and create the tables; a path that cannot be used is a StoreError."""
        path = self.path
        if path != ":memory:":
            where = Path(path)
            if where.is_dir():
                raise StoreError(
                    f"{path}: cannot open the database: it is a directory; pass a file path, "
                    f"e.g. {where / 'prana.db'}"
                )
            if not where.parent.is_dir():
                raise StoreError(
                    f"{path}: cannot open the database: the directory {where.parent} does not "
                    "exist; create it first, or pass another path"
                )
            _create_private(where)
        try:
            # isolation_level=None: autocommit; each statement commits unless we BEGIN.
            conn = sqlite3.connect(
                path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.busy_timeout_ms / 1000,
                cached_statements=64,
            )
        except sqlite3.Error as exc:
            raise StoreError(
                f"{path}: cannot open the database: {exc}; check the path and its permissions"
            ) from exc
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA journal_size_limit = {int(WAL_SIZE_LIMIT_BYTES)}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._migrate(conn)
        except (SchemaTooNewError, SchemaBehindError):
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "not a database" in str(exc):
                raise StoreError(
                    f"{path}: not a database (SQLite says: {exc}); pass the path of a prana "
                    "SQLite database, or a new file name"
                ) from exc
            raise StoreError(
                f"{path}: cannot open the database: {exc}; check the path and its permissions"
            ) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the schema to ``SCHEMA_VERSION`` in one transaction, or refuse (_migrations).

        A database at ``SCHEMA_VERSION`` is only read: opening it takes no write lock, so a
        reader (``prana list``, ``prana show``) opens while another process writes.
        """
        if _stored_version(conn) == SCHEMA_VERSION:
            self.schema_version = SCHEMA_VERSION
            return
        conn.execute(
            "CREATE TABLE IF NOT EXISTS prana_schema_version (version INTEGER PRIMARY KEY,"
            " description TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = conn.execute("SELECT MAX(version) FROM prana_schema_version").fetchone()[0]
            if current is None:
                unversioned = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'prana_executions'"
                ).fetchone()
                if unversioned is not None:
                    raise unversioned_error(self.path)
                current = 0
            todo = pending(current, SQLITE_MIGRATIONS, where=self.path, upgrade=self.upgrade)
            for migration in todo:
                for statement in migration.sql.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                self._record(conn, migration)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        if todo and current > 0:
            self.upgraded_from = current
            log_upgrade(self.path, current, SCHEMA_VERSION)
        self.schema_version = SCHEMA_VERSION

    @staticmethod
    def _record(conn: sqlite3.Connection, migration: Migration) -> None:
        conn.execute(
            "INSERT INTO prana_schema_version (version, description, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.description, datetime.now(timezone.utc).isoformat()),
        )

    def _driver_error(self, exc: sqlite3.Error) -> StoreError:
        """A raw ``sqlite3`` error as a one-line ``StoreError`` naming the file and the fix."""
        if self._closed:
            return StoreError(
                f"SQLiteStore({self.path!r}) is closed; open a new SQLiteStore to use the "
                "database again"
            )
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreError(
                f"{self.path}: the database stayed locked by another connection for "
                f"busy_timeout_ms={self.busy_timeout_ms}; retry, or raise busy_timeout_ms"
            )
        return StoreError(f"{self.path}: SQLite error: {text}")

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, synchronous={self.synchronous!r})"

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        """Store ``execution`` if ``expected_version`` is the stored one; return the new version."""
        if type(execution) is not WorkflowExecution or (
            type(expected_version) is not int or expected_version < 1
        ):
            check_save(execution, expected_version)  # the exact types pass it: checked here
        data = dumps(execution)
        execution_id = execution.id
        due_at = _micros_or_none(execution.due_at)
        updated_at = _micros_or_none(execution.updated_at)
        status = _STATUS_TEXT[execution.status]
        lock = self._mutex
        lock.acquire()  # a hot path: ``_Guard``'s rule written out (see ``_Guard``)
        try:
            if self._group_owner is None and self._grouping.depth > 0:
                self._open_group()
            if expected_version is None:
                try:
                    self._conn.execute(
                        _INSERT,
                        (
                            execution_id,
                            execution.workflow_id,
                            execution.workflow_version,
                            status,
                            due_at,
                            updated_at,
                            data,
                        ),
                    )
                except sqlite3.IntegrityError:
                    raise stale(execution_id, None, self._stored_version(execution_id)) from None
                self._parsed.put(execution_id, data, execution)
                return 1
            workflow_id, workflow_version = execution.workflow_id, execution.workflow_version
            statement, params = (
                (
                    _UPDATE_UNDUE,
                    (workflow_id, workflow_version, status, updated_at, data, execution_id),
                )
                if due_at is None
                else (
                    _UPDATE,
                    (workflow_id, workflow_version, status, due_at, updated_at, data, execution_id),
                )
            )
            changed = self._conn.execute(statement, (*params, expected_version)).rowcount
            if changed != 1:
                raise stale(execution_id, expected_version, self._stored_version(execution_id))
            self._parsed.put(execution_id, data, execution)
        except sqlite3.Error as exc:
            raise self._driver_error(exc) from exc
        finally:
            lock.release()
        return expected_version + 1

    @contextlib.contextmanager
    def grouped(self) -> Iterator[None]:
        """Group this thread's saves in one transaction until the block ends (``GroupingStore``)."""
        local = self._grouping
        depth = local.depth
        local.depth = depth + 1
        try:
            yield
        finally:
            local.depth = depth
            if not depth:
                self.commit_group()

    def commit_group(self) -> None:
        """Commit this thread's grouped saves so far; a failed commit rolls them all back."""
        if self._group_owner != threading.get_ident():
            return
        lock = self._mutex
        try:
            lock.acquire()  # a hot path: ``_Guard``'s rule written out (see ``_Guard``)
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                self._parsed.clear()  # it may hold records that were never stored
                raise self._driver_error(exc) from exc
            finally:
                lock.release()
        finally:
            self._group_owner = None
            lock.release()

    def _open_group(self) -> None:
        """Begin this thread's group transaction and keep the lock (the caller holds it)."""
        self._conn.execute("BEGIN IMMEDIATE")
        self._lock.hold()
        self._group_owner = threading.get_ident()

    def _stored_version(self, execution_id: str) -> Any:
        """The row's version column as stored (``None``: no row), for an error message."""
        row = self._conn.execute(_VERSION, (execution_id,)).fetchone()
        return None if row is None else row[0]

    def claim(
        self,
        execution_id: str,
        expected_version: int,
        lease_expires_at: datetime,
        claimed_at: datetime,
    ) -> int:
        """Mark the stored execution running until ``lease_expires_at``, its record unchanged.

        ``scheduling.abc.ClaimingStore``: a compare-and-set on the version, like ``save``.
        The lease goes in the row's ``lease_at`` column and its due time stays as it was, so
        the claim writes the row alone (not the due-time index).
        """
        if not (
            type(execution_id) is str
            and type(expected_version) is int
            and expected_version >= 1
            and _is_utc(lease_expires_at)
            and _is_utc(claimed_at)
        ):
            check_claim(execution_id, expected_version, lease_expires_at, claimed_at)
        lease, at = to_micros(lease_expires_at), to_micros(claimed_at)
        lock = self._mutex
        lock.acquire()  # a hot path: ``_Guard``'s rule written out (see ``_Guard``)
        try:
            if self._group_owner is None and self._grouping.depth > 0:
                self._open_group()
            if not _claim_row(self._conn, execution_id, expected_version, lease, at):
                raise stale(execution_id, expected_version, self._stored_version(execution_id))
        except sqlite3.Error as exc:
            raise self._driver_error(exc) from exc
        finally:
            lock.release()
        return expected_version + 1

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        """The execution and its version; ``ExecutionNotFound`` if there is none.

        A claimed row (``ClaimingStore``) reads as its record claimed (``as_claimed``).
        """
        lock = self._mutex
        lock.acquire()  # a hot path: ``_Guard``'s rule written out (see ``_Guard``)
        try:
            row = self._conn.execute(_LOAD, (execution_id,)).fetchone()
        except sqlite3.Error as exc:
            raise self._driver_error(exc) from exc
        finally:
            lock.release()
        if row is None:
            raise ExecutionNotFound(f"no execution {execution_id!r} is stored")
        execution = self._parsed.read(execution_id, row[0])
        if row[2] == "running" and execution.status is ExecutionStatus.SUSPENDED:
            lease = row[3] if row[5] is None else row[5]  # as ``_ALARM_AT`` reads it
            execution = as_claimed(execution, _time_or_none(lease), _time_or_none(row[4]))
        return execution, read_version(execution_id, row[1])

    def webhook_wait(self, execution_id: str) -> tuple[str, str | None] | None:
        """The stored record's ``(suspended node, token digest)``, read from the last 16 KiB
        of its text without loading or decoding the rest (``webhook_wait_in_tail``); ``None``
        when that cannot tell (or before Python 3.11, which lacks ``blobopen``), and for a
        record of at most ``LOADED_RECORD_BYTES``, which is loaded instead: it costs little,
        and only the whole record knows a used token's repeated delivery.
        ``ExecutionNotFound`` when there is no such row."""
        with self._lock:
            row = self._conn.execute(_SEQ, (execution_id,)).fetchone()
            if row is None:
                raise ExecutionNotFound(f"no execution {execution_id!r} is stored")
            opener = getattr(self._conn, "blobopen", None)
            if opener is None:
                return None
            with opener("prana_executions", "data", row[0], readonly=True) as blob:
                if len(blob) <= LOADED_RECORD_BYTES:
                    return None  # small: its load says more (a used token's repeat)
                blob.seek(max(0, len(blob) - WAIT_TAIL_BYTES))
                tail = blob.read()
        return webhook_wait_in_tail(tail)

    def count_tree(self, root_id: str, most: int) -> int:
        """Executions with id ``root_id`` or starting ``root_id + ":"``, up to ``most``."""
        most = check_tree_args(root_id, most)
        with self._lock:
            row = self._conn.execute(
                _COUNT_TREE, (root_id, root_id + ":", root_id + ";", most)
            ).fetchone()
        return int(row[0])

    def find_due(self, now: datetime, limit: int = 100) -> Sequence[tuple[str, datetime]]:
        """Suspended executions due at or before ``now``, earliest first (ties: oldest first).

        A claim whose lease ended is among them, in the place of the due time it was claimed
        at (the order of the due-time index, which a claim leaves alone). A row whose time
        column holds text (edited by hand) reads as due at the first datetime; such rows come
        after the others (their records decide: they never hold back a row due by its time).
        """
        check_aware(now, "find_due(now)")
        check_limit(limit)
        micros = to_micros(now)
        with self._lock:
            rows = self._conn.execute(_FIND_DUE, (micros, micros, limit)).fetchall()
            if len(rows) < limit:
                rows += self._conn.execute(_FIND_DUE_TEXT, (micros, limit - len(rows))).fetchall()
        return [(eid, from_micros(at)) for eid, at in rows]

    def alarms(self) -> Sequence[tuple[str, datetime]]:
        """Every suspended execution with a due time, earliest first."""
        with self._lock:
            rows = self._conn.execute(_ALARMS).fetchall()
        return [(eid, from_micros(at)) for eid, at in rows]

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
        query, params = list_query(
            _SUMMARY, "prana_executions", "?", wanted, workflow_id, after, limit
        )
        with self._lock:
            rows = self._conn.execute(query, params).fetchall()
            if not rows and after is not None and self._stored_version(after) is None:
                raise cursor_not_found(after)
        return summaries_from_rows(rows, _time_or_none)

    def _insert_workflow(self, key: tuple[str, int], text: str) -> str | bytes | None:
        with self._lock:
            if self._group_owner is not None:  # this thread's open group: write inside it
                row = self._conn.execute(_WORKFLOW, key).fetchone()
                if row is None:
                    self._conn.execute(_INSERT_WORKFLOW, (*key, text))
                return None if row is None else cast("str | bytes", row[0])
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(_WORKFLOW, key).fetchone()
                if row is None:
                    self._conn.execute(_INSERT_WORKFLOW, (*key, text))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        return None if row is None else cast("str | bytes", row[0])

    def _select_workflow(self, key: tuple[str, int]) -> str | bytes | None:
        with self._lock:
            row = self._conn.execute(_WORKFLOW, key).fetchone()
        return None if row is None else cast("str | bytes", row[0])

    def list_workflows(self) -> builtins.list[tuple[str, int]]:
        """Every stored definition's ``(workflow_id, version)``, sorted."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT workflow_id, version FROM prana_workflows ORDER BY workflow_id, version"
            ).fetchall()
        return [(str(w), int(v)) for w, v in rows]

    def latest_workflow_version(self, workflow_id: str) -> int | None:
        """The highest stored version of ``workflow_id``, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT MAX(version) FROM prana_workflows WHERE workflow_id = ?", (workflow_id,)
            ).fetchone()
        version: int | None = row[0]
        return version

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._closed = True
            self._conn.close()

    # -- schedules (scheduling._schedules: definitions and state as JSON text) ----------

    def _schedule_write(self, statement: str, params: tuple[Any, ...]) -> bool:
        with self._lock:
            if self._group_owner is not None:
                return bool(self._conn.execute(statement, params).rowcount)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                changed = self._conn.execute(statement, params).rowcount
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        return bool(changed)

    def schedule_insert(self, schedule_id: str, definition: str, state: str) -> bool:
        """Store a new schedule; ``False`` if one has this id."""
        return self._schedule_write(
            "INSERT INTO prana_schedules (id, definition, state, version) VALUES (?, ?, ?, 1)"
            " ON CONFLICT (id) DO NOTHING",
            (schedule_id, definition, state),
        )

    def schedule_define(self, schedule_id: str, definition: str) -> bool:
        """Replace a schedule's definition; ``False`` if there is none."""
        return self._schedule_write(
            "UPDATE prana_schedules SET definition = ? WHERE id = ?", (definition, schedule_id)
        )

    def schedule_row(self, schedule_id: str) -> tuple[str, str, int] | None:
        """A schedule's ``(definition, state, state version)``, or ``None``."""
        with self._lock:
            row = self._conn.execute(
                "SELECT definition, state, version FROM prana_schedules WHERE id = ?",
                (schedule_id,),
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), int(row[2]))

    def schedule_rows(self) -> builtins.list[tuple[str, str, str, int]]:
        """Every schedule's ``(id, definition, state, state version)``, by id."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, definition, state, version FROM prana_schedules ORDER BY id"
            ).fetchall()
        return [(str(i), str(d), str(s), int(v)) for i, d, s, v in rows]

    def schedule_advance(self, schedule_id: str, state: str, expected_version: int) -> bool:
        """Replace a schedule's state if its version is still ``expected_version``."""
        return self._schedule_write(
            "UPDATE prana_schedules SET state = ?, version = version + 1"
            " WHERE id = ? AND version = ?",
            (state, schedule_id, expected_version),
        )

    def schedule_delete(self, schedule_id: str) -> bool:
        """Forget a schedule (its executions stay); ``False`` if there was none."""
        return self._schedule_write("DELETE FROM prana_schedules WHERE id = ?", (schedule_id,))


def stored_schema_version(path: str | os.PathLike[str]) -> int | None:
    """The schema version of the database at ``path``, read without changing anything.

    ``None`` when the file does not exist or holds no prana tables; tables without a
    version table are refused (``unversioned_error``). Unlike opening a ``SQLiteStore``
    this creates no file, table or journal (``prana db status`` is read-only); a file that
    is not a SQLite database is a ``StoreError``.
    """
    text = _check_path(path)
    file = Path(text)
    if text == ":memory:" or not file.is_file():
        return None
    # A database closed cleanly has no -wal file: reading it as immutable leaves no -wal/-shm
    # behind. With a -wal present (in use), a plain read-only open sees its commits too.
    immutable = "" if Path(f"{text}-wal").exists() else "&immutable=1"
    try:
        conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro{immutable}", uri=True)
    except sqlite3.Error as exc:
        raise StoreError(f"{text}: cannot open the database: {exc}") from exc
    try:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if "prana_schema_version" in tables:
            version = conn.execute("SELECT MAX(version) FROM prana_schema_version").fetchone()[0]
            if version is not None:
                return int(version)
        if "prana_executions" in tables:
            raise unversioned_error(text)
        return None
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{text}: not a prana database (SQLite says: {exc}); pass the path of a prana "
            "SQLite database"
        ) from exc
    finally:
        conn.close()


def _check_path(path: Any) -> str:
    """``path`` as a string, or a clear error naming the argument."""
    try:
        text = os.fspath(path)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text:
        raise InvalidSettingsError(
            f"SQLiteStore(path={path!r}): pass the database file's path (a str or "
            "pathlib.Path), or ':memory:' for a database that lives only in this process"
        )
    return text
