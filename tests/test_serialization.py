"""Serialization: ``dumps``/``loads`` for executions, ``dumps_workflow``/``loads_workflow``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
import yaml
from doubles import T0, conn, raising, returning, trigger, webhook_node, workflow
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import prana
from prana import (
    SCHEMA_VERSION,
    Activation,
    AttemptOutcome,
    AttemptRecord,
    Completed,
    Connection,
    ErrorInfo,
    ExecutionStatus,
    Failed,
    InvalidSettingsError,
    Node,
    NodeExecution,
    NodeSettings,
    NodeStatus,
    RecordError,
    Registry,
    RetryData,
    RetryPolicy,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
    Workflow,
    WorkflowExecution,
    cancel_execution,
    dumps,
    dumps_workflow,
    execute_workflow,
    loads,
    loads_workflow,
    make_converter,
    resume_workflow,
)
from prana._fast_hooks import gen_fast_hooks
from prana._model import slot_twin
from prana._serialization import dumps_outcome, loads_outcome
from prana.shell import ParentRef
from prana.testing import ManualClock


class FlakyError(ConnectionError):
    """A module-level exception class: it is written as its dotted name."""


def stop_after_three(view: Any) -> bool:
    """A registered condition: it is written as its registered name."""
    return bool(view.attempt >= 3)


CONDITIONS = Registry()
CONDITIONS.condition("stop_after_three", stop_after_three)


def as_read(workflow: Workflow) -> Workflow:
    """What reading ``workflow`` back gives: code objects become the names they are written as."""
    return loads_workflow(dumps_workflow(workflow))


def workflow_with(**fields: Any) -> Workflow:
    """``Workflow(**fields)``; mypy cannot infer the ``converter=tuple`` fields' argument type."""
    return Workflow(**fields)


# -- strategies ------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=5), json_values, max_size=3)
names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)
zones = st.sampled_from(
    [timezone.utc, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]
)
aware = st.builds(
    lambda dt, tz: dt.replace(tzinfo=tz),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),  # noqa: DTZ001 - made aware just above
    zones,
)
maybe_aware = st.none() | aware
small_ints = st.integers(min_value=0, max_value=10_000)

errors = st.builds(
    ErrorInfo,
    code=st.sampled_from(["action_error", "timeout", "non_retryable"]),
    type=names,
    module=names,
    message=st.text(max_size=20),
    details=json_values,
    node_key=st.none() | names,
)
attempts = st.builds(
    AttemptRecord,
    number=st.integers(min_value=1, max_value=10),
    started_at=aware,
    ended_at=maybe_aware,
    outcome=st.sampled_from(AttemptOutcome),
    error=st.none() | errors,
    due_at=maybe_aware,
    retry_delay_ms=st.none() | small_ints,
)
node_runs = st.builds(
    NodeExecution,
    node_key=names,
    status=st.sampled_from(NodeStatus),
    execution_index=small_ints,
    run_index=small_ints,
    started_at=aware,
    completed_at=maybe_aware,
    params=json_values,
    output=json_values,
    output_port=st.none() | names,
    error=st.none() | errors,
    attempts=st.lists(attempts, max_size=3).map(tuple),
)
activations = st.builds(
    Activation,
    node_key=names,
    seq=small_ints,
    sources=st.dictionaries(names, st.tuples(names, names), max_size=2),
)
suspensions = st.one_of(
    st.builds(
        lambda data: Suspend("retry", data),
        st.builds(
            RetryData,
            retry_delay_ms=small_ints,
            attempt_number=st.integers(min_value=1, max_value=10),
            max_attempts=st.none() | st.integers(min_value=1, max_value=10),
            original_error=errors,
            resume_at=aware,
        ),
    ),
    st.builds(lambda when: Suspend("timer", TimerData(resume_at=when)), aware),
    st.builds(lambda when: Suspend("webhook", WebhookData(expires_at=when)), maybe_aware),
    st.builds(
        lambda data: Suspend("sub_workflow", data),
        st.builds(
            SubWorkflowData,
            workflow_id=names,
            input=json_values,
            mode=st.sampled_from(["sync", "async", "fire_and_forget"]),
            version=st.none() | st.integers(min_value=1, max_value=9),
            timeout_ms=st.none() | small_ints,
            child_execution_id=st.none() | names,
        ),
    ),
    st.builds(Suspend, st.sampled_from(["approval", "poll"]), json_values),
)
executions = st.builds(
    WorkflowExecution,
    id=names,
    workflow_id=names,
    workflow_version=st.integers(min_value=1, max_value=99),
    status=st.sampled_from(ExecutionStatus),
    input=json_values,
    node_executions=st.dictionaries(names, st.lists(node_runs, min_size=1, max_size=2).map(tuple)),
    state=json_objects,
    pending=st.lists(activations, max_size=2).map(tuple),
    next_index=small_ints,
    suspended_node=st.none() | names,
    suspension=st.none() | suspensions,
    output=json_values,
    error=st.none() | errors,
    parent=st.none()
    | st.builds(
        ParentRef, execution_id=names, node_key=names, mode=st.sampled_from(["sync", "async"])
    ),
    started_at=maybe_aware,
    updated_at=maybe_aware,
    completed_at=maybe_aware,
)


