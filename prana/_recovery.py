"""Taking up a checkpoint a dead process left: the interrupted attempt, run again.

A checkpoint (``Run.snapshot``, saved by a shell before each action call) shows the
execution ``running`` and one node's attempt open. If the process died there, the record
stays so; ``recover`` closes that attempt ``interrupted`` and runs the same attempt again,
or, past the bound on interruptions in a row, fails it (see ``prana._state``: the
recovery edge, and the attempt edge to ``interrupted``).
"""

from __future__ import annotations

from collections.abc import Generator

import attrs

from prana._engine import Call, Result, Run
from prana._errors import InvalidSettingsError
from prana._events import EventType
from prana._model import AttemptOutcome, ErrorCode, ExecutionStatus, Outcome, WorkflowExecution
from prana._noderun import NodeRun, prana_error
from prana._state import check_attempt_transition, check_transition


def check_max_interruptions(value: object, call: str = "") -> int:
    """``value`` as a ``max_interruptions`` (a whole number >= 1), or an error naming ``call``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        given = f"max_interruptions={value!r}"
        raise InvalidSettingsError(
            f"{f'{call}({given})' if call else given}: use a whole number >= 1 (how often in a "
            "row an attempt may be interrupted before it fails)"
        )
    return value


def recover(
    run: Run, execution: WorkflowExecution, key: str, max_interruptions: int
) -> Generator[Call, Result, Outcome]:
    """Take up a checkpoint a dead process left: close its open attempt, run it again.

    The attempt is closed ``interrupted`` and the same attempt (number, run index, so
    the same idempotency key) runs again; after ``max_interruptions`` interruptions in
    a row it is not run again but fails with a non-retryable ``interrupted`` error, and
    ``on_error`` decides (a poison execution that kills its process every time ends).
    """
    check_transition(run.status, ExecutionStatus.RUNNING)  # the recovery edge
    cn = run.graph.nodes[key]
    last = run.runs[key][-1]
    *closed, open_attempt = last.attempts
    now = run.clock()
    lease = execution.lease_expires_at
    since = f" (its lease ended at {lease.isoformat()})" if lease is not None else ""
    error = prana_error(
        ErrorCode.INTERRUPTED,
        f"attempt {open_attempt.number} of node {key!r} was interrupted: the process "
        f"running it stopped before it ended{since}",
        key,
        "Interrupted",
    )
    check_attempt_transition(
        key, open_attempt.number, open_attempt.outcome, AttemptOutcome.INTERRUPTED
    )
    interrupted = attrs.evolve(
        open_attempt, ended_at=now, outcome=AttemptOutcome.INTERRUPTED, error=error
    )
    node_run = NodeRun.resumed(last, [*closed, interrupted])
    node_run.attempt_redrive = open_attempt.redrive
    streak = 0
    for attempt in reversed(node_run.attempts):
        if attempt.outcome is not AttemptOutcome.INTERRUPTED:
            break
        streak += 1
    if run.observers:
        run.event(
            EventType.EXECUTION_RECOVERED,
            node_key=key,
            run_index=last.run_index,
            attempt=open_attempt.number,
            error=error,
        )
    if streak >= max_interruptions:
        node_run.open_attempt(open_attempt.number, now, open_attempt.due_at)
        poison = attrs.evolve(
            error,
            message=f"attempt {open_attempt.number} of node {key!r} was interrupted "
            f"{streak} times in a row (the process running it stopped each time); it is "
            "not run again",
        )
        return run.drive(run.settle_failure(cn, node_run, poison))
    return run.drive(run.attempt(cn, node_run, open_attempt.number, open_attempt.due_at, now))
