"""The console view: an observer that shows runs, their retries, and a retry summary.

Formatting is pure (functions returning strings, tested without a terminal); ``rich`` is
imported only to render, and is optional: without it lines are printed as plain text.
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from prana import (
    AttemptOutcome,
    Event,
    EventType,
    ExecutionStatus,
    InvalidSettingsError,
    NodeExecution,
    WorkflowExecution,
)
from prana.shell import WAIT_UNITS, format_duration

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from prana import ErrorInfo

__all__ = [
    "ConsoleView",
    "RetryStats",
    "format_duration",
    "format_error",
    "format_retry",
    "format_retry_failed",
    "format_retry_succeeded",
    "format_stats",
    "format_timeline",
    "node_lateness",
    "printable",
]

RETRY = "↻"
OK = "✓"
FAIL = "✗"
PAUSE = "⏸"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters shown escaped (``\\x1b``).

    Workflow ids, node keys, errors and data come from definitions and callers prana does
    not trust; printed raw, an escape sequence could clear the screen, fake lines, set the
    window title or (OSC 52) write the operator's clipboard. Newlines and tabs stay.
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


SHORT_ID = 12
"""How many characters of an execution id the console prints (the CLI takes any unique prefix)."""


def short_id(execution_id: str) -> str:
    """An execution id as the console prints it: 12 characters, a child's own suffix kept.

    A child run's id is its parent's id plus ``:node:run:attempt``; cutting it to 12
    characters would print the parent's id, so the suffix stays.
    """
    parent, sep, own = execution_id.partition(":")
    return parent[:SHORT_ID] + sep + own


def format_error(error: ErrorInfo | None) -> str:
    """``"ConnectionError: refused"``, or ``"?"`` when there is no error."""
    if error is None:
        return "?"
    return f"{error.type}: {error.message}" if error.message else error.type


def _attempt_text(attempt: int | None, max_attempts: int | None) -> str:
    if attempt is None:
        return "attempt ?"
    if max_attempts is None:
        return f"attempt {attempt}"
    return f"attempt {attempt}/{max_attempts}"


def format_retry(event: Event) -> str:
    """One line for a scheduled retry: ``↻ r (attempt 2/4) retrying in 2.0s after E: msg``."""
    delay = format_duration((event.delay_ms or 0) / 1000)
    attempt = _attempt_text(event.attempt, event.max_attempts)
    error = format_error(event.error)
    return f"{RETRY} {event.node_key} ({attempt}) retrying in {delay} after {error}"


@attrs.frozen(kw_only=True)
class _Try:
    """One failed attempt as the console saw it: its error and the delay chosen after it."""

    attempt: int
    error: str
    delay_ms: int | None


def format_retry_succeeded(node_key: str, attempt: int, failures: list[_Try]) -> str:
    """The compact line for a node that succeeded after retrying.

    Every attempt before ``attempt`` was retried, also those another process saw (a worker
    finishing what a ``prana run`` began); the error kinds are the ones seen here.
    """
    retries = max(len(failures), attempt - 1)
    kinds = sorted({f.error.split(":", 1)[0] for f in failures})
    noun = "retry" if retries == 1 else "retries"
    return (
        f"{OK} {node_key} succeeded on attempt {attempt} after {retries} {noun} "
        f"({', '.join(kinds)})"
    )


def format_retry_failed(node_key: str, attempt: int, failures: list[_Try], last: str) -> str:
    """The detailed block for a node whose retries ran out: every attempt and its error."""
    lines = [f"{FAIL} {node_key} failed after {attempt} attempts"]
    for failure in failures:
        after = (
            ""
            if failure.delay_ms is None
            else f"  (retried after {format_duration(failure.delay_ms / 1000)})"
        )
        lines.append(f"    attempt {failure.attempt}: {failure.error}{after}")
    lines.append(f"    attempt {attempt}: {last}  (gave up)")
    return "\n".join(lines)


@attrs.frozen(kw_only=True)
class RetryStats:
    """Retry statistics over every execution a ``ConsoleView`` saw (started or resumed)."""

    executions: int = 0
    executions_with_retries: int = 0
    succeeded_after_retry: int = 0
    failed_after_retries: int = 0
    retry_attempts: int = 0

    @property
    def mean_retries(self) -> float:
        """Retries per execution seen (0 when none was seen)."""
        return self.retry_attempts / self.executions if self.executions else 0.0


def format_stats(stats: RetryStats) -> str:
    """The summary block printed when a run ends."""
    return "\n".join(
        [
            "Retry summary",
            f"  executions:                {stats.executions}",
            f"  executions with retries:   {stats.executions_with_retries}",
            f"  succeeded after retry:     {stats.succeeded_after_retry}",
            f"  failed after all retries:  {stats.failed_after_retries}",
            f"  total retry attempts:      {stats.retry_attempts}",
            f"  mean retries / execution:  {stats.mean_retries:.2f}",
        ]
    )


MAX_LINES = 1000
"""How many printed lines a ``ConsoleView`` keeps (in ``lines``) by default."""
MAX_EXECUTIONS = 1000
"""How many executions' live state a ``ConsoleView`` keeps by default."""


