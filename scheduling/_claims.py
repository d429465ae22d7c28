"""Light claims: a step's first checkpoint written as the row's columns alone, and read back.

Theory of operation. A step that resumes a record loaded ``suspended`` on a retry or a timer
(``LIGHT_KINDS``) claims it with ``ClaimingStore.claim`` instead of saving the core's first
``running`` snapshot: the row says ``running`` under a lease since the claim time, and its
stored record stays the suspended one. The claim is taken by the execution id
(``prana._checkpoint.CheckpointById``), so the core does not even build that snapshot. That
saves the snapshot, its serialization and most of its write, and loses nothing, by this
rule:

    A claimed record (``running`` with its ``suspension`` kept, see ``is_claimed``) stands
    for the snapshot its step saved no copy of: the core resuming that suspended record, at
    the claim time (``updated_at``), up to its first action call. That resume is a function
    of the record: a retry or a timer ignores the resume data, the engine is deterministic
    given its clock, and no action has run before that first call.

So ``claimed_snapshot`` rebuilds the snapshot by running the core again on the suspended
record, with the claim time as its clock, no observers, and a checkpoint that stops it at
the first action call. A record that fits ``LIGHT_KINDS`` (a timer only when its node's
action has no ``resume`` callback of its own: ``claimable``) and is resumed by
``Move.RESUME`` is the only one claimed so; any other step (a delivery's data, a webhook's
expiry, a redrive, a recovery, a start) saves its snapshot as before, and so does every
later checkpoint of a light step. Where the snapshot is needed:

- recovery (the claim's lease ended: its process died inside the action, or before it):
  ``recover_claimed`` takes the rebuilt snapshot up as ``recover_execution`` takes a
  stored one (the attempt closed ``interrupted`` and run again, the same idempotency key,
  counted against ``max_interruptions``); when the resume reaches no action call, nothing
  ran, and the record is resumed afresh;
- cancelling (``Runner.cancel``): the snapshot is cancelled, so its attempt in flight is
  closed ``cancelled`` in the ledger, as with a stored checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from prana import (
    ExecutionStatus,
    Outcome,
    Registry,
    Workflow,
    WorkflowExecution,
    resume_workflow,
)
from prana.shell import (  # hot path: members as module globals
    EXEC_RUNNING,
    EXEC_SUSPENDED,
    compile_workflow,
    recover_execution,
    wait_resume,
    with_lease,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    from prana import Event

__all__ = [
    "LIGHT_KINDS",
    "claimable",
    "claimed_snapshot",
    "is_claimed",
    "recover_claimed",
    "unclaimed",
]

LIGHT_KINDS = frozenset({"retry", "timer"})
"""Suspension kinds whose resume is a function of the record alone (resume data ignored),
given that a timer's node resumes as the core does (``claimable``)."""

_CORE_RESUMES = frozenset({None, wait_resume})
"""The ``resume`` callbacks that are the core's own: none, or the built-in ``wait.wait``'s."""


def claimable(execution: WorkflowExecution, workflow: Workflow, registry: Registry) -> bool:
    """Whether a step resuming ``execution`` (``Move.RESUME``) may claim it lightly.

    A retry runs its action afresh: nothing runs before the action call's checkpoint. A
    timer's resume is the core's own only when its node's action has no ``resume`` callback
    or the built-in wait's: a user's callback runs with no checkpoint before it, so a
    replay (``claimed_snapshot``, on a cancel or a recovery) would run it a second time.
    """
    suspension = execution.suspension
    if execution.status is not EXEC_SUSPENDED or suspension is None:
        return False
    kind = suspension.kind
    if kind == "retry":
        return True
    if kind != "timer":
        return False
    node = compile_workflow(workflow, registry).nodes.get(execution.suspended_node or "")
    return node is not None and node.spec.resume in _CORE_RESUMES


def is_claimed(execution: WorkflowExecution) -> bool:
    """Whether ``execution`` is a claimed record: ``running`` with its suspension kept.

    The core's ``running`` snapshots never carry a suspension, so this tells a light claim
    from a checkpoint.
    """
    return execution.status is EXEC_RUNNING and execution.suspension is not None


def unclaimed(execution: WorkflowExecution) -> WorkflowExecution:
    """The suspended record a claimed one stands on (as stored, but for ``updated_at``)."""
    return attrs.evolve(execution, status=ExecutionStatus.SUSPENDED, lease_expires_at=None)


class _Reached(Exception):  # noqa: N818 -- a signal, not an error: the replay got there
    """The replay reached its first action call; ``snapshot`` is the core's checkpoint."""

    def __init__(self, snapshot: WorkflowExecution) -> None:
        super().__init__()
        self.snapshot = snapshot


def claimed_snapshot(
    execution: WorkflowExecution,
    workflow: Workflow,
    registry: Registry,
    env: Mapping[str, Any] | None,
    clock: Callable[[], datetime],
) -> WorkflowExecution | None:
    """The checkpoint a claimed record stands for, leased as the claim; ``None`` if none.

    ``None``: resuming the record reaches no action call (it completes, fails or suspends
    again without one), so the claiming step ran nothing. ``clock`` is used only when the
    record has no claim time.
    """
    claimed_at = execution.updated_at or clock()

    def stop(snapshot: WorkflowExecution) -> None:
        raise _Reached(snapshot)

    try:
        resume_workflow(
            unclaimed(execution),
            None,
            workflow=workflow,
            registry=registry,
            clock=lambda: claimed_at,
            env=env,
            observers=(),
            checkpoint=stop,
        )
    except _Reached as reached:
        return with_lease(reached.snapshot, execution.lease_expires_at)
    return None


def recover_claimed(
    execution: WorkflowExecution,
    workflow: Workflow,
    *,
    registry: Registry,
    clock: Callable[[], datetime],
    env: Mapping[str, Any] | None,
    observers: tuple[Callable[[Event], object], ...],
    checkpoint: Callable[[WorkflowExecution], None] | None,
    max_interruptions: int,
) -> Outcome:
    """Take up a claimed record whose lease ended, as ``recover_execution`` does a checkpoint."""
    snapshot = claimed_snapshot(execution, workflow, registry, env, clock)
    if snapshot is None:  # no action call had begun: nothing was interrupted
        return resume_workflow(
            unclaimed(execution),
            None,
            workflow=workflow,
            registry=registry,
            clock=clock,
            env=env,
            observers=observers,
            checkpoint=checkpoint,
        )
    return recover_execution(
        snapshot,
        workflow=workflow,
        registry=registry,
        clock=clock,
        env=env,
        observers=observers,
        checkpoint=checkpoint,
        max_interruptions=max_interruptions,
    )
