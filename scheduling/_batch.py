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
sub-workflow alarm (other executions' steps) runs after the group.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING

from scheduling.abc import GroupingStore

if TYPE_CHECKING:
    from collections.abc import Sequence

    from prana import WorkflowExecution
    from scheduling._eventlog import HeldEvents
    from scheduling._steps import Steps

__all__ = ["GROUP_MAX", "Batch", "on_alarms"]

logger = logging.getLogger("scheduling._runner")  # the Runner's logger

GROUP_MAX = 256
"""Saves a group may hold uncommitted (steps without actions commit nothing on their own)."""


class Batch:
    """The steps of one batch whose saves wait for their group's commit, and what follows.

    ``pending``: saved in the open group, to settle once committed (each with its held
    events, dropped if the commit fails); ``ready``: committed, to settle; ``later``:
    parents whose sub-workflow alarm runs after the group.
    """

    __slots__ = ("later", "pending", "ready", "store")

    def __init__(self, store: GroupingStore) -> None:
        self.store = store
        self.pending: list[tuple[WorkflowExecution, int, HeldEvents | None]] = []
        self.ready: list[tuple[WorkflowExecution, int, HeldEvents | None]] = []
        self.later: list[WorkflowExecution] = []

    def commit(self) -> None:
        """Commit the group; its saves become ready to settle (lost, if the commit fails)."""
        pending = self.pending
        try:
            self.store.commit_group()
        except BaseException:
            pending.clear()  # rolled back: nothing of them is stored, nothing to settle
            raise
        if pending:
            self.ready.extend(pending)
            pending.clear()


def on_alarms(steps: Steps, execution_ids: Sequence[str]) -> None:
    """Alarms due at one instant: each as ``steps._on_alarm``, their saves in one store group.

    One that fails unexpectedly is logged and the others still run. Without a
    ``GroupingStore`` (or inside another batch or follow-up) they run one by one.
    """
    store = steps.store
    local = steps._local
    if (
        len(execution_ids) < 2
        or not isinstance(store, GroupingStore)
        or getattr(local, "batch", None) is not None
        or getattr(local, "queue", None) is not None
    ):
        for execution_id in execution_ids:
            steps._on_alarm_logged(execution_id)
        return
    batch = Batch(store)
    queue: collections.deque[WorkflowExecution] = collections.deque()
    local.queue = queue  # follow-ups of settled steps wait for the end of the group
    try:
        try:
            local.batch = batch
            with store.grouped():
                for execution_id in execution_ids:
                    steps._on_alarm_logged(execution_id)
                    if len(batch.pending) >= GROUP_MAX:
                        batch.commit()
                    if batch.ready:
                        _settle_ready(steps, batch)
                local.batch = None
                batch.commit()
        except Exception:
            logger.exception(
                "a batch of %d alarms stopped: its last saves were not committed; their "
                "executions resume from what is stored (a runner re-arms them)",
                len(execution_ids),
            )
        finally:
            local.batch = None
        _settle_ready(steps, batch)
        for parent in batch.later:
            steps._sub_workflow_alarm_logged(parent)
    finally:
        local.queue = None
    if queue:
        local.queue = queue
        steps._drain(queue)


def _settle_ready(steps: Steps, batch: Batch) -> None:
    ready = batch.ready
    batch.ready = []
    for execution, version, held in ready:
        steps._settle(execution, version, held)
