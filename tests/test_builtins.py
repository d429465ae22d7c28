"""The built-in actions, each called directly with a hand-built ActionContext."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prana import (
    ActionContext,
    NonRetryable,
    Output,
    Registry,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
)
from prana._builtins import FOR_EACH_STATE_PREFIX, SubWorkflowFailed

if TYPE_CHECKING:
    from collections.abc import Mapping

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
REGISTRY = Registry()


def make_ctx(
    input: Mapping[str, Any] | None = None,
    *,
    state: Mapping[str, Any] | None = None,
    node_key: str = "node",
    run_index: int = 0,
) -> ActionContext:
    return ActionContext(
        input={} if input is None else input,
        execution_id="exec-1",
        node_key=node_key,
        attempt=1,
        run_index=run_index,
        state={} if state is None else state,
        now=NOW,
        env={},
        variables={},
        workflow_id="wf",
    )


def staged(ctx: ActionContext) -> dict[str, Any]:
    """The state changes an action staged (what the executor applies on completion)."""
    return dict(ctx._state_updates or {})


def run(type_name: str, params: Any, ctx: ActionContext) -> Any:
    spec = REGISTRY.get(type_name)
    assert spec is not None
    return spec.fn(params, ctx)


def resume(type_name: str, params: Any, ctx: ActionContext, data: Any) -> Any:
    spec = REGISTRY.get(type_name)
    assert spec is not None
    assert spec.resume is not None
    return spec.resume(params, ctx, data)


def test_every_builtin_is_registered_with_its_ports() -> None:
    """A fresh Registry holds every built-in, with fixed ports declared where they are fixed."""
    expected = {
        "manual.trigger": ("main",),
        "logic.if_condition": ("true", "false"),
        "logic.switch": None,
        "data.merge": ("main",),
        "data.set_data": ("main",),
        "workflow.set_state": ("main",),
        "core.for_each": ("loop", "done"),
        "wait.wait": ("main",),
        "workflow.execute_workflow": ("main",),
    }
    for type_name, ports in expected.items():
        spec = REGISTRY.get(type_name)
        assert spec is not None, type_name
        assert spec.output_ports == ports, type_name
    assert [t for t in REGISTRY.types() if REGISTRY.get(t).trigger] == ["manual.trigger"]  # type: ignore[union-attr]
    assert REGISTRY.get("wait.wait").resume is not None  # type: ignore[union-attr]
    assert REGISTRY.get("workflow.execute_workflow").resume is not None  # type: ignore[union-attr]


def test_bad_params_shape_is_non_retryable() -> None:
    """Params that are not a mapping fail clearly, naming the action."""
    with pytest.raises(NonRetryable, match=r"data\.set_data: params must be a mapping"):
        run("data.set_data", ["value"], make_ctx())


def test_none_params_read_as_empty() -> None:
    """Params of None read as no params at all, so the missing param is what gets named."""
    with pytest.raises(NonRetryable, match="mode=None"):
        run("wait.wait", None, make_ctx())


# --- manual.trigger ----------------------------------------------------------------------


def test_manual_trigger_emits_the_workflow_input() -> None:
    """The trigger completes on main with the workflow input."""
    assert run("manual.trigger", {}, make_ctx({"main": {"a": 1}})) == {"a": 1}
    assert run("manual.trigger", {}, make_ctx()) is None


# --- logic.if_condition ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "port"),
    [
        (True, "true"),
        (False, "false"),
        (1, "true"),
        (0, "false"),
        (None, "false"),
        ([], "false"),
        ({"a": 1}, "true"),
        ("yes", "true"),
        ("anything", "true"),
        ("false", "false"),
        (" False ", "false"),
        ("0", "false"),
        ("", "false"),
        ("no", "false"),
        ("null", "false"),
    ],
)
def test_if_condition_routes_by_truthiness(condition: Any, port: str) -> None:
    """The input passes through on "true" or "false"; words like "false" and "0" are false."""
    result = run("logic.if_condition", {"condition": condition}, make_ctx({"main": {"x": 1}}))
    assert result == Output({"x": 1}, port=port)


def test_if_condition_refuses_an_unwrapped_expression() -> None:
    """A condition that still reads ``$input...`` was never evaluated: fail with the fix."""
    with pytest.raises(NonRetryable, match=r"wrap the expression in \{\{ \}\}"):
        run("logic.if_condition", {"condition": "$input.main.ok"}, make_ctx())


def test_if_condition_needs_a_condition() -> None:
    """A missing condition fails, naming the param."""
    with pytest.raises(NonRetryable, match="'condition' param is missing"):
        run("logic.if_condition", {}, make_ctx())


# --- logic.switch ------------------------------------------------------------------------


def test_switch_takes_the_first_truthy_case() -> None:
    """Cases are tried in order; the first truthy condition picks the port."""
    params = {
        "cases": [
            {"condition": False, "port": "a"},
            {"condition": "true", "port": "b"},
            {"condition": True, "port": "c"},
        ]
    }
    assert run("logic.switch", params, make_ctx({"main": 5})) == Output(5, port="b")


def test_switch_falls_back_to_the_default_port() -> None:
    """No matching case sends the input to default_port ("default" unless set)."""
    params: dict[str, Any] = {"cases": [{"condition": 0, "port": "a"}]}
    assert run("logic.switch", params, make_ctx({"main": 5})) == Output(5, port="default")
    params["default_port"] = "other"
    assert run("logic.switch", params, make_ctx({"main": 5})) == Output(5, port="other")
    assert run("logic.switch", {}, make_ctx({"main": 5})) == Output(5, port="default")


def test_switch_value_form_matches_by_equality() -> None:
    """With a ``value`` param, cases with a ``value`` match when equal; bools only match bools."""
    cases = [
        {"value": True, "port": "bool"},
        {"value": "gold", "port": "gold"},
        {"value": 1, "port": "one"},
    ]
    ctx = make_ctx({"main": "data"})
    assert run("logic.switch", {"value": "gold", "cases": cases}, ctx).port == "gold"
    assert run("logic.switch", {"value": 1, "cases": cases}, ctx).port == "one"
    assert run("logic.switch", {"value": True, "cases": cases}, ctx).port == "bool"
    assert run("logic.switch", {"value": 1.0, "cases": cases}, ctx).port == "one"
    assert run("logic.switch", {"value": "x", "cases": cases}, ctx) == Output("data", "default")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"cases": "a"}, "cases must be a list"),
        ({"cases": ["a"]}, r"cases\[0\] must be a mapping"),
        ({"cases": [{"condition": True}]}, r"cases\[0\].port=None"),
        ({"cases": [{"port": "a"}]}, r"cases\[0\] needs a 'condition' or a 'value'"),
        ({"cases": [{"value": 1, "port": "a"}]}, "the 'value' param is missing"),
        ({"cases": [], "default_port": ""}, "default_port=''"),
        ({"cases": [{"condition": "$input.x", "port": "a"}]}, r"cases\[0\].condition"),
    ],
)
def test_switch_bad_params(params: dict[str, Any], message: str) -> None:
    """Malformed cases fail non-retryably, naming the case."""
    with pytest.raises(NonRetryable, match=message):
        run("logic.switch", params, make_ctx())


# --- data.merge --------------------------------------------------------------------------


def test_merge_append_lists_ports_in_name_order() -> None:
    """The default strategy lists each port's value, ports sorted by name."""
    ctx = make_ctx({"input_b": {"b": 2}, "input_a": {"a": 1}, "input_c": None})
    assert run("data.merge", {}, ctx) == [{"a": 1}, {"b": 2}, None]


