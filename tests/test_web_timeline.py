"""The web view's timeline shows what an operator and a crash did: redrives and recoveries.

An execution whose first attempt was interrupted (its process died), whose re-run failed,
and which an operator then redrove: the JSON API marks each attempt for what started it,
counts the redrives and interruptions, and the page draws them apart from plain retries.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from doubles import T0, Died, workflow
from servers import serve

from prana import (
    Completed,
    Failed,
    Node,
    NodeSettings,
    NodeStatus,
    Registry,
    RetryPolicy,
    WorkflowExecution,
    execute_workflow,
    redrive_execution,
    resume_workflow,
)
from prana.shell import recover_execution
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.web import create_app

OPERATOR = "an-operator-token-long-enough"


def interrupted_then_redriven() -> tuple[WorkflowExecution, Any, Registry]:
    """Node ``a``: attempt 1 interrupted, run again and failed, then redriven to success."""
    fixed = [False]

    def call(params: Any, ctx: Any) -> Any:
        if not fixed[0]:
            raise ConnectionError("down")
        return {"ok": True}

    registry = Registry()
    registry.register("test.call", call)
    wf = workflow(
        Node(key="a", type="test.call", settings=NodeSettings(retry=RetryPolicy(max_attempts=1)))
    )
    clock = ManualClock(T0)
    saved: list[WorkflowExecution] = []

    def dies_once(execution: WorkflowExecution) -> None:
        saved.append(execution)
        run = execution.node("a")
        if run is not None and run.status is NodeStatus.RUNNING and len(saved) == 2:
            raise Died

    with pytest.raises(Died):
        execute_workflow(wf, None, registry=registry, clock=clock, checkpoint=dies_once)
    failed = recover_execution(saved[-1], workflow=wf, registry=registry, clock=clock)
    assert isinstance(failed, Failed)
    fixed[0] = True
    redriven = redrive_execution(failed.execution, workflow=wf, registry=registry, clock=clock)
    done = resume_workflow(redriven, workflow=wf, registry=registry, clock=clock)
    assert isinstance(done, Completed)
    return done.execution, wf, registry


def test_the_api_and_the_page_show_a_redrive_and_an_interrupted_attempt() -> None:
    execution, wf, registry = interrupted_then_redriven()
    store = MemoryStore(serialize=True)
    store.save_workflow(wf)
    store.save(execution, None)
    clock = ManualClock(T0)
    runner = Runner(registry, store, ManualScheduler(clock=clock), clock)
    with runner, serve(create_app(runner, token=OPERATOR)) as url:
        auth = {"authorization": f"Bearer {OPERATOR}"}
        view = httpx.get(f"{url}/api/executions/{execution.id}", headers=auth).json()
        page = httpx.get(f"{url}/executions/{execution.id}", headers=auth).text
    node = next(n for n in view["nodes"] if n["node_key"] == "a")
    marks = [
        (a["number"], a["outcome"], a["retry"], a["recovered"], a["redrive"])
        for a in node["attempts"]
    ]
    assert marks == [
        (1, "interrupted", False, False, False),
        (1, "failed", False, True, False),  # the same attempt, run again after the crash
        (2, "completed", False, False, True),  # the operator's, not the policy's
    ]
    assert node["attempts"][0]["error"]["code"] == "interrupted"
    assert (view["redrives"], view["interruptions"]) == (1, 1)

    assert page.count('data-outcome="interrupted"') == 1
    assert page.count('class="mark redrive"') == 1
    assert page.count('class="mark recovered"') == 1
    assert "↻" not in page  # neither is a retry of the policy's
    assert 'class="s-interrupted"' in page  # its own colour on the bar
    assert ".s-interrupted{" in page
    assert "<dt>redriven</dt>" in page
    assert "<dt>interrupted</dt>" in page


def test_a_long_policy_on_a_looping_node_previews_its_shown_rows_once_per_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The view's schedule preview computed every retry of a node's policy (up to 1,000) for
    each of the node's runs, to show ten: a definition (untrusted data) looping 8,000 node
    runs under ``retry_defaults: {"*": {max_attempts: 1001}}`` made one page or API view
    (and each poll of its event stream) ~27 s of CPU. It is computed for the ten retries
    shown, once per node; the rows are those of ``schedule()``."""
    from prana import loads_workflow
    from scheduling.web._views import SCHEDULE_PREVIEW_ROWS, execution_view

    loops = 50
    wf = loads_workflow(
        {
            "id": "loop",
            "retry_defaults": {"*": {"max_attempts": 1001, "backoff": "fibonacci"}},
            "nodes": [
                {"key": "start", "type": "manual.trigger"},
                {
                    "key": "inc",
                    "type": "workflow.set_state",
                    "params": {"state": {"n": "{{ ($execution.state.n | default(0)) + 1 }}"}},
                },
                {
                    "key": "check",
                    "type": "logic.if_condition",
                    "params": {"condition": f"{{{{ $execution.state.n < {loops} }}}}"},
                },
            ],
            "connections": [
                {"from_node": "start", "to_node": "inc"},
                {"from_node": "inc", "to_node": "check"},
                {"from_node": "check", "to_node": "inc", "from_port": "true"},
            ],
        }
    )
    registry = Registry()
    done = execute_workflow(wf, None, registry=registry, clock=ManualClock(T0))
    assert isinstance(done, Completed)
    execution = done.execution
    assert len(execution.ordered_node_executions()) == 2 * loops + 1

    computed: list[int] = []
    bounds = RetryPolicy._bounds

    def counted(policy: RetryPolicy, retry: int) -> tuple[float, float, float]:
        computed.append(retry)
        return bounds(policy, retry)

    monkeypatch.setattr(RetryPolicy, "_bounds", counted)
    view = execution_view(execution, 1, wf, registry)
    assert len(computed) <= 3 * SCHEDULE_PREVIEW_ROWS  # three nodes, ten rows each
    monkeypatch.undo()
    expected = RetryPolicy(max_attempts=1001, backoff="fibonacci").schedule()[
        :SCHEDULE_PREVIEW_ROWS
    ]
    for node in view["nodes"]:
        (preview,) = node["retry_policies"]
        assert [row["typical_delay_s"] for row in preview["rows"]] == [
            row.typical_delay for row in expected
        ]
        assert [row["cumulative_typical_s"] for row in preview["rows"]] == [
            row.cumulative_typical for row in expected
        ]
