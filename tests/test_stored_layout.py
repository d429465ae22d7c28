"""The stored layout (schema 1): runs as rows, other versions refused, the fast paths kept.

``prana._compact`` writes a node run as a row without its node key, its times as
microseconds after its start.
"""

from __future__ import annotations

import copy
import json
import pickle
from datetime import timedelta, timezone
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from stored_records import PLUS2, T0, at, rich_execution
from test_serialization import executions

from prana import (
    SCHEMA_VERSION,
    AttemptRecord,
    Completed,
    Connection,
    Node,
    NodeExecution,
    RecordError,
    Registry,
    Workflow,
    WorkflowExecution,
    dumps,
    execute_workflow,
    loads,
)
from prana._compact import ATTEMPT_LAYOUT, RUN_LAYOUT, check_layouts, named_runs
from prana._fast_hooks import DATETIMES
from prana._model import StoredRow
from prana._serialization import _codec, _detailed, _fast, dumps_outcome, loads_outcome


def body(text: str) -> Any:
    """The execution body of a stored document."""
    return orjson.loads(text)["execution"]


@pytest.mark.parametrize("version", [0, 2, 3, "1", None])
def test_a_record_of_another_schema_version_is_refused(version: Any) -> None:
    """Only schema 1 is read: any other version is a ``RecordError`` naming the field and
    the fix (a newer one says to upgrade prana), never a crash or a guess."""
    doc = json.loads(dumps(rich_execution()))
    doc["schema_version"] = version
    with pytest.raises(RecordError) as info:
        loads(json.dumps(doc))
    (problem,) = info.value.problems
    assert problem.startswith(f"$.schema_version: {version!r}; this prana reads version 1 only")
    assert ("upgrade prana-workflows" in problem) == (version in (2, 3))


def test_schema_1_is_written_and_reads_back_exactly() -> None:
    """The current version is written; every time, offset and attempt comes back."""
    execution = rich_execution()
    text = dumps(execution)
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION == 1
    back = loads(text)
    assert back == execution
    loop = back.node_executions["loop"]
    assert loop[1].started_at.utcoffset() == timedelta(hours=2)
    assert loop[1].completed_at is not None
    assert loop[1].completed_at.utcoffset() == timedelta(hours=2)
    assert loop[0].started_at.tzinfo is timezone.utc
    assert [a.redrive for a in back.node_executions["flaky"][0].attempts] == [False, False, True]


def test_runs_are_rows() -> None:
    """A run is a row without its key; UTC times after its start are microseconds."""
    runs = body(dumps(rich_execution()))["node_executions"]
    assert runs["start"] == [["completed", 0, 0, "2030-01-01T12:00:00.250000Z", 0, [[1, 0, 0]],
                              {"in": [1, 2]}, {}]]  # fmt: skip
    flaky = runs["flaky"][0]
    assert flaky[:5] == ["completed", 1, 0, "2030-01-01T12:00:00.251000Z", 2_512_000]
    assert flaky[5][0][:4] == [1, 0, 12_000, "failed"]
    assert flaky[5][1] == [2, 1_019_000, 1_020_000, "interrupted", None, 1_012_000]
    assert flaky[5][2] == [1, 2_499_000, 2_512_000, "completed", None, 2_399_000, None, True]
    # A time in another offset, or any time of a run started in one, stays ISO text.
    failed_loop = runs["loop"][1]
    assert failed_loop[3] == at(3_001).astimezone(PLUS2).isoformat()
    assert failed_loop[4] == at(3_001).astimezone(PLUS2).isoformat()
    assert failed_loop[5][0][1] == "2030-01-01T12:00:03.251000Z"
    assert runs["loop"][0][4] == 0
    assert runs["loop"][0][8] == "true"


def test_rows_are_at_most_half_of_objects() -> None:
    """The point of the layout: 100 small runs (a real clock's times, one attempt each) in
    under half the bytes of objects of named fields (the converter's per-record form)."""
    base = rich_execution().node_executions["start"][0]
    runs = {}
    for i in range(100):
        start = at(i * 1_337)
        attempt = attrs.evolve(base.attempts[0], started_at=start, ended_at=start + timedelta(
            microseconds=917))  # fmt: skip
        runs[f"n{i:03d}"] = (
            attrs.evolve(base, node_key=f"n{i:03d}", execution_index=i, started_at=start,
                         completed_at=attempt.ended_at, attempts=(attempt,), output=i),
        )  # fmt: skip
    execution = attrs.evolve(rich_execution(), node_executions=runs)
    rows = len(dumps(execution).encode())
    objects = len(orjson.dumps({"schema_version": 1, "execution": _fast().unstructure(execution)}))
    assert loads(dumps(execution)) == execution
    assert rows <= 0.5 * objects


