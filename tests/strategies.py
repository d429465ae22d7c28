"""Hypothesis strategies: random valid workflows, failure scripts and retry policies.

A ``Scenario`` is everything one property run needs: a workflow, the failure script its
test actions follow, the workflow input, an execution id and a plan for webhook pauses.
Test actions are deterministic: what they do depends only on (node key, attempt,
run_index, input) and the immutable script, never on state shared across runs, so an
interrupted run (reloaded from JSON at every pause) and an uninterrupted one see the
same script. ``make_registry`` builds a fresh registry for each example.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

import attrs
from hypothesis import strategies as st

from prana import (
    ActionContext,
    Connection,
    Node,
    NodeSettings,
    NonRetryable,
    Registry,
    RetryAfter,
    RetryData,
    RetryPolicy,
    Suspend,
    TimerData,
    WebhookData,
    Workflow,
)
from prana._model import OnError
from prana._policy import CURVES, JITTER_KINDS, Backoff
from prana.testing import ManualClock

ErrorKind = Literal["connection", "value", "non_retryable", "retry_after"]
ERROR_KINDS: tuple[ErrorKind, ...] = ("connection", "value", "non_retryable", "retry_after")
BACKOFFS = cast("tuple[Backoff, ...]", tuple(CURVES))
"""Every backoff curve, read from the policy's table (never a copied list)."""
ON_ERROR_MODES: tuple[OnError, ...] = ("stop_workflow", "continue", "continue_error_output")
JITTERS = tuple(JITTER_KINDS)

STEP = "test.step"
MERGE = "test.merge"
APPROVAL = "test.approval"
TEST_TYPES = (STEP, MERGE, APPROVAL)
"""The test actions: each follows the failure script; only these ever fail."""

MERGE_PORTS = ("a", "b")
TRIGGER = "start"
MAX_NODES = 12
"""Nodes per workflow, the trigger included."""
MAX_RUNS_PER_NODE = 4
"""Cap on a node's estimated runs, so OR-joins cannot multiply runs without bound."""
_KEY_POOL = tuple("abcdefghijklmnopqrstuvw")


@attrs.frozen
class Fault:
    """One node run's script: attempts ``1..times`` raise ``error``, later ones succeed."""

    times: int
    error: ErrorKind
    hint_seconds: float = 0.0

    def exception(self, node_key: str) -> Exception:
        """The exception this fault raises (a fresh one each time)."""
        message = f"scripted {self.error} failure of {node_key}"
        if self.error == "connection":
            return ConnectionError(message)
        if self.error == "value":
            return ValueError(message)
        if self.error == "non_retryable":
            return NonRetryable(message)
        return RetryAfter(self.hint_seconds, message)


Script = Mapping[str, tuple[Fault, ...]]
"""Per node key, one ``Fault`` per run index (cycled); a missing key never fails."""


@attrs.frozen
class Scenario:
    """A workflow, the script its test actions follow, and how the driver treats pauses.

    ``expire_plan`` says, for the k-th webhook pause (cycled), whether the driver lets the
    wait expire (``expire_webhook``) instead of delivering data.
    """

    workflow: Workflow
    script: Script
    input: Any
    execution_id: str
    expire_plan: tuple[bool, ...] = ()


@attrs.define
class Answers:
    """How a drive of a ``Scenario`` answers each pause, moving ``clock`` to the answer's time.

    Retries and timers resume when due; a webhook is delivered one second later, or left to
    expire at ``expires_at`` where the scenario's ``expire_plan`` says so; an approval is
    answered one second later.
    """

    scenario: Scenario
    clock: ManualClock
    webhooks: int = 0

    def answer(self, data: Any, step: int) -> tuple[bool, Any]:
        """(whether the webhook wait expires, the resume data) for pause ``data``, the
        ``step``-th pause of the drive."""
        clock = self.clock
        if isinstance(data, RetryData | TimerData):
            clock.set(max(clock(), data.resume_at))
            return False, None
        if isinstance(data, WebhookData):
            plan = self.scenario.expire_plan
            expire = bool(plan) and plan[self.webhooks % len(plan)] and data.expires_at is not None
            self.webhooks += 1
            if expire and data.expires_at is not None:
                clock.set(data.expires_at)
                return True, None
            clock.advance(1)
            return False, {"hook": self.webhooks}
        clock.advance(1)
        return False, {"approved": step}