def test_merge_merge_is_a_shallow_dict_merge_later_ports_winning() -> None:
    """Strategy merge combines dicts; a later port (by name) wins a shared key."""
    ctx = make_ctx({"input_b": {"k": "b", "y": {"z": 1}}, "input_a": {"k": "a", "x": 1}, "c": None})
    result = run("data.merge", {"strategy": "merge"}, ctx)
    assert result == {"k": "b", "x": 1, "y": {"z": 1}}


def test_merge_concat_joins_lists() -> None:
    """Strategy concat joins the ports' lists in port order."""
    ctx = make_ctx({"input_b": [3], "input_a": [1, 2], "input_c": None})
    assert run("data.merge", {"strategy": "concat"}, ctx) == [1, 2, 3]


@pytest.mark.parametrize(
    ("strategy", "data", "message"),
    [
        ("merge", {"input_a": {"a": 1}, "input_b": [1]}, "port 'input_b' holds list"),
        ("concat", {"input_a": [1], "input_b": {"a": 1}}, "port 'input_b' holds dict"),
        ("zip", {"input_a": [1]}, "strategy='zip': use one of append, merge, concat"),
    ],
)
def test_merge_bad_input_names_the_port(strategy: str, data: dict[str, Any], message: str) -> None:
    """Data of the wrong shape fails, naming the port; an unknown strategy lists the valid ones."""
    with pytest.raises(NonRetryable, match=message):
        run("data.merge", {"strategy": strategy}, make_ctx(data))


