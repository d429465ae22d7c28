"""The runner: executor + store + scheduler, so suspended executions resume on their own.

Theory of operation. Every transition of an execution is one step: load it (with its
version) from the store, compute the next state with the pure core, save it with a
compare-and-set on that version, and only then arm the alarm for its next due time
(persist, then arm). With a store that runs a hook inside its save transaction
(``PostgresStore.on_save``) and a scheduler that arms inside a caller's transaction
(``ProcrastinateScheduler.schedule_in``/``cancel_in``) on the same database, the runner
arms in the save itself: the state and its alarm commit together or not at all.

The scheduler is only an alarm clock that carries an execution id; everything else is
read back from the store when it fires, so any runner over the same store can finish any
execution, and a runner that restarts re-arms every alarm from the store. Alarms fire at
least once: a fire that finds the execution no longer suspended, or loses the
compare-and-set, does nothing, so each transition happens exactly once.

Follow-ups of a step (running a sub-workflow, resuming a parent when its child ends) run
after the step's save, outside its lock, from a per-thread queue: no lock is ever held
while another execution's lock is taken, and deep chains of sub-workflows do not recurse.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from prana import (
    ExecutionStatus,
    InvalidSettingsError,
    InvalidWorkflowError,
    Outcome,
    ParentRef,
    Registry,
    ResumeError,
    SubWorkflowData,
    Suspend,
    WebhookData,
    Workflow,
    WorkflowExecution,
    cancel_execution,
    execute_workflow,
    expire_webhook,
    resume_workflow,
    validate,
)
from prana._hooks import parse_token
from prana._hooks import verify as verify_token
from scheduling._errors import (
    ExecutionNotFound,
    HookConflict,
    HookGone,
    HookNotFound,
    StaleVersionError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling._eventlog import log_event, wanted
from scheduling.abc import ExecutionStore, Scheduler

if TYPE_CHECKING:
    from types import TracebackType

    from prana import Event

__all__ = ["Runner", "child_execution_id", "is_settled"]

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]

FINAL_STATUSES = frozenset(
    {ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED}
)
SELF_RESUMING_KINDS = frozenset({"retry", "timer", "sub_workflow"})
"""Suspension kinds the runner resumes by itself; any other kind waits for ``deliver``."""

_STRIPES = 64
_MAX_HOOK_PATHS = 10_000
"""How many plaintext resume paths of waits begun here ``hook_path`` remembers."""
_WAIT_RECHECK_SECONDS = 0.25
"""How often ``wait`` re-reads the store for progress made by other processes."""


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def is_settled(execution: WorkflowExecution) -> bool:
    """Whether only the outside can move ``execution`` on: it ended, or waits for a delivery."""
    if execution.status in FINAL_STATUSES:
        return True
    if execution.status is ExecutionStatus.SUSPENDED and execution.suspension is not None:
        return execution.suspension.kind not in SELF_RESUMING_KINDS
    return False


def child_execution_id(parent: WorkflowExecution) -> str | None:
    """The id of the child a parent suspended on a sub-workflow runs, or ``None``.

    It is derived from the parent's id, node key, run index and attempt, so starting the
    child twice (a fire delivered twice, a restart) collides in the store instead of
    running a second child, and a retried sub-workflow node gets a fresh child.
    """
    suspension = parent.suspension
    key = parent.suspended_node
    if suspension is None or suspension.kind != "sub_workflow" or key is None:
        return None
    run = parent.node(key)
    if run is None:
        return None
    attempt = run.attempts[-1].number if run.attempts else 1
    return f"{parent.id}:{key}:{run.run_index}:{attempt}"


def _execution_of(outcome: Outcome) -> WorkflowExecution:
    """The execution an executor outcome carries (always set on what the executor returns)."""
    execution = outcome.execution
    assert execution is not None, "the executor returns outcomes with the execution filled in"
    return execution


def _error_dict(execution: WorkflowExecution) -> dict[str, Any]:
    """A child's failure as the JSON-native ``error`` of a sub-workflow resume."""
    error = execution.error
    if error is None:
        return {"code": execution.status.value, "message": f"child {execution.status.value}"}
    return {
        "code": error.code,
        "type": error.type,
        "module": error.module,
        "message": error.message,
        "details": error.details,
        "node_key": error.node_key,
        "execution_id": execution.id,
    }


