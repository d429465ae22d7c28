"""The executor: runs a workflow until it completes, fails or must pause.

Theory of operation. The engine (``_Run.drive``) is a generator: it decides everything and
*yields* each action call it needs (a ``_Call``); a driver performs the call and sends the
result back. The sync driver calls directly, the async driver awaits, so the same engine
serves ``execute_workflow`` and ``aexecute_workflow`` (APScheduler 4's "write it once").

The engine works on a private mutable copy of the execution and freezes it into a new
``WorkflowExecution`` when it returns; the caller's execution is never changed.

Scheduling is depth-first: the most recently activated ready node runs next, ties by key.
A node with several input ports waits until every port has data or can no longer get any.
"""

from __future__ import annotations

import functools
import heapq
import inspect
import math
import os
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs

from prana._builtins import SubWorkflowFailed
from prana._errors import (
    AttemptTimeout,
    InvalidSettingsError,
    InvalidWorkflowError,
    NonRetryable,
    ResumeError,
    WebhookTimeout,
)
from prana._events import Event, EventType, Observer, emit
from prana._graph import CompiledGraph, CompiledNode, compile_workflow
from prana._model import (
    AttemptOutcome,
    AttemptRecord,
    Completed,
    ErrorInfo,
    ExecutionStatus,
    Failed,
    NodeExecution,
    NodeStatus,
    Outcome,
    Output,
    ParentRef,
    RetryData,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
    Workflow,
    WorkflowExecution,
    new_activation,
    new_attempt_record,
    new_completed,
    new_error_info,
    new_node_execution,
    new_retry_data,
    new_suspend,
    new_workflow_execution,
)
from prana._policy import AttemptView, explain_retry, rejects_result
from prana._registry import ActionContext, Registry
from prana._schema import structure_params
from prana._state import FINAL, check_transition

_FINAL_VALUES = frozenset(s.value for s in FINAL)

Clock = Callable[[], datetime]
_JSON_SCALARS = (str, int, float, bool, type(None))
_EMPTY_ENV: Mapping[str, Any] = {}
_NEVER_AWAITABLE = frozenset({str, int, float, bool, type(None), dict, list, tuple, Output})


_utcnow: Clock = functools.partial(datetime.now, timezone.utc)
"""The default clock: aware UTC now (a partial, so reading it costs no Python frame)."""


_Call = tuple[Callable[..., Any], tuple[Any, ...], "float | None"]
"""One action call the engine needs made: ``(fn, args, timeout)``."""


_Step = Any
"""``_Call | Outcome | None``: what the engine's last move produced (see ``_Run.drive``)."""
_Result = tuple[bool, Any]
"""``(True, value)`` when the call returned, ``(False, exception)`` when it raised."""


class _NodeRun:
    """The mutable form of a ``NodeExecution`` while its node is running.

    ``attempts`` holds the closed attempts; the open one lives in the ``attempt_*`` fields
    until ``close_attempt`` turns it into a record, so each attempt costs one object.
    """

    __slots__ = (
        "attempt_due",
        "attempt_number",
        "attempt_started",
        "attempts",
        "execution_index",
        "key",
        "params",
        "recorded",
        "run_index",
        "runs",
        "started_at",
    )

    def __init__(
        self,
        key: str,
        execution_index: int,
        run_index: int,
        started_at: datetime,
        attempts: list[AttemptRecord],
        params: Any = None,
        *,
        recorded: bool = False,
    ) -> None:
        self.key = key
        self.execution_index = execution_index
        self.run_index = run_index
        self.started_at = started_at
        self.attempts = attempts
        self.params = params
        self.recorded = recorded
        self.attempt_number = 0
        self.attempt_started = started_at
        self.attempt_due: datetime | None = None
        self.runs: list[NodeExecution] | None = None
        """The node's record list in the run, once known (saves a lookup per record)."""

    def open_attempt(self, number: int, started: datetime, due: datetime | None) -> None:
        self.attempt_number = number
        self.attempt_started = started
        self.attempt_due = due

    def close_attempt(
        self,
        outcome: AttemptOutcome,
        now: datetime,
        error: ErrorInfo | None = None,
        retry_delay_ms: int | None = None,
    ) -> None:
        self.attempts.append(
            new_attempt_record(
                self.attempt_number,
                self.attempt_started,
                now,
                outcome,
                error,
                self.attempt_due,
                retry_delay_ms,
            )
        )

    def reopen_paused_attempt(self) -> None:
        """A paused attempt continues on resume: it is the same attempt, not a new one."""
        last = self.attempts.pop()
        self.open_attempt(last.number, last.started_at, last.due_at)

    def freeze(
        self,
        status: NodeStatus,
        *,
        output: Any = None,
        port: str | None = None,
        error: ErrorInfo | None = None,
        completed_at: datetime | None = None,
    ) -> NodeExecution:
        return new_node_execution(
            self.key,
            status,
            self.execution_index,
            self.run_index,
            self.started_at,
            completed_at,
            self.params,
            output,
            port,
            error,
            tuple(self.attempts),
        )


class _Pending:
    __slots__ = ("seq", "sources")

    def __init__(self, seq: int, sources: dict[str, tuple[Any, ...]]) -> None:
        self.seq = seq
        self.sources = sources


def error_info(exc: BaseException, node_key: str | None, code: str | None = None) -> ErrorInfo:
    """Turn a live exception into plain data; ``NonRetryable(exc)`` records ``exc``."""
    cause: BaseException = exc
    if code is None:
        if isinstance(exc, NonRetryable):
            code = "non_retryable"
        elif isinstance(exc, AttemptTimeout):
            code = "timeout"
        else:
            code = "action_error"
    if isinstance(exc, NonRetryable) and isinstance(exc.error, BaseException):
        cause = exc.error
    details = getattr(cause, "details", None)
    if details is not None and json_problem(details) is not None:
        details = repr(details)
    cls = type(cause)
    return new_error_info(code, cls.__name__, cls.__module__, str(cause), details, node_key)


def _prana_error(code: str, message: str, node_key: str | None, type_name: str) -> ErrorInfo:
    return new_error_info(code, type_name, "prana", message, None, node_key)


