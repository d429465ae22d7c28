"""The engine: a generator that runs a workflow's nodes and their attempts.

Theory of operation. ``Run.drive`` decides everything and *yields* each action call it
needs (a ``Call``); a driver (``prana._drivers``) performs the call and sends the result
back. The sync driver calls directly, the async driver awaits, so the same engine serves
``execute_workflow`` and ``aexecute_workflow`` (APScheduler 4's "write it once").

The engine works on a private mutable copy of the execution and freezes it into a new
``WorkflowExecution`` when it returns; the caller's execution is never changed.

Checkpoints. With a ``checkpoint`` callback, the engine hands it a snapshot before each
action call: the execution ``running``, the node's record ``running`` with the attempt
about to run open (outcome ``running``). A shell saves it, so a process that dies inside
the action leaves a record that says which attempt was in flight; ``prana._recovery`` (for
``recover_execution``) closes that attempt ``interrupted`` and runs it again. An exception
from the callback stops the run before the action is called (a lost claim). A shell that
will not read a snapshot passes a ``prana._checkpoint.CheckpointById``, which the engine
offers the execution id first, building the snapshot only if it declines.

Scheduling is depth-first: the most recently activated ready node runs next, ties by key.
A node with several input ports waits until every port has data or can no longer get any.

Pauses (section 9 of the design card). A node that pauses (``Run.pause``) is held: it stays
pending, so what it feeds keeps waiting for it, but is never picked; the run goes on with
whatever else is ready and suspends (``suspend_execution``) only when nothing is. A resume
continues the pauses ``prana._entry.resume_targets`` chose (``resuming``), the first given
the resume data, before anything else runs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from datetime import datetime
from typing import Any

from prana._builtins import SubWorkflowFailed, reserved_state_key
from prana._checkpoint import CheckpointById
from prana._decision import (
    AttemptView,
    rejects_result,
)
from prana._errors import WebhookTimeout
from prana._events import Event, EventType, Observer, emit
from prana._failure import settle_failure
from prana._frontier import Frontier, Pending, check_pending, new_pending
from prana._graph import CompiledGraph, CompiledNode
from prana._hooks import (
    DELIVERED_PREFIX,
    NO_SECRETS,
    NO_TOKENS,
    SECRET_KEY,
    delivery_digest,
    redact_tokens,
)
from prana._jsoncheck import CONTAINER_SIZE, json_problem, json_size
from prana._limits import (
    DEFAULT_LIMITS,
    Limits,
    node_runs_exceeded,
    recorded_size,
    size_problem,
)
from prana._model import (
    Activation,
    ErrorCode,
    ErrorInfo,
    ExecutionStatus,
    Failed,
    Outcome,
    Output,
    ParentRef,
    Pause,
    RetryData,
    Suspend,
    WebhookData,
    Workflow,
    WorkflowExecution,
    due_of,
    new_activation,
    new_completed,
    new_suspend,
    new_workflow_execution,
)
from prana._noderun import NodeRun, close_paused, error_info, prana_error
from prana._noderuns import NodeRuns, RunsByNode
from prana._pause import settle_suspend
from prana._registry import ActionContext
from prana._scope import prepare_params
from prana._state import (
    ATTEMPT_COMPLETED,
    ATTEMPT_FAILED,
    EXEC_COMPLETED,
    EXEC_PENDING,
    EXEC_RUNNING,
    EXEC_SUSPENDED,
    FINAL_VALUES,
    NODE_COMPLETED,
    check_transition,
)

Clock = Callable[[], datetime]

Continuation = tuple[CompiledNode, NodeRun, ActionContext, bool]
"""What settles a call's result: ``(node, node_run, ctx, from_resume)``; ``from_resume``
says the call is the action's ``resume`` callback (its failure never retries)."""

Call = tuple[Callable[..., Any], tuple[Any, ...], "float | None", Continuation]
"""One action call the engine needs made: ``(fn, args, timeout, continuation)``.

A driver makes ``fn(*args)`` (within ``timeout`` seconds) and sends the ``Result`` back;
the continuation travels with the call, so the engine settles the result with it."""

