"""The model: workflow definitions, execution records and outcomes, as frozen attrs classes.

Definitions (``Workflow``, ``Node``, ``Connection``, ``NodeSettings``) are plain data that
round-trip through JSON. Execution records (``WorkflowExecution``, ``NodeExecution``,
``AttemptRecord``) are what the executor returns; it never changes one it was given.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, overload

import attrs

from prana._codegen import generate
from prana._errors import InvalidSettingsError

if TYPE_CHECKING:
    from typing import TypeAlias

    from typing_extensions import TypeVar

    from prana._policy import RetryPolicy

    DataT = TypeVar("DataT", covariant=True, default=Any)
    ExecutionT = TypeVar(
        "ExecutionT",
        bound="WorkflowExecution | None",
        covariant=True,
        default="WorkflowExecution | None",
    )
else:
    # Type-variable defaults exist for type checkers only (typing_extensions is not imported
    # at run time: it costs import time, and nothing at run time reads a default).
    from typing import TypeVar

    DataT = TypeVar("DataT", covariant=True)
    ExecutionT = TypeVar("ExecutionT", covariant=True)

JSON = Any
"""A JSON-native value: str-keyed dicts, lists, str, int, float, bool or None."""

if TYPE_CHECKING:
    JSONValue: TypeAlias = (
        "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
    )
    """A JSON-native value, precisely: narrow it (``isinstance(v, dict)``) before indexing."""
    ErrorDetails: TypeAlias = "Mapping[str, JSONValue] | None"
else:
    # The precise types are for type checkers; at run time cattrs passes the values through
    # as they were stored.
    JSONValue = Any
    ErrorDetails = Any

OnError = Literal["stop_workflow", "continue", "continue_error_output"]
ON_ERROR_MODES: tuple[str, ...] = ("stop_workflow", "continue", "continue_error_output")


class ExecutionStatus(enum.Enum):
    """Where a workflow execution stands.

    ``pending`` until first run, ``suspended`` while it waits (a retry, timer, webhook or
    sub-workflow), then ``completed``, ``failed`` or ``cancelled``; ``running`` only while
    a call runs it (a store sees it in a checkpoint). A ``failed`` one can be redriven.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class NodeStatus(enum.Enum):
    """Where one node run stands. ``suspended`` covers both a pause and a retry wait."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptOutcome(enum.Enum):
    """How one attempt ended."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SUSPENDED = "suspended"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    """The process running it stopped (crash, kill) before it ended; the attempt is re-run."""


# ``due_at`` is read several times per step: a member read off its class goes through the
# enum's slow attribute hook on Python 3.11 (see ``prana._state.EXEC_RUNNING``).
_SUSPENDED = ExecutionStatus.SUSPENDED
_RUNNING = ExecutionStatus.RUNNING


def _settings_error(field: str, fix: str) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
        raise InvalidSettingsError(f"NodeSettings.{field}={value!r}: {fix}")

    return check


def _check_max_retries(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10:
        _settings_error("max_retries", "use a whole number from 1 to 10")(_inst, _attr, value)


def _check_retry_delay_ms(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 60_000:
        _settings_error("retry_delay_ms", "use whole milliseconds from 0 to 60000")(
            _inst, _attr, value
        )


def _check_on_error(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
    if value not in ON_ERROR_MODES:
        _settings_error("on_error", f"use one of {', '.join(ON_ERROR_MODES)}")(_inst, _attr, value)


def _check_bool(name: str) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, bool):
            _settings_error(name, "use True or False")(_inst, _attr, value)

    return check


def _convert_retry(value: Any) -> Any:
    from prana._dialects import read_policies

    return read_policies(value, field="NodeSettings.retry")


def _convert_timeout(value: Any) -> float | None:
    from prana._durations import optional_seconds

    return optional_seconds(value, field="NodeSettings.timeout")


@attrs.frozen(kw_only=True)
class NodeSettings:
    """How a node retries and what happens when it finally fails.

    ``retry_on_failed`` / ``max_retries`` / ``retry_delay_ms`` are Prana's simple form
    (constant delay, every error retried). ``retry`` takes a full ``RetryPolicy``, a list of
    them matched in order by error type, or Rappel's bracket text; it wins when given.
    ``timeout`` is a per-attempt timeout in seconds (a policy's own ``timeout`` wins).
    """

    retry_on_failed: bool = attrs.field(default=False, validator=_check_bool("retry_on_failed"))
    max_retries: int = attrs.field(default=1, validator=_check_max_retries)
    retry_delay_ms: int = attrs.field(default=1000, validator=_check_retry_delay_ms)
    on_error: OnError = attrs.field(default="stop_workflow", validator=_check_on_error)
    retry: tuple[RetryPolicy, ...] | None = attrs.field(default=None, converter=_convert_retry)
    timeout: float | None = attrs.field(default=None, converter=_convert_timeout)


MAX_NAME_LENGTH: Final = 1000
"""The longest workflow id, node key, node type or port name: each is copied into ids and
records (a sub-workflow's id holds its parent's and the node key), so a long one multiplies."""


def _nonempty_str(owner: str, field: str) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise InvalidSettingsError(f"{owner}.{field}={value!r}: use a non-empty string")
        if len(value) > MAX_NAME_LENGTH:
            raise InvalidSettingsError(
                f"{owner}.{field}={value[:40]!r}... is {len(value):,} characters long; use at "
                f"most {MAX_NAME_LENGTH:,}"
            )

    return check


def _mapping(owner: str, field: str) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, Mapping):
            raise InvalidSettingsError(
                f"{owner}.{field}: expected a mapping (a dict), got {type(value).__name__}"
            )

    return check


def _settings(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, NodeSettings):
        raise InvalidSettingsError(
            f"Node.settings: expected NodeSettings(...), got {type(value).__name__}"
        )


def _text(owner: str, field: str) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str):
            raise InvalidSettingsError(
                f'{owner}.{field}={value!r}: use a string (or leave it out for "")'
            )

    return check


@attrs.frozen(kw_only=True)
class Node:
    """One step of a workflow: ``type`` names an action in a ``Registry``."""

    key: str = attrs.field(validator=_nonempty_str("Node", "key"))
    type: str = attrs.field(validator=_nonempty_str("Node", "type"))
    params: Mapping[str, Any] = attrs.field(factory=dict, validator=_mapping("Node", "params"))
    settings: NodeSettings = attrs.field(factory=NodeSettings, validator=_settings)
    name: str = attrs.field(default="", validator=_text("Node", "name"))


@attrs.frozen(kw_only=True)
class Connection:
    """An edge: ``from_node`` completing on ``from_port`` delivers to ``to_node``'s ``to_port``."""

    from_node: str = attrs.field(validator=_nonempty_str("Connection", "from_node"))
    to_node: str = attrs.field(validator=_nonempty_str("Connection", "to_node"))
    from_port: str = attrs.field(default="main", validator=_nonempty_str("Connection", "from_port"))
    to_port: str = attrs.field(default="main", validator=_nonempty_str("Connection", "to_port"))


def _convert_retry_defaults(value: Any) -> Mapping[str, tuple[RetryPolicy, ...]]:
    from prana._dialects import read_policies

    if not isinstance(value, Mapping):
        raise InvalidSettingsError(
            "Workflow.retry_defaults: use a mapping of node type (or '*') to a RetryPolicy"
        )
    out: dict[str, tuple[RetryPolicy, ...]] = {}
    for key, policy in value.items():
        coerced = read_policies(policy, field=f"Workflow.retry_defaults[{key!r}]")
        if coerced is not None:
            out[key] = coerced
    return out


MAX_WORKFLOW_VERSION: Final = 2**31 - 1
"""The largest workflow version: what every store's version column holds (PostgreSQL's
``integer``); a larger one could not be saved."""


def _check_positive_int(owner: str, field: str, most: int | None = None) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidSettingsError(f"{owner}.{field}={value!r}: use a whole number >= 1")
        if most is not None and value > most:
            raise InvalidSettingsError(
                f"{owner}.{field}={value!r}: use a whole number from 1 to {most}"
            )

    return check


def _node_tuple(nodes: Iterable[Node]) -> tuple[Node, ...]:
    if isinstance(nodes, str | bytes | Mapping) or not isinstance(nodes, Iterable):
        raise InvalidSettingsError(
            f"Workflow.nodes: expected a list of Node, got {type(nodes).__name__}"
        )
    return tuple(nodes)


def _connection_tuple(connections: Iterable[Connection]) -> tuple[Connection, ...]:
    if isinstance(connections, str | bytes | Mapping) or not isinstance(connections, Iterable):
        raise InvalidSettingsError(
            f"Workflow.connections: expected a list of Connection, got {type(connections).__name__}"
        )
    return tuple(connections)


@attrs.frozen(kw_only=True)
class Workflow:
    """A workflow definition: nodes joined by connections, plus defaults.

    ``retry_defaults`` maps a node type, or ``"*"`` for every type, to the policy used
    when a node has none of its own. ``max_iterations`` caps how often one node may run
    in one execution, so a runaway loop fails with a clear error instead of spinning.
    """

    id: str = attrs.field(validator=_nonempty_str("Workflow", "id"))
    nodes: tuple[Node, ...] = attrs.field(converter=_node_tuple)
    connections: tuple[Connection, ...] = attrs.field(converter=_connection_tuple)
    name: str = attrs.field(default="", validator=_text("Workflow", "name"))
    version: int = attrs.field(
        default=1, validator=_check_positive_int("Workflow", "version", MAX_WORKFLOW_VERSION)
    )
    variables: Mapping[str, Any] = attrs.field(
        factory=dict, validator=_mapping("Workflow", "variables")
    )
    retry_defaults: Mapping[str, tuple[RetryPolicy, ...]] = attrs.field(
        factory=dict, converter=_convert_retry_defaults
    )
    max_iterations: int = attrs.field(
        default=1000, validator=_check_positive_int("Workflow", "max_iterations")
    )


# --- hot records -------------------------------------------------------------------------
#
# The records marked "hot record" below (``HOT_RECORDS``) are built by the hundred in every
# run and read and written as often by the stores, so they have fast paths: positional
# constructors (``new_node_execution``, ...) and generated serialization hooks that never call
# ``__init__``. These are the rules, each checked by ``tests/test_hot_records.py``
# (``hot_record_problems`` names a break of rules 2-4):
#
# 1. Field order is the fast constructors' argument order (``attrs.fields`` order). Never
#    reorder; add a field at the end, with a default (a value, or a factory that does not
#    take self): the fast constructors give it as ``__init__`` does, so their callers need
#    not change (for a node run or attempt, add it at the end of its stored row layout,
#    ``prana._compact``, too).
# 2. Slotted, with ``weakref_slot=False``: a ``__weakref__`` slot after the fields makes
#    CPython refuse the class swap ``slot_twin`` relies on, and the fast paths quietly fall
#    back to slower ones.
# 3. No validators, converters, ``__attrs_pre_init__``/``__attrs_post_init__`` or
#    ``init=False`` fields (nor checks in a hand-written ``__init__``, as ``Suspend`` has):
#    the fast paths skip ``__init__``. Values are checked where they come in: the executor
#    checks what it builds, ``loads`` reads strictly.
# 4. ``NodeExecution`` remembers its stored row in a hidden slot (``StoredRow``), set only to
#    a row that reads back as exactly that record; nothing else may set it.


class ErrorCode(str, enum.Enum):
    """What kind of failure an ``ErrorInfo`` records: the values its ``code`` takes.

    A string enum, so ``info.code == ErrorCode.TIMEOUT`` reads either form; records hold
    the plain string value (``ErrorCode.TIMEOUT.value``), which is what JSON stores.
    """

    ACTION_ERROR = "action_error"
    """The action raised."""
    TIMEOUT = "timeout"
    """The attempt ran past its ``timeout`` (``AttemptTimeout``)."""
    NON_RETRYABLE = "non_retryable"
    """The action raised ``NonRetryable``."""
    RESULT_REJECTED = "result_rejected"
    """The action returned, but ``retry_on_result`` turned the output into a failure."""
    TEMPLATE_ERROR = "template_error"
    """A param's template failed to render."""
    PARAMS_INVALID = "params_invalid"
    """The rendered params do not fit the action's params schema."""
    OUTPUT_NOT_JSON = "output_not_json"
    """The output (or a state update) is not JSON-native."""
    INVALID_PORT = "invalid_port"
    """The action completed on a port it does not declare."""
    INVALID_SUSPEND = "invalid_suspend"
    """The action returned a malformed ``Suspend``."""
    RESUME_ERROR = "resume_error"
    """The action's ``resume`` callback raised."""
    SUB_WORKFLOW_FAILED = "sub_workflow_failed"
    """The child workflow failed or timed out."""
    WEBHOOK_TIMEOUT = "webhook_timeout"
    """A webhook wait expired before any delivery."""
    ITERATION_LIMIT = "iteration_limit"
    """A node would run past the workflow's ``max_iterations``."""
    CANCELLED = "cancelled"
    """The execution was cancelled."""
    INTERRUPTED = "interrupted"
    """The attempt was interrupted too many times in a row (its process stopped each time:
    a poison execution), so it is not run again (``recover_execution``)."""
    LIMIT_EXCEEDED = "limit_exceeded"
    """The node would pass one of the application's ``Limits``: node runs in the execution,
    the size of its params or output, or of everything the execution keeps."""


NEVER_RETRY_CODES: frozenset[str] = frozenset(
    code.value
    for code in (
        ErrorCode.NON_RETRYABLE,
        ErrorCode.TEMPLATE_ERROR,
        ErrorCode.PARAMS_INVALID,
        ErrorCode.OUTPUT_NOT_JSON,
        ErrorCode.INVALID_PORT,
        ErrorCode.INVALID_SUSPEND,
        ErrorCode.RESUME_ERROR,
        ErrorCode.SUB_WORKFLOW_FAILED,
        ErrorCode.WEBHOOK_TIMEOUT,
        ErrorCode.ITERATION_LIMIT,
        ErrorCode.CANCELLED,
        ErrorCode.INTERRUPTED,
        ErrorCode.LIMIT_EXCEEDED,
    )
)
"""``ErrorInfo.code`` values that never retry, whatever the policy says (docs: Error codes).

Every other code (``action_error``, ``timeout``, ``result_rejected``) is the policy's to
decide. The engine and the retry decision both read this set; it holds the string values
(an enum member hashes by its name, so a set of members would miss a plain string).
"""


# Hot record: the rules above ErrorCode apply.
@attrs.frozen(kw_only=True, weakref_slot=False)
class ErrorInfo:
    """A failure as plain data: never a live exception, so it survives a JSON round-trip.

    ``code`` says what kind of failure it is, one of ``ErrorCode``'s values
    (``action_error``, ``timeout``, ``template_error``, ...); ``type`` and ``module`` name
    the exception class. ``details`` is a JSON object or ``None``: what the action's
    exception carried in its ``details`` attribute (e.g. an HTTP error's ``status``; a
    value that is not a JSON object is kept under ``"details"``, as its ``repr`` when not
    JSON-native), the HTTP status a client's exception carries (``status_code``: from
    ``exc.status_code``, ``exc.response.status_code`` or an int ``exc.status``), plus what
    prana adds (``retry_after_ignored``, ...). ``traceback`` is where the exception was
    raised, as text in Python's own layout (each frame's file, line and function, no
    source; the chain of causes), bounded and redacted as the message is; ``None`` for a
    failure prana found itself. It is not part of equality: where an exception was raised
    depends on the driver and the caller's stack, not on what happened (as with times, the
    same outcomes give equal records).
    """

    code: str
    type: str
    module: str
    message: str
    details: ErrorDetails = None
    node_key: str | None = None
    traceback: str | None = attrs.field(default=None, eq=False)

    def as_output(self) -> dict[str, Any]:
        """The error-shaped output a node completes with under ``continue`` modes."""
        return {
            "code": self.code,
            "message": self.message,
            "details": {
                "type": self.type,
                "module": self.module,
                "message": self.message,
                "details": self.details,
            },
        }


# Hot record: the rules above ErrorCode apply.
@attrs.frozen(kw_only=True, weakref_slot=False)
class AttemptRecord:
    """One attempt of one node run: the audit trail keeps every one of them.

    ``due_at`` is when a retry attempt was scheduled to start, so ``started_at - due_at``
    is its lateness; ``retry_delay_ms`` is the delay chosen after this attempt failed;
    ``redrive`` marks the attempt a redrive started (``redrive_execution``), not the retry
    policy. A redrive with ``reset_attempts`` starts numbering again at 1.
    """

    number: int
    started_at: datetime
    ended_at: datetime | None = None
    outcome: AttemptOutcome = AttemptOutcome.RUNNING
    error: ErrorInfo | None = None
    due_at: datetime | None = None
    retry_delay_ms: int | None = None
    redrive: bool = False


class StoredRow:
    """Base of ``NodeExecution``: one hidden slot, ``_row``, that remembers its stored row.

    Rule: ``_row`` is set only to a row that reads back as exactly this record: the row
    ``prana.dumps`` wrote for it, or the one ``prana.loads`` read it from (the stored run
    rows, ``prana._compact``). ``dumps`` then writes that row again instead of
    encoding the record anew, so a record kept from one save to the next (the engine keeps
    every run it does not touch) costs nothing to write again. It is not a field: equality,
    ``repr``, pickling, copies and ``attrs.evolve`` never see or carry it, and a record
    built any other way has no ``_row``, or ``None`` (``getattr(run, "_row", None)`` is
    ``None``): the engine's fast constructor sets it to ``None``, so that the read is no
    AttributeError raised and discarded at every ``dumps`` of a new run.
    """

    __slots__ = ("_row",)
    _row: Any


# Hot record: the rules above ErrorCode apply; its stored row is remembered (``StoredRow``).
@attrs.frozen(kw_only=True, weakref_slot=False)
class NodeExecution(StoredRow):
    """One run of one node (a loop runs a node several times, each with its ``run_index``)."""

    node_key: str
    status: NodeStatus
    execution_index: int
    run_index: int
    started_at: datetime
    completed_at: datetime | None = None
    params: Any = None
    output: Any = None
    output_port: str | None = None
    error: ErrorInfo | None = None
    attempts: tuple[AttemptRecord, ...] = ()


# Hot record: the rules above ErrorCode apply.
@attrs.frozen(kw_only=True, weakref_slot=False)
class Activation:
    """A node waiting to run: which source run feeds each of its input ports.

    The input itself is rebuilt from those runs' records when the node runs, never cached,
    so a retry sees the execution state as it is at resume time.
    """

    node_key: str
    seq: int
    sources: Mapping[str, tuple[Any, ...]] = attrs.field(factory=dict)
    """Per input port, ``(source node, source port, execution_index of the delivering run)``."""


@attrs.frozen(kw_only=True)
class ParentRef:
    """Where a sub-workflow execution reports back: the parent execution and its node."""

    execution_id: str
    node_key: str
    mode: str = "sync"


# Hot record: the rules above ErrorCode apply.
@attrs.frozen(kw_only=True, weakref_slot=False)
class RetryData:
    """What a ``Suspend(kind="retry")`` carries.

    ``attempt_number`` is the attempt that runs on resume (1-based), ``max_attempts`` the
    total allowed (``None``: unlimited within a time budget), ``resume_at`` the due time;
    ``redrive`` says a redrive, not the retry policy, asked for the attempt (its record is
    marked so in the ledger).
    """

    retry_delay_ms: int
    attempt_number: int
    max_attempts: int | None
    original_error: ErrorInfo
    resume_at: datetime
    redrive: bool = False


# Hot record: the rules above ErrorCode apply.
@attrs.frozen(kw_only=True, weakref_slot=False)
class TimerData:
    """What a ``Suspend(kind="timer")`` carries: when to resume."""

    resume_at: datetime


@attrs.frozen(kw_only=True)
class WebhookData:
    """What a ``Suspend(kind="webhook")`` carries: when the wait expires (``None``: never).

    The executor adds the wait's resume token: ``token_digest`` is what the record keeps;
    ``token`` (and ``path``, ``/hooks/<token>``) is set only on the ``Suspend`` outcome the
    executor returns, in memory: it is never stored, compared or shown in ``repr``. Both
    are left out of ``==``: they are random per suspension, not part of what the wait means
    (so an interrupted run compares equal to an uninterrupted one).
    """

    expires_at: datetime | None = None
    token_digest: str | None = attrs.field(default=None, eq=False)
    token: str | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def path(self) -> str | None:
        """The relative resume path ``/hooks/<token>``, where the token is known."""
        return None if self.token is None else f"/hooks/{self.token}"


@attrs.frozen(kw_only=True)
class SubWorkflowData:
    """What a ``Suspend(kind="sub_workflow")`` carries: the child to run and how to wait.

    ``expires_at`` (from ``timeout_ms``) is when the parent stops waiting: the shell then
    resumes it with ``{"status": "timeout", ...}`` and cancels the child.
    """

    workflow_id: str
    input: Any = None
    mode: Literal["sync", "async", "fire_and_forget"] = "sync"
    version: int | None = None
    timeout_ms: int | None = None
    child_execution_id: str | None = None
    expires_at: datetime | None = None


if TYPE_CHECKING:
    SuspendData: TypeAlias = RetryData | TimerData | WebhookData | SubWorkflowData | JSONValue
    """What ``Suspend.data`` holds: a built-in kind's record, or an action's own JSON data.

    Narrow it by type (``isinstance(outcome.data, RetryData)`` or ``match``): mypy and
    pyright then check the fields you read (no ``Any`` here, so a typo is an error).
    """
else:
    SuspendData = RetryData | TimerData | WebhookData | SubWorkflowData | Any
BUILTIN_SUSPEND_DATA: dict[str, type[Any]] = {
    "retry": RetryData,
    "timer": TimerData,
    "webhook": WebhookData,
    "sub_workflow": SubWorkflowData,
}


_DELIVERED_PREFIX = "__delivered__:"  # prana._hooks.DELIVERED_PREFIX (imports nothing here)


def _state_compared(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """The state as equality sees it: without the digests of webhook deliveries, which
    (as ``WebhookData.token_digest``) differ between runs by their random tokens alone."""
    for key in state:
        if isinstance(key, str) and key.startswith(_DELIVERED_PREFIX):
            return {k: v for k, v in state.items() if not str(k).startswith(_DELIVERED_PREFIX)}
    return state


def due_of(data: Any) -> datetime | None:
    """When a pause with ``data`` comes due: a retry's or timer's ``resume_at``, a webhook's
    ``expires_at``; ``None`` for what only data resumes."""
    cls = type(data)
    if cls is RetryData or cls is TimerData:
        return data.resume_at  # type: ignore[no-any-return]
    if cls is WebhookData:
        return data.expires_at  # type: ignore[no-any-return]
    return None


@attrs.frozen(kw_only=True)
class Pause:
    """One pending pause of a suspended execution: a node run waiting for its time or its
    data. ``suspension`` is what it waits for (kind and typed data, as ``Suspend``)."""

    node_key: str
    run_index: int
    suspension: Suspend

    @property
    def kind(self) -> str:
        """``retry``, ``timer``, ``webhook``, ``sub_workflow`` or an action's own kind."""
        return self.suspension.kind

    @property
    def data(self) -> Any:
        """The suspension's data (``RetryData``, ``TimerData``, ...)."""
        return self.suspension.data

    @property
    def due_at(self) -> datetime | None:
        """When it comes due by itself (``due_of``); ``None``: only data resumes it."""
        return due_of(self.suspension.data)

    def order(self) -> tuple[bool, datetime | None, str]:
        """Its place among pauses: by due time (none last), then node key."""
        due = self.due_at
        return (due is None, due, self.node_key)


# Hot record: the rules above ErrorCode apply.
@attrs.frozen(kw_only=True, weakref_slot=False)
class WorkflowExecution:
    """The whole state of one execution: enough to resume it in another process.

    ``node_executions`` maps node key to its runs, oldest first; a node on a branch that
    was not taken has no entry. In an execution read by ``loads`` it is a read-only
    mapping that builds a node's runs when first read (equal to the ``dict`` of runs).
    ``pending`` lists nodes activated but not yet run.
    ``trace_context`` is the trace the execution belongs to, as W3C Trace Context headers
    (``traceparent``, and ``tracestate`` when there is one): given at the start
    (``execute_workflow(trace_context=...)``; the shell's ``scheduling.otel`` fills it),
    kept unchanged through every later step, never read by the core.
    """

    id: str
    workflow_id: str
    workflow_version: int
    status: ExecutionStatus
    input: Any = None
    node_executions: Mapping[str, tuple[NodeExecution, ...]] = attrs.field(factory=dict)
    state: Mapping[str, Any] = attrs.field(factory=dict, eq=_state_compared)
    pending: tuple[Activation, ...] = ()
    next_index: int = 0
    suspended_node: str | None = None
    suspension: Suspend | None = None
    output: Any = None
    error: ErrorInfo | None = None
    parent: ParentRef | None = None
    started_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    trace_context: Mapping[str, str] | None = None
    lease_expires_at: datetime | None = None
    """For a ``running`` execution in a store: until when the process running it owns it.

    The shell sets it on the record it saves before each action call (a checkpoint); past
    it, the process is presumed dead and another runner takes the execution up again
    (``recover_execution``). The core never sets it."""
    kept_size: int | None = attrs.field(default=None, eq=False)
    """How much data the execution keeps (its input, every node run's params and output,
    state updates), as ``prana.Limits`` counts it; the executor adds to it as it goes and
    holds it to ``Limits.max_record_size``. ``None`` when not counted yet (a record built
    by hand): counted when it is resumed. Not part of equality: it counts recorded
    tracebacks, whose length depends on the caller's stack."""
    other_pauses: tuple[Pause, ...] = ()
    """The pending pauses besides ``suspended_node``'s, which comes due first (section 9 of
    the design: a pause holds only its own branch); in a ``running`` checkpoint, every
    pause so far. Read them all, in order, as ``pauses``. Left out of the stored record
    when empty, so a record with one pause reads and writes as before."""

    resuming: tuple[str, ...] = ()
    """In a ``running`` checkpoint: the paused nodes this step still has to resume (a
    resume continues every pause due, one after another), so a recovery continues them
    in the same order. Left out of the stored record when empty."""

    @property
    def pauses(self) -> tuple[Pause, ...]:
        """Every pending pause, the one due first first (by due time, then node key); none
        once the execution has ended."""
        if self.status is not _SUSPENDED and self.status is not _RUNNING:
            return ()
        key, suspension = self.suspended_node, self.suspension
        if key is None or suspension is None:
            return self.other_pauses
        runs = self.node_executions.get(key)
        run_index = runs[-1].run_index if runs else 0
        first = Pause(node_key=key, run_index=run_index, suspension=suspension)
        return (first, *self.other_pauses)

    @property
    def due_at(self) -> datetime | None:
        """When this execution needs an alarm: a retry's or timer's due time, a webhook's
        expiry (the earliest of its pauses: the first), or a running execution's lease
        expiry (when it is taken up if still running).
        """
        if self.status is not _SUSPENDED or self.suspension is None:
            if self.status is _RUNNING:
                return self.lease_expires_at
            return None
        return due_of(self.suspension.data)

    def node(self, key: str) -> NodeExecution | None:
        """The latest run of node ``key``, or ``None`` if it never ran."""
        runs = self.node_executions.get(key)
        return runs[-1] if runs else None

    def ordered_node_executions(self) -> list[NodeExecution]:
        """Every node run in the order they started (by ``execution_index``)."""
        runs = [run for group in self.node_executions.values() for run in group]
        runs.sort(key=lambda r: r.execution_index)
        return runs


@attrs.frozen(init=False)
class Output:
    """An action's result on a named port: ``Output(value, port="true")``."""

    value: Any
    port: str = "main"

    def __init__(self, value: Any, port: str = "main") -> None:
        self.__attrs_init__(value=value, port=port)


# Hot record: the rules above ErrorCode apply (``new_suspend`` skips this __init__'s check).
@attrs.frozen(init=False, weakref_slot=False)
class Suspend(Generic[DataT, ExecutionT]):
    """A pause: returned by an action (``execution`` unset) or by the executor (filled in).

    For type checkers it is generic in its data and its execution: an action's
    ``Suspend("timer", TimerData(...))`` is a ``Suspend[TimerData, None]``, and the
    executor's outcome is a ``Suspend[SuspendData, WorkflowExecution]``, whose
    ``execution`` is never ``None``. At run time it is one plain class.
    """

    # A frozen record may be covariant in its fields; mypy's attrs plugin flags the
    # generated __attrs_init__ taking them, which is private and called with checked values.
    kind: str
    data: DataT  # type: ignore[misc]
    execution: ExecutionT  # type: ignore[misc]

    if TYPE_CHECKING:

        @overload
        def __init__(self: Suspend[None, None], kind: str) -> None: ...

        @overload
        def __init__(self: Suspend[DataT, None], kind: str, data: DataT) -> None: ...

        @overload
        def __init__(self, kind: str, data: DataT, execution: ExecutionT) -> None: ...

    def __init__(self, kind: str, data: Any = None, execution: Any = None) -> None:
        if not isinstance(kind, str) or not kind:
            raise InvalidSettingsError(f"Suspend.kind={kind!r}: use a non-empty string")
        self.__attrs_init__(kind=kind, data=data, execution=execution)


# Hot record: the rules above ErrorCode apply.
@attrs.frozen(kw_only=True, weakref_slot=False)
class Completed:
    """The execution ran to the end; ``output`` is the output of the last node run."""

    execution: WorkflowExecution
    output: Any = None


@attrs.frozen(kw_only=True)
class Failed:
    """The execution failed; ``error`` says which node and why."""

    execution: WorkflowExecution
    error: ErrorInfo


if TYPE_CHECKING:
    Outcome: TypeAlias = Completed | Suspend[SuspendData, WorkflowExecution] | Failed
    """What the executor returns: exactly one of the three, each with its execution."""
else:
    Outcome = Completed | Suspend | Failed


def slot_twin(cls: type[Any]) -> type[Any] | None:
    """A plain class with ``cls``'s slots whose instances may become ``cls`` instances, or None.

    ``obj.__class__ = cls`` is allowed only between classes of the same memory layout; CPython
    refuses it when ``cls`` has a ``__weakref__`` slot after its fields (attrs adds one
    unless ``weakref_slot=False``, which the hot records set). A probe checks that every
    field reads back.
    """
    names = [a.name for a in attrs.fields(cls)]
    # The twin needs the record's bases for CPython to call the layouts equal: typing.Generic
    # for a generic record (Suspend; it adds no slots and no per-call cost), ``StoredRow``.
    bases = tuple(getattr(cls, "__orig_bases__", None) or cls.__bases__)
    twin = types.new_class(
        f"_{cls.__name__}Twin", bases, exec_body=lambda ns: ns.update(__slots__=tuple(names))
    )
    probe = twin()
    for index, name in enumerate(names):
        setattr(probe, name, index)
    try:
        probe.__class__ = cls
    except TypeError:
        return None
    if type(probe) is not cls or [getattr(probe, n) for n in names] != list(range(len(names))):
        return None  # pragma: no cover - CPython keeps slots by name
    return twin


def hot_record_problems(cls: type[Any]) -> list[str]:
    """Which of the hot-record rules (above ``ErrorCode``) ``cls`` breaks; empty if none."""
    problems: list[str] = []
    if "__slots__" not in vars(cls):
        problems.append("it is not slotted")
    if "__weakref__" in getattr(cls, "__slots__", ()):
        problems.append("it has a __weakref__ slot (use weakref_slot=False)")
    elif slot_twin(cls) is None:
        problems.append("CPython refuses its slot twin (see slot_twin)")
    problems.extend(
        f"it defines {hook}"
        for hook in ("__attrs_pre_init__", "__attrs_post_init__")
        if hasattr(cls, hook)
    )
    for a in attrs.fields(cls):
        if a.validator is not None:
            problems.append(f"field {a.name!r} has a validator")
        if a.converter is not None:
            problems.append(f"field {a.name!r} has a converter")
        if not a.init:
            problems.append(f"field {a.name!r} has init=False")
        if isinstance(a.default, attrs.Factory) and a.default.takes_self:  # type: ignore[arg-type]
            problems.append(f"field {a.name!r} has a default factory that takes self")
    return problems


def _fast_constructor(cls: type[Any]) -> Any:
    """A positional constructor for a frozen slotted attrs class that skips ``__init__``.

    The instance is filled as its plain slotted twin and then given its real class (plain
    slot stores instead of a frozen ``__init__``'s ``object.__setattr__`` per field: about
    2.5x faster); without a twin, each slot is written through its member descriptor.
    The trailing fields with a default (a value or a factory) may be left out, as with
    ``__init__``. Only the executor uses it, for records built from values it already
    checked; the instance is as frozen as any other.
    """
    fields = attrs.fields(cls)
    names = [a.name for a in fields]
    namespace: dict[str, Any] = {"_cls": cls, "_new": object.__new__, "_NOTHING": attrs.NOTHING}
    params, fill = [], []
    optional = True  # only a trailing run of defaulted fields may be left out positionally
    for a in reversed(fields):
        default = a.default
        if default is attrs.NOTHING:
            optional = False
        if not optional:
            params.append(a.name)
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            namespace[f"_f_{a.name}"] = default.factory
            params.append(f"{a.name}=_NOTHING")
            fill.append(f"    if {a.name} is _NOTHING:\n        {a.name} = _f_{a.name}()\n")
        else:
            namespace[f"_d_{a.name}"] = default
            params.append(f"{a.name}=_d_{a.name}")
    head = f"def build({', '.join(reversed(params))}):\n" + "".join(reversed(fill))
    twin = slot_twin(cls)
    if twin is not None:
        namespace["_twin"] = twin
        body = "".join(f"    self.{n} = {n}\n" for n in names)
        if issubclass(cls, StoredRow):
            # No row remembered yet, said as None: reading an unset slot with a default
            # (``dumps`` does, ``StoredRow``) raises and discards an AttributeError.
            body += "    self._row = None\n"
        source = f"{head}    self = _twin()\n{body}    self.__class__ = _cls\n    return self\n"
    else:
        namespace.update({f"_set_{n}": getattr(cls, n).__set__ for n in names})
        body = "".join(f"    _set_{n}(self, {n})\n" for n in names)
        source = f"{head}    self = _new(_cls)\n{body}    return self\n"
    generate(source, namespace, what=f"fast constructor {cls.__name__}")
    return namespace["build"]


def _fast_replace(cls: type[Any], field: str) -> Any:
    """``attrs.evolve(record, **{field: value})`` for a hot record, as ``build(record, value)``.

    Every other slot is copied as it is, through the slot twin (``attrs.evolve`` goes
    through ``__init__`` by keyword, over ten times slower). A hot record has a twin.
    """
    names = [a.name for a in attrs.fields(cls)]
    twin = slot_twin(cls)
    if field not in names or twin is None:
        raise TypeError(f"{cls.__name__}.{field}: not a field of a hot record")
    body = "".join(
        f"    self.{n} = value\n" if n == field else f"    self.{n} = record.{n}\n" for n in names
    )
    source = (
        f"def build(record, value):\n    self = _twin()\n{body}"
        "    self.__class__ = _cls\n    return self\n"
    )
    namespace: dict[str, Any] = {"_cls": cls, "_twin": twin}
    generate(source, namespace, what=f"fast replace {cls.__name__}.{field}")
    return namespace["build"]


new_node_execution: Callable[..., NodeExecution] = _fast_constructor(NodeExecution)
"""``new_node_execution(node_key, status, execution_index, run_index, started_at,
completed_at, params, output, output_port, error, attempts)``."""
new_attempt_record: Callable[..., AttemptRecord] = _fast_constructor(AttemptRecord)
"""``new_attempt_record(number, started_at, ended_at, outcome, error, due_at, retry_delay_ms,
redrive)``."""
new_workflow_execution: Callable[..., WorkflowExecution] = _fast_constructor(WorkflowExecution)
"""``new_workflow_execution(id, workflow_id, workflow_version, status, input, node_executions,
state, pending, next_index, suspended_node, suspension, output, error, parent, started_at,
updated_at, completed_at, trace_context, lease_expires_at, kept_size, other_pauses,
resuming)``."""
new_activation: Callable[..., Activation] = _fast_constructor(Activation)
"""``new_activation(node_key, seq, sources)``."""
new_error_info: Callable[..., ErrorInfo] = _fast_constructor(ErrorInfo)
"""``new_error_info(code, type, module, message, details, node_key, traceback=None)``."""
new_retry_data: Callable[..., RetryData] = _fast_constructor(RetryData)
"""``new_retry_data(retry_delay_ms, attempt_number, max_attempts, original_error, resume_at,
redrive)``."""
new_suspend: Callable[..., Suspend[Any, WorkflowExecution]] = _fast_constructor(Suspend)
"""``new_suspend(kind, data, execution)``: the executor's outcome, its kind already checked."""
new_completed: Callable[..., Completed] = _fast_constructor(Completed)
"""``new_completed(execution, output)``."""
new_timer_data: Callable[..., TimerData] = _fast_constructor(TimerData)
"""``new_timer_data(resume_at)``."""

with_lease: Callable[[WorkflowExecution, datetime | None], WorkflowExecution] = _fast_replace(
    WorkflowExecution, "lease_expires_at"
)
"""``with_lease(execution, expires_at)``: ``execution`` with that ``lease_expires_at`` (what a
runner saves at each checkpoint and renewal)."""

HOT_RECORDS: dict[type[Any], Callable[..., Any]] = {
    ErrorInfo: new_error_info,
    AttemptRecord: new_attempt_record,
    NodeExecution: new_node_execution,
    Activation: new_activation,
    RetryData: new_retry_data,
    TimerData: new_timer_data,
    WorkflowExecution: new_workflow_execution,
    Suspend: new_suspend,
    Completed: new_completed,
}
"""Every hot record (rules above ``ErrorCode``) and its fast constructor."""