def _exception_dict(exc: BaseException, code: str) -> dict[str, Any]:
    return {
        "code": code,
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": str(exc),
    }


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


class Runner:
    """Runs workflows to the end: persists every outcome, arms alarms, resumes when due.

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

    Transactional alarms: when the store has an ``on_save`` hook slot (``PostgresStore``)
    that is free, and the scheduler has ``schedule_in``/``cancel_in`` and says
    ``same_database(store.dsn)`` (``ProcrastinateScheduler``), ``open`` installs a hook
    that arms each saved execution's ``due_at`` (or cancels its alarm when it has none)
    inside the save's transaction, and ``close`` removes it. Every save and its alarm
    change then commit together; the runner arms after the save only alarms no save
    implies (an async child's start, a sub-workflow's deadline, an early fire re-armed).
    Async actions run on a private event loop per step (as ``execute_workflow`` does);
    with an asyncio scheduler a fired resume runs in a worker thread, never blocking the
    loop, and ``astart``/``adeliver``/``acancel``/``await_execution`` are the async facade.
    """

    def __init__(
        self,
        registry: Registry | None = None,
        store: ExecutionStore | None = None,
        scheduler: Scheduler | None = None,
        clock: Clock | None = None,
        *,
        env: Mapping[str, Any] | None = None,
        observers: Iterable[Callable[[Event], object]] = (),
        workflows: Iterable[Workflow] = (),
        recover: bool = True,
    ) -> None:
        if registry is not None and not isinstance(registry, Registry):
            raise InvalidSettingsError(
                f"Runner(registry={registry!r}): pass a prana.Registry (or None for the built-ins)"
            )
        self.registry = registry if registry is not None else Registry()
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
        self.store: ExecutionStore = store
        scheduler_clock = getattr(scheduler, "clock", None)
        if clock is None:
            clock = scheduler_clock if callable(scheduler_clock) else _utcnow
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

            scheduler = APSchedulerAdapter()
        now = clock()
        if not isinstance(now, datetime) or now.utcoffset() is None:
            raise InvalidSettingsError(
                f"Runner(clock=...) returned {now!r}; a clock must return an aware datetime, "
                "e.g. datetime.now(timezone.utc) (prana.testing.ManualClock is one)"
            )
        self.scheduler: Scheduler = scheduler
        self.clock: Clock = clock
        self.env: Mapping[str, Any] | None = env
        self.observers: tuple[Callable[[Event], object], ...] = checked_observers
        self._emit: tuple[Callable[[Event], object], ...] = (*checked_observers, log_event)
        """What every run reports to: the observers given, then the log (``scheduling.events``)."""
        self.recover = recover
        self._definitions: dict[tuple[str, int], Workflow] = {}
        self._latest: dict[str, int] = {}
        self._meta_lock = threading.Lock()
        self._stripes = tuple(threading.RLock() for _ in range(_STRIPES))
        self._changed = threading.Condition()
        self._saves = 0
        self._waiters = 0
        self._local = threading.local()
        self._hook_paths: dict[str, str] = {}
        self._open = False
        self._arms_on_save = False
        for workflow in workflows:
            self.register_workflow(workflow)

    def _observers(self) -> tuple[Callable[[Event], object], ...]:
        """The observers of the next step: the log's too when logging is configured."""
        return self._emit if wanted() else self.observers

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<Runner {state} store={self.store!r} scheduler={type(self.scheduler).__name__}>"

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Runner:
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
            self.scheduler.start(self._fire)
            self._open = True
            if self.recover:
                for execution_id, due_at in self.store.alarms():
                    self.scheduler.schedule(execution_id, due_at)
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
        if self._arms_on_save:
            self._arms_on_save = False
            self.store.on_save = None  # type: ignore[attr-defined]

    def _install_alarm_hook(self) -> None:
        """Arm alarms inside the store's save transactions, if store and scheduler can."""
        store, scheduler = self.store, self.scheduler
        schedule_in = getattr(scheduler, "schedule_in", None)
        cancel_in = getattr(scheduler, "cancel_in", None)
        same_database = getattr(scheduler, "same_database", None)
        dsn = getattr(store, "dsn", None)
        if (
            not callable(schedule_in)
            or not callable(cancel_in)
            or not callable(same_database)
            or not isinstance(dsn, str)
            or not hasattr(store, "on_save")
            or getattr(store, "on_save", None) is not None
            or not same_database(dsn)
        ):
            return

        setup = getattr(scheduler, "setup", None)
        if callable(setup):
            setup()  # the job tables must exist before the first save arms in them

        def arm_in(conn: Any, execution: WorkflowExecution) -> None:
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
        if not isinstance(workflow, Workflow):
            raise InvalidSettingsError(f"register_workflow({workflow!r}): pass a prana.Workflow")
        key = (workflow.id, workflow.version)
        cached = self._definitions.get(key)
        if cached is not None:
            if cached is workflow or cached == workflow:
                return
            raise WorkflowConflictError(
                f"workflow {workflow.id!r} version {workflow.version} is already stored with a "
                "different definition; a definition never changes for a given id and version: "
                "bump Workflow.version"
            )
        self.store.save_workflow(workflow)
        with self._meta_lock:
            self._definitions[key] = workflow
            if workflow.version > self._latest.get(workflow.id, 0):
                self._latest[workflow.id] = workflow.version

    def _definition(self, workflow_id: str, version: int) -> Workflow:
        key = (workflow_id, version)
        cached = self._definitions.get(key)
        if cached is not None:
            return cached
        workflow = self.store.load_workflow(workflow_id, version)
        with self._meta_lock:
            self._definitions[key] = workflow
            if version > self._latest.get(workflow_id, 0):
                self._latest[workflow_id] = version
        return workflow

    def _latest_definition(self, workflow_id: str) -> Workflow:
        """The highest version of ``workflow_id`` known here or stored (probed upwards)."""
        known = self._latest.get(workflow_id, 0)
        stored = self.store.latest_workflow_version(workflow_id) or 0
        version = max(known, stored)
        found: Workflow | None = self._definition(workflow_id, version) if version else None
        if found is None:
            raise WorkflowNotFound(
                f"no definition of workflow {workflow_id!r} is stored; register it with "
                "runner.register_workflow(workflow) (or Runner(workflows=[...])) first"
            )
        return found

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
        refused before anything runs), the outcome is saved, then its alarm is armed.
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
        execution = self._start(workflow, input, execution_id=execution_id, parent=None)
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
            suspension = execution.suspension
            data = suspension.data if suspension is not None else None
            if (
                execution.status is not ExecutionStatus.SUSPENDED
                or suspension is None
                or suspension.kind != "webhook"
                or not isinstance(data, WebhookData)
            ):
                raise HookGone(
                    f"this wait is over: the execution is {execution.status.value} and waits "
                    "for no webhook delivery"
                )
            if not verify_token(
                data.token_digest, execution_id, execution.suspended_node or "", secret
            ):
                raise HookNotFound("no webhook wait answers to this token")

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

    def _note_hook(self, outcome: Outcome) -> None:
        """Keep the plaintext resume path of a webhook wait begun here (memory only, bounded)."""
        data = outcome.data if type(outcome) is Suspend else None
        if type(data) is WebhookData and data.path is not None and outcome.execution is not None:
            paths = self._hook_paths
            with self._meta_lock:
                paths.pop(outcome.execution.id, None)
                paths[outcome.execution.id] = data.path
                while len(paths) > _MAX_HOOK_PATHS:
                    del paths[next(iter(paths))]

    def _deliver(
        self,
        execution_id: str,
        resume_data: Any,
        check: Callable[[WorkflowExecution], None] | None,
    ) -> Outcome:
        with self._lock_for(execution_id):
            execution, version = self.store.load(execution_id)
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
            workflow = self._definition(execution.workflow_id, execution.workflow_version)
            expires_at = execution.due_at if suspension.kind == "webhook" else None
            # Past its deadline a webhook wait has expired, whether or not its alarm fired.
            expired = expires_at is not None and expires_at <= self.clock()
            if expired:
                outcome = self._expire_webhook(execution, workflow)
            else:
                outcome = self._resume(execution, resume_data, workflow)
            new = _execution_of(outcome)
            new_version = self.store.save(new, version)
        self._hook_paths.pop(execution_id, None)
        self._note_hook(outcome)
        if new.due_at is None and not self._arms_on_save:
            self.scheduler.cancel(execution_id)
        self._settle(new, new_version)
        if expired:
            assert expires_at is not None
            if check is not None:
                raise HookGone(f"this wait expired at {expires_at.isoformat()}")
            raise ResumeError(
                f"execution {execution_id!r}: the webhook wait expired at "
                f"{expires_at.isoformat()}; its node failed with WebhookTimeout"
            )
        return outcome

    def cancel(self, execution_id: str, reason: str | None = None) -> WorkflowExecution:
        """Cancel a pending or suspended execution, disarm its alarm; return it cancelled.

        Cancelling a cancelled execution returns it as is; a completed or failed one
        raises ``ResumeError``. A resume racing the cancel finds it cancelled and does
        nothing. A child sub-workflow the execution waits on is cancelled too.
        """
        while True:
            with self._lock_for(execution_id):
                execution, version = self.store.load(execution_id)
                if execution.status is ExecutionStatus.CANCELLED:
                    return execution
                cancelled = cancel_execution(
                    execution, reason, clock=self.clock, observers=self._observers()
                )
                try:
                    new_version = self.store.save(cancelled, version)
                except StaleVersionError:
                    continue  # another process moved it on: cancel the newer record
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
                self.cancel(child_id, reason or f"parent {execution_id!r} cancelled")
        self._settle(cancelled, new_version)
        return cancelled

    def rearm_due(self, limit: int = 1000) -> int:
        """Arm every execution the store says is due now; return how many.

        A worker calls this now and then to pick up work another process left due (a
        ``deliver`` from the command line that ended in a retry, a runner that crashed).
        Arming one already armed only replaces its alarm.
        """
        due = self.store.find_due(self.clock(), limit=limit)
        for execution_id, due_at in due:
            self.scheduler.schedule(execution_id, due_at)
        return len(due)

    def run_due(self, limit: int = 1000) -> list[str]:
        """Resume, in the caller, every execution the store says is due now; return their ids.

        For a cron-style worker, or a script with no scheduler running: each is handled
        as if its alarm fired (a resume that loses the compare-and-set is dropped).
        """
        handled: list[str] = []
        for execution_id, _ in self.store.find_due(self.clock(), limit=limit):
            self._on_alarm(execution_id)
            handled.append(execution_id)
        # A sub-workflow deadline is not a stored due time (the runner arms it with the child),
        # so parents past theirs are found among the suspended executions without one.
        now = self.clock()
        for execution_id in self._suspended_without_alarm():
            if len(handled) >= limit:
                break
            try:
                execution, _ = self.store.load(execution_id)
            except ExecutionNotFound:
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

    # -- the steps ---------------------------------------------------------------------

    def _lock_for(self, execution_id: str) -> threading.RLock:
        return self._stripes[hash(execution_id) % _STRIPES]

    def _resume(self, execution: WorkflowExecution, data: Any, workflow: Workflow) -> Outcome:
        return resume_workflow(
            execution,
            data,
            workflow=workflow,
            registry=self.registry,
            clock=self.clock,
            env=self.env,
            observers=self._observers(),
        )

    def _start(
        self,
        workflow: Workflow,
        input_data: Any,
        *,
        execution_id: str | None,
        parent: ParentRef | None,
    ) -> WorkflowExecution:
        if isinstance(workflow, Workflow):
            # Refuse an invalid definition before storing it: a stored one could never be
            # replaced by its fix under the same id and version.
            validate(workflow, self.registry)
        self.register_workflow(workflow)
        outcome = execute_workflow(
            workflow,
            input_data,
            registry=self.registry,
            clock=self.clock,
            env=self.env,
            observers=self._observers(),
            execution_id=execution_id,
            parent=parent,
        )
        new = _execution_of(outcome)
        version = self.store.save(new, None)
        self._note_hook(outcome)
        self._settle(new, version)
        return new

    def _fire(self, execution_id: str) -> Any:
        """The scheduler's callback; inside an event loop it hands the step to a thread."""
        if asyncio._get_running_loop() is None:  # the no-raise form: this is the hot path
            self._on_alarm(execution_id)
            return None
        return asyncio.to_thread(self._on_alarm, execution_id)

    def _on_alarm(self, execution_id: str) -> None:
        """An alarm went off: resume the execution if it is still suspended and due.

        The hot path of a busy runner (one call per retry or timer that falls due), so the
        helpers it would call (``_lock_for``, ``_definition``, ``_resume``) are inlined.
        """
        with self._stripes[hash(execution_id) % _STRIPES]:
            try:
                execution, version = self.store.load(execution_id)
            except ExecutionNotFound:
                logger.warning("alarm of unknown execution %r dropped", execution_id)
                return
            suspension = execution.suspension
            if execution.status is not ExecutionStatus.SUSPENDED or suspension is None:
                return  # resumed, cancelled or finished since the alarm was armed
            kind = suspension.kind
            if kind == "sub_workflow":
                new = None  # an async child to start (or a parent to reconcile): outside the lock
            else:
                due_at = execution.due_at
                if due_at is None:
                    return  # waits for a delivery; nothing is due
                if due_at > self.clock():
                    self.scheduler.schedule(execution_id, due_at)  # early: wait again
                    return
                workflow = self._definitions.get(
                    (execution.workflow_id, execution.workflow_version)
                ) or self._definition(execution.workflow_id, execution.workflow_version)
                if kind == "webhook":
                    outcome = self._expire_webhook(execution, workflow)
                else:
                    outcome = resume_workflow(
                        execution,
                        None,
                        workflow=workflow,
                        registry=self.registry,
                        clock=self.clock,
                        env=self.env,
                        observers=self._observers(),
                    )
                new = outcome.execution
                assert new is not None, "the executor returns outcomes with the execution set"
                try:
                    version = self.store.save(new, version)
                except StaleVersionError:
                    logger.debug("resume of %r lost the compare-and-set; dropped", execution_id)
                    return
                if type(outcome) is Suspend:
                    self._note_hook(outcome)
        if new is None:
            self._sub_workflow_alarm(execution)
        else:
            self._settle(new, version)

    def _sub_workflow_alarm(self, parent: WorkflowExecution) -> None:
        """A parent's alarm: start its async child, or time the child out at its deadline."""
        assert parent.suspension is not None
        data = parent.suspension.data
        expires = data.expires_at if isinstance(data, SubWorkflowData) else None
        if expires is None or expires > self.clock():
            self._run_child(parent)
            return
        key = parent.suspended_node
        child_id = child_execution_id(parent)
        if key is None or child_id is None:
            return
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
                self.cancel(child_id, reason=f"the parent's timeout: {error['message']}")
        except (ExecutionNotFound, ResumeError, StaleVersionError):
            pass  # never started, ended meanwhile, or cancelled by someone else

    def _expire_webhook(self, execution: WorkflowExecution, workflow: Workflow) -> Outcome:
        """Fail the webhook wait with a non-retryable ``WebhookTimeout``; ``on_error`` applies."""
        return expire_webhook(
            execution,
            workflow=workflow,
            registry=self.registry,
            clock=self.clock,
            env=self.env,
            observers=self._observers(),
        )

    # -- follow-ups --------------------------------------------------------------------

    def _settle(self, execution: WorkflowExecution, version: int) -> None:
        """After a save: wake waiters, then arm the alarm or run what the new state asks for.

        The common cases (a retry or timer to arm, an execution that ended with no parent)
        are handled at once; sub-workflow steps go through the per-thread queue.
        """
        del version
        if self._waiters:
            with self._changed:
                self._saves += 1
                self._changed.notify_all()
        status = execution.status
        suspension = execution.suspension
        if status is ExecutionStatus.SUSPENDED:
            if suspension is not None and suspension.kind != "sub_workflow":
                due_at = execution.due_at
                if due_at is not None and not self._arms_on_save:
                    self.scheduler.schedule(execution.id, due_at)
                return
        elif execution.parent is None or status not in FINAL_STATUSES:
            return
        queue: collections.deque[WorkflowExecution] | None = getattr(self._local, "queue", None)
        if queue is not None:
            queue.append(execution)
            return
        queue = self._local.queue = collections.deque([execution])
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

    def _run_child(self, parent: WorkflowExecution) -> None:
        """Start the child a parent waits on (once), or report a child that already ended."""
        suspension = parent.suspension
        key = parent.suspended_node
        child_id = child_execution_id(parent)
        if suspension is None or key is None or child_id is None:
            return
        data = suspension.data
        if not isinstance(data, SubWorkflowData):
            return
        try:
            child, _ = self.store.load(child_id)
        except ExecutionNotFound:
            child = None
        started = child is None
        if child is None:
            ref = ParentRef(execution_id=parent.id, node_key=key, mode=data.mode)
            try:
                if data.version is None:
                    workflow = self._latest_definition(data.workflow_id)
                else:
                    workflow = self._definition(data.workflow_id, data.version)
                child = self._start(workflow, data.input, execution_id=child_id, parent=ref)
            except StaleVersionError:
                return  # started by someone else meanwhile; it reports when it ends
            except (WorkflowNotFound, InvalidWorkflowError) as exc:
                code = "workflow_not_found" if isinstance(exc, LookupError) else "invalid_workflow"
                self._resume_parent(
                    parent.id,
                    key,
                    child_id,
                    {"status": "failed", "error": _exception_dict(exc, code)},
                )
                return
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
                self.cancel(child_id, f"parent {parent.id!r} no longer waits on it")
            return
        if data.mode == "fire_and_forget":
            self._resume_parent(
                parent.id,
                key,
                child_id,
                {"status": "completed", "output": {"execution_id": child_id}},
            )
        elif child.status in FINAL_STATUSES and child.id == child_id:
            self._report_to_parent(child)
        elif data.expires_at is not None:
            self.scheduler.schedule(parent.id, data.expires_at)  # the parent's deadline

    def _report_to_parent(self, child: WorkflowExecution) -> None:
        """Resume the parent of an ended child with its output or its error."""
        ref = child.parent
        if ref is None:
            return
        if child.status is ExecutionStatus.COMPLETED:
            data: dict[str, Any] = {"status": "completed", "output": child.output}
        else:
            data = {"status": "failed", "error": _error_dict(child)}
        self._resume_parent(ref.execution_id, ref.node_key, child.id, data)

    def _resume_parent(
        self, parent_id: str, node_key: str, child_id: str, resume_data: Any
    ) -> None:
        with self._lock_for(parent_id):
            try:
                parent, version = self.store.load(parent_id)
            except ExecutionNotFound:
                logger.warning("child %r reports to unknown parent %r", child_id, parent_id)
                return
            if (
                parent.status is not ExecutionStatus.SUSPENDED
                or parent.suspended_node != node_key
                or child_execution_id(parent) != child_id
            ):
                return  # resumed already, cancelled, or waiting on another child now
            workflow = self._definition(parent.workflow_id, parent.workflow_version)
            outcome = self._resume(parent, resume_data, workflow)
            try:
                new = _execution_of(outcome)
                new_version = self.store.save(new, version)
            except StaleVersionError:
                return
        self._note_hook(outcome)
        self._settle(new, new_version)

    def _reconcile_parents(self) -> None:
        """Finish what a crash may have cut short between a child's save and its parent's."""
        for summary in self._suspended_without_alarm():
            try:
                execution, _ = self.store.load(summary)
            except ExecutionNotFound:
                continue
            if (
                execution.status is ExecutionStatus.SUSPENDED
                and execution.suspension is not None
                and execution.suspension.kind == "sub_workflow"
            ):
                self._run_child(execution)

    def _suspended_without_alarm(self) -> Sequence[str]:
        rows = self.store.list(ExecutionStatus.SUSPENDED, limit=1_000_000)
        return [row.id for row in rows if row.due_at is None]
