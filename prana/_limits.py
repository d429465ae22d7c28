"""What one execution may run and keep: limits the application sets, never a definition.

A workflow definition is untrusted data (docs: Security model), so it cannot bound the work
and memory of its own executions: ``Workflow.max_iterations`` (per node) stays the
definition's to set, below a ceiling it cannot lift. ``Limits`` is given to the
``Registry`` (``Registry(limits=Limits(...))``), which the executor and the ``Runner``
already take, so every execution that registry runs is held to it.

Sizes are counted where values are made, never by walking what an execution already
holds: an output when its JSON check walks it anyway, rendered params when they are made
JSON data, a definition's literal params once when it is compiled. The running total is
kept in the execution (``WorkflowExecution.kept_size``), so it holds across suspensions,
processes and reloads at no cost per step.
"""

from __future__ import annotations

from typing import Any

import attrs

from prana._errors import InvalidSettingsError
from prana._jsoncheck import CONTAINER_SIZE, json_size, jsonable
from prana._model import AttemptOutcome, ErrorCode, ErrorInfo, NodeStatus, new_error_info
from prana._noderun import prana_error


def _positive(field: str) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidSettingsError(f"Limits.{field}={value!r}: use a whole number >= 1")

    return check


@attrs.frozen(kw_only=True)
class Limits:
    """How much one execution may run and keep; over a limit is a non-retryable
    ``limit_exceeded`` failure naming the node and the limit.

    ``max_node_runs``: node runs in one execution (every pass of a loop, every item of a
    ``core.for_each``), whatever the definition's ``max_iterations`` says; past it the
    execution fails, as a runaway loop does.
    ``max_value_size``: the size of one node's rendered params, of its output, of one state
    update, and of the workflow input.
    ``max_record_size``: the size of everything the execution keeps (the input, every node
    run's params and output, state updates, the error of every failed attempt), which is
    what its record holds.
    ``max_attempts``: attempts of one node run, whatever its retry policy says (a policy
    of ``max_attempts: 10**18`` with no delay retried for ever, its record growing with
    every attempt); past it the node fails, and ``on_error`` decides what follows.
    ``max_sub_workflow_depth``: how deep sub-workflows may nest (a child of a top-level
    execution is at depth 1); a workflow that starts itself stops there, its deepest
    ``workflow.execute_workflow`` node failing (the shell checks it when it starts a child).
    ``max_tree_executions``: how many executions one tree of sub-workflows may hold, its
    root included; depth alone does not bound width (three children per level make
    ``3**depth`` executions), so a child that would start with the tree already this big fails
    its parent's node instead. The shell counts the tree in the store before each child
    starts, so runners in several processes racing may overshoot by one child each; a
    store without ``count_tree`` (``scheduling.abc.TreeCountingStore``) is not held to it.

    Sizes count the characters of every string (keys included), 8 for each number, 64
    for each list and dict, and one for each bool, null, list item and dict entry: about
    what the value takes in memory once loaded (at most ~12 bytes per unit). A value named
    twice counts twice, as the record writes it twice. Give your own to the registry:
    ``Registry(limits=Limits(...))``.
    """

    max_node_runs: int = attrs.field(default=10_000, validator=_positive("max_node_runs"))
    max_value_size: int = attrs.field(default=10_000_000, validator=_positive("max_value_size"))
    max_record_size: int = attrs.field(default=50_000_000, validator=_positive("max_record_size"))
    max_attempts: int = attrs.field(default=10_000, validator=_positive("max_attempts"))
    max_sub_workflow_depth: int = attrs.field(
        default=32, validator=_positive("max_sub_workflow_depth")
    )
    max_tree_executions: int = attrs.field(
        default=1_000, validator=_positive("max_tree_executions")
    )


SIZE_RULE = "characters, 8 per number, 64 per list or dict, 1 per other item"
"""How a size is counted, as an error names it (``prana._jsoncheck.json_size``)."""

