"""The retry decision: whether a failed attempt retries, and after how long.

The engine asks through ``explain_retry`` (or ``decide_retry``) after every failed attempt
and through ``rejects_result`` after every successful one. Everything here is pure: no
clock (the attempt's elapsed time comes in the ``AttemptView``), no sleeping, and jitter is
seeded with text (see ``RetryPolicy.delay_for``).
"""

from __future__ import annotations

import difflib
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from prana._config import testing_state
from prana._dialects import BUILTIN_CONDITIONS, NOETL_NAMES, NOETL_SCOPE, noetl_names
from prana._durations import to_seconds
from prana._errors import DurationError, InvalidSettingsError, NonRetryable, RetryAfter
from prana._model import NEVER_RETRY_CODES, ErrorCode, ErrorInfo, _fast_constructor
from prana._policy import (
    HINT_CEILING_SECONDS,
    RESULT_REJECTED,
    RetryPolicy,
    error_class,
    is_template,
)
from prana._resolve import resolve_level

if TYPE_CHECKING:
    from prana._model import Node, Workflow
    from prana._registry import Registry

_retry_log = logging.getLogger("prana.retry")
"""Retry conditions that failed when they ran (WARNING; see also ``prana._engine``)."""

# --- what a condition may name -----------------------------------------------------------

CONDITION_SCOPE: Mapping[str, str] = {
    "$error": "the failed attempt's error: type, module, message, details, code",
    "$output": "the attempt's output (a rejected result), else None",
    "$attempt": "the number of the attempt that just ended, 1-based",
    "$elapsed": "seconds since the node run's first attempt started",
    **NOETL_SCOPE,
}
"""Every name a retry condition template may use, in one table: the ``$`` roots are prana's,
the bare names NoETL's retry context variables (``prana.dialects.NOETL_SCOPE``), so a
condition pasted from a NoETL playbook reads as it does there."""

CONDITION_ROOTS: tuple[str, ...] = tuple(k[1:] for k in CONDITION_SCOPE if k.startswith("$"))
"""The ``$`` roots of a condition's scope (without their ``$``)."""


CONDITION_FIELDS: tuple[str, ...] = ("retry_when", "stop_when", "retry_on_result")
"""The policy fields that hold a condition."""


def check_conditions(
    node: Node,
    workflow: Workflow,
    spec_retry: tuple[RetryPolicy, ...] | None,
    registry: Registry | None,
) -> tuple[tuple[RetryPolicy, ...], list[str]]:
    """The policies ``node`` uses with condition names resolved, and every problem found.

    A template is compiled against ``CONDITION_SCOPE``; a name is looked up among the
    conditions registered on ``registry``, then the built-in ones
    (``prana.dialects.BUILTIN_CONDITIONS``; an unknown name is skipped without a registry,
    as ``lint`` may be). Each
    problem reads ``"<where>.<field>: <why>"``, ``<where>`` being where the policy was set
    (``settings.retry[1]``, ``retry_defaults['http.request']``...). Validation runs this,
    so a condition that could never hold, or that names code nobody registered, is an
    error before anything runs; nothing is imported to resolve a name (definitions are data).
    """
    level, policies = resolve_level(node, workflow, spec_retry)
    found = [
        (index, field, value)
        for index, policy in enumerate(policies)
        for field in CONDITION_FIELDS
        if isinstance(value := getattr(policy, field), str)
    ]
    if not found:
        return policies, []
    where = {
        "node": "settings.retry",
        "simple": "settings",
        "workflow_type": f"retry_defaults[{node.type!r}]",
        "workflow_star": "retry_defaults['*']",
        "action": f"the retry registered for {node.type!r}",
    }.get(level, level)
    problems: list[str] = []
    resolved: dict[int, dict[str, Any]] = {}
    for index, field, text in found:
        place = f"{where}[{index}]" if len(policies) > 1 else where
        if is_template(text):
            from prana._templates import TemplateError, check_condition

            try:
                check_condition(
                    text, roots=CONDITION_ROOTS, bare=NOETL_NAMES, path=f"{place}.{field}"
                )
            except TemplateError as exc:
                problems.append(str(exc))
            continue
        fn = registry.get_condition(text) if registry is not None else None
        if fn is None:
            fn = BUILTIN_CONDITIONS.get(text)
        if fn is not None:
            resolved.setdefault(index, {})[field] = fn
        elif registry is not None:
            problems.append(f"{place}.{field}: {_unknown_condition(text, registry)}")
    if resolved and not problems:
        policies = tuple(
            attrs.evolve(policy, **resolved[i]) if i in resolved else policy
            for i, policy in enumerate(policies)
        )
    return policies, problems


