"""A runner's schedules: kept in its store, ticked by its alarms, one execution per slot.

Exactly once per slot rests on the store, not on a lock or a queue: a slot's execution id is
``sched:<schedule id>:<slot, UTC ISO>`` and every store refuses a second execution under an
id it holds (its insert-if-absent, the compare-and-set every start goes through). So any
number of runners or procrastinate workers may tick a schedule at once, and a worker that
crashes mid-tick leaves nothing a retried tick would double: the slot started or it did not.
The schedule's state (the newest slot handled, a buffered slot, recent runs) is advanced by
compare-and-set on its version; a tick that loses the race changes nothing but its starts,
which dedupe. A schedule's next slot is an alarm like any other, armed under the id
``schedule:<schedule id>``.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import attrs

from prana import ExecutionStatus, PranaError, Workflow, WorkflowExecution
from scheduling._errors import (
    ExecutionNotFound,
    StaleVersionError,
    StoreError,
    WorkflowNotFound,
)
from scheduling._schedules import (
    RECENT,
    Schedule,
    ScheduleState,
    dump_schedule,
    dump_state,
    fire_time,
    load_schedule,
    load_state,
    next_slots,
    plan_slots,
    slot_execution_id,
)


class ScheduleHost(Protocol):
    """What schedules need of the runner that fires them (``scheduling.Runner`` is one)."""

    clock: Callable[[], datetime]

    @property
    def store(self) -> Any: ...
    @property
    def scheduler(self) -> Any: ...
    @property
    def is_open(self) -> bool: ...
    def start(
        self, workflow: Workflow, input: Any = None, *, execution_id: str | None = None
    ) -> str: ...
    def cancel(self, execution_id: str, reason: str | None = None) -> WorkflowExecution: ...
    def definition(self, workflow_id: str, version: int | None = None) -> Workflow: ...


logger = logging.getLogger("scheduling.schedules")
ALARM_PREFIX = "schedule:"
_DONE = frozenset({ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED})


@attrs.frozen
class SlotOutcome:
    """What a tick did with one slot: ``started``, ``duplicate`` (started elsewhere),
    ``skipped``, ``buffered`` or ``failed`` (its workflow could not start; logged)."""

    slot: datetime
    kind: str
    outcome: str
    execution_id: str | None = None


@attrs.frozen
class StoredSchedule:
    """A schedule as stored, with its state and next slots after ``now``."""

    schedule: Schedule
    state: ScheduleState
    next: tuple[datetime, ...]


class ScheduleNotFound(StoreError):  # noqa: N818 (as ExecutionNotFound)
    """No schedule has this id; ``prana schedule list`` shows the stored ones."""


def _rows(store: Any, what: str) -> Any:
    method = getattr(store, what, None)
    if method is None:
        raise StoreError(
            f"{type(store).__name__} keeps no schedules: use MemoryStore, SqliteStore or "
            "PostgresStore (a custom store adds the schedule_* methods)"
        )
    return method


class Schedules:
    """The schedules of one runner's store; every method is safe from several processes."""

    def __init__(self, runner: ScheduleHost) -> None:
        self._runner = runner

    @property
    def _store(self) -> Any:
        return self._runner.store

    def add(self, schedule: Schedule, *, replace: bool = False) -> None:
        """Store ``schedule``, its cursor at now (slots before now are not caught up)."""
        if not isinstance(schedule, Schedule):
            raise TypeError(f"add(schedule={schedule!r}): pass a scheduling.Schedule")
        state = ScheduleState(cursor=self._runner.clock())
        if not _rows(self._store, "schedule_insert")(
            schedule.id, dump_schedule(schedule), dump_state(state)
        ):
            if not replace:
                raise StaleVersionError(
                    f"schedule {schedule.id!r} exists; pass replace=True to change it"
                )
            _rows(self._store, "schedule_define")(schedule.id, dump_schedule(schedule))
        self.arm(schedule.id)

    def get(self, schedule_id: str, *, count: int = 5) -> StoredSchedule:
        """A stored schedule, its state and its next ``count`` slots."""
        row = _rows(self._store, "schedule_row")(schedule_id)
        if row is None:
            raise ScheduleNotFound(f"no schedule {schedule_id!r}; `prana schedule list` shows all")
        schedule, state = load_schedule(row[0]), load_state(row[1])
        return StoredSchedule(schedule, state, self._next(schedule, state, count))

    def list(self) -> list[StoredSchedule]:
        """Every stored schedule, by id, with its next slot."""
        found = []
        for _, definition, state_text, _ in _rows(self._store, "schedule_rows")():
            schedule, state = load_schedule(definition), load_state(state_text)
            found.append(StoredSchedule(schedule, state, self._next(schedule, state, 1)))
        return found

    def _next(
        self, schedule: Schedule, state: ScheduleState, count: int, *, overdue: bool = False
    ) -> tuple[datetime, ...]:
        """The next fire times; with ``overdue``, from the cursor (a missed slot comes first)."""
        if schedule.paused:
            return ()
        now = self._runner.clock()
        after = state.cursor or now if overdue else max(filter(None, (state.cursor, now)))
        return tuple(fire_time(schedule, s) for s in next_slots(schedule, after, count))

    def pause(self, schedule_id: str) -> None:
        """Stop starting slots; slots due while paused are skipped, never caught up."""
        self._set_paused(schedule_id, paused=True)
        self._disarm(schedule_id)

    def resume(self, schedule_id: str) -> None:
        """Start slots again from now on."""
        self._set_paused(schedule_id, paused=False)
        self._advance(schedule_id, lambda s: attrs.evolve(s, cursor=self._runner.clock()))
        self.arm(schedule_id)

    def _set_paused(self, schedule_id: str, *, paused: bool) -> None:
        schedule = self.get(schedule_id).schedule
        _rows(self._store, "schedule_define")(
            schedule_id, dump_schedule(attrs.evolve(schedule, paused=paused))
        )
        logger.info("schedule %r %s", schedule_id, "paused" if paused else "resumed")

    def _advance(self, schedule_id: str, change: Any) -> None:
        for _ in range(10):
            row = _rows(self._store, "schedule_row")(schedule_id)
            if row is None:
                return
            if _rows(self._store, "schedule_advance")(
                schedule_id, dump_state(change(load_state(row[1]))), row[2]
            ):
                return

    def delete(self, schedule_id: str) -> None:
        """Forget a schedule; the executions it started stay."""
        if not _rows(self._store, "schedule_delete")(schedule_id):
            raise ScheduleNotFound(f"no schedule {schedule_id!r}; `prana schedule list` shows all")
        self._disarm(schedule_id)

    def trigger(self, schedule_id: str) -> str:
        """Start the schedule's workflow now, outside its calendar (overlap is not checked)."""
        schedule = self.get(schedule_id).schedule
        slot = self._runner.clock()
        execution_id = slot_execution_id(schedule.id, slot)
        self._runner.start(self._workflow(schedule), schedule.input, execution_id=execution_id)
        self._advance(schedule_id, lambda s: _remember(s, execution_id))
        logger.info("schedule %r triggered by hand as %r", schedule_id, execution_id)
        return execution_id

    def arm(self, schedule_id: str) -> datetime | None:
        """Arm the schedule's next slot as an alarm (at once if one is overdue); its time.

        ``None`` when paused or ended. A runner not open arms nothing: a worker arms the
        stored schedules when it opens and at each re-arm round (``rearm_due``).
        """
        row = _rows(self._store, "schedule_row")(schedule_id)
        if row is None or not self._runner.is_open:
            return None
        fires = self._next(load_schedule(row[0]), load_state(row[1]), 1, overdue=True)
        if not fires:
            self._disarm(schedule_id)
            return None
        self._runner.scheduler.schedule(ALARM_PREFIX + schedule_id, fires[0])
        return fires[0]

    def _disarm(self, schedule_id: str) -> None:
        if self._runner.is_open:  # a stale alarm of a runner elsewhere finds it paused or gone
            self._runner.scheduler.cancel(ALARM_PREFIX + schedule_id)

    def rearm(self) -> None:
        """Arm every active schedule's next slot (picks up schedules added elsewhere)."""
        for schedule_id, _, _, _ in _rows(self._store, "schedule_rows")():
            try:
                self.arm(schedule_id)
            except PranaError as error:  # an unreadable stored schedule
                logger.error("schedule %r cannot be armed: %s", schedule_id, error)

    def arm_all(self) -> None:
        """Tick every schedule (a runner opening: slots missed are caught up), then arm it.

        One schedule that cannot be ticked (unreadable, its store failing) is logged and
        the others still are: a bad schedule never stops a runner from opening.
        """
        for schedule_id, _, _, _ in _rows(self._store, "schedule_rows")():
            self.tick_logged(schedule_id)

    def tick_logged(self, schedule_id: str) -> None:
        """``tick``, logging what it raises (an alarm's callback and ``arm_all`` use it)."""
        try:
            self.tick(schedule_id)
        except Exception:
            logger.exception("the tick of schedule %r failed; its next alarm retries", schedule_id)

    def _workflow(self, schedule: Schedule) -> Any:
        version = None if schedule.version == "latest" else schedule.version
        return self._runner.definition(schedule.workflow_id, version)

    def _running(self, execution_ids: Sequence[str]) -> builtins.list[str]:
        running = []
        for execution_id in execution_ids:
            try:
                execution, _ = self._store.load(execution_id)
            except ExecutionNotFound:
                continue
            if execution.status not in _DONE:
                running.append(execution_id)
        return running

    def tick(self, schedule_id: str) -> builtins.list[SlotOutcome]:
        """Start the slots due now per the catch-up and overlap policies, then re-arm."""
        row = _rows(self._store, "schedule_row")(schedule_id)
        if row is None:
            return []
        schedule, state, version = load_schedule(row[0]), load_state(row[1]), row[2]
        if schedule.paused:
            return []
        now = self._runner.clock()
        plan = plan_slots(schedule, state, now, first_seen=state.cursor or now)
        outcomes = [SlotOutcome(slot, "missed", "skipped") for slot in plan.skipped]
        running = self._running(state.recent)
        recent = list(state.recent)
        buffered = state.buffered
        todo = list(plan.start)
        if buffered is not None and not running:
            todo.insert(0, (buffered, "buffered"))
            buffered = None
        for slot, kind in todo:
            if running and schedule.overlap == "skip":
                outcomes.append(SlotOutcome(slot, kind, "skipped"))
                continue
            if running and schedule.overlap == "buffer_one":
                buffered = slot
                outcomes.append(SlotOutcome(slot, kind, "buffered"))
                continue
            if running and schedule.overlap == "cancel_older":
                for older in running:
                    with contextlib.suppress(ExecutionNotFound, StaleVersionError):
                        self._runner.cancel(older, reason=f"schedule {schedule.id!r}: newer slot")
                running = []
            execution_id = slot_execution_id(schedule.id, slot)
            try:
                self._runner.start(
                    self._workflow(schedule), schedule.input, execution_id=execution_id
                )
            except StaleVersionError:
                outcomes.append(SlotOutcome(slot, kind, "duplicate", execution_id))
                continue
            except StoreError as error:
                if not isinstance(error, WorkflowNotFound):
                    raise  # the store is down: the cursor stays, the next tick tries again
                failed: Exception | None = error
            except PranaError as error:
                failed = error
            else:
                failed = None
            if failed is not None:
                # A definition missing or invalid: the slot is lost (said), the schedule
                # goes on; retrying it at every tick would wedge the schedule.
                logger.error(
                    "schedule %r slot %s could not start: %s", schedule.id, slot.isoformat(), failed
                )
                outcomes.append(SlotOutcome(slot, kind, "failed", execution_id))
                continue
            recent.append(execution_id)
            running.extend(self._running([execution_id]))
            outcomes.append(SlotOutcome(slot, kind, "started", execution_id))
        new = ScheduleState(cursor=plan.cursor, buffered=buffered, recent=tuple(recent[-RECENT:]))
        if new != state:
            _rows(self._store, "schedule_advance")(schedule_id, dump_state(new), version)
        for outcome in outcomes:
            logger.info(
                "schedule %r slot %s (%s): %s%s",
                schedule.id,
                outcome.slot.isoformat(),
                outcome.kind,
                outcome.outcome,
                f" as {outcome.execution_id!r}" if outcome.execution_id else "",
                extra={
                    "prana_schedule": schedule.id,
                    "prana_slot": outcome.slot.isoformat(),
                    "prana_slot_kind": outcome.kind,
                    "prana_slot_outcome": outcome.outcome,
                    "prana_execution_id": outcome.execution_id,
                },
            )
        self.arm(schedule_id)
        return outcomes


def _remember(state: ScheduleState, execution_id: str) -> ScheduleState:
    return attrs.evolve(state, recent=(*state.recent, execution_id)[-RECENT:])