def _bound(name: str, value: object) -> int:
    """``value`` if it is a whole number >= 1, else ``InvalidSettingsError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSettingsError(f"ConsoleView({name}={value!r}): use a whole number >= 1")
    return value


class ConsoleView:
    """An observer (pass it in ``observers=``) that prints runs and keeps retry statistics.

    ``write`` receives each finished line or block; by default it prints with ``rich`` when
    installed, plainly otherwise. ``lines`` keeps the last ``max_lines`` written, and
    ``running`` the live state of each execution not yet ended (``status_lines`` formats it).

    A worker's view lives as long as the worker, so what it keeps is bounded: besides the
    last ``max_lines`` lines, per-execution state (``running``, a node's failed attempts
    awaiting its outcome, which executions retried) is kept for the ``max_executions``
    executions most recently heard of. An execution whose end this process never hears of
    (its retry ran in another worker, its webhook was delivered elsewhere) is forgotten once
    that many others have been heard of since. The statistics are counters: exact, except
    that an execution forgotten that way and heard of again counts once more (among
    ``executions``, and among ``executions_with_retries`` if it retries again).
    """

    def __init__(
        self,
        write: Callable[[str], object] | None = None,
        *,
        max_lines: int = MAX_LINES,
        max_executions: int = MAX_EXECUTIONS,
    ) -> None:
        self._max_lines = _bound("max_lines", max_lines)
        self._max_executions = _bound("max_executions", max_executions)
        self._console: Any = None
        if write is None:
            self._console = _rich_console()
            write = _writer(self._console)
        self._write = write
        self._lock = threading.Lock()
        self.lines: list[str] = []
        self.running: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._retried: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._failures: collections.OrderedDict[str, dict[tuple[str, int], list[_Try]]] = (
            collections.OrderedDict()
        )
        """Per execution, per ``(node, run)``: failed attempts whose node has no outcome yet."""
        self._executions = 0
        self._with_retries = 0
        self._succeeded = 0
        self._failed = 0
        self._retries = 0

    def _keep(self, kept: collections.OrderedDict[Any, Any], key: Any, value: Any) -> None:
        """Set ``kept[key]`` as the most recent entry, dropping the oldest beyond the bound."""
        kept[key] = value
        kept.move_to_end(key)
        while len(kept) > self._max_executions:
            kept.popitem(last=False)

    def _set_running(self, execution_id: str, state: str) -> None:
        self._keep(self.running, execution_id, state)

    def _ended(self, execution_id: str) -> None:
        """Forget an ended execution's live state and any failures still awaiting an outcome."""
        self.running.pop(execution_id, None)
        self._failures.pop(execution_id, None)

    def _pop_failures(self, execution_id: str, run: tuple[str, int]) -> list[_Try] | None:
        """The failed attempts of one node run, forgotten (it has its outcome)."""
        runs = self._failures.get(execution_id)
        if runs is None:
            return None
        failures = runs.pop(run, None)
        if not runs:
            del self._failures[execution_id]
        return failures

    def __call__(self, event: Event) -> None:
        """Take one event; print what it says, if anything."""
        with self._lock:
            text = self._handle(event)
            if text is not None:
                text = printable(text)
                lines = self.lines
                lines.append(text)
                if len(lines) > self._max_lines:
                    del lines[: len(lines) - self._max_lines]
        if text is not None:
            self._write(text)

    def _handle(self, event: Event) -> str | None:
        eid = event.execution_id
        kind = event.type
        short = short_id(eid)
        if eid not in self._seen:  # started here or resumed here (deliver, redrive, a worker)
            self._executions += 1
        self._keep(self._seen, eid, None)
        if kind is EventType.EXECUTION_STARTED:
            self._set_running(eid, "running")
            return f"▶ {event.workflow_id} started ({short})"
        run = (event.node_key or "", event.run_index or 0)
        if kind is EventType.NODE_STARTED:
            self._set_running(eid, f"running {event.node_key} (attempt {event.attempt})")
            return None
        if kind is EventType.NODE_RETRY_SCHEDULED:
            self._retries += 1
            if eid not in self._retried:
                self._with_retries += 1
            self._keep(self._retried, eid, None)
            runs = self._failures.get(eid, {})
            runs.setdefault(run, []).append(
                _Try(
                    attempt=(event.attempt or 2) - 1,
                    error=format_error(event.error),
                    delay_ms=event.delay_ms,
                )
            )
            self._keep(self._failures, eid, runs)
            self._set_running(eid, f"waiting to retry {event.node_key}")
            return format_retry(event)
        if kind is EventType.NODE_COMPLETED:
            failures = self._pop_failures(eid, run)
            if failures:
                self._succeeded += 1
                return format_retry_succeeded(event.node_key or "?", event.attempt or 0, failures)
            return None
        if kind is EventType.NODE_RETRY_EXHAUSTED:
            failures = self._pop_failures(eid, run) or []
            self._failed += 1
            return format_retry_failed(
                event.node_key or "?", event.attempt or 0, failures, format_error(event.error)
            )
        if kind is EventType.NODE_FAILED:
            self._pop_failures(eid, run)
            return None
        if kind is EventType.EXECUTION_SUSPENDED:
            if event.kind != "retry":
                self._set_running(eid, f"waiting on {event.kind} at {event.node_key}")
                return f"{PAUSE} {short} waiting on {event.kind} at {event.node_key}"
            return None
        if kind is EventType.EXECUTION_COMPLETED:
            self._ended(eid)
            return f"{OK} {event.workflow_id} completed ({short})"
        if kind is EventType.EXECUTION_FAILED:
            self._ended(eid)
            where = f" at {event.node_key}" if event.node_key else ""
            return (
                f"{FAIL} {event.workflow_id} failed{where}: {format_error(event.error)} ({short})"
            )
        if kind is EventType.EXECUTION_CANCELLED:
            self._ended(eid)
            return f"{FAIL} {short} cancelled"
        if kind is EventType.EXECUTION_RECOVERED:
            self._set_running(eid, f"recovered at {event.node_key}")
            return (
                f"{RETRY} {event.workflow_id}: attempt {event.attempt} of {event.node_key} was "
                f"interrupted (its process stopped); running it again ({short})"
            )
        if kind is EventType.EXECUTION_REDRIVEN:
            self._set_running(eid, f"redriven at {event.node_key}")
            return (
                f"{RETRY} {event.workflow_id} redriven from {event.node_key} "
                f"(attempt {event.attempt}) after {format_error(event.error)} ({short})"
            )
        return None

    def stats(self) -> RetryStats:
        """The retry statistics so far."""
        with self._lock:
            return RetryStats(
                executions=self._executions,
                executions_with_retries=self._with_retries,
                succeeded_after_retry=self._succeeded,
                failed_after_retries=self._failed,
                retry_attempts=self._retries,
            )

    def status_lines(self) -> list[str]:
        """One line per execution still running or waiting, for a live view."""
        with self._lock:
            return [f"{short_id(eid)}  {state}" for eid, state in sorted(self.running.items())]

    def summary(self) -> str:
        """The retry summary as text."""
        return format_stats(self.stats())

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        """Keep ``status_lines`` on screen, refreshed, while the block runs.

        Only on a terminal and with rich's default writer; otherwise it does nothing, so
        piped output stays plain lines.
        """
        console = self._console
        if console is None or not console.is_terminal:
            yield
            return
        from rich.live import Live
        from rich.text import Text

        def render() -> Text:
            return Text("\n".join(self.status_lines()), style="dim")

        with Live(get_renderable=render, console=console, refresh_per_second=8, transient=True):
            yield


