"""Loaded node runs (``prana._noderuns``): checked at ``loads``, built when first read.

``loads`` refuses a corrupt run as it always did, but keeps each node's checked rows raw
until the node is first looked up. These tests hold the lazy mapping to the plain ``dict``
it stands for, and the row check (``RunsCodec.check``) to the records' own constructors.
"""

from __future__ import annotations

import copy
import itertools
import json
import pickle
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import orjson
import pytest
from doubles import T0, value_node, webhook_node, workflow
from hypothesis import given, settings
from hypothesis import strategies as st
from stored_records import rich_execution
from test_serialization import json_values, node_runs

from prana import (
    Completed,
    ExecutionStatus,
    NodeExecution,
    RecordError,
    Registry,
    Suspend,
    WorkflowExecution,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana._compact import gen_runs_codec, named_runs
from prana._fast_hooks import DATETIMES
from prana._noderuns import NodeRuns
from prana._serialization import _detailed, _fast
from prana.testing import ManualClock

CODEC = gen_runs_codec(_fast())
BARE = WorkflowExecution(
    id="e", workflow_id="wf", workflow_version=1, status=ExecutionStatus.RUNNING
)


def unread(runs: Any) -> set[str]:
    """The nodes of a ``NodeRuns`` not built yet."""
    assert type(runs) is NodeRuns
    return {k for k, v in runs.raw_items().items() if type(v) is list}


def suspended_chain(n: int = 5) -> tuple[Any, WorkflowExecution]:
    """A chain of ``n`` set-data nodes then a webhook wait ``w``, suspended on the wait."""
    wf = workflow(*(value_node(f"n{i}", i) for i in range(n)), webhook_node())
    out = execute_workflow(wf, 0, registry=Registry(), clock=ManualClock(T0))
    assert isinstance(out, Suspend)
    assert out.execution is not None
    return wf, out.execution


# -- the mapping stands for the plain dict ----------------------------------------------------


def test_loads_checks_every_run_and_builds_none() -> None:
    """A stored record loads with every node unread; a lookup builds that node only."""
    execution = rich_execution()
    back = loads(dumps(execution))
    runs = back.node_executions
    assert unread(runs) == set(execution.node_executions)
    assert runs["flaky"] == execution.node_executions["flaky"]
    assert runs.get("loop") == execution.node_executions["loop"]
    assert runs.get("nowhere", ()) == ()
    assert unread(runs) == set(execution.node_executions) - {"flaky", "loop"}
    assert runs["flaky"] is runs["flaky"]  # built once, then kept
    assert list(runs) == list(execution.node_executions)
    assert len(runs) == len(execution.node_executions)
    assert "start" in runs
    assert "nowhere" not in runs


def test_equality_hash_and_repr_are_the_plain_dicts() -> None:
    """Equality (both ways), hashing and ``repr`` act as on the built ``dict``."""
    execution = rich_execution()
    text = dumps(execution)
    back = loads(text)
    assert back == execution
    assert execution == back
    assert back.node_executions == execution.node_executions
    assert execution.node_executions == back.node_executions
    assert loads(text).node_executions == loads(text).node_executions
    assert back.node_executions != {}
    assert loads(text) != attrs.evolve(execution, node_executions={})
    assert repr(loads(text)) == repr(execution)
    assert repr(loads(text).node_executions) == repr(dict(execution.node_executions))
    for value in (loads(text), loads(text).node_executions):
        with pytest.raises(TypeError, match="unhashable"):
            hash(value)
    with pytest.raises(TypeError, match="unhashable"):
        hash(execution)


def test_pickles_and_copies_are_the_plain_dict() -> None:
    """Pickling and copying give the built ``dict``, equal to the record's own."""
    execution = rich_execution()
    text = dumps(execution)
    for clone in (
        pickle.loads(pickle.dumps(loads(text))),
        copy.copy(loads(text)),
        copy.deepcopy(loads(text)),
    ):
        assert clone == execution
        assert dumps(clone) == text
    assert type(copy.deepcopy(loads(text)).node_executions) is dict
    assert copy.copy(loads(text).node_executions) == execution.node_executions


def test_evolve_keeps_the_runs_and_dumps_writes_the_rows_it_read() -> None:
    """``attrs.evolve`` carries the mapping as it is; ``dumps`` writes unread nodes' rows
    back as they were read, without building them."""
    text = dumps(rich_execution())
    back = loads(text)
    moved = attrs.evolve(back, status=ExecutionStatus.CANCELLED)
    assert moved.node_executions is back.node_executions
    assert dumps(back) == text
    assert unread(back.node_executions) == set(back.node_executions)
    assert (
        orjson.loads(dumps(moved))["execution"]["node_executions"]
        == (orjson.loads(text)["execution"]["node_executions"])
    )


def test_the_mapping_is_read_only() -> None:
    """Frozen from the user's view: no item can be set, deleted or replaced."""
    runs: Any = loads(dumps(rich_execution())).node_executions
    with pytest.raises(TypeError):
        runs["start"] = ()
    with pytest.raises(TypeError):
        del runs["start"]
    for name in ("pop", "update", "clear", "setdefault", "popitem"):
        assert not hasattr(runs, name)


def test_a_resume_builds_only_what_it_reads_and_ends_as_in_memory() -> None:
    """Resuming a loaded execution gives the in-memory result; the nodes the resume did not
    read stay unread, and ``dumps`` writes them back as stored. The wait's source ``n4``
    stays unread too: its output is read off its row (``NodeRuns.delivered``)."""
    wf, paused = suspended_chain()
    direct = resume_workflow(
        paused, {"ok": 1}, workflow=wf, registry=Registry(), clock=ManualClock(T0)
    )
    loaded = loads(dumps(paused))
    out = resume_workflow(
        loaded, {"ok": 1}, workflow=wf, registry=Registry(), clock=ManualClock(T0)
    )
    assert isinstance(out, Completed)
    assert dumps(out.execution) == dumps(direct.execution)
    assert unread(out.execution.node_executions) == {"start", "n0", "n1", "n2", "n3", "n4"}
    assert unread(loaded.node_executions) == {"start", "n0", "n1", "n2", "n3", "n4"}
    assert out == direct
    assert loaded == paused  # the resumed-from execution is unchanged


# -- the row check and the record constructors agree -------------------------------------------


def constructed(key: str, row: Any) -> NodeExecution | None:
    """The run the records' constructors build from ``row``, or ``None`` if they refuse it.

    The slow path ``loads`` explains refusals with: the row rewritten with field names
    (``named_runs``), then the detailed converter, which builds ``AttemptRecord`` and
    ``NodeExecution`` through ``__init__`` (every validator a record has runs).
    """
    runs, problems = named_runs({key: [row]}, "$")
    if problems:
        return None
    try:
        return _detailed().structure(runs[key][0], NodeExecution)
    except Exception:  # noqa: BLE001 - refused, whatever the reason
        return None


def disagreement(key: str, row: Any, construct: Any = constructed) -> str | None:
    """How the check and ``construct`` disagree on ``row``, or ``None`` if they agree.

    The rule: a row the check accepts is built by the lazy builder without error and equals
    what the constructors build; a row the constructors refuse, the check refuses.
    """
    DATETIMES.clear()
    try:
        CODEC.check(row)
    except Exception:  # noqa: BLE001 - refused
        accepted = False
    else:
        accepted = True
    built = construct(key, row)
    if not accepted:
        return None  # loads takes the slow path, which builds or explains as before
    if built is None:
        return f"the check accepts {row!r}, which the constructors refuse"
    try:
        (lazy,) = CODEC.build(key, [row])
    except Exception as exc:  # noqa: BLE001 - the point of the test
        return f"the check accepts {row!r}, which the builder refuses: {exc!r}"
    if lazy != built:
        return f"{row!r} builds {lazy!r}, the constructors {built!r}"
    # What a resume reads of an unread source run (``NodeRuns.delivered``) is the run's.
    runs = NodeRuns({key: (lazy,)}, CODEC.build, CODEC.peek)
    ports = {"main", "error", lazy.output_port or "main"}
    for port, index in itertools.product(ports, (lazy.execution_index, -1, "main")):
        peeked, want = CODEC.peek(row, port, index), runs.delivered(key, port, index)
        if peeked is not want:  # the very output object, or both NOT_DELIVERED
            return f"{row!r} peeks {peeked!r} on {port!r} at {index!r}, its run {want!r}"
    return None


def stored_row(run: NodeExecution) -> list[Any]:
    """``run`` as the version 3 row ``dumps`` writes."""
    execution = attrs.evolve(BARE, node_executions={run.node_key: (run,)})
    row: list[Any] = orjson.loads(dumps(execution))["execution"]["node_executions"][run.node_key][0]
    return row


_FIRST = datetime.min.replace(tzinfo=timezone.utc)
_LAST = datetime.max.replace(tzinfo=timezone.utc)
odd_values = st.one_of(
    json_values,
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from(
        [
            -1,
            0,
            1,
            10**30,
            -(10**30),
            True,
            False,
            None,
            "",
            "soon",
            1.5,
            3.0,
            [],
            {},
            [1],
            "completed",
            "failed",
            "running",
            "suspended",
            "interrupted",
            "main",
            "2030-01-01T00:00:00Z",
            "2030-01-01T00:00:00+02:00",
            "2030-01-01T00:00:00",
            "9999-12-31T23:59:59.999999Z",
            "0001-01-01T00:00:00Z",
            {"code": "x", "type": "T", "module": "m", "message": "boom"},
            {"code": "x", "type": "T", "module": "m"},
        ]
    ),
)


@st.composite
def mutated_rows(draw: st.DrawFn) -> tuple[str, Any]:
    """A stored run row with one item changed, dropped or added (in the row or an attempt)."""
    run = draw(node_runs)
    row = stored_row(run)
    target = row
    attempts = row[5] if len(row) > 5 and row[5] else None
    if attempts and draw(st.booleans()):
        target = attempts[draw(st.integers(0, len(attempts) - 1))]
    action = draw(st.sampled_from(["set", "set", "set", "drop", "add", "edge"]))
    if action == "set" and target:
        target[draw(st.integers(0, len(target) - 1))] = draw(odd_values)
    elif action == "drop" and target:
        del target[-1]
    elif action == "add":
        target.append(draw(odd_values))
    elif action == "edge" and len(target) > 1:
        # A time just inside or outside what the anchor allows.
        anchor = datetime.fromisoformat(row[3].replace("Z", "+00:00"))
        limit = (_LAST - anchor) // timedelta(microseconds=1)
        floor = (_FIRST - anchor) // timedelta(microseconds=1)
        index = 4 if target is row else draw(st.sampled_from([1, 2]))
        if index < len(target):
            target[index] = draw(st.sampled_from([limit, limit + 1, floor, floor - 1]))
    return run.node_key, row


@settings(max_examples=400, deadline=None)
@given(mutated_rows())
def test_the_row_check_and_the_constructors_agree(case: tuple[str, Any]) -> None:
    """Any row the check accepts builds, lazily, without error and as the constructors
    build it; any row the constructors refuse, the check refuses."""
    key, row = case
    assert disagreement(key, row) is None


@settings(max_examples=100, deadline=None)
@given(node_runs)
def test_the_check_accepts_every_row_dumps_writes(run: NodeExecution) -> None:
    """No stored run takes the slow path: the check accepts every row ``dumps`` writes."""
    row = stored_row(run)
    CODEC.check(row)
    assert disagreement(run.node_key, row) is None


def test_a_rule_the_check_lacks_is_caught() -> None:
    """Were a constructor to gain a rule (here: no negative ``run_index``), the agreement
    test fails on a row that breaks it: the check and the constructors must change together."""

    def stricter(key: str, row: Any) -> NodeExecution | None:
        built = constructed(key, row)
        return None if built is None or built.run_index < 0 else built

    row = stored_row(rich_execution().node_executions["start"][0])
    assert disagreement("start", row, stricter) is None
    row[2] = -1
    assert disagreement("start", row, stricter) is not None
    assert disagreement("start", row) is None


@settings(max_examples=150, deadline=None)
@given(mutated_rows())
def test_loads_refuses_or_every_node_builds(case: tuple[str, Any]) -> None:
    """A record with a changed run is refused by ``loads`` (naming the field) or loads
    with every node readable later, equal to what the slow path builds."""
    key, row = case
    doc = orjson.loads(dumps(rich_execution()))
    doc["execution"]["node_executions"][key] = [row]
    text = json.dumps(doc)
    built = constructed(key, orjson.loads(json.dumps(row)))  # an int past 64 bits: a float
    if built is None:
        with pytest.raises(RecordError) as info:
            loads(text)
        assert any(p.startswith("$.execution.node_executions") for p in info.value.problems)
        return
    assert dict(loads(text).node_executions.items())[key] == (built,)


@pytest.mark.parametrize("year", [1, 2, 9998, 9999])
@pytest.mark.parametrize("offset", [1, -1, 365 * 86_400_000_000 - 1, -(365 * 86_400_000_000 - 1)])
def test_times_near_the_ends_of_the_calendar(year: int, offset: int) -> None:
    """A time counted from an anchor near year 1 or 9999 is taken exactly when it is a
    datetime (the check's shortcut for times under a year away stops short of the ends)."""
    for anchor in (f"{year:04d}-01-01T00:00:00Z", f"{year:04d}-12-31T23:59:59.999999Z"):
        row = ["completed", 0, 0, anchor, offset, [[1, offset, offset]]]
        assert disagreement("n", row) is None
        DATETIMES.clear()
        try:
            CODEC.check(row)
        except Exception:  # noqa: BLE001 - refused
            accepted = False
        else:
            accepted = True
        assert accepted == (constructed("n", row) is not None)
