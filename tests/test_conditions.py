"""Retry condition templates are checked at validation (DESIGN §7: mistakes are loud).

A condition that names something undefined used to validate, pass ``lint`` and then never
hold (its evaluation failed, and the reason was dropped). Now validation refuses it,
naming the node, the field and the names a condition may use.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from doubles import detail, workflow_of

from prana import (
    Connection,
    EventType,
    Failed,
    InvalidWorkflowError,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Workflow,
    execute_workflow,
    lint,
    loads_workflow,
)
from prana._decision import CONDITION_SCOPE
from prana._graph import validate


def node(retry: Any, key: str, type_: str = "svc.call") -> Node:
    """A node with the given retry settings."""
    return Node(key=key, type=type_, settings=NodeSettings(retry=retry))


TYPO = "{{ stauts_code >= 500 }}"
"""Undefined whatever names the condition scope holds (a typo of NoETL's status_code)."""


def flaky(params: Any, ctx: Any) -> Any:
    """An action that fails with a 503."""
    error = ConnectionError("service unavailable")
    error.details = {"status_code": 503}  # type: ignore[attr-defined]
    raise error


def svc_registry() -> Registry:
    reg = Registry()
    reg.register("svc.call", flaky)
    return reg


def problems_of(workflow: Workflow) -> tuple[str, ...]:
    with pytest.raises(InvalidWorkflowError) as info:
        validate(workflow, svc_registry())
    return info.value.problems


@pytest.mark.parametrize("field", ["retry_when", "stop_when", "retry_on_result"])
def test_an_undefined_name_in_a_condition_fails_validation(field: str) -> None:
    """Each condition field is compiled against the condition scope when the workflow validates."""
    wf = workflow_of(
        Node(key="start", type="manual.trigger"),
        node({field: TYPO}, key="call", type_="svc.call"),
    )
    (problem,) = problems_of(wf)
    assert problem.startswith(f"node 'call': settings.retry.{field}: unknown name 'stauts_code'")
    assert "did you mean status_code?" in problem
    for name in CONDITION_SCOPE:
        assert name in problem
    assert "$error.details.stauts_code" in problem


def test_the_problem_names_where_the_policy_came_from() -> None:
    """A policy from retry_defaults, or the second of a list, is named by its own place."""
    wf = workflow_of(
        Node(key="start", type="manual.trigger"),
        node(
            [RetryPolicy(retry_on=["KeyError"]), RetryPolicy(retry_when="{{ $eror.code }}")],
            key="a",
            type_="svc.call",
        ),
        Node(key="b", type="svc.call"),
        retry_defaults={"svc.call": RetryPolicy(stop_when="{{ attempts > 2 }}")},
    )
    problems = problems_of(wf)
    assert problems[0].startswith("node 'a': settings.retry[1].retry_when: unknown name $eror")
    assert "did you mean $error?" in problems[0]
    assert problems[1].startswith(
        "node 'b': retry_defaults['svc.call'].stop_when: unknown name 'attempts'"
    )
    assert "did you mean attempt?" in problems[1]


def test_a_noetl_condition_pasted_with_a_typo_is_refused_from_json_before_running() -> None:
    """Loaded from a file, the workflow fails before running: no action runs on a dead condition."""
    text = json.dumps(
        {
            "id": "w",
            "nodes": [
                {"key": "start", "type": "manual.trigger"},
                {
                    "key": "call",
                    "type": "svc.call",
                    "settings": {
                        "retry": {"retry_when": "{{ stauts_code >= 500 or error != None }}"}
                    },
                },
            ],
            "connections": [{"from_node": "start", "to_node": "call"}],
        }
    )
    workflow = loads_workflow(text)
    with pytest.raises(InvalidWorkflowError, match=r"node 'call': settings\.retry\.retry_when"):
        execute_workflow(workflow, {}, registry=svc_registry())


def test_conditions_over_the_whole_scope_validate() -> None:
    """Every name in the condition scope, ``$`` roots and bare names alike, is accepted."""
    text = " and ".join(f"({name} is defined)" for name in CONDITION_SCOPE)  # every name, used once
    wf = workflow_of(
        Node(key="start", type="manual.trigger"),
        node(
            RetryPolicy(retry_when="{{ " + text + " }}", stop_when="{{ $attempt > 5 }}"),
            key="call",
            type_="svc.call",
        ),
    )
    validate(wf, svc_registry())


def test_lint_reports_a_broken_condition_too() -> None:
    """``lint`` (which does not validate) names the same problem as ``invalid_condition``."""
    wf = workflow_of(node(RetryPolicy(retry_when=TYPO), key="call"))
    warnings = lint(wf)
    assert [w.code for w in warnings] == ["invalid_condition"]
    assert "retry_when: unknown name 'stauts_code'" in warnings[0].message
    assert "never holds" in warnings[0].message


def test_settings_built_in_python_are_checked_the_same_way() -> None:
    """The check is on validation, whatever built the policy."""
    wf = workflow_of(
        Node(key="start", type="manual.trigger"),
        Node(
            key="call",
            type="svc.call",
            settings=NodeSettings(retry="[ConnectionError -> retry: 3, backoff: 1s]"),
        ),
    )
    validate(wf, svc_registry())


def plain_failure(params: Any, ctx: Any) -> Any:
    """An action that fails with an error carrying no details."""
    raise ConnectionError("connection reset")


@pytest.mark.parametrize(
    ("field", "condition"),
    [
        ("retry_when", "{{ $error.details.status_code >= 500 }}"),
        ("stop_when", "{{ $error.details.status_code == 404 }}"),
    ],
)
def test_a_condition_that_fails_at_runtime_is_recorded_where_a_user_looks(
    field: str, condition: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A condition reading ``details.status_code`` of an error with no details fails when it
    runs; the attempt does not retry, and why is in the attempt's error details, the
    ``node_failed`` event's error and a ``prana.retry`` log line, not silently dropped."""
    reg = Registry()
    reg.register("svc.call", plain_failure)
    events: list[Any] = []
    conditions: dict[str, Any] = {field: condition}
    wf = workflow_of(
        Node(key="start", type="manual.trigger"),
        node(RetryPolicy(max_attempts=3, **conditions), key="call"),
    )
    wf = Workflow(
        id="w", nodes=wf.nodes, connections=[Connection(from_node="start", to_node="call")]
    )
    with caplog.at_level(logging.WARNING, logger="prana.retry"):
        outcome = execute_workflow(wf, registry=reg, observers=[events.append])
    assert isinstance(outcome, Failed)
    (record,) = outcome.execution.node_executions["call"]
    (attempt,) = record.attempts
    assert attempt.error is not None
    assert attempt.error.details is not None
    why = detail(attempt.error, "retry_condition_failed")
    assert why.startswith(f"{field} failed:")
    assert "status_code" in why
    assert "null" in why
    failed = [e for e in events if e.type is EventType.NODE_FAILED]
    assert detail(failed[0].error, "retry_condition_failed") == why
    assert outcome.error.details == attempt.error.details
    (line,) = [r for r in caplog.records if r.name == "prana.retry"]
    assert line.levelno == logging.WARNING
    assert "'call'" in line.getMessage()
    assert why in line.getMessage()


def test_a_failing_condition_keeps_the_details_the_action_reported() -> None:
    """The reason is added beside the error's own details, which stay as they were."""
    reg = svc_registry()  # flaky: details {"status_code": 503}
    wf = Workflow(
        id="w",
        nodes=[
            Node(key="start", type="manual.trigger"),
            node(RetryPolicy(retry_when="{{ $error.details.missing > 1 }}"), key="call"),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    outcome = execute_workflow(wf, registry=reg)
    assert isinstance(outcome, Failed)
    details = outcome.error.details
    assert details is not None
    assert details["status_code"] == 503
    assert "missing" in str(details["retry_condition_failed"])


def test_a_result_predicate_that_fails_at_runtime_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ``retry_on_result`` that raises accepts the output (the attempt completed) and says
    so in a ``prana.retry`` line naming the node and the reason."""
    reg = Registry()
    reg.register("svc.call", lambda params, ctx: None)
    wf = Workflow(
        id="w",
        nodes=[
            Node(key="start", type="manual.trigger"),
            node(RetryPolicy(retry_on_result="{{ $output.state == 'pending' }}"), key="call"),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    with caplog.at_level(logging.WARNING, logger="prana.retry"):
        outcome = execute_workflow(wf, registry=reg)
    assert outcome.execution.status.value == "completed"
    (line,) = [r for r in caplog.records if r.name == "prana.retry"]
    assert "'call'" in line.getMessage()
    assert "retry_on_result failed" in line.getMessage()
    assert "accepted" in line.getMessage()