def _rich_console() -> Any:
    """A rich ``Console`` for the view, or ``None`` when rich is not installed."""
    try:
        from rich.console import Console
    except ImportError:  # pragma: no cover - rich is an optional extra
        return None
    return Console(highlight=False, soft_wrap=True)


def _writer(console: Any) -> Callable[[str], object]:
    if console is None:  # pragma: no cover - rich is an optional extra
        return print
    styles = {RETRY: "yellow", OK: "green", FAIL: "red", PAUSE: "cyan"}

    def write(text: str) -> None:
        console.print(text, markup=False, style=styles.get(text[:1]))

    return write


# -- the timeline of `prana show` ---------------------------------------------------------


def _ts(when: datetime | None, origin: datetime | None) -> str:
    if when is None:
        return "-"
    if origin is None:
        return when.isoformat()
    return "+" + format_duration((when - origin).total_seconds())


def node_lateness(run: NodeExecution) -> list[tuple[int, timedelta]]:
    """How late each resume of ``run`` started: ``(attempt, started_at - due_at)``.

    Retry attempts carry their due time; a ``wait.wait`` interval or schedule is due at
    its start plus the duration (or at ``schedule_at``), and resumed when it completed. A
    redriven attempt has none: its due time is only when the operator redrove it.
    """
    late = [
        (attempt.number, attempt.started_at - attempt.due_at)
        for attempt in run.attempts
        if attempt.due_at is not None and not attempt.redrive
    ]
    due = _timer_due(run)
    if due is not None and run.completed_at is not None:
        late.append((run.attempts[-1].number if run.attempts else 1, run.completed_at - due))
    return late


