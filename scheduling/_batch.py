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
import threading
from typing import TYPE_CHECKING

from prana import PranaError
from scheduling._claims import claimable
from scheduling._errors import StoreError
from scheduling._leases import Claim
from scheduling.abc import BatchClaimingStore, GroupingStore

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from prana import WorkflowExecution
    from scheduling._eventlog import HeldEvents
    from scheduling._steps import Steps
    from scheduling.abc import ExecutionStore

__all__ = [
    "CLAIM_AHEAD",
    "GROUP_MAX",
    "Batch",
    "StepLocal",
    "claim_ahead",
    "give_back",
    "on_alarms",
    "stop_ahead",
]

logger = logging.getLogger("scheduling._runner")  # the Runner's logger

GROUP_MAX = 256
"""Saves a group may hold uncommitted (steps without actions commit nothing on their own)."""

CLAIM_AHEAD = 8
"""How many alarms of a batch ``claim_ahead`` claims in one call, before their steps run.

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
        """Executions claimed ahead (``claim_ahead``): the suspended record and its claim."""

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
    """Per thread: the batch a runner's steps join and its follow-up queue (``Steps._local``).

    Speed rule: the defaults are class attributes, so every step reads them on any thread
    without raising (``getattr(local, name, None)`` on a thread that never set the name
    makes and discards an ``AttributeError``, ~2,000 instructions, at every step).
    """

    batch: Batch | None = None
    queue: collections.deque[WorkflowExecution] | None = None


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
                ahead = store if isinstance(store, BatchClaimingStore) else None
                for at, execution_id in enumerate(execution_ids):
                    if ahead is not None and at % CLAIM_AHEAD == 0:
                        claim_ahead(steps, ahead, batch, execution_ids[at : at + CLAIM_AHEAD])
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
            if batch.claims:
                _give_back(steps, batch)
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


def claim_ahead(
    steps: Steps, store: BatchClaimingStore, batch: Batch, execution_ids: Sequence[str]
) -> None:
    """Claim, in one call and one commit, every execution of the batch its step would
    claim lightly (due, suspended on a retry or a timer, ``claimable``), before any step.

    The rule. A claim made ahead is the light claim its step would make at its first
    checkpoint, made earlier: committed before any action of the batch runs, held by the
    lease keeper from then on (so an execution waiting behind a long action keeps its
    lease), its claim time the one a recovery or a cancel replays the resume at
    (``scheduling._claims``). A row that moved on since it was read is not claimed, and its
    step loads and checks it afresh, as without this. The step of a claimed execution
    takes its record and claim from ``batch.claims`` instead of loading it. A claim whose
    step never ran (the batch stopped) is given back (``_give_back``).
    """
    leases = steps._leases
    now = leases.clock()
    wanted: list[tuple[str, int]] = []
    loaded: dict[str, WorkflowExecution] = {}
    for execution_id in execution_ids:
        if execution_id not in loaded:
            found = _due_light(steps, execution_id, now)
            if found is not None:
                wanted.append((execution_id, found[1]))
                loaded[execution_id] = found[0]
    if len(wanted) < 2:
        return
    claimed = store.claim_many(wanted, now + leases.lease, now)
    versions = dict(wanted)
    claims = batch.claims
    for execution_id in claimed:
        claim = Claim(versions[execution_id] + 1, light=True)
        claim.claimed, claim.saved_at = (execution_id, now), now
        claims[execution_id] = (loaded[execution_id], claim)
        steps._ahead[execution_id] = claim
    try:
        batch.commit()
    except BaseException:
        for execution_id in claims:
            steps._ahead.pop(execution_id, None)
        claims.clear()  # rolled back: nothing was claimed
        raise
    for _, claim in claims.values():
        leases.renewing(claim)


def _due_light(
    steps: Steps, execution_id: str, now: datetime
) -> tuple[WorkflowExecution, int] | None:
    """The record and version of ``execution_id`` if its alarm's step would claim it lightly."""
    try:
        execution, version = steps.store.load(execution_id)
        due_at = execution.due_at
        if due_at is None or due_at > now:
            return None
        workflow = steps._definitions.get(execution.workflow_id, execution.workflow_version)
        if not claimable(execution, workflow, steps.registry):  # suspended: a retry or timer
            return None
    except (PranaError, LookupError):  # its step loads it again and says what is wrong
        return None
    return execution, version


def _give_back(steps: Steps, batch: Batch) -> None:
    """Give back the claims made ahead whose steps never ran (the batch stopped)."""
    claims, batch.claims = batch.claims, {}
    for execution_id, (execution, claim) in claims.items():
        steps._ahead.pop(execution_id, None)
        steps._leases.release(claim)
        give_back(steps.store, execution, claim)


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
