"""Test doubles and builders shared by the test modules: each is defined here once.

A test module imports what it needs (``from doubles import T0, Flaky, workflow``); none
defines its own copy. Fixtures built from these (``clock``, ``registry``, the stores) live
in ``conftest.py``.
"""

from __future__ import annotations

import itertools
import os
import threading
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from prana import (
    ActionContext,
    Completed,
    Connection,
    ErrorInfo,
    Event,
    Failed,
    Node,
    NodeSettings,
    Registry,
    RetryData,
    RetryPolicy,
    Suspend,
    Workflow,
    execute_workflow,
    resume_workflow,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler

if TYPE_CHECKING:
    from collections.abc import Callable

    from scheduling.abc import ExecutionStore

HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or (
    "ci" if os.environ.get("CI") else "dev"
)
"""The Hypothesis profile ``conftest.py`` loads (``ci`` when ``CI`` is set); a property that
asks CI for more examples than by hand reads it."""

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
"""The start of every test's clock: a fixed, aware instant."""


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


# -- workflows ------------------------------------------------------------------------------


def trigger(key: str = "start") -> Node:
    """The manual trigger node."""
    return Node(key=key, type="manual.trigger")


def conn(a: str, b: str, from_port: str = "main", to_port: str = "main") -> Connection:
    """The connection ``a`` -> ``b``."""
    return Connection(from_node=a, to_node=b, from_port=from_port, to_port=to_port)


def chain(*keys: str) -> list[Connection]:
    """Connections joining ``keys`` in a line."""
    return [conn(a, b) for a, b in itertools.pairwise(keys)]


def workflow(
    *nodes: Node,
    wid: str = "wf",
    version: int = 1,
    edges: list[tuple[str, str]] | None = None,
    **fields: Any,
) -> Workflow:
    """A trigger (``start``) followed by ``nodes`` in a line, or joined by ``edges`` if given."""
    keys = ["start", *(n.key for n in nodes)]
    pairs = edges if edges is not None else list(itertools.pairwise(keys))
    return Workflow(
        id=wid,
        version=version,
        nodes=(trigger(), *nodes),
        connections=tuple(conn(a, b) for a, b in pairs),
        **fields,
    )


def workflow_of(*nodes: Node, **fields: Any) -> Workflow:
    """A workflow ``w`` holding ``nodes`` and no connections (validation and lint need none)."""
    return Workflow(id="w", nodes=nodes, connections=[], **fields)


HTTP_RETRY = RetryPolicy(max_attempts=3, initial_delay=1, max_delay=60)
"""The retry policy of ``http_workflow``'s call."""


def http_workflow(params: dict[str, Any], retry: RetryPolicy | None = HTTP_RETRY) -> Workflow:
    """A trigger, then ``call``: an ``http.request`` with ``params``, retried per ``retry``."""
    return Workflow(
        id="http",
        nodes=[
            trigger(),
            Node(
                key="call", type="http.request", params=params, settings=NodeSettings(retry=retry)
            ),
        ],
        connections=[conn("start", "call")],
    )


def if_node(key: str, condition: Any) -> Node:
    """A ``logic.if_condition`` node on ``condition``."""
    return Node(key=key, type="logic.if_condition", params={"condition": condition})


def value_node(key: str, value: Any) -> Node:
    """A ``data.set_data`` node that outputs ``value``."""
    return Node(key=key, type="data.set_data", params={"value": value})


def flaky_node(attempts: int = 4, key: str = "r", delay: float = 1) -> Node:
    """A ``test.flaky`` node retried up to ``attempts`` times, ``delay`` seconds apart."""
    policy = RetryPolicy(max_attempts=attempts, backoff="constant", initial_delay=delay)
    return Node(key=key, type="test.flaky", settings=NodeSettings(retry=policy))


def wait_node(**params: Any) -> Node:
    """A ``wait.wait`` node ``w`` with ``params``."""
    return Node(key="w", type="wait.wait", params=params)


def webhook_node(**params: Any) -> Node:
    """A webhook wait ``w``."""
    return wait_node(mode="webhook", **params)


def sub_node(child: str, mode: str, **params: Any) -> Node:
    """A sub-workflow node ``sub`` running ``child`` in ``mode``."""
    return Node(
        key="sub",
        type="workflow.execute_workflow",
        params={"workflow_id": child, "mode": mode, **params},
    )


def run_to_end(
    workflow: Workflow, registry: Registry, clock: ManualClock | None = None
) -> Completed | Failed | Suspend:
    """Run ``workflow`` on ``{}``, resuming every retry when it falls due, until it ends (or
    pauses for something other than a retry)."""
    clock = clock if clock is not None else ManualClock()
    outcome = execute_workflow(workflow, {}, registry=registry, clock=clock)
    while isinstance(outcome, Suspend) and isinstance(outcome.data, RetryData):
        data = outcome.data
        assert outcome.execution is not None
        clock.set(max(clock(), data.resume_at))
        outcome = resume_workflow(
            outcome.execution, None, workflow=workflow, registry=registry, clock=clock
        )
    return outcome


# -- actions --------------------------------------------------------------------------------


def _connection_error(call: int) -> Exception:
    return ConnectionError("down")


class Flaky:
    """An action that fails its first ``fails`` calls, then returns which attempt succeeded.

    ``exc(call)`` makes the error of call number ``call`` (``ConnectionError("down")`` by
    default); ``calls`` counts every
    call and ``attempts`` lists each call's attempt number. ``hook``, when set, runs once
    (with the action's context) at the start of the next call: the place for a test to
    make something happen while an attempt runs. Thread-safe: scheduler threads may call it.
    """

    def __init__(self, fails: int = 0, exc: Callable[[int], Exception] = _connection_error):
        self.fails = fails
        self.exc = exc
        self.calls = 0
        self.attempts: list[int] = []
        self.hook: Callable[[ActionContext], object] | None = None
        self._lock = threading.Lock()

    def __call__(self, params: Any, ctx: ActionContext) -> Any:
        with self._lock:
            self.calls += 1
            call = self.calls
            self.attempts.append(ctx.attempt)
            hook, self.hook = self.hook, None
        if hook is not None:
            hook(ctx)
        if call <= self.fails:
            raise self.exc(call)
        return {"ok": True, "attempt": ctx.attempt}


def flaky_registry(fails: int) -> Registry:
    """A registry whose ``test.flaky`` is one ``Flaky(fails)``: every run over it counts calls."""
    registry = Registry()
    registry.register("test.flaky", Flaky(fails))
    return registry


def fails_first(params: Any, ctx: ActionContext) -> Any:
    """An action whose attempt 1 raises ``ConnectionError("down")``; a retry returns ``"done"``."""
    if ctx.attempt == 1:
        raise ConnectionError("down")
    return "done"


class Died(BaseException):
    """The process died inside the action (nothing catches a ``BaseException`` subclass)."""


def raising(exc: BaseException) -> Callable[[Any, ActionContext], Any]:
    """An action that always raises ``exc``."""

    def action(params: Any, ctx: ActionContext) -> Any:
        raise exc

    return action


def returning(value: Any) -> Callable[[Any, ActionContext], Any]:
    """An action that always returns ``value`` (a ``Suspend`` pauses the node)."""

    def action(params: Any, ctx: ActionContext) -> Any:
        return value

    return action


# -- a runner -------------------------------------------------------------------------------


class Harness:
    """A runner over ``store`` with a ManualScheduler on ``clock``, recording its events.

    Registered: ``test.flaky`` (``flaky``, or a new ``Flaky(fails)``) and ``test.approval``,
    which pauses with a custom ``"approval"`` suspension and, on resume, first runs (and
    removes) the callables in ``approve_hooks``, then completes with the resume data.
    """

    def __init__(
        self,
        store: ExecutionStore,
        fails: int = 0,
        clock: ManualClock | None = None,
        flaky: Flaky | None = None,
    ) -> None:
        self.clock = clock if clock is not None else ManualClock(T0)
        self.flaky = flaky if flaky is not None else Flaky(fails)
        self.approve_hooks: list[Callable[[], object]] = []
        self.registry = Registry()
        self.registry.register("test.flaky", self.flaky)
        self.registry.register("test.approval", _pause, self._approve)
        self.store = store
        self.scheduler = ManualScheduler(self.clock)
        self.events: list[Event] = []
        self.runner = Runner(
            self.registry, store, self.scheduler, self.clock, observers=[self.events.append]
        )

    def _approve(self, params: Any, ctx: ActionContext, data: Any) -> Any:
        while self.approve_hooks:
            self.approve_hooks.pop()()
        return data


def _pause(params: Any, ctx: ActionContext) -> Any:
    return Suspend("approval", {"node": ctx.node_key})


def detail(error: ErrorInfo | None, key: str) -> Any:
    """``error.details[key]``, for tests that know the error and the key are there."""
    assert error is not None
    assert error.details is not None, error
    return error.details[key]