POLICY_FIELDS = {
    "max_attempts": st.integers(min_value=1, max_value=10),
    "backoff": st.sampled_from(["constant", "linear", "exponential", "fibonacci"]),
    "initial_delay": st.floats(min_value=0, max_value=10),
    "multiplier": st.floats(min_value=1, max_value=5),
    "max_delay": st.floats(min_value=10, max_value=100),
    "jitter": st.sampled_from(["none", "full", "equal", "decorrelated"])
    | st.floats(min_value=0.01, max_value=1),
    "jitter_after_cap": st.booleans(),
    "timeout_retries": st.none() | st.integers(min_value=0, max_value=5),
    "seed": st.none() | names,
    "retry_on": st.none()
    | st.lists(
        st.sampled_from(
            [FlakyError, ConnectionError, "TimeoutError", "pkg.mod.Error", "os:system", "x:Y"]
        ),
        min_size=1,
        max_size=3,
    ).map(tuple),
    "exclude": st.none()
    | st.lists(st.sampled_from([KeyError, "ValueError"]), max_size=2).map(tuple),
    # conditions: a registered callable, a template, or any name (old module:qualname text
    # included), which is read back as text and never imported
    "retry_when": st.sampled_from(
        [None, stop_after_three, "{{ $attempt < 3 }}", "os:system", "stop_after_three"]
    ),
    "stop_when": st.sampled_from(
        [None, stop_after_three, "{{ $error.code == 'x' }}", "builtins:eval", "a.b-c"]
    ),
    "retry_on_result": st.sampled_from(
        [None, stop_after_three, "{{ $output.done }}", "subprocess:call", "json:loads"]
    ),
    "timeout": st.none() | st.floats(min_value=0.1, max_value=100),
    "retry_timeout": st.none() | st.floats(min_value=1, max_value=1000),
    "hint_exceeds_max_delay": st.booleans(),
    "enabled": st.booleans(),
}


@st.composite
def policies(draw: st.DrawFn) -> RetryPolicy:
    """A valid ``RetryPolicy`` over the fields it has at runtime."""
    known = {a.name for a in attrs.fields(RetryPolicy)}
    optional = {k: v for k, v in POLICY_FIELDS.items() if k in known}
    kwargs = draw(st.fixed_dictionaries({}, optional=optional))
    try:
        return RetryPolicy(**kwargs)
    except InvalidSettingsError:
        assume(False)
        raise


node_settings = st.builds(
    NodeSettings,
    retry_on_failed=st.booleans(),
    max_retries=st.integers(min_value=1, max_value=10),
    retry_delay_ms=st.integers(min_value=0, max_value=60_000),
    on_error=st.sampled_from(["stop_workflow", "continue", "continue_error_output"]),
    retry=st.none() | st.lists(policies(), min_size=1, max_size=2).map(tuple),
    timeout=st.none() | st.floats(min_value=0.1, max_value=100),
)
nodes = st.builds(
    Node,
    key=names,
    type=st.sampled_from(["manual.trigger", "http.request", "x.y"]),
    params=json_objects,
    settings=node_settings,
    name=st.text(max_size=5),
)
connections = st.builds(Connection, from_node=names, to_node=names, from_port=names, to_port=names)
workflows = st.builds(
    workflow_with,
    id=names,
    nodes=st.lists(nodes, max_size=4).map(tuple),
    connections=st.lists(connections, max_size=4).map(tuple),
    name=st.text(max_size=5),
    version=st.integers(min_value=1, max_value=9),
    variables=json_objects,
    retry_defaults=st.dictionaries(
        st.sampled_from(["*", "http.request"]), st.lists(policies(), min_size=1, max_size=2)
    ),
    max_iterations=st.integers(min_value=1, max_value=1000),
)


def suspended_execution(nodes: int = 2) -> WorkflowExecution:
    """A small execution suspended on a retry, built directly from records."""
    error = ErrorInfo(code="action_error", type="ConnectionError", module="builtins", message="x")
    runs = {
        f"n{i}": (
            NodeExecution(
                node_key=f"n{i}",
                status=NodeStatus.COMPLETED,
                execution_index=i,
                run_index=0,
                started_at=T0,
                completed_at=T0 + timedelta(seconds=1),
                output={"i": i},
                output_port="main",
                attempts=(
                    AttemptRecord(
                        number=1, started_at=T0, ended_at=T0, outcome=AttemptOutcome.COMPLETED
                    ),
                ),
            ),
        )
        for i in range(nodes)
    }
    return WorkflowExecution(
        id="e1",
        workflow_id="wf",
        workflow_version=1,
        status=ExecutionStatus.SUSPENDED,
        node_executions=runs,
        pending=(Activation(node_key="n9", seq=3, sources={"main": ("n1", "main")}),),
        suspended_node="n1",
        suspension=Suspend(
            "retry",
            RetryData(
                retry_delay_ms=500,
                attempt_number=2,
                max_attempts=3,
                original_error=error,
                resume_at=T0 + timedelta(seconds=5),
            ),
        ),
        started_at=T0,
    )


def record(execution: WorkflowExecution) -> dict[str, Any]:
    """The JSON document ``dumps`` writes, parsed."""
    doc: dict[str, Any] = json.loads(dumps(execution))
    return doc


def problems_of(exc: pytest.ExceptionInfo[RecordError]) -> list[str]:
    """The ``path: message`` lines a ``RecordError`` carries."""
    return list(exc.value.problems)


# -- executions: the round-trip law ----------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(executions)
def test_execution_round_trip(execution: WorkflowExecution) -> None:
    """``loads(dumps(x)) == x`` for any execution, whatever it is suspended on."""
    assert loads(dumps(execution)) == execution