# --- data.set_data -----------------------------------------------------------------------


def test_set_data_value_outputs_the_value() -> None:
    """``value`` becomes the output as it is, None included."""
    assert run("data.set_data", {"value": [1, 2]}, make_ctx({"main": "x"})) == [1, 2]
    assert run("data.set_data", {"value": None}, make_ctx({"main": "x"})) is None


def test_set_data_fields_sets_keys_on_a_copy_of_the_input() -> None:
    """``fields`` sets keys on the input dict without changing the input itself."""
    data = {"a": 1, "b": 2}
    result = run("data.set_data", {"fields": {"b": 3, "c": 4}}, make_ctx({"main": data}))
    assert result == {"a": 1, "b": 3, "c": 4}
    assert data == {"a": 1, "b": 2}
    assert run("data.set_data", {"fields": {"c": 4}}, make_ctx()) == {"c": 4}


@pytest.mark.parametrize(
    ("params", "main", "message"),
    [
        ({}, None, "exactly one of 'value'"),
        ({"value": 1, "fields": {}}, None, "exactly one of 'value'"),
        ({"fields": [1]}, None, "fields must be a mapping"),
        ({"fields": {"a": 1}}, [1], "input main is list"),
    ],
)
def test_set_data_bad_params(params: dict[str, Any], main: Any, message: str) -> None:
    """Missing, doubled or mistyped params fail with the fix."""
    with pytest.raises(NonRetryable, match=message):
        run("data.set_data", params, make_ctx({"main": main}))


# --- workflow.set_state ------------------------------------------------------------------


def test_set_state_stages_the_changes_and_passes_input_through() -> None:
    """The state mapping is staged for the executor; the output is the input main."""
    ctx = make_ctx({"main": {"x": 1}}, state={"old": 1})
    assert run("workflow.set_state", {"state": {"counter": 2}}, ctx) == {"x": 1}
    assert staged(ctx) == {"counter": 2}
    assert ctx.state == {"old": 1}


@pytest.mark.parametrize("state", [None, [1], {1: "a"}])
def test_set_state_needs_a_string_keyed_mapping(state: Any) -> None:
    """Anything but a mapping of string keys fails, naming the param."""
    with pytest.raises(NonRetryable, match=r"workflow\.set_state: state="):
        run("workflow.set_state", {"state": state}, make_ctx())


# --- core.for_each -----------------------------------------------------------------------


def drive_for_each(
    params: dict[str, Any], body: Any, *, node_key: str = "loop", max_runs: int = 50
) -> tuple[list[Output], dict[str, Any]]:
    """Run a for_each node like the executor would: apply staged state, feed the body back."""
    state: dict[str, Any] = {}
    outputs: list[Output] = []
    main: Any = {"upstream": True}
    for run_index in range(max_runs):
        ctx = make_ctx({"main": main}, state=state, node_key=node_key, run_index=run_index)
        out = run("core.for_each", params, ctx)
        assert isinstance(out, Output)
        outputs.append(out)
        state.update(staged(ctx))
        if out.port == "done":
            return outputs, state
        main = body(out.value)
    raise AssertionError("for_each never finished")


def test_for_each_emits_each_item_then_the_results() -> None:
    """Each run emits the next item on "loop"; after the last, results go out on "done"."""
    outputs, state = drive_for_each({"collection": ["a", "b", "c"]}, lambda v: v["item"].upper())
    assert [o.port for o in outputs] == ["loop", "loop", "loop", "done"]
    assert [o.value for o in outputs[:3]] == [
        {"item": "a", "index": 0},
        {"item": "b", "index": 1},
        {"item": "c", "index": 2},
    ]
    assert outputs[3].value == {"results": ["A", "B", "C"], "count": 3}
    assert state == {f"{FOR_EACH_STATE_PREFIX}loop": None}


