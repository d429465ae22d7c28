"""The built-in actions, reached by type name from any ``Registry()``.

Each is a small ``(params, ctx) -> value`` function; params arrive already rendered.
Bad params raise ``NonRetryable`` naming the param and the fix, so a misconfigured node
fails at once instead of retrying. Where Prana is silent, the choice is stated in the
action's docstring.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

from prana._durations import HOUR, SECONDS_PER_UNIT, is_aware
from prana._errors import NonRetryable
from prana._hooks import DELIVERED_PREFIX, PENDING_TOKEN_PREFIX
from prana._model import (
    MAX_WORKFLOW_VERSION,
    Output,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
)

if TYPE_CHECKING:
    from prana._registry import ActionContext, Registry

__all__ = [
    "FOR_EACH_STATE_PREFIX",
    "RESERVED_STATE_PREFIXES",
    "SubWorkflowFailed",
    "register_builtins",
    "reserved_state_key",
]

FOR_EACH_STATE_PREFIX = "__for_each__:"
RESERVED_STATE_PREFIXES = (FOR_EACH_STATE_PREFIX, PENDING_TOKEN_PREFIX, DELIVERED_PREFIX)
"""State keys the engine keeps for itself: a loop's progress, a handed-out token's digest,
a webhook delivery's digest."""


def reserved_state_key(updates: Mapping[str, Any], node_key: str, node_type: str) -> str | None:
    """The first key of a state update that only the engine may write, or ``None``.

    A reply copied into the state (``workflow.set_state`` with ``{{ $input.main }}``) wrote
    ``__webhook__:<wait>``, the digest a later wait takes as its token's, and so resumed
    that wait with a token of the sender's; ``__for_each__:<node>`` steers a loop. Only a
    ``core.for_each`` node writes its own loop key.
    """
    for key in updates:
        if key.startswith(RESERVED_STATE_PREFIXES) and not (
            node_type == "core.for_each" and key == FOR_EACH_STATE_PREFIX + node_key
        ):
            return key
    return None


"""``core.for_each`` keeps its loop in the shared state under this prefix plus its node key."""

WAIT_MODES: tuple[str, ...] = ("webhook", "interval", "schedule")
WAIT_UNITS: dict[str, float] = {
    name: SECONDS_PER_UNIT[unit]
    for name, unit in (
        ("ms", "ms"),
        ("seconds", "s"),
        ("minutes", "m"),
        ("hours", "h"),
        ("days", "d"),
    )
}
"""``wait.wait``'s ``unit`` names, sized by the one unit table."""
SUB_WORKFLOW_MODES: tuple[str, ...] = ("sync", "async", "fire_and_forget")
MERGE_STRATEGIES: tuple[str, ...] = ("append", "merge", "concat")
FALSE_WORDS = frozenset({"", "false", "0", "no", "off", "none", "null"})
"""Strings that count as false for ``logic.if_condition`` (after trimming, any case)."""


class SubWorkflowFailed(Exception):  # noqa: N818 - reads as what happened, like TimeoutError
    """A sub-workflow run by ``workflow.execute_workflow`` failed or timed out.

    ``status`` is ``"failed"`` or ``"timeout"``; ``error`` is the child's error as given.
    ``details`` holds all three as plain data, which the executor records on the node.
    """

    def __init__(self, workflow_id: str, status: str, error: Any) -> None:
        self.workflow_id = workflow_id
        self.status = status
        self.error = error
        self.details = {"workflow_id": workflow_id, "status": status, "error": error}
        what = "timed out" if status == "timeout" else "failed"
        detail = error.get("message", error) if isinstance(error, Mapping) else error
        super().__init__(f"sub-workflow {workflow_id!r} {what}: {detail}")


# --- helpers -----------------------------------------------------------------------------


def _params(params: Any, node_type: str) -> Mapping[str, Any]:
    """The params as a mapping, or a clear failure."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise NonRetryable(
            f"{node_type}: params must be a mapping of names to values, got {type(params).__name__}"
        )
    return params


def _main(ctx: ActionContext) -> Any:
    return ctx.input.get("main")


def _truthy(value: Any, field: str) -> bool:
    """Read a rendered condition: strings like ``"false"`` and ``"0"`` are false."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("$"):
            raise NonRetryable(
                f"{field}={value!r} is text, not a value: wrap the expression in "
                f"{{{{ }}}} so it is evaluated, e.g. '{{{{ {text} }}}}'"
            )
        return text.lower() not in FALSE_WORDS
    return bool(value)


