"""The entry checks: every executor call checks its arguments before the engine starts.

Caller mistakes raise a clear ``prana`` error here; nothing a node does ever
raises. The checks take exact-type fast paths first, since they run on every call.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Generator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from prana._durations import is_aware
from prana._engine import Call, Clock, Result, Run
from prana._errors import InvalidSettingsError, InvalidWorkflowError, ResumeError
from prana._events import Observer
from prana._graph import CompiledGraph, compile_workflow
from prana._jsoncheck import json_problem, json_size
from prana._limits import SIZE_RULE
from prana._model import (
    AttemptOutcome,
    ExecutionStatus,
    NodeStatus,
    Outcome,
    ParentRef,
    Pause,
    RetryData,
    Suspend,
    Workflow,
    WorkflowExecution,
)
from prana._registry import Registry
from prana._state import (
    ATTEMPT_RUNNING,
    EXEC_SUSPENDED,
    NODE_RUNNING,
    check_attempt_transition,
    check_node_transition,
)

_EMPTY_ENV: Mapping[str, Any] = {}
_NO_OBSERVERS: tuple[Observer, ...] = ()


_IDS: list[str] = []
"""Execution ids ready to hand out: 128 random bits each, read from ``os.urandom`` 256 at a
time (a system call per id was the largest single cost of a short execution)."""


def new_execution_id() -> str:
    """A fresh execution id: 32 hex digits of ``os.urandom``, as ``uuid4().hex`` would be.

    ``list.pop`` hands each id out once, across threads; a forked child forgets the ids
    its parent read (``_forget_ids``), so two processes never hand out the same one.
    """
    while True:
        try:
            return _IDS.pop()
        except IndexError:
            pool = os.urandom(16 * 256).hex()
            _IDS.extend(pool[i : i + 32] for i in range(0, len(pool), 32))


def _forget_ids() -> None:
    _IDS.clear()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_forget_ids)


_utcnow: Clock = functools.partial(datetime.now, timezone.utc)
"""The default clock: aware UTC now (a partial, so reading it costs no Python frame)."""


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


def check_execution(execution: Any, action: str) -> None:
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


def check_checkpoint(checkpoint: Any) -> Any:
    """``checkpoint`` if it is a callable (or ``None``), else a clear error."""
    if checkpoint is not None and not callable(checkpoint):
        raise InvalidSettingsError(
            f"checkpoint={checkpoint!r}: pass a callable taking the running execution (a "
            "shell saves it before each action call), or None"
        )
    return checkpoint


def running_node(execution: WorkflowExecution) -> str | None:
    """The node whose attempt a ``running`` record shows in flight, if exactly one does."""
    found = [
        key
        for key, runs in execution.node_executions.items()
        if runs
        and runs[-1].status is NodeStatus.RUNNING
        and runs[-1].attempts
        and runs[-1].attempts[-1].outcome is AttemptOutcome.RUNNING
    ]
    return found[0] if len(found) == 1 else None


def prepare_recover(
    execution: WorkflowExecution, workflow: Workflow, registry: Registry | None
) -> tuple[CompiledGraph, str]:
    """Check a ``recover_execution`` call; return the compiled graph and the node in flight."""
    check_execution(execution, "recover_execution")
    if execution.status is not ExecutionStatus.RUNNING:
        raise ResumeError(
            f"execution {execution.id!r} is {execution.status.value}, not running; only a "
            "running execution (a checkpoint its process left) can be recovered"
        )
    graph = _compiled_for(execution, workflow, registry)
    key = running_node(execution)
    if key is None or key not in graph.nodes:
        raise ResumeError(
            f"execution {execution.id!r} is running but its records show no single attempt "
            "in flight (the record is inconsistent: was it edited by hand?)"
        )
    return graph, key


def check_same_workflow(execution: WorkflowExecution, workflow: object, verb: str) -> None:
    """Refuse a ``workflow=`` that is not the definition ``execution`` ``verb`` with."""
    if not isinstance(workflow, Workflow):
        raise ResumeError(f"workflow= must be a prana.Workflow, got {type(workflow).__name__}")
    if (workflow.id, workflow.version) != (execution.workflow_id, execution.workflow_version):
        raise ResumeError(
            f"execution {execution.id!r} belongs to workflow {execution.workflow_id!r} version "
            f"{execution.workflow_version}, but workflow {workflow.id!r} version "
            f"{workflow.version} was given; pass the definition it {verb} with"
        )


def _compiled_for(
    execution: WorkflowExecution, workflow: Workflow, registry: Registry | None
) -> CompiledGraph:
    """The workflow ``execution`` started with, compiled; a different one is refused."""
    check_same_workflow(execution, workflow, "started")
    return compile_workflow(workflow, registry if registry is not None else default_registry())


_BY_TIME = ("retry", "timer")
"""The pause kinds that time alone resumes."""


def resume_targets(execution: WorkflowExecution, node: str | None, now: datetime) -> list[Pause]:
    """The pauses a resume continues, in order (section 9 of the design).

    ``node`` names one. Otherwise: the only pause; else every retry and timer due at
    ``now``; else the one pause waiting for data. Nothing due, or several waiting for data
    with none named: ``ResumeError`` saying which.
    """
    pauses = execution.pauses
    if node is not None:
        for pause in pauses:
            if pause.node_key == node:
                return [pause]
        raise ResumeError(
            f"execution {execution.id!r} has no pause at node {node!r}; its pauses: "
            f"{', '.join(_described(p) for p in pauses) or 'none'}"
        )
    if len(pauses) == 1:
        return [pauses[0]]
    due = [p for p in pauses if p.kind in _BY_TIME and p.due_at is not None and p.due_at <= now]
    if due:
        return due
    waiting = [p for p in pauses if p.kind not in _BY_TIME]
    if len(waiting) == 1:
        return waiting
    if waiting:
        raise ResumeError(
            f"execution {execution.id!r} waits for data at several nodes: "
            f"{', '.join(_described(p) for p in waiting)}; name the one to resume (node=...)"
        )
    earliest = pauses[0].due_at
    when = earliest.isoformat() if earliest is not None else "never"
    raise ResumeError(
        f"execution {execution.id!r} has nothing due at {now.isoformat()}: its first pause "
        f"({_described(pauses[0])}) comes due at {when}"
    )


def _described(pause: Pause) -> str:
    due = pause.due_at
    return f"{pause.node_key!r} ({pause.kind}" + (f", due {due.isoformat()})" if due else ")")


def _prepare_resume(
    execution: WorkflowExecution,
    workflow: Workflow,
    registry: Registry | None,
    resume_data: Any,
    node: str | None,
    now: datetime,
) -> tuple[CompiledGraph, list[tuple[str, Suspend]]]:
    check_execution(execution, "resume")
    if execution.status is not EXEC_SUSPENDED:
        raise ResumeError(
            f"execution {execution.id!r} is {execution.status.value}, not suspended; "
            "only a suspended execution can be resumed"
        )
    if execution.suspension is None:
        raise ResumeError(
            f"execution {execution.id!r} is suspended but has no suspension (the record is "
            "inconsistent: was it edited by hand?); reload it from the store"
        )
    if (  # check_same_workflow's answer for the workflow the execution ran with
        type(workflow) is Workflow
        and workflow.id == execution.workflow_id
        and workflow.version == execution.workflow_version
        and registry is not None
    ):
        graph = compile_workflow(workflow, registry)
    else:
        graph = _compiled_for(execution, workflow, registry)
    first, suspension = execution.suspended_node, execution.suspension
    if first is None:
        raise ResumeError(
            f"execution {execution.id!r} names suspended node None, which the workflow or the "
            "execution's records do not have (the record is inconsistent: was it edited by "
            "hand?)"
        )
    if not execution.other_pauses and (node is None or node == first):
        targets = [(first, suspension)]  # one pause: resumed as it always was
    else:
        targets = [(p.node_key, p.suspension) for p in resume_targets(execution, node, now)]
    for index, (key, pause) in enumerate(targets):
        _check_pause(execution, graph, key, pause, resume_data if index == 0 else None)
    return graph, targets


def _check_pause(
    execution: WorkflowExecution,
    graph: CompiledGraph,
    key: str,
    pause: Suspend,
    resume_data: Any,
) -> None:
    """Refuse a pause the record or the workflow cannot resume, or data it cannot take."""
    runs = execution.node_executions.get(key)
    if key not in graph.nodes or not runs:
        raise ResumeError(
            f"execution {execution.id!r} names suspended node {key!r}, which the workflow "
            "or the execution's records do not have"
        )
    last = runs[-1]
    check_node_transition(key, last.status, NODE_RUNNING)
    if pause.kind == "retry":
        if not isinstance(pause.data, RetryData):
            raise ResumeError(f"execution {execution.id!r}: a retry suspension without RetryData")
        return  # a retry ignores resume data
    # a pause: the paused attempt is the one that continues
    if not last.attempts:
        raise ResumeError(
            f"execution {execution.id!r}: node {key!r} is paused but its record has no "
            "attempt (the record is inconsistent: was it edited by hand?)"
        )
    paused = last.attempts[-1]
    check_attempt_transition(key, paused.number, paused.outcome, ATTEMPT_RUNNING)
    _check_resume_data(pause, resume_data)


_DEFAULT_REGISTRY: list[Registry] = []
_DEFAULT_LOCK = threading.Lock()


def default_registry() -> Registry:
    with _DEFAULT_LOCK:
        if not _DEFAULT_REGISTRY:
            _DEFAULT_REGISTRY.append(Registry())
        return _DEFAULT_REGISTRY[0]


def checked_call(
    registry: Any, clock: Any, env: Any, observers: Any
) -> tuple[Registry, Clock, Mapping[str, Any], tuple[Observer, ...]]:
    """Check the keyword arguments every executor call takes; defaults for the ``None`` ones."""
    if registry is None:
        registry = default_registry()
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


def check_clock(clock: Clock) -> Clock:
    """Read the clock once and make sure it gives what every record needs: an aware datetime.

    A clock returning a datetime *subclass* (pendulum's, say) is wrapped to return plain
    datetimes, which is what records hold and JSON writes.
    """
    return read_clock(clock)[0]


AWARE_CLOCKS: set[type] = set()
"""Clock types whose every reading is an aware, plain ``datetime`` by construction
(``prana.testing.ManualClock`` adds itself): ``read_clock`` reads them unwrapped."""


def read_clock(clock: Clock) -> tuple[Clock, datetime]:
    """``check_clock``, and the reading it checked (a run's first ``now``: one read less).

    The clock returned checks every later reading as this one (``checking_clock``), but for
    the clocks whose readings are aware and plain by construction: the default clock and the
    types in ``AWARE_CLOCKS``, read as they are (the hot path; ``tests/test_bad_input.py``).
    """
    now = clock()
    if type(now) is not datetime or now.tzinfo is not timezone.utc:
        now = _checked_reading(now)
    if clock is _utcnow or type(clock) in AWARE_CLOCKS:
        return clock, now
    return checking_clock(clock), now


def checking_clock(clock: Clock) -> Clock:
    """``clock`` with each reading checked: aware (else ``InvalidSettingsError``), and plain
    (a ``datetime`` subclass, as pendulum's, read as a plain one: records hold those)."""

    def checked_clock() -> datetime:
        now = clock()
        if type(now) is datetime and now.tzinfo is timezone.utc:
            return now  # the usual reading: aware, plain
        return _checked_reading(now)

    return checked_clock


def _checked_reading(now: Any) -> datetime:
    if type(now) is datetime and now.tzinfo is timezone.utc:
        return now
    if not is_aware(now):
        raise InvalidSettingsError(
            f"clock= returned {now!r}; a clock must return an aware datetime, e.g. "
            "datetime.now(timezone.utc) (prana.testing.ManualClock is one)"
        )
    return now if type(now) is datetime else plain_datetime(now)


def plain_datetime(value: datetime) -> datetime:
    """``value`` as a plain ``datetime`` (a subclass's reading, as pendulum's)."""
    return datetime(
        value.year, value.month, value.day, value.hour, value.minute, value.second,
        value.microsecond, tzinfo=value.tzinfo, fold=value.fold,
    )  # fmt: skip


def _checked_run_call(
    registry: Any, clock: Any, env: Any, observers: Any
) -> tuple[Registry, Clock, Mapping[str, Any], tuple[Observer, ...]]:
    """``checked_call`` for ``new_run`` and ``loaded_run``, the usual call answered first.

    Rule: the usual call (a registry, every other default) takes ``checked_call``'s answer
    without its checks (``tests/test_retry_fast_path.py`` holds both equal).
    """
    if type(registry) is Registry and clock is None and env is None and observers is None:
        return registry, _utcnow, _EMPTY_ENV, _NO_OBSERVERS
    return checked_call(registry, clock, env, observers)


def new_run(
    workflow: Workflow,
    input_data: Any,
    registry: Registry | None,
    clock: Clock | None,
    env: Mapping[str, Any] | None,
    observers: Sequence[Observer] | None,
    execution_id: str | None,
    parent: ParentRef | None,
    trace_context: Mapping[str, str] | None = None,
) -> Run:
    checked_registry, checked_clock, checked_env, checked_observers = _checked_run_call(
        registry, clock, env, observers
    )
    checked_trace = None if trace_context is None else check_trace_context(trace_context)
    if execution_id is not None and (not isinstance(execution_id, str) or not execution_id):
        raise InvalidSettingsError(
            f"execution_id={execution_id!r}: use a non-empty string (or leave it out)"
        )
    if parent is not None and not isinstance(parent, ParentRef):
        raise InvalidSettingsError(
            f"parent={parent!r}: use prana.ParentRef(execution_id=..., node_key=...) or None"
        )
    graph = compile_workflow(workflow, checked_registry)
    size = json_size(input_data)
    if size < 0:
        problem = json_problem(input_data)
        raise InvalidWorkflowError([f"workflow input must be JSON-native: {problem}"])
    limits = checked_registry.limits
    if size > limits.max_value_size:
        message = (
            f"workflow input has a size of {size:,} ({SIZE_RULE}), over "
            f"Limits.max_value_size={limits.max_value_size:,}; the application raises it "
            "with Registry(limits=Limits(max_value_size=...))"
        )
        raise InvalidWorkflowError([message])
    if checked_clock is _utcnow:  # read_clock's first branch answers for its readings (a test)
        now = _utcnow()
    else:
        checked_clock, now = read_clock(checked_clock)
    run = Run(
        graph,
        execution_id if execution_id is not None else new_execution_id(),
        input_data,
        checked_clock,
        checked_env,
        checked_observers,
        parent,
        checked_trace,
        limits,
    )
    run.use_secrets(checked_registry.secrets)
    run.kept = run.input_size = size
    run.now_hint = now
    return run


MAX_TRACE_FIELDS = 8
"""The most headers a trace context holds (W3C needs two: ``traceparent``, ``tracestate``)."""
MAX_TRACE_TEXT = 1024
"""The longest header name or value kept (``tracestate`` is at most 512 characters)."""


def check_trace_context(value: Any) -> dict[str, str] | None:
    """``value`` as a plain dict of short strings, or a clear error naming ``trace_context``.

    The core never reads it; the bounds only keep a record from growing without limit.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidSettingsError(
            f"trace_context={value!r}: use a mapping of W3C trace headers, e.g. "
            "{'traceparent': '00-<trace id>-<span id>-01'}, or None"
        )
    short_text = all(
        isinstance(text, str) and len(text) <= MAX_TRACE_TEXT
        for item in value.items()
        for text in item
    )
    if len(value) > MAX_TRACE_FIELDS or not short_text:
        raise InvalidSettingsError(
            f"trace_context: use at most {MAX_TRACE_FIELDS} headers, each a string name and "
            f"value of at most {MAX_TRACE_TEXT} characters (W3C traceparent/tracestate)"
        )
    return dict(value)


def loaded_run(
    execution: WorkflowExecution,
    resume_data: Any,
    workflow: Workflow,
    registry: Registry | None,
    clock: Clock | None,
    env: Mapping[str, Any] | None,
    observers: Sequence[Observer] | None,
    node: str | None = None,
) -> Run:
    """Check a resume-like call (arguments, execution, data) and load its working copy,
    with the pauses it resumes (``resume_targets``) in ``resuming``."""
    checked_registry, checked_clock, checked_env, checked_observers = _checked_run_call(
        registry, clock, env, observers
    )
    if checked_clock is _utcnow:  # read_clock's first branch answers for its readings (a test)
        now = _utcnow()
    else:
        checked_clock, now = read_clock(checked_clock)
    graph, targets = _prepare_resume(execution, workflow, checked_registry, resume_data, node, now)
    run = Run.from_execution(
        graph,
        execution,
        clock=checked_clock,
        env=checked_env,
        observers=checked_observers,
        limits=checked_registry.limits,
    )
    run.use_secrets(checked_registry.secrets)
    run.now_hint = now
    run.resuming = targets
    return run


def resumed_run(
    execution: WorkflowExecution,
    resume_data: Any,
    workflow: Workflow,
    registry: Registry | None,
    clock: Clock | None,
    env: Mapping[str, Any] | None,
    observers: Sequence[Observer] | None,
) -> Generator[Call, Result, Outcome]:
    run = loaded_run(execution, resume_data, workflow, registry, clock, env, observers)
    return run.resume(execution, resume_data)