def test_for_each_keeps_its_loop_in_shared_state() -> None:
    """The loop state lives under ``__for_each__:<node key>`` with index, items and results."""
    ctx = make_ctx({"main": None}, node_key="each")
    run("core.for_each", {"collection": [1, 2]}, ctx)
    entry = staged(ctx)["__for_each__:each"]
    assert entry == {"index": 0, "items": [1, 2], "results": [], "batch_size": 1}
    ctx2 = make_ctx({"main": "r1"}, state=staged(ctx), node_key="each", run_index=1)
    assert run("core.for_each", {"collection": [1, 2]}, ctx2) == Output(
        {"item": 2, "index": 1}, port="loop"
    )
    assert staged(ctx2)["__for_each__:each"]["results"] == ["r1"]
    assert entry["results"] == []


def test_for_each_batches() -> None:
    """With batch_size > 1 each run emits a list of items, the last batch possibly short."""
    outputs, _ = drive_for_each(
        {"collection": [1, 2, 3, 4, 5], "batch_size": 2}, lambda v: sum(v["items"])
    )
    assert [o.value for o in outputs[:-1]] == [
        {"items": [1, 2], "index": 0},
        {"items": [3, 4], "index": 2},
        {"items": [5], "index": 4},
    ]
    assert outputs[-1] == Output({"results": [3, 7, 5], "count": 3}, port="done")


def test_for_each_empty_collection_is_done_at_once() -> None:
    """An empty collection goes straight to "done" and leaves no state behind."""
    ctx = make_ctx({"main": None})
    assert run("core.for_each", {"collection": []}, ctx) == Output(
        {"results": [], "count": 0}, port="done"
    )
    assert staged(ctx) == {}


def test_for_each_can_run_again_after_finishing() -> None:
    """After "done" clears the state, a new activation starts a fresh loop."""
    first, state = drive_for_each({"collection": [1]}, lambda v: v["item"])
    ctx = make_ctx({"main": None}, state=state, node_key="loop")
    assert run("core.for_each", {"collection": [9]}, ctx) == Output(
        {"item": 9, "index": 0}, port="loop"
    )
    assert first[-1].value == {"results": [1], "count": 1}


def test_for_each_loops_of_different_nodes_do_not_mix() -> None:
    """Each for_each node has its own state entry."""
    ctx = make_ctx({"main": None}, node_key="a", state={"__for_each__:b": {"index": 5}})
    assert run("core.for_each", {"collection": ["x"]}, ctx).value == {"item": "x", "index": 0}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "collection must be a list, got NoneType"),
        ({"collection": "abc"}, "collection must be a list, got str"),
        ({"collection": [1], "batch_size": 0}, "batch_size=0"),
        ({"collection": [1], "batch_size": True}, "batch_size=True"),
    ],
)
def test_for_each_bad_params(params: dict[str, Any], message: str) -> None:
    """A collection that is not a list, or a bad batch size, fails with the fix."""
    with pytest.raises(NonRetryable, match=message):
        run("core.for_each", params, make_ctx())


@given(st.lists(st.integers(), max_size=12), st.integers(min_value=1, max_value=5))
def test_for_each_visits_every_item_once_in_order(items: list[int], batch_size: int) -> None:
    """Whatever the collection and batch size, the body sees every item exactly once, in order."""
    seen: list[int] = []

    def body(value: dict[str, Any]) -> Any:
        batch = value["items"] if batch_size > 1 else [value["item"]]
        seen.extend(batch)
        return len(batch)

    outputs, _ = drive_for_each({"collection": items, "batch_size": batch_size}, body)
    assert seen == items
    done = outputs[-1].value
    assert sum(done["results"]) == len(items)
    assert done["count"] == len(outputs) - 1


# --- wait.wait ---------------------------------------------------------------------------


def test_wait_webhook_suspends_until_expiry() -> None:
    """A webhook wait suspends with an expiry timeout_hours (default 24) from now."""
    assert run("wait.wait", {"mode": "webhook"}, make_ctx()) == Suspend(
        "webhook", WebhookData(expires_at=NOW + timedelta(hours=24))
    )
    assert run("wait.wait", {"mode": "webhook", "timeout_hours": 1.5}, make_ctx()) == Suspend(
        "webhook", WebhookData(expires_at=NOW + timedelta(minutes=90))
    )
    assert run("wait.wait", {"mode": "webhook", "timeout_hours": None}, make_ctx()) == Suspend(
        "webhook", WebhookData(expires_at=None)
    )


def test_wait_webhook_resume_data_becomes_the_output() -> None:
    """Resuming a webhook wait completes with the delivered data."""
    params = {"mode": "webhook"}
    ctx = make_ctx({"main": "input"})
    assert resume("wait.wait", params, ctx, {"approved": True}) == {"approved": True}