def test_document_shape() -> None:
    """The document is ``{"schema_version": 1, "execution": {...}}`` with plain JSON inside.

    A run is a row without its node key; its other times are microseconds after its start.
    """
    doc = record(suspended_execution())
    assert list(doc) == ["schema_version", "execution"]
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    body = doc["execution"]
    assert body["status"] == "suspended"
    assert body["started_at"] == "2030-01-01T00:00:00Z"
    # status, execution_index, run_index, started_at, completed_at, attempts, output
    assert body["node_executions"]["n0"] == [
        ["completed", 0, 0, "2030-01-01T00:00:00Z", 1_000_000, [[1, 0, 0]], {"i": 0}]
    ]
    assert body["pending"][0]["sources"] == {"main": ["n1", "main"]}
    assert body["suspension"] == {
        "kind": "retry",
        "data": {
            "retry_delay_ms": 500,
            "attempt_number": 2,
            "max_attempts": 3,
            "original_error": {
                "code": "action_error",
                "type": "ConnectionError",
                "module": "builtins",
                "message": "x",
                "details": None,
                "node_key": None,
                "traceback": None,
            },
            "resume_at": "2030-01-01T00:00:05Z",
        },
    }


def test_reload_keeps_types() -> None:
    """After a reload, runs are tuples, sources are tuples, datetimes are aware, data is typed."""
    back = loads(dumps(suspended_execution()))
    assert isinstance(back.node_executions["n0"], tuple)
    assert back.pending[0].sources["main"] == ("n1", "main")
    assert back.started_at is not None
    assert back.started_at.tzinfo is not None
    assert back.status is ExecutionStatus.SUSPENDED
    assert back.suspension is not None
    assert isinstance(back.suspension.data, RetryData)
    assert back.suspension.data.resume_at == T0 + timedelta(seconds=5)
    assert back.due_at == T0 + timedelta(seconds=5)


def test_offsets_survive_reload() -> None:
    """A non-UTC offset is kept, so the reloaded time is the same instant and offset."""
    tz = timezone(timedelta(hours=5, minutes=30))
    execution = attrs.evolve(suspended_execution(), started_at=datetime(2030, 5, 1, 9, tzinfo=tz))
    back = loads(dumps(execution))
    assert back.started_at == execution.started_at
    assert back.started_at is not None
    assert back.started_at.utcoffset() == timedelta(hours=5, minutes=30)


@pytest.mark.parametrize(
    ("suspension", "data_type"),
    [
        (Suspend("timer", TimerData(resume_at=T0)), TimerData),
        (Suspend("webhook", WebhookData(expires_at=None)), WebhookData),
        (Suspend("sub_workflow", SubWorkflowData(workflow_id="child", input=[1])), SubWorkflowData),
        (Suspend("approval", {"ask": ["a", 1]}), dict),
        (Suspend("approval", None), type(None)),
    ],
)
def test_suspend_kind_tags_its_data(suspension: Suspend, data_type: type[Any]) -> None:
    """``kind`` decides what ``data`` reads back as; an action's own kind keeps JSON data."""
    execution = attrs.evolve(suspended_execution(), suspension=suspension)
    back = loads(dumps(execution))
    assert back.suspension == suspension
    assert back.suspension is not None
    assert type(back.suspension.data) is data_type


def test_suspension_execution_is_not_stored() -> None:
    """A suspension's own ``execution`` is dropped inside an execution, never nested."""
    inner = suspended_execution()
    execution = attrs.evolve(inner, suspension=Suspend("timer", TimerData(resume_at=T0), inner))
    body = record(execution)["execution"]
    assert body["suspension"] == {
        "kind": "timer",
        "data": {"resume_at": "2030-01-01T00:00:00Z"},
    }
    back = loads(dumps(execution))
    assert back.suspension == Suspend("timer", TimerData(resume_at=T0))


def test_builtin_kind_with_untyped_data_is_refused_on_write() -> None:
    """A built-in kind carrying a dict would not read back equal, so ``dumps`` refuses it."""
    execution = attrs.evolve(suspended_execution(), suspension=Suspend("timer", {"resume_at": 1}))
    with pytest.raises(
        RecordError, match=r"Suspend\(kind='timer'\) carries dict, expected TimerData"
    ):
        dumps(execution)


def test_non_json_output_is_refused_on_write() -> None:
    """An output that is not JSON-native raises ``RecordError`` instead of writing garbage."""
    run = attrs.evolve(suspended_execution().node_executions["n0"][0], output={1: object()})
    execution = attrs.evolve(suspended_execution(), node_executions={"n0": (run,)})
    with pytest.raises(RecordError, match="JSON-native"):
        dumps(execution)


def test_dumps_refuses_other_records() -> None:
    """``dumps`` takes an execution only; a workflow goes through ``dumps_workflow``."""
    with pytest.raises(RecordError, match=r"takes a prana\.WorkflowExecution, got Workflow"):
        dumps(full_workflow())  # type: ignore[arg-type]


def test_loads_accepts_bytes() -> None:
    """``loads`` reads bytes as well as text."""
    execution = suspended_execution()
    assert loads(dumps(execution).encode()) == execution


def test_hand_edited_record_still_loads() -> None:
    """Runs may be objects, defaulted fields may be left out, ``Z`` may stand for UTC."""
    doc = record(suspended_execution())
    run: dict[str, Any] = {
        "node_key": "n0",
        "status": "completed",
        "execution_index": 0,
        "run_index": 0,
        "started_at": "2030-01-01T00:00:00Z",
        "completed_at": "2030-01-01T00:00:01+00:00",
        "output": {"i": 0},
        "output_port": "main",
    }
    run["attempts"] = [{"number": 1, "started_at": T0.isoformat(), "ended_at": T0.isoformat()}]
    run["attempts"][0]["outcome"] = "completed"
    del doc["execution"]["output"]
    doc["execution"]["node_executions"]["n0"][0] = run
    assert loads(json.dumps(doc)) == suspended_execution()