def test_a_run_under_another_key_keeps_its_key() -> None:
    """A run filed under a key that is not its node's (never built by the engine, but a
    valid record) is written as an object and reads back with its own key."""
    execution = rich_execution()
    moved = {"elsewhere": execution.node_executions["start"]}
    odd = attrs.evolve(execution, node_executions=moved)
    assert loads(dumps(odd)) == odd
    assert loads(dumps(odd)).node_executions["elsewhere"][0].node_key == "start"


@settings(max_examples=100, deadline=None)
@given(executions)
def test_everything_dumps_writes_takes_the_fast_reader(execution: WorkflowExecution) -> None:
    """The generated reader reads what ``dumps`` writes without falling back, and the slow
    path (runs rewritten as objects of named fields, the detailed converter) agrees."""
    doc = body(dumps(execution))
    DATETIMES.clear()
    fast = _codec()[1](doc, None)
    assert fast == execution
    runs, problems = named_runs(doc["node_executions"], "$.execution.node_executions")
    assert problems == []
    slow = _detailed().structure({**doc, "node_executions": runs}, WorkflowExecution)
    assert slow == execution


def test_the_fast_reader_takes_the_rich_record() -> None:
    """Every kind of run and attempt (failed, retried, redriven, non-UTC) reads fast."""
    DATETIMES.clear()
    assert _codec()[1](body(dumps(rich_execution())), None) == rich_execution()


def test_outcomes_are_written_in_schema_1() -> None:
    """``dumps_outcome`` writes the execution as ``dumps`` does."""
    outcome = Completed(execution=rich_execution(), output=[1])
    text = dumps_outcome(outcome)
    assert json.loads(text)["schema_version"] == 1
    assert loads_outcome(text) == outcome


def test_layouts_hold_every_field() -> None:
    """Each row layout lists its record's fields once (a new field fails here until it
    is added at the end of the layout) and leads with the fields always written."""
    check_layouts()
    assert [name for name, _ in RUN_LAYOUT] == [
        "status", "execution_index", "run_index", "started_at", "completed_at", "attempts",
        "output", "params", "output_port", "error",
    ]  # fmt: skip
    assert [name for name, _ in ATTEMPT_LAYOUT] == [
        "number", "started_at", "ended_at", "outcome", "error", "due_at", "retry_delay_ms",
        "redrive",
    ]  # fmt: skip
    assert {name for name, _ in RUN_LAYOUT} | {"node_key"} == {
        a.name for a in attrs.fields(NodeExecution)
    }
    assert {name for name, _ in ATTEMPT_LAYOUT} == {a.name for a in attrs.fields(AttemptRecord)}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda runs: runs["flaky"][0].__setitem__(3, "2030-01-01T12:00:00+02:00"),
            (
                "$.execution.node_executions['flaky'][0].completed_at: 2512000 counts microseconds "
                "from the run's started_at, which is not a readable UTC time"
            ),
        ),
        (
            lambda runs: runs["flaky"][0].__setitem__(3, "soon"),
            "$.execution.node_executions['flaky'][0].started_at: ",
        ),
        (
            lambda runs: runs["flaky"][0][5][1].__setitem__(2, "x"),
            "$.execution.node_executions['flaky'][0].attempts[1].ended_at: ",
        ),
        (
            lambda runs: runs["flaky"][0][5][1].__setitem__(2, 10**30),
            "$.execution.node_executions['flaky'][0].attempts[1].ended_at: ",
        ),
        (
            lambda runs: runs["start"][0].extend(["main", None, "x"]),
            "$.execution.node_executions['start'][0]: expected at most 10 items",
        ),
    ],
)
def test_bad_rows_name_their_field(change: Any, expected: str) -> None:
    """A bad row item is reported at its field, as any other bad value is."""
    doc = json.loads(dumps(rich_execution()))
    change(doc["execution"]["node_executions"])
    with pytest.raises(RecordError) as info:
        loads(json.dumps(doc))
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_times_at_microsecond_precision_survive() -> None:
    """Offsets are exact to the microsecond, before the anchor as well as after it."""
    run = rich_execution().node_executions["flaky"][0]
    early = attrs.evolve(run.attempts[0], due_at=T0 - timedelta(days=400, microseconds=7))
    moved = attrs.evolve(run, attempts=(early, *run.attempts[1:]))
    execution = attrs.evolve(rich_execution(), node_executions={"flaky": (moved,)})
    assert loads(dumps(execution)) == execution