@pytest.mark.parametrize(
    ("duration", "unit", "delta"),
    [
        (250, "ms", timedelta(milliseconds=250)),
        (30, "seconds", timedelta(seconds=30)),
        (1.5, "minutes", timedelta(seconds=90)),
        (2, "hours", timedelta(hours=2)),
        (1, "days", timedelta(days=1)),
        (5, None, timedelta(seconds=5)),
    ],
)
def test_wait_interval_suspends_on_a_timer(
    duration: float, unit: str | None, delta: timedelta
) -> None:
    """An interval wait suspends with a timer due ``duration`` units from now."""
    params: dict[str, Any] = {"mode": "interval", "duration": duration}
    if unit is not None:
        params["unit"] = unit
    assert run("wait.wait", params, make_ctx()) == Suspend(
        "timer", TimerData(resume_at=NOW + delta)
    )


def test_wait_zero_interval_completes_at_once() -> None:
    """A zero duration does not suspend; it passes the input through."""
    params = {"mode": "interval", "duration": 0, "unit": "seconds"}
    assert run("wait.wait", params, make_ctx({"main": {"x": 1}})) == {"x": 1}


def test_wait_timer_resume_passes_the_input_through() -> None:
    """Resuming a timer wait ignores the resume data and outputs the input main."""
    params = {"mode": "interval", "duration": 5}
    assert resume("wait.wait", params, make_ctx({"main": {"x": 1}}), None) == {"x": 1}


@pytest.mark.parametrize(
    "schedule_at",
    ["2030-01-01T13:00:00+00:00", "2030-01-01T13:00:00Z", "2030-01-01T14:00:00+01:00"],
)
def test_wait_schedule_in_the_future_suspends_until_then(schedule_at: str) -> None:
    """A future ``schedule_at`` (any offset, or Z) suspends with a timer due then."""
    result = run("wait.wait", {"mode": "schedule", "schedule_at": schedule_at}, make_ctx())
    assert result == Suspend("timer", TimerData(resume_at=NOW + timedelta(hours=1)))
    assert result.data.resume_at.tzinfo is not None


@pytest.mark.parametrize("schedule_at", [NOW, NOW - timedelta(days=1), "2029-12-31T00:00:00+00:00"])
def test_wait_schedule_not_in_the_future_completes_at_once(schedule_at: Any) -> None:
    """A ``schedule_at`` at or before now passes the input through without suspending."""
    params = {"mode": "schedule", "schedule_at": schedule_at}
    assert run("wait.wait", params, make_ctx({"main": "go"})) == "go"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "mode=None: use one of webhook, interval, schedule"),
        ({"mode": "sleep"}, "mode='sleep'"),
        ({"mode": "interval"}, "duration=None"),
        ({"mode": "interval", "duration": "5"}, "duration='5'"),
        ({"mode": "interval", "duration": True}, "duration=True"),
        ({"mode": "interval", "duration": -1}, "duration=-1"),
        ({"mode": "interval", "duration": float("inf")}, "duration=inf"),
        ({"mode": "interval", "duration": 1e300, "unit": "days"}, "too long"),
        ({"mode": "interval", "duration": 5, "unit": "weeks"}, "unit='weeks': use one of ms"),
        ({"mode": "webhook", "timeout_hours": 0}, "timeout_hours=0"),
        ({"mode": "webhook", "timeout_hours": "1"}, "timeout_hours='1'"),
        ({"mode": "schedule", "schedule_at": "2030-01-01T13:00:00"}, "has no time zone"),
        ({"mode": "schedule", "schedule_at": datetime(2031, 1, 1)}, "has no time zone"),  # noqa: DTZ001
        ({"mode": "schedule", "schedule_at": "tomorrow"}, "not an ISO 8601 time"),
        ({"mode": "schedule"}, "schedule_at=None"),
    ],
)
def test_wait_bad_params(params: dict[str, Any], message: str) -> None:
    """A bad mode, unit, duration or time fails non-retryably, naming the param."""
    with pytest.raises(NonRetryable, match=message):
        run("wait.wait", params, make_ctx())


# --- workflow.execute_workflow -----------------------------------------------------------