def test_too_long_row_is_named() -> None:
    """A row with more items than the record has fields is refused at its path."""

    def mutate(e: dict[str, Any]) -> None:
        e["node_executions"]["n0"][0][5][0] += ["completed", None, None, None, False, 7]

    (problem,) = problems_of(corrupt(mutate))
    assert problem.startswith("$.execution.node_executions['n0'][0].attempts[0]: ")
    assert "expected at most 8 items for AttemptRecord" in problem


def test_timestamps_are_shared_not_confused() -> None:
    """Equal timestamp texts read as equal datetimes; distinct offsets stay distinct."""
    tz = timezone(timedelta(hours=2))
    run = attrs.evolve(suspended_execution().node_executions["n0"][0], started_at=T0.astimezone(tz))
    execution = attrs.evolve(suspended_execution(), node_executions={"n0": (run,)})
    back = loads(dumps(execution))
    assert back == execution
    back_run = back.node_executions["n0"][0]
    assert back_run.started_at.utcoffset() == timedelta(hours=2)
    assert back_run.attempts[0].started_at.utcoffset() == timedelta(0)


def test_unknown_suspension_field_is_named() -> None:
    """An unknown key beside ``kind`` and ``data`` is reported at the suspension."""
    doc = record(suspended_execution())
    doc["execution"]["suspension"]["execution"] = None
    with pytest.raises(RecordError) as info:
        loads(json.dumps(doc))
    assert problems_of(info) == ["$.execution.suspension: extra fields found (execution)"]


@pytest.mark.parametrize("value", [None, 42, ["a"]])
def test_loads_refuses_non_text(value: Any) -> None:
    """Anything but JSON text or bytes is a ``RecordError``, not a ``TypeError``."""
    with pytest.raises(RecordError, match="expected JSON text or bytes"):
        loads(value)


PLUS2 = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    "suspension",
    [
        Suspend("timer", TimerData(resume_at=datetime(2030, 1, 2, tzinfo=PLUS2))),
        Suspend("webhook", WebhookData(expires_at=None)),
        Suspend("webhook", WebhookData(expires_at=datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=PLUS2))),
        Suspend(
            "sub_workflow",
            SubWorkflowData(
                workflow_id="child",
                input={"q": [1, None, {"r": 1.5}]},
                mode="async",
                version=2,
                timeout_ms=5000,
                child_execution_id="c1",
                expires_at=datetime(2030, 1, 1, 0, 0, 5, tzinfo=PLUS2),
            ),
        ),
        Suspend("approval", {"who": ["ann", {"b": None}], "n": 1.5, "ok": True}),
        Suspend("approval", None),
        Suspend("custom.kind", [1, "two", [3]]),
    ],
    ids=[
        "timer",
        "webhook-never",
        "webhook",
        "sub_workflow",
        "custom",
        "custom-none",
        "custom-list",
    ],
)
def test_every_suspension_kind_round_trips_and_resumes_identically(
    suspension: Suspend,
) -> None:
    """loads(dumps(x)) == x for each kind, and the reloaded execution resumes the same way."""
    registry = Registry()
    registry.register("t.pause", returning(suspension), lambda params, ctx, data: {"resumed": data})
    wf = workflow(Node(key="p", type="t.pause"))
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=PLUS2))
    paused = execute_workflow(wf, {"in": 1}, registry=registry, clock=clock, execution_id="e1")
    assert isinstance(paused, Suspend)
    execution = paused.execution
    assert execution is not None
    reloaded = loads(dumps(execution))
    assert reloaded == execution
    assert reloaded.suspension == Suspend(suspension.kind, suspension.data)
    assert reloaded.due_at == execution.due_at
    data: Any = (
        {"status": "completed", "output": [1]} if suspension.kind == "sub_workflow" else {"d": 1}
    )
    clock.advance(1)
    a = resume_workflow(execution, data, workflow=wf, registry=registry, clock=clock)
    b = resume_workflow(reloaded, data, workflow=wf, registry=registry, clock=clock)
    assert a == b
    assert isinstance(a, Completed)


def test_failed_and_cancelled_executions_round_trip(registry: Registry, clock: ManualClock) -> None:
    """Final executions (failed with an error, cancelled mid-retry) reload equal."""
    failed = execute_workflow(
        workflow(Node(key="x", type="test.down")), None, registry=registry, clock=clock
    )
    assert isinstance(failed, Failed)
    assert loads(dumps(failed.execution)) == failed.execution
    wf = workflow(Node(key="x", type="test.down", settings=NodeSettings(retry=RetryPolicy())))
    paused = execute_workflow(wf, None, registry=registry, clock=clock)
    assert paused.execution is not None
    cancelled = cancel_execution(paused.execution, "stop", clock=clock)
    assert loads(dumps(cancelled)) == cancelled


def test_tuple_in_an_output_does_not_break_the_round_trip(
    registry: Registry, clock: ManualClock
) -> None:
    """An output that is accepted reloads equal (or a non-JSON output fails the node)."""
    registry.register("t.tuple", lambda params, ctx: {"pair": (1, 2)})
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(key="x", type="t.tuple"),
            Node(key="w", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[conn("start", "x"), conn("x", "w")],
    )
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert outcome.execution is not None
    assert loads(dumps(outcome.execution)) == outcome.execution


class DetailedError(Exception):
    def __init__(self) -> None:
        super().__init__("with details")
        self.details = {"pair": (1, 2)}


def test_error_details_with_a_tuple_round_trip(registry: Registry, clock: ManualClock) -> None:
    """A retry suspension whose error carries details reloads equal."""
    registry.register("t.detailed", raising(DetailedError()))
    wf = workflow(Node(key="x", type="t.detailed", settings=NodeSettings(retry=RetryPolicy())))
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    assert loads(dumps(outcome.execution)) == outcome.execution


class PendulumLike(datetime):
    """A datetime subclass, as ``pendulum.DateTime`` is."""


