"""A scheduler moved by hand, for tests: ``advance(seconds)`` fires what falls due, no sleeping.

It shares a ``ManualClock`` with the runner and the core, and steps that clock to each
alarm's due time before firing it, so an action resumed by the alarm sees its due time as
now. It is the reference the other adapters are tested against.
"""

from __future__ import annotations

import collections
import heapq
import inspect
import itertools
import math
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from prana import InvalidSettingsError
from prana.testing import ManualClock
from scheduling.adapters._common import SchedulerStateError, require_aware

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scheduling.abc import Fire, FireMany

__all__ = ["ManualScheduler", "SchedulerStateError"]

_Entry = tuple[datetime, int, str]
"""An armed alarm: ``(due_at, seq, execution_id)``; ``seq`` orders ties by arming."""


class ManualScheduler:
    """The ``Scheduler`` test double: alarms fire only inside ``advance`` or ``run_due``.

    One alarm per execution id (``schedule`` replaces). Alarms fire in due order, ties in
    the order they were scheduled. An alarm whose callback raises is consumed and the
    exception propagates out of ``advance``, so a test sees it.

    ``batches=True`` makes it a ``scheduling.abc.BatchingScheduler`` that batches: started
    with ``start_batched`` (as a ``Runner`` starts it), it hands all the alarms due at one
    instant to ``fire_many`` in one call (with ``batches=False``, the default, it fires them
    one by one through ``fire`` however it was started).
    """

    def __init__(self, clock: ManualClock, *, batches: bool = False) -> None:
        if not isinstance(clock, ManualClock):
            raise InvalidSettingsError(
                f"ManualScheduler(clock={clock!r}): pass a prana.testing.ManualClock, the same "
                "one given to the runner, so that advancing it moves both"
            )
        if not isinstance(batches, bool):
            raise InvalidSettingsError(
                f"ManualScheduler(batches={batches!r}): use True (alarms due at one instant "
                "fire in one batch) or False (one by one)"
            )
        self.clock = clock
        self.batches = batches
        self._fire: Fire | None = None
        self._fire_many: FireMany | None = None
        # id -> the entry of its live alarm. Entries wait in one FIFO bucket per due time,
        # and a heap orders the distinct due times: alarms sharing a due time (a burst of
        # retries) cost no heap work. Buckets may hold stale entries (alarms replaced or
        # cancelled since), told apart by identity and skipped when reached.
        self._alarms: dict[str, _Entry] = {}
        self._buckets: dict[datetime, collections.deque[_Entry]] = {}
        self._times: list[datetime] = []
        self._queued = 0
        self._seq = itertools.count()

    def start(self, fire: Fire) -> None:
        """Let ``advance`` and ``run_due`` fire alarms through ``fire``."""
        self._fire = fire
        self._fire_many = None

    def start_batched(self, fire: Fire, fire_many: FireMany) -> None:
        """``start``; with ``batches=True``, alarms due at one instant go to ``fire_many``."""
        self._fire = fire
        self._fire_many = fire_many if self.batches else None

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        """Arm (or re-arm) the one alarm of ``execution_id`` for ``due_at``."""
        if due_at.__class__ is not datetime or due_at.tzinfo is not timezone.utc:
            require_aware(due_at, f"ManualScheduler.schedule({execution_id!r})")
        entry = (due_at, next(self._seq), execution_id)
        self._alarms[execution_id] = entry
        bucket = self._buckets.get(due_at)
        if bucket is None:
            self._buckets[due_at] = collections.deque((entry,))
            heapq.heappush(self._times, due_at)
        else:
            bucket.append(entry)
        self._queued += 1
        if self._queued > 2 * len(self._alarms) + 16:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the buckets from the live alarms only, dropping stale entries."""
        buckets: dict[datetime, collections.deque[_Entry]] = {}
        for entry in sorted(self._alarms.values()):
            bucket = buckets.get(entry[0])
            if bucket is None:
                buckets[entry[0]] = collections.deque((entry,))
            else:
                bucket.append(entry)
        self._buckets = buckets
        self._times[:] = buckets  # in place: _fire_due holds this list
        heapq.heapify(self._times)
        self._queued = len(self._alarms)

    def cancel(self, execution_id: str) -> None:
        """Disarm the alarm of ``execution_id``; unknown ids are ignored."""
        self._alarms.pop(execution_id, None)

    def shutdown(self) -> None:
        """Stop firing and drop every pending alarm (``start`` again to reuse it)."""
        self._fire = None
        self._fire_many = None
        self._alarms.clear()
        self._buckets.clear()
        self._times.clear()
        self._queued = 0

    def pending(self) -> list[tuple[str, datetime]]:
        """The armed alarms as ``(execution_id, due_at)``, in the order they would fire."""
        return [(eid, due) for due, _, eid in sorted(self._alarms.values())]

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
        if isinstance(seconds, timedelta):
            delta = seconds
        elif (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
        ):
            raise InvalidSettingsError(
                f"ManualScheduler.advance({seconds!r}): pass seconds as a finite number >= 0, "
                "or a timedelta"
            )
        else:
            try:
                delta = timedelta(seconds=seconds)
            except OverflowError:
                raise InvalidSettingsError(
                    f"ManualScheduler.advance({seconds!r}): too far; advance by less than "
                    "a billion days"
                ) from None
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

    def _peek(self) -> _Entry | None:
        """The live alarm that fires next, dropping stale entries on the way."""
        times = self._times
        alarms = self._alarms
        while times:
            bucket = self._buckets[times[0]]
            while bucket:
                entry = bucket[0]
                if alarms.get(entry[2]) is entry:
                    return entry
                bucket.popleft()
                self._queued -= 1
            del self._buckets[heapq.heappop(times)]
        return None

    def _fire_due(self, until: datetime) -> list[str]:
        """Fire alarms due at or before ``until`` one by one, re-reading the queue after each."""
        fired: list[str] = []
        times = self._times
        alarms = self._alarms
        clock = self.clock
        while times:
            due = times[0]
            if due > until:
                break
            bucket = self._buckets[due]
            if not bucket:
                heapq.heappop(times)
                del self._buckets[due]
                continue
            entry = bucket[0]
            eid = entry[2]
            if alarms.get(eid) is not entry:
                bucket.popleft()  # replaced or cancelled since it was armed
                self._queued -= 1
                continue
            fire = self._fire
            if fire is None:
                raise SchedulerStateError(
                    f"ManualScheduler: the alarm of {eid!r} is due but the scheduler is not "
                    "started; call start(fire) first (entering `with runner:` does it)"
                )
            if self._fire_many is not None:
                fired.extend(self._fire_bucket(due, self._fire_many))
                continue
            bucket.popleft()
            self._queued -= 1
            del alarms[eid]
            if due > clock():
                clock.set(due)
            fired.append(eid)
            result = fire(eid)
            if result is not None:  # the message's repr only when there is one to refuse
                _refuse_awaitable(result, repr(eid), "fire callback")
        return fired

    def _fire_bucket(self, due: datetime, fire_many: FireMany) -> Sequence[str]:
        """Hand every live alarm due at ``due`` to ``fire_many`` at once; return their ids."""
        heapq.heappop(self._times)
        bucket = self._buckets.pop(due)
        alarms = self._alarms
        ids = []
        for entry in bucket:
            self._queued -= 1
            eid = entry[2]
            if alarms.get(eid) is entry:
                del alarms[eid]
                ids.append(eid)
        if due > self.clock():
            self.clock.set(due)
        _refuse_awaitable(fire_many(ids), f"{len(ids)} alarms due at {due.isoformat()}", "callback")
        return ids


def _refuse_awaitable(result: object, fired: str, callback: str) -> None:
    """Refuse what an async callback returned: ManualScheduler never runs an event loop."""
    if result is not None and inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()  # no "never awaited" warning on top of the clear error
        raise TypeError(
            f"ManualScheduler fired {fired} and the callback returned an awaitable; "
            f"ManualScheduler is synchronous: give it a sync {callback}, or use "
            "AsyncioScheduler for async code"
        )
