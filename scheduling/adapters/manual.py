"""A scheduler moved by hand, for tests: ``advance(seconds)`` fires what falls due, no sleeping.

It shares a ``ManualClock`` with the runner and the core, and steps that clock to each
alarm's due time before firing it, so an action resumed by the alarm sees its due time as
now. It is the reference the other adapters are tested against.
"""

from __future__ import annotations

import heapq
import inspect
import itertools
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from prana import InvalidSettingsError
from prana.testing import ManualClock
from scheduling.adapters._common import SchedulerStateError, require_aware

if TYPE_CHECKING:
    from scheduling.abc import Fire

__all__ = ["ManualScheduler", "SchedulerStateError"]


class ManualScheduler:
    """The ``Scheduler`` test double: alarms fire only inside ``advance`` or ``run_due``.

    One alarm per execution id (``schedule`` replaces). Alarms fire in due order, ties in
    the order they were scheduled. An alarm whose callback raises is consumed and the
    exception propagates out of ``advance``, so a test sees it.
    """

    def __init__(self, clock: ManualClock) -> None:
        if not isinstance(clock, ManualClock):
            raise InvalidSettingsError(
                f"ManualScheduler(clock={clock!r}): pass a prana.testing.ManualClock, the same "
                "one given to the runner, so that advancing it moves both"
            )
        self.clock = clock
        self._fire: Fire | None = None
        # id -> (due_at, seq) of the live alarm; the heap may hold stale entries, skipped on pop.
        self._alarms: dict[str, tuple[datetime, int]] = {}
        self._heap: list[tuple[datetime, int, str]] = []
        self._seq = itertools.count()

    def start(self, fire: Fire) -> None:
        """Let ``advance`` and ``run_due`` fire alarms through ``fire``."""
        self._fire = fire

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        """Arm (or re-arm) the one alarm of ``execution_id`` for ``due_at``."""
        require_aware(due_at, f"ManualScheduler.schedule({execution_id!r})")
        seq = next(self._seq)
        self._alarms[execution_id] = (due_at, seq)
        heapq.heappush(self._heap, (due_at, seq, execution_id))
        if len(self._heap) > 2 * len(self._alarms) + 16:
            self._heap = [(due, s, eid) for eid, (due, s) in self._alarms.items()]
            heapq.heapify(self._heap)

    def cancel(self, execution_id: str) -> None:
        """Disarm the alarm of ``execution_id``; unknown ids are ignored."""
        self._alarms.pop(execution_id, None)

    def shutdown(self) -> None:
        """Stop firing and drop every pending alarm (``start`` again to reuse it)."""
        self._fire = None
        self._alarms.clear()
        self._heap.clear()

    def pending(self) -> list[tuple[str, datetime]]:
        """The armed alarms as ``(execution_id, due_at)``, in the order they would fire."""
        ordered = sorted(self._alarms.items(), key=lambda item: item[1])
        return [(eid, due) for eid, (due, _) in ordered]

    def next_due(self) -> datetime | None:
        """The earliest due time armed, or ``None`` when nothing is pending."""
        head = self._peek()
        return None if head is None else head[0]

    def advance(self, seconds: float | timedelta) -> list[str]:
        """Fire every alarm due within ``seconds`` from now, then move the clock by ``seconds``.

        The clock steps to each alarm's due time before that alarm fires (an overdue one
        fires at the current now: the clock never goes back). Alarms armed by a callback
        during this call fire too if they fall due inside the window. Returns the ids
        fired, in order.
        """
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise InvalidSettingsError(
                f"ManualScheduler.advance({seconds!r}): seconds must be >= 0; time never goes back"
            )
        end = self.clock() + delta
        fired = self._fire_due(end)
        if self.clock() < end:
            self.clock.set(end)
        return fired

    def run_due(self) -> list[str]:
        """Fire every alarm already due at the clock's now, without moving the clock."""
        return self._fire_due(self.clock())

    def _peek(self) -> tuple[datetime, int, str] | None:
        """The live alarm that fires next, dropping stale heap entries on the way."""
        while self._heap:
            due, seq, eid = self._heap[0]
            if self._alarms.get(eid) == (due, seq):
                return due, seq, eid
            heapq.heappop(self._heap)
        return None

    def _fire_due(self, until: datetime) -> list[str]:
        """Fire alarms due at or before ``until`` one by one, re-reading the heap after each."""
        fired: list[str] = []
        while (head := self._peek()) is not None and head[0] <= until:
            due, _, eid = head
            fire = self._fire
            if fire is None:
                raise SchedulerStateError(
                    f"ManualScheduler: the alarm of {eid!r} is due but the scheduler is not "
                    "started; call start(fire) first (entering `with runner:` does it)"
                )
            heapq.heappop(self._heap)
            del self._alarms[eid]
            if due > self.clock():
                self.clock.set(due)
            fired.append(eid)
            result = fire(eid)
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if callable(close):
                    close()  # no "never awaited" warning on top of the clear error
                raise TypeError(
                    f"ManualScheduler fired {eid!r} and the callback returned an awaitable; "
                    "ManualScheduler is synchronous: give it a sync fire callback, or use "
                    "AsyncioScheduler for async code"
                )
        return fired