DEFAULT_LIMITS = Limits()
"""The limits of a ``Registry()`` given none."""


def _raise_it(name: str) -> str:
    return f"the application raises it with Registry(limits=Limits({name}=...))"


def sub_workflow_too_deep(workflow_id: str, limits: Limits) -> str:
    """The message of a sub-workflow that would start one level past the limit."""
    most = limits.max_sub_workflow_depth
    return (
        f"sub-workflow {workflow_id!r} would run {most + 1} levels deep, past "
        f"Limits.max_sub_workflow_depth={most} (does a workflow start itself?); "
        f"{_raise_it('max_sub_workflow_depth')}"
    )


def sub_workflow_tree_too_big(workflow_id: str, root_id: str, limits: Limits) -> str:
    """The message of a sub-workflow that would start in a tree already at the limit."""
    most = limits.max_tree_executions
    return (
        f"sub-workflow {workflow_id!r} would be execution {most + 1:,} of the tree of "
        f"{root_id!r}, past Limits.max_tree_executions={most:,} (do sub-workflows fan out "
        f"without end?); {_raise_it('max_tree_executions')}"
    )


def attempts_exceeded(key: str, error: ErrorInfo, limits: Limits) -> ErrorInfo:
    """Node ``key`` failed an attempt its policy would retry, but the run has had enough."""
    message = (
        f"node {key!r} would make attempt {limits.max_attempts + 1:,} of one run, past "
        f"Limits.max_attempts={limits.max_attempts:,}, a ceiling its retry policy cannot "
        f"lift; {_raise_it('max_attempts')}. The last attempt: {error.type}: {error.message}"
    )
    return prana_error(ErrorCode.LIMIT_EXCEEDED, message, key, "LimitExceeded")


def node_runs_exceeded(key: str, limits: Limits) -> ErrorInfo:
    """Node ``key`` would be one node run too many for this execution."""
    message = (
        f"node {key!r} would be node run {limits.max_node_runs + 1:,} of this execution, past "
        f"Limits.max_node_runs={limits.max_node_runs:,}, a ceiling the workflow's "
        f"max_iterations cannot lift; {_raise_it('max_node_runs')}"
    )
    return prana_error(ErrorCode.LIMIT_EXCEEDED, message, key, "LimitExceeded")


def size_problem(key: str, what: str, size: int, kept: int, limits: Limits) -> ErrorInfo | None:
    """Why node ``key`` may not keep ``what`` of ``size`` on top of ``kept``, or ``None``."""
    if size > limits.max_value_size:
        message = (
            f"node {key!r}: {what} has a size of {size:,} ({SIZE_RULE}), over "
            f"Limits.max_value_size={limits.max_value_size:,}; {_raise_it('max_value_size')}"
        )
    elif kept + size > limits.max_record_size:
        message = (
            f"node {key!r}: {what} (a size of {size:,}) would take what this "
            f"execution keeps to {kept + size:,}, over Limits.max_record_size="
            f"{limits.max_record_size:,}; {_raise_it('max_record_size')}"
        )
    else:
        return None
    return prana_error(ErrorCode.LIMIT_EXCEEDED, message, key, "LimitExceeded")


MAX_ERROR_MESSAGE = 2_000
"""The most characters of an error's message a record keeps (the rest is cut, and says so)."""
MAX_ERROR_DETAILS = 4_000
"""The largest size (as ``Limits`` counts) of an error's details a record keeps."""
MAX_TRACEBACK = 8_000
"""The most characters of an error's traceback a record keeps: its end, where the
exception was raised (the start is cut, and says so)."""
_DETAIL_TEXT = 500
"""The most characters of one detail kept when the details are cut down to size."""


def error_size(error: ErrorInfo) -> int:
    """The size an attempt's error adds to the record, as ``Limits`` counts it."""
    return (
        len(error.code)
        + len(error.type)
        + len(error.module)
        + len(error.message)
        + max(json_size(error.details), 0)
        + (0 if error.traceback is None else len(error.traceback))
    )


