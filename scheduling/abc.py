"""The shell's interfaces: the alarm clock (``Scheduler``), the truth (``ExecutionStore``).

Optional ones name what some backends can do more: a scheduler that keeps the time itself
(``ClockedScheduler``) or follows the runner's (``FollowingScheduler``), a store whose
server keeps the time of a deployment (``TimedStore``), a store whose schema is versioned
(``MigratingStore``), and a store and a scheduler on one database that arm each alarm inside
the save that implies it (``TransactionalStore``, ``TransactionalScheduler``); a scheduler
that hands over every alarm due at one instant in one call (``BatchingScheduler``) and a
store that commits several saves of one thread together (``GroupingStore``); a store that
claims an execution by its columns alone, leaving its stored record as it was
(``ClaimingStore``); a store that counts a tree of sub-workflow executions
(``TreeCountingStore``); an observer that keeps each execution in one trace
(``TracePropagator``). The ``Runner`` finds every capability through these protocols and
looks for nothing else.

Invariants every backend keeps (see the docs' Stores and schedulers page):

- ``Scheduler.schedule`` is idempotent and replacing: one alarm per execution id, the
  latest due time wins. Firing is at-least-once: a fired id may fire again, late or twice;
  the runner's compare-and-set on the store's version makes each transition happen once.
- An alarm carries only the execution id. Everything else is read from the store on fire.
- ``ExecutionStore.save`` never overwrites a newer record: a save whose
  ``expected_version`` is not the stored one raises ``StaleVersionError`` and changes nothing.
- ``ExecutionStore.list`` orders by creation, newest first, and that order never changes;
  its ``after`` cursor is an execution id, so a page starts at a fixed place in it.
- A workflow definition never changes for a given id and version.
- A ``TransactionalStore``'s ``on_save`` hook runs inside the save's transaction: the row
  and what the hook writes commit together; if the hook raises, nothing is stored.
- A ``BatchingScheduler`` hands each due alarm over once, through ``fire`` or in one
  ``fire_many`` call with the other alarms of its instant: at least once, as ``fire``.
- A ``GroupingStore``'s grouped save checks its compare-and-set at once, but is durable
  and visible to other connections only from the group's next commit, together with
  every grouped save before it; a failed commit loses them all, nothing else.
- A ``ClaimingStore``'s ``claim`` changes only the status, due time, version and update
  time of a row, by compare-and-set like ``save``; its ``load`` then reads the record still
  stored with ``status=running``, ``lease_expires_at`` and ``updated_at`` from the claim,
  and its ``suspension`` kept (a claimed record, see ``ClaimingStore``).
- A ``TreeCountingStore``'s ``count_tree(root_id, most)`` counts the stored executions
  whose id is ``root_id`` or starts with ``root_id + ":"`` (matched exactly: no wildcards,
  case-sensitive), stopping at ``most``.
- An execution's ``trace_context`` is set once, at its start, and every later step of it,
  by any runner in any process, runs inside ``TracePropagator.resume`` of that context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from prana import ExecutionStatus, Workflow, WorkflowExecution

Fire = Callable[[str], object]
"""Called with an execution id when its alarm is due; it may return an awaitable."""

FireMany = Callable[[Sequence[str]], object]
"""Called with the ids of alarms due at one instant (each once); it may return an awaitable."""


@runtime_checkable
class Scheduler(Protocol):
    """An alarm clock: calls ``fire(execution_id)`` at (or after) each due time."""

    def start(self, fire: Fire) -> None:
        """Begin firing due alarms through ``fire``."""

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        """Arm (or re-arm) the one alarm of ``execution_id`` for ``due_at`` (aware)."""

    def cancel(self, execution_id: str) -> None:
        """Disarm the alarm of ``execution_id``; unknown ids are ignored."""

    def shutdown(self) -> None:
        """Stop firing; pending alarms are dropped (the store still knows them)."""


@runtime_checkable
class ClockedScheduler(Protocol):
    """A scheduler that keeps the time itself (``ManualScheduler``): its ``clock`` is *the* clock.

    A ``Runner`` given no clock uses it (runner, core and scheduler then share one clock);
    given another one, the runner refuses to be built.
    """

    @property
    def clock(self) -> Callable[[], datetime]:
        """The clock the scheduler fires by: a callable returning an aware datetime."""


@runtime_checkable
class FollowingScheduler(Protocol):
    """A scheduler that fires by the wall clock of its process and can follow another clock.

    A ``Runner`` calls ``follow(clock)`` with its own clock: an alarm due at ``due_at`` by
    that clock then fires when that clock reaches it, however far the process's wall clock
    is from it (``APSchedulerAdapter``, ``AsyncioScheduler``).
    """

    def follow(self, clock: Callable[[], datetime]) -> None:
        """Read due times by ``clock`` from now on."""


@runtime_checkable
class TimedStore(Protocol):
    """A store whose server keeps the time every process of a deployment reads.

    ``PostgresStore``: a ``Runner`` given no clock (and a scheduler without one) uses
    ``clock``, so leases, claims and due times written by one process are judged by
    another on one clock, whatever the processes' wall clocks say.
    """

    @property
    def clock(self) -> Callable[[], datetime]:
        """The server's time, as an aware UTC datetime."""


