"""The runner: executor + store + scheduler, so suspended executions resume on their own.

Theory of operation. Every transition of an execution is one step (``Runner._step``
writes it once): load it (with its version) from the store, compute the next state with
the pure core, save it with a compare-and-set on that version, and only then arm the alarm
for its next due time (persist, then arm). With a store that runs a hook inside its save
transaction (``abc.TransactionalStore``: ``PostgresStore``) and a scheduler that arms inside
a caller's transaction (``abc.TransactionalScheduler``: ``ProcrastinateScheduler``) on the
same database, the runner arms in the save itself: the state and its alarm commit together
or not at all.

The scheduler is only an alarm clock that carries an execution id; everything else is
read back from the store when it fires, so any runner over the same store can finish any
execution, and a runner that restarts re-arms every alarm from the store. Alarms fire at
least once: a fire that finds the execution no longer suspended, or loses the
compare-and-set, does nothing, so each transition happens exactly once.

This module holds the ``Runner``, one class: the checked construction, the lifecycle, the
public operations and their async facade, then the steps, alarms and follow-ups under them
and the resuming of a batch of alarms (``_batch.py`` holds what a batch is,
``_definitions.py`` the definitions cache).

Steps. Before each action call the core hands the step a ``running`` checkpoint, saved as
a leased claim (``scheduling._leases``): a start is stored before its first action runs, a
step that loses its claim stops before running the action, and a ``running`` record whose
lease ended (its process died) is taken up by the next alarm of it (``Move.RECOVER``). An
alarm (``_on_alarm``), a delivery (``deliver``) and a child reporting to its parent
(``_resume_parent``) differ only in their check and in what a lost compare-and-set means.
Follow-ups of a step (running a sub-workflow, resuming a parent when its child ends) run
after the step's save, outside its lock, from a per-thread queue: no lock is ever held
while another execution's lock is taken, and deep chains of sub-workflows do not recurse.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, cast, overload

from prana import (
    ErrorCode,
    ExecutionStatus,
    InvalidSettingsError,
    InvalidWorkflowError,
    Outcome,
    RecordError,
    Registry,
    ResumeError,
    SubWorkflowData,
    Suspend,
    WebhookData,
    Workflow,
    WorkflowExecution,
    cancel_execution,
    execute_workflow,
    redrive_execution,
    resume_workflow,
    validate,
)
from prana.shell import (
    EXEC_RUNNING,  # hot path: members as module globals (see prana.shell)
    EXEC_SUSPENDED,
    FINAL,
    ParentRef,
    check_max_interruptions,
    delivered,
    expire_webhook,
    is_aware,
    parse_token,
    recover_execution,
    sub_workflow_too_deep,
    sub_workflow_tree_too_big,
    used_token,
    verify_token,
)
from prana.shell import utcnow as default_clock  # the core reads it unchecked (fast)
from scheduling._batch import GROUP_MAX, HAND_BACK_SECONDS, Batch, HandBack, Pending, StepLocal
from scheduling._claims import (
    claimable,
    claimed_snapshot,
    is_claimed,
    recover_claimed,
    unclaimed,
)
from scheduling._definitions import Definitions
from scheduling._errors import (
    ExecutionNotFound,
    HookAlreadyDelivered,
    HookConflict,
    HookGone,
    HookNotFound,
    StaleVersionError,
    StoreError,
    WorkflowNotFound,
)
from scheduling._eventlog import HeldEvents, log_event, wanted
from scheduling._health import StoreHealth
from scheduling._leases import Claim, Leases
from scheduling._records import (
    child_execution_id,
    error_dict,
    exception_dict,
    execution_of,
    first_tracer,
    suspended_without_due_time,
)
from scheduling._schedule_runs import ALARM_PREFIX as SCHEDULE_ALARM
from scheduling._schedule_runs import Schedules
from scheduling._schedules import Schedule
from scheduling.abc import (
    BatchingScheduler,
    BulkScheduler,
    ClockedScheduler,
    ExecutionStore,
    FollowingScheduler,
    GroupingStore,
    HandingBackScheduler,
    Scheduler,
    TimedStore,
    TransactionalScheduler,
    TransactionalStore,
    TreeCountingStore,
)
from scheduling.stores._sql import MAX_LIMIT

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self, TypeVar

    from prana import Event
    from scheduling.adapters.apscheduler import APSchedulerAdapter

    SchedulerT = TypeVar("SchedulerT", bound=Scheduler, covariant=True, default=Scheduler)
else:
    from typing import TypeVar

    SchedulerT = TypeVar("SchedulerT", bound=Scheduler, covariant=True)

__all__ = ["Runner", "child_execution_id", "is_settled"]

logger = logging.getLogger("scheduling._runner")


class LostStartError(StaleVersionError):
    """A start stored its execution, then lost it while its first step ran: cancelled, or
    taken over by another runner (its lease ended). The store has what happened since."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(
            f"execution {execution_id!r} was cancelled or taken over by another runner while "
            "its first step ran; the store has its current state"
        )
        self.execution_id = execution_id


Clock = Callable[[], datetime]

FINAL_STATUSES = FINAL
"""The statuses that end a run: the core's transition tables say which (``prana.shell``)."""
SELF_RESUMING_KINDS = frozenset({"retry", "timer", "sub_workflow"})
"""Suspension kinds the runner resumes by itself; any other kind waits for ``deliver``."""

_UNRESUMABLE_KEPT = 10_000
"""How many unresumable executions a runner remembers having reported."""
_MAX_HOOK_PATHS = 10_000
"""How many plaintext resume paths of waits begun here ``hook_path`` remembers."""


class _ExecutionLocks:
    """One lock per execution, alive while a step holds or waits for it.

    A step holds its execution's lock for the whole step, action included; locks shared
    by several executions (stripes) made one's long action hold up another's step.
    """

    __slots__ = ("_locks", "_mutex")

    def __init__(self) -> None:
        self._locks: dict[str, tuple[threading.RLock, list[int]]] = {}
        self._mutex = threading.Lock()

    def take(self, execution_id: str) -> threading.RLock:
        """The lock of ``execution_id``, kept alive until ``give``: acquire it after."""
        with self._mutex:
            entry = self._locks.get(execution_id)
            if entry is None:
                entry = self._locks[execution_id] = (threading.RLock(), [0])
            entry[1][0] += 1
            return entry[0]

    def give(self, execution_id: str, lock: threading.RLock) -> None:
        """The caller is done with the lock ``take`` gave it (released, or never acquired)."""
        with self._mutex:
            entry = self._locks.get(execution_id)
            if entry is not None and entry[0] is lock:
                entry[1][0] -= 1
                if not entry[1][0]:
                    del self._locks[execution_id]

    @contextlib.contextmanager
    def held(self, execution_id: str) -> Iterator[None]:
        """Hold the lock of ``execution_id`` inside."""
        lock = self.take(execution_id)
        try:
            with lock:
                yield
        finally:
            self.give(execution_id, lock)


class Move(enum.Enum):
    """What a step's check decided, for the execution it loaded under its lock."""

    RESUME = "resume"
    """Resume it with the step's data (``resume_workflow``)."""
    EXPIRE = "expire"
    """Its webhook wait is past its deadline: fail the wait (``expire_webhook``)."""
    CHILDREN = "children"
    """A parent's sub-workflow alarm: start its child or time it out, outside the lock."""
    REDRIVE = "redrive"
    """A failed execution taken up again (``redrive_execution``, then ``resume_workflow``);
    the step's data is ``(node, reset_attempts)``."""
    RECOVER = "recover"
    """A ``running`` record whose lease ended: its process died inside an action
    (``recover_execution``: the attempt closed interrupted and run again)."""


_RESUME, _EXPIRE, _CHILDREN = Move.RESUME, Move.EXPIRE, Move.CHILDREN  # hot-path aliases


Check = Callable[[WorkflowExecution], Move | None]
"""A step's check: runs under the lock; ``None`` means nothing to do; raising refuses."""


_WAIT_RECHECK_SECONDS = 0.25
"""How often ``wait`` re-reads the store for progress made by other processes."""


def is_settled(execution: WorkflowExecution) -> bool:
    """Whether only the outside can move ``execution`` on: it ended, or waits for a delivery."""
    if execution.status in FINAL_STATUSES:
        return True
    if execution.status is ExecutionStatus.SUSPENDED and execution.suspension is not None:
        return execution.suspension.kind not in SELF_RESUMING_KINDS
    return False


def _store_clock(store: ExecutionStore) -> Clock:
    """The clock a runner given none reads: its store's server's (``TimedStore``: one clock
    for every process of a deployment, ``scheduling._clock``), else this process's."""
    clock = store.clock if isinstance(store, TimedStore) else None
    return clock if callable(clock) else default_clock


def _check_observers(observers: Any) -> tuple[Callable[[Event], object], ...]:
    """``observers`` as a tuple of callables, or a clear error naming the argument."""
    if callable(observers) or isinstance(observers, str | bytes | Mapping):
        raise InvalidSettingsError(
            f"Runner(observers={observers!r}): pass a list of callables, e.g. observers=[print]"
        )
    try:
        found = tuple(observers)
    except TypeError:
        raise InvalidSettingsError(
            f"Runner(observers={observers!r}): pass a list of callables, e.g. observers=[print]"
        ) from None
    for index, observer in enumerate(found):
        if not callable(observer):
            raise InvalidSettingsError(
                f"Runner(observers[{index}]={observer!r}): each observer is a callable "
                "taking a prana.Event"
            )
    return found