def kept_error(error: ErrorInfo) -> tuple[ErrorInfo, int]:
    """``error`` cut to what a record keeps of one attempt's error, and its ``error_size``:
    its message to ``MAX_ERROR_MESSAGE`` characters, its details to ``MAX_ERROR_DETAILS``
    (numbers, bools and nulls kept, each text cut to 500 characters, while they fit), its
    traceback to the last ``MAX_TRACEBACK`` characters. An action quoting a 65 KB URL in
    each of 2,000 attempts made a 261 MB record."""
    message, details, traceback = error.message, error.details, error.traceback
    details_size = max(json_size(details), 0)
    traceback_size = 0 if traceback is None else len(traceback)
    if (
        len(message) <= MAX_ERROR_MESSAGE
        and details_size <= MAX_ERROR_DETAILS
        and traceback_size <= MAX_TRACEBACK
    ):
        names = len(error.code) + len(error.type) + len(error.module)
        return error, names + len(message) + details_size + traceback_size
    if len(message) > MAX_ERROR_MESSAGE:
        message = _cut(message, MAX_ERROR_MESSAGE)
    if details_size > MAX_ERROR_DETAILS:
        details = _cut_details(details)
    if traceback is not None and traceback_size > MAX_TRACEBACK:
        left = traceback_size - MAX_TRACEBACK
        traceback = f"({left:,} characters not kept)\n...{traceback[-MAX_TRACEBACK:]}"
    cut = new_error_info(
        error.code, error.type, error.module, message, details, error.node_key, traceback
    )
    return cut, error_size(cut)


def _cut(text: str, most: int) -> str:
    return f"{text[:most]}... ({len(text) - most:,} more characters not kept)"


def _cut_details(details: Any) -> dict[str, Any]:
    items = details.items() if type(details) is dict else [("details", details)]
    kept: dict[str, Any] = {}
    room = MAX_ERROR_DETAILS - 100
    for key, value in items:
        name = str(key)[:100]
        if value is None or type(value) in (bool, int, float):
            item = value
        else:
            text = value if type(value) is str else repr(value)[: _DETAIL_TEXT + 1]
            item = _cut(text, _DETAIL_TEXT) if len(text) > _DETAIL_TEXT else text
        size = len(name) + max(json_size(item), 1) + 1
        if size > room:
            kept["details_cut"] = True
            break
        kept[name] = item
        room -= size
    return kept


def record_full(
    key: str, number: int, error: ErrorInfo, size: int, kept: int, limits: Limits
) -> ErrorInfo:
    """Node ``key`` failed attempt ``number``, whose error the record has no room left for."""
    message = (
        f"node {key!r}: the error of attempt {number:,} would take what this execution keeps to "
        f"{kept + size:,}, over Limits.max_record_size={limits.max_record_size:,} (errors "
        f"count, every attempt's); {_raise_it('max_record_size')}. The error: {error.type}: "
        f"{_cut(error.message, 200) if len(error.message) > 200 else error.message}"
    )
    return prana_error(ErrorCode.LIMIT_EXCEEDED, message, key, "LimitExceeded")


def recorded_size(execution: Any) -> int:
    """What ``execution`` keeps, counted from its records: for a record saved before
    ``kept_size`` existed (or built by hand), once, when it is resumed."""
    total = _size(execution.input)
    if execution.state:  # its entries: each state update counts its own, not a dict's
        total += _size(execution.state) - CONTAINER_SIZE
    for runs in execution.node_executions.values():
        for run in runs:
            if run.params:  # no params (None, {}) count nothing
                total += _size(run.params)
            if run.status is NodeStatus.COMPLETED:
                total += _size(run.output)
            for attempt in run.attempts:
                if attempt.outcome is AttemptOutcome.FAILED and attempt.error is not None:
                    total += error_size(attempt.error)
    return total


def _size(value: Any) -> int:
    size = json_size(value)
    return size if size >= 0 else max(json_size(jsonable(value)), 0)