@attrs.frozen(kw_only=True)
class ExecutionSummary:
    """One row of ``ExecutionStore.list``: enough to show a table without loading JSON."""

    id: str
    workflow_id: str
    workflow_version: int
    status: ExecutionStatus
    version: int
    due_at: datetime | None
    updated_at: datetime | None


@attrs.frozen(kw_only=True)
class UnreadableRow:
    """A row ``ExecutionStore.list`` found but could not read (a hand-edited status).

    It stands in that row's place in ``UnreadableRowsError.rows``, so a listing can show it
    by its id, with ``problem`` (``"field: message"``), beside every row that could be read.
    """

    id: str
    problem: str


@runtime_checkable
class ExecutionStore(Protocol):
    """Where executions and workflow definitions live; the single source of truth."""

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        """Store ``execution`` and return its new version.

        ``expected_version=None`` creates it (``StaleVersionError`` if the id exists);
        otherwise the stored version must equal ``expected_version``, or nothing changes
        and ``StaleVersionError`` is raised.
        """

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        """The execution and its version; ``ExecutionNotFound`` if there is none."""

    def find_due(self, now: datetime, limit: int = 100) -> Sequence[tuple[str, datetime]]:
        """Executions due at or before ``now``, earliest first: (id, due time).

        Suspended ones by their ``due_at``, and running claims whose lease ended. A store
        may place such a claim by the due time it was claimed at rather than by its lease
        (``SQLiteStore`` does: its index order), so with a ``limit`` it can come ahead of
        a row due between the two; every one of them is returned once due either way.
        """

    def alarms(self) -> Sequence[tuple[str, datetime]]:
        """Every suspended execution that has a due time: what a runner re-arms on start."""

    def list(
        self,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        *,
        workflow_id: str | None = None,
        after: str | None = None,
    ) -> Sequence[ExecutionSummary]:
        """Executions, newest (most recently created) first, at most ``limit`` of them.

        ``status`` and ``workflow_id`` filter (both must match when both are given).
        ``after`` is a keyset cursor: the id of the last execution of the previous page;
        the page holds the matching executions created before it. Creation order never
        changes, so pages neither skip nor repeat rows when newer executions arrive or
        statuses change between reads. An ``after`` that names no stored execution raises
        ``ExecutionNotFound``. A row that cannot be read makes it raise
        ``UnreadableRowsError`` (a ``RecordError`` naming the row), which holds the whole
        page in order, that row as an ``UnreadableRow``.
        """

    def save_workflow(self, workflow: Workflow) -> None:
        """Keep a definition; ``WorkflowConflictError`` if a different one has its id+version."""

    def load_workflow(self, workflow_id: str, version: int) -> Workflow:
        """The stored definition; ``WorkflowNotFound`` if there is none."""

    def latest_workflow_version(self, workflow_id: str) -> int | None:
        """The highest stored version of ``workflow_id`` (versions may have gaps), or None."""

    def list_workflows(self) -> Sequence[tuple[str, int]]:
        """Every stored definition's ``(workflow_id, version)``, sorted as Python sorts them.

        By id in code point order (whatever the database's collation), then by version.
        """

    def close(self) -> None:
        """Release connections and files."""


@runtime_checkable
class MigratingStore(Protocol):
    """A store whose tables carry a schema version, upgraded in steps (the SQL stores).

    Opening one applies the migrations its database lacks (or, opened with
    ``upgrade=False``, refuses a schema that is behind); a schema newer than the code is
    always refused. ``prana db`` reports what opening it did.
    """

    @property
    def schema_version(self) -> int:
        """The schema version the database is at, once the store is open."""

    @property
    def upgraded_from(self) -> int | None:
        """The version the database was at before this store upgraded it; ``None`` if none."""


