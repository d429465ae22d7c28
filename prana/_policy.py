"""The retry policy: when a failed attempt retries, and how long it waits first.

The executor talks to this module through three functions only (the seam):

- ``coerce_policies(value)`` turns what users write (a policy, a list, bracket text) into
  a tuple of policies;
- ``decide_retry(policies, view, seed=...)`` answers "retry, after how long?" or ``None``;
- ``rejects_result(policies, view)`` says whether a successful output counts as a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from prana._durations import optional_seconds, to_seconds
from prana._errors import InvalidSettingsError, NonRetryable, RetryAfter
from prana._model import ErrorInfo

Backoff = Literal["constant", "linear", "exponential", "fibonacci"]
BACKOFFS: tuple[str, ...] = ("constant", "linear", "exponential", "fibonacci")

PROGRAMMING_ERRORS: tuple[str, ...] = (
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "AttributeError",
    "NameError",
    "NotImplementedError",
    "AssertionError",
)
HINT_CEILING_SECONDS = 86_400.0
"""No server hint (``RetryAfter``) may delay a retry by more than a day."""


def _seconds(field: str) -> Callable[[Any], float]:
    return lambda value: to_seconds(value, field=f"RetryPolicy.{field}")


def _opt_seconds(field: str) -> Callable[[Any], float | None]:
    return lambda value: optional_seconds(value, field=f"RetryPolicy.{field}")


def _type_names(value: Any) -> tuple[str | type[BaseException], ...] | None:
    if value is None:
        return None
    if isinstance(value, str | type):
        value = (value,)
    out: list[str | type[BaseException]] = []
    for item in value:
        if isinstance(item, str) and item:
            out.append(item)
        elif isinstance(item, type) and issubclass(item, BaseException):
            out.append(item)
        else:
            raise InvalidSettingsError(
                f"RetryPolicy.retry_on/exclude: {item!r} is neither an exception class nor a "
                "type name; use e.g. ConnectionError or 'ConnectionError'"
            )
    return tuple(out)


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """When to retry a failed attempt and how long to wait first (see DESIGN §5)."""

    max_attempts: int | None = 3
    backoff: Backoff = "exponential"
    initial_delay: float = attrs.field(default=1.0, converter=_seconds("initial_delay"))
    multiplier: float = 2.0
    max_delay: float = attrs.field(default=60.0, converter=_seconds("max_delay"))
    retry_on: tuple[str | type[BaseException], ...] | None = attrs.field(
        default=None, converter=_type_names
    )
    exclude: tuple[str | type[BaseException], ...] | None = attrs.field(
        default=None, converter=_type_names
    )
    timeout: float | None = attrs.field(default=None, converter=_opt_seconds("timeout"))
    retry_timeout: float | None = attrs.field(
        default=None, converter=_opt_seconds("retry_timeout")
    )
    hint_exceeds_max_delay: bool = False
    enabled: bool = True

    def __attrs_post_init__(self) -> None:
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise InvalidSettingsError(
                f"RetryPolicy.max_attempts={self.max_attempts!r}: use a whole number >= 1 "
                "(the first try included)"
            )
        if self.backoff not in BACKOFFS:
            raise InvalidSettingsError(
                f"RetryPolicy.backoff={self.backoff!r}: use one of {', '.join(BACKOFFS)}"
            )
        if self.max_delay < self.initial_delay:
            raise InvalidSettingsError(
                f"RetryPolicy.max_delay={self.max_delay:g}s is below initial_delay="
                f"{self.initial_delay:g}s: raise max_delay or lower initial_delay"
            )

    def delay_for(self, retry: int) -> float:
        """The delay in seconds before retry ``retry`` (1 = the first retry), capped."""
        base = self.initial_delay
        if self.backoff == "exponential":
            base = self.initial_delay * self.multiplier ** (retry - 1)
        return min(base, self.max_delay)

    def matches(self, error: BaseException | None, info: ErrorInfo) -> bool:
        """Whether this policy's error filter covers the error."""
        names = _mro_names(error, info)
        if self.exclude is not None and _any_match(self.exclude, error, names):
            return False
        if self.retry_on is not None:
            return _any_match(self.retry_on, error, names)
        return not any(n in PROGRAMMING_ERRORS for n in names[:1])


