"""The execution-status table: every edge is walked, every non-edge refused."""

from __future__ import annotations

import itertools

import pytest

from prana import ExecutionStatus, ResumeError
from prana._state import FINAL, REDRIVE, TRANSITIONS, check_transition, transition_diagram

EDGES = [(src, dst) for src, targets in TRANSITIONS.items() for dst in targets]
NON_EDGES = [
    (src, dst)
    for src, dst in itertools.product(ExecutionStatus, repeat=2)
    if dst not in TRANSITIONS[src]
]


@pytest.mark.parametrize(("src", "dst"), EDGES, ids=lambda s: s.value)
def test_every_edge_is_allowed(src: ExecutionStatus, dst: ExecutionStatus) -> None:
    """Each transition in the table passes the check."""
    check_transition(src, dst)


@pytest.mark.parametrize(("src", "dst"), NON_EDGES, ids=lambda s: s.value)
def test_every_other_pair_is_refused(src: ExecutionStatus, dst: ExecutionStatus) -> None:
    """A transition missing from the table raises ResumeError naming both states."""
    with pytest.raises(ResumeError, match=f"{src.value} cannot become {dst.value}"):
        check_transition(src, dst)


def test_table_covers_every_status_and_finals_are_final() -> None:
    """Every status has a row; from completed, failed and cancelled only a redrive leads on."""
    assert set(TRANSITIONS) == set(ExecutionStatus)
    assert {s.value for s in FINAL} == {"completed", "failed", "cancelled"}
    assert {(a.value, b.value) for a, b in REDRIVE} == {("failed", "suspended")}
    assert all(dst in TRANSITIONS[src] for src, dst in REDRIVE)
    assert all((src, dst) in REDRIVE for src in FINAL for dst in TRANSITIONS[src])
    assert len(EDGES) + len(NON_EDGES) == len(ExecutionStatus) ** 2


def test_diagram_is_generated_from_the_table() -> None:
    """The Mermaid diagram has one arrow per edge."""
    diagram = transition_diagram()
    for src, dst in EDGES:
        assert f"{src.value} --> {dst.value}" in diagram
    assert diagram.count("-->") == len(EDGES) + 1 + len(FINAL)