def _unknown_condition(name: str, registry: Registry) -> str:
    names = registry.conditions()
    known = (
        f"registered conditions: {', '.join(names)}" if names else "no conditions are registered"
    )
    close = difflib.get_close_matches(name, names, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    old = (
        " (it reads like an old 'module:qualname' reference: prana no longer imports code "
        "named in data)"
        if ":" in name
        else ""
    )
    return (
        f"unknown condition {name!r}{old}{guess}; {known}. Register the callable with "
        f"registry.condition({name!r}, fn) or use a {{{{ }}}} template"
    )


# --- the executor's view of an attempt ----------------------------------------------------


@attrs.frozen(kw_only=True, weakref_slot=False)
class AttemptView:
    """What retry conditions see of one attempt.

    ``attempt`` is the attempt that just ended (1-based); ``elapsed_seconds`` the time from
    the start of the node run's first attempt until now; ``exception`` the live exception
    when there is one (``None`` after a reload or for a rejected result);
    ``retry_after_seconds`` carries a ``RetryAfter`` hint when the exception is not live;
    ``execution_id`` and ``node_key`` say whose attempt it was; ``timeout_seconds`` is the
    per-attempt timeout the next attempt would run under (``retry_timeout`` counts it);
    ``now`` is the injected clock's time, which turns a ``RetryAfter`` date into a delay;
    ``timeouts`` counts the node run's timed-out attempts, this one included (the engine
    counts them for a policy with ``timeout_retries`` only).
    """

    attempt: int
    error: ErrorInfo | None
    exception: BaseException | None = attrs.field(default=None, eq=False)
    output: Any = None
    elapsed_seconds: float = 0.0
    retry_after_seconds: float | None = None
    execution_id: str | None = None
    node_key: str | None = None
    timeout_seconds: float | None = None
    now: datetime | None = None
    timeouts: int = 0

    def names(self) -> dict[str, Any]:
        """NoETL's names for the attempt (``prana.dialects.noetl_names``), without ``$``."""
        return noetl_names(self)

    def scope(self) -> dict[str, Any]:
        """The ``$`` roots templates see: ``$error``, ``$output``, ``$attempt``, ``$elapsed``."""
        error = None
        if self.error is not None:
            error = {
                "type": self.error.type,
                "module": self.error.module,
                "message": self.error.message,
                "details": self.error.details,
                "code": self.error.code,
            }
        return {
            "error": error,
            "output": self.output,
            "attempt": self.attempt,
            "elapsed": self.elapsed_seconds,
        }


class RetryReason(enum.Enum):
    """Why a failed attempt retries or not: what control flow reads, never the text."""

    RETRY = "retry"
    """It retries (``RetryExplanation.decision`` says when)."""
    NOTHING_FAILED = "nothing_failed"
    """The view holds no error: there is nothing to retry."""
    NON_RETRYABLE = "non_retryable"
    """The action raised ``NonRetryable``: it wins over every policy."""
    NEVER_RETRIES = "never_retries"
    """The error's code is one that never retries (``prana._model.NEVER_RETRY_CODES``)."""
    NOT_MATCHED = "not_matched"
    """No policy's error filter covers the error."""
    DISABLED = "disabled"
    """The matched policy has ``enabled=False``."""
    EXHAUSTED = "exhausted"
    """The attempt was the last one ``max_attempts`` (or ``set_testing``) allows."""
    STOP_WHEN = "stop_when"
    """``stop_when`` said stop."""
    STOP_WHEN_FAILED = "stop_when_failed"
    """``stop_when`` raised, which counts as stop."""
    RETRY_WHEN_FALSE = "retry_when_false"
    """``retry_when`` said no."""
    RETRY_WHEN_FAILED = "retry_when_failed"
    """``retry_when`` raised, which counts as no."""
    BUDGET = "budget"
    """The next delay would end past ``retry_timeout``."""


_RETRY = RetryReason.RETRY
_NON_RETRYABLE: str = ErrorCode.NON_RETRYABLE.value  # a member read off its class is slow

RAN_OUT: frozenset[RetryReason] = frozenset({RetryReason.EXHAUSTED, RetryReason.BUDGET})
"""The reasons that mean the retries ran out (the ``node_retry_exhausted`` event)."""

CONDITION_FAILED: frozenset[RetryReason] = frozenset(
    {RetryReason.STOP_WHEN_FAILED, RetryReason.RETRY_WHEN_FAILED}
)
"""The reasons that mean a condition raised instead of answering: the engine records the
text in the attempt's error (``details["retry_condition_failed"]``) and logs it."""

CONDITION_ERROR_CHARS = 1_000
"""How much of a failed condition's error the record keeps."""


@attrs.frozen(kw_only=True, weakref_slot=False)
class RetryDecision:
    """Retry after ``delay_seconds``; ``max_attempts`` is the matched policy's (testing caps it).

    ``policy_index`` is the position of the matched policy in the node's list.
    """

    delay_seconds: float
    max_attempts: int | None
    policy: RetryPolicy
    policy_index: int = 0


def decide_retry(
    policies: Sequence[RetryPolicy], view: AttemptView, *, seed: str
) -> RetryDecision | None:
    """Whether the failed attempt ``view`` retries, and after how long; ``None``: no retry.

    ``seed`` is ``"{execution_id}:{node_key}:{run_index}"``; jitter adds the attempt.
    """
    return explain_retry(policies, view, seed=seed).decision


@attrs.frozen(weakref_slot=False)
class RetryExplanation:
    """What ``explain_retry`` answers: the decision (``None``: no retry), why, and in words.

    Code reads ``reason``; ``text`` is for people (timelines, logs) and may change.
    """

    decision: RetryDecision | None
    reason: RetryReason
    text: str
    max_attempts: int | None = None
    """The attempts the matched policy allows (testing caps it), when one matched."""


# Fast constructors (``prana._model``'s, positional, in field order) for what the engine
# builds at every failed attempt. Rule: these classes keep the hot-record rules (no
# validator, converter, post-init hook or weakref slot; ``FAST_BUILT``, checked by a test).
new_attempt_view: Callable[..., AttemptView] = _fast_constructor(AttemptView)
"""``new_attempt_view(attempt, error, exception, output, elapsed_seconds,
retry_after_seconds, execution_id, node_key, timeout_seconds, now, timeouts)``."""
_new_decision: Callable[..., RetryDecision] = _fast_constructor(RetryDecision)
_new_explanation: Callable[..., RetryExplanation] = _fast_constructor(RetryExplanation)
FAST_BUILT: dict[type[Any], Callable[..., Any]] = {
    AttemptView: new_attempt_view,
    RetryDecision: _new_decision,
    RetryExplanation: _new_explanation,
}
"""The classes above built by fast constructors (see the rule)."""


def _no(reason: RetryReason, text: str, limit: int | None = None) -> RetryExplanation:
    return _new_explanation(None, reason, text, limit)


def _failed(field: str, exc: Exception) -> str:
    text = f"{field} failed: {exc}"
    if len(text) > CONDITION_ERROR_CHARS:
        text = text[: CONDITION_ERROR_CHARS - 1] + "…"
    return text


def explain_retry(
    policies: Sequence[RetryPolicy], view: AttemptView, *, seed: str
) -> RetryExplanation:
    """``decide_retry`` plus why (a ``RetryReason``) and a short text, for timelines and logs."""
    info = view.error
    exc = view.exception
    if exc is None and info is None:
        return _no(RetryReason.NOTHING_FAILED, "nothing failed")
    if isinstance(exc, NonRetryable) or (
        info is not None and (info.code == _NON_RETRYABLE or info.type == "NonRetryable")
    ):
        return _no(RetryReason.NON_RETRYABLE, "NonRetryable")
    if info is not None and info.code in NEVER_RETRY_CODES:
        return _no(RetryReason.NEVER_RETRIES, f"{info.code} never retries")
    selected = _select(policies, view)
    if selected is None:
        return _no(RetryReason.NOT_MATCHED, "no policy matches the error")
    index, policy = selected
    if not policy.enabled:
        return _no(RetryReason.DISABLED, "retry disabled")
    testing, testing_attempts = testing_state()
    limit = policy.max_attempts
    counted: int | None = view.attempt
    if policy.timeout_retries is not None:
        # Rappel's timeout_retry_limit: timed-out attempts retry on a budget of their own
        if info is not None and info.code == ErrorCode.TIMEOUT:
            if view.timeouts > policy.timeout_retries:
                text = f"timeout retries exhausted ({policy.timeout_retries})"
                return _no(RetryReason.EXHAUSTED, text, limit)
            counted = None
        else:
            counted = view.attempt - view.timeouts
    if testing and testing_attempts is not None:
        limit = testing_attempts if limit is None else min(limit, testing_attempts)
        counted = view.attempt  # set_testing caps every attempt, timed out or not
    if limit is not None and counted is not None and counted >= limit:
        return _no(RetryReason.EXHAUSTED, f"attempts exhausted ({counted} of {limit})", limit)

    chosen: float | None = None
    if policy.stop_when is not None:
        try:
            verdict = _verdict(_evaluate(policy.stop_when, view, view))
        except Exception as exc_:  # noqa: BLE001 - a broken condition must not crash a run
            return _no(RetryReason.STOP_WHEN_FAILED, _failed("stop_when", exc_))
        if verdict is not False:
            return _no(RetryReason.STOP_WHEN, "stop_when")
    if policy.retry_when is not None:
        try:
            verdict = _verdict(_evaluate(policy.retry_when, view, view))
        except Exception as exc_:  # noqa: BLE001 - a broken condition must not crash a run
            return _no(RetryReason.RETRY_WHEN_FAILED, _failed("retry_when", exc_))
        if verdict is False:
            return _no(RetryReason.RETRY_WHEN_FALSE, "retry_when is false")
        if verdict is not True:
            chosen = min(verdict, policy.max_delay, HINT_CEILING_SECONDS)

    hint = exc.hint_seconds(view.now) if isinstance(exc, RetryAfter) else view.retry_after_seconds
    if chosen is not None:
        delay = chosen
    elif hint is not None:
        delay = hint if policy.hint_exceeds_max_delay else min(hint, policy.max_delay)
        delay = min(delay, HINT_CEILING_SECONDS)
    else:
        delay = policy._delay(view.attempt, seed)
    if testing:
        delay = 0.0
    # An attempt is not started unless its timeout, too, fits what is left of the budget
    # (rh_agents: "Fourth attempt won't start (would exceed 30s total)").
    runs_for = view.timeout_seconds or 0.0
    if (
        policy.retry_timeout is not None
        and view.elapsed_seconds + delay + runs_for > policy.retry_timeout
    ):
        timed = f" + {runs_for:g}s attempt timeout" if runs_for else ""
        return _no(
            RetryReason.BUDGET,
            f"retry_timeout: {view.elapsed_seconds:g}s elapsed + {delay:g}s delay{timed} > "
            f"{policy.retry_timeout:g}s",
            limit,
        )
    return _new_explanation(_new_decision(delay, limit, policy, index), _RETRY, "retry", limit)


def _is_rejected(view: AttemptView) -> bool:
    return (
        view.exception is None
        and view.error is not None
        and (view.error.code == ErrorCode.RESULT_REJECTED or view.error.type == RESULT_REJECTED)
    )


_SELECTED: dict[tuple[int, type[BaseException]], tuple[Sequence[RetryPolicy], Any]] = {}
"""``_select``'s answer for a live exception, by the policies' id and the exception's class:
a filter reads a live exception's class alone (``RetryPolicy._matches``), so the answer is
the same for every exception of that class (the policies are kept to check the id)."""


def _select(policies: Sequence[RetryPolicy], view: AttemptView) -> tuple[int, RetryPolicy] | None:
    """The first policy whose error filter covers the view's error (or rejected result)."""
    info = view.error
    if view.exception is not None:  # a live exception: never a rejected result
        live = type(view.exception)
        cached = _SELECTED.get((id(policies), live))
        if cached is not None and cached[0] is policies:
            return cached[1]  # type: ignore[no-any-return]
        found = next(((i, p) for i, p in enumerate(policies) if p._matches(live, info)), None)
        if len(_SELECTED) > 1024:
            _SELECTED.clear()
        _SELECTED[id(policies), live] = (policies, found)
        return found
    if _is_rejected(view):
        for i, policy in enumerate(policies):
            if policy.retry_on_result is not None:
                return i, policy
    cls = error_class(info) if info is not None else None
    for i, policy in enumerate(policies):
        if policy._matches(cls, info):
            return i, policy
    return None


def rejects_result(policies: Sequence[RetryPolicy], view: AttemptView) -> bool:
    """Whether a successful output counts as a failed attempt (``retry_on_result``).

    The first enabled policy with a ``retry_on_result`` decides; a callable gets the
    output, a template sees ``$output``. A predicate that raises accepts the output.
    """
    policy = next((p for p in policies if p.enabled and p.retry_on_result is not None), None)
    if policy is None or policy.retry_on_result is None:
        return False
    predicate = policy.retry_on_result
    try:
        value = _evaluate(predicate, view.output, view)
        return _truthy(value)
    except Exception as exc:  # noqa: BLE001 - a broken predicate must not crash a run
        _retry_log.warning(
            "execution %s: node %r: %s (attempt %d); the output is accepted",
            *(view.execution_id, view.node_key, _failed("retry_on_result", exc), view.attempt),
            extra={
                "execution_id": view.execution_id,
                "node_key": view.node_key,
                "attempt": view.attempt,
            },
        )
        return False


def _evaluate(condition: Callable[..., Any] | str, arg: Any, view: AttemptView) -> Any:
    if callable(condition) and not isinstance(condition, str):
        return condition(arg)
    if not is_template(condition):
        raise InvalidSettingsError(
            f"condition {condition!r} is a name that was not resolved: run the workflow "
            "through execute_workflow (which validates it) with the registry that holds it"
        )
    from prana._templates import evaluate

    return evaluate(condition, view.scope(), names=view.names())


def _verdict(value: Any) -> bool | float:
    """Read a condition's answer: a bool, or a delay (seconds, timedelta or ``"30s"``)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float | timedelta):
        return to_seconds(value, field="condition result")
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "yes"):
            return True
        if lowered in ("false", "no", "", "none", "null"):
            return False
        try:
            return to_seconds(value, field="condition result")
        except DurationError:
            raise InvalidSettingsError(
                f"condition result {value!r}: return a bool, or a delay such as 30 or '30s'"
            ) from None
    return bool(value)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "", "none", "null", "0")
    return bool(value)