OnSave = Callable[[Any, WorkflowExecution], None]
"""A hook run inside a save's transaction, with its connection and the execution saved."""


@runtime_checkable
class TransactionalStore(Protocol):
    """A store that runs a hook inside each save's transaction (``PostgresStore``).

    ``on_save`` is the hook slot, ``None`` while free: when set, every successful save
    calls ``on_save(connection, execution)`` after the row write and before the commit;
    if it raises, the transaction rolls back, ``save`` raises and nothing is stored.
    ``dsn`` names the database, so a scheduler can tell whether it is its own.
    """

    dsn: str
    on_save: OnSave | None


@runtime_checkable
class TransactionalScheduler(Protocol):
    """A scheduler that arms and disarms in a caller's transaction (``ProcrastinateScheduler``).

    With a ``TransactionalStore`` on the same database (``same_database(store.dsn)``), the
    ``Runner`` calls ``setup()`` once, then installs an ``on_save`` hook that arms each
    saved execution's ``due_at`` with ``schedule_in`` (or ``cancel_in`` when it has none):
    each save and its alarm change commit together or not at all.
    """

    def same_database(self, dsn: str) -> bool:
        """Whether ``dsn`` names the database this scheduler keeps its alarms in."""

    def setup(self) -> None:
        """Create what arming needs (the job tables) before the first save arms in them."""

    def schedule_in(self, conn: Any, execution_id: str, due_at: datetime) -> None:
        """``schedule`` on the caller's connection ``conn``, inside its open transaction."""

    def cancel_in(self, conn: Any, execution_id: str) -> None:
        """``cancel`` on the caller's connection ``conn``, inside its open transaction."""


@runtime_checkable
class BatchingScheduler(Protocol):
    """A scheduler that can hand every alarm due at one instant over in one call.

    ``start_batched(fire, fire_many)`` starts it as ``start(fire)`` would; from then on it
    may call ``fire_many(ids)`` for alarms due at the same instant instead of ``fire`` once
    per id: each id once, in the order they were last armed (``ProcrastinateScheduler``:
    the alarms due by the time its job takes them, up to its ``batch``). An id handed over
    counts as fired (an alarm armed again for that instant afterwards fires again). The
    ``Runner`` starts every scheduler that offers it this way and resumes a batch in one
    store group (``GroupingStore``) when its store offers that; ``APSchedulerAdapter`` (one
    job per due instant instead of one per execution), ``ManualScheduler(batches=True)``
    and ``ProcrastinateScheduler`` do.
    """

    def start_batched(self, fire: Fire, fire_many: FireMany) -> None:
        """Begin firing due alarms through ``fire``, or several at a time through ``fire_many``."""


@runtime_checkable
class HandingBackScheduler(Protocol):
    """A ``BatchingScheduler`` that fires several alarms at once (threads, workers), and so
    takes back the alarms of a batch the runner has not started.

    ``hand_back(ids)``: a step of the batch runs long and these alarms of it are not
    started; fire each again now in whatever slot is free (another thread, another
    worker), never behind the batch that held them. ``APSchedulerAdapter`` and
    ``ProcrastinateScheduler`` do; a ``ManualScheduler`` fires in one thread, so its
    batches have no other slot to hand back to.
    """

    def hand_back(self, execution_ids: Sequence[str]) -> None:
        """Fire these alarms of a batch again now, each where a slot is free."""


@runtime_checkable
class BulkScheduler(Protocol):
    """A scheduler that arms many alarms in one call, writing only what is missing.

    ``schedule_many(alarms)`` is ``schedule(id, due_at)`` for each ``(id, due_at)``, with
    the same rule (idempotent and replacing), except that an alarm already armed for that
    due time (or firing now for it, or for a later one) is left as it is. It is for
    re-arming from the store, where most alarms are armed already: a ``Runner`` uses it
    when it opens and in ``rearm_due`` (``ProcrastinateScheduler``: one query finds which
    of them have a job, instead of one per execution).
    """

    def schedule_many(self, alarms: Sequence[tuple[str, datetime]]) -> None:
        """Arm each ``(execution_id, due_at)`` that is not armed for it already."""