def _checked_registry(registry: object) -> Registry:
    """``registry``, or the built-ins' for ``None``; anything else is refused, named."""
    if registry is None:
        return Registry()
    if not isinstance(registry, Registry):
        raise InvalidSettingsError(
            f"Runner(registry={registry!r}): pass a prana.Registry (or None for the built-ins)"
        )
    return registry


def _checked_store(store: object) -> ExecutionStore:
    """``store``, or a new ``MemoryStore`` for ``None``; anything else is refused, named."""
    if store is None:
        from scheduling.stores.memory import MemoryStore

        return MemoryStore()
    if not isinstance(store, ExecutionStore):
        raise InvalidSettingsError(
            f"Runner(store={store!r}): pass an ExecutionStore (MemoryStore, SQLiteStore, "
            "PostgresStore, or your own with the methods of scheduling.ExecutionStore)"
        )
    return store


def _check_scheduler(scheduler: object) -> None:
    if scheduler is not None and not isinstance(scheduler, Scheduler):
        raise InvalidSettingsError(
            f"Runner(scheduler={scheduler!r}): pass a Scheduler (APSchedulerAdapter, "
            "AsyncioScheduler, ManualScheduler..., or your own with start, schedule, "
            "cancel and shutdown), or None for APScheduler in a background thread"
        )


def _check_env(env: object) -> None:
    if env is not None and not isinstance(env, Mapping):
        raise InvalidSettingsError(
            f"Runner(env={type(env).__name__}): pass a mapping of names to values "
            "(or None); templates read it as $env"
        )


def _check_recover(recover: object) -> None:
    if not isinstance(recover, bool):
        raise InvalidSettingsError(
            f"Runner(recover={recover!r}): use True (a worker: re-arm what the store holds "
            "on open) or False (a one-off command: only this runner's own work)"
        )


def _checked_lease(lease_seconds: object) -> float:
    if (
        isinstance(lease_seconds, bool)
        or not isinstance(lease_seconds, int | float)
        or not math.isfinite(lease_seconds)
        or lease_seconds <= 0
    ):
        raise InvalidSettingsError(
            f"Runner(lease_seconds={lease_seconds!r}): use a number of seconds > 0 (how "
            "long a running execution stays its process's before another runner takes "
            "it up)"
        )
    return float(lease_seconds)


def _checked_clock(clock: Clock | None, scheduler: object, store: ExecutionStore) -> Clock:
    """The one clock of runner, core and scheduler: ``clock``, else the scheduler's, else
    the store's server's (``_store_clock``); it must read an aware datetime, and agree with
    the scheduler's."""
    scheduler_clock = scheduler.clock if isinstance(scheduler, ClockedScheduler) else None
    if clock is None:
        clock = scheduler_clock if callable(scheduler_clock) else _store_clock(store)
    elif callable(scheduler_clock) and scheduler_clock is not clock:
        raise InvalidSettingsError(
            f"Runner(clock={clock!r}): the scheduler has its own clock {scheduler_clock!r}; "
            "pass the same clock to both (one clock is shared by runner, core and scheduler)"
        )
    if not callable(clock):
        raise InvalidSettingsError(
            f"Runner(clock={clock!r}): pass a callable returning an aware datetime"
        )
    now = clock()
    if not is_aware(now):
        raise InvalidSettingsError(
            f"Runner(clock=...) returned {now!r}; a clock must return an aware datetime, "
            "e.g. datetime.now(timezone.utc) (prana.testing.ManualClock is one)"
        )
    return clock


def _token_parts(token: str) -> tuple[str, str]:
    """``(execution_id, secret)`` of a resume token; ``HookNotFound`` if it is not one."""
    parsed = parse_token(token)
    if parsed is None:
        raise HookNotFound("no webhook wait answers to this token")
    return parsed


_BODY_UNREAD: Any = object()
"""``_check_hook``'s data before the body is read (``check_hook``)."""


def _check_hook(
    execution: WorkflowExecution, execution_id: str, secret: str, body: Any = _BODY_UNREAD
) -> None:
    """Refuse a token whose secret does not verify against the wait ``execution`` holds now.

    The secret is verified before anything else is said: a caller without it learns
    nothing about the execution its token names, not even that it exists. A token used
    already whose delivery is repeated with the same ``body`` is ``HookAlreadyDelivered``;
    before the body is read, a used token's secret lets the body be read to tell.
    """
    suspension = execution.suspension
    data = suspension.data if suspension is not None else None
    if (
        suspension is None
        or suspension.kind != "webhook"
        or not isinstance(data, WebhookData)
        or not verify_token(data.token_digest, execution_id, execution.suspended_node or "", secret)
    ):
        if body is _BODY_UNREAD:
            if used_token(execution.state, execution_id, secret):
                return  # a repeat, maybe: the body tells (deliver_hook)
        elif delivered(execution.state, execution_id, secret, body):
            raise HookAlreadyDelivered(execution_id, execution.status)
        raise HookNotFound("no webhook wait answers to this token")
    if execution.status is not ExecutionStatus.SUSPENDED:
        raise HookGone(
            f"this wait is over: the execution is {execution.status.value} and waits "
            "for no webhook delivery"
        )