def test_execution_from_a_datetime_subclass_clock_round_trips() -> None:
    """A clock returning an aware datetime subclass gives executions that dumps/loads."""
    outcome = execute_workflow(
        workflow(webhook_node()),
        None,
        registry=Registry(),
        clock=lambda: PendulumLike(2030, 1, 1, tzinfo=timezone.utc),
    )
    assert outcome.execution is not None
    assert loads(dumps(outcome.execution)) == outcome.execution


# -- executions: bad records -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"execution": {}}', "unsupported schema version"),
        ('{"schema_version": 4, "execution": {}}', "unsupported schema version"),
        ('{"schema_version": "1", "execution": {}}', "unsupported schema version"),
        ('{"schema_version": true, "execution": {}}', "unsupported schema version"),
        ('{"schema_version": 1}', "cannot read the execution"),
    ],
)
def test_unreadable_documents(text: str, expected: str) -> None:
    """Invalid JSON, a wrong envelope or an unknown schema version is a ``RecordError``."""
    with pytest.raises(RecordError, match=expected):
        loads(text)


def test_schema_version_problem_names_the_field() -> None:
    """The problem line of an unknown version names ``$.schema_version``."""
    with pytest.raises(RecordError) as info:
        loads('{"schema_version": 7, "execution": {}}')
    expected = "$.schema_version: 7; this prana reads version 1 only (written by a newer prana"
    assert problems_of(info) == [f"{expected}: upgrade prana-workflows to read it)"]


def corrupt(mutate: Any) -> pytest.ExceptionInfo[RecordError]:
    """Apply ``mutate`` to a good record's execution dict and load it, expecting failure."""
    doc = record(suspended_execution())
    mutate(doc["execution"])
    with pytest.raises(RecordError) as info:
        loads(json.dumps(doc))
    return info


def test_bad_enum_value_names_its_path() -> None:
    """An unknown status names ``$.execution.status``."""
    info = corrupt(lambda e: e.update(status="paused"))
    assert len(problems_of(info)) == 1
    assert problems_of(info)[0].startswith("$.execution.status: ")


def test_naive_datetime_names_its_path() -> None:
    """A datetime without an offset is refused, naming the field deep in the record."""
    info = corrupt(
        lambda e: e["node_executions"]["n1"][0][5][0].__setitem__(1, "2030-01-01T00:00:00")
    )
    (problem,) = problems_of(info)
    assert problem.startswith("$.execution.node_executions['n1'][0].attempts[0].started_at: ")
    assert "no UTC offset" in problem


class _Datetime(datetime):
    """A datetime subclass: not the exact class the UTC fast path of ``dumps`` takes."""


@pytest.mark.parametrize("field", ["started_at", "updated_at", "completed_at"])
@pytest.mark.parametrize(
    ("value", "aware"),
    [
        (datetime(2030, 1, 1), False),  # noqa: DTZ001 -- the naive time dumps refuses
        (_Datetime(2030, 1, 1), False),  # naive too, of a subclass
        (datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=2))), True),
    ],
)
def test_dumps_refuses_a_naive_execution_time_only(
    field: str, value: datetime, aware: bool
) -> None:
    """``dumps`` checks the execution's times with ``is_aware`` when one is not a plain UTC
    datetime (the fast path's rule): a naive one is refused naming its field, any aware one
    is written and reads back equal."""
    changes: dict[str, Any] = {field: value}
    execution = attrs.evolve(suspended_execution(), **changes)
    if aware:
        assert getattr(loads(dumps(execution)), field) == value
    else:
        with pytest.raises(RecordError, match=rf"^\$\.execution\.{field}: .* not an aware"):
            dumps(execution)


def test_dumps_takes_utc_times_without_the_full_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clocks' times (UTC datetimes, or None) skip ``is_aware`` in ``dumps``."""
    from prana import _serialization

    def refuse(execution: WorkflowExecution) -> None:
        raise AssertionError("the full check ran")

    monkeypatch.setattr(_serialization, "_check_times", refuse)
    execution = attrs.evolve(suspended_execution(), updated_at=T0, completed_at=T0)
    assert loads(dumps(execution)) == execution


def test_missing_and_extra_fields_are_named() -> None:
    """A missing required field and an unknown field are both reported, with their paths."""

    def mutate(e: dict[str, Any]) -> None:
        del e["node_executions"]["n0"][0][3:]
        e["surprise"] = 1

    problems = problems_of(corrupt(mutate))
    assert "$.execution.node_executions['n0'][0].started_at: required field missing" in problems
    assert any(p.startswith("$.execution: extra fields found (surprise)") for p in problems)


def test_wrong_scalar_types_are_refused() -> None:
    """Strict primitives: a numeric string is not an int, a float is not truncated."""
    problems = problems_of(
        corrupt(
            lambda e: (
                e.update(workflow_version="1"),
                e["node_executions"]["n0"][0].__setitem__(2, 1.5),
            )
        )
    )
    assert any(
        p.startswith("$.execution.workflow_version: expected a whole number") for p in problems
    )
    assert any(p.startswith("$.execution.node_executions['n0'][0].run_index: ") for p in problems)


def test_bad_suspension_data_names_its_path() -> None:
    """Typed suspension data that does not structure names the field inside ``data``."""
    info = corrupt(lambda e: e["suspension"]["data"].update(resume_at="soon"))
    (problem,) = problems_of(info)
    assert problem.startswith("$.execution.suspension.data.resume_at: ")