def json_problem(value: Any, path: str = "$") -> str | None:
    """Describe where ``value`` stops being JSON-native, or ``None`` if it is."""
    tp = type(value)
    if tp in _JSON_SCALARS:
        if tp is float and not math.isfinite(value):
            return f"{path}: {value!r} is not a finite number"
        return None
    if tp is dict:
        for k, v in value.items():
            if type(k) is not str:
                return f"{path}: key {k!r} is a {type(k).__name__}, keys must be strings"
            problem = json_problem(v, f"{path}.{k}")
            if problem is not None:
                return problem
        return None
    if tp is tuple:
        return f"{path}: a tuple is not JSON-native (it reads back as a list); use a list"
    if tp is list:
        for i, v in enumerate(value):
            problem = json_problem(v, f"{path}[{i}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, bool | int | str) and not isinstance(value, type):
        return (
            f"{path}: {tp.__name__} is a subclass; convert it to a plain {tp.__mro__[-2].__name__}"
        )
    return (
        f"{path}: a {tp.__name__} is not JSON-native (use dicts, lists, str, numbers, bool, None)"
    )


def _iso_datetimes(value: Any) -> Any:
    """Rendered params with datetimes (``{{ $now }}``) as ISO text, so they stay JSON data."""
    if isinstance(value, datetime):
        return value.isoformat()
    if type(value) is dict:
        if any(isinstance(v, datetime | dict | list) for v in value.values()):
            return {k: _iso_datetimes(v) for k, v in value.items()}
        return value
    if type(value) is list:
        return [_iso_datetimes(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    """A JSON-native copy of rendered params for the audit record (datetimes as ISO text)."""
    if type(value) in _JSON_SCALARS:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if attrs.has(type(value)):
        return _jsonable(attrs.asdict(value))
    return repr(value)


class _NodesView(Mapping[str, Any]):
    """``$nodes`` for templates: each node's latest run, computed only when looked at."""

    __slots__ = ("_runs",)

    def __init__(self, runs: dict[str, Sequence[NodeExecution]]) -> None:
        self._runs = runs

    def __getitem__(self, key: str) -> Any:
        runs = self._runs.get(key)
        if not runs:
            raise KeyError(key)
        last = runs[-1]
        return {
            "output": last.output,
            "port": last.output_port,
            "status": last.status.value,
            "run_index": last.run_index,
        }

    def __iter__(self) -> Any:
        return (k for k, v in self._runs.items() if v)

    def __len__(self) -> int:
        return sum(1 for v in self._runs.values() if v)


class _Run:
    """One executor call's private, mutable working copy of an execution."""

    __slots__ = (
        "backlog",
        "clock",
        "current",
        "env",
        "graph",
        "heap",
        "id",
        "input",
        "last_output",
        "next_index",
        "now_hint",
        "observers",
        "parent",
        "pending",
        "runs",
        "started_at",
        "state",
        "status",
        "variables",
        "workflow",
        "workflow_id",
    )

    def __init__(
        self,
        graph: CompiledGraph,
        *,
        execution_id: str,
        input_data: Any,
        clock: Clock,
        env: Mapping[str, Any],
        observers: Sequence[Observer],
        parent: ParentRef | None,
    ) -> None:
        self.graph = graph
        self.workflow: Workflow = graph.workflow
        self.id = execution_id
        self.input = input_data
        self.clock = clock
        self.env = env
        self.observers = observers
        self.parent = parent
        self.runs: dict[str, Sequence[NodeExecution]] = {}
        """Records per node: tuples as loaded, lists once this run writes to them."""
        self.state: dict[str, Any] = {}
        self.pending: dict[str, _Pending] = {}
        """Per node, the activation it runs with next (the head of its queue)."""
        self.backlog: dict[str, list[_Pending]] = {}
        """Per node, later activations: a second delivery to a port the newest activation
        already holds is another run (an OR-join runs once per delivery)."""
        self.heap: list[tuple[int, str]] = []
        self.next_index = 0
        self.started_at: datetime | None = None
        self.last_output: Any = None
        self.status = ExecutionStatus.PENDING
        self.current: tuple[CompiledNode, _NodeRun, ActionContext, bool]
        self.now_hint: datetime | None = None
        self.variables = graph.workflow.variables
        self.workflow_id = graph.workflow.id

    # -- loading and freezing ------------------------------------------------------------

    @classmethod
    def from_execution(
        cls,
        graph: CompiledGraph,
        execution: WorkflowExecution,
        *,
        clock: Clock,
        env: Mapping[str, Any],
        observers: Sequence[Observer],
    ) -> _Run:
        run = cls(
            graph,
            execution_id=execution.id,
            input_data=execution.input,
            clock=clock,
            env=env,
            observers=observers,
            parent=execution.parent,
        )
        run.runs = dict(execution.node_executions)
        run.state = dict(execution.state)
        for a in execution.pending:
            activation = _Pending(a.seq, dict(a.sources))
            if a.node_key in run.pending:
                run.backlog.setdefault(a.node_key, []).append(activation)
            else:
                run.pending[a.node_key] = activation
        run.heap = [(-p.seq, k) for k, p in run.pending.items()]
        heapq.heapify(run.heap)
        run.next_index = execution.next_index
        run.started_at = execution.started_at
        run.last_output = execution.output
        run.status = execution.status
        return run

    def freeze(
        self,
        status: ExecutionStatus,
        *,
        suspended_node: str | None = None,
        suspension: Suspend | None = None,
        output: Any = None,
        error: ErrorInfo | None = None,
    ) -> WorkflowExecution:
        check_transition(self.status, status)
        self.status = status
        now = self.clock()
        backlog = self.backlog
        return new_workflow_execution(
            self.id,
            self.workflow_id,
            self.workflow.version,
            status,
            self.input,
            {k: v if type(v) is tuple else tuple(v) for k, v in self.runs.items()},
            self.state,
            tuple(
                new_activation(k, p.seq, p.sources)
                for k, head in self.pending.items()
                for p in ((head, *backlog[k]) if k in backlog else (head,))
            )
            if self.pending
            else (),
            self.next_index,
            suspended_node,
            suspension,
            output,
            error,
            self.parent,
            self.started_at,
            now,
            now if status.value in _FINAL_VALUES else None,
        )

    def writable_runs(self, key: str) -> list[NodeExecution]:
        """The node's records as a list this run may change (copied on first write)."""
        runs = self.runs.get(key)
        if type(runs) is list:
            return runs
        fresh = list(runs) if runs is not None else []
        self.runs[key] = fresh
        return fresh

    def event(self, type_: EventType, **fields: Any) -> None:
        if self.observers:
            emit(
                self.observers,
                Event(
                    type=type_,
                    execution_id=self.id,
                    workflow_id=self.workflow.id,
                    at=self.clock(),
                    **fields,
                ),
            )

    # -- scheduling ----------------------------------------------------------------------

    def activate(self, key: str, seq: int) -> None:
        heapq.heappush(self.heap, (-seq, key))

    def pick_ready(self) -> str | None:
        """The next node to run: most recently activated first, ties by key.

        ``heap`` holds ``(-seq, key)`` for every activation; entries made stale by a later
        activation (or by the node running) are dropped when they surface.
        """
        pending = self.pending
        heap = self.heap
        if len(pending) == 1:
            heap.clear()  # every other entry is stale: only this node is pending
            return next(iter(pending))
        waiting: list[tuple[int, str]] = []
        chosen: str | None = None
        while heap:
            entry = heapq.heappop(heap)
            neg_seq, key = entry
            p = pending.get(key)
            if p is None or p.seq != -neg_seq:
                continue
            if self._ready(key):
                chosen = key
                break
            waiting.append(entry)
        if chosen is None and waiting:
            chosen = waiting.pop(0)[1]  # every node waits on another: run one, never deadlock
        for entry in waiting:
            heapq.heappush(heap, entry)
        return chosen

    def _ready(self, key: str) -> bool:
        in_ports = self.graph.nodes[key].in_ports
        if len(in_ports) <= 1:
            return True
        delivered = self.pending[key].sources
        waiting = [p for p in in_ports if p not in delivered]
        if not waiting:
            return True
        live = self.graph.reachable_from((k for k in self.pending if k != key), avoid=key)
        return not any(src in live for p in waiting for src, _ in in_ports[p])

    def build_input(self, key: str, pending: _Pending | None) -> dict[str, Any]:
        """The node's input, rebuilt from its sources' latest outputs (never cached)."""
        if key == self.graph.trigger:
            return {"main": self.input}
        if pending is None:
            return {}
        result: dict[str, Any] = {}
        for port, source in pending.sources.items():
            src, src_port = source[0], source[1]
            index = source[2] if len(source) > 2 else None  # records before 0.1 lack it
            for record in reversed(self.runs.get(src, ())):
                if index is not None and record.execution_index != index:
                    if record.execution_index < index:
                        break
                    continue
                if record.status is NodeStatus.COMPLETED and record.output_port == src_port:
                    result[port] = record.output
                    break
        return result

    def consume_activation(self, key: str) -> None:
        """The node ran with its head activation: the next queued one (if any) takes its place."""
        queue = self.backlog.get(key)
        if queue:
            head = self.pending[key] = queue.pop(0)
            if not queue:
                del self.backlog[key]
            heapq.heappush(self.heap, (-head.seq, key))
        else:
            self.pending.pop(key, None)

    def deliver(self, key: str, port: str, seq: int) -> None:
        for target, to_port in self.graph.nodes[key].outgoing.get(port, ()):
            pending = self.pending.get(target)
            if pending is None:
                self.pending[target] = _Pending(seq, {to_port: (key, port, seq)})
            else:
                queue = self.backlog.get(target)
                newest = queue[-1] if queue else pending
                if to_port in newest.sources:
                    self.backlog.setdefault(target, []).append(
                        _Pending(seq, {to_port: (key, port, seq)})
                    )
                else:
                    newest.sources[to_port] = (key, port, seq)
                pending.seq = seq
            heapq.heappush(self.heap, (-seq, target))

    # -- the engine ----------------------------------------------------------------------

    def start(self) -> Generator[_Call, _Result, Outcome]:
        check_transition(self.status, ExecutionStatus.RUNNING)
        self.status = ExecutionStatus.RUNNING
        self.started_at = self.clock()
        if self.observers:
            self.event(EventType.EXECUTION_STARTED)
        self.pending[self.graph.trigger] = _Pending(-1, {})
        self.activate(self.graph.trigger, -1)
        return self.drive()

    def drive(self, step: _Step = None) -> Generator[_Call, _Result, Outcome]:
        """Run ready nodes one at a time; yield each action call, return the outcome.

        A step is what the last move produced: a ``_Call`` to make (its result is settled
        by ``finish_call``), ``None`` (the node is done: pick the next), or an outcome.
        """
        pending = self.pending
        while True:
            if step is None:
                if len(pending) == 1:  # pick_ready's fast path, inlined: the common chain case
                    self.heap.clear()
                    key: str | None = next(iter(pending))
                else:
                    key = self.pick_ready()
                    if key is None:
                        return self.complete()
                step = self.run_node(key)  # type: ignore[arg-type]
                continue
            if type(step) is tuple:
                ok, value = yield step
                cn, node_run, ctx, from_resume = self.current
                if ok and not from_resume:
                    step = self.settle_value(cn, node_run, ctx, value, from_resume=False)
                else:
                    step = self.finish_call(ok, value)
                continue
            outcome: Outcome = step
            return outcome

    def complete(self) -> Completed:
        output = self.last_output
        execution = self.freeze(ExecutionStatus.COMPLETED, output=output)
        if self.observers:
            self.event(EventType.EXECUTION_COMPLETED, output=output)
        return new_completed(execution, output)

    def run_node(self, key: str) -> _Step:
        cn = self.graph.nodes[key]
        runs = self.writable_runs(key)
        run_index = len(runs)
        if run_index >= self.workflow.max_iterations:
            message = (
                f"node {key!r} would run a {run_index + 1}th time, past the workflow's "
                f"max_iterations={self.workflow.max_iterations}; a loop does not end "
                "(or raise Workflow.max_iterations)"
            )
            error = _prana_error("iteration_limit", message, key, "IterationLimitExceeded")
            return self.fail_execution(error)
        # The previous step's end is this node's start: nothing but pure work lies between.
        started = self.now_hint or self.clock()
        self.now_hint = None
        node_run = _NodeRun(key, self.next_index, run_index, started, [])
        node_run.runs = runs
        self.next_index += 1
        return self.attempt(cn, node_run, 1, None)

    def attempt(
        self, cn: CompiledNode, node_run: _NodeRun, number: int, due_at: datetime | None
    ) -> _Step:
        """Begin attempt ``number`` of ``node_run``: the call to make, or a settled failure."""
        key = cn.key
        started = node_run.started_at if number == 1 else self.clock()
        node_run.attempt_number = number
        node_run.attempt_started = started
        node_run.attempt_due = due_at
        if self.observers:
            self.event(
                EventType.NODE_STARTED, node_key=key, run_index=node_run.run_index, attempt=number
            )
        pending = self.pending.get(key)
        input_data: dict[str, Any] | None = None
        if pending is not None and len(pending.sources) == 1:
            # build_input's common case, inlined: one source, whose latest run delivered
            for port, source in pending.sources.items():
                record = self.runs[source[0]][-1]
                if (
                    record.execution_index == source[-1]
                    and record.status is NodeStatus.COMPLETED
                    and record.output_port == source[1]
                ):
                    input_data = {port: record.output}
        if input_data is None:
            input_data = self.build_input(key, pending)
        ctx = ActionContext(
            input_data,
            self.id,
            key,
            number,
            node_run.run_index,
            self.state,
            started,
            self.env,
            self.variables,
            self.workflow_id,
        )
        if cn.plain_params:
            params = node_run.params = cn.node.params
        else:
            params, problem = self.prepare_params(cn, node_run, ctx)
            if problem is not None:
                return self.settle_failure(cn, node_run, problem, retryable=False)
        self.current = (cn, node_run, ctx, False)
        return (cn.spec.fn, (params, ctx), cn.timeout)

    def finish_call(self, ok: bool, value: Any) -> _Step:
        """Settle the result of the call the last step asked for."""
        cn, node_run, ctx, from_resume = self.current
        if ok:
            return self.settle_value(cn, node_run, ctx, value, from_resume=from_resume)
        if from_resume:
            code = "sub_workflow_failed" if isinstance(value, SubWorkflowFailed) else "resume_error"
            return self.settle_failure(
                cn, node_run, error_info(value, cn.key, code), retryable=False
            )
        return self.settle_failure(cn, node_run, error_info(value, cn.key), exception=value)

    def prepare_params(
        self, cn: CompiledNode, node_run: _NodeRun, ctx: ActionContext
    ) -> tuple[Any, ErrorInfo | None]:
        """Render the params' templates and structure them into the action's schema."""
        params: Any = cn.node.params
        if cn.params_template is not None:
            from prana._templates import TemplateError

            try:
                params = _iso_datetimes(cn.params_template.render(self.template_scope(ctx)))
            except TemplateError as exc:
                message = f"params.{exc.path}: {exc.message}"
                return None, _prana_error("template_error", message, cn.key, "TemplateError")
            node_run.params = _jsonable(params)
        else:
            node_run.params = params
        schema = cn.spec.params
        if schema is not None:
            try:
                params = structure_params(params, schema)
            except ValueError as exc:
                return None, _prana_error("params_invalid", str(exc), cn.key, "ParamsInvalid")
        return params, None

    def template_scope(self, ctx: ActionContext) -> dict[str, Any]:
        workflow = self.workflow
        return {
            "input": ctx.input,
            "nodes": _NodesView(self.runs),
            "vars": workflow.variables,
            "env": self.env,
            "execution": {
                "id": self.id,
                "state": self.state,
                "run_index": ctx.run_index,
                "attempt": ctx.attempt,
                "workflow_id": workflow.id,
            },
            "workflow": {"id": workflow.id, "name": workflow.name, "version": workflow.version},
            "now": ctx.now,
        }

    def settle_value(
        self,
        cn: CompiledNode,
        node_run: _NodeRun,
        ctx: ActionContext,
        value: Any,
        *,
        from_resume: bool,
    ) -> Outcome | None:
        """The action returned: a pause, or an output on a port (which may still be refused)."""
        key = cn.key
        retryable = not from_resume
        if type(value) is Suspend:
            return self.settle_suspend(cn, node_run, value)
        if type(value) is Output:
            port, output = value.port, value.value
            ports = cn.spec.output_ports
            if ports is not None and port not in ports and port != "error":
                message = (
                    f"completed on port {port!r}, which {cn.spec.type!r} does not declare "
                    f"({', '.join(ports)})"
                )
                return self.settle_failure(
                    cn,
                    node_run,
                    _prana_error("invalid_port", message, key, "InvalidPort"),
                    retryable=False,
                )
        else:
            port, output = "main", value
        tp = type(output)
        problem = (
            None if tp is str or tp is int or tp is bool or output is None else json_problem(output)
        )
        if problem is not None:
            message = f"node {key!r} output is not JSON-native at {problem}"
            return self.settle_failure(
                cn,
                node_run,
                _prana_error("output_not_json", message, key, "OutputNotJSON"),
                retryable=False,
            )
        updates = ctx._state_updates
        if updates:
            problem = json_problem(updates)
            if problem is not None:
                message = f"node {key!r} state update is not JSON-native at {problem}"
                return self.settle_failure(
                    cn,
                    node_run,
                    _prana_error("output_not_json", message, key, "StateNotJSON"),
                    retryable=False,
                )
        if retryable and cn.checks_results:
            view = AttemptView(
                attempt=node_run.attempt_number,
                error=None,
                output=output,
                elapsed_seconds=self.elapsed(node_run),
            )
            if rejects_result(cn.policies, view):
                error = _prana_error(
                    "result_rejected",
                    f"node {key!r} output matched retry_on_result",
                    key,
                    "ResultRejected",
                )
                return self.settle_failure(cn, node_run, error, output=output)
        if updates:
            self.state.update(updates)
        self.complete_node(cn, node_run, output, port)
        return None

    def record(self, node_run: _NodeRun, execution: NodeExecution) -> None:
        """Put ``execution`` as the node run's record: replace it if it has one, else add it."""
        runs = self.writable_runs(node_run.key)
        if node_run.recorded:
            runs[-1] = execution
        else:
            runs.append(execution)
            node_run.recorded = True

    def complete_node(
        self,
        cn: CompiledNode,
        node_run: _NodeRun,
        output: Any,
        port: str,
        *,
        error: ErrorInfo | None = None,
    ) -> None:
        self.now_hint = now = self.clock()
        # The hot path: close_attempt + freeze + record, inlined.
        attempts = node_run.attempts
        attempts.append(
            new_attempt_record(
                node_run.attempt_number,
                node_run.attempt_started,
                now,
                AttemptOutcome.COMPLETED if error is None else AttemptOutcome.FAILED,
                error,
                node_run.attempt_due,
                None,
            )
        )
        execution = new_node_execution(
            cn.key,
            NodeStatus.COMPLETED,
            node_run.execution_index,
            node_run.run_index,
            node_run.started_at,
            now,
            node_run.params,
            output,
            port,
            error,
            tuple(attempts),
        )
        runs = node_run.runs
        if runs is None:
            runs = self.writable_runs(cn.key)
        if node_run.recorded:
            runs[-1] = execution
        else:
            runs.append(execution)
        key = cn.key
        if key in self.backlog:
            self.consume_activation(key)
        else:
            self.pending.pop(key, None)
        self.last_output = output
        if self.observers:
            self.event(
                EventType.NODE_COMPLETED,
                node_key=cn.key,
                run_index=node_run.run_index,
                attempt=node_run.attempt_number,
                output=output,
            )
        self.deliver(cn.key, port, node_run.execution_index)

    def elapsed(self, node_run: _NodeRun) -> float:
        return (self.clock() - node_run.started_at).total_seconds()

    def settle_suspend(
        self, cn: CompiledNode, node_run: _NodeRun, value: Suspend
    ) -> Outcome | None:
        """The action asked to pause: record it and hand the suspension to the caller."""
        key = cn.key
        kind, data = value.kind, value.data
        problem: str | None = None
        if kind == "retry":
            problem = (
                "actions may not return Suspend(kind='retry'); "
                "raise an error (or RetryAfter) instead"
            )
        elif kind in _SUSPEND_TYPES:
            if not isinstance(data, _SUSPEND_TYPES[kind]):
                expected = _SUSPEND_TYPES[kind].__name__
                problem = f"Suspend({kind!r}) needs {expected} data, got {type(data).__name__}"
        else:
            json_issue = json_problem(data)
            if json_issue is not None:
                problem = f"Suspend({kind!r}) data is not JSON-native at {json_issue}"
        if problem is not None:
            error = _prana_error(
                "invalid_suspend", f"node {key!r}: {problem}", key, "InvalidSuspend"
            )
            return self.settle_failure(cn, node_run, error, retryable=False)
        now = self.clock()
        node_run.close_attempt(AttemptOutcome.SUSPENDED, now)
        self.record(node_run, node_run.freeze(NodeStatus.SUSPENDED))
        suspension = Suspend(kind, data)
        if self.observers:
            self.event(
                EventType.NODE_SUSPENDED,
                node_key=key,
                run_index=node_run.run_index,
                attempt=node_run.attempt_number,
                kind=kind,
            )
        return self.suspend_execution(key, suspension)

    def suspend_execution(self, key: str, suspension: Suspend) -> Suspend:
        execution = self.freeze(
            ExecutionStatus.SUSPENDED, suspended_node=key, suspension=suspension
        )
        if self.observers:
            self.event(EventType.EXECUTION_SUSPENDED, node_key=key, kind=suspension.kind)
        return new_suspend(suspension.kind, suspension.data, execution)

    def settle_failure(
        self,
        cn: CompiledNode,
        node_run: _NodeRun,
        error: ErrorInfo,
        *,
        exception: BaseException | None = None,
        retryable: bool = True,
        output: Any = None,
    ) -> Outcome | None:
        """An attempt failed: retry it (a suspension), or let ``on_error`` decide."""
        key = cn.key
        number = node_run.attempt_number
        exhausted = False
        if retryable and cn.policies:
            now = self.clock()  # one reading: the budget check and resume_at must agree
            view = AttemptView(
                attempt=number,
                error=error,
                exception=exception,
                output=output,
                elapsed_seconds=(now - node_run.started_at).total_seconds(),
            )
            decision, reason = explain_retry(
                cn.policies, view, seed=f"{self.id}:{key}:{node_run.run_index}"
            )
            exhausted = reason.startswith(("attempts exhausted", "retry_timeout"))
            if decision is not None:
                # floor, so rounding never puts resume_at past a retry_timeout budget
                delay_ms = max(0, math.floor(decision.delay_seconds * 1000))
                node_run.close_attempt(AttemptOutcome.FAILED, now, error, delay_ms)
                self.record(node_run, node_run.freeze(NodeStatus.SUSPENDED, error=error))
                data = new_retry_data(
                    delay_ms,
                    number + 1,
                    decision.max_attempts,
                    error,
                    now + timedelta(milliseconds=delay_ms),
                )
                if self.observers:
                    self.event(
                        EventType.NODE_RETRY_SCHEDULED,
                        node_key=key,
                        run_index=node_run.run_index,
                        attempt=number + 1,
                        max_attempts=decision.max_attempts,
                        delay_ms=delay_ms,
                        error=error,
                    )
                return self.suspend_execution(key, new_suspend("retry", data, None))
        if exhausted and self.observers:
            self.event(
                EventType.NODE_RETRY_EXHAUSTED,
                node_key=key,
                run_index=node_run.run_index,
                attempt=number,
                error=error,
            )
        if self.observers:
            self.event(
                EventType.NODE_FAILED,
                node_key=key,
                run_index=node_run.run_index,
                attempt=number,
                error=error,
            )
        mode = cn.node.settings.on_error
        if mode == "stop_workflow":
            now = self.clock()
            node_run.close_attempt(AttemptOutcome.FAILED, now, error)
            self.record(node_run, node_run.freeze(NodeStatus.FAILED, error=error, completed_at=now))
            self.consume_activation(key)
            return self.fail_execution(error)
        port = "main" if mode == "continue" else "error"
        self.complete_node(cn, node_run, error.as_output(), port, error=error)
        return None

    def fail_execution(self, error: ErrorInfo) -> Failed:
        execution = self.freeze(ExecutionStatus.FAILED, error=error)
        if self.observers:
            self.event(EventType.EXECUTION_FAILED, node_key=error.node_key, error=error)
        return Failed(execution=execution, error=error)

    def resume(
        self, execution: WorkflowExecution, resume_data: Any
    ) -> Generator[_Call, _Result, Outcome]:
        """Continue the suspended node of ``execution``, then the rest of the workflow."""
        suspension = execution.suspension
        key = execution.suspended_node
        assert suspension is not None
        assert key is not None
        cn = self.graph.nodes[key]
        check_transition(self.status, ExecutionStatus.RUNNING)
        self.status = ExecutionStatus.RUNNING
        if self.observers:
            self.event(EventType.EXECUTION_RESUMED, node_key=key, kind=suspension.kind)
        node_run = self.suspended_node_run(key)
        if suspension.kind == "retry":
            data: RetryData = suspension.data
            step = self.attempt(cn, node_run, data.attempt_number, data.resume_at)
        else:
            step = self.resume_node(cn, node_run, suspension, resume_data)
        return self.drive(step)

    def suspended_node_run(self, key: str) -> _NodeRun:
        last = self.runs[key][-1]
        return _NodeRun(
            key,
            last.execution_index,
            last.run_index,
            last.started_at,
            list(last.attempts),
            last.params,
            recorded=True,
        )

    def expire(self, execution: WorkflowExecution) -> Generator[_Call, _Result, Outcome]:
        """Fail the paused webhook node with ``WebhookTimeout``; ``on_error`` decides the rest."""
        key = execution.suspended_node
        assert key is not None
        assert execution.suspension is not None
        check_transition(self.status, ExecutionStatus.RUNNING)
        self.status = ExecutionStatus.RUNNING
        if self.observers:
            self.event(EventType.EXECUTION_RESUMED, node_key=key, kind=execution.suspension.kind)
        node_run = self.suspended_node_run(key)
        node_run.reopen_paused_attempt()
        data = execution.suspension.data
        expires = (
            data.expires_at.isoformat()
            if isinstance(data, WebhookData) and data.expires_at
            else "its deadline"
        )
        error = ErrorInfo(
            code="webhook_timeout",
            type=WebhookTimeout.__name__,
            module=WebhookTimeout.__module__,
            message=f"webhook wait of node {key!r} expired at {expires} before any delivery",
            node_key=key,
        )
        return self.drive(
            self.settle_failure(self.graph.nodes[key], node_run, error, retryable=False)
        )

    def resume_node(
        self, cn: CompiledNode, node_run: _NodeRun, suspension: Suspend, resume_data: Any
    ) -> _Step:
        """Hand resume data to the paused attempt; a failure here never retries."""
        key = cn.key
        node_run.reopen_paused_attempt()
        number = node_run.attempt_number
        if self.observers:
            self.event(
                EventType.NODE_RESUMED,
                node_key=key,
                run_index=node_run.run_index,
                attempt=number,
                kind=suspension.kind,
            )
        input_data = self.build_input(key, self.pending.get(key))
        now = self.clock()
        ctx = ActionContext(
            input=input_data,
            execution_id=self.id,
            node_key=key,
            attempt=number,
            run_index=node_run.run_index,
            state=self.state,
            now=now,
            env=self.env,
            variables=self.workflow.variables,
            workflow_id=self.workflow.id,
        )
        resume_fn = cn.spec.resume
        if resume_fn is None:
            value: Any = input_data.get("main") if suspension.kind == "timer" else resume_data
        else:
            params, problem = self.prepare_params(cn, node_run, ctx)
            if problem is not None:
                return self.settle_failure(cn, node_run, problem, retryable=False)
            self.current = (cn, node_run, ctx, True)
            return (resume_fn, (params, ctx, resume_data), cn.timeout)
        return self.settle_value(cn, node_run, ctx, value, from_resume=True)


_SUSPEND_TYPES: dict[str, type[Any]] = {
    "timer": TimerData,
    "webhook": WebhookData,
    "sub_workflow": SubWorkflowData,
}


# -- the public API ----------------------------------------------------------------------


def _check_resume_data(suspension: Suspend, resume_data: Any) -> None:
    kind = suspension.kind
    if kind == "sub_workflow":
        if not isinstance(resume_data, Mapping) or resume_data.get("status") not in (
            "completed",
            "failed",
            "timeout",
        ):
            raise ResumeError(
                "resume data for a sub_workflow suspension must be "
                "{'status': 'completed', 'output': ...} or {'status': 'failed'|'timeout', "
                f"'error': ...}}, got {resume_data!r}"
            )
        if resume_data["status"] == "completed" and "output" not in resume_data:
            raise ResumeError("resume data {'status': 'completed'} needs an 'output' key")
        if resume_data["status"] != "completed" and "error" not in resume_data:
            raise ResumeError(
                f"resume data {{'status': {resume_data['status']!r}}} needs an 'error' key"
            )
    if kind not in ("retry", "timer"):
        problem = json_problem(resume_data)
        if problem is not None:
            raise ResumeError(f"resume data must be JSON-native: {problem}")


def _check_execution(execution: Any, action: str) -> None:
    """Refuse what is not a well-formed WorkflowExecution before touching its fields."""
    if not isinstance(execution, WorkflowExecution):
        raise ResumeError(
            f"{action}: expected a prana.WorkflowExecution, got {type(execution).__name__}"
        )
    if (
        type(execution.node_executions) is dict
        and type(execution.pending) is tuple
        and (type(execution.status) is ExecutionStatus)
    ):
        return  # the shape every execution prana builds or loads has: nothing more to check
    if not isinstance(execution.status, ExecutionStatus):
        raise ResumeError(
            f"execution {execution.id!r}: status={execution.status!r} is not an ExecutionStatus; "
            "build executions with the enum (or load them with prana.loads)"
        )
    if not isinstance(execution.node_executions, Mapping):
        raise ResumeError(
            f"execution {execution.id!r}: node_executions must map node keys to tuples of "
            f"NodeExecution, got {type(execution.node_executions).__name__}"
        )
    if not isinstance(execution.pending, tuple | list):
        raise ResumeError(
            f"execution {execution.id!r}: pending must be a tuple of Activation, got "
            f"{type(execution.pending).__name__}"
        )


def _prepare_resume(
    execution: WorkflowExecution, workflow: Workflow, registry: Registry | None, resume_data: Any
) -> CompiledGraph:
    _check_execution(execution, "resume")
    if execution.status is not ExecutionStatus.SUSPENDED:
        raise ResumeError(
            f"execution {execution.id!r} is {execution.status.value}, not suspended; "
            "only a suspended execution can be resumed"
        )
    if execution.suspension is None:
        raise ResumeError(
            f"execution {execution.id!r} is suspended but has no suspension (the record is "
            "inconsistent: was it edited by hand?); reload it from the store"
        )
    if not isinstance(workflow, Workflow):
        raise ResumeError(f"workflow= must be a prana.Workflow, got {type(workflow).__name__}")
    if (workflow.id, workflow.version) != (execution.workflow_id, execution.workflow_version):
        raise ResumeError(
            f"execution {execution.id!r} belongs to workflow {execution.workflow_id!r} version "
            f"{execution.workflow_version}, but workflow {workflow.id!r} version "
            f"{workflow.version} "
            "was given; pass the definition it started with"
        )
    graph = compile_workflow(workflow, registry if registry is not None else _default_registry())
    key = execution.suspended_node
    runs = execution.node_executions.get(key or "")
    if key is None or key not in graph.nodes or not runs:
        raise ResumeError(
            f"execution {execution.id!r} names suspended node {key!r}, which the workflow "
            "or the execution's records do not have"
        )
    if execution.suspension.kind == "retry" and not isinstance(
        execution.suspension.data, RetryData
    ):
        raise ResumeError(f"execution {execution.id!r}: a retry suspension without RetryData")
    _check_resume_data(execution.suspension, resume_data)
    return graph


_DEFAULT_REGISTRY: list[Registry] = []
_DEFAULT_LOCK = threading.Lock()


def _default_registry() -> Registry:
    with _DEFAULT_LOCK:
        if not _DEFAULT_REGISTRY:
            _DEFAULT_REGISTRY.append(Registry())
        return _DEFAULT_REGISTRY[0]


def _checked_call(
    registry: Any, clock: Any, env: Any, observers: Any
) -> tuple[Registry, Clock, Mapping[str, Any], tuple[Observer, ...]]:
    """Check the keyword arguments every executor call takes; defaults for the ``None`` ones."""
    if registry is None:
        registry = _default_registry()
    elif not isinstance(registry, Registry):
        raise InvalidSettingsError(
            f"registry= must be a prana.Registry, got {type(registry).__name__}; build one with "
            "Registry() and register your actions on it"
        )
    if clock is None:
        clock = _utcnow
    elif not callable(clock):
        raise InvalidSettingsError(
            f"clock= must be a callable returning an aware datetime, got {type(clock).__name__}"
        )
    if env is None:
        env = _EMPTY_ENV
    elif type(env) is not dict and not isinstance(env, Mapping):
        raise InvalidSettingsError(f"env= must be a mapping, got {type(env).__name__}")
    if observers is None or (type(observers) in (list, tuple) and not observers):
        checked: tuple[Observer, ...] = ()
    elif callable(observers) or not isinstance(observers, Sequence | set | frozenset):
        raise InvalidSettingsError(
            f"observers= takes a list of callables, got {type(observers).__name__}; "
            "pass observers=[fn] for one"
        )
    else:
        checked = tuple(observers)
        for index, observer in enumerate(checked):
            if not callable(observer):
                raise InvalidSettingsError(
                    f"observers[{index}]={observer!r} is not callable; an observer is a "
                    "function taking an Event"
                )
    return registry, clock, env, checked


def _checked_clock(clock: Clock) -> Clock:
    """Read the clock once and make sure it gives what every record needs: an aware datetime.

    A clock returning a datetime *subclass* (pendulum's, say) is wrapped to return plain
    datetimes, which is what records hold and JSON writes.
    """
    now = clock()
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise InvalidSettingsError(
            f"clock= returned {now!r}; a clock must return an aware datetime, e.g. "
            "datetime.now(timezone.utc) (prana.testing.ManualClock is one)"
        )
    if type(now) is datetime:
        return clock

    def plain_clock() -> datetime:
        value = clock()
        return datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second,
            value.microsecond, tzinfo=value.tzinfo, fold=value.fold,
        )  # fmt: skip

    return plain_clock


def _new_run(
    workflow: Workflow,
    input_data: Any,
    registry: Registry | None,
    clock: Clock | None,
    env: Mapping[str, Any] | None,
    observers: Sequence[Observer] | None,
    execution_id: str | None,
    parent: ParentRef | None,
) -> _Run:
    checked_registry, checked_clock, checked_env, checked_observers = _checked_call(
        registry, clock, env, observers
    )
    if execution_id is not None and (not isinstance(execution_id, str) or not execution_id):
        raise InvalidSettingsError(
            f"execution_id={execution_id!r}: use a non-empty string (or leave it out)"
        )
    if parent is not None and not isinstance(parent, ParentRef):
        raise InvalidSettingsError(
            f"parent={parent!r}: use prana.ParentRef(execution_id=..., node_key=...) or None"
        )
    graph = compile_workflow(workflow, checked_registry)
    problem = json_problem(input_data)
    if problem is not None:
        raise InvalidWorkflowError([f"workflow input must be JSON-native: {problem}"])
    checked_clock = _checked_clock(checked_clock)
    return _Run(
        graph,
        # 32 random hex digits, like uuid4().hex at a fraction of the cost
        execution_id=execution_id if execution_id is not None else os.urandom(16).hex(),
        input_data=input_data,
        clock=checked_clock,
        env=checked_env,
        observers=checked_observers,
        parent=parent,
    )


def _loaded_run(
    execution: WorkflowExecution,
    resume_data: Any,
    workflow: Workflow,
    registry: Registry | None,
    clock: Clock | None,
    env: Mapping[str, Any] | None,
    observers: Sequence[Observer] | None,
) -> _Run:
    """Check a resume-like call (arguments, execution, data) and load its working copy."""
    checked_registry, checked_clock, checked_env, checked_observers = _checked_call(
        registry, clock, env, observers
    )
    graph = _prepare_resume(execution, workflow, checked_registry, resume_data)
    checked_clock = _checked_clock(checked_clock)
    return _Run.from_execution(
        graph, execution, clock=checked_clock, env=checked_env, observers=checked_observers
    )


def _resumed_run(
    execution: WorkflowExecution,
    resume_data: Any,
    workflow: Workflow,
    registry: Registry | None,
    clock: Clock | None,
    env: Mapping[str, Any] | None,
    observers: Sequence[Observer] | None,
) -> Generator[_Call, _Result, Outcome]:
    run = _loaded_run(execution, resume_data, workflow, registry, clock, env, observers)
    return run.resume(execution, resume_data)


def execute_workflow(
    workflow: Workflow,
    input: Any = None,
    *,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    execution_id: str | None = None,
    parent: ParentRef | None = None,
) -> Outcome:
    """Run ``workflow`` from its trigger until it completes, fails or suspends.

    Never raises for anything a node does; raises ``InvalidWorkflowError`` for a workflow
    that cannot run. Async actions are run to completion on a private event loop; inside a
    running loop use ``aexecute_workflow``.
    """
    run = _new_run(workflow, input, registry, clock, env, observers, execution_id, parent)
    return _drive_sync(run.start())


def resume_workflow(
    execution: WorkflowExecution,
    resume_data: Any = None,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
) -> Outcome:
    """Continue a suspended execution; returns a new execution, the given one is untouched.

    A retry suspension re-runs its node with input rebuilt from ``execution`` (resume data
    is ignored); a pause hands ``resume_data`` to the node's ``resume`` callback.
    """
    return _drive_sync(
        _resumed_run(execution, resume_data, workflow, registry, clock, env, observers)
    )


async def aexecute_workflow(
    workflow: Workflow,
    input: Any = None,
    *,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    execution_id: str | None = None,
    parent: ParentRef | None = None,
) -> Outcome:
    """``execute_workflow`` for async code: awaits async actions, calls sync ones."""
    run = _new_run(workflow, input, registry, clock, env, observers, execution_id, parent)
    return await _drive_async(run.start())


async def aresume_workflow(
    execution: WorkflowExecution,
    resume_data: Any = None,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
) -> Outcome:
    """``resume_workflow`` for async code."""
    return await _drive_async(
        _resumed_run(execution, resume_data, workflow, registry, clock, env, observers)
    )


def expire_webhook(
    execution: WorkflowExecution,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
) -> Outcome:
    """End a webhook wait whose ``expires_at`` passed: its node fails with ``WebhookTimeout``.

    The failure is not retried; the node's ``on_error`` applies (so a workflow can route a
    timeout to its error port). The shell calls this when a webhook alarm fires first.
    """
    _check_execution(execution, "expire_webhook")
    suspension = execution.suspension
    if suspension is None or suspension.kind != "webhook":
        kind = suspension.kind if suspension is not None else None
        raise ResumeError(
            f"execution {execution.id!r} is not waiting on a webhook (suspension kind {kind!r})"
        )
    run = _loaded_run(execution, None, workflow, registry, clock, env, observers)
    return _drive_sync(run.expire(execution))


def cancel_execution(
    execution: WorkflowExecution,
    reason: str | None = None,
    *,
    clock: Clock | None = None,
    observers: Sequence[Observer] | None = None,
) -> WorkflowExecution:
    """Return ``execution`` cancelled, its suspended node's record closed.

    Cancelling a cancelled execution returns it unchanged; a completed or failed one
    raises ``ResumeError``.
    """
    _check_execution(execution, "cancel_execution")
    _, checked_clock, _, checked_observers = _checked_call(None, clock, None, observers)
    if execution.status is ExecutionStatus.CANCELLED:
        return execution
    check_transition(execution.status, ExecutionStatus.CANCELLED)
    now = _checked_clock(checked_clock)()
    runs = dict(execution.node_executions)
    key = execution.suspended_node
    if key is not None and runs.get(key):
        last = runs[key][-1]
        attempts = list(last.attempts)
        if attempts and attempts[-1].outcome in (AttemptOutcome.RUNNING, AttemptOutcome.SUSPENDED):
            attempts[-1] = attrs.evolve(
                attempts[-1], ended_at=now, outcome=AttemptOutcome.CANCELLED
            )
        closed = attrs.evolve(
            last, status=NodeStatus.CANCELLED, completed_at=now, attempts=tuple(attempts)
        )
        runs[key] = (*runs[key][:-1], closed)
    message = reason or "cancelled"
    cancelled = attrs.evolve(
        execution,
        status=ExecutionStatus.CANCELLED,
        node_executions=runs,
        error=ErrorInfo(
            code="cancelled", type="Cancelled", module="prana", message=message, node_key=key
        ),
        updated_at=now,
        completed_at=now,
    )
    if checked_observers:
        emit(
            checked_observers,
            Event(
                type=EventType.EXECUTION_CANCELLED,
                execution_id=execution.id,
                workflow_id=execution.workflow_id,
                at=now,
                node_key=key,
            ),
        )
    return cancelled


# -- drivers -----------------------------------------------------------------------------


def _drive_sync(engine: Generator[_Call, _Result, Outcome]) -> Outcome:
    try:
        call = next(engine)
        while True:
            call = engine.send(_call_sync(call))
    except StopIteration as stop:
        result: Outcome = stop.value
        return result


def _call_sync(call: _Call) -> _Result:
    fn, args, timeout = call
    try:
        value = fn(*args) if timeout is None else _call_in_thread(fn, args, timeout)
        if type(value) not in _NEVER_AWAITABLE and inspect.isawaitable(value):
            value = _run_awaitable(value, timeout)
    except Exception as exc:  # noqa: BLE001 - an action's failure is data, not a crash
        return False, exc
    return True, value


def _call_in_thread(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
    """Run a sync call in a worker thread; past the deadline, abandon it and time out."""
    box: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - carried back to the caller's thread
            box.append((False, exc))

    worker = threading.Thread(target=target, name="prana-attempt", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        raise AttemptTimeout(f"attempt timed out after {timeout:g}s (its thread was abandoned)")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _run_awaitable(awaitable: Any, timeout: float | None) -> Any:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()  # never awaited: close it, so no "coroutine was never awaited" warning
        raise NonRetryable(
            RuntimeError(
                "an async action was called from execute_workflow inside a running event "
                "loop; use aexecute_workflow / aresume_workflow there"
            )
        )

    async def run() -> Any:
        return await _await_with_timeout(awaitable, timeout)

    return asyncio.run(run())


async def _await_with_timeout(awaitable: Any, timeout: float | None) -> Any:
    import asyncio

    if timeout is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise AttemptTimeout(f"attempt timed out after {timeout:g}s (cancelled)") from None


async def _drive_async(engine: Generator[_Call, _Result, Outcome]) -> Outcome:
    try:
        call = next(engine)
        while True:
            call = engine.send(await _call_async(call))
    except StopIteration as stop:
        result: Outcome = stop.value
        return result


async def _call_async(call: _Call) -> _Result:
    import asyncio

    fn, args, timeout = call
    try:
        if timeout is not None and not inspect.iscoroutinefunction(fn):
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(None, lambda: fn(*args))
            value = await _await_with_timeout(future, timeout)
        else:
            value = fn(*args)
        if inspect.isawaitable(value):
            value = await _await_with_timeout(value, timeout)
    except Exception as exc:  # noqa: BLE001 - an action's failure is data, not a crash
        return False, exc
    return True, value
