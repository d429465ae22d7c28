"""A node run in progress: the engine's mutable working record, and its failures as data.

The engine changes a ``NodeRun`` freely while the node runs and freezes it into a
``NodeExecution`` when it hands an execution back; ``error_info`` and ``prana_error`` turn
what went wrong into the ``ErrorInfo`` those records keep.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import attrs

from prana import _state
from prana._errors import AttemptTimeout, NonRetryable
from prana._hooks import redact_tokens
from prana._jsoncheck import json_problem
from prana._model import (
    AttemptOutcome,
    AttemptRecord,
    ErrorCode,
    ErrorInfo,
    NodeExecution,
    NodeStatus,
    new_attempt_record,
    new_error_info,
    new_node_execution,
)
from prana._noderuns import RunsByNode
from prana._state import (
    ATTEMPT_RUNNING,
    ATTEMPT_TRANSITIONS,
    NODE_RUNNING,
    check_attempt_transition,
    check_node_transition,
)


def close_paused(key: str, last: NodeExecution, now: datetime) -> NodeExecution:
    """Node ``key``'s latest run ``last`` (paused, or running in a checkpoint) closed
    ``cancelled``, its open attempt with it: what a stop or a cancel does to a pause."""
    check_node_transition(key, last.status, NodeStatus.CANCELLED)
    attempts = list(last.attempts)
    if attempts and ATTEMPT_TRANSITIONS[attempts[-1].outcome]:  # still open: cancelled
        check_attempt_transition(
            key, attempts[-1].number, attempts[-1].outcome, AttemptOutcome.CANCELLED
        )
        attempts[-1] = attrs.evolve(attempts[-1], ended_at=now, outcome=AttemptOutcome.CANCELLED)
    return attrs.evolve(
        last, status=NodeStatus.CANCELLED, completed_at=now, attempts=tuple(attempts)
    )


class NodeRun:
    """The mutable form of a ``NodeExecution`` while its node is running.

    ``attempts`` holds the closed attempts; the open one lives in the ``attempt_*`` fields
    until ``settle`` turns it into a record, so each attempt costs one object.
    ``budget_start`` is when ``retry_timeout`` started counting: the first attempt's start,
    or the start of the first attempt after a redrive that reset the attempts.
    """

    __slots__ = (
        "attempt_due",
        "attempt_number",
        "attempt_redrive",
        "attempt_started",
        "attempts",
        "budget_start",
        "execution_index",
        "key",
        "params",
        "recorded",
        "run_index",
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
        self.attempt_redrive = False
        self.budget_start = started_at

    @classmethod
    def resumed(cls, last: NodeExecution, attempts: list[AttemptRecord] | None = None) -> NodeRun:
        """The run of ``last``, a suspended node's record, running again (``recorded``: its
        record is replaced when it settles); ``attempts`` replace its ledger when given."""
        node_run = cls(
            last.node_key,
            last.execution_index,
            last.run_index,
            last.started_at,
            list(last.attempts) if attempts is None else attempts,
            last.params,
            True,  # recorded; positional: a keyword call costs a dict
        )
        for attempt in reversed(node_run.attempts):
            if attempt.redrive and attempt.number == 1:  # a redrive reset the budget here
                node_run.budget_start = attempt.started_at
                break
        return node_run

    def open_attempt(self, number: int, started: datetime, due: datetime | None) -> None:
        self.attempt_number = number
        self.attempt_started = started
        self.attempt_due = due

    def settle(
        self,
        runs: RunsByNode,
        outcome: AttemptOutcome,
        now: datetime,
        status: NodeStatus,
        completed_at: datetime | None = None,
        output: Any = None,
        port: str | None = None,
        error: ErrorInfo | None = None,
        retry_delay_ms: int | None = None,
    ) -> None:
        """Close the open attempt with ``outcome`` at ``now`` and record the run settled with
        ``status`` in ``runs`` (``record``); both changes are checked against their tables.

        One call for what every settling node does (a retry cycle settles three runs).
        """
        if outcome._value_ not in _state.ATTEMPT_FROM_RUNNING:
            check_attempt_transition(self.key, self.attempt_number, ATTEMPT_RUNNING, outcome)
        if status._value_ not in _state.NODE_FROM_RUNNING:
            check_node_transition(self.key, NODE_RUNNING, status)
        attempts = self.attempts
        attempts.append(
            new_attempt_record(
                self.attempt_number,
                self.attempt_started,
                now,
                outcome,
                error,
                self.attempt_due,
                retry_delay_ms,
                self.attempt_redrive,
            )
        )
        self.record(
            runs,
            new_node_execution(
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
                tuple(attempts),
            ),
        )

    def record(self, runs: RunsByNode, execution: NodeExecution) -> None:
        """Put ``execution`` as this run's record in ``runs``: replace it if it has one, else
        add it."""
        key = self.key
        if self.recorded:
            runs[key] = (*runs[key][:-1], execution)
        else:
            runs[key] = (*runs.get(key, ()), execution)
            self.recorded = True

    def reopen_paused_attempt(self) -> None:
        """A paused attempt continues on resume: it is the same attempt, not a new one."""
        last = self.attempts.pop()
        check_attempt_transition(self.key, last.number, last.outcome, ATTEMPT_RUNNING)
        self.open_attempt(last.number, last.started_at, last.due_at)
        self.attempt_redrive = last.redrive

    def running_record(self) -> NodeExecution:
        """The run's record while its open attempt runs: ``running``, the attempt ``running``.

        What a checkpoint stores (``Run.snapshot``); no transition: the run is running.
        """
        open_attempt = new_attempt_record(
            self.attempt_number,
            self.attempt_started,
            None,
            AttemptOutcome.RUNNING,
            None,
            self.attempt_due,
            None,
            self.attempt_redrive,
        )
        return new_node_execution(
            self.key,
            NodeStatus.RUNNING,
            self.execution_index,
            self.run_index,
            self.started_at,
            None,
            self.params,
            None,
            None,
            None,
            (*self.attempts, open_attempt),
        )


def error_info(
    exc: BaseException, node_key: str | None, code: ErrorCode | None = None
) -> ErrorInfo:
    """Turn a live exception into plain data; ``NonRetryable(exc)`` records ``exc``."""
    cause: BaseException = exc
    if isinstance(exc, NonRetryable):
        value = _NON_RETRYABLE if code is None else code._value_
        if isinstance(exc.error, BaseException):
            cause = exc.error
    elif code is not None:
        value = code._value_
    else:
        value = _TIMEOUT if isinstance(exc, AttemptTimeout) else _ACTION_ERROR
    details = getattr(cause, "details", None)
    if details is not None:
        if json_problem(details) is not None:
            details = repr(details)
        if type(details) is not dict:
            details = {"details": details}  # always a JSON object, as ErrorInfo promises
    if details is None or ("status_code" not in details and "status" not in details):
        status = status_of(cause)
        if status is not None:
            details = (
                {"status_code": status} if details is None else {**details, "status_code": status}
            )
    cls = type(cause)
    return new_error_info(
        value, cls.__name__, cls.__module__, str(cause), details, node_key, traceback_text(exc)
    )


MAX_TRACEBACK_FRAMES = 16
"""The most frames of one exception a traceback keeps: the outermost 4 and the innermost
12 (where it was raised), the rest counted (a ``RecursionError`` has a thousand)."""
MAX_TRACEBACK_CHAIN = 5
"""The most exceptions of a chain (``raise ... from``, or raised while handling another)
a traceback keeps, the last ones: the rest counted."""
_CHAIN_MESSAGE = 300
"""The most characters of a cause's message a traceback keeps."""
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def traceback_text(exc: BaseException) -> str:
    """``exc``'s traceback and its chain of causes in Python's layout, without source lines
    (reading files is slow and shows code, not data), bounded by ``MAX_TRACEBACK_FRAMES``
    and ``MAX_TRACEBACK_CHAIN``; the record cuts the text to ``MAX_TRACEBACK``."""
    chain: list[tuple[BaseException, str]] = [(exc, "")]
    seen: set[int] | None = None  # built only for a chain: most errors have none
    current = exc
    while True:
        if current.__cause__ is not None:
            current, joint = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, joint = current.__context__, _CONTEXT
        else:
            break
        if seen is None:
            seen = {id(item) for item, _ in chain}
        if id(current) in seen:
            break
        seen.add(id(current))
        chain.append((current, joint))
    parts: list[str] = []
    left = len(chain) - MAX_TRACEBACK_CHAIN
    if left > 0:
        parts.append(f"({left} earlier exception{'s' if left > 1 else ''} not kept)\n")
        chain = chain[:MAX_TRACEBACK_CHAIN]
    for item, following in reversed(chain):
        parts.append(_one_traceback(item))
        parts.append(following)
    return "".join(parts).rstrip("\n")


_DRIVERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_drivers.py")
"""Where prana calls actions: its frames lead every action's traceback and are left out."""


def _one_traceback(exc: BaseException) -> str:
    lines = ["Traceback (most recent call last):\n"]
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _DRIVERS:
        tb = tb.tb_next  # the driver calling the action: not the user's code
    count = 0
    while tb is not None:
        count += 1
        code = tb.tb_frame.f_code
        lines.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n')
        if count > MAX_TRACEBACK_FRAMES:
            del lines[5]  # keep the outermost 4 and the innermost ones
        tb = tb.tb_next
    if count > MAX_TRACEBACK_FRAMES:
        lines.insert(5, f"  ... {count - MAX_TRACEBACK_FRAMES:,} more frames not kept\n")
    elif not count:
        lines.clear()
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ != "builtins":
        name = f"{cls.__module__}.{name}"
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an exception's own __str__ may raise anything
        message = "<its message could not be read>"
    if len(message) > _CHAIN_MESSAGE:
        left = len(message) - _CHAIN_MESSAGE
        message = f"{message[:_CHAIN_MESSAGE]}... ({left:,} more characters)"
    lines.append(f"{name}: {message}\n" if message else f"{name}\n")
    return "".join(lines)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries the way common clients put it, else ``None``.

    ``exc.status_code``, ``exc.response.status_code`` (requests, httpx) or ``exc.status``
    (aiohttp), the first that is a whole number from 100 to 999. A property that raises,
    or any other value, is no status: nothing else is read or kept.
    """
    cls = type(exc)
    on_class = _CLASS_HAS_STATUS.get(cls)
    if on_class is None:
        on_class = _class_has_status(cls)
    if not on_class:  # the common case, two dict lookups: no such attribute anywhere
        own = exc.__dict__  # every exception has one (empty unless attributes were set)
        if not own or ("status_code" not in own and "response" not in own and "status" not in own):
            return None
    for read in _STATUS_READERS:
        try:
            value = read(exc)
        except Exception:  # noqa: BLE001 - an exception's own property may raise anything
            value = None
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 999:
            return int(value)  # an IntEnum (http.HTTPStatus) is kept as its number
    return None


_STATUS_NAMES = ("status_code", "response", "status")
_CLASS_HAS_STATUS: dict[type[BaseException], bool] = {}


def _class_has_status(cls: type[BaseException]) -> bool:
    """Whether ``cls`` has one of ``_STATUS_NAMES`` (a property, say), cached per class."""
    if len(_CLASS_HAS_STATUS) > 1024:
        _CLASS_HAS_STATUS.clear()
    found = _CLASS_HAS_STATUS[cls] = any(hasattr(cls, name) for name in _STATUS_NAMES)
    return found


_STATUS_READERS: tuple[Callable[[BaseException], Any], ...] = (
    lambda exc: getattr(exc, "status_code", None),
    lambda exc: getattr(getattr(exc, "response", None), "status_code", None),
    lambda exc: getattr(exc, "status", None),
)


# The codes error_info writes most, as the plain strings records hold (``.value`` is a
# Python-level property on every enum member).
_NON_RETRYABLE: str = ErrorCode.NON_RETRYABLE.value
_TIMEOUT: str = ErrorCode.TIMEOUT.value
_ACTION_ERROR: str = ErrorCode.ACTION_ERROR.value


def prana_error(code: ErrorCode, message: str, node_key: str | None, type_name: str) -> ErrorInfo:
    """A failure prana itself found (not an exception), as plain data."""
    return new_error_info(code._value_, type_name, "prana", message, None, node_key)


def with_detail(error: ErrorInfo, key: str, value: Any) -> ErrorInfo:
    """``error`` with ``details[key] = value`` beside the details it has (details that are
    not a dict move under ``"details"``)."""
    details = error.details
    merged: dict[str, Any] = (
        dict(details) if type(details) is dict else {} if details is None else {"details": details}
    )
    merged[key] = value
    return new_error_info(
        error.code, error.type, error.module, error.message, merged, error.node_key, error.traceback
    )


def redacted_error(error: ErrorInfo, issued: Mapping[str, str]) -> ErrorInfo:
    """``error`` without the resume tokens minted in this call and the secrets (``issued``:
    an action's error often quotes its params, e.g. ``HTTP 400 from POST <url>``); the
    record keeps neither."""
    message = redact_tokens(error.message, issued)
    details = redact_tokens(error.details, issued)
    traceback = error.traceback
    if traceback is not None:
        traceback = redact_tokens(traceback, issued)
    if message == error.message and details == error.details and traceback == error.traceback:
        return error
    return new_error_info(
        error.code, error.type, error.module, message, details, error.node_key, traceback
    )