def test_record_error_is_a_value_error_and_prana_error() -> None:
    """Callers can catch ``RecordError`` as ``PranaError`` or ``ValueError``."""
    with pytest.raises(prana.PranaError):
        loads("nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        loads("nope")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_corrupt_records_never_escape_as_other_errors(data: st.DataObject) -> None:
    """Replacing any field of a stored record with arbitrary JSON reads back or is a RecordError."""
    doc = record(suspended_execution())
    node: Any = doc["execution"]
    path = []
    while isinstance(node, dict | list) and node and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        if not isinstance(node[key], dict | list) or not node[key]:
            break
        node = node[key]
    if not path:
        return
    parent: Any = doc["execution"]
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = data.draw(json_values)
    try:
        loads(json.dumps(doc))
    except RecordError as exc:
        problems = exc.problems
    else:
        return
    assert problems
    assert all(p.startswith("$.execution") for p in problems)


# -- outcomes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome",
    [
        Completed(execution=suspended_execution(), output={"ok": True}),
        Failed(
            execution=suspended_execution(),
            error=ErrorInfo(code="action_error", type="E", module="m", message="boom"),
        ),
        Suspend("webhook", WebhookData(expires_at=T0), suspended_execution()),
    ],
)
def test_outcome_round_trip(outcome: Any) -> None:
    """``loads_outcome(dumps_outcome(o)) == o`` for each outcome type, execution included."""
    assert loads_outcome(dumps_outcome(outcome)) == outcome


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"type": "paused"}, "$.outcome.type: expected one of completed, suspended, failed"),
        ({"surprise": 1}, "$.outcome.surprise: unknown field"),
        ({"execution": None}, "$.outcome.execution: "),
    ],
)
def test_bad_outcome_records(change: dict[str, Any], expected: str) -> None:
    """A stored outcome with a wrong tag, an unknown field or a bad execution is refused."""
    doc = json.loads(dumps_outcome(Completed(execution=suspended_execution(), output=1)))
    doc["outcome"].update(change)
    with pytest.raises(RecordError) as info:
        loads_outcome(json.dumps(doc))
    assert any(p.startswith(expected) for p in info.value.problems)


def test_action_suspend_is_not_an_outcome() -> None:
    """A ``Suspend`` without an execution is an action's return value, not an outcome."""
    with pytest.raises(RecordError, match="expected an executor outcome"):
        dumps_outcome(Suspend("timer", TimerData(resume_at=T0)))  # type: ignore[arg-type]


# -- workflows -------------------------------------------------------------------------------


def full_workflow() -> Workflow:
    """A workflow using every kind of setting, including references and templates."""
    policies = (
        RetryPolicy(
            max_attempts=5,
            backoff="linear",
            initial_delay="500ms",
            max_delay="2m",
            jitter=0.2,
            retry_on=(FlakyError, "TimeoutError"),
            exclude=(KeyError,),
            stop_when=stop_after_three,
            retry_when="{{ $attempt < 4 }}",
        ),
        RetryPolicy(max_attempts=2, backoff="constant", retry_on=("RateLimitError",)),
    )
    return workflow_with(
        id="wf",
        name="Full",
        version=3,
        nodes=(
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="http.request",
                params={"url": "{{ $input.url }}", "n": [1, 2]},
                settings=NodeSettings(retry=policies, on_error="continue", timeout="30s"),
            ),
            Node(
                key="simple",
                type="x.y",
                settings=NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=250),
            ),
        ),
        connections=(
            Connection(from_node="start", to_node="call"),
            Connection(from_node="call", to_node="simple", from_port="error", to_port="other"),
        ),
        variables={"region": "eu"},
        retry_defaults={"*": RetryPolicy(max_attempts=2), "http.request": [RetryPolicy()]},
        max_iterations=50,
    )


@settings(max_examples=100, deadline=None)
@given(workflows)
def test_any_workflow_round_trip(workflow: Workflow) -> None:
    """The written text is a fixed point, and what is read back round-trips equal.

    Classes and callables are written by name, so they come back as those names.
    """
    text = dumps_workflow(workflow)
    back = loads_workflow(text)
    assert dumps_workflow(back) == text
    assert loads_workflow(dumps_workflow(back)) == back


def test_workflow_round_trip() -> None:
    """A workflow reads back with classes and callables as their names, nothing imported."""
    workflow = full_workflow()
    back = loads_workflow(dumps_workflow(workflow))
    assert loads_workflow(dumps_workflow(back)) == back
    policy = back.nodes[1].settings.retry
    assert policy is not None
    assert policy[0].retry_on == (f"{__name__}.FlakyError", "TimeoutError")
    assert policy[0].exclude == ("KeyError",)
    assert policy[0].stop_when == "stop_after_three"
    assert policy[0].matches(FlakyError("x"))
    assert not policy[0].matches(KeyError("x"))
    assert attrs.evolve(back, nodes=back.nodes[:1]) == attrs.evolve(
        workflow, nodes=workflow.nodes[:1]
    )


def test_workflow_code_is_written_as_names() -> None:
    """Classes are written as their names, a callable as its registered name; templates stay."""
    body = json.loads(dumps_workflow(full_workflow()))["workflow"]
    policy = body["nodes"][1]["settings"]["retry"][0]
    assert policy["retry_on"] == [f"{__name__}.FlakyError", "TimeoutError"]
    assert policy["exclude"] == ["KeyError"]
    assert policy["stop_when"] == "stop_after_three"
    assert policy["retry_when"] == "{{ $attempt < 4 }}"


def test_workflow_from_mapping_or_bytes() -> None:
    """``loads_workflow`` takes text, bytes, the parsed envelope or the bare workflow dict."""
    workflow = as_read(full_workflow())
    text = dumps_workflow(workflow)
    assert loads_workflow(text.encode()) == workflow
    assert loads_workflow(json.loads(text)) == workflow
    assert loads_workflow(json.loads(text)["workflow"]) == workflow