Held = tuple[str, Suspend, Any]
"""A pause the run holds: ``(node key, suspension, what its outcome gives the caller or
None)``; a ``Pause`` is built only for the record's ``other_pauses``."""


def _held_order(entry: Held) -> tuple[bool, datetime | None, str]:
    """``Pause.order`` for a held pause: by due time (none last), then node key."""
    due = due_of(entry[1].data)
    return (due is None, due, entry[0])


Step = Call | Outcome | None
"""What the engine's last move produced (see ``Run.drive``)."""

Checkpoint = Callable[[WorkflowExecution], object]
"""Called with a ``running`` snapshot of the execution before each action call."""

Result = tuple[bool, Any]
"""``(True, value)`` when the call returned, ``(False, exception)`` when it raised."""


class Run(Frontier):
    """One executor call's private, mutable working copy of an execution.

    Which node runs next (``pending``, ``backlog``, ``heap``) is ``Frontier``'s part.
    """

    __slots__ = (
        "checkpoint",
        "clock",
        "env",
        "graph",
        "id",
        "input",
        "input_size",
        "issued",
        "kept",
        "last_output",
        "limits",
        "next_index",
        "now_hint",
        "observers",
        "parent",
        "paused",
        "resuming",
        "runs",
        "secrets",
        "started_at",
        "state",
        "status",
        "trace_context",
        "variables",
        "workflow",
        "workflow_id",
    )

    def __init__(
        self,
        graph: CompiledGraph,
        execution_id: str,
        input_data: Any,
        clock: Clock,
        env: Mapping[str, Any],
        observers: Sequence[Observer],
        parent: ParentRef | None,
        trace_context: Mapping[str, str] | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.graph = graph
        self.workflow: Workflow = graph.workflow
        self.id = execution_id
        self.input = input_data
        self.clock = clock
        self.env = env
        self.observers = observers
        self.parent = parent
        self.runs: RunsByNode = {}
        """Records per node, always a tuple: a new record replaces its node's tuple (which
        copies that node's runs, at most ``max_iterations``), so ``frozen`` copies the dict
        and no row, and a checkpoint costs the number of nodes, not of records."""
        self.state: dict[str, Any] = {}
        self.paused: list[Held] = []
        """The pauses met so far (each with what its outcome gives the caller, or
        ``None``): the execution suspends when nothing else is ready (``complete``)."""
        self.resuming: list[tuple[str, Suspend]] = []
        """The pauses this call resumes, in order (``prana._entry.resume_targets``)."""
        self.init_frontier()
        self.next_index = 0
        self.started_at: datetime | None = None
        self.last_output: Any = None
        self.status = EXEC_PENDING
        self.now_hint: datetime | None = None
        """The clock's latest reading while only pure work has run since (the entry
        check's, a node's completion, an attempt's end): the next reading takes it instead
        of the clock. ``run_node`` and ``resume`` consume it (an action call comes next);
        ``frozen`` reads it (the execution is handed back next)."""
        self.variables = graph.workflow.variables
        self.workflow_id = graph.workflow.id
        self.issued: dict[str, str] = NO_TOKENS
        """Resume tokens ``$webhooks`` minted in this call, by wait node (memory only), and
        the application's secrets (``use_secrets``): every value is redacted from what the
        record keeps. Rule: a run with none shares ``NO_TOKENS``, which nothing writes
        (``$webhooks`` gives the run its own dict first; a test holds it empty)."""
        self.secrets: Mapping[str, str] = NO_SECRETS
        """``$secrets``: the registry's secrets (``Registry(secrets=...)``)."""
        self.trace_context = trace_context
        """The execution's trace (opaque W3C headers): carried, never read."""
        self.checkpoint: Checkpoint | None = None
        """Given a ``running`` snapshot before each action call (see the module)."""
        self.limits = limits
        """What the application lets one execution run and keep (``prana._limits``)."""
        self.kept = 0
        """What the execution keeps so far, as ``Limits`` counts it (``kept_size``)."""
        self.input_size = -1
        """The workflow input's size as ``Limits`` counts it, when the entry check knows it."""

    def use_secrets(self, secrets: Mapping[str, str]) -> None:
        """Give templates ``$secrets`` and redact each value wherever the record would keep
        it (params, outputs, state updates, errors, suspension data), as tokens are."""
        if secrets:
            self.secrets = secrets
            self.issued = {SECRET_KEY + name: value for name, value in secrets.items()}

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
        limits: Limits = DEFAULT_LIMITS,
    ) -> Run:
        run = cls(
            graph,
            execution.id,
            execution.input,
            clock,
            env,
            observers,
            execution.parent,
            execution.trace_context,
            limits,
        )
        kept = execution.kept_size
        run.kept = kept if type(kept) is int and kept >= 0 else recorded_size(execution)
        check_pending(graph, execution)  # before the copy: the runs it reads are built once
        loaded = execution.node_executions
        if type(loaded) is NodeRuns:  # read by loads: stays lazy (prana._noderuns)
            run.runs = loaded.thawed()
        else:
            runs = run.runs = dict(loaded)
            for value in runs.values():  # a loop: a set of the types costs 5x more
                if type(value) is not tuple:  # built by hand with lists, say
                    run.runs = {k: tuple(v) for k, v in runs.items()}
                    break
        run.state = dict(execution.state)
        for a in execution.pending:
            activation = Pending()  # new_pending, inlined
            activation.seq, activation.sources = a.seq, dict(a.sources)
            if a.node_key in run.pending:
                run.backlog.setdefault(a.node_key, []).append(activation)
            else:
                run.pending[a.node_key] = activation
        if len(run.pending) > 1:  # a lone pending node is picked without the heap
            run.rebuild_heap()
        if run.feeds is not None:
            run.recount()
        run.next_index = execution.next_index
        run.started_at = execution.started_at
        run.last_output = execution.output
        run.status = execution.status
        first, others = execution.suspended_node, execution.other_pauses
        if first is not None and execution.suspension is not None:
            run.paused.append((first, execution.suspension, None))
            run.held.add(first)
        for pause in others:
            run.paused.append((pause.node_key, pause.suspension, None))
            run.held.add(pause.node_key)
        if execution.resuming:  # a checkpoint taken while resuming several pauses
            by_key = {k: suspension for k, suspension, _ in run.paused}
            run.resuming = [(k, by_key[k]) for k in execution.resuming if k in by_key]
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
        return self.frozen(status, self.state, suspended_node, suspension, output, error)

    def snapshot(self, node_run: NodeRun) -> WorkflowExecution:
        """The execution ``running``, ``node_run``'s record ``running`` with its attempt open.

        What a checkpoint receives. The record stays in ``runs`` (``recorded``), so the
        run's settling replaces it; the status does not change (no transition).
        """
        node_run.record(self.runs, node_run.running_record())
        return self.frozen(ExecutionStatus.RUNNING, dict(self.state), None, None, None, None)

    def frozen(
        self,
        status: ExecutionStatus,
        state: Mapping[str, Any],
        suspended_node: str | None,
        suspension: Suspend | None,
        output: Any,
        error: ErrorInfo | None,
    ) -> WorkflowExecution:
        now = self.now_hint or self.clock()
        others: tuple[Pause, ...] = ()
        paused = self.paused
        if paused and (len(paused) > 1 or suspended_node is None):
            runs = self.runs  # the pauses besides the one ``suspended_node`` names
            others = tuple(
                sorted(
                    (
                        Pause(node_key=k, run_index=runs[k][-1].run_index, suspension=s)
                        for k, s, _ in paused
                        if k != suspended_node
                    ),
                    key=Pause.order,
                )
            )
        backlog, pending = self.backlog, self.pending
        if not pending:
            activations: tuple[Activation, ...] = ()
        elif len(pending) == 1 and not backlog:  # a suspension's usual frontier: one node
            ((k, p),) = pending.items()
            activations = (new_activation(k, p.seq, p.sources),)
        else:
            activations = tuple(
                new_activation(k, p.seq, p.sources)
                for k, head in pending.items()
                for p in ((head, *backlog[k]) if k in backlog else (head,))
            )
        return new_workflow_execution(
            self.id,
            self.workflow_id,
            self.workflow.version,
            status,
            self.input,
            self.runs.copy(),
            state,
            activations,
            self.next_index,
            suspended_node,
            suspension,
            output,
            error,
            self.parent,
            self.started_at,
            now,
            now if status._value_ in FINAL_VALUES else None,
            self.trace_context,
            None,
            self.kept,
            others,
            tuple(k for k, _ in self.resuming) if self.resuming else (),
        )

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

    # -- the engine ----------------------------------------------------------------------

    def start(self) -> Generator[Call, Result, Outcome]:
        check_transition(self.status, EXEC_RUNNING)
        self.status = EXEC_RUNNING
        self.started_at = self.now_hint or self.clock()
        if self.observers:
            self.event(EventType.EXECUTION_STARTED)
        self.enter(self.graph.trigger, new_pending(-1, {}))
        return self.drive()

    def drive(self, step: Step = None) -> Generator[Call, Result, Outcome]:
        """Run ready nodes one at a time; yield each action call, return the outcome.

        A step is what the last move produced: a ``Call`` to make (its result is settled
        with the call's own continuation), ``None`` (the node is done: pick the next), or
        an outcome.
        """
        while True:
            if step is None:
                if self.resuming:  # the other pauses due with the first (``resume``)
                    step = self.resume_pause(self.resuming.pop(0), None)
                    continue
                key = self.pick_ready()
                if key is None:
                    return self.complete()
                step = self.run_node(key)
                continue
            if type(step) is tuple:
                continuation = step[3]
                checkpoint = self.checkpoint
                # A checkpoint taken by the id alone needs no snapshot (prana._checkpoint).
                if (
                    checkpoint is not None
                    and not continuation[3]
                    and not (
                        isinstance(checkpoint, CheckpointById) and checkpoint.take_by_id(self.id)
                    )
                ):
                    checkpoint(self.snapshot(continuation[1]))
                ok, value = yield step
                if ok and not continuation[3]:
                    cn, node_run, ctx, _ = continuation
                    step = self.settle_value(cn, node_run, ctx, value, from_resume=False)
                else:
                    step = self.finish_call(continuation, ok, value)
                continue
            return step  # type: ignore[return-value]  # neither None nor a Call: an Outcome

    def complete(self) -> Outcome:
        """Nothing is ready: suspend on the pauses met, if any, else complete."""
        if self.paused:
            return self.suspend_execution()
        output = self.last_output
        check_transition(self.status, EXEC_COMPLETED)
        self.status = EXEC_COMPLETED
        execution = self.frozen(EXEC_COMPLETED, self.state, None, None, output, None)
        if self.observers:
            self.event(EventType.EXECUTION_COMPLETED, output=output)
        return new_completed(execution, output)

    def run_node(self, key: str) -> Step:
        cn = self.graph.nodes[key]
        runs = self.runs.get(key)
        run_index = len(runs) if runs else 0
        if self.next_index >= self.limits.max_node_runs:
            return self.fail_execution(node_runs_exceeded(key, self.limits))
        if run_index >= self.workflow.max_iterations:
            message = (
                f"node {key!r} would run a {run_index + 1}th time, past the workflow's "
                f"max_iterations={self.workflow.max_iterations}; a loop does not end "
                "(or raise Workflow.max_iterations)"
            )
            error = prana_error(ErrorCode.ITERATION_LIMIT, message, key, "IterationLimitExceeded")
            return self.fail_execution(error)
        # The previous step's end is this node's start: nothing but pure work lies between.
        started = self.now_hint or self.clock()
        self.now_hint = None
        node_run = NodeRun(key, self.next_index, run_index, started, [])
        self.next_index += 1
        return self.attempt(cn, node_run, 1, None)

    def attempt(
        self,
        cn: CompiledNode,
        node_run: NodeRun,
        number: int,
        due_at: datetime | None,
        started: datetime | None = None,
    ) -> Step:
        """Begin attempt ``number`` of ``node_run``: the call to make, or a settled failure.

        It starts when its node run started (a first attempt) or now (a retry), unless
        ``started`` says (a recovered attempt, running again now).
        """
        key = cn.key
        if started is None:
            started = node_run.started_at if due_at is None else self.clock()
        node_run.attempt_number = number
        node_run.attempt_started = started
        node_run.attempt_due = due_at
        if self.observers:
            self.event(
                EventType.NODE_STARTED,
                node_key=key,
                run_index=node_run.run_index,
                attempt=number,
                max_attempts=cn.max_attempts,
            )
        input_data = self.build_input(key, self.pending.get(key))
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
            if cn.params_size and not node_run.recorded:  # kept once per node run
                problem = self.keep(key, "its params", cn.params_size)
                if problem is not None:
                    return self.settle_failure(cn, node_run, problem)
        else:
            params, problem = prepare_params(self, cn, node_run, ctx, count=not node_run.recorded)
            if problem is not None:
                return self.settle_failure(cn, node_run, problem)
        return (cn.spec.fn, (params, ctx), cn.timeout, (cn, node_run, ctx, False))

    def finish_call(self, continuation: Continuation, ok: bool, value: Any) -> Step:
        """Settle the result of a call with the continuation it was made with."""
        cn, node_run, ctx, from_resume = continuation
        if ok:
            return self.settle_value(cn, node_run, ctx, value, from_resume=from_resume)
        if from_resume:
            code = (
                ErrorCode.SUB_WORKFLOW_FAILED
                if isinstance(value, SubWorkflowFailed)
                else ErrorCode.RESUME_ERROR
            )
            return self.settle_failure(cn, node_run, error_info(value, cn.key, code))
        return self.settle_failure(cn, node_run, error_info(value, cn.key), exception=value)

    def settle_value(
        self,
        cn: CompiledNode,
        node_run: NodeRun,
        ctx: ActionContext,
        value: Any,
        *,
        from_resume: bool,
    ) -> Outcome | None:
        """The action returned: a pause, or an output on a port (which may still be refused)."""
        key = cn.key
        retryable = not from_resume
        if type(value) is Suspend:
            return settle_suspend(self, cn, node_run, value)
        if type(value) is Output:
            port, output = value.port, value.value
            ports = cn.spec.output_ports
            if ports is not None and port not in ports and port != "error":
                message = (
                    f"completed on port {port!r}, which {cn.spec.type!r} does not declare "
                    f"({', '.join(ports)})"
                )
                return self.settle_failure(
                    cn, node_run, prana_error(ErrorCode.INVALID_PORT, message, key, "InvalidPort")
                )
        else:
            port, output = "main", value
        size = json_size(output)
        if size < 0:
            message = f"node {key!r} output is not JSON-native at {json_problem(output)}"
            return self.settle_failure(
                cn, node_run, prana_error(ErrorCode.OUTPUT_NOT_JSON, message, key, "OutputNotJSON")
            )
        updates = ctx._state_updates
        if updates:
            updated = json_size(updates)  # its entries count, not the dict they came in
            if updated < 0:
                message = f"node {key!r} state update is not JSON-native at {json_problem(updates)}"
                return self.settle_failure(
                    cn,
                    node_run,
                    prana_error(ErrorCode.OUTPUT_NOT_JSON, message, key, "StateNotJSON"),
                )
            reserved = reserved_state_key(updates, key, cn.node.type)
            if reserved is not None:
                message = (
                    f"node {key!r} state update writes {reserved!r}: keys starting with "
                    "'__for_each__:', '__webhook__:' or '__delivered__:' are reserved for "
                    "prana's own bookkeeping; use another key (copy a reply under a key of "
                    "your own)"
                )
                error = prana_error(ErrorCode.NON_RETRYABLE, message, key, "ReservedStateKey")
                return self.settle_failure(cn, node_run, error)
            size += updated - CONTAINER_SIZE
        if self.kept + size > self.limits.max_record_size or size > self.limits.max_value_size:
            what = "its output" + (" and state update" if updates else "")
            problem = size_problem(key, what, size, self.kept, self.limits)
            if problem is not None:
                return self.settle_failure(cn, node_run, problem)
        if retryable and cn.checks_results:
            view = AttemptView(
                attempt=node_run.attempt_number,
                error=None,
                output=output,
                elapsed_seconds=self.elapsed(node_run),
                execution_id=self.id,
                node_key=key,
            )
            if rejects_result(cn.policies, view):
                error = prana_error(
                    ErrorCode.RESULT_REJECTED,
                    f"node {key!r} output matched retry_on_result",
                    key,
                    "ResultRejected",
                )
                return self.settle_failure(cn, node_run, error, output=output)
        shown = port
        if self.issued:
            output = redact_tokens(output, self.issued)
            shown = redact_tokens(port, self.issued)
            if updates:
                updates = redact_tokens(updates, self.issued)
        if updates:
            self.state.update(updates)
        self.kept += size
        self.complete_node(cn, node_run, output, port, shown_port=shown)
        return None

    def keep(self, key: str, what: str, size: int) -> ErrorInfo | None:
        """Count ``size`` more kept by node ``key``, or why it may not be kept (``Limits``)."""
        problem = size_problem(key, what, size, self.kept, self.limits)
        if problem is None:
            self.kept += size
        return problem

    def complete_node(
        self,
        cn: CompiledNode,
        node_run: NodeRun,
        output: Any,
        port: str,
        *,
        error: ErrorInfo | None = None,
        shown_port: str | None = None,
    ) -> None:
        """Record the node run completed on ``port`` (kept as ``shown_port``, the name with
        any secret redacted, when given) and deliver its output there."""
        self.now_hint = now = self.clock()
        outcome = ATTEMPT_COMPLETED if error is None else ATTEMPT_FAILED
        shown = port if shown_port is None else shown_port
        node_run.settle(self.runs, outcome, now, NODE_COMPLETED, now, output, shown, error)
        key = cn.key
        self.consume_activation(key)
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

    def elapsed(self, node_run: NodeRun) -> float:
        return (self.clock() - node_run.budget_start).total_seconds()

    def pause(self, key: str, suspension: Suspend, given: Any = None) -> None:
        """Node ``key`` pauses: hold it and go on with what else is ready (the outcome, when
        the execution suspends, carries ``given`` data if there is any)."""
        self.paused.append((key, suspension, given))
        self.held.add(key)

    def suspend_execution(self) -> Suspend[Any, WorkflowExecution]:
        """Freeze the execution suspended on its pauses; the outcome describes the one due
        first (with the data it was given, if any)."""
        paused = self.paused
        key, suspension, given = paused[0] if len(paused) == 1 else min(paused, key=_held_order)
        check_transition(self.status, EXEC_SUSPENDED)
        self.status = EXEC_SUSPENDED
        execution = self.frozen(EXEC_SUSPENDED, self.state, key, suspension, None, None)
        if self.observers:
            self.event(EventType.EXECUTION_SUSPENDED, node_key=key, kind=suspension.kind)
        data = suspension.data if given is None else given
        return new_suspend(suspension.kind, data, execution)

    settle_failure = settle_failure
    """An attempt failed: retry it (a suspension), or let ``on_error`` decide
    (``prana._failure``)."""

    def fail_execution(self, error: ErrorInfo) -> Failed:
        if self.paused:  # a stop closes every other pause
            now = self.clock()
            for key, _, _ in self.paused:
                self.runs[key] = (*self.runs[key][:-1], close_paused(key, self.runs[key][-1], now))
            self.paused = []
        execution = self.freeze(ExecutionStatus.FAILED, error=error)
        if self.observers:
            self.event(EventType.EXECUTION_FAILED, node_key=error.node_key, error=error)
        return Failed(execution=execution, error=error)

    def resume(
        self, execution: WorkflowExecution, resume_data: Any
    ) -> Generator[Call, Result, Outcome]:
        """Continue the pauses of ``execution`` chosen to resume (``resuming``, the first
        given ``resume_data``), then the rest of the workflow."""
        check_transition(self.status, EXEC_RUNNING)
        self.status = EXEC_RUNNING
        return self.drive(self.resume_pause(self.resuming.pop(0), resume_data))

    def unhold(self, key: str) -> NodeRun:
        """Take node ``key`` out of the pauses held: its node run, running again."""
        self.held.discard(key)
        paused = self.paused
        if len(paused) == 1:
            paused.clear()
        else:
            self.paused = [entry for entry in paused if entry[0] != key]
        return self.suspended_node_run(key)

    def resume_pause(self, target: tuple[str, Suspend], resume_data: Any) -> Step:
        """Continue one paused node run: its retry's next attempt, or its ``resume``."""
        key, suspension = target
        cn = self.graph.nodes[key]
        if self.observers:
            self.event(EventType.EXECUTION_RESUMED, node_key=key, kind=suspension.kind)
        node_run = self.unhold(key)
        now = self.now_hint or self.clock()
        self.now_hint = None
        if suspension.kind == "retry":
            data: RetryData = suspension.data
            if data.redrive:
                node_run.attempt_redrive = True
                if data.attempt_number == 1:  # reset_attempts: the budget starts over too
                    node_run.budget_start = now
            step = self.attempt(cn, node_run, data.attempt_number, data.resume_at, now)
        else:
            if suspension.kind == "webhook":
                self.note_delivery(key, suspension.data, resume_data)
            step = self.resume_node(cn, node_run, suspension, resume_data)
        return step

    def note_delivery(self, key: str, data: Any, resume_data: Any) -> None:
        """Keep what identifies this delivery (``prana._hooks.delivered`` checks a repeat)."""
        stored = getattr(data, "token_digest", None)
        if isinstance(stored, str):
            digest = delivery_digest(stored, resume_data)
            if digest is not None:
                self.state[DELIVERED_PREFIX + key] = digest

    def suspended_node_run(self, key: str) -> NodeRun:
        """The suspended node's run, running again (its record is replaced when it settles).

        Its ``suspended -> running`` edge was checked on entry (``_entry._prepare_resume``).
        """
        return NodeRun.resumed(self.runs[key][-1])

    def expire(self, execution: WorkflowExecution) -> Generator[Call, Result, Outcome]:
        """Fail the paused webhook node with ``WebhookTimeout``; ``on_error`` decides the rest."""
        key, suspension = self.resuming.pop(0)
        check_transition(self.status, ExecutionStatus.RUNNING)
        self.status = ExecutionStatus.RUNNING
        if self.observers:
            self.event(EventType.EXECUTION_RESUMED, node_key=key, kind=suspension.kind)
        self.now_hint = None
        node_run = self.unhold(key)
        node_run.reopen_paused_attempt()
        data = suspension.data
        expires = (
            data.expires_at.isoformat()
            if isinstance(data, WebhookData) and data.expires_at
            else "its deadline"
        )
        error = ErrorInfo(
            code=ErrorCode.WEBHOOK_TIMEOUT.value,
            type=WebhookTimeout.__name__,
            module=WebhookTimeout.__module__,
            message=f"webhook wait of node {key!r} expired at {expires} before any delivery",
            node_key=key,
        )
        return self.drive(self.settle_failure(self.graph.nodes[key], node_run, error))

    def resume_node(
        self, cn: CompiledNode, node_run: NodeRun, suspension: Suspend, resume_data: Any
    ) -> Step:
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
        ctx = ActionContext(
            input_data,
            self.id,
            key,
            number,
            node_run.run_index,
            self.state,
            self.clock(),
            self.env,
            self.variables,
            self.workflow_id,
        )
        resume_fn = cn.spec.resume
        if resume_fn is None:
            value: Any = input_data.get("main") if suspension.kind == "timer" else resume_data
        else:
            params, problem = prepare_params(self, cn, node_run, ctx, count=False)
            if problem is not None:
                return self.settle_failure(cn, node_run, problem)
            return (resume_fn, (params, ctx, resume_data), cn.timeout, (cn, node_run, ctx, True))
        return self.settle_value(cn, node_run, ctx, value, from_resume=True)
