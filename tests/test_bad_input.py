"""Bad input at every public entry point: a clear ``PranaError`` naming the field, nothing lost.

The standard: invalid workflows, policies, stored records and resume data never crash with
a traceback from deep inside; they raise a ``prana.PranaError`` (also a ``ValueError`` when
it is about a bad value) whose message names the field and the fix, and a failed operation
never loses or overwrites what is already stored. Cases that do not meet it yet are marked
``xfail(strict=True)`` with what happens instead, so fixing one turns its test red until
the mark is removed.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from doubles import T0, webhook_node, workflow

from prana import (
    Connection,
    ExecutionStatus,
    InvalidSettingsError,
    InvalidWorkflowError,
    Node,
    NodeSettings,
    PranaError,
    RecordError,
    Registry,
    ResumeError,
    RetryPolicy,
    Suspend,
    TimerData,
    Workflow,
    WorkflowExecution,
    cancel_execution,
    dumps,
    dumps_workflow,
    execute_workflow,
    loads,
    loads_workflow,
    resume_workflow,
    validate,
)
from prana._graph import storable_int_problems
from prana.shell import expire_webhook
from prana.testing import ManualClock
from scheduling import (
    ExecutionNotFound,
    Runner,
    StaleVersionError,
    StoreError,
)
from scheduling._cli import main
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.postgres import PostgresStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from scheduling.abc import ExecutionStore

NAIVE = datetime(2030, 1, 1)  # noqa: DTZ001 - the bad input under test
TRIGGER = Node(key="t", type="manual.trigger")
WEBHOOK = Workflow(
    id="hook",
    nodes=[TRIGGER, Node(key="wait", type="wait.wait", params={"mode": "webhook"})],
    connections=[Connection(from_node="t", to_node="wait")],
)
PARENT = Workflow(
    id="parent",
    nodes=[
        TRIGGER,
        Node(key="sub", type="workflow.execute_workflow", params={"workflow_id": "child"}),
    ],
    connections=[Connection(from_node="t", to_node="sub")],
)
UNREACHABLE_DSN = "postgresql://postgres@127.0.0.1:1/prana?connect_timeout=1"


def xfail(reason: str) -> pytest.MarkDecorator:
    """A strict xfail: the case fails the standard today; ``reason`` says what happens instead."""
    return pytest.mark.xfail(strict=True, reason=reason)


def bad(value: object) -> Any:
    """``value``, typed ``Any``: the wrong-typed input under test, passed past the type checker."""
    return value


def case(
    call: Callable[..., object],
    *needles: str,
    id: str,
    marks: pytest.MarkDecorator | tuple[pytest.MarkDecorator, ...] = (),
) -> Any:
    """One parametrized case: ``call`` must raise a clear error whose message holds ``needles``."""
    return pytest.param(call, needles, id=id, marks=marks)


def clear_error(
    call: Callable[[], object],
    *needles: str,
    value: bool = True,
    kind: type[PranaError] = PranaError,
) -> PranaError:
    """Run ``call``; assert it raises ``kind`` (a ValueError if ``value``) naming every needle."""
    with pytest.raises(kind) as caught:
        call()
    exc = caught.value
    if value:
        assert isinstance(exc, ValueError), f"{type(exc).__name__} is not a ValueError"
    message = str(exc)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return exc


def suspended_webhook() -> WorkflowExecution:
    """An execution of ``WEBHOOK`` waiting on its webhook."""
    outcome = execute_workflow(WEBHOOK, {"a": 1}, clock=ManualClock(start=T0))
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    return outcome.execution


def suspended_parent() -> WorkflowExecution:
    """An execution of ``PARENT`` waiting on its sub-workflow."""
    outcome = execute_workflow(PARENT, {}, clock=ManualClock(start=T0))
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "sub_workflow"
    assert outcome.execution is not None
    return outcome.execution


# -- model constructors ------------------------------------------------------------------


def _wf(**kwargs: Any) -> Callable[[], object]:
    base: dict[str, Any] = {"id": "w", "nodes": [TRIGGER], "connections": []}
    return lambda: Workflow(**{**base, **kwargs})


def _node(**kwargs: Any) -> Callable[[], object]:
    return lambda: Node(**{"key": "a", "type": "x.y", **kwargs})


def _conn(**kwargs: Any) -> Callable[[], object]:
    return lambda: Connection(**{"from_node": "a", "to_node": "b", **kwargs})


def _settings(**kwargs: Any) -> Callable[[], object]:
    return lambda: NodeSettings(**kwargs)


def _policy(**kwargs: Any) -> Callable[[], object]:
    return lambda: RetryPolicy(**kwargs)


CONSTRUCTOR_CASES = [
    case(_wf(id=None), "Workflow.id", id="workflow-id-none"),
    case(_wf(version="1"), "Workflow.version", id="workflow-version-str"),
    case(_wf(version=True), "Workflow.version", id="workflow-version-bool"),
    case(_wf(version=0), "Workflow.version", id="workflow-version-0"),
    case(_wf(variables=[1]), "Workflow.variables", id="workflow-variables-list"),
    case(_wf(retry_defaults=[1]), "Workflow.retry_defaults", id="retry-defaults-list"),
    case(_wf(retry_defaults={"*": -1}), "retry_defaults['*']", id="retry-defaults-neg"),
    case(_wf(max_iterations=0), "Workflow.max_iterations", id="max-iterations-0"),
    case(_node(key=None), "Node.key", id="node-key-none"),
    case(_node(key=""), "Node.key", id="node-key-empty"),
    case(_node(type=5), "Node.type", id="node-type-int"),
    case(_node(params=[1]), "Node.params", id="node-params-list"),
    case(_node(params=None), "Node.params", id="node-params-none"),
    case(_node(settings={"max_retries": 2}), "Node.settings", id="node-settings-dict"),
    case(_conn(from_node=None), "Connection.from_node", id="conn-from-none"),
    case(_conn(to_node=1), "Connection.to_node", id="conn-to-int"),
    case(_conn(from_port=""), "Connection.from_port", id="conn-port-empty"),
    case(_settings(retry_on_failed="yes"), "retry_on_failed", id="ns-flag-str"),
    case(_settings(max_retries="3"), "max_retries", "1 to 10", id="ns-retries-str"),
    case(_settings(max_retries=True), "max_retries", id="ns-retries-bool"),
    case(_settings(max_retries=0), "max_retries", id="ns-retries-0"),
    case(_settings(max_retries=11), "max_retries", id="ns-retries-11"),
    case(_settings(retry_delay_ms=-1), "retry_delay_ms", id="ns-delay-neg"),
    case(_settings(retry_delay_ms=1.5), "retry_delay_ms", id="ns-delay-float"),
    case(_settings(on_error="retry"), "on_error", "continue", id="ns-on-error-unknown"),
    case(_settings(on_error=None), "on_error", id="ns-on-error-none"),
    case(_settings(on_error=[]), "on_error", id="ns-on-error-list"),
    case(_settings(retry="[bad"), "NodeSettings.retry", "column", id="ns-retry-text"),
    case(_settings(retry=[]), "NodeSettings.retry", id="ns-retry-empty-list"),
    case(_settings(retry=-1), "NodeSettings.retry", id="ns-retry-negative"),
    case(_settings(retry={"foo": 1}), "'foo'", id="ns-retry-unknown-key"),
    case(_settings(timeout=-1), "NodeSettings.timeout", id="ns-timeout-neg"),
    case(_settings(timeout=math.nan), "NodeSettings.timeout", id="ns-timeout-nan"),
    case(_settings(timeout=math.inf), "NodeSettings.timeout", id="ns-timeout-inf"),
    case(_settings(timeout="abc"), "NodeSettings.timeout", "30s", id="ns-timeout-text"),
    case(_settings(timeout=[]), "NodeSettings.timeout", id="ns-timeout-list"),
    case(_settings(timeout=True), "NodeSettings.timeout", id="ns-timeout-bool"),
    case(_settings(timeout=timedelta(seconds=-1)), "NodeSettings.timeout", id="ns-timeout-neg-td"),
    case(_policy(max_attempts=0), "max_attempts", ">= 1", id="rp-attempts-0"),
    case(_policy(max_attempts=-1), "max_attempts", id="rp-attempts-neg"),
    case(_policy(max_attempts="3"), "max_attempts", id="rp-attempts-str"),
    case(_policy(max_attempts=True), "max_attempts", id="rp-attempts-bool"),
    case(_policy(max_attempts=2.5), "max_attempts", id="rp-attempts-float"),
    case(_policy(max_attempts=None), "retry_timeout", id="rp-attempts-none"),
    case(_policy(backoff="quadratic"), "backoff", "fibonacci", id="rp-backoff-unknown"),
    case(_policy(backoff=None), "backoff", id="rp-backoff-none"),
    case(_policy(backoff=5), "backoff", id="rp-backoff-int"),
    case(_policy(jitter="lots"), "jitter", "decorrelated", id="rp-jitter-unknown"),
    case(_policy(jitter=2.0), "jitter", id="rp-jitter-above-1"),
    case(_policy(jitter=-0.1), "jitter", id="rp-jitter-neg"),
    case(_policy(jitter=math.nan), "jitter", id="rp-jitter-nan"),
    case(_policy(jitter=[]), "jitter", id="rp-jitter-list"),
    case(_policy(initial_delay=-1), "initial_delay", id="rp-initial-neg"),
    case(_policy(initial_delay=math.nan), "initial_delay", id="rp-initial-nan"),
    case(_policy(initial_delay=math.inf), "initial_delay", id="rp-initial-inf"),
    case(_policy(initial_delay="5x"), "initial_delay", "30s", id="rp-initial-text"),
    case(_policy(initial_delay=None), "initial_delay", id="rp-initial-none"),
    case(_policy(initial_delay=10, max_delay=1), "max_delay", "initial_delay", id="rp-max-below"),
    case(_policy(max_delay=math.inf), "max_delay", id="rp-max-inf"),
    case(_policy(multiplier=-1), "multiplier", id="rp-multiplier-neg"),
    case(_policy(multiplier=math.nan), "multiplier", id="rp-multiplier-nan"),
    case(_policy(multiplier=math.inf), "multiplier", id="rp-multiplier-inf"),
    case(_policy(multiplier="2"), "multiplier", id="rp-multiplier-str"),
    case(_policy(multiplier=True), "multiplier", id="rp-multiplier-bool"),
    case(_policy(retry_on=[int]), "retry_on", "exception class", id="rp-retry-on-int"),
    case(_policy(retry_on=5), "retry_on", id="rp-retry-on-scalar"),
    case(_policy(retry_on=[5]), "retry_on", id="rp-retry-on-list-int"),
    case(_policy(retry_on=[""]), "retry_on", id="rp-retry-on-empty-name"),
    case(_policy(exclude=[dict]), "exclude", id="rp-exclude-dict"),
    case(_policy(retry_when=5), "retry_when", id="rp-retry-when-int"),
    case(_policy(stop_when=[]), "stop_when", id="rp-stop-when-list"),
    case(_policy(retry_on_result=5), "retry_on_result", id="rp-on-result-int"),
    case(_policy(timeout=-1), "timeout", id="rp-timeout-neg"),
    case(_policy(timeout=0), "timeout", "positive", id="rp-timeout-0"),
    case(_policy(retry_timeout=math.nan), "retry_timeout", id="rp-budget-nan"),
    case(_policy(enabled="no"), "enabled", id="rp-enabled-str"),
    case(_policy(seed=5), "seed", id="rp-seed-int"),
    case(_policy(hint_exceeds_max_delay="x"), "hint_exceeds_max_delay", id="rp-hint-str"),
    case(lambda: RetryPolicy().delay_for(0), "delay_for", id="rp-delay-for-0"),
    case(lambda: RetryPolicy().schedule(-1), "schedule", id="rp-schedule-neg"),
    case(lambda: RetryPolicy().schedule(bad("3")), "schedule", id="rp-schedule-str"),
    # What fails the standard today:
    case(
        _wf(nodes=None),
        "Workflow.nodes",
        id="workflow-nodes-none",
    ),
    case(
        _wf(nodes=5),
        "Workflow.nodes",
        id="workflow-nodes-int",
    ),
    case(
        _wf(connections=None),
        "Workflow.connections",
        id="workflow-connections-none",
    ),
    case(
        _wf(name=5),
        "Workflow.name",
        id="workflow-name-int",
    ),
    case(
        _node(name=None),
        "Node.name",
        id="node-name-none",
    ),
    case(
        lambda: RetryPolicy().delay_for("1"),  # type: ignore[arg-type]
        "delay_for",
        id="rp-delay-for-str",
    ),
    case(
        lambda: RetryPolicy().delay_for(True),
        "delay_for",
        id="rp-delay-for-bool",
    ),
]


@pytest.mark.parametrize(("build", "needles"), CONSTRUCTOR_CASES)
def test_constructor_rejects_bad_value(
    build: Callable[[], object], needles: tuple[str, ...]
) -> None:
    """A model constructor given a bad value raises a ValueError PranaError naming the field."""
    clear_error(build, *needles)


def test_node_list_of_mappings_is_reported_at_run() -> None:
    """Dicts in place of Nodes are accepted at construction but refused at run, naming nodes[0]."""
    workflow = Workflow(id="w", nodes=[bad({"key": "t", "type": "manual.trigger"})], connections=[])
    clear_error(lambda: execute_workflow(workflow), "nodes[0]", "prana.Node")


# -- RetryPolicy.parse ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "[",
        "]",
        "[retry: 3",
        "retry: 3]",
        "[retry: -1]",
        "[retry: x]",
        "[retry: 3.5]",
        "[retry 3]",
        "[foo: 1]",
        "[backoff: -5s]",
        "[backoff: 5x]",
        "[backoff: 1e400]",
        "[timeout: 0]",
        "[timeout: -1]",
        "[retry: 3] junk",
        "[A -> ]",
        "[-> retry: 3]",
        "[retry: 3, retry: 4]",
        "[retry: 99999999999999999999]",
        "[[retry: 3]]",
    ],
)
def test_parse_rejects_malformed_text(text: str) -> None:
    """Malformed bracket text raises a ValueError PranaError pointing at the column."""
    clear_error(lambda: RetryPolicy.parse(text), "RetryPolicy.parse", "column")


@pytest.mark.parametrize("value", [None, 5, b"[retry: 3]", ["[retry: 3]"]])
def test_parse_rejects_non_text(value: Any) -> None:
    """A non-string given to parse raises a ValueError PranaError naming the type."""
    clear_error(lambda: RetryPolicy.parse(value), "RetryPolicy.parse", type(value).__name__)


# -- execute_workflow -----------------------------------------------------------------------


def _run(*args: Any, **kwargs: Any) -> Callable[[], object]:
    kwargs.setdefault("clock", ManualClock(start=T0))
    return lambda: execute_workflow(*args, **kwargs)


EXECUTE_CASES = [
    case(_run({"id": "w"}), "prana.Workflow", "dict", id="workflow-dict"),
    case(_run(None), "prana.Workflow", id="workflow-none"),
    case(_run(WEBHOOK, {"a": object()}), "$.a", "JSON-native", id="input-object"),
    case(_run(WEBHOOK, {1, 2}), "set", "JSON-native", id="input-set"),
    case(_run(WEBHOOK, {1: 2}), "keys must be strings", id="input-int-key"),
    case(_run(WEBHOOK, math.nan), "finite", id="input-nan"),
    case(
        _run(Workflow(id="w", nodes=[TRIGGER, Node(key="x", type="no.such")], connections=[])),
        "node 'x'",
        "no.such",
        "registry.register",
        id="unknown-action",
    ),
    case(_run(Workflow(id="w", nodes=[], connections=[])), "trigger", id="no-trigger"),
    case(
        _run(
            Workflow(id="w", nodes=[TRIGGER], connections=[Connection(from_node="t", to_node="x")])
        ),
        "connection[0]",
        "'x'",
        id="connection-to-missing-node",
    ),
    case(
        _run(WEBHOOK, registry={}),
        "registry",
        id="registry-dict",
    ),
    case(
        _run(WEBHOOK, registry="x"),
        "registry",
        id="registry-str",
    ),
    case(
        _run(WEBHOOK, clock=lambda: NAIVE),
        "clock",
        "aware",
        id="clock-naive",
    ),
    case(
        _run(WEBHOOK, clock=lambda: "now"),
        "clock",
        id="clock-returns-str",
    ),
    case(
        _run(WEBHOOK, clock=5),
        "clock",
        id="clock-not-callable",
    ),
    case(
        _run(WEBHOOK, observers=[5]),
        "observers",
        id="observer-not-callable",
    ),
    case(
        _run(WEBHOOK, observers=bad(5)),
        "observers",
        id="observers-int",
    ),
    case(
        _run(WEBHOOK, observers=print),
        "observers",
        id="observers-one-callable",
    ),
    case(
        _run(WEBHOOK, env=["a"]),
        "env",
        id="env-list",
    ),
    case(
        _run(WEBHOOK, execution_id=5),
        "execution_id",
        id="execution-id-int",
    ),
    case(
        _run(WEBHOOK, parent="p"),
        "parent",
        id="parent-str",
    ),
    case(
        _run(Workflow(id="w", nodes=[TRIGGER], connections=[bad("t->x")])),
        "connections[0]",
        id="connections-of-str",
    ),
]


@pytest.mark.parametrize(("call", "needles"), EXECUTE_CASES)
def test_execute_rejects_bad_argument(call: Callable[[], object], needles: tuple[str, ...]) -> None:
    """execute_workflow given a bad argument raises a ValueError PranaError naming it."""
    clear_error(call, *needles)


# -- resume_workflow, cancel_execution, expire_webhook ------------------------------------


def _resume(execution: Any, data: Any = None, workflow: Any = WEBHOOK, **kw: Any) -> Any:
    kw.setdefault("clock", ManualClock(start=T0))
    return lambda: resume_workflow(execution, data, workflow=workflow, **kw)


def _webhook_cases() -> list[Any]:
    ex = suspended_webhook()
    completed = resume_workflow(ex, {"ok": 1}, workflow=WEBHOOK, clock=ManualClock(start=T0))
    done = completed.execution
    assert done is not None
    cancelled = cancel_execution(ex, clock=ManualClock(start=T0))
    without_node = Workflow(id="hook", nodes=[TRIGGER], connections=[])
    evolve = attrs.evolve
    return [
        case(_resume({"id": "x"}), "WorkflowExecution", "dict", id="not-an-execution"),
        case(_resume(None), "WorkflowExecution", id="none"),
        case(_resume(Suspend("webhook", None, ex)), "WorkflowExecution", id="an-outcome"),
        case(_resume(ex, workflow=evolve(WEBHOOK, id="other")), "'other'", id="other-workflow"),
        case(_resume(ex, workflow=evolve(WEBHOOK, version=2)), "version 2", id="other-version"),
        case(_resume(ex, workflow=None), "workflow=", id="workflow-none"),
        case(_resume(ex, {"a": object()}), "$.a", "JSON-native", id="webhook-data-object"),
        case(_resume(ex, {1, 2}), "JSON-native", id="webhook-data-set"),
        case(_resume(ex, math.inf), "finite", id="webhook-data-inf"),
        case(_resume(done), "completed", "not suspended", id="completed"),
        case(_resume(cancelled), "cancelled", "not suspended", id="cancelled"),
        case(_resume(ex, workflow=without_node), "'wait'", id="node-missing-from-workflow"),
        case(_resume(evolve(ex, suspended_node="ghost")), "'ghost'", id="tampered-node"),
        case(_resume(evolve(ex, suspended_node=None)), "suspended node None", id="node-none"),
        case(
            _resume(evolve(ex, suspension=Suspend("retry", TimerData(resume_at=T0)))),
            "RetryData",
            id="retry-with-timer-data",
        ),
        case(
            _resume(evolve(ex, suspension=Suspend("retry", None))),
            "RetryData",
            id="retry-without-data",
        ),
        case(
            _resume(ex, registry={}),
            "registry",
            id="registry-dict",
        ),
        case(
            _resume(ex, {}, clock=lambda: NAIVE),
            "clock",
            id="clock-naive",
        ),
        case(
            _resume(evolve(ex, suspension=None)),
            "suspension",
            id="suspended-without-suspension",
        ),
        case(
            _resume(evolve(ex, status="suspended")),
            "status",
            id="status-str",
        ),
        case(
            _resume(evolve(ex, node_executions=None)),
            "node_executions",
            id="node-executions-none",
        ),
        case(
            _resume(evolve(ex, node_executions=[])),
            "node_executions",
            id="node-executions-list",
        ),
        case(
            _resume(evolve(ex, pending=None)),
            "pending",
            id="pending-none",
        ),
        case(lambda: cancel_execution(done), "completed", id="cancel-completed"),
        case(
            lambda: cancel_execution("x"),  # type: ignore[arg-type]
            "WorkflowExecution",
            id="cancel-not-an-execution",
        ),
        case(
            lambda: expire_webhook(done, workflow=WEBHOOK),
            "webhook",
            id="expire-not-waiting",
        ),
        case(
            lambda: expire_webhook("x", workflow=WEBHOOK),  # type: ignore[arg-type]
            "WorkflowExecution",
            id="expire-not-an-execution",
        ),
    ]


@pytest.mark.parametrize(("call", "needles"), _webhook_cases())
def test_resume_rejects_bad_call(call: Callable[[], object], needles: tuple[str, ...]) -> None:
    """resume/cancel/expire given a bad execution, workflow or data raise a clear ResumeError."""
    clear_error(call, *needles)


SUB_WORKFLOW_DATA: list[Any] = [
    None,
    5,
    "completed",
    [],
    {},
    {1: 2},
    {"status": "done"},
    {"status": ["x"]},
    {"status": "completed"},
    {"status": "failed"},
    {"status": "timeout"},
    {"status": "completed", "output": object()},
    {"status": "failed", "error": object()},
]


@pytest.mark.parametrize("data", SUB_WORKFLOW_DATA, ids=repr)
def test_sub_workflow_resume_rejects_every_wrong_shape(data: Any) -> None:
    """Sub-workflow resume data of a wrong shape raises ResumeError; the execution is untouched."""
    execution = suspended_parent()
    before = dumps(execution)
    exc = clear_error(_resume(execution, data, workflow=PARENT), kind=ResumeError)
    assert "status" in str(exc) or "JSON-native" in str(exc)
    assert dumps(execution) == before


def test_failed_resume_leaves_the_execution_untouched() -> None:
    """A resume refused for bad data leaves the given execution exactly as it was."""
    execution = suspended_webhook()
    before = dumps(execution)
    clear_error(_resume(execution, {"x": object()}), kind=ResumeError)
    assert dumps(execution) == before
    assert loads(before) == execution


def test_cancel_execution_refuses_a_naive_clock() -> None:
    """cancel_execution checks its clock like every other executor entry point."""
    with pytest.raises(InvalidSettingsError, match="clock"):
        cancel_execution(suspended_webhook(), clock=lambda: datetime(2030, 1, 2))  # noqa: DTZ001


@pytest.mark.parametrize(
    "kwargs",
    [{"observers": print}, {"observers": "abc"}, {"clock": 5}],
    ids=["one-observer", "str-observers", "clock-int"],
)
def test_cancel_execution_checks_its_arguments(kwargs: dict[str, Any]) -> None:
    """Bad observers= or clock= for cancel_execution raise InvalidSettingsError."""
    with pytest.raises(InvalidSettingsError):
        cancel_execution(suspended_webhook(), **kwargs)


# -- loads / loads_workflow / dumps ---------------------------------------------------------


def _mutated(text: str, change: Callable[[Any], None]) -> str:
    doc = json.loads(text)
    change(doc)
    return json.dumps(doc)


def _execution_cases() -> list[Any]:
    good = dumps(suspended_webhook())

    def ex(change: Callable[[dict[str, Any]], None]) -> str:
        return _mutated(good, lambda d: change(d["execution"]))

    def first_run(d: dict[str, Any]) -> list[Any]:
        run: list[Any] = d["node_executions"]["t"][0]
        return run

    return [
        case(lambda: loads("{nope"), "not valid JSON", id="not-json"),
        case(lambda: loads(""), "not valid JSON", id="empty"),
        case(lambda: loads("[1, 2]"), "$: got list", id="json-list"),
        case(lambda: loads("null"), "$: got NoneType", id="json-null"),
        case(lambda: loads(bad(None)), "NoneType", id="none"),
        case(lambda: loads(bad(json.loads(good))), "dict", id="dict-not-text"),
        case(
            lambda: loads(_mutated(good, lambda d: d.pop("schema_version"))),
            "missing",
            id="no-schema",
        ),
        case(
            lambda: loads(_mutated(good, lambda d: d.update(schema_version=99))),
            "$.schema_version: 99",
            id="schema-99",
        ),
        case(
            lambda: loads(_mutated(good, lambda d: d.update(schema_version="2"))),
            "$.schema_version",
            id="schema-str",
        ),
        case(lambda: loads(_mutated(good, lambda d: d.update(extra=1))), "$.extra", id="extra-key"),
        case(lambda: loads(ex(lambda e: e.pop("id"))), "$.execution.id", id="missing-id"),
        case(
            lambda: loads(ex(lambda e: e.update(status="bogus"))), "$.execution.status", id="status"
        ),
        case(
            lambda: loads(ex(lambda e: e.update(status=3))), "$.execution.status", id="status-int"
        ),
        case(lambda: loads(ex(lambda e: e.update(id=5))), "$.execution.id", id="id-int"),
        case(
            lambda: loads(ex(lambda e: e.update(workflow_version="1"))),
            "$.execution.workflow_version",
            id="version-str",
        ),
        case(
            lambda: loads(ex(lambda e: e.update(workflow_version=10**30))),
            "$.execution.workflow_version",
            id="version-huge",
        ),
        case(
            lambda: loads(ex(lambda e: e.update(next_index=True))),
            "$.execution.next_index",
            id="index-bool",
        ),
        case(
            lambda: loads(ex(lambda e: e.update(started_at="2030-01-01T00:00:00"))),
            "$.execution.started_at",
            "UTC offset",
            id="naive-datetime",
        ),
        case(
            lambda: loads(ex(lambda e: e.update(started_at="yesterday"))),
            "$.execution.started_at",
            id="datetime-garbage",
        ),
        case(
            lambda: loads(ex(lambda e: e.update(node_executions=[]))),
            "$.execution.node_executions",
            id="node-executions-list",
        ),
        case(
            lambda: loads(ex(lambda e: first_run(e).__setitem__(0, "bogus"))),
            "$.execution.node_executions['t'][0].status",
            id="node-status-deep",
        ),
        case(
            lambda: loads(ex(lambda e: first_run(e)[5][0].__setitem__(0, "1"))),
            "attempts[0].number",
            id="attempt-number-deep",
        ),
        case(
            lambda: loads(ex(lambda e: e["suspension"].update(kind="timer"))),
            "$.execution.suspension.data",
            id="suspension-kind-mismatch",
        ),
        case(
            lambda: loads(
                ex(lambda e: e["suspension"]["data"].update(expires_at="2030-01-02T00:00:00"))
            ),
            "$.execution.suspension.data.expires_at",
            id="suspension-naive",
        ),
        case(
            lambda: loads(ex(lambda e: e["pending"][0].update(seq="0"))),
            "$.execution.pending[0].seq",
            id="pending-seq-str",
        ),
        case(lambda: loads(ex(lambda e: e.update(bogus=1))), "extra fields", id="unknown-field"),
        case(
            lambda: loads(good.replace('"next_index":2', '"next_index":1e999')),
            "not valid JSON",
            id="number-overflow",
        ),
        case(
            lambda: loads('{"schema_version":1,"execution":' + "[" * 5000 + "]" * 5000 + "}"),
            "not valid JSON",
            id="deep-nesting",
        ),
    ]


@pytest.mark.parametrize(("call", "needles"), _execution_cases())
def test_loads_rejects_bad_record(call: Callable[[], object], needles: tuple[str, ...]) -> None:
    """loads given a bad record raises RecordError naming the path of the bad field."""
    clear_error(call, *needles, kind=RecordError)


def _workflow_cases() -> list[Any]:
    good = dumps_workflow(WEBHOOK)

    def wf(change: Callable[[dict[str, Any]], None]) -> Callable[[], object]:
        return lambda: loads_workflow(_mutated(good, lambda d: change(d["workflow"])))

    def settings(change: Callable[[dict[str, Any]], None]) -> Callable[[], object]:
        return wf(lambda w: change(w["nodes"][0]["settings"]))

    return [
        case(lambda: loads_workflow("{"), "not valid JSON", id="not-json"),
        case(
            lambda: loads_workflow("id: orders\nnodes: []\n"),
            "not valid JSON",
            "loads_workflow(yaml.safe_load(text))",
            id="yaml-text",
        ),
        case(lambda: loads_workflow("[]"), "$: expected an object", id="list"),
        case(lambda: loads_workflow(5), "int", id="int"),  # type: ignore[arg-type]
        case(lambda: loads_workflow("{}"), "$.id", "$.nodes", id="empty"),
        case(
            lambda: loads_workflow(_mutated(good, lambda d: d.update(schema_version=99))),
            "$.schema_version",
            id="schema-99",
        ),
        case(wf(lambda w: w.pop("nodes")), "$.workflow.nodes", id="missing-nodes"),
        case(wf(lambda w: w.update(nodes={"t": {}})), "$.workflow.nodes[0]", id="nodes-dict"),
        case(wf(lambda w: w["nodes"][0].update(key=5)), "nodes[0].key", id="node-key-int"),
        case(wf(lambda w: w["nodes"][0].pop("type")), "nodes[0].type", id="node-no-type"),
        case(wf(lambda w: w["nodes"][0].update(params=[1])), "nodes[0].params", id="params-list"),
        case(settings(lambda s: s.update(max_retries=0)), "max_retries", "1 to 10", id="retries"),
        case(settings(lambda s: s.update(max_retries="3")), "max_retries", id="retries-str"),
        case(settings(lambda s: s.update(on_error="x")), "on_error", id="on-error"),
        case(settings(lambda s: s.update(retry="[retry: x]")), "settings.retry", id="retry-text"),
        case(
            settings(lambda s: s.update(retry={"backoff": "quadratic"})),
            "settings.retry.backoff",
            id="retry-backoff",
        ),
        case(
            settings(lambda s: s.update(retry=[{"retry_when": "not a name"}])),
            "retry[0].retry_when",
            "registry.condition",
            id="retry-when-not-a-name",
        ),
        case(settings(lambda s: s.update(timeout=-1)), "settings.timeout", id="timeout-neg"),
        case(settings(lambda s: s.update(bogus=1)), "settings", "bogus", id="settings-extra"),
        case(wf(lambda w: w["connections"][0].pop("to_node")), "to_node", id="conn-missing"),
        case(wf(lambda w: w["connections"][0].update(from_node=1)), "from_node", id="conn-int"),
        case(wf(lambda w: w.update(version=0)), "$.workflow.version", id="version-0"),
        case(wf(lambda w: w.update(version=10**30)), "$.workflow.version", id="version-huge"),
        case(wf(lambda w: w.update(variables=[1])), "$.workflow.variables", id="variables"),
        case(
            wf(lambda w: w.update(retry_defaults={"*": {"max_attempts": 0}})),
            "retry_defaults['*'].max_attempts",
            id="retry-defaults",
        ),
        case(wf(lambda w: w.update(max_iterations=-1)), "max_iterations", id="max-iterations"),
        case(wf(lambda w: w.update(bogus=1)), "bogus", id="unknown-field"),
        case(wf(lambda w: w.update(name=5)), "$.workflow.name", id="name-int"),
        case(
            lambda: loads_workflow({"id": "w", "nodes": [{"key": "t"}], "connections": []}),
            "$.nodes[0].type",
            id="mapping",
        ),
    ]


@pytest.mark.parametrize(("call", "needles"), _workflow_cases())
def test_loads_workflow_rejects_bad_definition(
    call: Callable[[], object], needles: tuple[str, ...]
) -> None:
    """loads_workflow given a bad definition raises RecordError naming the path of the field."""
    clear_error(call, *needles, kind=RecordError)


@pytest.mark.parametrize(
    ("call", "needles"),
    [
        case(
            lambda: dumps("x"),  # type: ignore[arg-type]
            "WorkflowExecution",
            id="dumps-not-an-execution",
        ),
        case(
            lambda: dumps_workflow("x"),  # type: ignore[arg-type]
            "Workflow",
            id="dumps-workflow-not-a-workflow",
        ),
        case(
            lambda: dumps(attrs.evolve(suspended_webhook(), started_at=NAIVE)),
            "started_at",
            id="dumps-naive-datetime",
        ),
        case(
            lambda: dumps_workflow(
                Workflow(
                    id="w",
                    nodes=[
                        Node(
                            key="t",
                            type="manual.trigger",
                            settings=NodeSettings(retry=RetryPolicy(retry_when=lambda _: True)),
                        )
                    ],
                    connections=[],
                )
            ),
            "retry_when",
            "registry.condition(",
            id="dumps-workflow-lambda",
        ),
    ],
)
def test_dumps_rejects_what_cannot_be_read_back(
    call: Callable[[], object], needles: tuple[str, ...]
) -> None:
    """dumps refuses, with a clear error, anything it could not read back equal."""
    clear_error(call, *needles)


# -- stores -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "needles"),
    [
        case(lambda: SQLiteStore(":memory:", synchronous="off"), "synchronous", id="synchronous"),
        case(lambda: SQLiteStore(":memory:", cache_size=-1), "cache_size", id="cache-size"),
        case(lambda: SQLiteStore(":memory:", busy_timeout_ms=-1), "busy_timeout_ms", id="busy"),
        case(lambda: PostgresStore(None), "dsn", id="pg-dsn-none"),  # type: ignore[arg-type]
        case(lambda: PostgresStore(UNREACHABLE_DSN, schema="a;b"), "schema", id="pg-schema"),
        case(
            lambda: PostgresStore(UNREACHABLE_DSN, max_connections=0),
            "max_connections",
            id="pg-pool",
        ),
        case(
            lambda: PostgresStore(UNREACHABLE_DSN, connect_timeout_seconds=-1),
            "connect_timeout_seconds",
            id="pg-timeout-negative",
        ),
        case(
            lambda: PostgresStore(UNREACHABLE_DSN, connect_timeout_seconds="x"),  # type: ignore[arg-type]
            "connect_timeout_seconds",
            id="pg-timeout-str",
        ),
    ],
)
def test_store_constructor_rejects_bad_setting(
    call: Callable[[], object], needles: tuple[str, ...]
) -> None:
    """A store constructor given a bad setting raises a ValueError PranaError naming it."""
    clear_error(call, *needles)


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(
            "missing-dir",
            id="missing-directory",
        ),
        pytest.param(
            "directory",
            id="a-directory",
        ),
        pytest.param(
            "not-a-database",
            id="not-a-database",
        ),
    ],
)
def test_sqlite_store_bad_path(tmp_path: Path, where: str) -> None:
    """SQLiteStore on a path it cannot use raises a StoreError naming the path."""
    path = {"missing-dir": tmp_path / "no" / "db.sqlite3", "directory": tmp_path}.get(where)
    if path is None:
        path = tmp_path / "text.sqlite3"
        path.write_text("this is not a database\n" * 100)
    with pytest.raises(StoreError, match=str(path)):
        SQLiteStore(path)


def test_sqlite_store_path_none() -> None:
    """SQLiteStore(None) raises a ValueError PranaError naming the path argument."""
    clear_error(lambda: SQLiteStore(None), "path")  # type: ignore[arg-type]


def test_sqlite_store_used_after_close(tmp_path: Path) -> None:
    """A closed SQLiteStore raises a StoreError saying it is closed, not a sqlite3 error."""
    store = SQLiteStore(tmp_path / "db.sqlite3")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.load("x")


def test_postgres_unreachable_is_quick_and_clear() -> None:
    """An unreachable PostgreSQL server raises StoreError within the connect timeout."""
    store = PostgresStore(UNREACHABLE_DSN, connect_timeout_seconds=1)
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        store.load("x")
    assert time.monotonic() - started < 5
    store.close()


@pytest.fixture(
    params=["memory-json", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def serializing_store(request: pytest.FixtureRequest) -> ExecutionStore:
    """Each store that writes JSON: memory (serialize=True), SQLite, PostgreSQL."""
    if request.param == "memory-json":
        return MemoryStore(serialize=True)
    store: ExecutionStore = request.getfixturevalue(f"{request.param}_store")
    return store


UNSERIALIZABLE: dict[str, dict[str, Any]] = {
    "output-object": {"output": {"x": object()}},
    "state-set": {"state": {"x": {1, 2}}},
    "input-huge-int": {"input": 10**30},
}


@pytest.mark.parametrize("change", list(UNSERIALIZABLE), ids=str)
def test_failed_save_keeps_the_stored_record(
    serializing_store: ExecutionStore, change: str
) -> None:
    """A save that cannot serialize raises RecordError and leaves the stored record as it was."""
    execution = suspended_webhook()
    version = serializing_store.save(execution, None)
    bad = attrs.evolve(execution, **UNSERIALIZABLE[change])
    clear_error(lambda: serializing_store.save(bad, version), "JSON", kind=RecordError)
    stored, stored_version = serializing_store.load(execution.id)
    assert (stored, stored_version) == (execution, version)


@xfail("MemoryStore() keeps live records: it stores what every other store refuses")
def test_default_memory_store_refuses_unserializable_execution() -> None:
    """The default MemoryStore refuses an execution the other stores cannot serialize."""
    store = MemoryStore()
    execution = suspended_webhook()
    version = store.save(execution, None)
    bad = attrs.evolve(execution, output={"x": object()})
    clear_error(lambda: store.save(bad, version), kind=RecordError)
    assert store.load(execution.id) == (execution, version)


def test_naive_execution_is_refused_before_it_is_stored(serializing_store: ExecutionStore) -> None:
    """An execution holding a naive datetime is refused at save, clearly, and not stored."""
    # execute_workflow refuses a naive clock now, so the naive record is built by hand.
    execution = attrs.evolve(suspended_webhook(), updated_at=NAIVE)
    clear_error(lambda: serializing_store.save(execution, None), "aware")
    assert serializing_store.list() == []


def _corrupt_row(path: Path, column: str, value: str, where: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {where} SET {column} = ?", (value,))
    conn.close()


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        ("{corrupt", ("not valid JSON",)),
        ('{"schema_version": 1, "execution": {"id": "ID"}}', ("$.execution.status",)),
        ('{"schema_version": 99, "execution": {}}', ("$.schema_version",)),
        ("OTHER", ("the record holds execution 'other'",)),
    ],
    ids=["not-json", "missing-fields", "schema", "other-id"],
)
def test_corrupt_stored_execution_names_its_id(
    tmp_path: Path, data: str, needles: tuple[str, ...]
) -> None:
    """Loading a corrupt stored execution raises RecordError naming the execution id."""
    path = tmp_path / "db.sqlite3"
    store = SQLiteStore(path)
    execution = suspended_webhook()
    store.save(execution, None)
    if data == "OTHER":
        data = dumps(attrs.evolve(execution, id="other"))
    _corrupt_row(path, "data", data.replace("ID", execution.id), "prana_executions")
    try:
        clear_error(
            lambda: store.load(execution.id), repr(execution.id), *needles, kind=RecordError
        )
    finally:
        store.close()


def test_corrupt_stored_workflow_and_status_name_their_ids(tmp_path: Path) -> None:
    """A corrupt stored definition or status raises RecordError naming what it belongs to."""
    path = tmp_path / "db.sqlite3"
    store = SQLiteStore(path)
    execution = suspended_webhook()
    store.save(execution, None)
    store.save_workflow(WEBHOOK)
    _corrupt_row(path, "data", "{bad", "prana_workflows")
    _corrupt_row(path, "status", "bogus", "prana_executions")
    fresh = SQLiteStore(path)
    try:
        clear_error(lambda: fresh.load_workflow("hook", 1), "'hook'", kind=RecordError)
        clear_error(lambda: fresh.list(), repr(execution.id), "bogus", kind=RecordError)
    finally:
        fresh.close()
        store.close()


@pytest.mark.parametrize(
    ("call", "needles"),
    [
        case(lambda s: s.save("x", None), "WorkflowExecution", id="save-not-an-execution"),
        case(lambda s: s.save(suspended_webhook(), "1"), "expected_version", id="version-str"),
        case(lambda s: s.save(suspended_webhook(), -1), "expected_version", id="version-neg"),
        case(lambda s: s.find_due(NAIVE), "aware", id="find-due-naive"),
        case(lambda s: s.find_due("now"), "aware", id="find-due-str"),
        case(lambda s: s.find_due(T0, limit=0), "limit", id="find-due-limit"),
        case(lambda s: s.list(status="bogus"), "status", "suspended", id="list-status"),
        case(lambda s: s.save_workflow("x"), "Workflow", id="save-workflow-not-a-workflow"),
    ],
)
def test_store_method_rejects_bad_argument(
    serializing_store: ExecutionStore, call: Callable[[Any], object], needles: tuple[str, ...]
) -> None:
    """A store method given a bad argument raises a ValueError PranaError naming it."""
    clear_error(lambda: call(serializing_store), *needles)


def test_a_corrupt_definition_raises_record_error_naming_it(tmp_path: Path) -> None:
    """A stored definition that cannot be read raises RecordError naming its id and version."""
    store = SQLiteStore(tmp_path / "defs.sqlite3")
    try:
        store.save_workflow(workflow(webhook_node(), wid="d", version=7))
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE prana_workflows SET data = '{\"id\": 1}'")
        conn.close()
        fresh = SQLiteStore(store.path)
        try:
            with pytest.raises(RecordError, match="'d' version 7"):
                fresh.load_workflow("d", 7)
        finally:
            fresh.close()
    finally:
        store.close()


# -- the runner -----------------------------------------------------------------------------


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    """A runner over a SQLite store, driven by a manual clock."""
    clock = ManualClock(start=T0)
    store = SQLiteStore(tmp_path / "db.sqlite3")
    with Runner(Registry(), store, ManualScheduler(clock=clock), clock) as running:
        yield running
    store.close()


def test_start_with_invalid_workflow_stores_no_execution(runner: Runner) -> None:
    """start refuses an invalid workflow before anything runs; no execution is stored."""
    bad = Workflow(id="w", nodes=[TRIGGER, Node(key="x", type="no.such")], connections=[])
    clear_error(lambda: runner.start(bad, {}), "no.such", kind=InvalidWorkflowError)
    clear_error(lambda: runner.start(WEBHOOK, {"a": object()}), "$.a", kind=InvalidWorkflowError)
    clear_error(lambda: runner.start("x", {}), "prana.Workflow")  # type: ignore[arg-type]
    assert runner.store.list() == []


def test_failed_start_does_not_block_the_fixed_workflow(runner: Runner) -> None:
    """After start refuses an invalid definition, the corrected one under the same id runs."""
    broken = Workflow(id="w", nodes=[TRIGGER], connections=[Connection(from_node="t", to_node="x")])
    clear_error(lambda: runner.start(broken, {}), "'x'", kind=InvalidWorkflowError)
    fixed = Workflow(id="w", nodes=[TRIGGER], connections=[])
    assert runner.get(runner.start(fixed, {})).status.value == "completed"


def test_deliver_bad_data_changes_nothing(runner: Runner) -> None:
    """deliver of non-JSON data raises ResumeError and leaves the stored record as it was."""
    eid = runner.start(WEBHOOK, {"a": 1})
    before = runner.store.load(eid)
    for data in ({"x": object()}, {1, 2}, math.nan):
        clear_error(functools.partial(runner.deliver, eid, data), "JSON-native", kind=ResumeError)
    assert runner.store.load(eid) == before


def test_unknown_ids_and_repeated_cancel(runner: Runner) -> None:
    """Unknown ids raise ExecutionNotFound; a second cancel returns the cancelled record as is."""
    for call in (runner.get, runner.cancel, lambda eid: runner.deliver(eid, {})):
        exc = clear_error(functools.partial(call, "nope"), "'nope'", value=False)
        assert isinstance(exc, ExecutionNotFound)
    eid = runner.start(WEBHOOK, {})
    first = runner.cancel(eid)
    _, version = runner.store.load(eid)
    assert runner.cancel(eid) == first
    assert runner.store.load(eid) == (first, version)
    clear_error(lambda: runner.deliver(eid, {}), "cancelled", kind=ResumeError)
    exc = clear_error(lambda: runner.start(WEBHOOK, {}, execution_id=eid), eid, value=False)
    assert isinstance(exc, StaleVersionError)


@pytest.mark.parametrize(
    ("call", "needles"),
    [
        case(lambda r: Runner(registry=bad({})), "registry", id="registry-dict"),
        case(
            lambda r: Runner(store=MemoryStore(), workflows=[bad("x")]), "Workflow", id="workflows"
        ),
        case(
            lambda r: r.start(WEBHOOK, {}, execution_id=5),
            "execution_id",
            id="start-execution-id-int",
        ),
        case(
            lambda r: r.wait("x", timeout="soon"),
            "timeout",
            id="wait-timeout-str",
        ),
        case(
            lambda r: Runner(
                store=bad("x"), scheduler=ManualScheduler(clock=ManualClock(start=T0))
            ),
            "store",
            id="store-str",
        ),
        case(
            lambda r: Runner(store=MemoryStore(), scheduler=bad("x")),
            "scheduler",
            id="scheduler-str",
        ),
        case(
            lambda r: Runner(store=MemoryStore(), env=bad(["a"])),
            "env",
            id="env-list",
        ),
        case(
            lambda r: Runner(store=MemoryStore(), observers=bad(5)),
            "observers",
            id="observers-int",
        ),
        case(
            lambda r: ManualScheduler(clock=ManualClock(start=T0)).advance(bad("x")),
            "advance",
            id="scheduler-advance-str",
        ),
        case(
            lambda r: ManualClock(start=T0).advance(math.nan),
            "advance",
            id="clock-advance-nan",
        ),
        case(
            lambda r: ManualClock(start=T0).set(NAIVE),
            "aware",
            id="clock-set-naive",
        ),
    ],
)
def test_runner_rejects_bad_argument(
    runner: Runner, call: Callable[[Runner], object], needles: tuple[str, ...]
) -> None:
    """Runner and its test doubles given a bad argument raise a ValueError PranaError naming it."""
    clear_error(lambda: call(runner), *needles)


class NaiveClockScheduler:
    """A minimal ``Scheduler`` whose clock returns naive datetimes (a misconfiguration)."""

    def clock(self) -> datetime:
        return datetime(2030, 1, 1, 12)  # noqa: DTZ001 - naive on purpose

    def start(self, fire: Any) -> None:
        del fire

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        del execution_id, due_at

    def cancel(self, execution_id: str) -> None:
        del execution_id

    def shutdown(self) -> None:
        pass


def test_runner_deliver_refuses_a_naive_clock_clearly() -> None:
    """A runner whose clock is naive is refused when built, naming the clock, before any use."""
    store = MemoryStore()
    clock = ManualClock(T0)
    with Runner(store=store, scheduler=ManualScheduler(clock), clock=clock) as first:
        execution_id = first.start(WEBHOOK)
    with pytest.raises(InvalidSettingsError, match="clock"):
        Runner(store=store, scheduler=NaiveClockScheduler())
    assert store.load(execution_id)[0].status is ExecutionStatus.SUSPENDED


# -- the command line -----------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A folder of good and bad workflow files and action modules."""
    good = {
        "id": "w",
        "nodes": [{"key": "t", "type": "manual.trigger"}],
        "connections": [],
    }
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "bad.yaml").write_text("a: [1,\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "fields.json").write_text(json.dumps({**good, "nodes": [{"key": "t"}]}))
    invalid = {**good, "connections": [{"from_node": "t", "to_node": "ghost"}]}
    (tmp_path / "invalid.json").write_text(json.dumps(invalid))
    (tmp_path / "raises.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "syntax.py").write_text("def (:\n")
    (tmp_path / "text.db").write_text("not a database\n" * 100)
    SQLiteStore(tmp_path / "prana.db").close()
    return tmp_path


CLI_MISTAKES = [
    pytest.param(["run", "{d}/missing.json"], "no such file", id="missing-file"),
    pytest.param(["run", "{d}/bad.json"], "not valid JSON", id="bad-json"),
    pytest.param(["run", "{d}/bad.yaml"], "not valid YAML", id="bad-yaml"),
    pytest.param(["run", "{d}/list.json"], "expected an object", id="json-list"),
    pytest.param(["run", "{d}/fields.json"], "$.nodes[0].type", id="missing-field"),
    pytest.param(["run", "{d}/invalid.json"], "'ghost'", id="invalid-workflow"),
    pytest.param(["run", "{d}"], "cannot read", id="file-is-a-directory"),
    pytest.param(["run", "{d}/good.json", "--input", "{bad"], "--input", id="input-json"),
    pytest.param(["run", "{d}/good.json", "--input", "NaN"], "finite", id="input-nan"),
    pytest.param(["run", "{d}/good.json", "--actions", "no_such_mod_xyz"], "--actions", id="mod"),
    pytest.param(
        ["run", "{d}/good.json", "--actions", "{d}/raises.py"], "boom", id="actions-raise"
    ),
    pytest.param(
        ["run", "{d}/good.json", "--actions", "{d}/syntax.py"], "SyntaxError", id="syntax"
    ),
    pytest.param(
        ["run", "{d}/good.json", "--db", "{d}/no/x.db"],
        "cannot open the database",
        id="db-missing-dir",
    ),
    pytest.param(
        ["run", "{d}/good.json", "--db", "{d}"], "cannot open the database", id="db-is-a-directory"
    ),
    pytest.param(
        ["run", "{d}/good.json", "--db", "{d}/text.db"], "not a database", id="db-not-a-database"
    ),
    pytest.param(["list", "--db", "{d}/none.db"], "no database", id="list-no-database"),
    pytest.param(["list", "--status", "bogus"], "--status", id="status"),
    pytest.param(["list", "--limit", "0"], "limit", id="limit-0"),
    pytest.param(["show", "nope"], "'nope'", id="show-unknown"),
    pytest.param(["deliver", "nope", "--data", "{}"], "'nope'", id="deliver-unknown"),
    pytest.param(["deliver", "nope", "--data", "{bad"], "--data", id="deliver-bad-json"),
    pytest.param(["cancel", "nope"], "'nope'", id="cancel-unknown"),
    pytest.param(["list", "--postgres", UNREACHABLE_DSN, "--schema", "a;b"], "schema", id="schema"),
]


@pytest.mark.parametrize(("argv", "needle"), CLI_MISTAKES)
def test_cli_mistake_is_one_line_and_exit_2(
    files: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """A command-line mistake exits with one line on stderr naming the problem.

    The code is the documented one: 2 for a mistake, 4 for an unknown execution id, 5 for a
    database that cannot be opened or does not exist.
    """
    args = [arg.replace("{d}", str(files)) for arg in argv]
    if "--db" not in args and "--postgres" not in args:
        args += ["--db", str(files / "prana.db")]
    code = main(args)
    err = capsys.readouterr().err.splitlines()
    expected = {
        "'nope'": 4,
        "cannot open the database": 5,
        "not a database": 5,
        "no database": 5,
    }.get(needle, 2)
    assert code == expected
    assert len(err) == 1, err
    assert err[0].startswith("prana: error: ")
    assert needle in err[0]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "required: COMMAND"),
        (["bogus"], "invalid choice"),
        (["run"], "required: file"),
        (["list", "--limit", "x"], "--limit"),
        (["worker", "--poll", "x"], "--poll"),
        (["deliver", "nope"], "--data"),
    ],
    ids=["no-command", "unknown-command", "no-file", "limit-str", "poll-str", "no-data"],
)
def test_cli_usage_error_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """An argparse usage error exits 2; its last stderr line names the problem (after the usage)."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert "error:" in last
    assert needle in last


def test_cli_unreachable_postgres_is_quick_and_one_line() -> None:
    """``prana list --postgres`` with an unreachable server fails with one stderr line.

    How fast the store gives up is timed in-process, by
    ``test_postgres_unreachable_is_quick_and_clear``: timed here, it included the
    interpreter's start-up (seconds on a loaded machine) and failed for that. The
    ``timeout`` still catches a command that hangs."""
    done = subprocess.run(
        [sys.executable, "-m", "scheduling._cli", "list", "--postgres", UNREACHABLE_DSN],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 5  # the store cannot be used
    assert done.stderr.splitlines()[-1].startswith("prana: error: ")
    assert len(done.stderr.splitlines()) == 1, done.stderr


class _TurningClock:
    """A clock whose first reading is aware and whose later ones are ``later``."""

    def __init__(self, later: Any) -> None:
        self.later = later
        self.readings = 0

    def __call__(self) -> Any:
        self.readings += 1
        return T0 if self.readings == 1 else self.later


@pytest.mark.parametrize(
    "later",
    [datetime(2030, 1, 2), "2030-01-02T00:00:00+00:00"],  # noqa: DTZ001 - the bad reading
    ids=["naive", "text"],
)
def test_a_clock_that_turns_bad_after_its_first_reading_is_refused(later: Any) -> None:
    """Was: only a clock's first reading was checked; a later naive or non-datetime reading
    went into the records (or failed deep inside, unnamed). Every reading is checked."""
    from prana import RetryPolicy, execute_workflow

    def fails(params: Any, ctx: Any) -> Any:
        raise ConnectionError("down")

    registry = Registry()
    registry.register("test.fails", fails)
    policy = RetryPolicy(max_attempts=2, backoff="constant", initial_delay=1)
    wf = workflow(Node(key="r", type="test.fails", settings=NodeSettings(retry=policy)))
    with pytest.raises(InvalidSettingsError, match="a clock must return an aware datetime"):
        execute_workflow(wf, {}, registry=registry, clock=_TurningClock(later))


def test_the_clocks_whose_readings_are_aware_by_construction_are_read_unwrapped() -> None:
    """The fast path of ``read_clock``: the default clock and a ``ManualClock`` (aware, plain
    readings by construction, pinned here) are read as they are; any other clock is wrapped
    so that each of its readings is checked, and a subclass reading read as a plain one."""
    from prana import _entry

    manual = ManualClock(T0)
    assert _entry.read_clock(manual) == (manual, T0)
    assert _entry.read_clock(_entry._utcnow)[0] is _entry._utcnow
    other = _TurningClock(T0)
    wrapped, reading = _entry.read_clock(other)
    assert wrapped is not other
    assert reading == T0
    assert wrapped() == T0

    class Subclass(datetime):
        pass

    later = Subclass(2030, 1, 3, tzinfo=T0.tzinfo)
    for start in (later, T0):
        clock = ManualClock(start)
        clock.set(later)
        assert type(clock()) is datetime  # pinned: a ManualClock's readings are plain
        assert clock() == later


# -- numbers a stored definition cannot hold ------------------------------------------------------
# Numbers a stored definition cannot hold are refused by validation, naming node and field.
#
# Was: a workflow whose ``max_attempts`` was 10**30 validated, ran, and then failed to save with
# "Integer exceeds 64-bit range", naming neither the node nor the field.


HUGE = 10**30


def one_node(settings: NodeSettings | None = None, **extra: object) -> Workflow:
    """trigger -> call (data.set_data), with ``settings`` on ``call``."""
    return Workflow(
        id="ranges",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="data.set_data",
                params={"value": 1},
                settings=settings or NodeSettings(),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
        **extra,  # type: ignore[arg-type]
    )


def test_a_node_policy_max_attempts_past_the_record_range_is_invalid() -> None:
    """``settings.retry`` max_attempts 10**30: validation names the node, field and range."""
    wf = one_node(NodeSettings(retry=RetryPolicy(max_attempts=HUGE)))
    with pytest.raises(InvalidWorkflowError) as caught:
        validate(wf, Registry())
    text = str(caught.value)
    assert "node 'call'" in text
    assert "settings.retry.max_attempts" in text
    assert f"{HUGE}" in text
    assert "from 1 to 18,446,744,073,709,551,615" in text


def test_a_second_policy_is_named_by_its_index() -> None:
    """In a list of policies, the one out of range is named by its index."""
    wf = one_node(NodeSettings(retry=[RetryPolicy(), RetryPolicy(max_attempts=HUGE)]))
    with pytest.raises(InvalidWorkflowError, match=r"settings\.retry\[1\]\.max_attempts"):
        validate(wf, Registry())


def test_a_retry_default_past_the_record_range_is_invalid() -> None:
    """``retry_defaults`` are checked too, named by their node type."""
    wf = one_node(retry_defaults={"*": RetryPolicy(max_attempts=HUGE)})
    with pytest.raises(InvalidWorkflowError, match=r"retry_defaults\['\*'\]\.max_attempts"):
        validate(wf, Registry())


def test_the_largest_storable_max_attempts_is_valid_and_stored() -> None:
    """The top of the range validates and serializes (Limits.max_attempts caps what runs)."""
    wf = one_node(NodeSettings(retry=RetryPolicy(max_attempts=2**64 - 1)))
    validate(wf, Registry())
    assert str(2**64 - 1) in dumps_workflow(wf)


def test_prana_run_refuses_it_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run`` on such a YAML file: exit 2, one line naming node and field, no run."""
    path = tmp_path / "huge.yaml"
    path.write_text(
        "id: huge\nnodes:\n  - {key: start, type: manual.trigger}\n"
        "  - key: call\n    type: data.set_data\n    params: {value: 1}\n"
        f"    settings: {{retry: {{max_attempts: {HUGE}}}}}\n"
        "connections:\n  - {from_node: start, to_node: call}\n"
    )
    code = main(["run", str(path), "--db", str(tmp_path / "prana.db")])
    out, err = capsys.readouterr()
    assert code == 2
    assert "node 'call'" in err
    assert "settings.retry.max_attempts" in err
    assert "64-bit" not in err
    assert err.count("\n") == 1
    assert "execution" not in out


def test_an_integer_in_params_or_variables_past_the_record_range_is_invalid() -> None:
    """Was: node params (or workflow variables) holding 10**30, as YAML reads them, validated
    and then failed to save with "Integer exceeds 64-bit range", naming no node or field."""
    wf = one_node(variables={"limit": -HUGE})
    wf = Workflow(
        id=wf.id,
        nodes=[wf.nodes[0], Node(key="call", type="data.set_data", params={"v": [1, {"n": HUGE}]})],
        connections=wf.connections,
        variables=wf.variables,
    )
    with pytest.raises(InvalidWorkflowError) as raised:
        validate(wf, Registry())
    outside = (
        "an integer of 100 bits is outside the range a stored definition holds "
        "(-2**63 to 2**64 - 1); write it as a string"
    )
    assert list(raised.value.problems) == [
        f"node 'call': params.v[1].n: {outside}",
        f"variables.limit: {outside}",
    ]


def test_the_widest_storable_integers_in_params_are_valid_and_stored() -> None:
    """The bounds themselves validate and save; a cycle in Python params is walked once."""
    params: dict[str, object] = {"low": -(2**63), "high": 2**64 - 1, "flag": True}
    wf = Workflow(
        id="ranges",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="call", type="data.set_data", params=params),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    validate(wf, Registry())
    assert str(2**64 - 1) in dumps_workflow(wf)
    looped: dict[str, object] = {}
    looped["self"] = [looped]
    cyclic = Workflow(
        id="ranges",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="call", type="data.set_data", params={"value": 1, "loop": looped}),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    assert storable_int_problems("params", cyclic.nodes[1].params) == []


def test_prana_run_refuses_a_huge_param_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run`` on a YAML file with ``value: 10**30`` in params: exit 2, one line."""
    path = tmp_path / "huge.yaml"
    path.write_text(
        "id: huge\nnodes:\n  - {key: start, type: manual.trigger}\n"
        f"  - key: call\n    type: data.set_data\n    params: {{value: {{deep: [1, {HUGE}]}}}}\n"
        "connections:\n  - {from_node: start, to_node: call}\n"
    )
    code = main(["run", str(path), "--db", str(tmp_path / "prana.db")])
    out, err = capsys.readouterr()
    assert code == 2
    assert "node 'call': params.value.deep[1]" in err
    assert "64-bit range" not in err
    assert err.count("\n") == 1
    assert "execution" not in out