def test_workflow_defaults_may_be_omitted() -> None:
    """A hand-written workflow may leave out settings, params and ports: defaults apply."""
    workflow = loads_workflow(
        {
            "id": "wf",
            "nodes": [{"key": "a", "type": "manual.trigger"}, {"key": "b", "type": "x.y"}],
            "connections": [{"from_node": "a", "to_node": "b"}],
        }
    )
    assert workflow == workflow_with(
        id="wf",
        nodes=(Node(key="a", type="manual.trigger"), Node(key="b", type="x.y")),
        connections=(Connection(from_node="a", to_node="b"),),
    )


def test_workflow_from_yaml_with_shorthands() -> None:
    """YAML with durations as text and the retry shorthands reads into policies."""
    text = """
id: wf
nodes:
  - key: a
    type: manual.trigger
  - key: b
    type: http.request
    settings:
      retry: "[ConnectionError -> retry: 2, backoff: 30s]"
      timeout: 10s
  - key: c
    type: x.y
    settings:
      retry: {initial_delay: 500ms, max_delay: 1m, retry_on: [builtins:ConnectionError]}
  - key: d
    type: x.y
    settings:
      retry: 4
connections: []
retry_defaults:
  "*": true
"""
    workflow = loads_workflow(yaml.safe_load(text))
    b, c, d = workflow.nodes[1:]
    assert b.settings.timeout == 10.0
    assert b.settings.retry == tuple(
        RetryPolicy.parse("[ConnectionError -> retry: 2, backoff: 30s]")
    )
    assert c.settings.retry == (
        RetryPolicy(initial_delay=0.5, max_delay=60.0, retry_on=("builtins:ConnectionError",)),
    )
    assert d.settings.retry is not None
    assert d.settings.retry[0].max_attempts == 4
    assert workflow.retry_defaults == {"*": (RetryPolicy(retry_on=("Exception",)),)}  # NoETL's


def test_invalid_settings_name_the_field() -> None:
    """A settings validator's error is a ``RecordError`` whose path reaches the field."""
    doc = json.loads(dumps_workflow(full_workflow()))
    doc["workflow"]["nodes"][2]["settings"]["max_retries"] = 0
    with pytest.raises(RecordError) as info:
        loads_workflow(doc)
    (problem,) = problems_of(info)
    assert problem.startswith("$.workflow.nodes[2].settings.max_retries: ")
    assert "1 to 10" in problem


def test_invalid_policy_names_the_field() -> None:
    """A bad policy value inside a list of policies names its index and field."""
    doc = json.loads(dumps_workflow(full_workflow()))["workflow"]
    doc["nodes"][1]["settings"]["retry"][1]["max_attempts"] = 0
    doc["nodes"][1]["settings"]["retry"][0]["initial_delay"] = "soon"
    with pytest.raises(RecordError) as info:
        loads_workflow(doc)
    problems = problems_of(info)
    assert any(p.startswith("$.nodes[1].settings.retry[1].max_attempts: ") for p in problems)
    assert any(p.startswith("$.nodes[1].settings.retry[0].initial_delay: ") for p in problems)


def test_typo_in_workflow_is_an_error() -> None:
    """An unknown key (a typo) is refused rather than silently ignored."""
    with pytest.raises(RecordError) as info:
        loads_workflow(
            {
                "id": "wf",
                "nodes": [{"key": "a", "type": "t", "settings": {"retries": 3}}],
                "connections": [],
            }
        )
    assert problems_of(info) == ["$.nodes[0].settings: extra fields found (retries)"]


@pytest.mark.parametrize(
    "ref", ["no_such_module_xyz:Error", "builtins:NoSuchError", "builtins:dict", "os:system"]
)
def test_class_reference_text_is_read_as_a_name(ref: str) -> None:
    """``module:Class`` text in retry_on is a name matched through the MRO, never imported."""
    doc = {
        "id": "wf",
        "nodes": [{"key": "a", "type": "t", "settings": {"retry": [{"retry_on": [ref]}]}}],
        "connections": [],
    }
    policy = loads_workflow(doc).nodes[0].settings.retry
    assert policy is not None
    assert policy[0].retry_on == (ref,)


def test_callable_reference_text_is_read_as_a_name() -> None:
    """A ``module:function`` condition is a name for the registry, never imported."""
    doc = {
        "id": "wf",
        "nodes": [{"key": "a", "type": "t", "settings": {"retry": [{"stop_when": "nope_mod:f"}]}}],
        "connections": [],
    }
    policy = loads_workflow(doc).nodes[0].settings.retry
    assert policy is not None
    assert policy[0].stop_when == "nope_mod:f"


def test_lambda_is_refused_naming_the_field() -> None:
    """A lambda cannot be stored by reference: the error names the field and the fix."""
    policy = RetryPolicy(retry_when=lambda view: True)
    workflow = attrs.evolve(full_workflow(), retry_defaults={"*": policy})
    with pytest.raises(InvalidSettingsError) as info:
        dumps_workflow(workflow)
    message = str(info.value)
    assert "$.workflow.retry_defaults['*'][0].retry_when" in message
    assert "is not registered" in message
    assert "registry.condition('<lambda>'" not in message
    assert "registry.condition('name', fn)" in message


def test_local_exception_class_is_written_by_its_dotted_name() -> None:
    """A class defined in a function needs no import: its dotted name matches by name."""

    class LocalError(Exception):
        pass

    node = Node(key="a", type="t", settings=NodeSettings(retry=RetryPolicy(retry_on=(LocalError,))))
    back = as_read(workflow_with(id="wf", nodes=(node,), connections=()))
    policy = back.nodes[0].settings.retry
    assert policy is not None
    assert policy[0].retry_on == (f"{__name__}.{LocalError.__qualname__}",)
    assert policy[0].matches(LocalError("x"))


