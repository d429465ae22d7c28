"""The runner: executor + store + scheduler, so suspended executions resume on their own.

Theory of operation. Every transition of an execution is one step (``scheduling/_steps.py``
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

This module holds the public face: the checked construction, the lifecycle, the public
operations and their async facade; ``_steps.py`` the steps, alarms and follow-ups under
them; ``_definitions.py`` the definitions cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, cast, overload

from prana import (
    ExecutionStatus,
    InvalidSettingsError,
    Outcome,
    RecordError,
    Registry,
    ResumeError,
    SubWorkflowData,
    WebhookData,
    Workflow,
    WorkflowExecution,
)
from prana._durations import is_aware
from prana._entry import _utcnow as default_clock  # the core reads it unchecked (fast)
from prana._hooks import parse_token
from prana._hooks import verify as verify_token
from prana._recovery import check_max_interruptions
from scheduling._errors import (
    ExecutionNotFound,
    HookConflict,
    HookGone,
    HookNotFound,
    StaleVersionError,
)
from scheduling._records import child_execution_id, suspended_without_due_time
from scheduling._steps import (
    FINAL_STATUSES,
    SELF_RESUMING_KINDS,
    Clock,
    LostStartError,
    Move,
    Steps,
    logger,
)
from scheduling.abc import (
    BatchingScheduler,
    BulkScheduler,
    ClockedScheduler,
    ExecutionStore,
    Scheduler,
    TransactionalScheduler,
    TransactionalStore,
)

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

_WAIT_RECHECK_SECONDS = 0.25
"""How often ``wait`` re-reads the store for progress made by other processes."""


def is_settled(execution: WorkflowExecution) -> bool:
    """Whether only the outside can move ``execution`` on: it ended, or waits for a delivery."""
    if execution.status in FINAL_STATUSES:
        return True
    if execution.status is ExecutionStatus.SUSPENDED and execution.suspension is not None:
        return execution.suspension.kind not in SELF_RESUMING_KINDS
    return False


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


class Runner(Steps, Generic[SchedulerT]):
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

    scheduler: SchedulerT  # the concrete type it was given (Steps declares the protocol)

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
        if registry is not None and not isinstance(registry, Registry):
            raise InvalidSettingsError(
                f"Runner(registry={registry!r}): pass a prana.Registry (or None for the built-ins)"
            )
        registry = registry if registry is not None else Registry()
        if store is None:
            from scheduling.stores.memory import MemoryStore

            store = MemoryStore()
        elif not isinstance(store, ExecutionStore):
            raise InvalidSettingsError(
                f"Runner(store={store!r}): pass an ExecutionStore (MemoryStore, SQLiteStore, "
                "PostgresStore, or your own with the methods of scheduling.ExecutionStore)"
            )
        if scheduler is not None and not isinstance(scheduler, Scheduler):
            raise InvalidSettingsError(
                f"Runner(scheduler={scheduler!r}): pass a Scheduler (APSchedulerAdapter, "
                "AsyncioScheduler, ManualScheduler..., or your own with start, schedule, "
                "cancel and shutdown), or None for APScheduler in a background thread"
            )
        if env is not None and not isinstance(env, Mapping):
            raise InvalidSettingsError(
                f"Runner(env={type(env).__name__}): pass a mapping of names to values "
                "(or None); templates read it as $env"
            )
        checked_observers = _check_observers(observers)
        if not isinstance(recover, bool):
            raise InvalidSettingsError(
                f"Runner(recover={recover!r}): use True (a worker: re-arm what the store holds "
                "on open) or False (a one-off command: only this runner's own work)"
            )
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
        check_max_interruptions(max_interruptions, "Runner")
        scheduler_clock = scheduler.clock if isinstance(scheduler, ClockedScheduler) else None
        if clock is None:
            clock = scheduler_clock if callable(scheduler_clock) else default_clock
        elif callable(scheduler_clock) and scheduler_clock is not clock:
            raise InvalidSettingsError(
                f"Runner(clock={clock!r}): the scheduler has its own clock {scheduler_clock!r}; "
                "pass the same clock to both (one clock is shared by runner, core and scheduler)"
            )
        if not callable(clock):
            raise InvalidSettingsError(
                f"Runner(clock={clock!r}): pass a callable returning an aware datetime"
            )
        if scheduler is None:
            from scheduling.adapters.apscheduler import APSchedulerAdapter

            scheduler = cast("SchedulerT", APSchedulerAdapter())
        now = clock()
        if not is_aware(now):
            raise InvalidSettingsError(
                f"Runner(clock=...) returned {now!r}; a clock must return an aware datetime, "
                "e.g. datetime.now(timezone.utc) (prana.testing.ManualClock is one)"
            )
        super().__init__(
            registry,
            store,
            scheduler,
            clock,
            env,
            checked_observers,
            float(lease_seconds),
            max_interruptions,
        )
        self.recover = recover
        self._open = False
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
                self._reconcile_parents()
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
        cancel, an expiry or another delivery saved first. Nothing changes on any of them.
        """
        parsed = parse_token(token)
        if parsed is None:
            raise HookNotFound("no webhook wait answers to this token")
        execution_id, secret = parsed

        def check(execution: WorkflowExecution) -> None:
            # The secret is verified before anything else is said: a caller without it
            # learns nothing about the execution its token names, not even that it exists.
            suspension = execution.suspension
            data = suspension.data if suspension is not None else None
            if (
                suspension is None
                or suspension.kind != "webhook"
                or not isinstance(data, WebhookData)
                or not verify_token(
                    data.token_digest, execution_id, execution.suspended_node or "", secret
                )
            ):
                raise HookNotFound("no webhook wait answers to this token")
            if execution.status is not ExecutionStatus.SUSPENDED:
                raise HookGone(
                    f"this wait is over: the execution is {execution.status.value} and waits "
                    "for no webhook delivery"
                )

        try:
            return self._deliver(execution_id, resume_data, check)
        except ExecutionNotFound:
            raise HookNotFound("no webhook wait answers to this token") from None
        except StaleVersionError:
            raise HookConflict(
                "a cancel, an expiry or another delivery changed this execution first; "
                "nothing was delivered"
            ) from None

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
        due = self.store.find_due(self.clock(), limit=limit)
        self._arm_all(due)
        return len(due)

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
        # A sub-workflow deadline is not a stored due time (the runner arms it with the child),
        # so parents past theirs are found among the suspended executions without one.
        now = self.clock()
        for execution_id in suspended_without_due_time(self.store):
            if len(handled) >= limit:
                break
            try:
                execution, _ = self.store.load(execution_id)
            except ExecutionNotFound:
                continue
            except RecordError as error:  # edited by hand: said once, the rest go on
                self._cannot_resume(execution_id, error)
                continue
            data = execution.suspension.data if execution.suspension is not None else None
            expires = data.expires_at if isinstance(data, SubWorkflowData) else None
            if (
                execution.status is ExecutionStatus.SUSPENDED
                and expires is not None
                and expires <= now
            ):
                self._sub_workflow_alarm(execution)
                handled.append(execution_id)
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
