"""``PostgresStore``'s groups (``scheduling.abc.GroupingStore``): one connection, one transaction.

Inside ``grouped()`` a thread keeps one pooled connection, and its saves and claims (with
their ``on_save`` hooks) run in one transaction on it, opened by the first of them and
committed by ``commit_group`` or the end of the block. Every other call of the thread uses
that connection too (its loads see its saves; it never waits for a second connection). A
save that fails inside a group (a driver error, or its hook raising) rolls the whole
transaction back: the group is then *broken*, every grouped save refuses until the next
``commit_group``, which raises ``StoreError`` (lost, as with a failed commit) and starts
afresh. Other threads and processes see none of it before the commit; a row the group
wrote waits for the commit before another transaction can write it.

Groups never take the pool's last connection (``_group_slots``: one fewer than
``max_connections``): a group keeps its connection while its step's action runs, and with
every connection so held, the lease renewals of those very steps (made outside any group)
waited for one past the lease, and other workers took the live attempts over and ran them
a second time at once. A group waits for a slot before its first statement, before any
claim, so nothing it holds expires meanwhile.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq
from psycopg_pool import PoolTimeout

from scheduling._errors import StaleVersionError, StoreError

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Iterator

    from psycopg_pool import ConnectionPool

    from prana import WorkflowExecution
    from scheduling.stores._sql import ParsedCache

__all__ = ["BEGIN_ASYNC_GROUP", "GroupsMixin", "driver_error", "one_line"]


def one_line(exc: BaseException) -> str:
    """A driver message on one line (libpq's span several, with tabs)."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def driver_error(exc: psycopg.Error, what: str) -> StoreError:
    """A driver error as a one-line ``StoreError`` saying what failed (the server's words)."""
    primary = exc.diag.message_primary if not isinstance(exc, PoolTimeout) else None
    return StoreError(f"PostgreSQL: {what} failed: {primary or one_line(exc)}")


BEGIN_ASYNC_GROUP = (
    "BEGIN; SET LOCAL synchronous_commit TO off; SET LOCAL idle_in_transaction_session_timeout TO 0"
)
"""How a group's transaction begins with ``group_commits="async"`` (an opt-in; the default,
``"sync"``, waits for the disk as every other commit does): its commit does not wait.

The speed rule of groups. A group is a batch of alarms a ``Runner`` resumes together
(``scheduling.abc.GroupingStore``); it commits before every action call (the claim) and at
its end, and waiting for the disk each time is most of a resume's wall time (one fsync,
~4 ms here, against ~0.1 ms per statement). Asynchronous commits are visible to every
connection at once and become durable a moment later (at most three ``wal_writer_delay``,
0.6 s by default) or with the next synchronous commit on the server, whichever comes first
(WAL is flushed in order). Only a crash of the PostgreSQL *server* (not of a worker) in
that moment loses them, and then the store holds the state before them, a consistent one:
the executions are due as they were, their alarms fire again and each lost step runs again
(at-least-once, as after any crash), its interrupted attempt, if any, not marked in the
ledger. Everything outside a group waits for the disk as before: starts, deliveries,
cancels, lease renewals and every save of a runner that does not batch.
The default is ``"sync"``: an acknowledged transition is never taken back, not even by a
server crash (the project's rule that nothing stored is lost); ``"async"`` trades that, for a
server crash only, for the throughput of a batch (``prana worker --async-commits``)."""


class GroupsMixin:
    """The group machinery of ``PostgresStore`` (its base class)."""

    _grouping: threading.local
    _group_slots: threading.BoundedSemaphore
    _pool: ConnectionPool | None
    _parsed: ParsedCache
    _begin_group: str

    def _connections(self) -> ConnectionPool:
        raise NotImplementedError

    def _connection(self, what: str) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        raise NotImplementedError

    def _write(
        self,
        conn: psycopg.Connection[Any],
        execution: WorkflowExecution,
        expected_version: int | None,
        data: str,
    ) -> int:
        raise NotImplementedError

    def _refuse_if_broken(self, what: str) -> None:
        """Refuse a grouped write after an earlier one of the group failed (rolled back)."""
        broken = getattr(self._grouping, "broken", None)
        if broken is not None:
            raise StoreError(
                f"PostgreSQL: {what} refused: an earlier save of this group failed "
                f"({broken}); the group is rolled back"
            )

    def _begin_if_idle(self, conn: psycopg.Connection[Any]) -> None:
        """Open the group's transaction on ``conn`` unless it is open already; it is written."""
        if conn.info.transaction_status == pq.TransactionStatus.IDLE:
            conn.execute(self._begin_group)
        self._grouping.dirty = True

    def _save_grouped(
        self,
        execution: WorkflowExecution,
        expected_version: int | None,
        data: str,
        hook: Callable[[psycopg.Connection[Any], WorkflowExecution], None] | None,
    ) -> int:
        """A save inside this thread's group: in its open transaction, not committed yet."""
        what = f"save of execution {execution.id!r}"
        self._refuse_if_broken(what)
        with self._connection(what) as conn:
            self._begin_if_idle(conn)
            try:
                version = self._write(conn, execution, expected_version, data)
            except StaleVersionError:
                raise  # the compare-and-set refused: nothing written, the group goes on
            except psycopg.Error:
                raise  # _connection breaks the group
            except BaseException as error:
                self._break_group(error)
                raise
            if hook is not None:
                try:
                    hook(conn, execution)
                except BaseException as error:
                    self._break_group(error)
                    raise
        return version

    @contextlib.contextmanager
    def grouped(self) -> Iterator[None]:
        """Group this thread's saves in one transaction until the block ends (``GroupingStore``).

        Leaving the outermost block commits what the group wrote (even when the block
        raises) and gives its connection back to the pool.
        """
        local = self._grouping
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        try:
            yield
        finally:
            if depth:
                local.depth = depth
            else:
                try:
                    self._commit(last=True)
                finally:
                    local.depth = 0
                    self._release_group_connection()

    def commit_group(self) -> None:
        """Commit this thread's grouped saves so far; a failed commit rolls them all back.

        The group's next transaction begins in the same round trip (``COMMIT; BEGIN ...``):
        it holds nothing (no snapshot, no lock, no transaction id) until the group's next
        write, and its ``idle_in_transaction_session_timeout`` is off, since an action may
        run for long before that write comes.
        """
        self._commit(last=False)

    def _commit(self, *, last: bool) -> None:
        local = self._grouping
        conn: psycopg.Connection[Any] | None = getattr(local, "conn", None)
        broken = getattr(local, "broken", None)
        if broken is not None:
            local.broken = None
            raise StoreError(
                f"PostgreSQL: a group of saves was rolled back: a save in it failed ({broken})"
            )
        if conn is None or conn.info.transaction_status == pq.TransactionStatus.IDLE:
            return
        dirty = getattr(local, "dirty", False)
        if not dirty and not last:
            return  # the transaction begun at the last commit: nothing in it yet
        try:
            conn.execute("COMMIT" if last else f"COMMIT; {self._begin_group}")
        except psycopg.Error as exc:
            self._break_group()
            local.broken = None
            raise driver_error(exc, "commit of a group of saves") from exc
        finally:
            local.dirty = False

    def _group_connection(self) -> psycopg.Connection[Any]:
        """This thread's group connection, taken from the pool at its first use."""
        local = self._grouping
        conn: psycopg.Connection[Any] | None = getattr(local, "conn", None)
        if conn is not None and (conn.broken or conn.closed):
            local.conn = None  # the server ended it (the group, if open, is broken already)
            pool = self._pool
            if pool is not None:
                pool.putconn(conn)
            conn = None
        if conn is None:
            pool = self._connections()
            if getattr(local, "slot", None) is None:
                slots = self._group_slots
                if not slots.acquire(timeout=pool.timeout):
                    raise StoreError(
                        f"PostgreSQL: no connection for a group of saves within {pool.timeout:g}s"
                        " (every one but the last is held by other groups; raise "
                        "max_connections)"
                    )
                local.slot = slots
            try:
                conn = pool.getconn()
            except psycopg.Error as exc:
                raise driver_error(exc, "taking a connection for a group of saves") from exc
            local.conn = conn
        return conn

    def _break_group(self, error: BaseException | None = None) -> None:
        """Roll the group back after a failure inside it; its saves refuse until the commit."""
        local = self._grouping
        conn: psycopg.Connection[Any] | None = getattr(local, "conn", None)
        if conn is not None and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
            if getattr(local, "dirty", False):  # else it held nothing yet: nothing is lost
                local.broken = one_line(error) if error is not None else "the database failed"
                local.dirty = False
                self._parsed.clear()  # it may hold records that were never stored

    def _release_group_connection(self) -> None:
        local = self._grouping
        conn: psycopg.Connection[Any] | None = getattr(local, "conn", None)
        local.conn = None
        local.broken = None
        local.dirty = False
        slot = getattr(local, "slot", None)
        if slot is not None:  # the semaphore it came from (a reopened pool has a new one)
            local.slot = None
            slot.release()
        pool = self._pool
        if conn is not None and pool is not None:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            pool.putconn(conn)