@runtime_checkable
class GroupingStore(Protocol):
    """A store that commits several saves of one thread together (the SQL stores).

    Inside ``with store.grouped():`` the calling thread's saves join one open
    transaction: each checks its compare-and-set at once (``StaleVersionError`` as ever)
    and returns its version, but it is durable, and visible to other connections, only
    from the next ``commit_group()`` (or the end of the block, which commits whatever the
    block wrote, even when it raises), together with every grouped save before it. A
    commit that fails raises ``StoreError`` and loses all of them, as a crash before it
    would: the stored state stays what the last commit left. The thread's own loads see
    its uncommitted saves. While a group has uncommitted saves, other threads' calls on
    the store wait for its commit: commit before anything that may take long or wait on
    another thread (the ``Runner`` commits before every action call, so a claim is
    durable before its action runs, and never holds a group open while it waits for a
    lock). Other threads' saves are never grouped. (``PostgresStore``: other connections
    never wait; by default a group's commits do not wait for the disk, see its
    ``group_commits``.)
    """

    def grouped(self) -> AbstractContextManager[None]:
        """Group this thread's saves until the block ends (nested blocks join the outer one)."""

    def commit_group(self) -> None:
        """Commit this thread's grouped saves so far (nothing open: nothing to do)."""


@runtime_checkable
class ClaimingStore(Protocol):
    """A store that claims a suspended execution without writing its record again (``SQLiteStore``).

    ``claim(execution_id, expected_version, lease_expires_at, claimed_at)`` is a
    compare-and-set like ``save`` (``StaleVersionError`` and nothing changed when
    ``expected_version`` is not the stored one; it returns the new version) that sets only
    the row's columns: status ``running``, its lease (the row's alarm while claimed)
    ``lease_expires_at``, update time ``claimed_at``. The stored record (the JSON
    document) stays what it was. The runner
    claims this way only a record it loaded ``suspended`` on a retry or a timer at that
    version, just before the first action call of the step that resumes it (in place of
    saving the core's ``running`` checkpoint: one serialization and one write fewer), and
    renews such a claim with the same ``claimed_at`` and a later lease.

    Reading a claimed row: ``load`` returns the stored (suspended) record with
    ``status=running``, ``lease_expires_at`` the claim's lease and ``updated_at`` its
    ``claimed_at``; its ``suspension`` and ``suspended_node`` stay set. That is how a
    reader tells a claim from a checkpoint (the core's ``running`` snapshots never carry a
    suspension): the record means "a runner began resuming this suspended execution at
    ``updated_at``". ``find_due``, ``alarms`` and ``list`` read the columns, so the claim's
    lease is its alarm, as a checkpoint's is. A runner takes up one whose lease ended as it
    takes up a stale checkpoint: the resume it stands for is run again up to its action
    call, and that attempt is closed ``interrupted`` and retried. A later ``save`` (the
    step's outcome, or a checkpoint) replaces the record and ends the claim.
    """

    def claim(
        self,
        execution_id: str,
        expected_version: int,
        lease_expires_at: datetime,
        claimed_at: datetime,
    ) -> int:
        """Mark the stored execution ``running`` until ``lease_expires_at``; its new version."""


@runtime_checkable
class TreeCountingStore(Protocol):
    """A store that counts the executions of one tree of sub-workflows (every built-in store).

    A child's id is its parent's id, ``":"`` and more (``child_execution_id``), so a tree
    is its root's id and every id that starts with it followed by ``":"``. The ``Runner``
    counts before it starts a child, to hold the tree to ``Limits.max_tree_executions``;
    a store without this method is not held to that limit.
    """

    def count_tree(self, root_id: str, most: int) -> int:
        """How many stored executions are ``root_id`` or start with ``root_id + ":"``,
        up to ``most`` (a count that reaches ``most`` stops there)."""


@runtime_checkable
class TracePropagator(Protocol):
    """Keeps each execution in one trace, across its steps and processes (``TracingObserver``).

    The ``Runner`` uses the first of its observers that is one. It runs an execution's
    first step inside ``begin(at)`` (``at``: the runner's clock), whose value it stores as
    ``WorkflowExecution.trace_context``: W3C Trace Context headers (``traceparent``,
    ``tracestate``), or ``None`` to store nothing. Every later step of the execution, by
    any runner in any process, runs inside ``resume(trace_context)`` with what was stored,
    and a child sub-workflow's ``begin`` runs inside its parent's ``resume``. Without a
    runner, wrap ``execute_workflow``/``resume_workflow`` the same way by hand.
    """

    def begin(self, at: datetime) -> AbstractContextManager[Mapping[str, str] | None]:
        """Open a new execution's trace under the current one; yield the context to store."""

    def resume(self, trace_context: Mapping[str, str] | None) -> AbstractContextManager[object]:
        """Make a stored ``trace_context`` current while one step of its execution runs."""