class Runner(Generic[SchedulerT]):
    """Runs workflows to the end: persists every outcome, arms alarms, resumes when due.

    For type checkers it is generic in its scheduler, so ``runner.scheduler`` keeps the
    type it was given (``Runner(..., scheduler=ManualScheduler(...)).scheduler.advance``);
    without one it is a ``Runner[APSchedulerAdapter]``, the scheduler it makes.

    ``store`` defaults to a ``MemoryStore`` and ``scheduler`` to an ``APSchedulerAdapter``
    in a background thread. ``clock`` is shared by the runner, the core and the
    scheduler; with a ``ManualScheduler`` and no ``clock`` its clock is used. ``env`` and
    ``observers`` are handed to every run; ``workflows`` are registered (stored) at once,
    so sub-workflows can find them.

    Entering ``with runner:`` starts the scheduler and re-arms every alarm from the store;
    leaving stops the scheduler, and neither cancels nor waits for suspended executions.
    ``recover=False`` skips the re-arming (and the reconciling of parents) on open: the
    runner then arms only what it saves itself, for a one-off command that must not run
    work it was not asked about (``prana run``, ``prana deliver``); a worker recovers.

    Durability: before each action call the runner saves the execution ``running`` with a
    lease of ``lease_seconds`` (renewed while the action runs), so ``start`` stores an
    execution before its first action runs, and a runner that loses that claim to another
    one stops before running the action. A ``running`` execution whose lease ended (its
    process died) is taken up by the runner its alarm reaches (every worker re-arms the
    store's alarms when it opens): the interrupted attempt is recorded and run again, at
    most ``max_interruptions`` times in a row before it fails (``recover_execution``).

    Transactional alarms: when the store is a ``scheduling.abc.TransactionalStore``
    (``PostgresStore``) whose ``on_save`` hook slot is free, and the scheduler a
    ``scheduling.abc.TransactionalScheduler`` (``ProcrastinateScheduler``) that says
    ``same_database(store.dsn)``, ``open`` installs a hook
    that arms each saved execution's ``due_at`` (or cancels its alarm when it has none)
    inside the save's transaction, and ``close`` removes it. Every save and its alarm
    change then commit together; the runner arms after the save only alarms no save
    implies (an async child's start, a sub-workflow's deadline, an early fire re-armed).
    Async actions run on a private event loop per step (as ``execute_workflow`` does);
    with an asyncio scheduler a fired resume runs in a worker thread, never blocking the
    loop, and ``astart``/``adeliver``/``acancel``/``await_execution`` are the async facade.
    """

    scheduler: SchedulerT  # the concrete type it was given

    # Without a scheduler the runner makes an APSchedulerAdapter, and is typed so.
    @overload
    def __init__(
        self: Runner[APSchedulerAdapter],
        registry: Registry | None = None,
        store: ExecutionStore | None = None,
        scheduler: None = None,
        clock: Clock | None = None,
        *,
        env: Mapping[str, Any] | None = None,
        observers: Iterable[Callable[[Event], object]] = (),
        workflows: Iterable[Workflow] = (),
        recover: bool = True,
        lease_seconds: float = 30.0,
        max_interruptions: int = 3,
    ) -> None: ...

    @overload
    def __init__(
        self,
        registry: Registry | None = None,
        store: ExecutionStore | None = None,
        scheduler: SchedulerT | None = None,
        clock: Clock | None = None,
        *,
        env: Mapping[str, Any] | None = None,
        observers: Iterable[Callable[[Event], object]] = (),
        workflows: Iterable[Workflow] = (),
        recover: bool = True,
        lease_seconds: float = 30.0,
        max_interruptions: int = 3,
    ) -> None: ...

    def __init__(
        self,
        registry: Registry | None = None,
        store: ExecutionStore | None = None,
        scheduler: SchedulerT | None = None,
        clock: Clock | None = None,
        *,
        env: Mapping[str, Any] | None = None,
        observers: Iterable[Callable[[Event], object]] = (),
        workflows: Iterable[Workflow] = (),
        recover: bool = True,
        lease_seconds: float = 30.0,
        max_interruptions: int = 3,
    ) -> None:
        registry = _checked_registry(registry)
        store = _checked_store(store)
        _check_scheduler(scheduler)
        _check_env(env)
        checked_observers = _check_observers(observers)
        _check_recover(recover)
        lease_seconds = _checked_lease(lease_seconds)
        check_max_interruptions(max_interruptions, "Runner")
        clock = _checked_clock(clock, scheduler, store)
        if scheduler is None:
            from scheduling.adapters.apscheduler import APSchedulerAdapter

            scheduler = cast("SchedulerT", APSchedulerAdapter())
        if isinstance(scheduler, FollowingScheduler):
            scheduler.follow(clock)
        self.registry = registry
        self.store: ExecutionStore = store
        self.scheduler = scheduler
        self.clock: Clock = clock
        self.env: Mapping[str, Any] | None = env
        self.observers: tuple[Callable[[Event], object], ...] = checked_observers
        self._emit: tuple[Callable[[Event], object], ...] = (*checked_observers, log_event)
        """What every run reports to: the observers given, then the log (``scheduling.events``)."""
        self._definitions = Definitions(store)
        self._leases = Leases(store, clock, lease_seconds)
        self.lease_seconds = lease_seconds
        self.max_interruptions = max_interruptions
        self._locks = _ExecutionLocks()
        self._changed = threading.Condition()
        self._saves = 0
        self._waiters = 0
        self._local = StepLocal()
        self._hand_back = (
            HandBack(scheduler.hand_back, HAND_BACK_SECONDS)
            if isinstance(scheduler, HandingBackScheduler)
            else None
        )
        """Hands back the alarms a slow step of a batch holds up (``scheduling._batch``)."""
        self._arms_on_save = False
        self._hook_paths: dict[str, str] = {}
        self._hook_lock = threading.Lock()
        self._unrunnable: set[tuple[str, int]] = set()
        """Workflow versions whose alarms this runner could not run (said once each)."""
        self._unsaved: dict[str, tuple[WorkflowExecution, int, HeldEvents | None, int]] = {}
        """Outcomes whose save failed after their action ran: record, expected version,
        held events, tries (``_keep_unsaved``)."""
        self._unresumable: set[str] = set()
        """Executions whose records this runner could not resume (said once each)."""
        self._listeners: tuple[Callable[[str], object], ...] = ()
        """Called with the execution id after each save (``Runner.subscribe``); copy on write."""
        self._tracer = first_tracer(checked_observers)
        """The observer that keeps each execution in one trace (``scheduling.otel``), if any."""
        self.recover = recover
        self._open = False
        self._store_health = StoreHealth(
            logger,
            "the store is failing (%s): due alarms stay in the store and fire again; further "
            "failures are counted, not logged",
            "the store works again, after %d failed %s",
            "alarms",
        )
        self._repair_at: datetime | None = None
        """When ``rearm_due`` next looks for stranded parents (``_repair_parents``)."""
        for workflow in workflows:
            self.register_workflow(workflow)

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<Runner {state} store={self.store!r} scheduler={type(self.scheduler).__name__}>"

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Runner:
        """``async with runner:`` opens it on the running loop (an asyncio scheduler needs that)."""
        self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Start the scheduler and re-arm every alarm the store knows, overdue ones included.

        Parents waiting on a sub-workflow are reconciled too: a child that ended while no
        runner was up resumes its parent, and a child never started is started. With
        ``recover=False`` only the scheduler starts.
        """
        if self._open:
            return
        # The hook goes in before the scheduler starts, so an alarm that fires at once saves
        # through it; if anything below fails, the runner closes again (hook removed).
        self._install_alarm_hook()
        try:
            scheduler = self.scheduler
            if isinstance(scheduler, BatchingScheduler):
                scheduler.start_batched(self._fire, self._fire_many)
            else:
                scheduler.start(self._fire)
            self._open = True
            if self.recover:
                self._arm_all(self.store.alarms())
                self._repair_parents()
                if hasattr(self.store, "schedule_rows"):
                    self.schedules.arm_all()  # slots missed while down are caught up
        except BaseException:
            self._open = True
            self.close()
            raise

    def close(self) -> None:
        """Stop the scheduler; suspended executions stay in the store for the next runner."""
        if not self._open:
            self._remove_alarm_hook()
            return
        self._open = False
        self._remove_alarm_hook()
        self.scheduler.shutdown()

    def _remove_alarm_hook(self) -> None:
        store = self.store
        if self._arms_on_save and isinstance(store, TransactionalStore):
            self._arms_on_save = False
            store.on_save = None

    def _install_alarm_hook(self) -> None:
        """Arm alarms inside the store's save transactions, if store and scheduler can.

        They can when the store is a ``TransactionalStore`` whose hook slot is free and the
        scheduler a ``TransactionalScheduler`` on the same database (``scheduling.abc``).
        """
        store, scheduler = self.store, self.scheduler
        if (
            not isinstance(store, TransactionalStore)
            or not isinstance(scheduler, TransactionalScheduler)
            or store.on_save is not None
            or not isinstance(store.dsn, str)
            or not scheduler.same_database(store.dsn)
        ):
            return
        scheduler.setup()  # the job tables must exist before the first save arms in them
        schedule_in, cancel_in = scheduler.schedule_in, scheduler.cancel_in

        def arm_in(conn: Any, execution: WorkflowExecution) -> None:
            if execution.status is ExecutionStatus.RUNNING:
                # A checkpoint arms nothing: its step's outcome arms next. Should the process
                # die, its job is taken up as stalled and fires into the lease check, and
                # every worker's re-arm finds a running record once its lease is over.
                return
            due_at = execution.due_at
            if due_at is None:
                cancel_in(conn, execution.id)
            else:
                schedule_in(conn, execution.id, due_at)

        store.on_save = arm_in
        self._arms_on_save = True

    # -- definitions -------------------------------------------------------------------

    def register_workflow(self, workflow: Workflow) -> None:
        """Store ``workflow``'s definition, so sub-workflows and other runners can load it.

        A different definition under a stored id and version raises
        ``WorkflowConflictError``: bump ``Workflow.version`` instead.
        """
        self._definitions.register(workflow)

    @property
    def is_open(self) -> bool:
        """Whether the runner is open (entered, or ``open()`` called, and not closed)."""
        return self._open

    def definition(self, workflow_id: str, version: int | None = None) -> Workflow:
        """The stored definition of ``workflow_id`` at ``version`` (``None``: the highest).

        What an execution ran is ``runner.definition(e.workflow_id, e.workflow_version)``.
        A definition never changes for an id and version, so each is read from the store
        once per runner. Raises ``WorkflowNotFound`` when none is stored.
        """
        if not isinstance(workflow_id, str) or not workflow_id:
            raise InvalidSettingsError(
                f"definition(workflow_id={workflow_id!r}): use the workflow's id (a non-empty "
                "string)"
            )
        if version is None:
            return self._definitions.latest(workflow_id)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidSettingsError(
                f"definition(version={version!r}): use a whole number >= 1, or None for the "
                "highest stored version"
            )
        return self._definitions.get(workflow_id, version)

    # -- the public operations ---------------------------------------------------------

    def start(
        self,
        workflow: Workflow,
        input: Any = None,
        *,
        execution_id: str | None = None,
    ) -> str:
        """Run ``workflow`` in the caller until it completes or suspends; return its id.

        The definition is stored first (a different one under the same id and version is
        refused before anything runs), the outcome is saved, then its alarm is armed. An
        execution cancelled, or taken over by another runner (its lease ended), while its
        first step ran is not this call's any more: its id is returned all the same, with a
        warning, and ``get(id)`` shows what became of it.
        """
        if execution_id is not None:
            if not isinstance(execution_id, str) or not execution_id:
                raise InvalidSettingsError(
                    f"start(execution_id={execution_id!r}): use a non-empty string, or None "
                    "for a fresh id"
                )
            with contextlib.suppress(ExecutionNotFound):
                self.store.load(execution_id)
                raise StaleVersionError(
                    f"execution {execution_id!r} already exists; start it under a new id"
                )
        try:
            execution = self._start(workflow, input, execution_id=execution_id, parent=None)
        except LostStartError as lost:
            # Accepted and stored, then cancelled or taken over while its first step ran:
            # it is no longer this call's to run, and its id is how to see what became of it
            # (raising would invite the caller to start the same work twice).
            current = self.store.load(lost.execution_id)[0]
            logger.warning(
                "execution %r was %s while its first step ran; this start's step was dropped",
                lost.execution_id,
                "cancelled"
                if current.status is ExecutionStatus.CANCELLED
                else f"taken over by another runner (now {current.status.value})",
            )
            return lost.execution_id
        return execution.id

    def deliver(self, execution_id: str, resume_data: Any = None) -> Outcome:
        """Resume a webhook (or custom) suspension with ``resume_data``; return the outcome.

        Runs in the caller until the execution completes or suspends again. Raises
        ``ExecutionNotFound`` for an unknown id, ``ResumeError`` for an execution that is
        not suspended or waits on a retry, timer or sub-workflow (those resume on their
        own), and ``StaleVersionError`` if another process resumed it first.
        """
        return self._deliver(execution_id, resume_data, None)

    def deliver_hook(self, token: str, resume_data: Any = None) -> Outcome:
        """Resume the one webhook wait ``token`` names with ``resume_data``; return the outcome.

        What ``POST /hooks/{token}`` calls: it needs no execution id, only the token. Raises
        ``HookNotFound`` (404) for a malformed or unknown token or one that is not this
        wait's; ``HookGone`` (410) when the wait is over (delivered, expired, cancelled; an
        expired wait is failed with ``WebhookTimeout`` first); ``HookConflict`` (409) when a
        cancel, an expiry or another delivery saved first; ``HookAlreadyDelivered`` (200)
        when this token's delivery was applied with the same data already (a sender cut off
        mid-request retried; other data gets the 404). Nothing changes on any of them.
        """
        execution_id, secret = _token_parts(token)

        def check(execution: WorkflowExecution) -> None:
            _check_hook(execution, execution_id, secret, resume_data)

        try:
            return self._deliver(execution_id, resume_data, check)
        except ExecutionNotFound:
            raise HookNotFound("no webhook wait answers to this token") from None
        except StaleVersionError:
            raise HookConflict(
                "a cancel, an expiry or another delivery changed this execution first; "
                "nothing was delivered"
            ) from None

    def check_hook(self, token: str) -> None:
        """Raise as ``deliver_hook`` would for ``token`` (``HookNotFound``, ``HookGone``),
        delivering nothing: ``POST /hooks/{token}`` asks before it reads the body, so a
        caller without the secret gets its 404 before a byte of its body is parsed. A store
        with ``webhook_wait`` (SQLite) answers from the end of a large record's text, so a
        forged token costs no load or parse of the record it names; a verified one's
        ``HookGone`` comes from ``deliver_hook``. A used token may pass, to have its body
        read: ``deliver_hook`` tells a repeated delivery from another."""
        execution_id, secret = _token_parts(token)
        light = getattr(self.store, "webhook_wait", None)  # SQLite's, PostgreSQL's light read
        try:
            told = light(execution_id) if light is not None else None
            if told is None:
                execution = self.store.load(execution_id)[0]
        except ExecutionNotFound:
            raise HookNotFound("no webhook wait answers to this token") from None
        if told is None:
            _check_hook(execution, execution_id, secret)
        elif told[1] is None or not verify_token(told[1], execution_id, told[0], secret):
            raise HookNotFound("no webhook wait answers to this token")

    def hook_path(self, execution_id: str) -> str | None:
        """The resume path (``/hooks/<token>``) of the webhook wait this runner saw begin.

        Known only in the process whose run reached the wait (the store keeps a digest);
        ``None`` otherwise, or once the wait is over.
        """
        path = self._hook_paths.get(execution_id)
        if path is None:
            return None
        try:
            execution, _ = self.store.load(execution_id)
        except ExecutionNotFound:
            return None
        suspension = execution.suspension
        if execution.status is not ExecutionStatus.SUSPENDED or suspension is None:
            return None
        return path if suspension.kind == "webhook" else None

    def _deliver(
        self,
        execution_id: str,
        resume_data: Any,
        check: Callable[[WorkflowExecution], None] | None,
    ) -> Outcome:
        """``deliver``, after ``check`` (a token's, which raises to refuse) when given."""
        expired_at: list[datetime] = []  # set by the check when the wait has expired

        def deliverable(execution: WorkflowExecution) -> Move:
            if check is not None:
                check(execution)
            suspension = execution.suspension
            if execution.status is not ExecutionStatus.SUSPENDED or suspension is None:
                raise ResumeError(
                    f"execution {execution_id!r} is {execution.status.value}, not suspended; "
                    "there is nothing to deliver to"
                )
            if suspension.kind in SELF_RESUMING_KINDS:
                raise ResumeError(
                    f"execution {execution_id!r} waits on a {suspension.kind} suspension, which "
                    "the runner resumes by itself; deliver() is for webhooks and custom kinds"
                )
            expires_at = execution.due_at if suspension.kind == "webhook" else None
            # Past its deadline a webhook wait has expired, whether or not its alarm fired.
            if expires_at is not None and expires_at <= self.clock():
                expired_at.append(expires_at)
                return Move.EXPIRE
            return Move.RESUME

        outcome = self._step(execution_id, deliverable, resume_data, delivery=True)
        assert outcome is not None, "deliverable() always moves or raises"
        if expired_at:
            if check is not None:
                raise HookGone(f"this wait expired at {expired_at[0].isoformat()}")
            raise ResumeError(
                f"execution {execution_id!r}: the webhook wait expired at "
                f"{expired_at[0].isoformat()}; its node failed with WebhookTimeout"
            )
        return outcome

    def redrive(
        self, execution_id: str, node: str | None = None, *, reset_attempts: bool = False
    ) -> Outcome:
        """Take a failed execution up again and run it in the caller; return the outcome.

        The failed node (or ``node``, one that leads to it) runs again with its input
        rebuilt fresh, then the rest of the workflow, until the execution completes, fails
        or suspends again (its retries are armed as usual). The ledger keeps every earlier
        attempt and marks the redriven one; observers see ``execution_redriven``.
        ``reset_attempts`` restarts the node's attempt count and retry budget. Raises
        ``ExecutionNotFound`` for an unknown id, ``ResumeError`` (with the reason) for an
        execution that did not fail, was cancelled, is a sub-workflow its parent waits on,
        or a node it cannot start from, and ``StaleVersionError`` if another process moved
        it first. ``store.list(ExecutionStatus.FAILED)`` lists what can be redriven.
        """
        if node is not None and (not isinstance(node, str) or not node):
            raise InvalidSettingsError(
                f"redrive(node={node!r}): name a node key, or leave it out for the failed node"
            )

        def redrivable(execution: WorkflowExecution) -> Move:
            del execution  # the core refuses what cannot be redriven, with the reason
            return Move.REDRIVE

        outcome = self._step(execution_id, redrivable, (node, reset_attempts))
        assert outcome is not None, "redrivable() always moves"
        return outcome

    def cancel(self, execution_id: str, reason: str | None = None) -> WorkflowExecution:
        """Cancel a pending or suspended execution, disarm its alarm; return it cancelled.

        Cancelling a cancelled execution returns it as is; a completed or failed one
        raises ``ResumeError``. A resume racing the cancel finds it cancelled and does
        nothing. A child sub-workflow the execution waits on is cancelled too.
        """
        return self._cancel(execution_id, reason)

    def rearm_due(self, limit: int = 1000) -> int:
        """Arm every execution the store says is due now; return how many.

        A worker calls this now and then to pick up work another process left due (a
        ``deliver`` from the command line that ended in a retry, a runner that crashed).
        Arming one already armed only replaces its alarm.
        """
        now = self.clock()
        due = self.store.find_due(now, limit=limit)
        self._arm_all(due)
        if hasattr(self.store, "schedule_rows"):
            self.schedules.rearm()  # schedules added or resumed by another process
        if self._repair_at is None or now >= self._repair_at:
            self._repair_at = now + timedelta(seconds=self.lease_seconds / 2)
            self._repair_parents()
        return len(due)

    def _repair_parents(self, limit: int = 1_000_000) -> list[str]:
        """Move on the sub-workflow parents a stopped process left waiting; return their ids.

        A process killed after saving a parent and before starting its child (or arming an
        async child's alarm), or after a child's final save and before resuming its parent,
        leaves the parent suspended with no due time and no alarm. Each is taken up as its
        process would have gone on: its child started, its ended child reported, its
        deadline enforced. Racing a live process doing the same is harmless: the child's id
        is fixed and the parent's resume a compare-and-set. ``open`` calls it, and
        ``rearm_due`` every half lease, so live workers repair within a lease.
        """
        moved: list[str] = []
        for execution_id in suspended_without_due_time(self.store):
            if len(moved) >= limit:
                break
            try:
                execution, _ = self.store.load(execution_id)
                suspension = execution.suspension
                if (
                    execution.status is ExecutionStatus.SUSPENDED
                    and suspension is not None
                    and suspension.kind == "sub_workflow"
                    and self._sub_workflow_alarm(execution)
                ):
                    moved.append(execution_id)
            except ExecutionNotFound:
                continue
            except InvalidWorkflowError as error:  # this process lacks actions: said once
                self._cannot_run(execution_id, error)
            except (RecordError, ResumeError, WorkflowNotFound) as error:  # edited by hand
                self._cannot_resume(execution_id, error)
        return moved

    def _arm_all(self, alarms: Sequence[tuple[str, datetime]]) -> None:
        """Arm these alarms: in one call to a ``BulkScheduler``, else one by one."""
        scheduler = self.scheduler
        if isinstance(scheduler, BulkScheduler):
            scheduler.schedule_many(alarms)
            return
        for execution_id, due_at in alarms:
            scheduler.schedule(execution_id, due_at)

    def run_due(self, limit: int = 1000) -> list[str]:
        """Resume, in the caller, every execution the store says is due now; return their ids.

        For a cron-style worker, or a script with no scheduler running: each is handled
        as if its alarm fired (a resume that loses the compare-and-set is dropped). One
        that cannot be resumed here (an unreadable record, actions this runner lacks) is
        logged, stays as stored and is left out of the ids.
        """
        handled: list[str] = []
        for execution_id, _ in self.store.find_due(self.clock(), limit=limit):
            if self._on_alarm(execution_id):
                handled.append(execution_id)
        # Parents a stopped process left waiting on a child (none started, one that ended,
        # one past its deadline) have no stored due time: they are found apart.
        if len(handled) < limit:
            handled += self._repair_parents(limit - len(handled))
        return handled

    def get(self, execution_id: str) -> WorkflowExecution:
        """The stored execution; ``ExecutionNotFound`` if there is none."""
        execution, _ = self.store.load(execution_id)
        return execution

    def wait(self, execution_id: str, timeout: float | None = None) -> WorkflowExecution:
        """Block until the execution ended or waits for the outside (a webhook, a custom kind).

        Wakes on every save this runner makes, and re-reads the store a few times a second
        for progress made by other processes. Raises ``TimeoutError`` after ``timeout``
        seconds (``None``: wait as long as it takes).
        """
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout < 0
        ):
            raise InvalidSettingsError(
                f"wait(timeout={timeout!r}): use seconds as a number >= 0, or None to wait "
                "as long as it takes"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._waiters += 1  # from now on every save notifies
        try:
            while True:
                with self._changed:
                    seen = self._saves
                execution = self.get(execution_id)
                if self._settled(execution):
                    return execution
                pause = _WAIT_RECHECK_SECONDS
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(
                            f"execution {execution_id!r} is still {execution.status.value} "
                            f"after {timeout}s"
                        )
                    pause = min(pause, remaining)
                with self._changed:
                    if self._saves == seen:
                        self._changed.wait(pause)
        finally:
            with self._changed:
                self._waiters -= 1

    def subscribe(self, listener: Callable[[str], object]) -> Callable[[], None]:
        """Call ``listener(execution_id)`` after each save by this runner; returns the unsubscribe.

        For live views (the web app's SSE streams wake on it, ``wait`` has its own wake-up):
        saves made by other processes are not heard, so poll the store for those. The
        listener runs in the saving thread, after the save and before the alarm is armed:
        keep it quick and never block (hand work to an event loop with
        ``loop.call_soon_threadsafe``). One that raises is logged at ERROR; the runner goes on.
        """
        if not callable(listener):
            raise InvalidSettingsError(
                f"subscribe({listener!r}): pass a callable taking an execution id"
            )
        with self._changed:
            self._listeners = (*self._listeners, listener)
        subscribed = [True]

        def unsubscribe() -> None:
            with self._changed:
                if not subscribed:
                    return  # already unsubscribed
                subscribed.clear()
                kept = list(self._listeners)
                kept.remove(listener)  # equal entries are interchangeable: drop the first
                self._listeners = tuple(kept)

        return unsubscribe

    def _settled(self, execution: WorkflowExecution) -> bool:
        """``is_settled``, also for a parent whose child (or grandchild...) waits on the outside."""
        seen: set[str] = set()
        while not is_settled(execution):
            child_id = child_execution_id(execution)
            if child_id is None or child_id in seen:
                return False
            seen.add(child_id)
            try:
                execution = self.get(child_id)
            except ExecutionNotFound:
                return False  # not started yet: the runner starts it
            if execution.status in FINAL_STATUSES:
                return False  # ended: the runner reports it to the parent
        return True

    # -- the async facade --------------------------------------------------------------

    @property
    def schedules(self) -> Schedules:
        """The schedules kept in this runner's store: add, list, pause, resume, trigger."""
        return Schedules(self)

    def schedule(self, schedule: Schedule, *, replace: bool = False) -> Schedule:
        """Store ``schedule`` and arm its next slot: each slot starts one execution.

        The slot's execution id is ``sched:<id>:<slot>``, so runners sharing the store
        start each slot once. ``replace=True`` changes a stored schedule of the same id.
        """
        self.schedules.add(schedule, replace=replace)
        return schedule

    async def aschedule(self, schedule: Schedule, *, replace: bool = False) -> Schedule:
        """``schedule`` from async code (the store's writes run in a thread)."""
        return await asyncio.to_thread(self.schedule, schedule, replace=replace)

    async def astart(
        self,
        workflow: Workflow,
        input: Any = None,
        *,
        execution_id: str | None = None,
    ) -> str:
        """``start`` from async code: runs in a worker thread, never blocking the loop."""
        return await asyncio.to_thread(self.start, workflow, input, execution_id=execution_id)

    async def adeliver(self, execution_id: str, resume_data: Any = None) -> Outcome:
        """``deliver`` from async code."""
        return await asyncio.to_thread(self.deliver, execution_id, resume_data)

    async def acancel(self, execution_id: str, reason: str | None = None) -> WorkflowExecution:
        """``cancel`` from async code."""
        return await asyncio.to_thread(self.cancel, execution_id, reason)

    async def await_execution(
        self, execution_id: str, timeout: float | None = None
    ) -> WorkflowExecution:
        """``wait`` from async code."""
        return await asyncio.to_thread(self.wait, execution_id, timeout)

    # -- steps, alarms and follow-ups ---------------------------------------------------

    def _observers(self) -> tuple[Callable[[Event], object], ...]:
        """The observers of the next step: the log's too when logging is configured."""
        return self._emit if wanted() else self.observers

    # -- one step ----------------------------------------------------------------------

    def _step(
        self, execution_id: str, check: Check, data: Any = None, *, delivery: bool = False
    ) -> Outcome | None:
        """One transition: load, check, resume with the core, compare-and-set save, settle.

        ``check`` sees the loaded execution under its lock and decides the ``Move`` (or
        ``None``: nothing to do); ``data`` is the resume data of ``Move.RESUME``. A
        ``delivery`` from the outside ends the wait it answers: its resume path is
        forgotten, and an execution left with no due time has its alarm cancelled before
        it settles. ``ExecutionNotFound`` and ``StaleVersionError`` (the compare-and-set was
        lost) propagate: the caller says whether they are errors or dropped. Returns the
        core's outcome, or ``None`` when no resume ran.
        """
        batch = self._local.batch
        lock = self._locks.take(execution_id)
        if batch is None:
            lock.acquire()
        elif not lock.acquire(blocking=False):
            batch.commit()  # never wait for a lock while the group holds the store's
            lock.acquire()
        try:
            execution, version = self.store.load(execution_id)
            move = check(execution)
            if move is None:
                return None
            if move is _CHILDREN:
                new = None  # the sub-workflow alarm takes other locks: it runs after this one
            else:
                definitions = self._definitions
                workflow = definitions.cached.get(
                    (execution.workflow_id, execution.workflow_version)
                ) or definitions.get(execution.workflow_id, execution.workflow_version)
                leases = self._leases
                # A light claim: see scheduling._claims for the rule and the reading back.
                claim = Claim(
                    version,
                    light=move is _RESUME and claimable(execution, workflow, self.registry),
                )
                observers = self._observers()
                if observers:  # held until stored (HeldEvents), then the claim releases them
                    claim.held = held = HeldEvents(observers)
                    seen: tuple[Callable[[Event], object], ...] = (held,)
                else:
                    held, seen = None, observers
                try:
                    checkpoint = leases.checkpoint(claim, None if batch is None else batch.commit)
                    tracer = self._tracer
                    if tracer is None:
                        outcome = self._move(move, execution, data, workflow, checkpoint, seen)
                    else:  # the step runs inside the execution's stored trace
                        with tracer.resume(execution.trace_context):
                            outcome = self._move(move, execution, data, workflow, checkpoint, seen)
                except BaseException:
                    leases.release(claim)
                    raise
                new = outcome.execution
                assert new is not None, "the executor returns outcomes with the execution set"
                try:
                    version = leases.save(claim, new)
                except StaleVersionError:
                    raise  # another runner or a cancel moved it on: this outcome is not wanted
                except StoreError as error:  # the action ran: keep what it did (``_unsaved``)
                    if claim.version is not None:
                        self._keep_unsaved(new, claim.version, held, error)
                    raise
        finally:
            lock.release()
            self._locks.give(execution_id, lock)
        if new is None:
            if batch is not None:
                batch.later.append(execution)  # it takes other executions' locks: after
                return None
            self._sub_workflow_alarm(execution)
            return None
        if delivery:
            self._hook_paths.pop(execution_id, None)
            if new.due_at is None and not self._arms_on_save:
                self.scheduler.cancel(execution_id)
        if type(outcome) is Suspend:
            self._note_hook(outcome)
        if batch is not None:
            batch.pending.append((new, version, held))  # settled once its group commits
        else:
            self._settle(new, version, held)
        return outcome

    def _move(
        self,
        move: Move,
        execution: WorkflowExecution,
        data: Any,
        workflow: Workflow,
        checkpoint: Callable[[WorkflowExecution], None],
        observers: tuple[Callable[[Event], object], ...],
    ) -> Outcome:
        """Compute the next state of ``execution`` with the core, as ``move`` says."""
        if move is _RESUME:
            return resume_workflow(
                execution,
                data,
                workflow=workflow,
                registry=self.registry,
                clock=self.clock,
                env=self.env,
                observers=observers,
                checkpoint=checkpoint,
            )
        if move is Move.REDRIVE:
            node, reset = data
            return self._redrive(execution, workflow, node, reset, checkpoint, observers)
        if move is Move.RECOVER:
            recover = recover_claimed if is_claimed(execution) else recover_execution
            return recover(
                execution,
                workflow=workflow,
                registry=self.registry,
                clock=self.clock,
                env=self.env,
                observers=observers,
                checkpoint=checkpoint,
                max_interruptions=self.max_interruptions,
            )
        return self._expire_webhook(execution, workflow, checkpoint, observers)

    def _redrive(
        self,
        execution: WorkflowExecution,
        workflow: Workflow,
        node: str | None,
        reset: bool,
        checkpoint: Callable[[WorkflowExecution], None] | None,
        observers: tuple[Callable[[Event], object], ...],
    ) -> Outcome:
        """Redrive a failed execution with the core, then run it in the caller as a resume."""
        redriven = redrive_execution(
            execution,
            workflow=workflow,
            node=node,
            reset_attempts=reset,
            registry=self.registry,
            clock=self.clock,
            observers=observers,
        )
        return resume_workflow(
            redriven,
            None,
            workflow=workflow,
            registry=self.registry,
            clock=self.clock,
            env=self.env,
            observers=observers,
            checkpoint=checkpoint,
        )

    def _start(
        self,
        workflow: Workflow,
        input_data: Any,
        *,
        execution_id: str | None,
        parent: ParentRef | None,
        parent_trace: Mapping[str, str] | None = None,
    ) -> WorkflowExecution:
        """Run a new execution's first step and save it; a child's trace opens in its parent's."""
        if isinstance(workflow, Workflow):
            # Refuse an invalid definition before storing it: a stored one could never be
            # replaced by its fix under the same id and version.
            validate(workflow, self.registry)
        self._definitions.register(workflow)
        tracer = self._tracer
        leases = self._leases
        observers = self._observers()
        held = HeldEvents(observers) if observers else None
        claim = Claim(None)
        claim.held = held
        save_checkpoint = leases.checkpoint(claim)
        created: list[str] = []

        def checkpoint(execution: WorkflowExecution) -> None:
            save_checkpoint(execution)  # the first stores it: a durable start
            if not created:
                created.append(execution.id)

        try:
            with contextlib.ExitStack() as traced:
                trace_context = None
                if tracer is not None:
                    traced.enter_context(tracer.resume(parent_trace))
                    trace_context = traced.enter_context(tracer.begin(self.clock()))
                outcome = execute_workflow(
                    workflow,
                    input_data,
                    registry=self.registry,
                    clock=self.clock,
                    env=self.env,
                    observers=() if held is None else (held,),
                    execution_id=execution_id,
                    parent=parent,
                    trace_context=trace_context,
                    checkpoint=checkpoint,
                )
                new = execution_of(outcome)
                version = leases.save(claim, new)
                if held is not None:
                    held.release()  # stored: inside the start's trace, as they were emitted
        except StaleVersionError as exc:
            leases.release(claim)
            if created:
                raise LostStartError(created[0]) from exc
            raise
        except BaseException:
            leases.release(claim)
            raise
        self._note_hook(outcome)
        self._settle(new, version)
        return new

    def _note_hook(self, outcome: Outcome) -> None:
        """Keep the plaintext resume path of a webhook wait begun here (memory only, bounded)."""
        data = outcome.data if type(outcome) is Suspend else None
        if type(data) is WebhookData and data.path is not None and outcome.execution is not None:
            paths = self._hook_paths
            with self._hook_lock:
                paths.pop(outcome.execution.id, None)
                paths[outcome.execution.id] = data.path
                while len(paths) > _MAX_HOOK_PATHS:
                    del paths[next(iter(paths))]

    def _cancel(self, execution_id: str, reason: str | None) -> WorkflowExecution:
        """Cancel and save (retrying on a newer record), disarm, cancel the child; settle."""
        while True:
            with self._locks.held(execution_id):
                execution, version = self.store.load(execution_id)
                if execution.status is ExecutionStatus.CANCELLED:
                    return execution
                if is_claimed(execution):  # the claim's attempt in flight is cancelled too
                    execution = self._claimed_snapshot(execution)
                observers = self._observers()
                held = HeldEvents(observers) if observers else None
                cancelled = cancel_execution(
                    execution, reason, clock=self.clock, observers=() if held is None else (held,)
                )
                try:
                    new_version = self.store.save(cancelled, version)
                except StaleVersionError:
                    continue  # another process moved it on: cancel the newer record
                if held is not None:
                    held.release()  # reported once, and only what is stored
            break
        if not self._arms_on_save:
            self.scheduler.cancel(execution_id)
        child_id = child_execution_id(execution)
        data = execution.suspension.data if execution.suspension is not None else None
        if (
            child_id is not None
            and isinstance(data, SubWorkflowData)
            and data.mode != "fire_and_forget"
        ):
            with contextlib.suppress(ExecutionNotFound, ResumeError):  # not started, or ended
                self._cancel(child_id, reason or f"parent {execution_id!r} cancelled")
        self._settle(cancelled, new_version)
        return cancelled

    def _claimed_snapshot(self, execution: WorkflowExecution) -> WorkflowExecution:
        """The checkpoint a claimed record stands for (``scheduling._claims``), or the
        suspended record it stands on when its step had no action call to make.

        Also the suspended record when this runner cannot rebuild the checkpoint (its
        workflow or actions are not known here, as in a plain ``prana cancel``): a cancel
        needs neither, so it is not refused; the attempt in flight is then left out of the
        ledger (its step's own save loses to the cancel).
        """
        try:
            workflow = self._definitions.get(execution.workflow_id, execution.workflow_version)
            snapshot = claimed_snapshot(execution, workflow, self.registry, self.env, self.clock)
        except (InvalidWorkflowError, WorkflowNotFound, ResumeError):
            return unclaimed(execution)
        return unclaimed(execution) if snapshot is None else snapshot

    def _expire_webhook(
        self,
        execution: WorkflowExecution,
        workflow: Workflow,
        checkpoint: Callable[[WorkflowExecution], None] | None,
        observers: tuple[Callable[[Event], object], ...],
    ) -> Outcome:
        """Fail the webhook wait with a non-retryable ``WebhookTimeout``; ``on_error`` applies."""
        return expire_webhook(
            execution,
            workflow=workflow,
            registry=self.registry,
            clock=self.clock,
            env=self.env,
            observers=observers,
            checkpoint=checkpoint,
        )

    # -- alarms ------------------------------------------------------------------------

    def _fire(self, execution_id: str) -> Any:
        """The scheduler's callback; inside an event loop it hands the step to a thread."""
        if asyncio._get_running_loop() is None:  # the no-raise form: this is the hot path
            self._on_alarm_fired(execution_id)
            return None
        return asyncio.to_thread(self._on_alarm_fired, execution_id)

    def _on_alarm_fired(self, execution_id: str) -> None:
        """``_on_alarm`` for a scheduler: a failing store is said once, then counted
        (``StoreHealth``), never raised into the scheduler (which logged each one)."""
        try:
            self._on_alarm(execution_id)
        except StoreError as error:
            self._store_health.failed(error)
            return
        if self._store_health.failures:
            self._store_health.worked()

    def _fire_many(self, execution_ids: Sequence[str]) -> Any:
        """A ``BatchingScheduler``'s callback: alarms due at one instant, as one batch."""
        if asyncio._get_running_loop() is None:
            self._on_alarms(execution_ids)
            return None
        return asyncio.to_thread(self._on_alarms, execution_ids)

    def _on_alarm_logged(self, execution_id: str) -> None:
        """``_on_alarm``, logging what it raises unexpectedly (one of a batch fails alone)."""
        try:
            self._on_alarm(execution_id)
        except StoreError as error:
            self._store_health.failed(error)
        except Exception:
            logger.exception("the alarm of execution %r failed; it stays as stored", execution_id)
        else:
            if self._store_health.failures:
                self._store_health.worked()

    def _sub_workflow_alarm_logged(self, parent: WorkflowExecution) -> None:
        try:
            self._sub_workflow_alarm(parent)
        except Exception:
            logger.exception("the sub-workflow alarm of execution %r failed", parent.id)

    def _on_alarm(self, execution_id: str) -> bool:
        """An alarm went off: resume the execution if it is still suspended and due.

        An unknown execution is logged and dropped; a resume that loses the
        compare-and-set is dropped (another runner made the transition). ``False`` when
        the execution could not be resumed here and stays as stored (said in the log).
        """
        if execution_id in self._unsaved:
            return self._save_unsaved(execution_id)
        if execution_id.startswith(SCHEDULE_ALARM):
            self.schedules.tick_logged(execution_id[len(SCHEDULE_ALARM) :])
            return True
        try:
            self._step(execution_id, self._alarm_check)
        except ExecutionNotFound:
            logger.warning("alarm of unknown execution %r dropped", execution_id)
        except StaleVersionError:
            logger.debug("resume of %r lost the compare-and-set; dropped", execution_id)
        except InvalidWorkflowError as error:
            self._cannot_run(execution_id, error)
            return False
        except (RecordError, ResumeError, WorkflowNotFound) as error:
            self._cannot_resume(execution_id, error)
            return False
        return True

    def _keep_unsaved(
        self,
        execution: WorkflowExecution,
        expected_version: int,
        held: HeldEvents | None,
        error: StoreError,
    ) -> None:
        """A step's outcome the store refused after its action ran (a full disk): keep it
        and save it again soon, so the record says what happened, not that the attempt
        was interrupted; its events wait with it (``_save_unsaved``)."""
        with self._hook_lock:
            self._unsaved[execution.id] = (execution, expected_version, held, 0)
            while len(self._unsaved) > _UNRESUMABLE_KEPT:
                del self._unsaved[next(iter(self._unsaved))]
        logger.warning(
            "the outcome of execution %s could not be stored after its action ran (%s); "
            "this runner keeps it and stores it once the store works again",
            execution.id,
            " ".join(str(error).split()),
        )
        self._retry_unsaved(execution.id, 0)

    def _retry_unsaved(self, execution_id: str, tries: int) -> None:
        """Arm the next try of an unsaved outcome: 1 s, then doubling, at most a third of
        a lease (its lease's end re-arms it too: ``rearm_due`` finds it running)."""
        delay = min(2.0**tries, self.lease_seconds / 3)
        try:
            self.scheduler.schedule(execution_id, self.clock() + timedelta(seconds=delay))
        except StoreError as error:  # a scheduler in the same failing database
            logger.debug("arming the next save of %r failed: %s", execution_id, error)

    def _save_unsaved(self, execution_id: str) -> bool:
        """Store the outcome ``_keep_unsaved`` kept, then settle it; ``True`` once stored.

        Lost to another runner or a cancel meanwhile (the compare-and-set), it is dropped.
        """
        with self._locks.held(execution_id):
            entry = self._unsaved.get(execution_id)
            if entry is None:
                return True
            execution, expected, held, tries = entry
            try:
                version = self.store.save(execution, expected)
            except StaleVersionError:
                del self._unsaved[execution_id]
                stored = self._stored_as(execution)
                if stored is not None:  # the failed save went through (its answer was lost)
                    self._settle(execution, stored, held)
                    return True
                logger.warning(
                    "the outcome of execution %s, kept since its save failed, was dropped: "
                    "another runner or a cancel moved the execution on first",
                    execution_id,
                )
                return True
            except StoreError:
                self._unsaved[execution_id] = (execution, expected, held, tries + 1)
                self._retry_unsaved(execution_id, tries + 1)
                return False
            del self._unsaved[execution_id]
        logger.warning(
            "the outcome of execution %s is stored now, %d tr%s after its save failed",
            execution_id,
            tries + 1,
            "y" if tries == 0 else "ies",
        )
        self._settle(execution, version, held)
        return True

    def _stored_as(self, execution: WorkflowExecution) -> int | None:
        """The stored version of ``execution`` if the store holds it as it is, else ``None``:
        a save whose connection dropped after its commit raised, yet stored the record."""
        try:
            stored, version = self.store.load(execution.id)
        except (StoreError, RecordError, ExecutionNotFound):
            return None
        return version if stored == execution else None

    def _cannot_resume(self, execution_id: str, error: Exception) -> None:
        """An alarm of a record that cannot be read or resumed: say so once, leave it stored.

        Only a record edited by hand (or a definition deleted) gets here. It stays as it is
        for an operator (``prana show``, ``prana cancel``); the alarms of the executions
        due after it go on, and a worker re-arming it says nothing more.
        """
        with self._hook_lock:
            if execution_id in self._unresumable:
                return
            if len(self._unresumable) >= _UNRESUMABLE_KEPT:
                self._unresumable.clear()  # said again, now and then, rather than kept forever
            self._unresumable.add(execution_id)
        logger.error(
            "execution %s cannot be resumed: %s; it stays as stored (prana show, prana "
            "cancel); said once",
            execution_id,
            " ".join(str(error).split()),
        )

    def _cannot_run(self, execution_id: str, error: InvalidWorkflowError) -> None:
        """An alarm whose definition this runner cannot run: say so once, leave it suspended.

        The definition is stored, so it was valid where it started; what fails here is
        this runner's registry (actions or conditions it lacks). The execution is not
        failed: a runner that has them (a worker with the right ``--actions``) resumes it.
        One ERROR line per workflow version, so a worker re-arming it says nothing more.
        """
        try:
            execution, _ = self.store.load(execution_id)
        except ExecutionNotFound:
            return
        key = (execution.workflow_id, execution.workflow_version)
        with self._hook_lock:
            if key in self._unrunnable:
                return
            self._unrunnable.add(key)
        workflow = self._definitions.cached.get(key)
        missing = sorted(
            {n.type for n in workflow.nodes if n.type not in self.registry}
            if workflow is not None
            else ()
        )
        what = (
            f"node type(s) {', '.join(repr(t) for t in missing)} are not registered here"
            if missing
            else "; ".join(error.problems)
        )
        logger.error(
            "execution %s of workflow %r v%d cannot run in this process: %s; it stays "
            "suspended for a runner that has its actions (prana worker: pass --actions "
            "MODULE); said once per workflow version",
            execution_id,
            *key,
            what,
        )

    def _alarm_check(self, execution: WorkflowExecution) -> Move | None:
        """An alarm's check: still suspended and due (an early one is armed again).

        A ``running`` execution's alarm is its lease expiry: past it, its process is taken
        for dead and the execution is recovered; before it, the alarm is armed again.
        """
        suspension = execution.suspension
        if execution.status is not EXEC_SUSPENDED or suspension is None:
            if execution.status is EXEC_RUNNING:
                lease = execution.lease_expires_at
                if lease is None:
                    return None  # no lease: not a runner's checkpoint; leave it alone
                if lease > self.clock():
                    self.scheduler.schedule(execution.id, lease)  # still held: wait again
                    return None
                return Move.RECOVER
            return None  # resumed, cancelled or finished since the alarm was armed
        kind = suspension.kind
        if kind == "sub_workflow":
            return _CHILDREN  # an async child to start (or a parent to time out)
        due_at = execution.due_at
        if due_at is None:
            return None  # waits for a delivery; nothing is due
        if due_at > self.clock():
            self.scheduler.schedule(execution.id, due_at)  # early: wait again
            return None
        return _EXPIRE if kind == "webhook" else _RESUME

    # -- follow-ups --------------------------------------------------------------------

    def _settle(
        self, execution: WorkflowExecution, version: int, held: HeldEvents | None = None
    ) -> None:
        """After a save is stored: release the step's ``held`` events to the observers, wake
        waiters, then arm the alarm or run what the new state asks for.

        The common cases (a retry or timer to arm, an execution that ended with no parent)
        are handled at once; sub-workflow steps go through the per-thread queue.
        """
        del version
        if held is not None:
            held.release()
        if self._waiters:
            with self._changed:
                self._saves += 1
                self._changed.notify_all()
        if self._listeners:
            self._tell_listeners(execution.id)
        status = execution.status
        suspension = execution.suspension
        if status is EXEC_SUSPENDED:
            if suspension is not None and suspension.kind != "sub_workflow":
                due_at = execution.due_at
                if due_at is not None and not self._arms_on_save:
                    self.scheduler.schedule(execution.id, due_at)
                return
        elif execution.parent is None or status not in FINAL_STATUSES:
            return
        queue = self._local.queue
        if queue is not None:
            queue.append(execution)
            return
        queue = self._local.queue = collections.deque([execution])
        self._drain(queue)

    def _drain(self, queue: collections.deque[WorkflowExecution]) -> None:
        """Run the follow-ups queued (``_local.queue`` is ``queue``), and those they queue."""
        try:
            while queue:
                follow = queue.popleft()
                try:
                    self._follow_up(follow)
                except Exception:
                    logger.exception(
                        "follow-up of execution %r failed after its save; a runner that "
                        "starts over this store will retry it",
                        follow.id,
                    )
        finally:
            self._local.queue = None

    def _tell_listeners(self, execution_id: str) -> None:
        """Call every listener with ``execution_id``; one that raises is logged, never fatal."""
        for listener in self._listeners:
            try:
                listener(execution_id)
            except Exception:
                logger.exception(
                    "save listener %r raised on execution %r; the runner goes on",
                    listener,
                    execution_id,
                )

    def _follow_up(self, execution: WorkflowExecution) -> None:
        status = execution.status
        if status is ExecutionStatus.SUSPENDED and execution.suspension is not None:
            data = execution.suspension.data
            if execution.suspension.kind == "sub_workflow" and isinstance(data, SubWorkflowData):
                if data.mode == "async":
                    self.scheduler.schedule(execution.id, self.clock())
                else:
                    self._run_child(execution)
                return
            due_at = execution.due_at
            if due_at is not None and not self._arms_on_save:
                self.scheduler.schedule(execution.id, due_at)
        elif (
            status in FINAL_STATUSES
            and execution.parent is not None
            and execution.parent.mode != "fire_and_forget"
        ):
            self._report_to_parent(execution)

    # -- sub-workflows -----------------------------------------------------------------

    def _sub_workflow_alarm(self, parent: WorkflowExecution) -> bool:
        """A parent's alarm: start its child, report its ended child, or time the child out
        at its deadline; ``False`` when there was nothing to do (the child runs)."""
        assert parent.suspension is not None
        data = parent.suspension.data
        expires = data.expires_at if isinstance(data, SubWorkflowData) else None
        if expires is None or expires > self.clock():
            return self._run_child(parent)
        key = parent.suspended_node
        child_id = child_execution_id(parent)
        if key is None or child_id is None:
            return False
        error = {
            "code": "timeout",
            "message": f"sub-workflow {child_id} did not end within {data.timeout_ms} ms",
        }
        # The parent first: the cancelled child then finds it no longer waiting, and its own
        # report (a cancelled child reads as failed) is dropped.
        self._resume_parent(parent.id, key, child_id, {"status": "timeout", "error": error})
        try:
            child, _ = self.store.load(child_id)
            if child.status not in FINAL_STATUSES:
                self._cancel(child_id, reason=f"the parent's timeout: {error['message']}")
        except (ExecutionNotFound, ResumeError, StaleVersionError):
            pass  # never started, ended meanwhile, or cancelled by someone else
        return True

    def _run_child(self, parent: WorkflowExecution) -> bool:
        """Start the child a parent waits on (once), or report a child that already ended;
        ``False`` when neither was to do (the child runs, or another process started it)."""
        suspension = parent.suspension
        key = parent.suspended_node
        child_id = child_execution_id(parent)
        if suspension is None or key is None or child_id is None:
            return False
        data = suspension.data
        if not isinstance(data, SubWorkflowData):
            return False
        try:
            child, _ = self.store.load(child_id)
        except ExecutionNotFound:
            child = None
        started = child is None
        if child is None:
            too_much = self._over_limits(parent, data.workflow_id)
            if too_much is not None:
                error = {
                    "code": ErrorCode.LIMIT_EXCEEDED.value,
                    "type": "LimitExceeded",
                    "module": "prana",
                    "message": too_much,
                }
                self._resume_parent(parent.id, key, child_id, {"status": "failed", "error": error})
                return True
            ref = ParentRef(execution_id=parent.id, node_key=key, mode=data.mode)
            try:
                if data.version is None:
                    workflow = self._definitions.latest(data.workflow_id)
                else:
                    workflow = self._definitions.get(data.workflow_id, data.version)
                child = self._start(
                    workflow,
                    data.input,
                    execution_id=child_id,
                    parent=ref,
                    parent_trace=parent.trace_context,
                )
            except StaleVersionError:
                return False  # started by someone else meanwhile; it reports when it ends
            except (WorkflowNotFound, InvalidWorkflowError) as exc:
                code = "workflow_not_found" if isinstance(exc, LookupError) else "invalid_workflow"
                self._resume_parent(
                    parent.id,
                    key,
                    child_id,
                    {"status": "failed", "error": exception_dict(exc, code)},
                )
                return True
        # The parent was read before the child started: if it stopped waiting meanwhile
        # (cancelled), the child it no longer wants is cancelled too.
        try:
            current = self.store.load(parent.id)[0] if started else parent
        except ExecutionNotFound:
            current = None
        if (
            current is None
            or current.status is not ExecutionStatus.SUSPENDED
            or child_execution_id(current) != child_id
        ):
            with contextlib.suppress(ExecutionNotFound, ResumeError):
                self._cancel(child_id, f"parent {parent.id!r} no longer waits on it")
            return started
        if data.mode == "fire_and_forget":
            self._resume_parent(
                parent.id,
                key,
                child_id,
                {"status": "completed", "output": {"execution_id": child_id}},
            )
        elif child.status in FINAL_STATUSES and child.id == child_id:
            self._report_to_parent(child)
        else:
            if data.expires_at is not None:
                self.scheduler.schedule(parent.id, data.expires_at)  # the parent's deadline
            return started
        return True

    def _over_limits(self, parent: WorkflowExecution, workflow_id: str) -> str | None:
        """Why ``parent`` may not start its child: too deep, or its tree too big; else None.

        The depth is counted by loading the ancestors, at most ``max_sub_workflow_depth``
        of them (a chain of parent references that loops, a record edited by hand, ends
        the count too); the last one loaded is the root, whose tree the store counts.
        """
        limits = self.registry.limits
        most = limits.max_sub_workflow_depth
        depth, current = 1, parent
        while current.parent is not None and depth <= most:
            try:
                current = self.store.load(current.parent.execution_id)[0]
            except (ExecutionNotFound, RecordError):
                break
            depth += 1
        if depth > most:
            return sub_workflow_too_deep(workflow_id, limits)
        if isinstance(self.store, TreeCountingStore):
            most = min(limits.max_tree_executions, MAX_LIMIT)
            if self.store.count_tree(current.id, most) >= most:
                return sub_workflow_tree_too_big(workflow_id, current.id, limits)
        return None

    def _report_to_parent(self, child: WorkflowExecution) -> None:
        """Resume the parent of an ended child with its output or its error."""
        ref = child.parent
        if ref is None:
            return
        if child.status is ExecutionStatus.COMPLETED:
            data: dict[str, Any] = {"status": "completed", "output": child.output}
        else:
            data = {"status": "failed", "error": error_dict(child)}
        self._resume_parent(ref.execution_id, ref.node_key, child.id, data)

    def _resume_parent(
        self, parent_id: str, node_key: str, child_id: str, resume_data: Any
    ) -> None:
        """Resume a parent waiting on ``child_id`` at ``node_key``; anything else is dropped."""

        def waits_on_the_child(parent: WorkflowExecution) -> Move | None:
            if (
                parent.status is not ExecutionStatus.SUSPENDED
                or parent.suspended_node != node_key
                or child_execution_id(parent) != child_id
            ):
                return None  # resumed already, cancelled, or waiting on another child now
            return Move.RESUME

        try:
            self._step(parent_id, waits_on_the_child, resume_data)
        except ExecutionNotFound:
            logger.warning("child %r reports to unknown parent %r", child_id, parent_id)
        except StaleVersionError:
            pass  # another runner resumed the parent first

    # -- a batch of alarms --------------------------------------------------------------

    def _on_alarms(self, execution_ids: Sequence[str]) -> None:
        """Alarms due at one instant: each as ``self._on_alarm``, their saves in one store group.

        One that fails unexpectedly is logged and the others still run. Without a
        ``GroupingStore`` (or inside another batch or follow-up) they run one by one. While
        a step of the batch runs longer than ``HAND_BACK_SECONDS``, the alarms not started
        yet are handed back to the scheduler to fire now elsewhere (``HandBack``): a batch
        never holds an alarm back behind another's action.
        """
        pending = Pending(execution_ids)
        watcher = self._hand_back if len(execution_ids) > 1 else None
        if watcher is not None:
            watcher.watch(pending)
        try:
            self._run_pending(pending)
        finally:
            if watcher is not None:
                watcher.unwatch(pending)

    def _run_pending(self, pending: Pending) -> None:
        """Run the alarms of one batch until none is left (``_on_alarms``)."""
        store = self.store
        local = self._local
        if (
            not isinstance(store, GroupingStore)
            or getattr(local, "batch", None) is not None
            or getattr(local, "queue", None) is not None
        ):
            while (execution_id := pending.next()) is not None:
                self._on_alarm_logged(execution_id)
            return
        batch = Batch(store)
        queue: collections.deque[WorkflowExecution] = collections.deque()
        local.queue = queue  # follow-ups of settled steps wait for the end of the group
        try:
            try:
                local.batch = batch
                with store.grouped():
                    while (execution_id := pending.next()) is not None:
                        self._on_alarm_logged(execution_id)
                        if len(batch.pending) >= GROUP_MAX:
                            batch.commit()
                        if batch.ready:
                            self._settle_ready(batch)
                    local.batch = None
                    batch.commit()
            except StoreError as error:  # its executions resume from what is stored
                self._store_health.failed(error)
            except Exception:
                logger.exception(
                    "a batch of %d alarms stopped: its last saves were not committed; their "
                    "executions resume from what is stored (a runner re-arms them)",
                    pending.size,
                )
            finally:
                local.batch = None
            for execution, version, held, refused in batch.lost:  # its commit failed
                self._keep_unsaved(execution, version - 1, held, refused)
            self._settle_ready(batch)
            for parent in batch.later:
                self._sub_workflow_alarm_logged(parent)
        finally:
            local.queue = None
        if queue:
            local.queue = queue
            self._drain(queue)

    def _settle_ready(self, batch: Batch) -> None:
        ready = batch.ready
        batch.ready = []
        for execution, version, held in ready:
            self._settle(execution, version, held)
