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
sub-workflow alarm (other executions' steps) runs after the group. The runner's methods
(``Runner._on_alarms``, ``Runner._claim_ahead``) drive it; this module holds what a batch is.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING

from scheduling._errors import StoreError

if TYPE_CHECKING:
    from prana import WorkflowExecution
    from scheduling._eventlog import HeldEvents
    from scheduling._leases import Claim
    from scheduling.abc import ExecutionStore, GroupingStore

__all__ = ["CLAIM_AHEAD", "GROUP_MAX", "Batch", "StepLocal", "give_back", "stop_ahead"]

GROUP_MAX = 256
"""Saves a group may hold uncommitted (steps without actions commit nothing on their own)."""

CLAIM_AHEAD = 8
"""How many alarms of a batch ``Runner._claim_ahead`` claims in one call, before their steps run.

Small enough that the last of them usually starts within ``AHEAD_FRESH`` of its claim (a
loaded worker takes a few ms a step; at 32 most of a burst waited past it and claimed
again, a statement each): one claim statement per 8 executions keeps 7/8 of the saving."""


class Batch:
    """The steps of one batch whose saves wait for their group's commit, and what follows.

    ``pending``: saved in the open group, to settle once committed (each with its held
    events, dropped if the commit fails); ``ready``: committed, to settle; ``later``:
    parents whose sub-workflow alarm runs after the group.
    """

    __slots__ = ("claims", "later", "pending", "ready", "store")

    def __init__(self, store: GroupingStore) -> None:
        self.store = store
        self.pending: list[tuple[WorkflowExecution, int, HeldEvents | None]] = []
        self.ready: list[tuple[WorkflowExecution, int, HeldEvents | None]] = []
        self.later: list[WorkflowExecution] = []
        self.claims: dict[str, tuple[WorkflowExecution, Claim]] = {}
        """Executions claimed ahead (``Runner._claim_ahead``): each suspended record and claim."""

    def take(
        self, execution_id: str, ahead: dict[str, Claim]
    ) -> tuple[WorkflowExecution, Claim] | None:
        """The record and claim of ``execution_id`` if claimed ahead (once), for its step."""
        taken = self.claims.pop(execution_id, None)
        if taken is not None:
            ahead.pop(execution_id, None)
        return taken

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


class StepLocal(threading.local):
    """Per thread: the batch a runner's steps join and its follow-up queue (``Runner._local``).

    Speed rule: the defaults are class attributes, so every step reads them on any thread
    without raising (``getattr(local, name, None)`` on a thread that never set the name
    makes and discards an ``AttributeError``, ~2,000 instructions, at every step).
    """

    batch: Batch | None = None
    queue: collections.deque[WorkflowExecution] | None = None


def stop_ahead(ahead: dict[str, Claim], execution_id: str) -> None:
    """After a cancel in this process: the step of ``execution_id``, if it is claimed ahead
    and not run yet, loses its claim at its first checkpoint, before its action runs."""
    claim = ahead.get(execution_id)
    if claim is not None:
        with claim.lock:
            claim.claimed = None


def give_back(store: ExecutionStore, execution: WorkflowExecution, claim: Claim) -> None:
    """Store again the suspended record a claim made ahead stands on: nothing ran under it.

    For a step that did not reach its first checkpoint; if the record moved on meanwhile
    (cancelled) or the store fails, the claim stays, and is recovered when its lease ends.
    """
    try:
        with claim.lock:
            if claim.version is not None and claim.claimed is not None:
                claim.version = store.save(execution, claim.version)
                claim.claimed = None
    except StoreError:
        pass
