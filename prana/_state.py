"""Theory of operation: the state machines of an execution, a node run and an attempt.

Rule 1 (h11's): everything that affects these state machines lives in this module, as
tables; the engine and ``cancel_execution`` check each change against them, and the tests
walk every edge.

Executions. An execution starts ``pending``, is ``running`` while an executor call runs
it, and leaves every executor call ``suspended``, ``completed``, ``failed`` or
``cancelled``. A store sees ``running`` only in a checkpoint (the record a shell saves
before each action call, when it passes ``checkpoint=``): if the process dies there, the
record stays ``running``, and ``recover_execution`` takes it up again, ``running`` to
``running`` (the recovery edge, ``RECOVER``). Only a suspended (or still pending)
execution can be resumed; a pending, suspended or running one can be cancelled (a
cancelled checkpoint: the process still running it loses its next save). The three end
states are final for a run: nothing the executor does leaves them. One edge is an
operator's, not a run's: a redrive (``redrive_execution``) takes a ``failed`` execution
back to ``suspended``, waiting to run its failed node again. Every status change goes
through ``check_transition``.

Node runs. A node run is ``running`` from the moment the engine picks its node until it
settles, and its record is written when it settles: ``completed`` (an output, or a failure
that ``on_error`` continues past), ``failed`` (``stop_workflow``) or ``suspended`` (a pause,
or a wait before a retry); a checkpoint writes it ``running`` (a recovered run stays
``running``; a cancelled checkpoint's run is ``cancelled``). A suspended run goes back to
``running`` when its execution resumes (the retry's next attempt, or the paused attempt
continuing) or is ``cancelled`` with its execution. A redrive is again the operator's
edge: it takes the ``failed`` run back to ``suspended`` (or, redriving from an earlier
node, starts that node's new run as ``suspended``, waiting for its first attempt).

Attempts. An attempt is ``running`` while its action (or ``resume`` callback) runs and
ends ``completed``, ``failed`` or ``suspended`` (a pause), or ``interrupted`` when a
checkpoint shows it running in a process that died: the recovery closes it so and runs
the same attempt (same number, same idempotency key) again. A failed attempt stays failed:
a retry, or a redrive, is a new attempt. A suspended attempt is the same attempt
continuing when the execution resumes (``running`` again) or is ``cancelled`` with the
execution.

``transition_diagram(table)`` renders any of the three tables for the docs.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, TypeVar

from prana._errors import ResumeError
from prana._model import AttemptOutcome, ExecutionStatus, NodeStatus

E = TypeVar("E", bound=enum.Enum)

S = ExecutionStatus

TRANSITIONS: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    S.PENDING: frozenset({S.RUNNING, S.CANCELLED}),
    S.RUNNING: frozenset({S.RUNNING, S.SUSPENDED, S.COMPLETED, S.FAILED, S.CANCELLED}),
    S.SUSPENDED: frozenset({S.RUNNING, S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset({S.SUSPENDED}),
    S.CANCELLED: frozenset(),
}
REDRIVE: frozenset[tuple[ExecutionStatus, ExecutionStatus]] = frozenset({(S.FAILED, S.SUSPENDED)})
"""The operator's edges: a redrive, never a run, takes an execution along them."""
RECOVER: frozenset[tuple[ExecutionStatus, ExecutionStatus]] = frozenset({(S.RUNNING, S.RUNNING)})
"""The recovery edge: a checkpoint a dead process left ``running`` is taken up again."""
FINAL: frozenset[ExecutionStatus] = frozenset(
    s for s, nxt in TRANSITIONS.items() if all((s, n) in REDRIVE for n in nxt)
)
"""The end states of a run: every edge out of them is a redrive."""
FINAL_VALUES: frozenset[str] = frozenset(s.value for s in FINAL)
"""``FINAL`` as the values records and queries hold."""


def edges_by_value(table: Mapping[Any, frozenset[Any]]) -> frozenset[tuple[str, str]]:
    """A table's edges as ``(from, to)`` pairs of values, what the checks read at run time:
    strings hash in C (and keep their hash), enum members in Python."""
    return frozenset((src.value, dst.value) for src, targets in table.items() for dst in targets)


_EDGES = edges_by_value(TRANSITIONS)
"""``TRANSITIONS`` by value (``edges_by_value``)."""


def check_transition(current: ExecutionStatus, new: ExecutionStatus) -> None:
    """Raise ``ResumeError`` unless ``current -> new`` is an edge of the table."""
    if (current._value_, new._value_) not in _EDGES:
        raise ResumeError(
            f"an execution that is {current.value} cannot become {new.value}; "
            f"from {current.value} it may become: {_targets(TRANSITIONS, current)}"
        )


N = NodeStatus

NODE_TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = {
    N.RUNNING: frozenset({N.COMPLETED, N.FAILED, N.SUSPENDED, N.CANCELLED}),
    N.SUSPENDED: frozenset({N.RUNNING, N.CANCELLED}),
    N.COMPLETED: frozenset(),
    N.FAILED: frozenset({N.SUSPENDED}),
    N.CANCELLED: frozenset(),
}
"""A node run's statuses; a run starts ``running`` (see the theory of operation)."""
NODE_REDRIVE: frozenset[tuple[NodeStatus, NodeStatus]] = frozenset({(N.FAILED, N.SUSPENDED)})
"""The operator's edge for node runs: a redrive, never a run, takes a node run along it."""