def test_literal_setting_lists_the_choices() -> None:
    """A value outside a fixed set of choices names the field and lists the choices."""
    with pytest.raises(RecordError) as info:
        loads_workflow(
            {
                "id": "wf",
                "nodes": [{"key": "a", "type": "t", "settings": {"on_error": "explode"}}],
                "connections": [],
            }
        )
    choices = "'stop_workflow', 'continue', 'continue_error_output'"
    assert problems_of(info) == [f"$.nodes[0].settings.on_error: expected one of {choices}"]


def test_local_function_is_refused() -> None:
    """A function that no registry knows cannot be written as data, so it is refused."""

    def local(view: Any) -> bool:
        return True

    node = Node(key="a", type="t", settings=NodeSettings(retry=RetryPolicy(stop_when=local)))
    workflow = workflow_with(id="wf", nodes=(node,), connections=())
    with pytest.raises(
        InvalidSettingsError, match=r"\$\.workflow\.nodes\[0\]\.settings\.retry\[0\]\.stop_when"
    ):
        dumps_workflow(workflow)


def test_every_policy_field_survives() -> None:
    """Each ``RetryPolicy`` field, read from ``attrs.fields`` at runtime, round-trips."""
    policy = as_read(full_workflow()).nodes[1].settings.retry
    assert policy is not None
    back = as_read(as_read(full_workflow())).nodes[1].settings.retry
    assert back is not None
    for field in attrs.fields(RetryPolicy):
        assert getattr(back[0], field.name) == getattr(policy[0], field.name), field.name


def test_make_converter_returns_a_working_converter() -> None:
    """``make_converter()`` builds an independent orjson converter with the same hooks."""
    conv = make_converter()
    execution = suspended_execution()
    assert conv is not make_converter()
    assert conv.loads(conv.dumps(execution), WorkflowExecution) == execution


@attrs.frozen(kw_only=True, weakref_slot=False)
class _Plain:
    """A frozen record without a weakref slot: its instances can be built through a twin."""

    a: int
    b: str = "x"


def test_records_built_through_a_slot_twin_are_genuine() -> None:
    """A record read through the slot twin is a frozen instance of the record class itself."""
    conv = make_converter()
    attrs.resolve_types(_Plain)
    _, structure = gen_fast_hooks(conv, _Plain)
    assert slot_twin(_Plain) is not None
    built = structure({"a": 1, "b": "y"}, None)
    assert type(built) is _Plain
    assert built == _Plain(a=1, b="y")
    assert structure({"a": 2}, None) == _Plain(a=2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.a = 3  # type: ignore[misc]


def test_slot_twin_is_refused_for_a_weakref_slot() -> None:
    """A record with a ``__weakref__`` slot cannot change class; its rows use slot setters."""

    @attrs.frozen
    class WithWeakref:
        a: int

    assert slot_twin(WithWeakref) is None


SETTINGS_FORMS = [
    NodeSettings(),
    NodeSettings(retry_on_failed=True, max_retries=10, retry_delay_ms=0, on_error="continue"),
    NodeSettings(
        retry="[(ConnectionError, TimeoutError) -> retry: 3, backoff: 2s] [retry: 1] [timeout: 5s]",
        on_error="continue_error_output",
    ),
    NodeSettings(
        retry=[
            RetryPolicy(
                retry_on=("ConnectionError",),
                exclude=("ConnectionResetError",),
                jitter=0.25,
                backoff="fibonacci",
            ),
            RetryPolicy(enabled=False),
        ]
    ),
    NodeSettings(
        retry=RetryPolicy(
            max_attempts=None,
            retry_timeout=timedelta(minutes=5),
            retry_on_result="{{ $output.status == 'pending' }}",
            retry_when="{{ $attempt < 4 }}",
            timeout="500ms",
            hint_exceeds_max_delay=True,
            seed="s",
            initial_delay="250ms",
            max_delay="2m",
            multiplier=3,
            backoff="linear",
            jitter="decorrelated",
        )
    ),
    NodeSettings(retry=3, timeout=timedelta(seconds=2)),
    NodeSettings(retry=True),
    NodeSettings(retry=False),
    NodeSettings(retry={"max_retries": 2, "delay": "1s"}),
]


@pytest.mark.parametrize("settings", SETTINGS_FORMS)
def test_workflow_with_every_settings_form_round_trips(settings: NodeSettings) -> None:
    """loads_workflow(dumps_workflow(wf)) == wf for each way of writing node settings."""
    wf = Workflow(
        id="w",
        name="every form",
        version=2,
        variables={"v": [1, {"a": None}]},
        nodes=[trigger(), Node(key="x", type="test.inputs", settings=settings, name="X")],
        connections=[conn("start", "x")],
        retry_defaults={
            "*": RetryPolicy(enabled=False),
            "http.request": "[retry: 2]",
            "test.inputs": 2,
        },
        max_iterations=7,
    )
    assert as_read(wf) == wf


@pytest.mark.parametrize(
    "policy",
    [
        RetryPolicy(retry_on=("builtins:ConnectionError",)),
        RetryPolicy(stop_when="json:loads"),
        RetryPolicy(retry_on_result="json:loads"),
    ],
    ids=["retry_on", "stop_when", "retry_on_result"],
)
def test_reference_strings_round_trip(policy: RetryPolicy) -> None:
    """A policy written with 'module:qualname' text reloads equal to itself."""
    wf = workflow(Node(key="x", type="test.inputs", settings=NodeSettings(retry=policy)))
    assert as_read(wf) == wf