def _timer_due(run: NodeExecution) -> datetime | None:
    params: Any = run.params
    if not isinstance(params, dict) or run.status.value != "completed":
        return None
    mode = params.get("mode")
    if mode == "interval":
        duration = params.get("duration")
        factor = WAIT_UNITS.get(str(params.get("unit", "seconds")))
        if isinstance(duration, int | float) and not isinstance(duration, bool) and factor:
            return run.started_at + timedelta(seconds=duration * factor)
    if mode == "schedule" and isinstance(params.get("schedule_at"), str):
        try:
            when = datetime.fromisoformat(params["schedule_at"])
        except ValueError:
            return None
        return when if when.utcoffset() is not None else None
    return None


def claimed_resume(execution: WorkflowExecution) -> dict[str, Any] | None:
    """A light claim's resume in flight: ``{kind, node_key, attempt, claimed_at}``, else None.

    A light claim (``running`` with its suspension kept) stores no attempt before the action
    ends, so the views say which one runs instead of showing the node still suspended;
    ``attempt`` is the retry's next number (None for a timer).
    """
    suspension = execution.suspension
    node = execution.suspended_node
    if execution.status is not ExecutionStatus.RUNNING or suspension is None or node is None:
        return None
    runs = execution.node_executions.get(node, ())
    attempts = runs[-1].attempts if runs else ()
    retrying = suspension.kind == "retry" and bool(attempts)
    return {
        "kind": suspension.kind,
        "node_key": node,
        "attempt": attempts[-1].number + 1 if retrying else None,
        "claimed_at": execution.updated_at.isoformat() if execution.updated_at else None,
    }