def test_a_run_remembers_its_row_and_nothing_else_sees_it() -> None:
    """``loads`` and ``dumps`` leave each run its stored row (``StoredRow``): ``dumps``
    writes it again as it is; equality, repr, pickling, copies and evolve never carry it."""
    text = dumps(rich_execution())
    back = loads(text)
    run = back.node_executions["flaky"][0]
    row = body(text)["node_executions"]["flaky"][0]
    assert run._row == row
    assert "_row" not in repr(run)
    assert pickle.loads(pickle.dumps(run)) == run
    assert getattr(pickle.loads(pickle.dumps(run)), "_row", None) is None
    assert getattr(copy.deepcopy(run), "_row", None) is None
    assert getattr(attrs.evolve(run, output="changed"), "_row", None) is None
    assert dumps(back) == text
    fresh = rich_execution()
    assert getattr(fresh.node_executions["start"][0], "_row", None) is None
    dumps(fresh)
    remembered = orjson.dumps(fresh.node_executions["start"][0]._row, option=orjson.OPT_UTC_Z)
    assert orjson.loads(remembered) == body(text)["node_executions"]["start"][0]


def test_dumps_writes_the_remembered_row() -> None:
    """The rule the memo relies on: a remembered row is written instead of the fields, so
    only a row that reads back as the record may be remembered (tests fail otherwise)."""
    execution = rich_execution()
    run = execution.node_executions["start"][0]
    vars(StoredRow)["_row"].__set__(run, ["completed", 0, 0, "2030-01-01T00:00:00Z"])
    assert body(dumps(execution))["node_executions"]["start"] == [
        ["completed", 0, 0, "2030-01-01T00:00:00Z"]
    ]


@settings(max_examples=100, deadline=None)
@given(executions)
def test_a_loaded_execution_writes_back_the_text_it_was_read_from(
    execution: WorkflowExecution,
) -> None:
    """Remembered rows are the rows read: ``dumps(loads(text)) == text``."""
    text = dumps(execution)
    assert dumps(loads(text)) == text
    assert dumps(execution) == text


def test_a_run_with_a_time_that_is_not_a_datetime_is_refused_on_write() -> None:
    """A hand-built run whose time is not a datetime is a ``RecordError``, not an
    ``AttributeError`` from the layout's arithmetic (text where a time belongs would not
    read back)."""
    run = attrs.evolve(rich_execution().node_executions["start"][0], started_at="noon")  # type: ignore[arg-type]
    execution = attrs.evolve(rich_execution(), node_executions={"start": (run,)})
    with pytest.raises(RecordError):
        loads(dumps(execution))


def test_a_run_the_engine_builds_has_its_row_slot_set_to_none() -> None:
    """The engine's runs say "no row yet" with ``None`` in the slot, not an unset slot:
    ``dumps`` reads the slot of every run it writes, and an unset slot costs an
    AttributeError raised and discarded on each read (two per new run)."""
    registry = Registry()
    registry.register("test.ok", lambda params, ctx: {"ok": True})
    workflow = Workflow(
        id="w",
        nodes=[Node(key="start", type="manual.trigger"), Node(key="a", type="test.ok")],
        connections=[Connection(from_node="start", to_node="a")],
    )
    outcome = execute_workflow(workflow, {"x": 1}, registry=registry)
    run = outcome.execution.node_executions["a"][0]
    assert vars(StoredRow)["_row"].__get__(run) is None  # raises AttributeError if unset
    dumps(outcome.execution)
    assert run._row == body(dumps(outcome.execution))["node_executions"]["a"][0]
