"""The machinery under ``Runner``: one transition of an execution, and what follows it.

Theory of operation. Every resume of an execution is one step, written once in
``Steps._step``: load it (with its version) from the store, check under its lock that the
step still applies, compute the next state with the pure core, save it with a
compare-and-set on that version, then settle: arm the alarm for its next due time
(persist, then arm) or queue what the new state asks for. Before each action call the
core hands the step a ``running`` checkpoint, saved as a leased claim
(``scheduling._leases``): a start is stored before its first action runs, a step that
loses its claim stops before running the action, and a ``running`` record whose lease
ended (its process died) is taken up by the next alarm of it (``Move.RECOVER``). An
alarm (``_on_alarm``), a delivery (``Runner.deliver``) and a child reporting to its parent
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
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prana import (
    ErrorCode,
    ExecutionStatus,
    InvalidWorkflowError,
    Outcome,
    ParentRef,
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
    expire_webhook,
    recover_execution,
    redrive_execution,
    resume_workflow,
    validate,
)
from prana._limits import sub_workflow_too_deep, sub_workflow_tree_too_big
from prana._state import EXEC_RUNNING, EXEC_SUSPENDED  # hot path: see prana._state
from scheduling._batch import StepLocal, give_back, on_alarms, stop_ahead
from scheduling._claims import (
    claimable,
    claimed_snapshot,
    is_claimed,
    recover_claimed,
    unclaimed,
)
from scheduling._definitions import Definitions
from scheduling._errors import ExecutionNotFound, StaleVersionError, WorkflowNotFound
from scheduling._eventlog import HeldEvents, log_event, wanted
from scheduling._leases import Claim, Leases
from scheduling._records import (
    child_execution_id,
    error_dict,
    exception_dict,
    execution_of,
    first_tracer,
    suspended_without_due_time,
)
from scheduling.abc import TreeCountingStore
from scheduling.stores._sql import MAX_LIMIT

if TYPE_CHECKING:
    from prana import Event
    from scheduling.abc import ExecutionStore, Scheduler

__all__ = ["FINAL_STATUSES", "SELF_RESUMING_KINDS", "Clock", "Move", "Steps"]

logger = logging.getLogger("scheduling._runner")  # the Runner's logger, as before the split


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

FINAL_STATUSES = frozenset(
    {ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED}
)
SELF_RESUMING_KINDS = frozenset({"retry", "timer", "sub_workflow"})
"""Suspension kinds the runner resumes by itself; any other kind waits for ``deliver``."""

_STRIPES = 64
_UNRESUMABLE_KEPT = 10_000
"""How many unresumable executions a runner remembers having reported."""
_MAX_HOOK_PATHS = 10_000
"""How many plaintext resume paths of waits begun here ``hook_path`` remembers."""


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


class Steps:
    """What moves executions between the runner's public calls: steps, alarms, follow-ups.

    The base of ``Runner``, which adds the checked construction, the lifecycle and the
    public operations. ``_arms_on_save`` is true while the store arms each saved
    execution's alarm inside its save (the transactional seam, installed by the runner);
    ``_hook_paths`` keeps the plaintext resume paths of webhook waits begun here.
    """

    def __init__(
        self,
        registry: Registry,
        store: ExecutionStore,
        scheduler: Scheduler,
        clock: Clock,
        env: Mapping[str, Any] | None,
        observers: tuple[Callable[[Event], object], ...],
        lease_seconds: float = 30.0,
        max_interruptions: int = 3,
    ) -> None:
        self.registry = registry
        self.store: ExecutionStore = store
        self.scheduler: Scheduler = scheduler
        self.clock: Clock = clock
        self.env: Mapping[str, Any] | None = env
        self.observers: tuple[Callable[[Event], object], ...] = observers
        self._emit: tuple[Callable[[Event], object], ...] = (*observers, log_event)
        """What every run reports to: the observers given, then the log (``scheduling.events``)."""
        self._definitions = Definitions(store)
        self._leases = Leases(store, clock, lease_seconds)
        self.lease_seconds = lease_seconds
        self.max_interruptions = max_interruptions
        self._stripes = tuple(threading.RLock() for _ in range(_STRIPES))
        self._changed = threading.Condition()
        self._saves = 0
        self._waiters = 0
        self._local = StepLocal()
        self._arms_on_save = False
        self._hook_paths: dict[str, str] = {}
        self._hook_lock = threading.Lock()
        self._unrunnable: set[tuple[str, int]] = set()
        """Workflow versions whose alarms this runner could not run (said once each)."""
        self._unresumable: set[str] = set()
        """Executions whose records this runner could not resume (said once each)."""
        self._ahead: dict[str, Claim] = {}
        """Claims made ahead by this runner's batches whose steps have not run yet."""
        self._listeners: tuple[Callable[[str], object], ...] = ()
        """Called with the execution id after each save (``Runner.subscribe``); copy on write."""
        self._tracer = first_tracer(observers)
        """The observer that keeps each execution in one trace (``scheduling.otel``), if any."""

    def _observers(self) -> tuple[Callable[[Event], object], ...]:
        """The observers of the next step: the log's too when logging is configured."""
        return self._emit if wanted() else self.observers

    # -- one step ----------------------------------------------------------------------

    def _lock_for(self, execution_id: str) -> threading.RLock:
        return self._stripes[hash(execution_id) % _STRIPES]

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
        lock = self._stripes[hash(execution_id) % _STRIPES]
        if batch is None:
            lock.acquire()
        elif not lock.acquire(blocking=False):
            batch.commit()  # never wait for a lock while the group holds the store's
            lock.acquire()
        ahead = None if batch is None or not batch.claims else batch.take(execution_id, self._ahead)
        try:
            if ahead is None:
                execution, version = self.store.load(execution_id)
                move = check(execution)
                if move is None:
                    return None
            else:  # claimed ahead by its batch, as its check would resume it (scheduling._batch)
                execution, move = ahead[0], _RESUME
            if move is _CHILDREN:
                new = None  # the sub-workflow alarm takes other locks: it runs after this one
            else:
                definitions = self._definitions
                workflow = definitions.cached.get(
                    (execution.workflow_id, execution.workflow_version)
                ) or definitions.get(execution.workflow_id, execution.workflow_version)
                leases = self._leases
                # A light claim: see scheduling._claims for the rule and the reading back.
                claim = (
                    Claim(
                        version,
                        light=move is _RESUME and claimable(execution, workflow, self.registry),
                    )
                    if ahead is None
                    else ahead[1]
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
                    if ahead is not None and claim.light:  # no checkpoint: nothing ran
                        give_back(self.store, execution, claim)
                    raise
                new = outcome.execution
                assert new is not None, "the executor returns outcomes with the execution set"
                version = leases.save(claim, new)
        finally:
            lock.release()
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
            with self._lock_for(execution_id):
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
        stop_ahead(self._ahead, execution_id)  # claimed ahead, not run yet: stops at its claim
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
            self._on_alarm(execution_id)
            return None
        return asyncio.to_thread(self._on_alarm, execution_id)

    def _fire_many(self, execution_ids: Sequence[str]) -> Any:
        """A ``BatchingScheduler``'s callback: alarms due at one instant, as one batch."""
        if asyncio._get_running_loop() is None:
            self._on_alarms(execution_ids)
            return None
        return asyncio.to_thread(self._on_alarms, execution_ids)

    def _on_alarms(self, execution_ids: Sequence[str]) -> None:
        """Alarms due at one instant: each as ``_on_alarm``, their saves in one store group."""
        on_alarms(self, execution_ids)

    def _on_alarm_logged(self, execution_id: str) -> None:
        """``_on_alarm``, logging what it raises unexpectedly (one of a batch fails alone)."""
        try:
            self._on_alarm(execution_id)
        except Exception:
            logger.exception("the alarm of execution %r failed; it stays as stored", execution_id)

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
                self._cancel(child_id, reason=f"the parent's timeout: {error['message']}")
        except (ExecutionNotFound, ResumeError, StaleVersionError):
            pass  # never started, ended meanwhile, or cancelled by someone else

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
            too_much = self._over_limits(parent, data.workflow_id)
            if too_much is not None:
                error = {
                    "code": ErrorCode.LIMIT_EXCEEDED.value,
                    "type": "LimitExceeded",
                    "module": "prana",
                    "message": too_much,
                }
                self._resume_parent(parent.id, key, child_id, {"status": "failed", "error": error})
                return
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
                return  # started by someone else meanwhile; it reports when it ends
            except (WorkflowNotFound, InvalidWorkflowError) as exc:
                code = "workflow_not_found" if isinstance(exc, LookupError) else "invalid_workflow"
                self._resume_parent(
                    parent.id,
                    key,
                    child_id,
                    {"status": "failed", "error": exception_dict(exc, code)},
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
                self._cancel(child_id, f"parent {parent.id!r} no longer waits on it")
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

    def _reconcile_parents(self) -> None:
        """Finish what a crash may have cut short between a child's save and its parent's."""
        for summary in suspended_without_due_time(self.store):
            try:
                execution, _ = self.store.load(summary)
            except ExecutionNotFound:
                continue
            except RecordError as error:  # edited by hand: said once; the runner opens
                self._cannot_resume(summary, error)
                continue
            if (
                execution.status is ExecutionStatus.SUSPENDED
                and execution.suspension is not None
                and execution.suspension.kind == "sub_workflow"
            ):
                self._run_child(execution)
