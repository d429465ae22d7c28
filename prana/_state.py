"""Theory of operation: the execution-status state machine, as one table.

An execution starts ``pending``, is ``running`` only inside the executor, and leaves every
executor call ``suspended``, ``completed``, ``failed`` or ``cancelled``. Only a suspended (or
still pending) execution can be resumed or cancelled. The three end states are final for
a run: nothing the executor does leaves them. One edge is an operator's, not a run's: a
redrive (``redrive_execution``) takes a ``failed`` execution back to ``suspended``, waiting
to run its failed node again. Every status change in prana goes through
``check_transition``, so this table is the whole truth; ``transition_diagram()`` renders it
for the docs.
"""

from __future__ import annotations

from prana._errors import ResumeError
from prana._model import ExecutionStatus

S = ExecutionStatus

TRANSITIONS: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    S.PENDING: frozenset({S.RUNNING, S.CANCELLED}),
    S.RUNNING: frozenset({S.SUSPENDED, S.COMPLETED, S.FAILED}),
    S.SUSPENDED: frozenset({S.RUNNING, S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset({S.SUSPENDED}),
    S.CANCELLED: frozenset(),
}
REDRIVE: frozenset[tuple[ExecutionStatus, ExecutionStatus]] = frozenset({(S.FAILED, S.SUSPENDED)})
"""The operator's edges: a redrive, never a run, takes an execution along them."""
FINAL: frozenset[ExecutionStatus] = frozenset(
    s for s, nxt in TRANSITIONS.items() if all((s, n) in REDRIVE for n in nxt)
)
"""The end states of a run: every edge out of them is a redrive."""


_EDGES: frozenset[tuple[str, str]] = frozenset(
    (src.value, dst.value) for src, targets in TRANSITIONS.items() for dst in targets
)
"""The table by value: string pairs hash in C, enum members in Python."""


def check_transition(current: ExecutionStatus, new: ExecutionStatus) -> None:
    """Raise ``ResumeError`` unless ``current -> new`` is an edge of the table."""
    if (current._value_, new._value_) not in _EDGES:
        raise ResumeError(
            f"an execution that is {current.value} cannot become {new.value}; "
            f"from {current.value} it may become: "
            + (", ".join(sorted(s.value for s in TRANSITIONS[current])) or "nothing (final)")
        )


def transition_diagram() -> str:
    """The table as a Mermaid state diagram."""
    lines = ["stateDiagram-v2", "    [*] --> pending"]
    for src, targets in TRANSITIONS.items():
        lines.extend(f"    {src.value} --> {dst.value}" for dst in sorted(targets, key=str))
    lines.extend(f"    {s.value} --> [*]" for s in sorted(FINAL, key=str))
    return "\n".join(lines)