def test_execute_workflow_suspends_for_the_child() -> None:
    """The action suspends with kind sub_workflow; input defaults to the node's input main."""
    result = run("workflow.execute_workflow", {"workflow_id": "child"}, make_ctx({"main": [1]}))
    assert result == Suspend(
        "sub_workflow", SubWorkflowData(workflow_id="child", input=[1], mode="sync")
    )


def test_execute_workflow_passes_every_option() -> None:
    """Explicit input (even None), mode, version and timeout_ms (as a deadline) reach the data."""
    params = {
        "workflow_id": "child",
        "input": None,
        "mode": "fire_and_forget",
        "version": 2,
        "timeout_ms": 5000,
    }
    result = run("workflow.execute_workflow", params, make_ctx({"main": [1]}))
    assert result.data == SubWorkflowData(
        workflow_id="child",
        input=None,
        mode="fire_and_forget",
        version=2,
        timeout_ms=5000,
        expires_at=NOW + timedelta(seconds=5),
    )
    params["mode"] = "async"
    assert run("workflow.execute_workflow", params, make_ctx()).data.mode == "async"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "workflow_id=None"),
        ({"workflow_id": ""}, "workflow_id=''"),
        ({"workflow_id": "c", "mode": "later"}, "mode='later': use one of sync, async"),
        ({"workflow_id": "c", "version": 0}, "version=0"),
        ({"workflow_id": "c", "version": "2"}, "version='2'"),
        ({"workflow_id": "c", "timeout_ms": -5}, "timeout_ms=-5"),
    ],
)
def test_execute_workflow_bad_params(params: dict[str, Any], message: str) -> None:
    """Missing or bad params fail non-retryably, naming the param."""
    with pytest.raises(NonRetryable, match=message):
        run("workflow.execute_workflow", params, make_ctx())


def test_execute_workflow_resume_completed_outputs_the_child_output() -> None:
    """A completed child's output becomes this node's output."""
    data = {"status": "completed", "output": {"total": 3}}
    assert resume("workflow.execute_workflow", {"workflow_id": "c"}, make_ctx(), data) == {
        "total": 3
    }


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ({"status": "failed", "error": {"message": "card declined"}}, "'c' failed: card declined"),
        ({"status": "timeout", "error": "deadline passed"}, "'c' timed out: deadline passed"),
    ],
)
def test_execute_workflow_resume_failed_child_fails_the_node(
    data: dict[str, Any], text: str
) -> None:
    """A failed or timed-out child raises SubWorkflowFailed carrying the child's error."""
    with pytest.raises(SubWorkflowFailed, match=text) as info:
        resume("workflow.execute_workflow", {"workflow_id": "c"}, make_ctx(), data)
    assert info.value.status == data["status"]
    assert info.value.error == data["error"]
    assert info.value.workflow_id == "c"
    assert info.value.details == {
        "workflow_id": "c",
        "status": data["status"],
        "error": data["error"],
    }


def test_execute_workflow_resume_refuses_unknown_shapes() -> None:
    """Resume data of an unknown shape fails non-retryably (the executor validates it first)."""
    with pytest.raises(NonRetryable, match="is not"):
        resume("workflow.execute_workflow", {"workflow_id": "c"}, make_ctx(), {"status": "odd"})


def test_the_actions_reference_names_every_param_a_builtin_reads() -> None:
    """The Built-in actions page is each action's docstring, so every param a built-in reads
    (``p.get("x")``, ``p["x"]``, ``"x" in p``, ``_helper(p, "x")``) is named there: the page
    said nothing of ``workflow.execute_workflow``'s ``workflow_id``, ``version``, ``mode``
    and ``timeout_ms``, nor of ``logic.switch``'s ``cases``, so no one could write the node."""
    import inspect
    import re

    reads = re.compile(r'\bp(?:\.get\(|\[)"(\w+)"|\(p, "(\w+)"|"(\w+)" in p\b')
    missing: dict[str, list[str]] = {}
    for type_name in REGISTRY.types():
        spec = REGISTRY.get(type_name)
        assert spec is not None
        if getattr(spec.fn, "__module__", None) != "prana._builtins":
            continue  # http.request documents its params in its own module
        doc = (spec.fn.__doc__ or "") + (getattr(spec.resume, "__doc__", None) or "")
        for fn in (spec.fn, spec.resume):
            if fn is None:
                continue
            names = {"".join(groups) for groups in reads.findall(inspect.getsource(fn))}
            absent = sorted(n for n in names if n not in doc)
            if absent:
                missing[type_name] = absent
    assert missing == {}