A = AttemptOutcome

ATTEMPT_TRANSITIONS: dict[AttemptOutcome, frozenset[AttemptOutcome]] = {
    A.RUNNING: frozenset({A.COMPLETED, A.FAILED, A.SUSPENDED, A.CANCELLED, A.INTERRUPTED}),
    A.SUSPENDED: frozenset({A.RUNNING, A.CANCELLED}),
    A.COMPLETED: frozenset(),
    A.FAILED: frozenset(),
    A.CANCELLED: frozenset(),
    A.INTERRUPTED: frozenset(),
}
"""An attempt's outcomes; an attempt starts ``running`` (see the theory of operation)."""


_NODE_EDGES = edges_by_value(NODE_TRANSITIONS)
"""``NODE_TRANSITIONS`` by value (``edges_by_value``)."""
_ATTEMPT_EDGES = edges_by_value(ATTEMPT_TRANSITIONS)
"""``ATTEMPT_TRANSITIONS`` by value (``edges_by_value``)."""


def values_from(table: Mapping[E, frozenset[E]], current: E) -> frozenset[str]:
    """What ``current`` may become in ``table``, by value: a hot call site tests
    ``new._value_ in`` it (read off this module) and calls the check (which raises) only
    when it is not there, so the table is still the only rule."""
    return frozenset(s.value for s in table[current])


NODE_FROM_RUNNING = values_from(NODE_TRANSITIONS, N.RUNNING)
"""What a running node run may become, by value (``values_from``; ``NodeRun.settle``)."""
ATTEMPT_FROM_RUNNING = values_from(ATTEMPT_TRANSITIONS, A.RUNNING)
"""What a running attempt may become, by value (``values_from``; ``NodeRun.settle``)."""


def check_node_transition(key: str, current: NodeStatus, new: NodeStatus) -> None:
    """Raise ``ResumeError`` unless node run ``current -> new`` is an edge of its table."""
    if (current._value_, new._value_) not in _NODE_EDGES:
        raise ResumeError(
            f"node {key!r}: a run that is {current.value} cannot become {new.value} (the "
            "record is inconsistent: was it edited by hand?); from "
            f"{current.value} it may become: {_targets(NODE_TRANSITIONS, current)}"
        )


def check_attempt_transition(
    key: str, number: int, current: AttemptOutcome, new: AttemptOutcome
) -> None:
    """Raise ``ResumeError`` unless attempt ``current -> new`` is an edge of its table."""
    if (current._value_, new._value_) not in _ATTEMPT_EDGES:
        raise ResumeError(
            f"node {key!r}: attempt {number}, which is {current.value}, cannot become "
            f"{new.value} (the record is inconsistent: was it edited by hand?); from "
            f"{current.value} it may become: {_targets(ATTEMPT_TRANSITIONS, current)}"
        )


def _targets(table: Mapping[E, frozenset[E]], current: E) -> str:
    return ", ".join(sorted(s.value for s in table[current])) or "nothing (final)"


_OPERATOR_EDGES: frozenset[tuple[Any, Any]] = REDRIVE | NODE_REDRIVE


def transition_diagram(table: Mapping[Any, frozenset[Any]] | None = None) -> str:
    """A table (the executions' by default) as a Mermaid state diagram.

    The first row's state is where the machine starts; a state whose every way out is an
    operator's edge (a redrive) ends a run.
    """
    rows = TRANSITIONS if table is None else table
    start = next(iter(rows))
    finals = [s for s, t in rows.items() if all((s, n) in _OPERATOR_EDGES for n in t)]
    lines = ["stateDiagram-v2", f"    [*] --> {start.value}"]
    for src, targets in rows.items():
        lines.extend(f"    {src.value} --> {dst.value}" for dst in sorted(targets, key=str))
    lines.extend(f"    {s.value} --> [*]" for s in sorted(finals, key=str))
    return "\n".join(lines)


# The members the engine names on every run, as module constants (the same objects). On
# Python 3.11 a member read off its class, ``ExecutionStatus.RUNNING``, goes through the
# slow attribute hook ``EnumType.__getattr__`` gives the class (about 0.1 us, ~20 times per
# retry cycle: 8% of its instructions); a module global is a cached read. The shell's hot path
# (``scheduling._runner``, ``scheduling._claims``) reads them too.
EXEC_PENDING = ExecutionStatus.PENDING
EXEC_RUNNING = ExecutionStatus.RUNNING
EXEC_SUSPENDED = ExecutionStatus.SUSPENDED
EXEC_COMPLETED = ExecutionStatus.COMPLETED
NODE_RUNNING = NodeStatus.RUNNING
NODE_COMPLETED = NodeStatus.COMPLETED
NODE_FAILED = NodeStatus.FAILED
NODE_SUSPENDED = NodeStatus.SUSPENDED
ATTEMPT_RUNNING = AttemptOutcome.RUNNING
ATTEMPT_COMPLETED = AttemptOutcome.COMPLETED
ATTEMPT_FAILED = AttemptOutcome.FAILED
