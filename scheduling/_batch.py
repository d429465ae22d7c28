"""A batch of alarms due at one instant, resumed with their saves grouped in the store.

Theory of operation. A ``BatchingScheduler`` hands the runner every alarm due at one
instant in one call; with a ``GroupingStore`` the runner resumes them one after another in
one store group (``scheduling.abc``), so a step's final save and the next step's claim
commit together: one commit per execution instead of two. What must wait for a save to be
durable waits for its commit here: the step's settling (waking waiters, telling
listeners, arming the next alarm: persist, then arm) is queued on the ``Batch`` and runs
once the group has committed. Rules the runner keeps while a group has uncommitted saves
(the store's lock is held then): it commits before every action call (the claim's
checkpoint commits) and before it waits for a lock another thread may hold (an
execution's stripe lock is tried first, and the group committed if it is taken), and a
sub-workflow alarm (other executions' steps) runs after the group. ``Runner._on_alarms``
drives it; this module holds what a batch is.

A batch is a schedule, not a promise: its alarms run one after another only while each
step is quick. Once a step has run for ``HAND_BACK_SECONDS``, the alarms of the batch not
started yet are handed back to the scheduler (``BatchingScheduler.hand_back``), which fires
them now in whatever slot is free, in this process or another (``HandBack``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING

from scheduling._errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from prana import WorkflowExecution
    from scheduling._eventlog import HeldEvents
    from scheduling.abc import GroupingStore

__all__ = ["GROUP_MAX", "HAND_BACK_SECONDS", "Batch", "HandBack", "Pending", "StepLocal"]

logger = logging.getLogger("scheduling._runner")

HAND_BACK_SECONDS = 0.05
"""How long a step of a batch may run before the batch hands back its alarms not started.

Well above a quick step (1-3 ms: a batch of them keeps its grouped commits), well below
what a caller notices (the alarms handed back start at once in free slots)."""

GROUP_MAX = 256
"""Saves a group may hold uncommitted (steps without actions commit nothing on their own)."""


class Batch:
    """The steps of one batch whose saves wait for their group's commit, and what follows.

    ``pending``: saved in the open group, to settle once committed (each with its held
    events, dropped if the commit fails); ``ready``: committed, to settle; ``later``:
    parents whose sub-workflow alarm runs after the group.
    """

    __slots__ = ("later", "lost", "pending", "ready", "store")

    def __init__(self, store: GroupingStore) -> None:
        self.store = store
        self.pending: list[tuple[WorkflowExecution, int, HeldEvents | None]] = []
        self.ready: list[tuple[WorkflowExecution, int, HeldEvents | None]] = []
        self.later: list[WorkflowExecution] = []
        self.lost: list[tuple[WorkflowExecution, int, HeldEvents | None, StoreError]] = []
        """Saves a failed commit rolled back (the runner keeps them: ``_keep_unsaved``)."""

    def commit(self) -> None:
        """Commit the group; its saves become ready to settle (``lost``, if the commit fails)."""
        pending = self.pending
        try:
            self.store.commit_group()
        except StoreError as error:
            self.lost += [(*saved, error) for saved in pending]
            pending.clear()  # rolled back: nothing of them is stored, nothing to settle
            raise
        except BaseException:
            pending.clear()
            raise
        if pending:
            self.ready.extend(pending)
            pending.clear()


class StepLocal(threading.local):
    """Per thread: the batch a runner's steps join and its follow-up queue (``Runner._local``).

    Speed rule: the defaults are class attributes, so every step reads them on any thread
    without raising (``getattr(local, name, None)`` on a thread that never set the name
    makes and discards an ``AttributeError``, ~2,000 instructions, at every step).
    """

    batch: Batch | None = None
    queue: collections.deque[WorkflowExecution] | None = None


class Pending:
    """The alarms of one batch not started yet, and since when its current step runs."""

    __slots__ = ("ids", "lock", "since", "size")

    def __init__(self, execution_ids: Sequence[str]) -> None:
        self.ids = collections.deque(execution_ids)
        self.size = len(self.ids)
        self.lock = threading.Lock()
        self.since: float | None = None

    def next(self) -> str | None:
        """The next alarm to run here (its step starts now), or ``None``: none is left."""
        with self.lock:
            if not self.ids:
                self.since = None
                return None
            self.since = time.monotonic()
            return self.ids.popleft()

    def overdue(self, now: float, after: float) -> list[str]:
        """Take every alarm not started if the current step has run ``after`` seconds."""
        with self.lock:
            if self.since is None or not self.ids or now - self.since < after:
                return []
            taken = list(self.ids)
            self.ids.clear()
            return taken


class HandBack:
    """Watches the batches running in a runner; hands back the alarms a slow step holds up.

    One thread, alive while a batch of more than one alarm runs, looks every half
    ``after``; the alarms it takes go to ``hand_back`` (the scheduler's), and the batch
    ends after its current step.
    """

    def __init__(self, hand_back: Callable[[Sequence[str]], object], after: float) -> None:
        self._hand_back = hand_back
        self.after = after
        self._watched: set[Pending] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, pending: Pending) -> None:
        with self._cond:
            self._watched.add(pending)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="prana-hand-back", daemon=True
                )
                self._thread.start()

    def unwatch(self, pending: Pending) -> None:
        with self._cond:
            self._watched.discard(pending)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait(self.after / 2)
                if not self._watched:
                    self._thread = None
                    return
                watched = list(self._watched)
            now = time.monotonic()
            for pending in watched:
                ids = pending.overdue(now, self.after)
                if not ids:
                    continue
                try:
                    self._hand_back(ids)
                except Exception:  # they stay due in the store: a worker re-arms them
                    logger.exception("handing back %d alarms of a batch failed", len(ids))