# -- the deterministic test actions -------------------------------------------------------


def digest(value: Any) -> int:
    """A stable checksum of a JSON-native value (the same in every process)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return zlib.crc32(text.encode())


def _fail_if_scripted(script: Script, ctx: ActionContext) -> None:
    faults = script.get(ctx.node_key)
    if not faults:
        return
    fault = faults[ctx.run_index % len(faults)]
    if ctx.attempt <= fault.times:
        raise fault.exception(ctx.node_key)


def _result(ctx: ActionContext) -> dict[str, Any]:
    """A small output derived only from the node, its run, its attempt and its input."""
    return {
        "node": ctx.node_key,
        "run": ctx.run_index,
        "attempt": ctx.attempt,
        "ports": sorted(ctx.input),
        "digest": digest(dict(ctx.input)),
    }


def make_registry(script: Script) -> Registry:
    """A fresh registry: the built-ins plus the three test actions following ``script``."""
    registry = Registry()

    def step(params: Any, ctx: ActionContext) -> Any:
        _fail_if_scripted(script, ctx)
        return _result(ctx)

    def approval(params: Any, ctx: ActionContext) -> Any:
        _fail_if_scripted(script, ctx)
        return Suspend("approval", {"node": ctx.node_key, "run": ctx.run_index})

    def approved(params: Any, ctx: ActionContext, resume_data: Any) -> Any:
        return {**_result(ctx), "approval": resume_data}

    registry.register(STEP, step)
    registry.register(MERGE, step)  # takes whatever ports it is wired to: an AND-join
    registry.register(APPROVAL, approval, approved)
    return registry


Turns = Callable[[str, int, int], int]
"""How many times an async test action yields to the event loop before it answers, by
``(node key, run index, attempt)``: a completion order drawn by a test, not by timing."""


def make_async_registry(script: Script, turns: Turns) -> Registry:
    """``make_registry``'s actions, async: each yields ``turns(...)`` times, then answers
    as the sync one does (the same functions, called after the yields)."""
    sync = make_registry(script)
    registry = Registry()
    for type_name in (STEP, MERGE, APPROVAL):
        spec = sync.get(type_name)
        assert spec is not None
        registry.register(type_name, _yielding(spec.fn, turns), spec.resume)
    return registry


def _yielding(fn: Callable[..., Any], turns: Turns) -> Callable[..., Any]:
    async def action(params: Any, ctx: ActionContext) -> Any:
        for _ in range(turns(ctx.node_key, ctx.run_index, ctx.attempt)):
            await asyncio.sleep(0)  # a turn of the loop, not a timed wait
        return fn(params, ctx)

    return action


# -- plain text ------------------------------------------------------------------------------


def plain_text(*, max_size: int) -> st.SearchStrategy[str]:
    """Text holding no template opener (``{{`` or ``{%``): as a param it is a literal value.

    ``st.text`` alone draws ``'{{'`` now and then, which makes the param a template that
    does not parse; a test meaning plain values draws from this instead.
    """
    return st.text(max_size=max_size).filter(lambda s: "{{" not in s and "{%" not in s)


# -- retry policies and settings ----------------------------------------------------------

_millis = st.integers(min_value=0, max_value=5000).map(lambda ms: ms / 1000)
jitters: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(JITTERS), st.sampled_from([0.1, 0.25, 0.5, 1.0])
)


@st.composite
def retry_policies(draw: st.DrawFn, *, budget: bool = True) -> RetryPolicy:
    """A ``RetryPolicy`` with 1..5 attempts, any curve and jitter, delays of 0..5 s."""
    backoff = draw(st.sampled_from(BACKOFFS))
    initial = draw(_millis)
    multiplier = draw(st.sampled_from([1.0, 1.5, 2.0, 3.0]))
    max_delay = initial + draw(_millis) * 2
    retry_timeout = (
        draw(st.one_of(st.none(), st.integers(min_value=1, max_value=20).map(float)))
        if budget
        else None
    )
    return RetryPolicy(
        max_attempts=draw(st.integers(min_value=1, max_value=5)),
        backoff=backoff,
        initial_delay=initial,
        multiplier=multiplier,
        max_delay=max_delay,
        jitter=draw(jitters),
        retry_timeout=retry_timeout,
    )


@st.composite
def node_settings(draw: st.DrawFn) -> NodeSettings:
    """No retry, Prana's simple form, or a full policy; with any ``on_error`` mode."""
    on_error = draw(st.sampled_from(ON_ERROR_MODES))
    form = draw(st.sampled_from(["none", "simple", "policy"]))
    if form == "simple":
        return NodeSettings(
            retry_on_failed=True,
            max_retries=draw(st.integers(min_value=1, max_value=4)),
            retry_delay_ms=draw(st.integers(min_value=0, max_value=5000)),
            on_error=on_error,
        )
    if form == "policy":
        return NodeSettings(retry=draw(retry_policies()), on_error=on_error)
    return NodeSettings(on_error=on_error)


faults: st.SearchStrategy[Fault] = st.builds(
    Fault,
    times=st.integers(min_value=0, max_value=6),
    error=st.sampled_from(ERROR_KINDS),
    hint_seconds=st.sampled_from([0.0, 0.5, 2.0, 30.0, 120.0]),
)


# -- workflows ----------------------------------------------------------------------------


@attrs.define
class _Builder:
    """Grows a workflow slot by slot; ``outputs`` are the (node, port) pairs to wire from."""

    nodes: list[Node]
    connections: list[Connection]
    outputs: list[tuple[str, str, int]]  # (node key, port, estimated runs)
    keys: list[str]

    def take_key(self) -> str:
        return self.keys.pop()

    def wire(self, sources: list[tuple[str, str, int]], target: str, port: str = "main") -> int:
        for source, from_port, _ in sources:
            self.connections.append(
                Connection(from_node=source, to_node=target, from_port=from_port, to_port=port)
            )
        return sum(runs for _, _, runs in sources)


@st.composite
def _sources(draw: st.DrawFn, builder: _Builder, *, budget: int) -> list[tuple[str, str, int]]:
    """One source, or (as an OR-join) two, keeping the estimated runs within ``budget``."""
    outputs = builder.outputs
    first = draw(st.sampled_from(outputs))
    chosen = [first]
    others = [o for o in outputs if o[:2] != first[:2] and o[2] + first[2] <= budget]
    if others and draw(st.integers(min_value=0, max_value=3)) == 0:
        chosen.append(draw(st.sampled_from(others)))
    return chosen


SlotKind = Literal["step", "merge", "if", "webhook", "interval", "approval", "loop"]
SLOT_KINDS: tuple[SlotKind, ...] = (
    "step",
    "step",
    "merge",
    "if",
    "webhook",
    "interval",
    "approval",
    "loop",
)


@st.composite
def workflows(draw: st.DrawFn, *, max_nodes: int = MAX_NODES) -> tuple[Workflow, list[str]]:
    """A valid workflow and the keys of its test-action nodes (the ones a script drives).

    A trigger, then slots in topological order, each wired from earlier outputs: test
    steps (some with two sources on one port: an OR-join), merges (ports ``a`` and ``b``:
    an AND-join), IF nodes with a fixed condition (one branch untaken), webhook and
    interval waits, an approval step that pauses with a custom kind, and bounded loops
    (``workflow.set_state`` counting, an IF sending ``true`` back until the limit).
    Nodes with ``on_error="continue_error_output"`` also offer their ``error`` port.
    """
    keys = list(draw(st.permutations(_KEY_POOL)))
    builder = _Builder(
        nodes=[Node(key=TRIGGER, type="manual.trigger")],
        connections=[],
        outputs=[(TRIGGER, "main", 1)],
        keys=keys,
    )
    scripted: list[str] = []
    target_size = draw(st.integers(min_value=2, max_value=max_nodes))
    while len(builder.nodes) < target_size:
        kind = draw(st.sampled_from(SLOT_KINDS))
        if kind == "loop" and len(builder.nodes) + 2 > max_nodes:
            kind = "step"
        key = builder.take_key()
        if kind == "merge":
            port_a = draw(st.sampled_from(builder.outputs))
            port_b = draw(st.sampled_from(builder.outputs))
            runs = builder.wire([port_a], key, "a") + builder.wire([port_b], key, "b")
        else:
            runs = builder.wire(draw(_sources(builder, budget=MAX_RUNS_PER_NODE)), key)
        runs = min(runs, MAX_RUNS_PER_NODE)
        if kind in ("step", "merge", "approval"):
            settings = draw(node_settings())
            node_type = {"step": STEP, "merge": MERGE, "approval": APPROVAL}[kind]
            builder.nodes.append(Node(key=key, type=node_type, settings=settings))
            scripted.append(key)
            builder.outputs.append((key, "main", runs))
            if settings.on_error == "continue_error_output":
                builder.outputs.append((key, "error", runs))
        elif kind == "if":
            condition = draw(st.booleans())
            builder.nodes.append(
                Node(key=key, type="logic.if_condition", params={"condition": condition})
            )
            builder.outputs += [(key, "true", runs), (key, "false", runs)]
        elif kind == "webhook":
            hours = draw(st.sampled_from([None, 1, 24]))
            builder.nodes.append(
                Node(key=key, type="wait.wait", params={"mode": "webhook", "timeout_hours": hours})
            )
            builder.outputs.append((key, "main", runs))
        elif kind == "interval":
            params = {
                "mode": "interval",
                "duration": draw(st.integers(min_value=0, max_value=3)),
                "unit": draw(st.sampled_from(["ms", "seconds", "minutes"])),
            }
            builder.nodes.append(Node(key=key, type="wait.wait", params=params))
            builder.outputs.append((key, "main", runs))
        else:
            check = builder.take_key()
            limit = draw(st.integers(min_value=1, max_value=3))
            counter = f"count_{key}"
            builder.nodes += [
                Node(
                    key=key,
                    type="workflow.set_state",
                    params={
                        "state": {
                            counter: f"{{{{ ($execution.state.{counter} | default(0)) + 1 }}}}"
                        }
                    },
                ),
                Node(
                    key=check,
                    type="logic.if_condition",
                    params={"condition": f"{{{{ $execution.state.{counter} < {limit} }}}}"},
                ),
            ]
            builder.connections += [
                Connection(from_node=key, to_node=check),
                Connection(from_node=check, to_node=key, from_port="true"),
            ]
            builder.outputs.append((check, "false", runs))
    retry_defaults: dict[str, Any] = {}
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        retry_defaults[draw(st.sampled_from([STEP, "*"]))] = draw(retry_policies(budget=False))
    workflow = Workflow(
        id="prop",
        nodes=builder.nodes,
        connections=builder.connections,
        retry_defaults=retry_defaults,
        max_iterations=draw(st.sampled_from([1000, 1000, 1000, 2, 3])),
    )
    return workflow, scripted


@st.composite
def scripts(draw: st.DrawFn, keys: list[str]) -> dict[str, tuple[Fault, ...]]:
    """A failure script for some of ``keys``: one to three faults per node, cycled by run."""
    script: dict[str, tuple[Fault, ...]] = {}
    for key in keys:
        if draw(st.booleans()):
            script[key] = tuple(draw(st.lists(faults, min_size=1, max_size=3)))
    return script


json_inputs: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.integers(min_value=-5, max_value=5),
    st.dictionaries(st.sampled_from(["x", "y"]), st.integers(min_value=0, max_value=9)),
)


@st.composite
def scenarios(draw: st.DrawFn, *, max_nodes: int = MAX_NODES) -> Scenario:
    """A random workflow with a failure script, an input and a webhook plan."""
    workflow, scripted = draw(workflows(max_nodes=max_nodes))
    return Scenario(
        workflow=workflow,
        script=draw(scripts(scripted)),
        input=draw(json_inputs),
        execution_id=draw(st.sampled_from(["exec-1", "exec-2", "e"])),
        expire_plan=tuple(draw(st.lists(st.booleans(), max_size=3))),
    )