def _mro_names(error: BaseException | None, info: ErrorInfo) -> list[str]:
    if error is None:
        return [info.type]
    return [cls.__name__ for cls in type(error).__mro__]


def _any_match(
    filters: Sequence[str | type[BaseException]], error: BaseException | None, names: list[str]
) -> bool:
    for f in filters:
        if isinstance(f, str):
            if f in names or any(f == f"{c.__module__}.{c.__name__}" for c in _mro(error)):
                return True
        elif error is not None and isinstance(error, f):
            return True
    return False


def _mro(error: BaseException | None) -> tuple[type, ...]:
    return type(error).__mro__ if error is not None else ()


@attrs.frozen(kw_only=True)
class AttemptView:
    """What retry conditions see of one attempt."""

    attempt: int
    error: ErrorInfo | None
    exception: BaseException | None = attrs.field(default=None, eq=False)
    output: Any = None
    elapsed_seconds: float = 0.0


@attrs.frozen(kw_only=True)
class RetryDecision:
    """Retry after ``delay_seconds``; ``max_attempts`` is the matched policy's."""

    delay_seconds: float
    max_attempts: int | None
    policy: RetryPolicy


def coerce_policies(value: Any, *, field: str) -> tuple[RetryPolicy, ...] | None:
    """Turn a policy, a list of policies or ``None`` into a tuple (or ``None``)."""
    if value is None:
        return None
    if isinstance(value, RetryPolicy):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(p, RetryPolicy) for p in value):
        if not value:
            raise InvalidSettingsError(f"{field}: an empty list; give at least one RetryPolicy")
        return tuple(value)
    raise InvalidSettingsError(
        f"{field}: expected a RetryPolicy, a list of them, or bracket text, got {value!r}"
    )


def simple_policy(max_retries: int, retry_delay_ms: int) -> RetryPolicy:
    """Prana's simple form: ``max_retries`` retries, a constant delay, every error retried."""
    delay = retry_delay_ms / 1000
    return RetryPolicy(
        max_attempts=max_retries + 1,
        backoff="constant",
        initial_delay=delay,
        max_delay=max(delay, 60.0),
        retry_on=("BaseException",),
    )


def decide_retry(
    policies: Sequence[RetryPolicy], view: AttemptView, *, seed: str
) -> RetryDecision | None:
    """Whether the failed attempt ``view`` retries, and after how long; ``None``: no retry."""
    del seed  # jitter arrives with the full policy
    error = view.exception
    if isinstance(error, NonRetryable):
        return None
    assert view.error is not None
    policy = next((p for p in policies if p.matches(error, view.error)), None)
    if policy is None or not policy.enabled:
        return None
    if policy.max_attempts is not None and view.attempt >= policy.max_attempts:
        return None
    delay = policy.delay_for(view.attempt)
    if isinstance(error, RetryAfter):
        delay = error.delay_seconds
        if not policy.hint_exceeds_max_delay:
            delay = min(delay, policy.max_delay)
        delay = min(delay, HINT_CEILING_SECONDS)
    if policy.retry_timeout is not None and view.elapsed_seconds + delay > policy.retry_timeout:
        return None
    return RetryDecision(delay_seconds=delay, max_attempts=policy.max_attempts, policy=policy)


def rejects_result(policies: Sequence[RetryPolicy], view: AttemptView) -> bool:
    """Whether a successful output counts as a failed attempt (``retry_on_result``)."""
    del policies, view
    return False


def attempt_timeout(policies: Sequence[RetryPolicy]) -> float | None:
    """The per-attempt timeout of a node run: the first policy's that sets one."""
    return next((p.timeout for p in policies if p.timeout is not None), None)