def _same(a: Any, b: Any) -> bool:
    """Equality for ``logic.switch``: ``True`` does not match ``1``, nor ``False`` ``0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return bool(a == b)


def _number(value: Any, field: str, fix: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NonRetryable(f"{field}={value!r}: {fix}")
    try:
        number = float(value)
    except OverflowError:  # an int past any float: no wait is that long
        number = math.inf
    if not math.isfinite(number):
        raise NonRetryable(f"{field}={value!r}: {fix}")
    return number


def _positive_int(
    params: Mapping[str, Any], field: str, node_type: str, most: int | None = None
) -> int | None:
    value = params.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NonRetryable(f"{node_type}: {field}={value!r}: use a whole number >= 1")
    if most is not None and value > most:
        raise NonRetryable(f"{node_type}: {field}={value!r}: use a whole number from 1 to {most}")
    return value


def _later(now: datetime, amount: float, unit: float, field: str, given: Any) -> datetime:
    """``amount`` times ``unit`` seconds after ``now``; past any date, an error naming ``field``.

    A time past year 9999 in UTC could not be stored, so it is refused where the
    definition asks for it.
    """
    try:
        when = now + timedelta(seconds=amount * unit)
        when.astimezone(timezone.utc)
    except OverflowError:
        raise NonRetryable(f"{field}={given!r} is too long to wait") from None
    return when


# --- triggers and logic ------------------------------------------------------------------


def _manual_trigger(params: Any, ctx: ActionContext) -> Any:
    """Emit the workflow input on ``main``."""
    del params
    return _main(ctx)


def _if_condition(params: Any, ctx: ActionContext) -> Output:
    """Pass the input through on ``"true"`` or ``"false"`` by the rendered ``condition``.

    Params are rendered before the action runs, so ``condition`` is a value: write
    ``"{{ $input.main.age > 18 }}"``. Strings count as false when they are ``""``,
    ``"false"``, ``"0"``, ``"no"``, ``"off"``, ``"none"`` or ``"null"`` (any case), so a
    condition rendered inside text still reads right; a string starting with ``$`` is an
    expression someone forgot to wrap in ``{{ }}`` and fails.
    """
    p = _params(params, "logic.if_condition")
    if "condition" not in p:
        raise NonRetryable(
            "logic.if_condition: the 'condition' param is missing; "
            "set it to an expression such as '{{ $input.main.ok }}'"
        )
    port = "true" if _truthy(p["condition"], "logic.if_condition: condition") else "false"
    return Output(_main(ctx), port=port)


def _switch(params: Any, ctx: ActionContext) -> Output:
    """Pass the input through on the port of the first matching case, else ``default_port``.

    ``cases`` is a list of cases, tried in order; a case is ``{"condition": ..., "port": ...}``
    (matches when truthy, read as in ``logic.if_condition``) or ``{"value": v, "port": ...}``
    (matches when the ``value`` param equals ``v``; booleans only match booleans).
    """
    p = _params(params, "logic.switch")
    cases = p.get("cases", [])
    if not isinstance(cases, list | tuple):
        raise NonRetryable(
            "logic.switch: cases must be a list of {'condition': ..., 'port': ...} or "
            f"{{'value': ..., 'port': ...}}, got {type(cases).__name__}"
        )
    default_port = p.get("default_port", "default")
    if not isinstance(default_port, str) or not default_port:
        raise NonRetryable(f"logic.switch: default_port={default_port!r}: use a port name")
    for i, case in enumerate(cases):
        field = f"logic.switch: cases[{i}]"
        if not isinstance(case, Mapping):
            raise NonRetryable(f"{field} must be a mapping with 'port' and 'condition' or 'value'")
        port = case.get("port")
        if not isinstance(port, str) or not port:
            raise NonRetryable(f"{field}.port={port!r}: use a port name")
        if "value" in case:
            if "value" not in p:
                raise NonRetryable(
                    f"{field} compares a value, but the 'value' param is missing; set "
                    "'value' to what the cases compare against"
                )
            matched = _same(p["value"], case["value"])
        elif "condition" in case:
            matched = _truthy(case["condition"], f"{field}.condition")
        else:
            raise NonRetryable(f"{field} needs a 'condition' or a 'value'")
        if matched:
            return Output(_main(ctx), port=port)
    return Output(_main(ctx), port=default_port)


# --- data --------------------------------------------------------------------------------


def _merge(params: Any, ctx: ActionContext) -> Any:
    """Combine the data of every input port, ports taken in name order.

    ``strategy``: ``"append"`` (default) gives the list of the ports' values;
    ``"merge"`` a shallow dict merge, later ports winning; ``"concat"`` the lists joined.
    ``"merge"`` and ``"concat"`` skip ports whose data is ``None`` (nothing delivered).
    """
    p = _params(params, "data.merge")
    strategy = p.get("strategy", "append")
    values = [(port, ctx.input[port]) for port in sorted(ctx.input)]
    if strategy == "append":
        return [value for _, value in values]
    if strategy == "merge":
        merged: dict[str, Any] = {}
        for port, value in values:
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise NonRetryable(
                    f"data.merge: strategy 'merge' needs a dict on every port, but port "
                    f"{port!r} holds {type(value).__name__}; use strategy 'append' or 'concat'"
                )
            merged.update(value)
        return merged
    if strategy == "concat":
        joined: list[Any] = []
        for port, value in values:
            if value is None:
                continue
            if not isinstance(value, list | tuple):
                raise NonRetryable(
                    f"data.merge: strategy 'concat' needs a list on every port, but port "
                    f"{port!r} holds {type(value).__name__}; use strategy 'append' or 'merge'"
                )
            joined.extend(value)
        return joined
    raise NonRetryable(
        f"data.merge: strategy={strategy!r}: use one of {', '.join(MERGE_STRATEGIES)}"
    )


def _set_data(params: Any, ctx: ActionContext) -> Any:
    """Output ``value`` as given, or the input dict with ``fields`` set (shallowly).

    Give exactly one of ``value`` and ``fields``; with ``fields`` the input ``main`` must
    be a dict or ``None`` (treated as ``{}``), and is copied, never changed.
    """
    p = _params(params, "data.set_data")
    has_value = "value" in p
    has_fields = "fields" in p
    if has_value == has_fields:
        raise NonRetryable(
            "data.set_data: give exactly one of 'value' (the output as is) or 'fields' "
            "(keys to set on the input dict)"
        )
    if has_value:
        return p["value"]
    fields = p["fields"]
    if not isinstance(fields, Mapping):
        raise NonRetryable(
            f"data.set_data: fields must be a mapping of keys to values, got "
            f"{type(fields).__name__}"
        )
    data = _main(ctx)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise NonRetryable(
            f"data.set_data: 'fields' sets keys on the input dict, but input main is "
            f"{type(data).__name__}; use 'value' to replace the data instead"
        )
    return {**data, **fields}


def _set_state(params: Any, ctx: ActionContext) -> Any:
    """Set keys of the shared workflow state from ``state``; pass the input ``main`` through."""
    p = _params(params, "workflow.set_state")
    state = p.get("state")
    if not isinstance(state, Mapping) or not all(isinstance(k, str) for k in state):
        raise NonRetryable(
            f"workflow.set_state: state={state!r}: use a mapping of string keys to values"
        )
    ctx.update_state(state)
    return _main(ctx)


# --- loops -------------------------------------------------------------------------------


def _for_each(params: Any, ctx: ActionContext) -> Output:
    """Emit one item (or batch) per run on ``"loop"``, then every result on ``"done"``.

    Wire the loop body's end back to this node's ``main`` input. The first run (no loop
    state yet) stores ``collection`` under ``"__for_each__:<node key>"`` in the shared
    state and emits ``{"item": x, "index": 0}`` (with ``batch_size > 1``:
    ``{"items": [...], "index": i}``, ``i`` the batch's first index). Each later run
    records its input ``main`` as one result and emits the next item; when none are left
    it emits ``{"results": [...], "count": n}`` on ``"done"`` (``n`` results, one per
    pass) and clears its state entry. The collection and batch size are read on the
    first run only. An empty collection goes to ``"done"`` at once.
    """
    key = FOR_EACH_STATE_PREFIX + ctx.node_key
    loop = ctx.state.get(key)
    if loop is None:
        p = _params(params, "core.for_each")
        items = p.get("collection")
        if not isinstance(items, list | tuple):
            raise NonRetryable(
                f"core.for_each: collection must be a list, got {type(items).__name__}; "
                "e.g. '{{ $input.main.items }}'"
            )
        size = p.get("batch_size", 1)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise NonRetryable(f"core.for_each: batch_size={size!r}: use a whole number >= 1")
        if not items:
            return Output({"results": [], "count": 0}, port="done")
        loop = {"index": 0, "items": list(items), "results": [], "batch_size": size}
        ctx.update_state({key: loop})
        return Output(_loop_item(loop), port="loop")
    results = [*loop["results"], _main(ctx)]
    index = loop["index"] + loop["batch_size"]
    if index < len(loop["items"]):
        loop = {**loop, "index": index, "results": results}
        ctx.update_state({key: loop})
        return Output(_loop_item(loop), port="loop")
    ctx.update_state({key: None})
    return Output({"results": results, "count": len(results)}, port="done")


def _loop_item(loop: Mapping[str, Any]) -> dict[str, Any]:
    index: int = loop["index"]
    size: int = loop["batch_size"]
    if size == 1:
        return {"item": loop["items"][index], "index": index}
    return {"items": loop["items"][index : index + size], "index": index}


# --- waiting -----------------------------------------------------------------------------


def _wait(params: Any, ctx: ActionContext) -> Any:
    """Pause for a webhook, an interval or until a time; never sleeps.

    ``mode="webhook"``: ``Suspend("webhook", WebhookData(expires_at=now + timeout_hours))``,
    ``timeout_hours`` defaulting to 24 (``None`` explicitly: never expires).
    ``mode="interval"``: ``duration`` (a number) in ``unit`` (``ms``, ``seconds`` (the
    default), ``minutes``, ``hours``, ``days``) -> ``Suspend("timer", ...)``; zero
    completes at once. ``mode="schedule"``: ``schedule_at``, an ISO 8601 time with an
    offset (or an aware datetime); a time not in the future completes at once.
    Completing passes the input ``main`` through.
    """
    p = _params(params, "wait.wait")
    mode = p.get("mode")
    if mode == "webhook":
        hours = p.get("timeout_hours", 24)
        if hours is None:
            return Suspend("webhook", WebhookData(expires_at=None))
        fix = "use a positive number of hours (or None for no timeout)"
        seconds = _number(hours, "wait.wait: timeout_hours", fix)
        if seconds <= 0:
            raise NonRetryable(f"wait.wait: timeout_hours={hours!r}: {fix}")
        expires_at = _later(ctx.now, seconds, HOUR, "wait.wait: timeout_hours", hours)
        return Suspend("webhook", WebhookData(expires_at=expires_at))
    if mode == "interval":
        unit = p.get("unit", "seconds")
        if unit not in WAIT_UNITS:
            raise NonRetryable(f"wait.wait: unit={unit!r}: use one of {', '.join(WAIT_UNITS)}")
        duration = p.get("duration")
        fix = "use a non-negative number (of the unit)"
        amount = _number(duration, "wait.wait: duration", fix)
        if amount < 0:
            raise NonRetryable(f"wait.wait: duration={duration!r}: {fix}")
        if amount == 0:
            return _main(ctx)
        resume_at = _later(ctx.now, amount, WAIT_UNITS[unit], "wait.wait: duration", duration)
        return Suspend("timer", TimerData(resume_at=resume_at))
    if mode == "schedule":
        when = _aware_time(p.get("schedule_at"))
        if when <= ctx.now:
            return _main(ctx)
        return Suspend("timer", TimerData(resume_at=when))
    raise NonRetryable(f"wait.wait: mode={mode!r}: use one of {', '.join(WAIT_MODES)}")


def _aware_time(value: Any) -> datetime:
    """Read ``schedule_at``: an aware datetime or ISO 8601 text with an offset (or ``Z``)."""
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise NonRetryable(
                f"wait.wait: schedule_at={value!r} is not an ISO 8601 time; "
                "use e.g. '2030-01-01T09:00:00+00:00'"
            ) from None
    elif isinstance(value, datetime):
        when = value
    else:
        raise NonRetryable(
            f"wait.wait: schedule_at={value!r}: use an ISO 8601 time with an offset, "
            "e.g. '2030-01-01T09:00:00+00:00'"
        )
    if not is_aware(when):
        raise NonRetryable(
            f"wait.wait: schedule_at={value!r} has no time zone; add an offset such as "
            "'+00:00' or 'Z'"
        )
    try:
        when.astimezone(timezone.utc)
    except OverflowError:
        raise NonRetryable(
            f"wait.wait: schedule_at={value!r} is past the last date (9999-12-31 in UTC)"
        ) from None
    return when


def _wait_resume(params: Any, ctx: ActionContext, resume_data: Any) -> Any:
    """A webhook's delivered data becomes the output; a timer passes the input ``main`` on."""
    p = _params(params, "wait.wait")
    if p.get("mode") == "webhook":
        return resume_data
    return _main(ctx)


# --- sub-workflows -----------------------------------------------------------------------


def _execute_workflow(params: Any, ctx: ActionContext) -> Suspend:
    """Ask the shell to run a sub-workflow: ``Suspend("sub_workflow", SubWorkflowData(...))``.

    Params: ``workflow_id`` (required: the child's id, its definition registered first),
    ``version`` (default: the latest registered), ``input`` (default: this node's input
    ``main``), ``mode`` (``sync``, the default: the child runs in the same step as the
    parent; ``async``: it starts from an alarm; ``fire_and_forget``: the parent goes on at
    once, its output ``{"execution_id": <the child's id>}``) and ``timeout_ms`` (when the
    parent stops waiting: the node fails, ``sub_workflow_failed``, and the child is
    cancelled). A failed child fails the node the same way.
    The suspension is the same for every ``mode``; the shell decides how long the parent
    waits (``sync``/``async``: until the child ends; ``fire_and_forget``: not at all).
    """
    node_type = "workflow.execute_workflow"
    p = _params(params, node_type)
    workflow_id = p.get("workflow_id")
    if not isinstance(workflow_id, str) or not workflow_id:
        raise NonRetryable(
            f"{node_type}: workflow_id={workflow_id!r}: give the id of the workflow to run"
        )
    mode = p.get("mode", "sync")
    if mode not in SUB_WORKFLOW_MODES:
        raise NonRetryable(
            f"{node_type}: mode={mode!r}: use one of {', '.join(SUB_WORKFLOW_MODES)}"
        )
    timeout_ms = _positive_int(p, "timeout_ms", node_type)
    data = SubWorkflowData(
        workflow_id=workflow_id,
        input=p["input"] if "input" in p else _main(ctx),
        mode=mode,
        version=_positive_int(p, "version", node_type, MAX_WORKFLOW_VERSION),
        timeout_ms=timeout_ms,
        expires_at=(
            _later(ctx.now, timeout_ms, 0.001, f"{node_type}: timeout_ms", timeout_ms)
            if timeout_ms is not None
            else None
        ),
    )
    return Suspend("sub_workflow", data)


def _execute_workflow_resume(params: Any, ctx: ActionContext, resume_data: Any) -> Any:
    """A completed child's output becomes the output; a failed or timed-out child fails."""
    del ctx
    p = _params(params, "workflow.execute_workflow")
    status = resume_data.get("status") if isinstance(resume_data, Mapping) else None
    if status == "completed":
        return resume_data.get("output")
    workflow_id = str(p.get("workflow_id", "?"))
    if status in ("failed", "timeout"):
        raise SubWorkflowFailed(workflow_id, status, resume_data.get("error"))
    raise NonRetryable(
        f"workflow.execute_workflow: resume data {resume_data!r} is not "
        "{'status': 'completed', 'output': ...} or {'status': 'failed'|'timeout', 'error': ...}"
    )


def register_builtins(registry: Registry) -> None:
    """Register every built-in action on ``registry``."""
    registry.register("manual.trigger", _manual_trigger, trigger=True, output_ports=("main",))
    registry.register("logic.if_condition", _if_condition, output_ports=("true", "false"))
    registry.register("logic.switch", _switch)
    registry.register("data.merge", _merge, output_ports=("main",))
    registry.register("data.set_data", _set_data, output_ports=("main",))
    registry.register("workflow.set_state", _set_state, output_ports=("main",))
    registry.register("core.for_each", _for_each, output_ports=("loop", "done"))
    registry.register("wait.wait", _wait, _wait_resume, output_ports=("main",))
    registry.register(
        "workflow.execute_workflow",
        _execute_workflow,
        _execute_workflow_resume,
        output_ports=("main",),
    )
    if http_available():
        registry.register("http.request", _http_request, **HTTP_SPEC)


HTTP_SPEC: Final[dict[str, Any]] = {
    "output_ports": ("main",),
    "side_effects": True,
    "uses_idempotency_key": True,
}
"""How ``http.request`` is registered, here and by ``prana.http.register_http``."""

HTTP_EXTRA_NEEDED: Final = (
    "the built-in 'http.request' needs httpx, which is not installed: "
    "pip install 'prana-workflows[http]'"
)
"""What a workflow using ``http.request``, or ``register_http``, is told without httpx."""


@functools.cache
def http_available() -> bool:
    """Whether httpx is installed (checked once, without importing it)."""
    import importlib.util

    return importlib.util.find_spec("httpx") is not None


def _http_request(params: Any, ctx: ActionContext) -> Any:
    """``http.request`` as ``Registry()`` has it: ``prana._http``'s default action, whose
    module (sockets, address checks) is imported when such a node first runs."""
    from prana._http import default_action

    return default_action()(params, ctx)