def _running_lines(execution: WorkflowExecution, now: datetime | None) -> list[str]:
    """What a ``running`` execution is doing: a light claim's resume in flight, its lease
    (said ended once ``now`` has passed it: no process renewed it)."""
    lines = []
    resume = claimed_resume(execution)
    if resume is not None:
        number = f" (attempt {resume['attempt']})" if resume["attempt"] else ""
        lines.append(
            f"  resuming  {resume['kind']} at {resume['node_key']}{number}, "
            f"claimed {resume['claimed_at'] or '-'}"
        )
        lines.append("            (the node shows it once the attempt ends)")
    lease = execution.lease_expires_at
    if lease is not None and now is not None and lease <= now:
        lines.append(
            f"  lease     ended {lease.isoformat()}: no process renewed it (one died or "
            "stalled); the next worker pass recovers it"
        )
    elif lease is not None:
        lines.append(f"  lease     until {lease.isoformat()}")
    return lines


def format_timeline(execution: WorkflowExecution, now: datetime | None = None) -> str:
    """Every node run and attempt of ``execution``: times, errors, delays and lateness.

    ``now`` (the reader's time) lets a ``running`` execution's lease be said ended.
    """
    origin = execution.started_at
    lines = [
        f"execution {execution.id}",
        f"  workflow  {execution.workflow_id} v{execution.workflow_version}",
        f"  status    {execution.status.value}",
        f"  started   {execution.started_at.isoformat() if execution.started_at else '-'}",
    ]
    if execution.completed_at is not None:
        lines.append(f"  ended     {execution.completed_at.isoformat()}")
    if execution.status is ExecutionStatus.SUSPENDED and execution.suspension is not None:
        due = execution.due_at
        at = f", due {due.isoformat()}" if due is not None else ""
        lines.append(f"  waiting   {execution.suspension.kind} at {execution.suspended_node}{at}")
    if execution.status is ExecutionStatus.RUNNING:
        lines.extend(_running_lines(execution, now))
    if execution.error is not None:
        lines.append(f"  error     {format_error(execution.error)}")
    if execution.parent is not None:
        lines.append(
            f"  parent    {execution.parent.execution_id} ({execution.parent.node_key}, "
            f"{execution.parent.mode})"
        )
    lines.append("")
    for run in execution.ordered_node_executions():
        port = f" -> {run.output_port}" if run.output_port else ""
        lines.append(
            f"  [{run.execution_index}] {run.node_key} run {run.run_index}: {run.status.value}"
            f"{port}  {_ts(run.started_at, origin)} .. {_ts(run.completed_at, origin)}"
        )
        lateness = dict(node_lateness(run))
        for attempt in run.attempts:
            text = f"      attempt {attempt.number}: {attempt.outcome.value}"
            if attempt.redrive:
                text += " (redrive)"
            text += f"  {_ts(attempt.started_at, origin)} .. {_ts(attempt.ended_at, origin)}"
            if attempt.redrive:  # not scheduled: its due time is when the operator redrove it
                text += f"  redriven {_ts(attempt.due_at, origin)}" if attempt.due_at else ""
            elif attempt.due_at is not None:
                text += f"  due {_ts(attempt.due_at, origin)}"
            if (
                attempt.number in lateness
                and not attempt.redrive
                and attempt.outcome is not AttemptOutcome.RUNNING
            ):
                text += f"  late {format_duration(lateness[attempt.number].total_seconds())}"
            if attempt.error is not None:
                text += f"  {format_error(attempt.error)}"
            if attempt.retry_delay_ms is not None:
                text += f"  (retry in {format_duration(attempt.retry_delay_ms / 1000)})"
            lines.append(text)
        if run.error is not None and not run.attempts:
            lines.append(f"      error: {format_error(run.error)}")
    for run in execution.ordered_node_executions():  # each run's last traceback
        failed = [a for a in run.attempts if a.error is not None and a.error.traceback]
        error = failed[-1].error if failed else run.error
        if error is not None and error.traceback:
            where = f" of attempt {failed[-1].number}" if failed else ""
            lines.append("")
            lines.append(f"  traceback of {run.node_key} run {run.run_index}{where}:")
            lines.extend(f"    {line}" for line in error.traceback.splitlines())
    return "\n".join(printable(line).replace("\n", "\\n") for line in lines)
